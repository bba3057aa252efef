"""A stream read in place (PostgreSQL): a micro-batch's messages stay in the queue, held by the driver.

Staging copies every message into another table and out again; on PostgreSQL that copy was most of the
database's work for a stream. Read in place, as the drain's ``read_in_place`` does (``hold.py``):
- ``latestOffset`` deletes the oldest messages in the driver's own transaction and leaves the delete
  uncommitted; competing receivers skip them; the end offset names their RowVersions as ranges;
- the executors read those ranges with plain reads (an uncommitted delete hides a row from no other
  transaction, and a held row cannot change, so a retried task reads the same rows);
- the next ``latestOffset(start)`` commits the delete: Spark asks for it only once the micro-batch ending at
  ``start`` is in its commit log, so the sink has it.

If the driver dies, its connection goes and the delete rolls back: the messages are queued again, under
their RowVersions. A restart from the checkpoint takes the same ranges again for the batch it replays, or
deletes them when that batch reached the commit log (the offset after it names them). A query on a new
checkpoint finds the stream's row naming a batch planned and never settled (``StreamMark.held``) and
applies ``onUncommittedBatch``, as with staging.

What staging guarantees and this does not: between such a death and the restart, the messages are in the
queue, and another receiver of the same queue may take some of them; if the sink already had that batch,
they then reach two consumers. So a stream reads in place only by default where it can hold (``hold.py``'s
reasons) and the docs say a stream that shares its queue with other receivers wants ``readInPlace`` false.

Rows whose headers are not a header map are left out by the executors, which add their RowVersions to the
stream's row; the settle moves them to the error queue in the transaction that commits the batch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

from ...transport import ConfigurationError, Transport
from ..tables import BridgeSql, bridge_tables
from .hold import HeldRows, RowHold
from .options import SourceOptions
from .returned_rows import staged_batches
from .staging import StreamConflict, StreamMark
from .transactions import execute, execute_counted

__all__ = [
    "INITIAL_OFFSET",
    "StreamHold",
    "held_offset",
    "is_in_place",
    "newest_row_version",
    "offset_ranges",
    "read_held",
]

log = logging.getLogger("airflow_provider_sqlqueue.spark")

Ranges = tuple[tuple[int, int], ...]

INITIAL_OFFSET: dict = {"position": 0, "ranges": []}


def is_in_place(offset: dict) -> bool:
    """Whether an offset is one of a stream read in place (it names RowVersion ranges)."""
    return isinstance(offset, dict) and "ranges" in offset


def offset_ranges(offset: dict) -> Ranges:
    """The inclusive RowVersion ranges an in-place offset names (those of the micro-batch it ends)."""
    try:
        return tuple((int(low), int(high)) for low, high in offset["ranges"])
    except (KeyError, TypeError, ValueError):
        raise ConfigurationError(f"not an offset of the sqlqueue source: {offset!r}") from None


def held_offset(ranges: Ranges) -> dict:
    return {"position": ranges[-1][1], "ranges": [list(pair) for pair in ranges]}


def held_sql(transport: Transport, options: SourceOptions) -> BridgeSql:
    """The bridge's statements with the input queue's address (the held-row statements need it)."""
    tables = bridge_tables(transport, options.queue, options.prefix)
    return BridgeSql(transport, tables, transport.resolve(options.queue))


class StreamHold:
    """The driver's connections: one whose open transaction holds the micro-batch Spark planned last, and
    one that holds the next batch meanwhile (:meth:`start_ahead`), so the database's deletes overlap the
    executors' reads instead of waiting for the next ``latestOffset``."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.stream_id = str(options.stream_id)
        self._transport: Transport | None = None
        self._hold: RowHold | None = None
        self._ranges: Ranges | None = None
        self._ahead: tuple[threading.Thread, dict[str, Any]] | None = None

    def _open(self) -> tuple[Transport, Any, BridgeSql]:
        if self._transport is None:
            # the planned batch's hold, the next one's, and one each to read unreadable rows back
            self._transport = self.options.open(pool_size=4, max_overflow=0)
        transport = self._transport
        return transport, transport.queue(self.options.queue), held_sql(transport, self.options)

    def _take_new(
        self, wanted: int, skip: Ranges = (), through: int | None = None
    ) -> tuple[RowHold | None, HeldRows]:
        """A new hold of up to ``wanted`` of the oldest messages outside ``skip`` (none above RowVersion
        ``through``, if given); none if it took nothing (the expired rows it deleted are committed)."""
        transport, queue, sql = self._open()
        hold = RowHold(transport, queue, sql)
        try:
            held = hold.hold(self.options.batch_size, wanted, skip, through)
        except BaseException as error:
            hold.close(error)
            raise
        if not held.count:
            hold.connection.commit()
            hold.close()
            return None, held
        return hold, held

    def start_ahead(self, wanted: int, through: int | None = None) -> None:
        """Hold up to ``wanted`` more messages (none above RowVersion ``through``) in a thread, on another
        connection, while Spark runs the planned batch; :meth:`take` hands them out. Rows held ahead are in
        no offset: a driver that dies rolls them back with the rest."""
        if self._ahead is not None or wanted <= 0:
            return
        skip, result = self._ranges or (), {}

        def hold_ahead() -> None:
            try:
                result["held"] = self._take_new(wanted, skip, through)
            except BaseException as error:  # take() holds anew, and raises what is wrong
                result["error"] = error

        thread = threading.Thread(
            target=hold_ahead, name=f"sqlqueue-hold-ahead {self.stream_id}", daemon=True
        )
        thread.start()
        self._ahead = (thread, result)

    def wait_ahead(self, timeout: float | None = None) -> None:
        """Wait until the messages held ahead (if any) are held."""
        if self._ahead is not None:
            self._ahead[0].join(timeout)

    def _collect_ahead(self) -> tuple[RowHold | None, HeldRows] | None:
        if self._ahead is None:
            return None
        thread, result = self._ahead
        self._ahead = None
        thread.join()
        if "error" in result:
            log.debug("stream %s: holding ahead failed: %s", self.stream_id, result["error"])
            return None
        return result["held"]

    def take(self, wanted: int, through: int | None = None) -> HeldRows:
        """Hold up to ``wanted`` of the oldest messages, none above RowVersion ``through`` (expired ones are
        deleted, not held): those held ahead if there are any, else taken now."""
        self.release()
        ahead = self._collect_ahead()
        if ahead is not None:
            hold, held = ahead
            if hold is not None and held.count <= wanted:
                self._hold, self._ranges = hold, tuple(held.ranges)
                return held
            if hold is not None:
                hold.close()
        hold, held = self._take_new(wanted, through=through)
        if hold is not None:
            self._hold, self._ranges = hold, tuple(held.ranges)
        return held

    def ensure(self, ranges: Ranges) -> None:
        """Hold what is still queued of ``ranges``: a batch Spark replays after a restart, or plans anew."""
        if self._hold is not None and self._ranges == ranges:
            return
        self.release()
        transport, queue, sql = self._open()
        hold = RowHold(transport, queue, sql)
        try:
            hold.take_ranges(ranges)
        except BaseException as error:
            hold.close(error)
            raise
        self._hold, self._ranges = hold, ranges

    def settle(self, ranges: Ranges) -> None:
        """The micro-batch of ``ranges`` is in the sink: commit its delete, with the unreadable rows the
        executors found moved to the error queue and the stream's row no longer naming the batch. After a
        restart (nothing held) what is still queued of the ranges is taken first."""
        if not ranges:
            return
        self.ensure(ranges)
        assert self._hold is not None
        hold, transport, sql = self._hold, self._hold.transport, self._hold.sql
        try:
            hold.cursor.execute(sql.run_state_shared("takeover"), (self.stream_id,))
            rows = transport.dialect.fetch_rows(hold.cursor)
            if rows:
                mark = StreamMark.parse(rows[0][0], self.stream_id)
                inside = [key for key in mark.unreadable if any(lo <= key <= hi for lo, hi in ranges)]
                hold.move_unreadable(inside)
                left = tuple(key for key in mark.unreadable if key not in set(inside))
                settled = replace(mark, held=None if mark.held == ranges else mark.held, unreadable=left)
                if settled != mark:
                    params = (settled.summary(), self.stream_id, mark.summary())
                    hold.cursor.execute(sql.set_summary_if(), params)
            hold.connection.commit()
        finally:
            self.release()

    def release(self) -> None:
        """Roll back what is held (the messages are queued again)."""
        if self._hold is not None:
            hold, self._hold, self._ranges = self._hold, None, None
            hold.close()

    def close(self) -> None:
        self.release()
        ahead = self._collect_ahead()
        if ahead is not None and ahead[0] is not None:
            ahead[0].close()
        if self._transport is not None:
            transport, self._transport = self._transport, None
            transport.close()


