"""The pump's three concurrency models as policies over its one receive path: the seeds' monitor (peek,
then hand out that many receives to the free slots), and the polling workers of the fixed and the adaptive
strategies (one worker loop; the adaptive ramp-up controller, the workers' count and the slow-handler
watch decide how many loop).

Each policy only decides how many receives run and when; what happens to one receive is the pump's
(:meth:`~.message_pump.MessagePump.receive_one`, over :mod:`.receive` and :mod:`.processing`).

The adaptive strategy follows the released 2.1/2.2 code of the reference (NServiceBus.SqlServer tags 2.1.0
to 2.2.6: ``AdaptiveExecutor``, ``AdaptivePollingReceiver``, ``ReceiveRampUpController``, ``TaskTracker``,
``ExecutorTaskState``): one ramp-up controller per receive thread, ramp-up after more than 5 consecutive
successes, retirement at 7 consecutive failures, and one more thread when a receive runs longer than 5 s.
The back-off on empty receives is :class:`~.pacing.BoundedBackOff`. What each strategy does is described in
:mod:`airflow_provider_sqlqueue.transport.pump` and docs/concurrency.md.
"""

from __future__ import annotations

import logging
import math
import queue as queue_module
import threading
import time
from collections.abc import Callable, Hashable
from enum import Enum
from typing import TYPE_CHECKING, Protocol

from ...model.errors import ConfigurationError
from .pacing import BoundedBackOff, MonitorRound
from .processing import CONSUMED, EMPTY, ERROR, MESSAGE, SKIPPED

if TYPE_CHECKING:
    from .roles import StrategyPump

__all__ = [
    "AdaptiveWorkers",
    "ConcurrencyPolicy",
    "MonitorStrategy",
    "PollingStrategy",
    "RampUpController",
    "SlowHandlerWatch",
    "Strategy",
]

# The log lines keep the name they had before the split: airflow_provider_sqlqueue.transport.pump.
log = logging.getLogger(__package__)

# The reference's AdaptivePollingReceiver constants.
MINIMUM_CONSECUTIVE_SUCCESSES = 5
MAXIMUM_CONSECUTIVE_FAILURES = 7
SLOW_HANDLER_SECONDS = 5.0


class Strategy(str, Enum):
    """How a pump runs its receives."""

    MONITOR = "monitor"
    ADAPTIVE = "adaptive"
    FIXED = "fixed"


class ConcurrencyPolicy(Protocol):
    """What the pump asks of its strategy: start its threads, let them go at a stop, say how many run."""

    own_connections: int  # pooled connections the policy holds besides the receives' (the monitor's peek)

    def start(self) -> None: ...

    def release(self) -> None:
        """Wake threads that wait for work so they can end (the pump has halted)."""

    def running_workers(self) -> int: ...


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be a positive int, not {value!r}")
    return value


class RampUpController:
    """One polling worker's ramp-up controller (the reference's ``ReceiveRampUpController``).

    Each adaptive worker has its own, so its counts are its own receives only. A receive that found a
    message increments *consecutive successes* and resets *consecutive failures*; an empty receive does the
    opposite. Before each receive the worker asks :meth:`too_much_work`: more than ``success_threshold``
    successes in a row answer True (start one more worker) and reset both counters. :attr:`has_enough_work`
    turns False once ``failure_threshold`` empty receives came in a row: the worker retires, unless it is
    the last one (see :class:`AdaptiveWorkers`).
    """

    def __init__(
        self,
        *,
        success_threshold: int = MINIMUM_CONSECUTIVE_SUCCESSES,
        failure_threshold: int = MAXIMUM_CONSECUTIVE_FAILURES,
    ) -> None:
        self.success_threshold = _positive_int("success_threshold", success_threshold)
        self.failure_threshold = _positive_int("failure_threshold", failure_threshold)
        self.consecutive_successes = 0
        self.consecutive_failures = 0

    def record(self, received: bool) -> None:
        """Count one receive: True when it found a message."""
        if received:
            self.consecutive_successes += 1
            self.consecutive_failures = 0
        else:
            self.consecutive_failures += 1
            self.consecutive_successes = 0

    @property
    def has_enough_work(self) -> bool:
        return self.consecutive_failures < self.failure_threshold

    def too_much_work(self) -> bool:
        """True (once, then the counters restart) when this worker should start another."""
        if self.consecutive_successes > self.success_threshold:
            self.reset()
            return True
        return False

    def reset(self) -> None:
        self.consecutive_successes = 0
        self.consecutive_failures = 0


class AdaptiveWorkers:
    """How many polling workers run: at most ``max_workers``, never fewer than one while running.

    The reference's ``TaskTracker`` refuses a new receive thread at the limit and restarts one at once when
    the last one exits; here the last worker simply declines to retire, which has the same effect and keeps
    its back-off.
    """

    def __init__(self, max_workers: int) -> None:
        self.max_workers = _positive_int("max_workers", max_workers)
        self.count = 0
        self.most = 0
        self._lock = threading.Lock()

    def join(self) -> int | None:
        """Count one more worker and return its number, or None at the limit."""
        with self._lock:
            if self.count >= self.max_workers:
                return None
            self.count += 1
            self.most = max(self.most, self.count)
            return self.count

    def retire(self) -> bool:
        """Count one worker fewer if another remains; False for the last one, which keeps polling."""
        with self._lock:
            if self.count <= 1:
                return False
            self.count -= 1
            return True

    def leave(self) -> None:
        """A worker ended for another reason (the pump stopped, the run is done)."""
        with self._lock:
            self.count -= 1


