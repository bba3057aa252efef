"""A queue's statements, rendered once by its dialect and kept while the dialect stays the same."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .roles import StatementQueue

__all__ = ["LockingStatements", "QueueStatements"]


@dataclass(frozen=True)
class LockingStatements:
    """The statements whose text depends on how receivers lock rows."""

    receive_batch: str
    peek_estimate: str
    peek_bounds: str
    purge_expired_batch: str


class QueueStatements:
    """A queue's statements, rendered once by its dialect."""

    def __init__(self, queue: StatementQueue) -> None:
        dialect, address = queue.dialect, queue.address
        self.dialect = dialect
        self.send = dialect.send(address)
        self.send_batch_full = dialect.send_batch(address, dialect.send_batch_rows)
        self.insert_raw = dialect.insert_raw(address)
        self.receive_batch = dialect.sql("receive_batch", address)
        self.receive_batch_after = dialect.optional_sql("receive_batch_after", address)
        self.peek_estimate = dialect.sql("peek_estimate", address)
        self.peek_bounds = dialect.sql("peek_bounds", address)
        self.count_exact = dialect.sql("count_exact", address)
        self.purge_expired_batch = dialect.sql("purge_expired_batch", address)
        self._send_batch_sized: dict[tuple[int, bool], str] = {}
        self._without_recoverable: dict[str, str] = {}
        self._queue = queue

    @cached_property
    def _with_row_locks(self) -> LockingStatements:
        return LockingStatements(
            self.receive_batch, self.peek_estimate, self.peek_bounds, self.purge_expired_batch
        )

    @cached_property
    def _without_row_locks(self) -> LockingStatements:
        dialect, address = self._queue.dialect, self._queue.address
        return LockingStatements(
            dialect.without_row_locks("receive_batch", address),
            dialect.without_row_locks("peek_estimate", address),
            dialect.without_row_locks("peek_bounds", address),
            dialect.without_row_locks("purge_expired_batch", address),
        )

    def locking(self, row_locks: bool) -> LockingStatements:
        return self._with_row_locks if row_locks else self._without_row_locks

    def send_for(self, with_recoverable: bool) -> str:
        if with_recoverable:
            return self.send
        return self._legacy("send", lambda: self._queue.dialect.send(self._queue.address, False))

    def insert_raw_for(self, with_recoverable: bool) -> str:
        if with_recoverable:
            return self.insert_raw
        return self._legacy("insert_raw", lambda: self._queue.dialect.insert_raw(self._queue.address, False))

    def _legacy(self, name: str, render: Any) -> str:
        statement = self._without_recoverable.get(name)
        if statement is None:
            statement = self._without_recoverable[name] = render()
        return statement

    def send_batch(self, rows: int, with_recoverable: bool = True) -> str:
        if with_recoverable and rows == self._queue.dialect.send_batch_rows:
            return self.send_batch_full
        statement = self._send_batch_sized.get((rows, with_recoverable))
        if statement is None:
            statement = self._queue.dialect.send_batch(self._queue.address, rows, with_recoverable)
            if len(self._send_batch_sized) < 64:
                self._send_batch_sized[(rows, with_recoverable)] = statement
        return statement
