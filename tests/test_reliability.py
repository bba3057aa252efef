"""Nothing lost, nothing handed out twice: crashes, a database restart under load, competition at scale,
hostile payloads and rows from other systems. Real PostgreSQL and SQLite throughout."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import rawsql
import reliability_workers
import workers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from postgres_cluster import throwaway_postgres
from reliability_figures import counted

from airflow_provider_sqlqueue.transport import (
    HeaderFormatError,
    MessagePump,
    OutgoingMessage,
    TransientDatabaseError,
    Transport,
    open_transport,
)

pytest_plugins = ["reliability_figures"]  # the figures fixture


def drain_ids(queue, deadline_seconds: float = 60.0) -> list[str]:
    """Receive until the queue is empty and no receiver holds rows any more (killed clients' rows return
    once the server has noticed)."""
    received: list[str] = []
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline:
        try:
            with queue.receive(max_messages=100) as batch:
                received += [str(m.id) for m in batch]
                empty = not batch and not batch.expired and not batch.poisoned
        except TransientDatabaseError:
            time.sleep(0.1)
            continue
        if empty:
            if queue.count() == 0:
                return received
            time.sleep(0.1)
    raise AssertionError(f"queue did not drain in {deadline_seconds} s; {queue.count()} left")


@pytest.mark.slow
def test_consumers_killed_while_holding_messages_lose_nothing(target, transport: Transport, figures) -> None:
    queue = transport.queue("crash")
    queue.create()
    sent = {str(i) for i in queue.send_batch([f"m{n}".encode() for n in range(300)])}
    context = multiprocessing.get_context("spawn")
    manager = context.Manager()
    rng = random.Random(20)
    held_ids: list[str] = []
    kills = 0
    for round_number in range(20):
        held, ids = manager.Event(), manager.list()
        child = context.Process(
            target=workers.receive_and_hold,
            args=(target.url, target.schema, "crash", rng.randint(1, 10), held, ids),
        )
        child.start()
        if round_number % 4 == 3:
            time.sleep(rng.uniform(0.0, 0.3))  # somewhere during start-up or the receive itself
        else:
            assert held.wait(30), "the child never received"
            time.sleep(rng.uniform(0.0, 0.05))
        child.kill()  # SIGKILL: no rollback, no clean close
        child.join(10)
        assert child.exitcode == -9
        kills += 1
        held_ids += list(ids)
    manager.shutdown()
    assert held_ids, "no child was killed while it held messages"
    received = drain_ids(queue)
    counts = Counter(received)
    assert counts == Counter(sent)
    assert set(held_ids) <= set(received), "a message held by a killed consumer did not come back"
    figures(
        engine=target.engine,
        messages=len(sent),
        faults_injected=kills,
        messages_held_when_killed=len(held_ids),
        lost=len(sent - set(counts)),
        duplicated=sum(1 for n in counts.values() if n > 1),
    )


@pytest.mark.slow
def test_competition_at_scale(target, transport: Transport, figures) -> None:
    """Every process runs plain receivers AND a MessagePump on one queue; receivers roll back ~10% of their
    batches and the pumps' handlers fail ~5% of the time, on purpose."""
    # SQLite has one writer at a time, and Babelfish's receivers wait for each other (no READPAST): more
    # threads there only queue up on locks.
    if target.engine == "sqlite" or target.babelfish:
        processes, receive_threads, pump_concurrency, count = 4, 1, 1, 20_000
    else:
        processes, receive_threads, pump_concurrency, count = 4, 2, 2, 100_000
    queue = transport.queue("scale")
    queue.create()
    transport.queue("error").create()
    sent: set[str] = set()
    for start in range(0, count, 5000):
        sent.update(str(i) for i in queue.send_batch([b"m"] * min(5000, count - start)))
    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 5
    started = time.monotonic()
    with context.Pool(processes) as pool:
        results = pool.starmap(
            reliability_workers.compete,
            [
                (target.url, target.schema, "scale", receive_threads, pump_concurrency, 10, seed, start_at)
                for seed in range(processes)
            ],
        )
    seconds = time.monotonic() - started - 5
    plain = [i for result in results for i in result["received"]]
    pumped = [i for result in results for i in result["pumped"]]
    received = Counter(plain + pumped)
    duplicated = [i for i, n in received.items() if n > 1]
    assert duplicated == []
    assert set(received) == sent, f"lost {len(sent - set(received))}"
    assert queue.count() == 0 and rawsql.all_rows(transport.queue("error")) == []
    assert plain and pumped, "both kinds of consumer took part"
    rollbacks = sum(result["rollbacks"] for result in results)
    handler_failures = sum(result["handler_failures"] for result in results)
    assert rollbacks > 0 and handler_failures > 0
    figures(
        engine=target.engine,
        processes=processes,
        threads_per_process=receive_threads + pump_concurrency,
        messages=count,
        received_by_plain_receivers=len(plain),
        received_by_pumps=len(pumped),
        faults_injected=rollbacks + handler_failures,
        receives_rolled_back=rollbacks,
        handler_failures=handler_failures,
        lost=len(sent - set(received)),
        duplicated=len(duplicated),
        left=queue.count(),
        drain_seconds=round(seconds, 1),
    )


