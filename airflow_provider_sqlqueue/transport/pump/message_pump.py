"""MessagePump: runs a handler over a queue with a concurrency limit, as the reference's receivers do.

The pump owns its threads, its lifecycle (start, run, stop) and the state they share (the halt and done
events, the in-flight count, the budget). How many receives run is its strategy's (:mod:`.strategy`),
what happens to one receive is :mod:`.receive`'s, to one received message :mod:`.processing`'s, and its
counts are :mod:`.stats`'. Its parts see it through the narrow interfaces of :mod:`.roles`.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ...model.address import QueueAddress
from ...model.errors import ConfigurationError, QueueNotFound, SqlQueueError
from ..depth_samples import DepthSampler
from ..queue import TableQueue, TransactionMode
from ..queue.startup import (
    inspect_at_start,
    purge_expired_at_start,
)
from ..recoverability import CircuitBreaker, FailureStore
from ..wakeup import WakeUpListener
from .handler import Handler, load_handler
from .pacing import MessageBudget
from .processing import CONSUMED, ERROR, MESSAGE, RETRY, SKIPPED, MessageProcessor, Rollback
from .receive import Receiver
from .settings import PumpSettings
from .stats import Counters, PumpStats
from .strategy import ConcurrencyPolicy, MonitorStrategy, PollingStrategy, Strategy

if TYPE_CHECKING:
    from ...dialects.base import Dialect
    from ..delayed import DelayedStore

__all__ = ["MessagePump", "check_pool_size"]

# The log lines keep the name they had before the split: airflow_provider_sqlqueue.transport.pump.
log = logging.getLogger(__package__)


class MessagePump:
    """Runs ``handler`` over ``queue`` until stopped (or, through :meth:`run`, until a limit or empty).

    :param queue: the input queue (from :meth:`Transport.queue`).
    :param handler: ``handler(message)`` or ``handler(message, context)``; a callable or
        ``"module:function"``. Raising rolls the message back for another attempt.
    :param settings: how it runs (:class:`~.settings.PumpSettings`: concurrency, batch size, strategy,
        transaction mode, retries, idle delay, ...); keywords of the same names override single settings,
        e.g. ``MessagePump(queue, handler, max_concurrency=4)``.
    :param error_queue: where failed and unreadable messages go (default: the queue's, i.e. the
        transport's ``error``).
    :param audit_queue: where a copy of every processed message goes; None (default) for no audit.
    :param delayed: the delayed table for ``context.send(..., delay=...)`` (an Endpoint passes its own).
    :param endpoint: the Endpoint the pump runs for (its handlers' replies and publishes name it).
    :param name: the pump's name in logs and thread names (default ``pump <queue>``).
    :param depth_sampler: where the monitoring peek's depths go, at most one sample a minute (the depth
        history of :mod:`..depth_samples`); by default a sampler keeping :data:`~..depth_samples.RETENTION`,
        None for none.
    """

    def __init__(
        self,
        queue: TableQueue,
        handler: Handler | str,
        settings: PumpSettings | Mapping[str, Any] | None = None,
        *,
        error_queue: str | QueueAddress | object | None = ...,
        audit_queue: str | QueueAddress | None = None,
        delayed: DelayedStore | None = None,
        endpoint: Any = None,
        name: str | None = None,
        depth_sampler: DepthSampler | object | None = ...,
        **options: Any,
    ) -> None:
        if not isinstance(queue, TableQueue):
            raise ConfigurationError(f"queue must be a TableQueue (transport.queue(...)), not {queue!r}")
        self.settings = settings = PumpSettings.of(settings, **options)
        self.strategy: Strategy = settings.strategy  # type: ignore[assignment]
        self.transaction_mode: TransactionMode = settings.transaction_mode  # type: ignore[assignment]
        self.wake_up = settings.wake_up
        self._listener: WakeUpListener | None = None
        self.inspect_on_start = settings.inspect_on_start
        self.purge_expired_on_start = settings.purge_expired_on_start
        self.purge_batch_size = settings.purge_batch_size
        self.transport = queue.transport
        target_error = queue.error_queue if error_queue is ... else error_queue
        if target_error is None:
            raise ConfigurationError("a pump needs an error queue for messages that keep failing")
        self.error_queue: QueueAddress = self.transport.resolve(target_error)  # type: ignore[arg-type]
        self.queue: TableQueue = self.transport.queue(queue.address, error_queue=str(self.error_queue))
        self.audit_queue = None if audit_queue is None else self.transport.resolve(audit_queue)
        self.handler = load_handler(handler)
        self.max_concurrency = settings.max_concurrency
        self.batch_size = settings.batch_size
        self.immediate_retries = settings.immediate_retries
        self.idle_delay = settings.idle_delay
        self.stop_timeout = settings.stop_timeout
        self.delayed = delayed
        self.endpoint = endpoint
        self.name = name or f"pump {self.queue.address}"
        self.depth_sampler: DepthSampler | None = (
            DepthSampler(self.transport) if depth_sampler is ... else depth_sampler  # type: ignore[assignment]
        )
        self.machine = socket.gethostname()
        self.peek_breaker = CircuitBreaker(
            f"Failed to peek {self.queue.address}", settings.circuit_breaker, settings.on_critical_error
        )
        self.receive_breaker = CircuitBreaker(
            f"Failed to receive from {self.queue.address}",
            settings.circuit_breaker,
            settings.on_critical_error,
        )
        self.concurrency: ConcurrencyPolicy = (
            MonitorStrategy(self)
            if self.strategy is Strategy.MONITOR
            else PollingStrategy(
                self,
                adaptive=self.strategy is Strategy.ADAPTIVE,
                success_threshold=settings.success_threshold,
                failure_threshold=settings.failure_threshold,
                slow_handler_threshold=settings.slow_handler_threshold,
            )
        )
        self.failures = FailureStore()
        # set by the first handler lent the receive's connection: from then on the pump reads the
        # transaction after every handler call (a handler may have kept the driver's connection)
        self.lends_connection = False
        # set once a handler was given the driver's own object (see MessageContext.reached)
        self.driver_reached = False
        self._processor = MessageProcessor(self)
        self._receiver = Receiver(self, self._processor)
        self.counters = Counters()
        self.budget = MessageBudget(None)
        self._until_empty = False
        self._halt = threading.Event()  # no new receives: stop() was called or the run is done
        self._done = threading.Event()
        self._abandoned = False
        self._flight = threading.Condition()
        self._in_flight = 0
        self._max_workers = 0
        self._threads: list[threading.Thread] = []
        self._threads_lock = threading.Lock()
        self._started_at: float | None = None
        self._stopped_at: float | None = None
        self.stop_reason: str | None = None

    @property
    def dialect(self) -> Dialect:
        """The transport's dialect, read at use: a variant is chosen when the first connection opens."""
        return self.transport.dialect

    def __repr__(self) -> str:
        batch = f" batch {self.batch_size}" if self.batch_size > 1 else ""
        return f"<MessagePump {self.queue.address} {self.strategy.value} x{self.max_concurrency}{batch}>"

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
        needed = self.max_concurrency + self.concurrency.own_connections
        if not self.transaction_mode.sends_join_receive:
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
        Before the first receive it purges expired messages if asked, then inspects the queue table, as
        the reference's receivers do (see "When a receiver starts" in the concepts guide).
        """
        if self._started_at is not None:
            raise ConfigurationError("this pump was already started; create a new one")
        if not self.queue.exists():  # fail at once, as the reference's startup does, not in the loop
            raise QueueNotFound(f"queue {self.queue.address} does not exist: create it first")
        if self.purge_expired_on_start:
            purge_expired_at_start(self.queue, self.purge_batch_size)
        if self.inspect_on_start:
            inspect_at_start(self.queue, purging=self.purge_expired_on_start)
        self.budget = MessageBudget(max_messages)
        self._until_empty = until_empty
        if self.wake_up == "auto" and WakeUpListener.supported(self.transport, self.queue.address):
            self._listener = WakeUpListener(self.transport, self.queue.address, self.name).start()
        self._started_at = time.monotonic()
        check_pool_size(self.transport, self.required_connections(), str(self))
        # said before the workers start: what they log or print comes after it
        log.info(
            "%s started: %s strategy, concurrency %d, %s", self.name, self.strategy.value,
            self.max_concurrency, self.transaction_mode.value,
        )  # fmt: skip
        self.concurrency.start()
        return self

    def spawn(self, target: Callable[[], None], name: str) -> None:
        """Start one of the pump's threads (a worker, the monitor, a watch); :meth:`stop` joins them all."""
        thread = threading.Thread(target=target, name=name, daemon=True)
        with self._threads_lock:
            self._threads.append(thread)
        thread.start()

    def note_workers(self, workers: int) -> None:
        """Record how many workers ran at once, for :attr:`stats`."""
        self._max_workers = max(self._max_workers, workers)

    def wait_for_halt(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the pump to halt (see :attr:`halted`); whether it has."""
        return self._halt.wait(timeout)

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
                self.counters.add("abandoned", self._in_flight)
                log.warning(
                    "%s: %d handler(s) still running %.1f s after the stop; their messages roll back when "
                    "they return",
                    self.name,
                    self._in_flight,
                    timeout,
                )
        self.concurrency.release()
        if clean:
            with self._threads_lock:
                threads = list(self._threads)
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join(max(0.1, deadline - time.monotonic()))
        self.peek_breaker.close()
        self.receive_breaker.close()
        if self._listener is not None:
            self._listener.stop()
        if self._stopped_at is None:
            self._stopped_at = time.monotonic()
            log.info("%s stopped (%s): %s", self.name, self.stop_reason, self.stats().as_dict())
        return clean

    def finish(self, reason: str) -> None:
        """End a run (its limit reached, its queue empty): no new receive starts, :meth:`wait` returns."""
        if not self._done.is_set():
            self.stop_reason = self.stop_reason or reason
            self._done.set()
            self._halt.set()

    # ---- statistics ----------------------------------------------------------------------------
    @property
    def halted(self) -> bool:
        """True once no new receive may start (stopped, or the run is done)."""
        return self._halt.is_set()

    @property
    def abandoned(self) -> bool:
        """True when :meth:`stop` gave up waiting for running handlers (their receives roll back)."""
        return self._abandoned

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def until_empty(self) -> bool:
        """Whether this run ends once the queue is empty."""
        return self._until_empty

    def stats(self) -> PumpStats:
        c = self.counters
        workers = self.concurrency.running_workers()
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

    # ---- what the strategies drive -------------------------------------------------------------
    def drained(self) -> bool:
        """After an empty receive: whether a run until the queue is empty may end here (nothing in flight).

        Where receives do not skip rows other receivers hold (Babelfish), a receive can come back empty
        beside queued messages, so a peek, which counts every row, confirms it first."""
        if not self._until_empty or self._in_flight != 0:
            return False
        if self.queue.dialect.skips_held_rows:
            return True
        try:
            return self.queue.peek_estimate() == 0
        except SqlQueueError as error:
            log.warning("peek of %s failed (%s); receiving on", self.queue.address, error)
            return False

    def idle_wait(self) -> None:
        """Sleep the idle delay; with ``until_empty``, wake as soon as nothing is in flight."""
        if not self._until_empty:
            self.idle_sleep(self.idle_delay)
            return
        deadline = time.monotonic() + self.idle_delay
        with self._flight:
            while self._in_flight > 0 and not self._halt.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._flight.wait(min(remaining, 0.05))

    def idle_sleep(self, seconds: float) -> None:
        """Sleep after finding the queue empty: until a pushed wake-up, a stop, or ``seconds``."""
        if self._listener is not None:
            self._listener.wait(seconds, self._halt)
        else:
            self._halt.wait(seconds)

    def settle(self, outcome: str) -> None:
        """Count a receive's outcome against the run's message budget; finish the run when it is spent."""
        self.budget.settle(outcome in (MESSAGE, CONSUMED))
        if self.budget.exhausted:
            self.finish("limit")

    # ---- one receive ---------------------------------------------------------------------------
    def receive_one(self, on_received: Callable[[bool], None] | None = None, size: int = 1) -> str:
        """Receive one message (or, with ``size`` above 1, a batch) in its own transaction and handle it;
        return the outcome.

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
            self.note_workers(self._in_flight)
        try:
            if self._halt.is_set():
                return SKIPPED
            return self._receiver.receive(size, received)
        except Rollback:
            self.counters.add("retried")
            return RETRY
        except Exception as error:
            # The back-off happens before the monitor hears of this receive, so it throttles the rounds.
            self.database_failure(self.receive_breaker, error)
            return ERROR
        finally:
            received(False)
            with self._flight:
                self._in_flight -= 1
                self._flight.notify_all()

    def database_failure(self, breaker: CircuitBreaker, error: BaseException) -> None:
        cause = error.__cause__ or error
        if self.dialect.is_deadlock(cause):
            log.info("%s: chosen as a deadlock victim; retrying (%s)", self.name, error)
            return
        delay = breaker.failure(error)
        self._halt.wait(delay)


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
