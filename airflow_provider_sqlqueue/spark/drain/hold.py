"""Phase 1 without staging (PostgreSQL, ``read_in_place``): the driver row-locks the messages where they are.

Staging copies every message into another table and out again; on PostgreSQL that copy was most of a
drain's cost. Here the driver's own transaction takes the oldest rows with ``FOR UPDATE SKIP LOCKED`` and
holds them through phase 2:
- competing receivers skip them, as they skip any receiver's rows;
- the executors read them with plain reads: a row lock does not block a reader, and a held row cannot change,
  so a retried task reads the same rows;
- the commit deletes them in the transaction that writes the result and marks the run committed;
- if the driver dies, its connection and the locks go with it, and every message is still queued.

The executors get the held rows as ranges of consecutive RowVersions, every one of them held. A RowVersion
is never reused, so no other row can appear inside such a range later. Expired rows are deleted and
unreadable ones moved to the error queue in the same transaction, so they commit, or come back, with the run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...transport import ConfigurationError, Transport
from ..moves import require_error_queue, unreadable_keys
from ..tables import BridgeSql
from .errors import DrainError
from .transactions import begin_write

__all__ = ["HeldRows", "RowHold", "consecutive_ranges"]


@dataclass
class HeldRows:
    """What the driver holds for the run: ranges of RowVersions (inclusive) and the counts of phase 1."""

    ranges: list[tuple[int, int]] = field(default_factory=list)
    count: int = 0
    expired: int = 0
    poisoned: int = 0
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


class RowHold:
    """The driver's transaction that holds a run's messages in the queue from phase 1 to the commit."""

    def __init__(self, transport: Transport, queue: Any, sql: BridgeSql) -> None:
        """Open the hold's connection; ``sql`` is PostgreSQL's (the drain checks before it starts)."""
        self.transport, self.queue, self.sql = transport, queue, sql
        self.held = HeldRows()
        self._lease: Any = transport.connection(queue.address)
        self.connection: Any = self._lease.__enter__()
        self.cursor = self.connection.cursor()

    def hold(self, batch_size: int, max_messages: int | None) -> HeldRows:
        """Take the oldest rows, ``batch_size`` per statement, until the queue has none left unlocked or
        ``max_messages`` are held; set expired and unreadable rows apart in the same transaction."""
        cursor, held = self.cursor, self.held
        begin_write(self.transport, cursor)
        if not self.queue.uses_row_locks(cursor):
            raise ConfigurationError(
                f"read_in_place needs row locks on {self.queue.address}, and this role receives with "
                "advisory locks (no UPDATE on the queue); grant UPDATE or leave read_in_place off"
            )
        after = 0
        while max_messages is None or held.count < max_messages:
            size = batch_size if max_messages is None else min(batch_size, max_messages - held.count)
            cursor.execute(self.sql.hold_batch(), (after, size))
            rows = self.transport.dialect.fetch_rows(cursor)
            if not rows:
                break
            held.batches += 1
            self._take(rows)
            after = rows[-1][0]
            if len(rows) < size:
                break
        return held

    def _take(self, rows: list[Any]) -> None:
        """One batch of held rows: the readable ones join the ranges; expired rows are deleted and unreadable
        ones moved to the error queue at once, in the hold's transaction, so the driver keeps no list of
        them."""
        unreadable = set(unreadable_keys(self.queue, rows))
        good: list[int] = []
        expired: list[int] = []
        poison: list[int] = []
        for row_version, _headers, is_expired in rows:
            if is_expired:
                expired.append(row_version)
            elif row_version in unreadable:
                poison.append(row_version)
            else:
                good.append(row_version)
        if expired:
            self.cursor.execute(self.sql.delete_held(), (expired,))
        if poison:
            require_error_queue(self.queue, len(poison))
            self.cursor.execute(self.sql.move_held_to_error(self.queue.error_queue), (poison,))
        consecutive_ranges(good, self.held.ranges)
        self.held.count += len(good)
        self.held.expired += len(expired)
        self.held.poisoned += len(poison)

    def delete_held(self) -> None:
        """In the commit's transaction: delete the held rows, checking that each one was there."""
        if not self.held.ranges:
            return
        lows = [low for low, _high in self.held.ranges]
        highs = [high for _low, high in self.held.ranges]
        self.cursor.execute(self.sql.delete_held_ranges(), (lows, highs))
        if self.cursor.rowcount != self.held.count:
            raise DrainError(
                f"the commit deleted {self.cursor.rowcount} held message(s), not {self.held.count}; "
                "it was rolled back and every message is still queued"
            )

    def close(self, error: BaseException | None = None) -> None:
        """End the hold: roll back whatever was not committed, and give the connection back."""
        try:
            self.connection.rollback()
        finally:
            if error is None:
                self._lease.__exit__(None, None, None)
            else:
                self._lease.__exit__(type(error), error, error.__traceback__)