@pytest.mark.slow
def test_postgres_restart_under_load_loses_nothing_and_receivers_recover(figures) -> None:
    """Two sender processes, a MessagePump and a plain receiver run while the server stops and starts."""
    with throwaway_postgres(durable=True) as cluster:
        url = cluster.url()
        with open_transport(url, connect_timeout=2) as transport:
            queue = transport.queue("restart")
            queue.create()
            transport.queue("error").create()
            context = multiprocessing.get_context("spawn")
            manager = context.Manager()
            acknowledged, unknown, send_errors = manager.list(), manager.list(), manager.list()
            stop = manager.Event()
            senders = [
                context.Process(
                    target=reliability_workers.send_until_stopped,
                    args=(url, None, "restart", acknowledged, unknown, send_errors, stop),
                )
                for _ in range(2)
            ]
            for sender in senders:
                sender.start()
            # Consumers record what they took in the receive's own transaction (a message to "done"), so a
            # commit lost in the outage counts exactly as the database decided.
            done = transport.queue("done")
            done.create()
            pumped: list[float] = []
            critical: list[str] = []

            def handler(message, context) -> None:
                context.send("done", str(message.id).encode())
                pumped.append(time.monotonic())

            pump = MessagePump(
                queue,
                handler,
                max_concurrency=2,
                idle_delay=0.1,
                on_critical_error=lambda message, error: critical.append(message),
            )
            received: list[str] = []
            receiver_errors: list[str] = []
            stop_receiving = threading.Event()

            def receive_loop() -> None:
                while not stop_receiving.is_set():
                    try:
                        with queue.receive(max_messages=20) as batch:
                            ids = [str(m.id) for m in batch]
                            if ids:
                                batch.send(done, ",".join(ids).encode())
                        if not ids:
                            time.sleep(0.02)
                    except TransientDatabaseError as error:
                        receiver_errors.append(str(error))
                        time.sleep(0.1)

            receiver = threading.Thread(target=receive_loop)
            with pump:
                receiver.start()
                time.sleep(3)
                cluster.stop("fast")
                outage_started = time.monotonic()
                time.sleep(2)
                cluster.start()
                restarted = time.monotonic()
                outage = restarted - outage_started
                time.sleep(4)
                stop.set()
                for sender in senders:
                    sender.join(30)
                stop_receiving.set()
                receiver.join(30)
                received_after_restart = sum(1 for at in pumped if at > restarted)
                pump_stats = pump.stats()
            received += drain_ids(queue)  # what nobody took: nothing fails any more
            while True:
                with done.receive(max_messages=1000) as batch:
                    received += [i for m in batch for i in m.body.decode().split(",")]
                    if not batch:
                        break
            acknowledged, unknown, send_errors = list(acknowledged), list(unknown), list(send_errors)
            manager.shutdown()
    assert [sender.exitcode for sender in senders] == [0, 0], "a sender died of something not retryable"
    counts = Counter(received)
    duplicated = [i for i, n in counts.items() if n > 1]
    assert duplicated == [], "a message was handed out twice"
    lost = set(acknowledged) - set(counts)
    assert not lost, "an acknowledged send was lost"
    assert set(counts) <= set(acknowledged) | set(unknown)
    assert send_errors and unknown, "the senders should have felt the restart"
    for error in send_errors:  # the error is the retryable kind and says what happened
        assert error.startswith("TransientDatabaseError:") and len(error) > 30, error
    assert receiver_errors, "the restart should have been felt as transient errors"
    assert received_after_restart >= 10, "the pump did not recover after the restart"
    assert critical == [], "a 2 s outage is shorter than the circuit breaker's 30 s"
    assert len(acknowledged) > 100
    figures(
        engine="postgresql",
        messages=len(acknowledged) + len(unknown),
        acknowledged=len(acknowledged),
        unacknowledged=len(unknown),
        unacknowledged_but_stored=len(set(unknown) & set(counts)),
        faults_injected=1,
        outage_seconds=round(outage, 1),
        sender_errors=len(send_errors),
        receiver_errors=len(receiver_errors),
        pump_processed=pump_stats.processed,
        pump_processed_after_restart=received_after_restart,
        lost=len(lost),
        duplicated=len(duplicated),
        example_sender_error=send_errors[0][:200],
    )


