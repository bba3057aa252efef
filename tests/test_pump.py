"""The message pump on real engines: the three strategies, retries to the error queue, audit, stopping,
the circuit breaker's timing and the pool-size warning."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
import rawsql

from airflow_provider_sqlqueue.transport import (
    ConfigurationError,
    MessagePump,
    OutgoingMessage,
    TableQueue,
    TransientDatabaseError,
    Transport,
    load_handler,
    open_transport,
)
from airflow_provider_sqlqueue.transport.headers import decode_headers, parse_timestamp
from airflow_provider_sqlqueue.transport.lease import shared_cursor
from airflow_provider_sqlqueue.transport.recoverability import (
    CircuitBreaker,
    CircuitBreakerSettings,
    FailureStore,
)

FAST = {"idle_delay": 0.1}


def fill(queue: TableQueue, count: int) -> set[uuid.UUID]:
    sent: set[uuid.UUID] = set()
    for start in range(0, count, 1000):
        bodies = [f"m{n}".encode() for n in range(start, min(count, start + 1000))]
        sent |= set(queue.send_batch(bodies))
    return sent


class Recorder:
    """A handler that counts the messages it was called with."""

    def __init__(self, fail: set[bytes] | None = None, sleep: float = 0.0) -> None:
        self.seen: Counter[uuid.UUID] = Counter()
        self.bodies: list[bytes] = []
        self.attempts: list[int] = []
        self.fail = fail or set()
        self.sleep = sleep
        self.lock = threading.Lock()

    def __call__(self, message, context) -> None:
        with self.lock:
            self.seen[message.id] += 1
            self.bodies.append(message.body)
            self.attempts.append(context.attempt)
        if self.sleep:
            time.sleep(self.sleep)
        if message.body in self.fail:
            raise ValueError(f"cannot handle {message.body!r}")


class _CountingCursor:
    def __init__(self, cursor: Any, counter: ReceiveCounter, loan: _CountingConnection) -> None:
        self._cursor = cursor
        self._counter = counter
        self._loan = loan

    def execute(self, sql: str, params: Any = ()) -> Any:
        # One receive per loan: on PostgreSQL a pick after the low-water mark that comes back short is
        # topped up from the start of the queue in the same transaction, a second statement.
        if sql in self._counter.statements and not self._loan.received:
            self._loan.received = True
            with self._counter.lock:
                self._counter.count += 1
        return self._cursor.execute(sql, params)

    def close(self) -> None:
        pass  # the loan's shared cursor stays open for the next statement

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


class _CountingConnection:
    def __init__(self, connection: Any, counter: ReceiveCounter) -> None:
        self._connection = connection
        self._counter = counter
        self.received = False

    def cursor(self) -> _CountingCursor:
        # The loan's one cursor, as the transport's own statements use (shared_cursor): a new cursor per
        # statement leaves earlier results open, which FreeTDS refuses on one connection.
        return _CountingCursor(shared_cursor(self._connection), self._counter, self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)


class ReceiveCounter:
    """Counts the receives a transport runs on one queue: the connection loans that sent a receive."""

    def __init__(self, transport: Transport, queue: TableQueue) -> None:
        # the receive from the start of the queue, and on PostgreSQL the one after its low-water mark
        after = transport.dialect.optional_sql("receive_batch_after", queue.address)
        self.statements = {transport.dialect.sql("receive_batch", queue.address), *([after] if after else [])}
        self.count = 0
        self.lock = threading.Lock()


def count_receives(
    monkeypatch: pytest.MonkeyPatch, transport: Transport, queue: TableQueue
) -> ReceiveCounter:
    counter = ReceiveCounter(transport, queue)
    original = transport.connection

    @contextmanager
    def counting(address: Any = None) -> Iterator[Any]:
        with original(address) as connection:
            yield _CountingConnection(connection, counter)

    monkeypatch.setattr(transport, "connection", counting)
    return counter


@contextmanager
def fast_transport(target) -> Iterator[Transport]:
    """The target's database with SQLite's commits not flushed to disk (durability is not under test)."""
    url = target.url + ("?synchronous=normal" if target.engine == "sqlite" else "")
    with open_transport(url, default_schema=target.schema, pool_size=10, max_overflow=10) as transport:
        yield transport


# ---- the three strategies --------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["monitor", "adaptive", "fixed"])
def test_each_strategy_handles_every_message_exactly_once(target, strategy, monkeypatch) -> None:
    """10,000 messages on SQLite and PostgreSQL; 2,000 on Babelfish, whose receivers wait for each other
    (no READPAST): 10,000 took 30-70 s per strategy and driver there, which CI's hour cannot spare."""
    count = 2_000 if target.babelfish else 10_000
    with fast_transport(target) as transport:
        transport.queue("error").create()
        queue = transport.queue("work")
        queue.create()
        sent = fill(queue, count)
        counter = count_receives(monkeypatch, transport, queue)
        handler = Recorder()
        concurrency = 4 if target.engine == "sqlite" else 8
        pump = MessagePump(queue, handler, max_concurrency=concurrency, strategy=strategy, **FAST)
        stats = pump.run(until_empty=True, timeout=120)
        assert pump.stop_reason == "empty"
        assert set(handler.seen) == sent, "lost messages"
        assert [i for i, times in handler.seen.items() if times > 1] == [], "duplicates"
        assert stats.processed == count and stats.failed == 0 and queue.count() == 0
        assert counter.count == stats.receives
        if strategy == "monitor" and not target.babelfish:
            # The latch: no peek runs before the receives it started have taken their rows. (Babelfish's
            # peek also counts rows other receivers hold, so there it starts receives that come back empty.)
            assert counter.count <= count + stats.idle_rounds, stats
            assert stats.max_workers <= concurrency
        else:
            assert stats.max_workers == concurrency


