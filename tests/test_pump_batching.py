"""The batching pump (``batch_size`` above 1) on real engines: a batch commits once, a failing message is
retried in place and moved alone, a failed write or a kill returns the whole batch, limits and arguments."""

from __future__ import annotations

import multiprocessing
import threading
from collections import Counter

import pytest
import workers
from test_pump import FAST, Recorder, fill

from airflow_provider_sqlqueue.transport import ConfigurationError, MessagePump, Transport
from airflow_provider_sqlqueue.transport.recoverability import CircuitBreakerSettings


@pytest.mark.parametrize("strategy", ["monitor", "adaptive", "fixed"])
def test_each_strategy_handles_every_message_exactly_once_in_batches(target, transport, strategy) -> None:
    transport.queue("error").create()
    queue = transport.queue("orders")
    queue.create()
    sent = fill(queue, 230)
    handler = Recorder()
    pump = MessagePump(queue, handler, max_concurrency=3, batch_size=25, strategy=strategy, **FAST)
    stats = pump.run(until_empty=True, timeout=60)
    assert handler.seen == Counter(sent)  # each exactly once
    assert stats.processed == 230 and stats.failed == 0 and queue.count() == 0
    assert stats.receives < 230 // 2  # many messages per receive transaction


def test_a_failing_message_is_retried_in_its_batch_then_moved_while_the_others_commit(
    target, transport: Transport
) -> None:
    error = transport.queue("error")
    error.create()
    out = transport.queue("out")
    out.create()
    queue = transport.queue("orders")
    queue.create()
    queue.send_batch([b"good1", b"bad", b"good2", b"good3"])
    calls: list[tuple[bytes, int]] = []
    lock = threading.Lock()

    def handler(message, context) -> None:
        with lock:
            calls.append((message.body, context.attempt))
        context.send("out", b"for " + message.body)
        if message.body == b"bad":
            raise ValueError("cannot handle bad")

    pump = MessagePump(queue, handler, batch_size=10, immediate_retries=2, **FAST)
    stats = pump.run(until_empty=True, timeout=30)
    assert [attempt for body, attempt in calls if body == b"bad"] == [1, 2, 3]  # retried in place
    assert sorted(body for body, _ in calls if body != b"bad") == [b"good1", b"good2", b"good3"]
    assert stats.receives - stats.empty_receives == 1  # one batch took all four
    assert stats.processed == 3 and stats.failed == 1 and stats.retried == 2
    with out.receive(max_messages=10) as batch:
        assert sorted(m.body for m in batch) == [b"for good1", b"for good2", b"for good3"]  # not bad's
    with error.receive(max_messages=10) as batch:
        [failed] = batch
    assert failed.body == b"bad"
    assert failed.headers["NServiceBus.FailedQ"] == str(transport.canonical(queue.address))
    assert failed.headers["NServiceBus.ExceptionInfo.Message"] == "cannot handle bad"
    assert queue.count() == 0 and len(pump.failures) == 0


def test_a_flaky_handler_in_a_batch_succeeds_on_a_later_attempt_and_sends_once(target, transport) -> None:
    transport.queue("error").create()
    out = transport.queue("out")
    out.create()
    queue = transport.queue("orders")
    queue.create()
    queue.send_batch([b"a", b"b"])
    attempts: Counter[bytes] = Counter()

    def handler(message, context) -> None:
        attempts[message.body] += 1
        context.send("out", b"shipped " + message.body)
        if message.body == b"a" and context.attempt == 1:
            raise RuntimeError("not yet")

    stats = MessagePump(queue, handler, batch_size=5, **FAST).run(until_empty=True, timeout=30)
    assert attempts == Counter({b"a": 2, b"b": 1})
    assert stats.processed == 2 and stats.retried == 1 and stats.failed == 0
    with out.receive(max_messages=10) as batch:
        assert sorted(m.body for m in batch) == [b"shipped a", b"shipped b"]


def test_a_failed_write_returns_the_whole_batch_and_its_message_reaches_the_error_queue(
    target, transport: Transport
) -> None:
    """A send to a queue that does not exist fails inside the batch's transaction: the batch rolls back
    (the others are handled again: at least once) and the failing message, once its retries are spent,
    goes to the error queue while the others commit once."""
    error = transport.queue("error")
    error.create()
    out = transport.queue("out")
    out.create()
    queue = transport.queue("orders")
    queue.create()
    queue.send_batch([b"good1", b"bad", b"good2"])

    def handler(message, context) -> None:
        context.send("nowhere" if message.body == b"bad" else "out", message.body)

    fast_breaker = CircuitBreakerSettings(time_to_trigger=30, armed_delay=0.05, triggered_delay=0.05)
    pump = MessagePump(
        queue, handler, batch_size=10, immediate_retries=1, circuit_breaker=fast_breaker, **FAST
    )
    stats = pump.run(until_empty=True, timeout=30)
    with out.receive(max_messages=10) as batch:
        assert sorted(m.body for m in batch) == [b"good1", b"good2"]  # committed once
    with error.receive(max_messages=10) as batch:
        assert [m.body for m in batch] == [b"bad"]
    assert stats.processed == 2 and stats.failed == 1 and queue.count() == 0


def test_max_messages_counts_messages_not_batches(target, transport: Transport) -> None:
    transport.queue("error").create()
    queue = transport.queue("limited")
    queue.create()
    fill(queue, 50)
    for strategy in ("monitor", "fixed", "adaptive"):
        handler = Recorder()
        pump = MessagePump(queue, handler, max_concurrency=4, batch_size=8, strategy=strategy, **FAST)
        stats = pump.run(max_messages=10, until_empty=False, timeout=30)
        assert stats.processed == 10 and len(handler.seen) == 10
    assert queue.count() == 20


def test_batch_size_is_checked(target, transport: Transport) -> None:
    queue = transport.queue("orders")
    for wrong in (0, 1001, True, "5", 2.0):
        with pytest.raises(ConfigurationError, match="batch_size"):
            MessagePump(queue, print, batch_size=wrong)


def test_a_batching_pump_killed_mid_batch_loses_nothing_and_returns_the_whole_batch(
    target, transport: Transport
) -> None:
    """Batches of 10, killed (SIGKILL) at the 25th message: the first two batches committed, the third
    (5 handled, 5 not) comes back whole, and a second pump handles exactly what was not committed."""
    transport.queue("error").create()
    queue = transport.queue("crash")
    queue.create()
    sent = [str(i) for i in queue.send_batch([f"m{n}".encode() for n in range(50)])]
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        hanging, seen = manager.Event(), manager.list()
        child = context.Process(
            target=workers.pump_batches_then_hang,
            args=(target.url, target.schema, "crash", 25, hanging, seen),
        )
        child.start()
        try:
            assert hanging.wait(60), "the child pump never reached the 25th message"
        finally:
            child.kill()
            child.join(10)
        assert child.exitcode == -9
        seen_by_child = list(seen)
    assert seen_by_child == sent[:25]
    handler = Recorder()
    stats = MessagePump(queue, handler, batch_size=10, **FAST).run(until_empty=True, timeout=60)
    handled_after = {str(i) for i in handler.seen}
    assert handled_after == set(sent[20:])  # the killed batch whole, and everything after it
    assert sorted(handler.seen.values()) == [1] * 30 and stats.processed == 30
    assert queue.count() == 0
