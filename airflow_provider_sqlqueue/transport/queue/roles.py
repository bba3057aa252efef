"""What each part of a queue needs of its queue: the narrow interfaces :class:`~.table_queue.TableQueue`
offers its rendered statements, its receive block and a receive's batch.

The parts type their queue with these protocols instead of importing ``TableQueue``, so the queue package
imports in one direction: ``table_queue`` builds the parts, the parts know only their role. This module
imports neither ``table_queue`` nor the transport's ``connection``, not even for type checking.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ...dialects.base import Dialect
    from ...model.address import QueueAddress
    from ..roles import QueueTransport
    from .low_water import LowWaterMark
    from .received_rows import PoisonRow

__all__ = ["BatchQueue", "ReceivingQueue", "StatementQueue"]


class StatementQueue(Protocol):
    """What a queue's :class:`~.statements.QueueStatements` are rendered for: the table, by the dialect."""

    address: QueueAddress

    @property
    def dialect(self) -> Dialect: ...


class BatchQueue(Protocol):
    """What a receive's :class:`~.batch.ReceivedBatch` reads of the queue it came from: the dialect for
    its savepoints, and the transport, which opens the queues the batch sends to."""

    address: QueueAddress
    transport: QueueTransport

    @property
    def dialect(self) -> Dialect: ...


class ReceivingQueue(BatchQueue, Protocol):
    """What the receive block (:class:`~.receiving.ReceiveBlock`) drives: the pick, the move of unreadable
    rows to the error queue, the rollback after a failure and the low-water mark that a rollback resets."""

    @property
    def low_water(self) -> LowWaterMark: ...

    def pick(self, cursor: Any, max_messages: int) -> list[Any]: ...

    def move_poison(self, cursor: Any, poison: list[PoisonRow]) -> None: ...

    def rollback_quietly(self, connection: Any) -> None: ...
