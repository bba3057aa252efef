"""Babelfish for PostgreSQL: SQL Server's dialect where Babelfish refuses or misreads a statement.

Babelfish speaks TDS and runs T-SQL, and teams that leave SQL Server run it in production. The transport
chooses this variant once, on its first connection (``dialect_for_server`` asks
:meth:`SqlServerDialect.server_variant`); every statement not replaced here is SQL Server's own, and each
replacement is also valid T-SQL.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from typing import Any

from ..model.address import QueueAddress
from ..model.errors import InvalidQueueName, PermissionDenied, QueueNotFound, SqlQueueError
from .sqlserver import STATEMENTS as SQLSERVER_STATEMENTS
from .sqlserver import SqlServerDialect, native_errors
from .statements import StatementTable

_BABELFISH_MISSING_RELATION = re.compile(r'(relation|schema) "[^"]*" does not exist \(33557097\)')
_BABELFISH_PERMISSION_DENIED = re.compile(r"permission denied for \w+ [^(]*\(33557097\)")
_PARAMETER_MARKER = re.compile(r"\?")

# The statements Babelfish refuses or misreads, each replaced by a form that is also valid T-SQL (see
# BabelfishDialect); every other statement is SQL Server's own.
STATEMENTS: StatementTable = {
    **SQLSERVER_STATEMENTS,
    "receive_batch": (
        "DELETE FROM {table} OUTPUT deleted.[Id], deleted.[CorrelationId], deleted.[ReplyToAddress], "
        "GETUTCDATE() AS [Now], deleted.[Headers], deleted.[Body], deleted.[RowVersion], deleted.[Expires] "
        "WHERE [RowVersion] IN (SELECT TOP(?) [RowVersion] FROM {table} WITH (UPDLOCK, READPAST, ROWLOCK) "
        "ORDER BY [RowVersion])"
    ),
    # MERGE is refused ("'MERGE' is not currently supported in Babelfish"): an UPDATE of a changed queue,
    # then an INSERT unless the row exists, in one batch and transaction. SQL Server would hold the key
    # range from the UPDATE to the commit; Babelfish ignores the hints, so two first subscribers of one key
    # can both insert: the primary key refuses the second, whose subscribe then runs again
    # (SubscriptionStore) and finds the row.
    "subscribe": (
        "UPDATE {table} WITH (UPDLOCK, SERIALIZABLE) SET [QueueAddress] = ? "
        "WHERE [Endpoint] = ? AND [Topic] = ? AND [QueueAddress] <> ?; "
        "INSERT INTO {table} ([QueueAddress], [Topic], [Endpoint]) SELECT ?, ?, ? WHERE NOT EXISTS ("
        "SELECT 1 FROM {table} WITH (UPDLOCK, SERIALIZABLE) WHERE [Endpoint] = ? AND [Topic] = ?)"
    ),
    # OBJECT_ID answers from a cache that still holds a table another session dropped, until this session's
    # next transaction; the catalog views are read afresh by every statement.
    "table_exists": (
        "SELECT t.object_id FROM {catalog}sys.tables t JOIN {catalog}sys.schemas s "
        "ON s.schema_id = t.schema_id WHERE s.name = ? AND t.name = ?"
    ),
    # Index names are stored rewritten (lower case, the table name and a hash appended): found as a prefix.
    "index_exists": (
        "SELECT index_id FROM {catalog}sys.indexes WHERE object_id = OBJECT_ID(?) AND name LIKE ?"
    ),
}


class BabelfishDialect(SqlServerDialect):
    """SQL Server's dialect for Babelfish for PostgreSQL, which speaks TDS and runs T-SQL with differences.

    Chosen once per transport when the server reports itself (:meth:`SqlServerDialect.server_variant`). Only
    the statements Babelfish refuses or misreads are replaced, each by a form that is also valid T-SQL:

    - DML through a CTE is refused, so the receive deletes
      ``WHERE [RowVersion] IN (SELECT TOP(?) ... WITH (UPDLOCK, READPAST, ROWLOCK) ORDER BY ...)``. The
      delayed mover needs no variant: its ``SELECT TOP(?)`` and ``DELETE ... OUTPUT ... INTO`` run as
      they are.
    - ``OUTPUT`` takes no expression over ``deleted`` columns, so the receive returns the server's
      ``GETUTCDATE()`` beside ``Expires`` and the expired flag is computed from those two values: still
      the database's clock, as on SQL Server.
    - Index names are stored rewritten (lower case, with the table name and a hash appended), so an index
      is found by its name as a prefix.
    - Multi-row sends are cut at 25 rows (see ``send_batch_rows``): longer statements with NULL
      parameters lose work through Microsoft's ODBC driver.
    - Names with ``]`` or non-ASCII characters are refused (see :meth:`resolve`).
    - ``MERGE`` is refused, so a subscribe is an UPDATE then an INSERT where the row is missing (see
      the ``subscribe`` statement).
    - ``OBJECT_ID`` still finds a table another session dropped (until this session's next transaction),
      so a table's existence is read from ``sys.tables``.

    Babelfish accepts the table hints but does not honour them: a receiver does not skip a row another
    open transaction holds (``READPAST``); it waits for that transaction, then finds the row gone and
    deletes nothing in its place. No message reaches two receivers, but receivers wait for each other, and
    a receive can come back empty while messages are queued (``skips_held_rows``: a pump run until the
    queue is empty confirms an empty receive with a peek here).
    """

    name = "sqlserver"
    display_name = "SQL Server (Babelfish)"
    variant = "babelfish"
    statements = STATEMENTS
    storage_note = (
        "not applicable through Babelfish's TDS port: the table is a PostgreSQL table, whose autovacuum "
        "gives deleted rows' storage back with the server's settings; inspect it through PostgreSQL"
    )
    # Each refused sp_getapplock leaves an error entry behind in Babelfish 4.3's server process; the fifth
    # takes the whole server down (PANIC: ERRORDATA_STACK_SIZE exceeded). A session that was refused a
    # lock is therefore closed, which ends that process, instead of asking again.
    refused_lock_spoils_session = True
    skips_held_rows = False
    # Microsoft's ODBC driver describes NULL parameters with sp_describe_undeclared_parameters, which
    # Babelfish 4.3 cuts at 4,000 characters: the syntax error that follows ends the open transaction and
    # the driver carries on, so earlier statements of that transaction are silently undone. 25 rows keep
    # a send batch under 4,000 characters with the driver's @Pn names and the longest table names.
    send_batch_rows = 25
    # The longest text, with the driver's @Pn names, that sp_describe_undeclared_parameters keeps whole.
    described_statement_chars = 4000

    def server_variant(self, connection: Any) -> str | None:
        return None

    def check_names(self, resolved: QueueAddress, current_catalog: str | None) -> None:
        super().check_names(resolved, current_catalog)
        _refuse_names_babelfish_cannot_hold(resolved)

    def qualified_name(self, address: QueueAddress) -> str:
        # Also here: a queue opened before the transport's first connection was resolved as SQL Server's.
        _refuse_names_babelfish_cannot_hold(address)
        return super().qualified_name(address)

    def rows_per_statement(self, statement: Callable[[int], str], rows: int) -> int:
        """The most rows, up to ``rows``, whose statement Microsoft's ODBC driver describes whole: a longer
        one with a NULL parameter silently undoes its transaction's earlier work (see ``send_batch_rows``),
        e.g. a receive's DELETE whose rows then go on into staging and stay in the queue as well."""
        fitting, low, high = 1, 2, rows
        while low <= high:
            middle = (low + high) // 2
            if len(_as_described(statement(middle))) <= self.described_statement_chars:
                fitting, low = middle, middle + 1
            else:
                high = middle - 1
        return min(fitting, rows)

    def received_rows(self, rows: list[Any]) -> list[Any]:
        # The receive returns the server's clock beside Expires; the expired flag is computed from the two.
        return [(row[0], row[1], row[2], row[7] is not None and row[7] <= row[3], *row[4:]) for row in rows]

    def subscribe_params(self, endpoint: str, topic: str, queue_address: str) -> tuple[Any, ...]:
        return (
            queue_address,
            endpoint,
            topic,
            queue_address,
            queue_address,
            topic,
            endpoint,
            endpoint,
            topic,
        )

    def classify(self, error: BaseException, address: QueueAddress | None = None) -> SqlQueueError | None:
        """SQL Server's classification, plus Babelfish's own numbers where it has no SQL Server one."""
        translated = super().classify(error, address)
        if translated is not None:
            return translated
        text = " ".join(str(arg) for arg in getattr(error, "args", ()))
        where = f" (queue {address})" if address is not None else ""
        detail = str(error.args[1] if len(error.args) > 1 else error)
        if _BABELFISH_MISSING_RELATION.search(text):
            return QueueNotFound(f"{detail}{where}: create the queue first (provisioning needs DDL rights)")
        if _BABELFISH_PERMISSION_DENIED.search(text):
            return PermissionDenied(
                f"{detail}{where}. Runtime logins need SELECT, INSERT and DELETE on the queue tables; "
                "creating queues needs CREATE TABLE and ALTER on the schema"
            )
        return None

    def rollback(self, connection: Any) -> None:
        """Babelfish ends a transaction that a statement error aborted, and then refuses the driver's
        ROLLBACK (3903): the work is already undone, so that refusal is not an error."""
        try:
            connection.rollback()
        except Exception as error:
            if 3903 not in native_errors(error):
                raise

    def table_exists(self, address: QueueAddress) -> tuple[str, Sequence[Any]]:
        return self.sql("table_exists", catalog=self._catalog_prefix(address)), (
            address.schema,
            address.table,
        )

    def rowversion_index_is_clustered(self, cursor: Any, address: QueueAddress) -> bool | None:
        """Unknown: Babelfish's catalog reports every index, clustered or not, as non-clustered (type 2)."""
        return None

    def index_exists(self, address: QueueAddress, index_name: str) -> tuple[str, Sequence[Any]]:
        pattern = index_name.replace("[", "[[]").replace("_", "[_]").replace("%", "[%]") + "%"
        return self.sql("index_exists", catalog=self._catalog_prefix(address)), (
            self.qualified_name(address),
            pattern,
        )


def _as_described(statement: str) -> str:
    """``statement`` as Microsoft's ODBC driver sends it to be described: ``@P1``, ``@P2``... for ``?``."""
    numbers = itertools.count(1)
    return _PARAMETER_MARKER.sub(lambda _: f"@P{next(numbers)}", statement)


def _refuse_names_babelfish_cannot_hold(address: QueueAddress) -> None:
    """Babelfish 4.3's parser fails on ``]]`` inside a bracketed name, and it keeps non-ASCII names so that
    its catalog reads them back as ``?`` (two such queues could not be told apart): refuse both up front."""
    for kind, value in (("queue", address.table), ("schema", address.schema), ("catalog", address.catalog)):
        if value is None:
            continue
        if "]" in value:
            raise InvalidQueueName(
                f"{kind} name {value!r} contains ']', which Babelfish 4.3 cannot parse inside a bracketed "
                "name (SQL Server can); choose a name without it"
            )
        if not value.isascii():
            raise InvalidQueueName(
                f"{kind} name {value!r} is not ASCII; Babelfish 4.3 does not keep such names intact in its "
                "catalog (SQL Server does); choose an ASCII name"
            )
