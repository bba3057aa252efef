"""MessagePump: runs a handler over a queue with a concurrency limit, as the reference's receivers do.

Three strategies, chosen by name (see docs/concurrency.md):

- ``monitor`` (default, the reference's 3.0+ design): one monitoring loop peeks the pending estimate, starts
  up to that many receive tasks within the free slots, waits until every started task has executed its
  receive statement before it peeks again, ends a round at the first empty receive, and sleeps the idle
  delay when the queue is empty. No empty-receive storms.
- ``adaptive`` (2.1): polling workers governed by a :class:`RampUpController`; a run of receives that found a
  message adds a worker up to the limit, a run of empty receives retires one down to a single worker.
- ``fixed`` (before 2.0): ``max_concurrency`` polling workers, each sleeping the idle delay when the queue
  is empty.

Every receive takes one message in its own connection and transaction (the core's transaction modes). A
handler exception rolls the message back; failures are counted per native message Id across rollbacks, and
once the immediate retries are spent the next receive moves the message, with failure headers, to the error
queue in the receive's transaction. Database failures go through a circuit breaker; deadlocks are retried
without counting. Nothing here imports Airflow.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import queue as queue_module
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from enum import Enum
from typing import TYPE_CHECKING, Any

from ..model.address import QueueAddress
from ..model.errors import ConfigurationError, InvalidQueueName, QueueNotFound
from . import headers as h
from .message import OutgoingMessage, ReceivedMessage
from .queue import ReceivedBatch, TableQueue, TransactionMode
from .recoverability import (
    CircuitBreaker,
    CircuitBreakerSettings,
    CriticalErrorCallback,
    FailureInfo,
    FailureStore,
    failure_headers,
)

if TYPE_CHECKING:
    from ..dialects.base import Dialect
    from .delayed import DelayedStore

__all__ = [
    "MessageContext",
    "MessagePump",
    "PumpStats",
    "RampUpController",
    "Strategy",
    "load_handler",
]

log = logging.getLogger(__name__)

MIN_IDLE_DELAY = 0.1
MAX_IDLE_DELAY = 10.0
MAX_CONCURRENCY = 1000

Handler = Callable[..., Any]


class Strategy(str, Enum):
    """How a pump runs its receives."""

    MONITOR = "monitor"
    ADAPTIVE = "adaptive"
    FIXED = "fixed"


# Outcomes of one receive.
_MESSAGE = "message"  # a message was handled to the end: processed, moved to the error queue or forwarded
_CONSUMED = "consumed"  # only an expired or unreadable row was taken
_RETRY = "retry"  # the handler failed; the receive rolled back
_EMPTY = "empty"
_ERROR = "error"  # the database failed
_SKIPPED = "skipped"  # the pump was stopping; nothing was received


class _Rollback(Exception):
    """Raised inside a receive block to roll it back."""


def load_handler(handler: Handler | str) -> Handler:
    """A callable, or one named ``package.module:function`` (or ``package.module.function``)."""
    if callable(handler):
        return handler
    if not isinstance(handler, str) or not handler.strip():
        raise ConfigurationError(f"a handler is a callable or 'module:function', not {handler!r}")
    text = handler.strip()
    module_name, _, attribute = text.partition(":") if ":" in text else text.rpartition(".")
    if not module_name or not attribute:
        raise ConfigurationError(f"handler {text!r} is not 'module:function'")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as error:
        raise ConfigurationError(f"cannot load handler {text!r}: {error}") from error
    if not callable(target):
        raise ConfigurationError(f"handler {text!r} is not callable")
    return target


def _takes_context(handler: Handler) -> bool:
    """True when the handler accepts a second positional argument (the :class:`MessageContext`)."""
    try:
        parameters = inspect.signature(handler).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [
        p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in positional)


class RampUpController:
    """The 2.1 ramp-up controller: decides when to add or retire a polling worker.

    A receive that found a message increments the consecutive-successes counter and resets the failures
    counter; an empty receive does the opposite. When successes go over ``success_threshold`` and there are
    fewer workers than ``max_workers``, it answers ``"add"`` (and resets successes); when failures go over
    ``failure_threshold`` and there is more than one worker, ``"retire"`` (and resets failures). It keeps
    the worker count itself, so its decisions are deterministic for a given sequence.
    """

    ADD = "add"
    RETIRE = "retire"

    def __init__(
        self, max_workers: int, *, success_threshold: int = 5, failure_threshold: int = 5, workers: int = 1
    ) -> None:
        for name, value in (
            ("max_workers", max_workers),
            ("success_threshold", success_threshold),
            ("failure_threshold", failure_threshold),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"{name} must be a positive int, not {value!r}")
        self.max_workers = max_workers
        self.success_threshold = success_threshold
        self.failure_threshold = failure_threshold
        self.workers = workers
        self.consecutive_successes = 0
        self.consecutive_failures = 0
        self._lock = threading.Lock()

    def record(self, received: bool) -> str | None:
        """Count one receive; return ``"add"``, ``"retire"`` or None."""
        with self._lock:
            if received:
                self.consecutive_successes += 1
                self.consecutive_failures = 0
                if self.consecutive_successes > self.success_threshold and self.workers < self.max_workers:
                    self.consecutive_successes = 0
                    self.workers += 1
                    return self.ADD
            else:
                self.consecutive_failures += 1
                self.consecutive_successes = 0
                if self.consecutive_failures > self.failure_threshold and self.workers > 1:
                    self.consecutive_failures = 0
                    self.workers -= 1
                    return self.RETIRE
            return None


@dataclass(frozen=True)
class PumpStats:
    """A snapshot of a pump's counters."""

    processed: int = 0  # handler succeeded, receive committed
    failed: int = 0  # moved to the error queue
    retried: int = 0  # handler failures rolled back for another attempt
    forwarded: int = 0  # moved on to their ForwardDestination without the handler
    audited: int = 0
    expired: int = 0
    poisoned: int = 0
    receives: int = 0  # receive statements executed
    empty_receives: int = 0
    peeks: int = 0
    idle_rounds: int = 0  # peeks (monitor) or empty receives (polling workers) followed by the idle delay
    in_flight: int = 0
    workers: int = 0
    max_workers: int = 0
    abandoned: int = 0  # handlers still running when the stop timeout passed (rolled back)
    elapsed: float = 0.0

    @property
    def rate(self) -> float:
        """Messages handled per second since the start."""
        return (self.processed + self.failed) / self.elapsed if self.elapsed > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rate": round(self.rate, 3)}