def test_an_idle_monitor_peeks_while_polling_workers_storm(target) -> None:
    """The reference's pain point: idle polling workers issue empty receives; the monitor only peeks."""
    with target.open() as transport:
        transport.queue("error").create()
        queue = transport.queue("idle")
        queue.create()
        results = {}
        # Each pump runs until it has done what the assertions count (however long a loaded machine
        # takes), not for a fixed time: the monitor must reach its peeks without one receive.
        enough = {
            "monitor": lambda stats: stats.peeks >= 5,
            "fixed": lambda stats: stats.empty_receives >= 4 * 5,
        }
        for strategy in ("monitor", "fixed"):
            pump = MessagePump(queue, Recorder(), max_concurrency=4, strategy=strategy, **FAST)
            with pump:
                deadline = time.monotonic() + 120
                while not enough[strategy](pump.stats()) and time.monotonic() < deadline:
                    time.sleep(0.05)
            results[strategy] = pump.stats()
        assert results["monitor"].receives == 0 and results["monitor"].peeks >= 5
        assert results["fixed"].empty_receives >= 4 * 5


def test_monitor_receives_no_more_than_messages_plus_idle_rounds_while_messages_trickle_in(
    target, monkeypatch
) -> None:
    with target.open() as transport:
        transport.queue("error").create()
        queue = transport.queue("trickle")
        queue.create()
        counter = count_receives(monkeypatch, transport, queue)
        handler = Recorder(sleep=0.002)
        sent: set[uuid.UUID] = set()
        with MessagePump(queue, handler, max_concurrency=4, **FAST) as pump:
            for burst in range(12):
                sent |= set(queue.send_batch([f"b{burst}-{n}".encode() for n in range(burst * 5)]))
                time.sleep(0.07)
            deadline = time.monotonic() + 20
            while len(handler.seen) < len(sent) and time.monotonic() < deadline:
                time.sleep(0.05)
        stats = pump.stats()
        assert set(handler.seen) == sent
        assert counter.count == stats.receives
        if target.babelfish:
            # Babelfish's peek counts rows that other receivers hold (it ignores READPAST), so the monitor
            # starts receives that come back empty: the latch's bound is SQL Server's and PostgreSQL's.
            assert stats.empty_receives > 0 and stats.processed == len(sent)
        else:
            assert counter.count <= len(sent) + stats.idle_rounds, stats


