"""Reading in place (PostgreSQL) instead of staging: the driver takes the messages where they are. The drain's
phase 1 with ``read_in_place`` holds its run's messages so, and a stream read in place each micro-batch's
(``in_place.py``).

Staging copies every message into another table and out again; on PostgreSQL that copy was most of a
drain's cost. Here the driver's own transaction deletes the oldest rows, window by window of RowVersions,
and leaves the delete uncommitted through phase 2:
- competing receivers skip them, as they skip any receiver's rows;
- the executors still read them with plain reads: an uncommitted delete hides a row from no other
  transaction, and a row the driver holds cannot change, so a retried task reads the same rows;
- the commit writes the result and marks the run committed in that transaction, so the messages leave
  the queue exactly when the result is in;
- if the driver dies, its connection goes, the delete rolls back, and every message is still queued.

A lock first and a delete at the commit would write every row twice; one delete writes it once.

The executors get the held rows as ranges of consecutive RowVersions, every one of them held. A RowVersion
is never reused, so no other row can appear inside such a range later. Expired rows go with the delete.
The hold does not read the headers: phase 2's executors (the data source's read of the held ranges) read
them anyway and note the unreadable rows in the run's row, and the commit moves those to the error queue in
the hold's transaction, so they commit, or come back, with the run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...dialects.postgres_session import LONG_TRANSACTION_LIMITS, READ_LONG_TRANSACTION_LIMITS
from ...transport import ConfigurationError, Transport
from ..moves import require_error_queue, unreadable_keys
from ..tables import BridgeSql
from .errors import DrainError
from .transactions import begin_write

log = logging.getLogger("airflow_provider_sqlqueue.spark.drain")

__all__ = ["HeldRows", "RowHold", "consecutive_ranges", "reason_not_to_hold"]


@dataclass
class HeldRows:
    """What the driver holds for the run: ranges of RowVersions (inclusive) and the counts of phase 1."""

    ranges: list[tuple[int, int]] = field(default_factory=list)
    count: int = 0
    expired: int = 0
    batches: int = 0

    @property
    def low(self) -> int | None:
        return self.ranges[0][0] if self.ranges else None

    @property
    def high(self) -> int | None:
        return self.ranges[-1][1] if self.ranges else None


def consecutive_ranges(
    row_versions: Iterable[int], ranges: list[tuple[int, int]] | None = None
) -> list[tuple[int, int]]:
    """Ascending RowVersions as the fewest (low, high) ranges that hold exactly them, appended to ``ranges``
    (whose last range is below them) so that a hold keeps ranges, not every RowVersion."""
    ranges = [] if ranges is None else ranges
    for value in row_versions:
        if ranges and value == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], value)
        else:
            ranges.append((value, value))
    return ranges


def reason_not_to_hold(transport: Transport, queue: Any) -> str | None:
    """Why this connection cannot hold ``queue``'s rows in place for long (None: it can): another engine,
    receives with advisory locks (no UPDATE right), or a session limit that would end a long transaction."""
    if transport.dialect.name != "postgresql":
        return f"{transport.dialect.name} cannot hold them in place"
    with transport.connection(queue.address) as connection:
        cursor = connection.cursor()
        row_locks = queue.uses_row_locks(cursor)
        cursor.execute(READ_LONG_TRANSACTION_LIMITS, ())
        timeouts = cursor.fetchone()
        connection.commit()
    if not row_locks:
        return f"this role receives from {queue.name} with advisory locks (no UPDATE on it)"
    limited = [
        f"{name} {value}"
        for name, value in zip(LONG_TRANSACTION_LIMITS, timeouts, strict=True)
        if value not in (None, "0")
    ]
    if limited:
        return f"the session's {', '.join(limited)} could end a transaction held that long"
    return None


def _past(after: int, skip: Sequence[tuple[int, int]]) -> int:
    """``after`` moved past the skipped range the next RowVersion falls in (if any)."""
    for low, high in skip:
        if low <= after + 1 <= high:
            return high
    return after


def _before(after: int, upper: int, skip: Sequence[tuple[int, int]]) -> int:
    """A window's upper end ``upper`` cut before the first skipped range that starts inside it."""
    for low, _ in skip:
        if after < low <= upper:
            return low - 1
    return upper