def newest_row_version(transport: Transport, options: SourceOptions) -> int | None:
    """The input queue's newest RowVersion now (0 if it is empty), read from the index's end, where a stream
    can read in place (PostgreSQL); None elsewhere."""
    if transport.dialect.name != "postgresql":
        return None
    rows = execute(transport, held_sql(transport, options).newest_after(), (0,), write=False)
    return int(rows[0][0] or 0)


def _record_unreadable(transport: Transport, sql: BridgeSql, stream_id: str, keys: Iterable[int]) -> None:
    """Add RowVersions to the stream row's unreadable ones (a compare-and-set; a retried task adds the
    same ones)."""
    keys = set(keys)
    for _ in range(20):
        rows = execute(transport, sql.get_run(), (stream_id,), write=False)
        if not rows:
            raise ConfigurationError(f"stream {stream_id}: its row is gone")
        mark = StreamMark.parse(rows[0][3], stream_id)
        marked = replace(mark, unreadable=tuple(sorted(set(mark.unreadable) | keys)))
        if marked == mark:
            return
        params = (marked.summary(), stream_id, mark.summary())
        if execute_counted(transport, sql.counted(sql.set_summary_if()), params) == 1:
            return
    raise StreamConflict(f"stream {stream_id} keeps changing: the unreadable messages could not be recorded")