def test_max_messages_stops_at_the_limit_and_leaves_the_rest(target, transport: Transport) -> None:
    transport.queue("error").create()
    queue = transport.queue("limited")
    queue.create()
    fill(queue, 50)
    for strategy in ("monitor", "fixed", "adaptive"):
        handler = Recorder()
        stats = MessagePump(queue, handler, max_concurrency=4, strategy=strategy, **FAST).run(max_messages=10)
        assert stats.processed == 10 and len(handler.seen) == 10
    assert queue.count() == 20


# ---- failures, retries, error queue, audit ----------------------------------------------------------
def test_failing_message_is_retried_then_moved_to_the_error_queue_with_failure_headers(
    target, transport: Transport
) -> None:
    error = transport.queue("error")
    error.create()
    audit = transport.queue("audit")
    audit.create()
    queue = transport.queue("orders")
    queue.create()
    queue.send(b"bad", headers={"k": "v"})
    good = queue.send_batch([b"good1", b"good2"])
    handler = Recorder(fail={b"bad"})
    pump = MessagePump(queue, handler, immediate_retries=2, audit_queue="audit", **FAST)
    stats = pump.run(until_empty=True, timeout=30)
    assert handler.bodies.count(b"bad") == 3  # the first attempt and two immediate retries
    assert stats.processed == 2 and stats.failed == 1 and stats.retried == 3 and stats.audited == 2
    with error.receive(max_messages=10) as batch:
        [failed] = batch
    assert failed.body == b"bad" and failed.headers["k"] == "v"
    assert failed.headers["NServiceBus.FailedQ"] == str(queue.transport.canonical(queue.address))
    assert failed.headers["NServiceBus.ExceptionInfo.ExceptionType"] == "ValueError"
    assert failed.headers["NServiceBus.ExceptionInfo.Message"] == "cannot handle b'bad'"
    assert "Traceback" in failed.headers["NServiceBus.ExceptionInfo.StackTrace"]
    assert failed.headers["NServiceBus.ExceptionInfo.Source"] == __name__
    assert parse_timestamp(failed.headers["NServiceBus.TimeOfFailure"])
    assert failed.headers["NServiceBus.ProcessingMachine"]
    with audit.receive(max_messages=10) as batch:
        assert sorted(uuid.UUID(m.message_id) for m in batch) == sorted(good)
        assert not {m.id for m in batch} & set(good)  # each copy is a new row, as the reference sends it
        assert all(m.headers["NServiceBus.ProcessingEndpoint"] for m in batch)
        assert parse_timestamp(batch[0].headers["NServiceBus.ProcessingEnded"])
    assert queue.count() == 0
    assert len(pump.failures) == 0


def test_a_flaky_handler_succeeds_on_a_later_attempt_and_its_earlier_sends_were_rolled_back(
    target, transport: Transport
) -> None:
    transport.queue("error").create()
    out = transport.queue("out")
    out.create()
    queue = transport.queue("orders")
    queue.create()
    queue.send(b"order")
    attempts: list[int] = []

    def handler(message, context) -> None:
        attempts.append(context.attempt)
        context.send("out", b"shipped " + message.body)
        if context.attempt < 3:
            raise RuntimeError("not yet")

    stats = MessagePump(queue, handler, immediate_retries=5, **FAST).run(timeout=30)
    assert attempts == [1, 2, 3]
    assert stats.processed == 1 and stats.retried == 2 and stats.failed == 0
    with out.receive(max_messages=10) as batch:
        assert [m.body for m in batch] == [b"shipped order"]  # the sends of failed attempts rolled back
        assert batch[0].headers["NServiceBus.RelatedTo"]


def test_a_handlers_send_continues_the_conversation_and_may_not_override_it(
    target, transport: Transport
) -> None:
    """As NServiceBus Core: a send from a handler carries the incoming ConversationId; a header naming
    another one is refused (Core starts a new conversation only through its own send option)."""
    transport.queue("error").create()
    out = transport.queue("out")
    out.create()
    queue = transport.queue("orders")
    queue.create()
    queue.send_batch([b"same", b"other"])
    incoming: dict[bytes, str] = {}
    refusals: list[str] = []

    def handler(message, context) -> None:
        conversation = incoming[message.body] = message.headers["NServiceBus.ConversationId"]
        if message.body == b"same":
            context.send("out", b"continued", headers={"NServiceBus.ConversationId": conversation})
            return
        try:
            context.send("out", b"hijacked", headers={"NServiceBus.ConversationId": "another"})
        except ConfigurationError as error:
            refusals.append(str(error))

    stats = MessagePump(queue, handler, immediate_retries=0, **FAST).run(timeout=30)
    assert stats.processed == 2 and stats.failed == 0
    sent = {row[2]: decode_headers(row[1]) for row in rawsql.all_rows(out)}
    assert (
        list(sent) == [b"continued"] and sent[b"continued"]["NServiceBus.ConversationId"] == incoming[b"same"]
    )
    [refusal] = refusals
    assert "another" in refusal and "ConversationId" in refusal and "new conversation" in refusal


