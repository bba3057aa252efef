"""The pump's strategies by the reference's rules, and transaction mode ``none``.

The adaptive strategy's parts (the ramp-up controller, the back-off, the slow-handler watch) are driven
directly with scripted receives and a clock the test moves; each rule also has one run of the pump on the
real engines. Nothing here waits on wall time beyond a generous deadline for something to happen.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable

import pytest

from airflow_provider_sqlqueue.transport import ConfigurationError, MessagePump, Transport
from airflow_provider_sqlqueue.transport.pump.pacing import BoundedBackOff, MessageBudget, MonitorRound
from airflow_provider_sqlqueue.transport.pump.strategy import (
    AdaptiveWorkers,
    RampUpController,
    SlowHandlerWatch,
)

PUMP_LOGGER = "airflow_provider_sqlqueue.transport.pump"
FAST = {"idle_delay": 0.1}


def eventually(condition: Callable[[], bool], seconds: float = 20.0) -> bool:
    """Poll ``condition`` until it holds or a generous deadline passes (a liveness wait, not a timing)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# ---- the adaptive strategy's rules, driven directly ------------------------------------------------
def test_a_worker_ramps_up_after_more_than_5_messages_in_a_row_and_retires_at_7_empty_receives() -> None:
    controller = RampUpController()
    assert (controller.success_threshold, controller.failure_threshold) == (5, 7)
    for _ in range(5):
        controller.record(True)
        assert not controller.too_much_work()
    controller.record(True)
    assert controller.too_much_work()  # the 6th message in a row: start another worker
    assert not controller.too_much_work()  # once: the counters started over
    for _ in range(6):
        controller.record(False)
        assert controller.has_enough_work
    controller.record(False)
    assert not controller.has_enough_work  # the 7th empty receive in a row
    controller.record(True)
    assert controller.has_enough_work  # a message resets the failures
    for _ in range(20):  # alternating never crosses either threshold
        controller.record(False)
        controller.record(True)
        assert controller.has_enough_work and not controller.too_much_work()
    with pytest.raises(ConfigurationError, match="failure_threshold"):
        RampUpController(failure_threshold=0)


def test_adaptive_workers_stay_between_one_and_the_limit() -> None:
    workers = AdaptiveWorkers(2)
    assert [workers.join(), workers.join(), workers.join()] == [1, 2, None]
    assert workers.retire() and not workers.retire()  # the last one keeps polling
    assert (workers.count, workers.most) == (1, 2)
    workers.leave()
    assert workers.count == 0


def test_back_off_doubles_from_50_ms_to_the_idle_delay_and_starts_over_after_a_message() -> None:
    waited: list[float] = []
    back_off = BoundedBackOff(1.0, waited.append)
    delays = [back_off.after(False) for _ in range(7)]
    assert delays == waited == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert back_off.after(True) is None and len(waited) == 7  # no wait after a message
    assert back_off.after(False) == 0.05
    short = BoundedBackOff(0.3, waited.append)
    assert [short.after(False) for _ in range(5)] == [0.05, 0.1, 0.2, 0.3, 0.3]


def test_a_receive_running_past_5_s_is_reported_once() -> None:
    now = [100.0]
    watch = SlowHandlerWatch(clock=lambda: now[0])
    assert watch.threshold == 5.0 and watch.check_interval == 1.0
    watch.begin("worker 1")
    now[0] = 104.9
    assert watch.overdue() == 0
    now[0] = 105.0
    assert watch.overdue() == 1
    now[0] = 130.0
    assert watch.overdue() == 0  # one more worker per slow message, not one per check
    watch.end("worker 1")
    watch.begin("worker 1")  # its next message
    watch.begin("worker 2")
    now[0] = 134.0
    assert watch.overdue() == 0
    watch.end("worker 2")  # finished in time
    now[0] = 135.0
    assert watch.overdue() == 1
    with pytest.raises(ConfigurationError, match="slow_handler_threshold"):
        SlowHandlerWatch(0)


# ---- the adaptive strategy's rules on the engines --------------------------------------------------
def adaptive_pump(transport: Transport, handler: Callable[..., None], **options) -> MessagePump:
    transport.queue("error").create()
    queue = transport.queue("adaptive")
    queue.create()
    return MessagePump(queue, handler, strategy="adaptive", **{**FAST, **options})


def worker_threads(pump: MessagePump) -> int:
    return sum(1 for thread in pump._threads if thread.is_alive() and " worker " in thread.name)