class _Counters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.values: dict[str, int] = {}

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self.values[name] = self.values.get(name, 0) + amount

    def get(self, name: str) -> int:
        return self.values.get(name, 0)


class _Budget:
    """At most ``limit`` messages handled: a receive reserves one, gives it back if nothing was used."""

    def __init__(self, limit: int | None) -> None:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ConfigurationError(f"max_messages must be a positive int or None, not {limit!r}")
        self.limit = limit
        self.used = 0
        self.reserved = 0
        self._changed = threading.Condition()

    def reserve(self) -> bool:
        with self._changed:
            if self.limit is not None and self.used + self.reserved >= self.limit:
                return False
            self.reserved += 1
            return True

    def settle(self, used: bool) -> None:
        with self._changed:
            self.reserved -= 1
            if used:
                self.used += 1
            self._changed.notify_all()

    @property
    def exhausted(self) -> bool:
        return self.limit is not None and self.used >= self.limit

    def wait(self, timeout: float) -> None:
        with self._changed:
            self._changed.wait(timeout)


class _Round:
    """One monitor round: how many receives the peek allows, and a latch that counts started receives down
    as each executes its receive statement.

    A worker whose receive found a message takes the round's next receive itself (:meth:`take`) instead of
    handing its slot back to the monitor: one thread hand-off per round rather than one per message.
    """

    def __init__(self, allowed: int = 0) -> None:
        self.allowed = allowed
        self.pending = 0
        self.cancelled = False
        self._done = threading.Condition()

    def spawned(self) -> None:
        with self._done:
            self.pending += 1

    def take(self, budget: _Budget) -> bool:
        """Start one more receive of this round if the peek allowed it and the budget has room."""
        with self._done:
            if self.cancelled or self.allowed <= 0 or not budget.reserve():
                return False
            self.allowed -= 1
            self.pending += 1
            return True

    def received(self, got_row: bool) -> None:
        with self._done:
            self.pending -= 1
            if not got_row:
                self.cancelled = True  # the queue ran dry: start no more tasks this round
            self._done.notify_all()

    def wait(self) -> None:
        with self._done:
            while self.pending > 0:
                self._done.wait()