def test_transaction_mode_none_moves_a_failed_message_to_the_error_queue_after_one_attempt(
    target, transport: Transport
) -> None:
    """Mode ``none`` has no transaction to put the message back, so no immediate retries: the reference
    calls its error handling once, and the message goes to the error queue with the failure headers."""
    error = transport.queue("error")
    error.create()
    queue = transport.queue("orders")
    queue.create()
    queue.send_batch([b"bad", b"good"])
    handler = Recorder(fail={b"bad"})
    pump = MessagePump(queue, handler, transaction_mode="none", immediate_retries=3, **FAST)
    stats = pump.run(timeout=30)
    assert handler.bodies == [b"bad", b"good"] and handler.attempts == [1, 1]
    assert (stats.failed, stats.retried, stats.processed) == (1, 0, 1)
    with error.receive(max_messages=10) as batch:
        [failed] = batch
    assert failed.body == b"bad"
    assert failed.headers["NServiceBus.FailedQ"] == str(transport.canonical(queue.address))
    assert failed.headers["NServiceBus.ExceptionInfo.Message"] == "cannot handle b'bad'"
    assert queue.count() == 0 and len(pump.failures) == 0


def test_expired_and_unreadable_rows_never_reach_the_handler(target, transport: Transport) -> None:
    error = transport.queue("error")
    error.create()
    queue = transport.queue("orders")
    queue.create()
    queue.send(OutgoingMessage(b"old", time_to_be_received=timedelta(milliseconds=1)))
    rawsql.insert_foreign_row(queue, "<corrupted headers")
    queue.send(b"fine")
    time.sleep(0.05)
    handler = Recorder()
    stats = MessagePump(queue, handler, **FAST).run(timeout=30)
    assert handler.bodies == [b"fine"]
    assert (stats.processed, stats.expired, stats.poisoned) == (1, 1, 1)
    assert [row[1] for row in rawsql.all_rows(error)] == ["<corrupted headers"]


# ---- stopping ----------------------------------------------------------------------------------------
def test_stop_lets_running_handlers_finish(target, transport: Transport) -> None:
    transport.queue("error").create()
    queue = transport.queue("orders")
    queue.create()
    queue.send_batch([b"a", b"b"])
    entered = threading.Event()

    def slow(message) -> None:
        entered.set()
        time.sleep(0.4)

    pump = MessagePump(queue, slow, **FAST).start()
    assert entered.wait(10)
    assert pump.stop(timeout=5) is True
    stats = pump.stats()
    assert stats.processed == 1 and stats.abandoned == 0
    assert queue.count() == 1  # no new receive after the stop


def test_handlers_still_running_after_the_stop_timeout_roll_back(target, transport: Transport) -> None:
    transport.queue("error").create()
    queue = transport.queue("orders")
    queue.create()
    sent = queue.send(b"slow")
    entered, release = threading.Event(), threading.Event()

    def blocked(message) -> None:
        entered.set()
        release.wait(10)

    pump = MessagePump(queue, blocked, **FAST).start()
    assert entered.wait(10)
    started = time.monotonic()
    assert pump.stop(timeout=0.2) is False
    assert time.monotonic() - started < 2
    release.set()
    deadline = time.monotonic() + 10
    while pump.in_flight and time.monotonic() < deadline:
        time.sleep(0.02)
    stats = pump.stats()
    assert stats.processed == 0 and stats.abandoned == 1
    with queue.receive() as batch:
        assert [m.id for m in batch] == [sent]  # rolled back: received again


