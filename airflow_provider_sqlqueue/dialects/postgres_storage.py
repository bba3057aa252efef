"""PostgreSQL: what deleted rows leave in a queue table and how it comes back (statements and advice).

A receive deletes rows; their space stays taken until a vacuum removes them, and a vacuum that finds the
table's last pages empty gives them back to the file system. Queue tables are created with storage
parameters that let autovacuum do this by itself soon after a drain (``default_storage_parameters`` in
:mod:`.postgres`); these statements show a DBA where a table stands and run the plain ``VACUUM`` a
maintenance job may add.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..model.address import QueueAddress
from .base import Dialect, StorageParameters, TableStorage

# Dead rows above which, when they outnumber the live ones, inspect advises a VACUUM (the same number as
# the autovacuum threshold queue tables get).
DEAD_ROWS_WORTH_A_VACUUM = 1000
# Table pages (8 MiB of the default 8 KiB pages) from which mostly empty ones are worth a VACUUM.
EMPTY_PAGES_WORTH_A_VACUUM = 1024


def parse_reloptions(reloptions: str | None) -> StorageParameters:
    """``pg_class.reloptions`` (``name=value`` lines) as pairs."""
    lines = (reloptions or "").splitlines()
    return tuple((name, value) for name, _, value in (line.partition("=") for line in lines if line))


class PostgresStorage(Dialect):
    """The storage part of :class:`~.postgres.PostgresDialect`, which derives from it."""

    def set_storage_parameters(self, address: QueueAddress, parameters: StorageParameters) -> str:
        """``ALTER TABLE ... SET (...)``: gives an existing table the storage parameters (no rewrite; the
        autovacuum ones take only a brief SHARE UPDATE EXCLUSIVE lock)."""
        settings = ", ".join(f"{name} = {value}" for name, value in parameters)
        return self.sql("set_storage_parameters", address, settings=settings)

    def vacuum_check(self, address: QueueAddress) -> tuple[str, Sequence[Any]] | None:
        return self.sql("vacuum_check"), (address.schema, address.table)

    def table_storage(self, cursor: Any, address: QueueAddress) -> TableStorage:
        cursor.execute(self.sql("table_storage"), (address.schema, address.table))
        found = cursor.fetchall()
        if not found:
            return TableStorage(applicable=True, note=f"queue table {address} not found")
        oid, reloptions, table_bytes, index_bytes, may_read_statistics, heap_pages = found[0]
        parameters = parse_reloptions(reloptions)
        statistics: Sequence[Any] = (None, None, None, None)
        note = ""
        if may_read_statistics:
            cursor.execute(self.sql("table_statistics"), (oid,))
            rows = cursor.fetchall()
            if rows:
                statistics = rows[0]
            else:
                note = "no statistics for this table yet (pg_stat_user_tables has no row for it)"
        else:
            note = (
                "this role may not read pg_stat_user_tables: live and dead rows and the last vacuums are "
                "unknown (grant it SELECT on that view, or inspect with the provisioning role)"
            )
        live, dead, last_vacuum, last_autovacuum = statistics
        return TableStorage(
            applicable=True,
            note=note,
            storage_parameters=parameters,
            live_tuples=None if live is None else int(live),
            dead_tuples=None if dead is None else int(dead),
            last_vacuum=last_vacuum,
            last_autovacuum=last_autovacuum,
            table_bytes=int(table_bytes),
            index_bytes=int(index_bytes),
            advice=self._storage_advice(address, parameters, live, dead, int(heap_pages)),
        )

    def _storage_advice(
        self,
        address: QueueAddress,
        parameters: StorageParameters,
        live: int | None,
        dead: int | None,
        heap_pages: int,
    ) -> tuple[str, ...]:
        vacuum = self.display_sql(self.optional_sql("vacuum_table", address) or "")
        settings = dict(parameters)
        advice = []
        if settings.get("autovacuum_enabled", "").lower() in ("false", "off", "no", "0"):
            advice.append(
                "autovacuum is off for this table: deleted rows' storage comes back only by a VACUUM you "
                f"schedule (VacuumQueuesOperator, or: {vacuum})"
            )
        elif not any(name in settings for name, _ in self.default_storage_parameters):
            advice.append(
                "the table lacks the autovacuum settings queue tables are created with (it was made by an "
                "earlier version or by hand), so a drained table waits for autovacuum's defaults; give them "
                "to it: "
                + self.display_sql(self.set_storage_parameters(address, self.default_storage_parameters))
            )
        if dead is not None and dead > DEAD_ROWS_WORTH_A_VACUUM and dead > (live or 0):
            advice.append(
                f"{int(dead):,} dead rows against {int(live or 0):,} live: their storage comes back at the "
                f"next vacuum; to have it now, run: {vacuum}"
            )
        elif live is not None and heap_pages >= EMPTY_PAGES_WORTH_A_VACUUM and heap_pages > 4 * max(live, 1):
            # Even at one row a page, the live rows fill under a quarter of the pages: the rest hold no
            # live row, and no autovacuum will come for them, since no dead rows are counted (a vacuum that
            # could not take the table's lock for a moment kept them for reuse, or one that overlapped the
            # end of a drain dropped the rows deleted behind it from the count).
            advice.append(
                f"{heap_pages:,} table pages hold {int(live):,} live rows: the pages without live rows stay "
                f"until a vacuum gives them back, and autovacuum will not run for them; run: {vacuum}"
            )
        return tuple(advice)