def read_held(
    options: SourceOptions,
    bounds: list[tuple[int, int]],
    note: Callable[[Transport, BridgeSql, list[tuple[int, int]], list[int]], None] | None = None,
) -> Iterator[Any]:
    """The executors' read of held slices (from, to exclusive) as Arrow record batches of the source's
    columns; the rows whose headers cannot be read are left out. Once every slice is read to its end,
    ``note`` gets the slices and those rows' RowVersions (a batch read's: its run's row); without it they
    are recorded in the stream's row."""
    unreadable: list[int] = []
    with options.open(pool_size=1, max_overflow=0) as transport:
        sql = held_sql(transport, options)
        with transport.connection() as connection:
            cursor = connection.cursor(binary=True) if sql.reads_binary else connection.cursor()
            cursor.execute(sql.held_reads_by_index(), ())
            for start, end in bounds:
                yield from staged_batches(
                    cursor, sql.held_slice(), (start, end), unreadable=unreadable, columns=options.columns
                )
            connection.commit()
        if unreadable:
            log.error(
                "%s: %d message(s) of %s have headers that cannot be read; they go to the error queue "
                "when the read is committed",
                options.run_id if note is not None else f"stream {options.stream_id}",
                len(unreadable),
                options.queue,
            )
        if note is not None:
            note(transport, sql, bounds, unreadable)
        elif unreadable:
            _record_unreadable(transport, sql, str(options.stream_id), unreadable)