# ---- configuration ---------------------------------------------------------------------------------
def test_pool_smaller_than_concurrency_plus_sends_is_warned_about(target, caplog) -> None:
    with target.open(pool_size=2, max_overflow=0) as transport:
        transport.queue("error").create()
        queue = transport.queue("orders")
        queue.create()
        pump = MessagePump(queue, Recorder(), max_concurrency=4, transaction_mode="receive_only", **FAST)
        assert pump.required_connections() == 4 + 1 + 4
        with caplog.at_level(logging.WARNING, logger="airflow_provider_sqlqueue.transport.pump"), pump:
            pass
    assert "can use 9 database connections at once" in caplog.text and "holds 2" in caplog.text


def test_pump_arguments_are_checked(target, transport: Transport) -> None:
    queue = transport.queue("orders")
    with pytest.raises(ConfigurationError, match="idle_delay"):
        MessagePump(queue, print, idle_delay=0.05)
    with pytest.raises(ConfigurationError, match="strategy"):
        MessagePump(queue, print, strategy="greedy")
    with pytest.raises(ConfigurationError, match="max_concurrency"):
        MessagePump(queue, print, max_concurrency=0)
    with pytest.raises(ConfigurationError, match="error queue"):
        MessagePump(transport.queue("orders", error_queue=None), print)


def test_handlers_load_from_dotted_paths() -> None:
    assert load_handler("json:dumps") is load_handler("json.dumps")
    assert load_handler("os.path:join") is load_handler("os.path.join")
    for bad in ("json:nope", "no_such_module_xyz:f", "json", ""):
        with pytest.raises(ConfigurationError):
            load_handler(bad)


# ---- the circuit breaker -----------------------------------------------------------------------------
def test_circuit_breaker_arms_backs_off_triggers_once_and_disarms() -> None:
    fired: list[tuple[float, str]] = []
    settings = CircuitBreakerSettings(time_to_trigger=0.3, armed_delay=0.01, triggered_delay=0.05)
    breaker = CircuitBreaker(
        "Failed to peek q", settings, lambda name, error: fired.append((time.monotonic(), name))
    )
    started = time.monotonic()
    assert breaker.failure(RuntimeError("down")) == 0.01 and breaker.armed and not breaker.triggered
    time.sleep(0.2)
    assert breaker.failure(RuntimeError("down")) == 0.01 and not fired
    time.sleep(0.2)
    assert breaker.triggered and len(fired) == 1 and fired[0][0] - started >= 0.3
    assert breaker.failure(RuntimeError("down")) == 0.05
    breaker.success()
    assert not breaker.armed and not breaker.triggered
    time.sleep(0.35)
    assert len(fired) == 1
    breaker.failure(RuntimeError("again"))
    breaker.success()  # disarmed before the trigger time: no critical error
    time.sleep(0.35)
    assert len(fired) == 1


def test_deadlocks_are_retried_without_counting_and_other_failures_count(
    target, transport: Transport, monkeypatch
) -> None:
    transport.queue("error").create()
    queue = transport.queue("orders")
    queue.create()
    queue.send_batch([b"a", b"b"])
    failures = iter(["deadlock victim", "deadlock victim", "connection lost"])
    pump = MessagePump(
        queue,
        Recorder(),
        circuit_breaker=CircuitBreakerSettings(time_to_trigger=30, armed_delay=0.01, triggered_delay=0.01),
        **FAST,
    )
    original = TableQueue.receive

    def flaky_receive(self, *args, **kwargs):
        reason = next(failures, None)
        if reason is not None:
            raise TransientDatabaseError(reason) from RuntimeError(reason)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(TableQueue, "receive", flaky_receive)
    monkeypatch.setattr(type(transport.dialect), "is_deadlock", lambda self, error: "deadlock" in str(error))
    stats = pump.run(timeout=30)
    assert stats.processed == 2
    assert pump.receive_breaker.failures == 1  # only the lost connection counted


def test_failure_store_keeps_the_most_recent_ids() -> None:
    store = FailureStore(capacity=2)
    ids = [uuid.uuid4() for _ in range(3)]
    for message_id in ids:
        store.record(message_id, ValueError("x"))
    assert store.record(ids[2], ValueError("y")) == 2
    assert store.get(ids[0]) is None and len(store) == 2