def test_adaptive_ramps_up_under_load_and_shrinks_to_one_worker_after_7_empty_receives_each(
    target, transport: Transport, caplog
) -> None:
    handled: list[bytes] = []
    pump = adaptive_pump(transport, lambda message: handled.append(message.body), max_concurrency=3)
    pump.queue.send_batch([f"m{n}".encode() for n in range(60)])
    with caplog.at_level(logging.DEBUG, logger=PUMP_LOGGER), pump:
        assert eventually(lambda: len(handled) == 60)
        busiest = pump.stats().max_workers
        assert eventually(lambda: pump.stats().workers == 1 and worker_threads(pump) == 1)
    assert sorted(handled) == sorted(f"m{n}".encode() for n in range(60))
    assert busiest == 3
    retirements = [r.getMessage() for r in caplog.records if "retiring an adaptive worker" in r.getMessage()]
    assert len(retirements) >= 2 and all("after 7 empty receives" in line for line in retirements)


def test_an_idle_adaptive_worker_backs_off_doubling_from_50_ms_to_the_idle_delay(
    target, transport: Transport, caplog
) -> None:
    pump = adaptive_pump(transport, print, max_concurrency=2, idle_delay=0.2)

    def back_offs() -> list[float]:
        found = (re.search(r"backed off ([0-9.]+) s", r.getMessage()) for r in list(caplog.records))
        return [float(match.group(1)) for match in found if match]

    with caplog.at_level(logging.DEBUG, logger=PUMP_LOGGER), pump:
        assert eventually(lambda: len(back_offs()) >= 9)
    # Past the 7th empty receive the last worker stays, and keeps its backed-off pace.
    assert back_offs()[:9] == [0.05, 0.1, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2]
    assert pump.stats().max_workers == 1


def test_a_handler_running_past_the_slow_threshold_starts_another_worker(
    target, transport: Transport
) -> None:
    next_handled = threading.Event()
    released: list[bool] = []

    def handler(message) -> None:
        if message.body == b"slow":
            released.append(next_handled.wait(20))
        else:
            next_handled.set()

    # SQLite's receive holds the one write lock until the handler ends, and Babelfish's receivers wait for a
    # row another holds (docs/dba.md): there the slow message's receive commits before its handler runs.
    mode = "none" if target.engine == "sqlite" or target.babelfish else None
    pump = adaptive_pump(
        transport, handler, max_concurrency=2, slow_handler_threshold=0.2, transaction_mode=mode
    )
    pump.queue.send_batch([b"slow", b"next"])
    stats = pump.run(max_messages=2, timeout=60)
    assert released == [True]  # "next" was handled while "slow" still ran: by a second worker
    assert stats.processed == 2 and stats.max_workers == 2


# ---- idle_delay -------------------------------------------------------------------------------------
def test_an_idle_delay_above_10_s_warns_and_is_kept(target, transport: Transport, caplog) -> None:
    queue = transport.queue("orders")
    with caplog.at_level(logging.WARNING, logger=PUMP_LOGGER):
        pump = MessagePump(queue, print, idle_delay=30)
    assert pump.idle_delay == 30.0
    assert "idle_delay of 30 s is above the recommended 0.1 to 10 s" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=PUMP_LOGGER):
        MessagePump(queue, print, idle_delay=10)
    assert caplog.text == ""
    for refused in (0.05, 0, -1, math.inf, math.nan, 10**400):
        with pytest.raises(ConfigurationError, match="idle_delay"):
            MessagePump(queue, print, idle_delay=refused)


def test_a_monitor_round_stranded_behind_the_stop_signals_releases_the_monitor_when_the_pump_halts() -> None:
    """stop() queues one exit signal per worker; a round the monitor queues after them is never run, so its
    receive never reports back. Waiting for it held the monitor (and stop()'s join) for the whole stop
    timeout, 30 s by default."""
    stranded = MonitorRound(allowed=1)
    assert stranded.take(MessageBudget(None))
    halt = threading.Event()
    monitor = threading.Thread(target=stranded.wait, args=(halt.is_set,), daemon=True)
    monitor.start()
    monitor.join(0.3)
    assert monitor.is_alive(), "the round's receive has not run: the monitor waits for it"
    halt.set()
    monitor.join(10)
    assert not monitor.is_alive(), "a halted pump's monitor must stop waiting for a round nobody runs"