class MessageContext:
    """What a handler may do besides reading its message: send, send delayed, reply.

    Sends follow the pump's transaction mode: in ``sends_atomic_with_receive`` they commit or roll back
    with the receive (delayed sends too); in the other modes they commit on their own at once.
    """

    def __init__(self, pump: MessagePump, message: ReceivedMessage, batch: ReceivedBatch, attempt: int):
        self.message = message
        self.queue = pump.queue
        self.attempt = attempt
        self.transaction_mode = pump.transaction_mode
        self.endpoint = pump.endpoint
        self._pump = pump
        self._batch = batch
        self.after_commit: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        return f"<MessageContext {self.message.id} attempt={self.attempt} on {self.queue.address}>"

    def _outgoing(
        self,
        message: OutgoingMessage | bytes | str,
        headers: Mapping[str, str | None] | None,
        time_to_be_received: timedelta | None,
    ) -> OutgoingMessage:
        if isinstance(message, OutgoingMessage):
            return OutgoingMessage.of(message, headers, time_to_be_received)
        merged: dict[str, str | None] = dict(self._pump.outgoing_headers())
        conversation = self.message.headers.get(h.CONVERSATION_ID)
        if conversation:
            merged[h.CONVERSATION_ID] = conversation
        merged[h.RELATED_TO] = self.message.message_id
        merged.update(headers or {})
        return OutgoingMessage(message, merged, time_to_be_received)

    def send(
        self,
        destination: str | QueueAddress | TableQueue,
        message: OutgoingMessage | bytes | str,
        headers: Mapping[str, str | None] | None = None,
        *,
        time_to_be_received: timedelta | None = None,
        delay: timedelta | float | None = None,
        deliver_at: datetime | None = None,
    ) -> uuid.UUID:
        """Send to ``destination``; with ``delay`` or ``deliver_at`` through the endpoint's delayed table."""
        outgoing = self._outgoing(message, headers, time_to_be_received)
        if delay is None and deliver_at is None:
            return self._batch.send(destination, outgoing)
        store = self._pump.delayed
        if store is None:
            raise ConfigurationError(
                "a delayed send needs a delayed table: run the pump through an Endpoint with delayed "
                "delivery, or give the pump delayed=DelayedStore(...)"
            )
        target = destination.address if isinstance(destination, TableQueue) else destination
        prepared = store.prepare(target, outgoing, delay=delay, deliver_at=deliver_at)
        if self.transaction_mode is TransactionMode.SENDS_ATOMIC_WITH_RECEIVE:
            store.store_on(self._batch.connection, prepared)
            self.after_commit.append(lambda: store.notify(prepared.due_in))
        else:
            with store.transport.connection(store.address) as connection:
                store.store_on(connection, prepared)
                connection.commit()
            store.notify(prepared.due_in)
        return outgoing.id

    def reply(
        self,
        message: OutgoingMessage | bytes | str,
        headers: Mapping[str, str | None] | None = None,
        **options: Any,
    ) -> uuid.UUID:
        """Send to the message's ``NServiceBus.ReplyToAddress`` (the sending instance's queue)."""
        reply_to = self.message.reply_to_address
        if not reply_to:
            raise ConfigurationError(f"message {self.message.id} has no NServiceBus.ReplyToAddress")
        merged: dict[str, str | None] = {
            h.MESSAGE_INTENT: "Reply",
            h.CORRELATION_ID: self.message.correlation_id or self.message.message_id,
        }
        merged.update(headers or {})
        return self.send(reply_to, message, merged, **options)


