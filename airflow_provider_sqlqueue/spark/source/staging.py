"""The data source's staging: receives whose DELETE commits together with the INSERT into the bridge's staging
table (the drain's tables, ``spark/tables.py``), and reads of staged rows by position.

A batch read stages under its run id with the queue's RowVersions (as the drain does). A stream stages under
its stream id with positions of its own: consecutive numbers after the stream's last position, kept in the
stream's row of the runs table and advanced by a compare-and-set in the receive's transaction, so positions
only grow in commit order and two queries on one stream id cannot both stage (the loser rolls back: its
messages stay queued). The same row keeps the last position a query planned into a micro-batch, so that a
query on a new checkpoint can tell staged rows some query may already have written to its sink from rows no
query has read.

The row also names the query that owns the stream: a token each query's reader claims by a compare-and-set
when it starts (a query that starts on a stream id takes it over). Every receive compares the whole row, so
it fails once another query owns the stream; every read of staged rows on the executors checks the owner
under a shared lock on the row, in the transaction that reads; and a commit deletes only while it owns it.
So the query that lost the stream id reads nothing more, and fails naming it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from ...transport import ConfigurationError, Transport
from ..moves import move_batch, stage_rows
from ..tables import BridgeSql, bridge_tables, create_bridge_tables
from .options import SourceOptions
from .returned_rows import staged_batches
from .transactions import begin_write, rows_changed, table_exists

__all__ = [
    "StreamConflict",
    "StreamMark",
    "bridge_sql",
    "claim_stream",
    "commit_stream",
    "read_staged",
    "stage_stream_batch",
    "taken_over",
]


class StreamConflict(ConfigurationError):
    """Another query moved the stream's position or took the stream: two queries share one stream id."""


def taken_over(stream_id: str) -> StreamConflict:
    return StreamConflict(
        f"stream {stream_id} was taken by another streaming query that started on the same stream id: one "
        "stream id belongs to one streaming query (set option streamId); this query reads and commits "
        "nothing more of it"
    )


@dataclass(frozen=True)
class StreamMark:
    """A stream's row: the last position staged, the last position a query planned into a micro-batch
    (``None`` before the first plan, and in rows written before the mark was kept), and the token of the
    query that owns the stream (``None`` before a query claimed it).

    A stream read in place (``in_place.py``) keeps instead the RowVersion ranges of the micro-batch a query
    planned and has not settled (``held``), and the RowVersions in it whose headers the executors could not
    read (``unreadable``), which the settle moves to the error queue.

    ``checkpoint`` counts the queries that started on the stream id from a new checkpoint; their offsets
    carry it, so a query restarted from an older checkpoint is refused (its replay could repeat what the
    newer query delivered).

    The row's Summary holds it as JSON; compare-and-set statements compare that text, so :meth:`summary`
    writes the same text for the same mark."""

    position: int
    planned: int | None = None
    owner: str | None = None
    held: tuple[tuple[int, int], ...] | None = None
    unreadable: tuple[int, ...] = ()
    checkpoint: int = 0

    def summary(self) -> str:
        fields: dict[str, Any] = {"position": self.position}
        if self.planned is not None:
            fields["planned"] = self.planned
        if self.owner is not None:
            fields["owner"] = self.owner
        if self.held is not None:
            fields["held"] = [list(pair) for pair in self.held]
        if self.unreadable:
            fields["unreadable"] = list(self.unreadable)
        if self.checkpoint:
            fields["checkpoint"] = self.checkpoint
        return json.dumps(fields)

    @classmethod
    def parse(cls, summary: str, stream_id: str) -> StreamMark:
        try:
            fields = json.loads(summary)
            planned, owner, held = fields.get("planned"), fields.get("owner"), fields.get("held")
            return cls(
                int(fields["position"]),
                None if planned is None else int(planned),
                None if owner is None else str(owner),
                None if held is None else tuple((int(low), int(high)) for low, high in held),
                tuple(int(key) for key in fields.get("unreadable", ())),
                int(fields.get("checkpoint", 0)),
            )
        except (AttributeError, KeyError, TypeError, ValueError):
            raise ConfigurationError(
                f"stream {stream_id}: its row in the runs table does not hold a stream position: {summary!r}"
            ) from None