@pytest.fixture
def untouched(transport: Transport, target) -> Iterator[None]:
    """A sentinel table and a bystander queue, each with a message, and the schema's table list: after the
    test every one of them is exactly as it was (hostile input touches only its own queue)."""
    sentinel = transport.queue("sentinel")
    sentinel.create()
    sentinel.send(b"canary", headers={"k": "v"})
    bystander = transport.queue("bystander")
    bystander.create()
    bystander.send(b"by", headers={"k": "w"})
    before = rawsql.user_tables(transport, target.schema)
    rows = {name: rawsql.all_rows(transport.queue(name)) for name in ("sentinel", "bystander")}
    yield
    assert rawsql.user_tables(transport, target.schema) == before
    assert {name: rawsql.all_rows(transport.queue(name)) for name in ("sentinel", "bystander")} == rows


HOSTILE_HEADERS = [
    {"huge": "x" * 1_000_000},
    {"many." + str(n): str(n) for n in range(5000)},
    {"": "empty name", " ": None},
    {"json text": '{"a": [1, 2, {"b": null}]}', "array text": "[1, 2]", "number text": "3.5e10"},
    {"nul": "a\x00b", "nul\x00name": "v", "quote": "'; DROP TABLE sentinel;--", "unicode": "名前 😀"},
    {"NServiceBus.MessageId": "not-a-uuid", "NServiceBus.TimeSent": "yesterday"},
]


@pytest.mark.parametrize(
    "headers",
    HOSTILE_HEADERS,
    ids=["1MB-value", "5000-headers", "odd-names", "json-in-strings", "nul-and-sql", "odd-standard"],
)
def test_large_and_odd_header_maps_round_trip(queue, untouched, headers: dict) -> None:
    sent = queue.send(b"x", headers=headers)
    with queue.receive() as batch:
        assert [m.id for m in batch] == [sent]
        for key, value in headers.items():
            assert batch[0].headers[key] == value
    assert queue.count() == 0


@pytest.mark.parametrize(
    "headers",
    [{"n": 1}, {"nested": {"a": "b"}}, {"list": ["a"]}, {3: "x"}, {"b": b"bytes"}, {"t": True}],
    ids=["int", "object", "array", "int-key", "bytes", "bool"],
)
def test_non_string_headers_are_refused_before_sending(queue, untouched, headers: dict) -> None:
    queue.send(b"before")
    with pytest.raises(HeaderFormatError) as refused:
        queue.send(b"x", headers=headers)
    assert str(refused.value), "the refusal says why"
    with pytest.raises(HeaderFormatError):
        queue.send_batch([OutgoingMessage(b"ok"), OutgoingMessage(b"x", headers=headers)])
    assert [body for _, _, body in rawsql.all_rows(queue)] == [b"before"], "a refused batch sends nothing"


def test_lone_surrogates_are_refused_or_round_trip(queue, untouched) -> None:
    """Text that cannot be UTF-8 (a lone surrogate) in a header: refused clearly, or stored as sent."""
    try:
        sent = queue.send(b"x", headers={"odd": "\ud800"})
    except (HeaderFormatError, UnicodeError) as refused:
        assert str(refused)
        assert queue.count() == 0
    else:
        with queue.receive() as batch:
            assert [m.id for m in batch] == [sent] and batch[0].headers["odd"] == "\ud800"


def test_invalid_utf8_and_100mb_bodies_round_trip(queue, untouched, figures) -> None:
    odd = b"\xff\xfe\xc3\x28\xa0\xa1\xed\xa0\x80 not utf-8"
    big = os.urandom(1024 * 1024) * 100  # 100 MB, sent and received in one piece
    digest = hashlib.sha256(big).hexdigest()
    sent = [queue.send(odd), queue.send(big), queue.send(b"")]
    with queue.receive(max_messages=3) as batch:
        assert batch[0].body == odd
        assert len(batch[1].body) == len(big) and hashlib.sha256(batch[1].body).hexdigest() == digest
        assert batch[2].body == b""
        received = [message.id for message in batch]
    assert queue.count() == 0
    figures(
        engine=queue.dialect.name, messages=len(sent), largest_body_bytes=len(big), **counted(sent, received)
    )