class MessagePump:
    """Runs ``handler`` over ``queue`` until stopped (or, through :meth:`run`, until a limit or empty).

    :param queue: the input queue (from :meth:`Transport.queue`).
    :param handler: ``handler(message)`` or ``handler(message, context)``; a callable or
        ``"module:function"``. Raising rolls the message back for another attempt.
    :param max_concurrency: most messages in flight at once (the seeds' ``MaximumConcurrencyLevel``).
    :param strategy: ``monitor`` (default), ``adaptive`` or ``fixed``.
    :param transaction_mode: the core's transaction mode (default ``sends_atomic_with_receive``).
    :param immediate_retries: attempts after the first before a message goes to the error queue.
    :param error_queue: where failed and unreadable messages go (default: the queue's, i.e. the
        transport's ``error``).
    :param audit_queue: where a copy of every processed message goes; None (default) for no audit.
    :param idle_delay: seconds to wait when the queue is empty (0.1 to 10; default 1).
    :param circuit_breaker: the breaker's times (defaults 30 s to trigger, 1 s and 10 s back-off).
    :param on_critical_error: ``callback(message, error)`` when a breaker triggers (default: log it and
        keep trying).
    :param success_threshold, failure_threshold: the adaptive strategy's ramp-up thresholds.
    :param stop_timeout: how long :meth:`stop` waits for running handlers by default.
    :param delayed: the delayed table for ``context.send(..., delay=...)`` (an Endpoint passes its own).
    """

    def __init__(
        self,
        queue: TableQueue,
        handler: Handler | str,
        *,
        max_concurrency: int = 1,
        strategy: Strategy | str = Strategy.MONITOR,
        transaction_mode: TransactionMode | str | None = None,
        immediate_retries: int = 5,
        error_queue: str | QueueAddress | object | None = ...,
        audit_queue: str | QueueAddress | None = None,
        idle_delay: float = 1.0,
        circuit_breaker: CircuitBreakerSettings | None = None,
        on_critical_error: CriticalErrorCallback | None = None,
        success_threshold: int = 5,
        failure_threshold: int = 5,
        stop_timeout: float = 30.0,
        delayed: DelayedStore | None = None,
        endpoint: Any = None,
        name: str | None = None,
    ) -> None:
        if not isinstance(queue, TableQueue):
            raise ConfigurationError(f"queue must be a TableQueue (transport.queue(...)), not {queue!r}")
        if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int):
            raise ConfigurationError(f"max_concurrency must be an int, not {max_concurrency!r}")
        if not 1 <= max_concurrency <= MAX_CONCURRENCY:
            raise ConfigurationError(f"max_concurrency must be 1 to {MAX_CONCURRENCY}, not {max_concurrency}")
        try:
            self.strategy = Strategy(strategy)
        except ValueError:
            names = ", ".join(s.value for s in Strategy)
            raise ConfigurationError(f"strategy must be one of {names}, not {strategy!r}") from None
        try:
            self.transaction_mode = TransactionMode(
                transaction_mode or TransactionMode.SENDS_ATOMIC_WITH_RECEIVE
            )
        except ValueError:
            modes = ", ".join(m.value for m in TransactionMode)
            raise ConfigurationError(
                f"transaction_mode must be one of {modes}, not {transaction_mode!r}"
            ) from None
        if (
            isinstance(immediate_retries, bool)
            or not isinstance(immediate_retries, int)
            or immediate_retries < 0
        ):
            raise ConfigurationError(f"immediate_retries must be an int >= 0, not {immediate_retries!r}")
        if isinstance(idle_delay, bool) or not isinstance(idle_delay, int | float):
            raise ConfigurationError(f"idle_delay must be seconds, not {idle_delay!r}")
        if not MIN_IDLE_DELAY <= idle_delay <= MAX_IDLE_DELAY:
            raise ConfigurationError(
                f"idle_delay must be between {MIN_IDLE_DELAY} and {MAX_IDLE_DELAY} seconds, not {idle_delay}"
            )
        self.transport = queue.transport
        target_error = queue.error_queue if error_queue is ... else error_queue
        if target_error is None:
            raise ConfigurationError("a pump needs an error queue for messages that keep failing")
        self.error_queue: QueueAddress = self.transport.resolve(target_error)  # type: ignore[arg-type]
        self.queue: TableQueue = self.transport.queue(queue.address, error_queue=str(self.error_queue))
        self.audit_queue = None if audit_queue is None else self.transport.resolve(audit_queue)
        self.handler = load_handler(handler)
        self._pass_context = _takes_context(self.handler)
        self.max_concurrency = max_concurrency
        self.immediate_retries = immediate_retries
        self.idle_delay = float(idle_delay)
        self.stop_timeout = stop_timeout
        self.delayed = delayed
        self.endpoint = endpoint
        self.name = name or f"pump {self.queue.address}"
        self.machine = socket.gethostname()
        self.peek_breaker = CircuitBreaker(
            f"Failed to peek {self.queue.address}", circuit_breaker, on_critical_error
        )
        self.receive_breaker = CircuitBreaker(
            f"Failed to receive from {self.queue.address}", circuit_breaker, on_critical_error
        )
        self.controller = RampUpController(
            max_concurrency, success_threshold=success_threshold, failure_threshold=failure_threshold
        )
        self.failures = FailureStore()
        self._counters = _Counters()
        self._budget = _Budget(None)
        self._until_empty = False
        self._halt = threading.Event()  # no new receives: stop() was called or the run is done
        self._done = threading.Event()
        self._abandoned = False
        self._flight = threading.Condition()
        self._in_flight = 0
        self._max_workers = 0
        self._threads: list[threading.Thread] = []
        self._threads_lock = threading.Lock()
        self._work: queue_module.SimpleQueue[_Round | None] = queue_module.SimpleQueue()
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._started_at: float | None = None
        self._stopped_at: float | None = None
        self.stop_reason: str | None = None

    @property
    def dialect(self) -> Dialect:
        """The transport's dialect, read at use: a variant is chosen when the first connection opens."""
        return self.transport.dialect

    def __repr__(self) -> str:
        return f"<MessagePump {self.queue.address} {self.strategy.value} x{self.max_concurrency}>"

    def __enter__(self) -> MessagePump:
        if self._started_at is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- what the pump needs -------------------------------------------------------------------
    def required_connections(self) -> int:
        """Pooled connections this pump can hold at once: one per receive in flight, one for the peek,
        and one per handler for sends outside the receive transaction."""
        needed = self.max_concurrency
        if self.strategy is Strategy.MONITOR:
            needed += 1
        if self.transaction_mode is not TransactionMode.SENDS_ATOMIC_WITH_RECEIVE:
            needed += self.max_concurrency
        return needed

    def outgoing_headers(self) -> dict[str, str | None]:
        """Headers every send from a handler starts with (an Endpoint adds ReplyToAddress and origin)."""
        if self.endpoint is not None:
            return self.endpoint.outgoing_headers()
        return {}

    # ---- lifecycle -----------------------------------------------------------------------------
    def start(self, *, max_messages: int | None = None, until_empty: bool = False) -> MessagePump:
        """Start receiving in background threads; stop after ``max_messages`` or an empty queue if asked.

        Raises :class:`QueueNotFound` at once when the input queue does not exist, and a database error
        when the database cannot be reached; once running, database failures go to the circuit breaker.
        """
        if self._started_at is not None:
            raise ConfigurationError("this pump was already started; create a new one")
        if not self.queue.exists():  # fail at once, as the reference's startup does, not in the loop
            raise QueueNotFound(f"queue {self.queue.address} does not exist: create it first")
        self._budget = _Budget(max_messages)
        self._until_empty = until_empty
        self._started_at = time.monotonic()
        check_pool_size(self.transport, self.required_connections(), str(self))
        if self.strategy is Strategy.MONITOR:
            for number in range(self.max_concurrency):
                self._spawn(self._task_worker, f"{self.name} task {number + 1}")
            self._spawn(self._monitor_loop, f"{self.name} monitor")
        elif self.strategy is Strategy.FIXED:
            for number in range(self.max_concurrency):
                self._spawn(self._polling_loop, f"{self.name} worker {number + 1}")
            self._note_workers(self.max_concurrency)
        else:
            self._spawn(self._polling_loop, f"{self.name} worker 1")
            self._note_workers(1)
        log.info(
            "%s started: %s strategy, concurrency %d, %s", self.name, self.strategy.value,
            self.max_concurrency, self.transaction_mode.value,
        )  # fmt: skip
        return self

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        with self._threads_lock:
            self._threads.append(thread)
        thread.start()

    def _note_workers(self, workers: int) -> None:
        self._max_workers = max(self._max_workers, workers)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until a run started with a limit or ``until_empty`` is done; True if it is."""
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def run(
        self,
        *,
        max_messages: int | None = None,
        until_empty: bool = True,
        timeout: float | None = None,
        stop_timeout: float | None = None,
    ) -> PumpStats:
        """Receive in the foreground until ``max_messages``, an empty queue (``until_empty``) or
        ``timeout`` seconds, or until :meth:`stop` is called from elsewhere (another thread, a signal
        handler); then stop gracefully and return the counts."""
        self.start(max_messages=max_messages, until_empty=until_empty)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while not self._done.wait(0.2):
                if self._halt.is_set():  # stop() from another thread or a signal handler
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    self.stop_reason = self.stop_reason or "timeout"
                    break
        finally:
            self.stop(stop_timeout)
        return self.stats()

    def request_stop(self) -> None:
        """Start no new receive (what :meth:`stop` does first), without waiting for anything."""
        self.stop_reason = self.stop_reason or "stopped"
        self._halt.set()

    def stop(self, timeout: float | None = None) -> bool:
        """Start no new receive; let running handlers finish within ``timeout`` (default ``stop_timeout``).

        Handlers still running then are abandoned: their receive rolls back when they return (or when the
        process ends and the database drops the connection), so their messages are received again.
        Returns True when every handler finished in time. Stopped before it starts, a pump starts no
        receive: a :meth:`run` begun afterwards returns at once.
        """
        timeout = self.stop_timeout if timeout is None else timeout
        if self._started_at is None:
            self.request_stop()
            return True
        self.stop_reason = self.stop_reason or "stopped"
        self._halt.set()
        deadline = time.monotonic() + max(0.0, timeout)
        with self._flight:
            while self._in_flight > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._flight.wait(remaining)
            clean = self._in_flight == 0
            if not clean and not self._abandoned:
                self._abandoned = True
                self._counters.add("abandoned", self._in_flight)
                log.warning(
                    "%s: %d handler(s) still running %.1f s after the stop; their messages roll back when "
                    "they return",
                    self.name,
                    self._in_flight,
                    timeout,
                )
        for _ in range(self.max_concurrency):
            self._work.put(None)
        if clean:
            with self._threads_lock:
                threads = list(self._threads)
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join(max(0.1, deadline - time.monotonic()))
        self.peek_breaker.close()
        self.receive_breaker.close()
        if self._stopped_at is None:
            self._stopped_at = time.monotonic()
            log.info("%s stopped (%s): %s", self.name, self.stop_reason, self.stats().as_dict())
        return clean

    def _finish(self, reason: str) -> None:
        if not self._done.is_set():
            self.stop_reason = self.stop_reason or reason
            self._done.set()
            self._halt.set()

    # ---- statistics ----------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        return self._in_flight

    def stats(self) -> PumpStats:
        c = self._counters
        if self.strategy is Strategy.ADAPTIVE:
            workers = self.controller.workers
        elif self.strategy is Strategy.FIXED:
            workers = self.max_concurrency
        else:
            workers = self._in_flight
        end = self._stopped_at or time.monotonic()
        return PumpStats(
            processed=c.get("processed"),
            failed=c.get("failed"),
            retried=c.get("retried"),
            forwarded=c.get("forwarded"),
            audited=c.get("audited"),
            expired=c.get("expired"),
            poisoned=c.get("poisoned"),
            receives=c.get("receives"),
            empty_receives=c.get("empty_receives"),
            peeks=c.get("peeks"),
            idle_rounds=c.get("idle_rounds"),
            in_flight=self._in_flight,
            workers=workers,
            max_workers=self._max_workers,
            abandoned=c.get("abandoned"),
            elapsed=0.0 if self._started_at is None else end - self._started_at,
        )

    # ---- strategies ----------------------------------------------------------------------------
    def _monitor_loop(self) -> None:
        """Peek, start up to that many receive tasks in the free slots, wait for their receives, repeat."""
        while not self._halt.is_set():
            flying = self._in_flight
            try:
                pending = self.queue.peek_estimate()
            except Exception as error:
                self._database_failure(self.peek_breaker, error)
                continue
            self._counters.add("peeks")
            self.peek_breaker.success()
            if self.receive_breaker.triggered:
                pending = min(pending, 1)  # probe with one receive while receiving keeps failing
            if pending <= 0:
                self._counters.add("idle_rounds")
                if self._until_empty and flying == 0:
                    self._finish("empty")
                    return
                self._idle_wait()
                continue
            current = _Round(pending)
            while current.allowed > 0 and not current.cancelled and not self._halt.is_set():
                if not self._take_slot():
                    break
                if not current.take(self._budget):
                    self._slots.release()
                    if current.allowed > 0 and not current.cancelled and not self._budget.exhausted:
                        self._budget.wait(self.idle_delay)  # wait for reserved receives to settle
                    break
                self._work.put(current)
            current.wait()

    def _take_slot(self) -> bool:
        while not self._halt.is_set():
            if self._slots.acquire(timeout=0.05):
                return True
        return False

    def _task_worker(self) -> None:
        while True:
            current = self._work.get()
            if current is None:
                return
            try:
                while True:
                    outcome = self._receive_one(current.received)
                    self._settle(outcome)
                    if outcome not in (_MESSAGE, _CONSUMED) or self._halt.is_set():
                        break
                    if not current.take(self._budget):
                        break
            finally:
                self._slots.release()

    def _polling_loop(self) -> None:
        """A polling worker of the fixed and adaptive strategies."""
        adaptive = self.strategy is Strategy.ADAPTIVE
        while not self._halt.is_set():
            if not self._budget.reserve():
                if self._budget.exhausted:
                    return
                self._budget.wait(self.idle_delay)
                continue
            outcome = self._receive_one()
            self._settle(outcome)
            if outcome in (_ERROR, _SKIPPED):
                continue
            if adaptive:
                decision = self.controller.record(outcome != _EMPTY)
                if decision == RampUpController.ADD:
                    workers = self.controller.workers
                    self._note_workers(workers)
                    log.debug("%s: adding polling worker %d", self.name, workers)
                    self._spawn(self._polling_loop, f"{self.name} worker {workers}")
                elif decision == RampUpController.RETIRE:
                    log.debug("%s: retiring a polling worker", self.name)
                    return
            if outcome == _EMPTY:
                self._counters.add("idle_rounds")
                if self._until_empty and self._in_flight == 0:
                    self._finish("empty")
                    return
                self._halt.wait(self.idle_delay)

    def _idle_wait(self) -> None:
        """Sleep the idle delay; with ``until_empty``, wake as soon as nothing is in flight."""
        if not self._until_empty:
            self._halt.wait(self.idle_delay)
            return
        deadline = time.monotonic() + self.idle_delay
        with self._flight:
            while self._in_flight > 0 and not self._halt.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._flight.wait(min(remaining, 0.05))

    def _settle(self, outcome: str) -> None:
        self._budget.settle(outcome in (_MESSAGE, _CONSUMED))
        if self._budget.exhausted:
            self._finish("limit")

    # ---- one receive ---------------------------------------------------------------------------
    def _receive_one(self, on_received: Callable[[bool], None] | None = None) -> str:
        """Receive one message in its own transaction and handle it; return the outcome.

        ``on_received(found_a_row)`` is called exactly once, as soon as the receive statement has run.
        """
        signalled = on_received is None

        def received(found: bool) -> None:
            nonlocal signalled
            if not signalled:
                signalled = True
                on_received(found)  # type: ignore[misc]

        with self._flight:
            self._in_flight += 1
        self._note_workers(self._in_flight if self.strategy is Strategy.MONITOR else 0)
        try:
            if self._halt.is_set():
                return _SKIPPED
            after_commit: list[Callable[[], None]] = []
            self._counters.add("receives")
            with self.queue.receive(1, transaction_mode=self.transaction_mode) as batch:
                received(bool(batch) or bool(batch.expired) or bool(batch.poisoned))
                self.receive_breaker.success()
                if batch.expired:
                    self._counters.add("expired", batch.expired)
                if batch.poisoned:
                    self._counters.add("poisoned", batch.poisoned)
                if batch:
                    self._handle(batch[0], batch, after_commit)
                    outcome = _MESSAGE
                elif batch.expired or batch.poisoned:
                    outcome = _CONSUMED
                else:
                    self._counters.add("empty_receives")
                    outcome = _EMPTY
            for action in after_commit:
                action()
            return outcome
        except _Rollback:
            self._counters.add("retried")
            return _RETRY
        except Exception as error:
            # The back-off happens before the monitor hears of this receive, so it throttles the rounds.
            self._database_failure(self.receive_breaker, error)
            return _ERROR
        finally:
            received(False)
            with self._flight:
                self._in_flight -= 1
                self._flight.notify_all()

    def _database_failure(self, breaker: CircuitBreaker, error: BaseException) -> None:
        cause = error.__cause__ or error
        if self.dialect.is_deadlock(cause):
            log.info("%s: chosen as a deadlock victim; retrying (%s)", self.name, error)
            return
        delay = breaker.failure(error)
        self._halt.wait(delay)

    def _handle(self, message: ReceivedMessage, batch: ReceivedBatch, after_commit: list) -> None:
        destination = message.headers.get(h.FORWARD_DESTINATION)
        if destination and self._forward(message, batch, destination):
            return
        info = self.failures.get(message.id)
        if info is not None and info.count > self.immediate_retries:
            self._move_to_error_queue(message, batch, info)
            return
        attempt = 1 + (info.count if info is not None else 0)
        started = datetime.now(timezone.utc)
        while True:
            context = MessageContext(self, message, batch, attempt)
            try:
                if self._pass_context:
                    self.handler(message, context)
                else:
                    self.handler(message)
                break
            except Exception as error:
                count = self.failures.record(message.id, error)
                log.warning(
                    "%s: handler failed on message %s (attempt %d of %d): %s: %s",
                    self.name, message.id, attempt, self.immediate_retries + 1, type(error).__name__, error,
                )  # fmt: skip
                if self.transaction_mode is not TransactionMode.NONE:
                    raise _Rollback from error
                # Mode 'none': the message was already removed; retry it here, then the error queue.
                self._counters.add("retried")
                if count > self.immediate_retries or self._halt.is_set():
                    self._move_to_error_queue(message, batch, self.failures.get(message.id))
                    return
                attempt += 1
        if self._abandoned:
            raise _Rollback  # stop() gave up waiting for this handler
        after_commit.extend(context.after_commit)
        if self.audit_queue is not None:
            self._audit(message, batch, started)
        self.failures.clear(message.id)
        self._counters.add("processed")

    def _forward(self, message: ReceivedMessage, batch: ReceivedBatch, destination: str) -> bool:
        """A message moved here by a .NET endpoint's delayed delivery: send it on, without the handler."""
        try:
            address = self.transport.resolve(destination)
        except InvalidQueueName:
            return False
        if address == self.queue.address:
            return False
        info = self.failures.get(message.id)
        if info is not None:
            self._move_to_error_queue(message, batch, info, failed_queue=str(address))
            return True
        headers = {key: value for key, value in message.headers.items() if key != h.FORWARD_DESTINATION}
        try:
            forwarded = OutgoingMessage(message.body, headers, id=message.id)
            batch.send_in_receive_transaction(address, [forwarded])
        except Exception as error:
            log.error("%s: forwarding message %s to %s failed: %s", self.name, message.id, address, error)
            self.failures.record(message.id, error)
            raise _Rollback from error
        self._counters.add("forwarded")
        return True

    def _move_to_error_queue(
        self,
        message: ReceivedMessage,
        batch: ReceivedBatch,
        info: FailureInfo | None,
        failed_queue: str | None = None,
    ) -> None:
        assert info is not None
        headers = failure_headers(
            message.headers,
            info,
            failed_queue or str(self.queue.address),
            endpoint=getattr(self.endpoint, "name", None) or str(self.queue.address),
            machine=self.machine,
        )
        log.error(
            "%s: moving message %s to the error queue %s after %d failed attempt(s): %s: %s",
            self.name, message.id, self.error_queue, info.count, type(info.error).__name__, info.error,
        )  # fmt: skip
        batch.send_in_receive_transaction(
            self.error_queue, [OutgoingMessage(message.body, headers, id=message.id)]
        )
        self.failures.clear(message.id)
        self._counters.add("failed")

    def _audit(self, message: ReceivedMessage, batch: ReceivedBatch, started: datetime) -> None:
        headers = dict(message.headers)
        headers["NServiceBus.ProcessingStarted"] = h.format_timestamp(started)
        headers["NServiceBus.ProcessingEnded"] = h.format_timestamp(datetime.now(timezone.utc))
        headers["NServiceBus.ProcessingEndpoint"] = getattr(self.endpoint, "name", None) or str(
            self.queue.address
        )
        headers["NServiceBus.ProcessingMachine"] = self.machine
        batch.send_in_receive_transaction(
            self.audit_queue, [OutgoingMessage(message.body, headers, id=message.id)]
        )
        self._counters.add("audited")


def check_pool_size(transport: Any, needed: int, what: str) -> bool:
    """Warn (and return False) when the transport's pool is smaller than ``needed`` connections."""
    if needed <= transport.pool_size:
        return True
    log.warning(
        "%s can use %d database connections at once (receives in flight, peek, sends), but the pool of %s "
        "holds %d; raise pool_size/max_overflow of the transport or lower the concurrency, or receives "
        "will wait for connections and time out",
        what,
        needed,
        transport.description,
        transport.pool_size,
    )
    return False