def bridge_sql(transport: Transport, options: SourceOptions, *, check: bool = False) -> BridgeSql:
    """The bridge's statements for the input queue; with ``check``, create or require its tables."""
    tables = bridge_tables(transport, options.queue, options.prefix)
    if check and not table_exists(transport, tables.staging):
        if not options.create_tables:
            raise ConfigurationError(
                f"the bridge's tables beside {options.queue} do not exist: create them in the provisioning "
                'step (create_bridge_tables) or set option("createTables", "true")'
            )
        create_bridge_tables(transport, options.queue, options.prefix)
    return BridgeSql(transport, tables)


def stage_stream_batch(
    transport: Transport,
    queue: Any,
    sql: BridgeSql,
    stream_id: str,
    size: int,
    mark: StreamMark,
    through: int | None = None,
) -> tuple[int, StreamMark]:
    """One receive of a stream: the messages get positions ``mark.position + 1 ...``; returns (taken, the
    stream's new mark). With ``through`` it takes only messages up to that RowVersion (PostgreSQL).

    ``taken`` counts expired and unreadable messages too (so an empty queue is ``taken == 0``). Where the
    server moves the rows (``spark/moves.py``) an unreadable message uses up its position on its way to the
    error queue, so positions may have gaps; reads and commits go by ranges and do not mind.
    """
    if sql.can_move_server_side:
        return _move_stream_batch(transport, queue, sql, stream_id, size, mark, through)
    if through is not None:
        raise ValueError(f"{transport.dialect.name}: a stream's receive cannot stop at a RowVersion here")
    last = mark.position
    with queue.receive(size) as batch:
        cursor = batch.connection.cursor()
        moved = replace(mark, position=last + len(batch))
        if len(batch):
            _advance(transport, cursor, sql, stream_id, mark, moved)
            params = []
            for offset, message in enumerate(batch, start=1):
                row = list(sql.stage_params(stream_id, 1, 0, message))
                row[1] = last + offset
                params.append(tuple(row))
            stage_rows(cursor, sql, params)
    return len(batch) + batch.expired + batch.poisoned, moved


def _move_stream_batch(
    transport: Transport,
    queue: Any,
    sql: BridgeSql,
    stream_id: str,
    size: int,
    mark: StreamMark,
    through: int | None,
) -> tuple[int, StreamMark]:
    """:func:`stage_stream_batch` moved by the server. The stream's row is claimed first (an update that
    keeps its mark), so a query that lost the stream rolls back before it numbers anything."""
    last = mark.position
    with transport.connection(queue.address) as connection:
        cursor = connection.cursor()
        _advance(transport, cursor, sql, stream_id, mark, mark)
        if through is None:
            statement = sql.move_to_stream_staging(queue.receive_statement(cursor))

            def params(rows: int, numbered: int) -> tuple:
                return (rows, stream_id, last + numbered)
        else:
            dialect = transport.dialect
            if queue.uses_row_locks(cursor):
                receive = dialect.optional_sql("receive_batch_through", queue.address)
            else:
                receive = dialect.optional_sql("receive_batch_through_without_row_locks", queue.address)
            if receive is None:
                raise ValueError(f"{queue.address}: a stream's receive cannot stop at a RowVersion here")
            statement = sql.move_to_stream_staging(receive)

            def params(rows: int, numbered: int) -> tuple:
                return (through, rows, stream_id, last + numbered)

        moved = move_batch(transport, queue, sql, cursor, statement, params, size, stream_id)
        advanced = replace(mark, position=last + moved.numbered)
        if moved.numbered:
            _advance(transport, cursor, sql, stream_id, mark, advanced)
        connection.commit()
    return moved.taken, advanced