def allow_null_headers(queue, transport: Transport, target) -> None:
    """Make ``queue`` a table another system created without NOT NULL on Headers."""
    table = rawsql.table_of(queue)
    if target.engine == "postgresql":
        rawsql.execute(transport, f"ALTER TABLE {table} ALTER COLUMN Headers DROP NOT NULL")
    elif target.engine == "sqlserver" and not target.babelfish:
        rawsql.execute(transport, f"ALTER TABLE {table} ALTER COLUMN [Headers] nvarchar(max) NULL")
    elif target.engine == "sqlserver":
        # Babelfish does not run ALTER COLUMN ... NULL: create the other system's table as it stands.
        queue.drop()
        rawsql.execute(
            transport,
            f"CREATE TABLE {table} ([Id] uniqueidentifier NOT NULL, [CorrelationId] varchar(255) NULL, "
            "[ReplyToAddress] varchar(255) NULL, [Recoverable] bit NOT NULL, [Expires] datetime NULL, "
            "[Headers] nvarchar(max) NULL, [Body] varbinary(max) NULL, "
            "[RowVersion] bigint IDENTITY(1,1) NOT NULL)",
        )
    else:
        queue.drop()
        rawsql.execute(
            transport,
            f"CREATE TABLE {table} (Id TEXT NOT NULL, CorrelationId TEXT, ReplyToAddress TEXT, "
            "Recoverable INTEGER NOT NULL, Expires TEXT, Headers TEXT NULL, Body BLOB, "
            "RowVersion INTEGER PRIMARY KEY AUTOINCREMENT)",
        )


def insert_null_headers_row(queue, transport: Transport, target, body: bytes = b"body"):
    p = rawsql.param(transport)
    poison_id = OutgoingMessage(b"").id
    value = poison_id if target.engine == "postgresql" else str(poison_id)
    recoverable = "true" if target.engine == "postgresql" else "1"
    rawsql.execute(
        transport,
        f"INSERT INTO {rawsql.table_of(queue)} (Id, Recoverable, Headers, Body) "
        f"VALUES ({p}, {recoverable}, NULL, {p})",
        (value, body),
    )
    return poison_id


def test_null_headers_from_another_system_go_to_the_error_queue(queue, transport: Transport, target) -> None:
    allow_null_headers(queue, transport, target)
    poison_id = insert_null_headers_row(queue, transport, target)
    good = queue.send(b"next")
    with queue.receive(max_messages=5) as batch:
        assert [m.id for m in batch] == [good] and batch.poisoned == 1
    [(error_id, error_headers, error_body)] = rawsql.all_rows(transport.queue("error"))
    assert error_id == str(poison_id) and error_headers == "" and error_body == b"body"


POISON_HEADERS = ["<not json at all", "[1, 2, 3]", '{"truncated": "js', '{"count": 3}', '"a string"', "null"]


def test_poison_rows_of_every_kind_move_in_the_receive_transaction_and_the_queue_keeps_flowing(
    queue, transport: Transport, target, figures
) -> None:
    """Rows written by other systems (not JSON, a JSON array, truncated JSON, non-string values, a JSON
    string, JSON null, NULL) between good messages: a receive that rolls back leaves them where they were;
    a pump then takes every good message and each poison row lands, unchanged, in the error queue."""
    allow_null_headers(queue, transport, target)
    expected_good: list[str] = []
    poison: dict[str, tuple[str | None, bytes]] = {}
    for number, headers in enumerate([*POISON_HEADERS, None]):
        expected_good += [str(i) for i in queue.send_batch([f"good {number}.{n}".encode() for n in range(3)])]
        body = f"poison {number}".encode()
        if headers is None:
            poison[str(insert_null_headers_row(queue, transport, target, body))] = ("", body)
        else:
            poison[str(rawsql.insert_foreign_row(queue, headers, body))] = (headers, body)
    expected_good += [str(queue.send(b"last"))]
    before = rawsql.all_rows(queue)

    class Abort(Exception):
        pass

    with pytest.raises(Abort), queue.receive(max_messages=100) as batch:
        assert batch.poisoned == len(poison) and len(batch) == len(expected_good)
        raise Abort  # the moves to the error queue roll back with the receive
    assert rawsql.all_rows(queue) == before and rawsql.all_rows(transport.queue("error")) == []

    handled: list[str] = []
    pump = MessagePump(
        queue, lambda message: handled.append(str(message.id)), max_concurrency=2, idle_delay=0.1
    )
    stats = pump.run(until_empty=True, timeout=60)
    assert sorted(handled) == sorted(expected_good) and stats.poisoned == len(poison)
    assert queue.count() == 0 and rawsql.all_rows(queue) == []
    errors = rawsql.all_rows(transport.queue("error"))
    assert {row[0]: (row[1] or "", row[2]) for row in errors} == poison
    figures(
        engine=target.engine,
        messages=len(expected_good) + len(poison),
        faults_injected=len(poison),
        poison_kinds=len(poison),
        **counted([*expected_good, *poison], [*handled, *(row[0] for row in errors)]),
    )


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    headers=st.dictionaries(_text, st.one_of(st.none(), _text), max_size=10),
    body=st.binary(max_size=2000),
)
def test_any_header_map_and_body_round_trip_through_the_database(queue, headers: dict, body: bytes) -> None:
    """The codec's property on a real table: what is sent is what is received, byte for byte."""
    sent = queue.send(body, headers=headers)
    with queue.receive() as batch:
        assert [m.id for m in batch] == [sent]
        assert batch[0].body == body
        assert {key: batch[0].headers[key] for key in headers} == headers