class SlowHandlerWatch:
    """Which receives have run longer than ``threshold`` seconds: each starts one more worker, once.

    The reference's ``AdaptiveExecutor`` checks every receive thread each 5 s and starts another thread for
    one whose current message has been running that long (``ExecutorTaskState``), so a slow handler does
    not hold the whole queue up. Here the time counts from the start of the receive to the end of its
    handling (the back-off after an empty receive is not work). ``clock`` is injectable so the rule can be
    driven without waiting.
    """

    def __init__(
        self, threshold: float = SLOW_HANDLER_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            raise ConfigurationError(f"slow_handler_threshold must be seconds, not {threshold!r}")
        if not 0 < threshold < math.inf:
            raise ConfigurationError(f"slow_handler_threshold must be positive seconds, not {threshold}")
        self.threshold = float(threshold)
        self._clock = clock
        self._started: dict[Hashable, float] = {}
        self._reported: set[Hashable] = set()
        self._lock = threading.Lock()

    @property
    def check_interval(self) -> float:
        """How often the pump asks :meth:`overdue`: a fifth of the threshold, so a slow handler is noticed
        at most 20 % late."""
        return max(0.01, self.threshold / 5)

    def begin(self, worker: Hashable) -> None:
        with self._lock:
            self._started[worker] = self._clock()
            self._reported.discard(worker)

    def end(self, worker: Hashable) -> None:
        with self._lock:
            self._started.pop(worker, None)
            self._reported.discard(worker)

    def overdue(self) -> int:
        """How many running receives crossed the threshold since the last call (each counts once)."""
        now = self._clock()
        with self._lock:
            late = [
                worker
                for worker, started in self._started.items()
                if worker not in self._reported and now - started >= self.threshold
            ]
            self._reported.update(late)
            return len(late)


class PollingStrategy:
    """The polling workers of the fixed and the adaptive strategies: one worker loop over the pump's
    receive (reserve the budget, receive, settle, wait after an empty receive) and two policies.

    Fixed (``adaptive=False``): ``max_concurrency`` workers from the start, each waiting the idle delay
    after an empty receive, as the seeds' polling workers do. Adaptive: 2.1's ``AdaptiveExecutor`` over
    the pump's receives. Each worker loops as a 2.1 receive thread: retire after ``failure_threshold``
    empty receives in a row (unless it is the last), start another worker after more than
    ``success_threshold`` messages in a row, back off after an empty receive (:class:`BoundedBackOff`). A
    watch thread starts one more worker for each receive running past the slow-handler threshold.
    """

    def __init__(
        self,
        pump: StrategyPump,
        *,
        adaptive: bool,
        success_threshold: int = MINIMUM_CONSECUTIVE_SUCCESSES,
        failure_threshold: int = MAXIMUM_CONSECUTIVE_FAILURES,
        slow_handler_threshold: float = SLOW_HANDLER_SECONDS,
    ) -> None:
        RampUpController(success_threshold=success_threshold, failure_threshold=failure_threshold)  # checks
        self.adaptive = adaptive
        self.success_threshold = success_threshold
        self.failure_threshold = failure_threshold
        self.workers = AdaptiveWorkers(pump.max_concurrency)
        self.slow_handlers = SlowHandlerWatch(slow_handler_threshold)
        self.own_connections = 0
        self._pump = pump

    def running_workers(self) -> int:
        return self.workers.count

    def release(self) -> None:
        """Nothing to wake: each worker checks the halt before its next receive."""

    def start(self) -> None:
        if not self.adaptive:
            for _ in range(self._pump.max_concurrency):
                self.add_worker()
            return
        self.add_worker()
        self._pump.spawn(self._watch_slow_handlers, f"{self._pump.name} slow-handler watch")

    def add_worker(self, why: str = "") -> None:
        pump = self._pump
        if pump.halted:
            return
        number = self.workers.join()
        if number is None:
            return
        pump.note_workers(number)
        if why:
            log.debug("%s: adding adaptive worker %d: %s", pump.name, number, why)
        pump.spawn(self._worker_loop, f"{pump.name} worker {number}")

    def _worker_loop(self) -> None:
        pump = self._pump
        controller = (
            RampUpController(
                success_threshold=self.success_threshold, failure_threshold=self.failure_threshold
            )
            if self.adaptive
            else None
        )
        back_off = BoundedBackOff(pump.idle_delay, pump.idle_sleep) if self.adaptive else None
        token = object()
        retired = False
        try:
            while not pump.halted:
                if controller is not None:
                    if not controller.has_enough_work:
                        retired = self.workers.retire()
                        if retired:
                            log.debug(
                                "%s: retiring an adaptive worker after %d empty receives",
                                pump.name, controller.consecutive_failures,
                            )  # fmt: skip
                            return
                        controller.reset()  # the last worker keeps polling, at its backed-off pace
                    if controller.too_much_work():
                        self.add_worker(f"more than {self.success_threshold} messages in a row")
                if not pump.budget.reserve():
                    if pump.budget.exhausted:
                        return
                    pump.budget.wait(pump.idle_delay)
                    continue
                self.slow_handlers.begin(token)
                try:
                    outcome = pump.receive_one(size=pump.batch_size)
                finally:
                    self.slow_handlers.end(token)
                pump.settle(outcome)
                if outcome in (ERROR, SKIPPED):
                    continue
                received = outcome != EMPTY
                if controller is not None:
                    controller.record(received)
                if not received:
                    pump.counters.add("idle_rounds")
                    if pump.drained():
                        pump.finish("empty")
                        return
                if back_off is None:
                    if not received:
                        pump.idle_sleep(pump.idle_delay)
                    continue
                delay = back_off.after(received)
                if delay is not None:
                    log.debug("%s: empty receive; backed off %g s", pump.name, delay)
        finally:
            if not retired:
                self.workers.leave()

    def _watch_slow_handlers(self) -> None:
        pump = self._pump
        while not pump.wait_for_halt(self.slow_handlers.check_interval):
            for _ in range(self.slow_handlers.overdue()):
                self.add_worker(f"a handler has run longer than {self.slow_handlers.threshold:g} s")


class MonitorStrategy:
    """The seeds' monitor: one thread peeks the queue's depth and hands that many receives to
    ``max_concurrency`` task threads through a work queue, then waits until each handed-out receive has
    run its statement before it peeks again (:class:`~.pacing.MonitorRound`).

    A task whose receive found a message takes the round's next receive itself, so a busy queue costs one
    hand-off per round, not per message. While receiving keeps failing (the receive circuit breaker is
    triggered), a round probes with one receive. Its peeks feed the depth history.
    """

    def __init__(self, pump: StrategyPump) -> None:
        self.own_connections = 1  # the peek's
        self._pump = pump
        self._work: queue_module.SimpleQueue[MonitorRound | None] = queue_module.SimpleQueue()
        self._slots = threading.BoundedSemaphore(pump.max_concurrency)

    def start(self) -> None:
        pump = self._pump
        for number in range(pump.max_concurrency):
            pump.spawn(self._task_worker, f"{pump.name} task {number + 1}")
        pump.spawn(self._monitor_loop, f"{pump.name} monitor")

    def release(self) -> None:
        for _ in range(self._pump.max_concurrency):
            self._work.put(None)

    def running_workers(self) -> int:
        return self._pump.in_flight

    def _monitor_loop(self) -> None:
        """Peek, start up to that many receive tasks in the free slots, wait for their receives, repeat."""
        pump = self._pump
        while not pump.halted:
            flying = pump.in_flight
            try:
                pending = pump.queue.peek_estimate()
            except Exception as error:
                pump.database_failure(pump.peek_breaker, error)
                continue
            pump.counters.add("peeks")
            pump.peek_breaker.success()
            if pump.depth_sampler is not None:
                pump.depth_sampler.sample(pump.queue.address, pending, exact=False)
            if pump.receive_breaker.triggered:
                pending = min(pending, 1)  # probe with one receive while receiving keeps failing
            if pending <= 0:
                pump.counters.add("idle_rounds")
                if pump.until_empty and flying == 0:
                    pump.finish("empty")
                    return
                pump.idle_wait()
                continue
            per_task = self._batch_for(pending)
            current = MonitorRound(-(-pending // per_task), per_task)
            while current.allowed > 0 and not current.cancelled and not pump.halted:
                if not self._take_slot():
                    break
                if not current.take(pump.budget):
                    self._slots.release()
                    if current.allowed > 0 and not current.cancelled and not pump.budget.exhausted:
                        pump.budget.wait(pump.idle_delay)  # wait for reserved receives to settle
                    break
                self._work.put(current)
            current.wait(lambda: pump.halted)

    def _batch_for(self, pending: int) -> int:
        """A task's batch: the peek's messages spread over the slots, at most ``batch_size``."""
        pump = self._pump
        if pump.batch_size == 1:
            return 1
        return max(1, min(pump.batch_size, -(-pending // pump.max_concurrency)))

    def _take_slot(self) -> bool:
        while not self._pump.halted:
            if self._slots.acquire(timeout=0.05):
                return True
        return False

    def _task_worker(self) -> None:
        pump = self._pump
        while True:
            current = self._work.get()
            if current is None:
                return
            try:
                while True:
                    outcome = pump.receive_one(current.received, current.batch_size)
                    pump.settle(outcome)
                    if outcome not in (MESSAGE, CONSUMED) or pump.halted:
                        break
                    if not current.take(pump.budget):
                        break
            finally:
                self._slots.release()