def _advance(
    transport: Transport, cursor: Any, sql: BridgeSql, stream_id: str, mark: StreamMark, to: StreamMark
) -> None:
    """Compare-and-set the stream's row from ``mark`` to ``to`` in the open transaction, or raise
    :class:`StreamConflict` (the caller's transaction then rolls back: nothing was received)."""
    params = (to.summary(), stream_id, mark.summary())
    if rows_changed(transport, cursor, sql.counted(sql.set_summary_if()), params) != 1:
        raise StreamConflict(
            f"stream {stream_id} moved past position {mark.position} or was taken by another query: one "
            "stream id belongs to one streaming query (set option streamId); nothing was received"
        )


def claim_stream(
    transport: Transport,
    sql: BridgeSql,
    stream_id: str,
    mark: StreamMark,
    owner: str,
    to: StreamMark | None = None,
) -> bool:
    """Make ``owner`` the stream's owner if its row still holds ``mark`` (a compare-and-set; ``to``, if
    given, is the rest of the row to write), once the reads of staged rows under way have ended (they hold a
    lock on the row that the takeover's lock waits for)."""
    params = (replace(to or mark, owner=owner).summary(), stream_id, mark.summary())
    with transport.connection() as connection:
        cursor = connection.cursor()
        begin_write(transport, cursor)
        cursor.execute(sql.run_state_shared("takeover"), (stream_id,))
        transport.dialect.fetch_rows(cursor)
        claimed = rows_changed(transport, cursor, sql.counted(sql.set_summary_if()), params) == 1
        connection.commit()
    return claimed


def commit_stream(transport: Transport, sql: BridgeSql, stream_id: str, mark: StreamMark, end: int) -> None:
    """Delete the stream's staged rows through ``end``, in a transaction that first checks (and locks) the
    row still holds ``mark``, that is this query still owns the stream."""
    with transport.connection() as connection:
        cursor = connection.cursor()
        begin_write(transport, cursor)
        try:
            _advance(transport, cursor, sql, stream_id, mark, mark)
        except StreamConflict:
            connection.rollback()
            raise taken_over(stream_id) from None
        cursor.execute(sql.delete_staged_through(), (stream_id, end))
        connection.commit()


def _check_owner(transport: Transport, cursor: Any, sql: BridgeSql, stream_id: str, owner: str) -> None:
    """The stream's row names ``owner``; read under a shared lock held to the end of the transaction, so a
    query taking the stream over waits for this read to end."""
    cursor.execute(sql.run_state_shared("Summary"), (stream_id,))
    rows = transport.dialect.fetch_rows(cursor)
    if not rows or StreamMark.parse(rows[0][0], stream_id).owner != owner:
        raise taken_over(stream_id)


def read_staged(
    options: SourceOptions, run_id: str, low: int, high: int, owner: str | None = None
) -> Iterator[Any]:
    """The staged rows of ``run_id`` with ``low <= RowVersion < high``, in order, as Arrow record batches of
    the source's columns. With ``owner`` (a stream's reads), only while the stream's row names that owner:
    the check and the read are one transaction (on SQLite one snapshot, where PostgreSQL and SQL Server hold
    a shared lock on the stream's row)."""
    with options.open(pool_size=1, max_overflow=0) as transport:
        sql = bridge_sql(transport, options)
        with transport.connection() as connection:
            if owner is not None:
                try:
                    check = connection.cursor()
                    begin = transport.dialect.begin_read()
                    if begin:
                        check.execute(begin, ())
                    _check_owner(transport, check, sql, run_id, owner)
                except StreamConflict:
                    connection.rollback()
                    raise
            cursor = connection.cursor(binary=True) if sql.reads_binary else connection.cursor()
            yield from staged_batches(
                cursor, sql.staged_slice(), (run_id, low, high), columns=options.columns
            )
            connection.commit()
