"""The messages of one receive, and the sends that follow that receive's transaction mode."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, overload

from ...model.address import QueueAddress
from ..lease import shared_cursor
from ..message import OutgoingMessage, ReceivedMessage
from .transaction_mode import TransactionMode

if TYPE_CHECKING:
    from ..roles import OpenedQueue
    from .roles import BatchQueue

__all__ = ["ReceivedBatch"]


class ReceivedBatch(Sequence[ReceivedMessage]):
    """The messages of one receive, in FIFO order, plus sends that follow the batch's transaction mode."""

    def __init__(
        self,
        queue: BatchQueue,
        connection: Any,
        messages: list[ReceivedMessage],
        expired: int,
        poisoned: int,
        mode: TransactionMode,
    ) -> None:
        self.queue = queue
        self.messages = messages
        self.expired = expired
        self.poisoned = poisoned
        self.transaction_mode = mode
        self._connection = connection

    @overload
    def __getitem__(self, index: int) -> ReceivedMessage: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[ReceivedMessage]: ...
    def __getitem__(self, index: int | slice) -> ReceivedMessage | Sequence[ReceivedMessage]:
        return self.messages[index]

    def __len__(self) -> int:
        return len(self.messages)

    def __iter__(self) -> Iterator[ReceivedMessage]:
        return iter(self.messages)

    @property
    def connection(self) -> Any:
        """The DB-API connection that holds this receive's transaction.

        Statements run on it commit or roll back together with the receive's DELETE (in transaction
        modes other than ``none``), e.g. writing results to a table of the same database. Never commit,
        roll back or close it yourself: the ``receive`` block does.
        """
        return self._connection

    def __repr__(self) -> str:
        return (
            f"<ReceivedBatch {self.queue.address} messages={len(self.messages)} expired={self.expired} "
            f"poisoned={self.poisoned} mode={self.transaction_mode.value}>"
        )

    def _target(self, destination: str | QueueAddress | OpenedQueue) -> OpenedQueue:
        if isinstance(destination, str | QueueAddress):
            return self.queue.transport.queue(destination)
        return destination

    def send(
        self,
        destination: str | QueueAddress | OpenedQueue,
        message: OutgoingMessage | bytes | str,
        headers: Mapping[str, str | None] | None = None,
        time_to_be_received: timedelta | None = None,
    ) -> uuid.UUID:
        """Send to ``destination``; atomic with this receive in ``sends_atomic_with_receive`` mode."""
        return self.send_batch(destination, [OutgoingMessage.of(message, headers, time_to_be_received)])[0]

    def send_batch(
        self,
        destination: str | QueueAddress | OpenedQueue,
        messages: Iterable[OutgoingMessage | bytes | str],
    ) -> list[uuid.UUID]:
        target = self._target(destination)
        if self.transaction_mode.sends_join_receive:
            return target.send_on(self._connection, messages, commit=False)
        self.transaction_mode.check_own_commit(target.dialect, "a send")
        return target.send_batch(messages)

    def rollback_to_savepoint(self, name: str) -> None:
        """Undo what ran since the savepoint ``name`` (a batching pump's message: see pump/savepoints.py)
        and forget the savepoint, keeping the receive. Raises where the engine already ended the
        transaction (the savepoint is gone): the whole receive must then roll back."""
        dialect = self.queue.dialect
        cursor = shared_cursor(self._connection)
        cursor.execute(dialect.rollback_to_savepoint(name), ())
        release = dialect.release_savepoint(name)
        if release is not None:
            cursor.execute(release, ())

    def send_in_receive_transaction(
        self,
        destination: str | QueueAddress | OpenedQueue,
        messages: Iterable[OutgoingMessage | bytes | str],
    ) -> list[uuid.UUID]:
        """Send on this receive's connection and transaction in every mode (the pump's moves to the error
        queue, audit copies and forwards: they must commit or roll back with the receive)."""
        target = self._target(destination)
        return target.send_on(self._connection, messages, commit=False)
