"""What each part of a pump needs of the pump: the narrow interfaces :class:`~.message_pump.MessagePump`
offers its processor, handler context, receiver and strategies.

The parts type their pump with these protocols instead of importing ``MessagePump``, so the pump package
imports in one direction: ``message_pump`` builds the parts, the parts know only their role.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ...dialects.base import Dialect
    from ...model.address import QueueAddress
    from ..connection import Transport
    from ..delayed import DelayedStore
    from ..depth_samples import DepthSampler
    from ..queue import TableQueue, TransactionMode
    from ..recoverability import CircuitBreaker, FailureStore
    from .pacing import MessageBudget
    from .stats import Counters

__all__ = ["ContextPump", "ProcessingPump", "ReceivingPump", "StrategyPump"]


class ContextPump(Protocol):
    """What a handler's :class:`~.context.MessageContext` reads: where it sends from and how."""

    queue: TableQueue
    transaction_mode: TransactionMode
    endpoint: Any  # the Endpoint the pump runs for, or None (typed loosely: endpoint imports the pump)
    delayed: DelayedStore | None
    lends_connection: bool  # set once a handler was lent the receive's connection: checks start then
    driver_reached: bool  # set once a handler was given the driver's own object: checks read the server

    def outgoing_headers(self) -> dict[str, str | None]: ...


class ProcessingPump(ContextPump, Protocol):
    """What the :class:`~.processing.MessageProcessor` reads and counts while it handles a message."""

    name: str
    machine: str
    transport: Transport
    handler: Callable[..., Any]
    immediate_retries: int
    error_queue: QueueAddress
    audit_queue: QueueAddress | None
    failures: FailureStore

    @property
    def abandoned(self) -> bool: ...

    @property
    def dialect(self) -> Dialect: ...


class ReceivingPump(Protocol):
    """What the :class:`~.receive.Receiver` needs for one receive: the queue, the run's message budget,
    the counters and the receive circuit breaker."""

    queue: TableQueue
    transaction_mode: TransactionMode
    budget: MessageBudget
    counters: Counters
    receive_breaker: CircuitBreaker

    @property
    def dialect(self) -> Dialect: ...


class StrategyPump(Protocol):
    """What a strategy drives: threads, one receive at a time, the run's end; and what the monitor's peek
    reads (the queue, its breakers, the depth sampler)."""

    name: str
    idle_delay: float
    batch_size: int
    max_concurrency: int
    budget: MessageBudget
    counters: Counters
    queue: TableQueue
    peek_breaker: CircuitBreaker
    receive_breaker: CircuitBreaker
    depth_sampler: DepthSampler | None

    @property
    def halted(self) -> bool: ...

    @property
    def in_flight(self) -> int: ...

    @property
    def until_empty(self) -> bool: ...

    def idle_wait(self) -> None: ...

    def database_failure(self, breaker: CircuitBreaker, error: BaseException) -> None: ...

    def spawn(self, target: Callable[[], None], name: str) -> None: ...

    def note_workers(self, workers: int) -> None: ...

    def receive_one(self, on_received: Callable[[bool], None] | None = None, size: int = 1) -> str: ...

    def settle(self, outcome: str) -> None: ...

    def drained(self) -> bool: ...

    def finish(self, reason: str) -> None: ...

    def idle_sleep(self, seconds: float) -> None: ...

    def wait_for_halt(self, timeout: float) -> bool: ...