# How long the first, plain-DELETE hold waits for a row another transaction holds before it starts over
# skipping such rows (PostgreSQL's lock_timeout for the hold's transaction, then put back).
CONTENDED_AFTER = "1s"
LOCK_NOT_AVAILABLE = "55P03"


class RowHold:
    """The driver's transaction that holds a run's messages from phase 1 to the commit."""

    def __init__(self, transport: Transport, queue: Any, sql: BridgeSql) -> None:
        """Open the hold's connection; ``sql`` is PostgreSQL's (the drain checks before it starts)."""
        self.transport, self.queue, self.sql = transport, queue, sql
        self.held = HeldRows()
        self._lease: Any = transport.connection(queue.address)
        self.connection: Any = self._lease.__enter__()
        self.cursor = self.connection.cursor()

    def hold(
        self,
        batch_size: int,
        max_messages: int | None,
        skip: Sequence[tuple[int, int]] = (),
        through: int | None = None,
    ) -> HeldRows:
        """Take the oldest rows, ``batch_size`` RowVersions per statement from the lowest, until every
        RowVersion the queue had when the last window began (none above ``through``, if given) was looked at
        or ``max_messages`` are held; expired rows are taken and counted, not held.

        A drain is usually the queue's only receiver, so each window is first taken with a plain DELETE
        (each row written once). If another receiver holds a row longer than ``CONTENDED_AFTER``, the
        hold starts over with the rows locked first and the held ones skipped, as receivers compete.

        ``skip``: RowVersion ranges (inclusive, ascending) another transaction of the caller holds, left out
        of every window so the plain DELETE does not wait for them (a stream holding its next batch while
        Spark reads the planned one)."""
        begin_write(self.transport, self.cursor)
        if not self.queue.uses_row_locks(self.cursor):
            raise ConfigurationError(
                f"read_in_place needs row locks on {self.queue.address}, and this role receives with "
                "advisory locks (no UPDATE on the queue); grant UPDATE or leave read_in_place off"
            )
        self.cursor.execute(self.sql.lock_timeout(), (CONTENDED_AFTER,))
        before = self.cursor.fetchone()[0]
        try:
            self._take_windows(batch_size, max_messages, skip_locked=False, skip=skip, through=through)
        except Exception as error:
            if getattr(error, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
            log.info(
                "another receiver holds rows of %s: the hold starts over, skipping them", self.queue.address
            )
            self.connection.rollback()
            self.held = HeldRows()
            begin_write(self.transport, self.cursor)
            self._take_windows(batch_size, max_messages, skip_locked=True, skip=skip, through=through)
        else:
            self.cursor.execute(self.sql.lock_timeout(), (before,))
        return self.held

    def take_ranges(self, ranges: Iterable[tuple[int, int]]) -> int:
        """Take every row still queued in the RowVersion ranges (inclusive), waiting for rows another
        transaction holds: a batch held before, taken again after its hold rolled back. Returns how many."""
        begin_write(self.transport, self.cursor)
        taken = 0
        for low, high in ranges:
            self.cursor.execute(self.sql.take_held_window(), (int(low) - 1, int(high)))
            taken += len(self.transport.dialect.fetch_rows(self.cursor))
        return taken

    def _take_windows(
        self,
        batch_size: int,
        max_messages: int | None,
        *,
        skip_locked: bool,
        skip: Sequence[tuple[int, int]] = (),
        through: int | None = None,
    ) -> None:
        """Window after window of ``batch_size`` RowVersions; after a window that held nothing, the next one
        starts at the next RowVersion the queue has, so a long stretch of deleted rows costs one statement."""
        held = self.held
        low, high = self._bounds()
        if low is None or high is None:
            return
        if through is not None:
            high = min(high, through)
        after = low - 1
        while max_messages is None or held.count < max_messages:
            after = _past(after, skip)
            if after >= high:
                if through is not None and after >= through:
                    break
                self.cursor.execute(self.sql.newest_after(), (high,))  # rows sent while holding
                (newest,) = self.cursor.fetchone()
                if newest is None:
                    break
                high = int(newest) if through is None else min(int(newest), through)
            size = batch_size if max_messages is None else min(batch_size, max_messages - held.count)
            upper = _before(after, after + (batch_size if skip_locked else size), skip)
            if through is not None:
                upper = min(upper, through)
            if skip_locked:
                self.cursor.execute(self.sql.take_held_batch(), (after, upper, size))
            else:  # a plain DELETE takes the whole window
                self.cursor.execute(self.sql.take_held_window(), (after, upper))
            rows = sorted(self.transport.dialect.fetch_rows(self.cursor), key=lambda row: row[0])
            if rows:
                held.batches += 1
                self._take(rows)
            if skip_locked and len(rows) == size:  # the window may hold more
                after = int(rows[-1][0])
                continue
            after = upper
            if not rows:
                self.cursor.execute(self.sql.next_row_version(), (after,))
                (following,) = self.cursor.fetchone()
                after = high if following is None else max(after, int(following) - 1)

    def _bounds(self) -> tuple[int | None, int | None]:
        self.cursor.execute(self.sql.held_bounds(), ())
        low, high = self.cursor.fetchone()
        return (None, None) if low is None else (int(low), int(high))

    def _take(self, rows: list[Any]) -> None:
        """One batch of taken rows (RowVersion, expired), ascending: the unexpired ones join the ranges."""
        good = [row_version for row_version, is_expired in rows if not is_expired]
        consecutive_ranges(good, self.held.ranges)
        self.held.count += len(good)
        self.held.expired += len(rows) - len(good)

    def unreadable_in(self, slices: list[tuple[int, int]]) -> set[int]:
        """The held rows of ``slices`` (from, to exclusive) whose headers are not a header map, read through
        another connection: the hold's own no longer sees them."""
        found: set[int] = set()
        with self.transport.connection(self.queue.address) as other:
            reader = other.cursor()
            for start, end in slices:
                reader.execute(self.sql.held_headers(), (start, end))
                rows = self.transport.dialect.fetch_rows(reader)
                checked = [(key, headers, False) for key, headers in rows]
                found.update(unreadable_keys(self.queue, checked, log_each=False))  # logged when moved
            other.rollback()
        return found

    def move_unreadable(self, row_versions: list[int]) -> None:
        """Copy held rows whose headers phase 2 could not read into the error queue, in the hold's
        transaction, logging each as every receive does. The hold's own connection no longer sees them;
        another one does, until the hold commits."""
        if not row_versions:
            return
        require_error_queue(self.queue, len(row_versions))
        with self.transport.connection(self.queue.address) as other:
            reader = other.cursor()
            reader.execute(self.sql.unreadable_held(), (row_versions,))
            rows = reader.fetchall()
            other.rollback()
        if len(rows) != len(row_versions):
            raise DrainError(
                f"{len(row_versions)} unreadable message(s) were taken but {len(rows)} could be read back "
                "to move them to the error queue; the run was rolled back and every message is still queued"
            )
        unreadable_keys(
            self.queue, [(key, row[3], False) for key, row in zip(row_versions, rows, strict=True)]
        )
        self.cursor.executemany(self.sql.insert_unreadable(self.queue.error_queue), rows)

    def close(self, error: BaseException | None = None) -> None:
        """End the hold: roll back whatever was not committed, and give the connection back."""
        try:
            self.connection.rollback()
        finally:
            if error is None:
                self._lease.__exit__(None, None, None)
            else:
                self._lease.__exit__(type(error), error, error.__traceback__)
