"""Nothing lost, nothing handed out twice: crashes, a database restart under load, competition at scale,
hostile payloads and rows from other systems. Real PostgreSQL and SQLite throughout."""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
import time
from collections import Counter

import pytest
import rawsql
import workers

from airflow_provider_sqlqueue.testing import throwaway_postgres
from airflow_provider_sqlqueue.transport import (
    HeaderFormatError,
    OutgoingMessage,
    TransientDatabaseError,
    Transport,
    open_transport,
)


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
def test_consumers_killed_while_holding_messages_lose_nothing(target, transport: Transport) -> None:
    queue = transport.queue("crash")
    queue.create()
    sent = {str(i) for i in queue.send_batch([f"m{n}".encode() for n in range(300)])}
    context = multiprocessing.get_context("spawn")
    manager = context.Manager()
    rng = random.Random(20)
    held_total = 0
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
        held_total += len(ids)
    manager.shutdown()
    assert held_total > 0
    received = drain_ids(queue)
    assert Counter(received) == Counter(sent)


@pytest.mark.slow
def test_competition_at_scale(target, transport: Transport) -> None:
    processes, threads, count = (4, 4, 100_000) if target.engine != "sqlite" else (4, 1, 20_000)
    queue = transport.queue("scale")
    queue.create()
    sent: set[str] = set()
    for start in range(0, count, 5000):
        sent.update(str(i) for i in queue.send_batch([b"m"] * min(5000, count - start)))
    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 5
    with context.Pool(processes) as pool:
        results = pool.starmap(
            workers.consume,
            [(target.url, target.schema, "scale", threads, 10, seed, start_at) for seed in range(processes)],
        )
    received = Counter(i for result in results for i in result)
    assert [i for i, n in received.items() if n > 1] == []
    assert set(received) == sent
    assert queue.count() == 0


@pytest.mark.slow
def test_postgres_restart_under_load_loses_nothing_and_receivers_recover() -> None:
    with throwaway_postgres(durable=True) as cluster:
        url = cluster.url()
        with open_transport(url, connect_timeout=2) as transport:
            queue = transport.queue("restart")
            queue.create()
            context = multiprocessing.get_context("spawn")
            manager = context.Manager()
            acknowledged, unknown, stop = manager.list(), manager.list(), manager.Event()
            senders = [
                context.Process(
                    target=workers.send_forever, args=(url, None, "restart", acknowledged, unknown, stop)
                )
                for _ in range(2)
            ]
            for sender in senders:
                sender.start()
            received: list[str] = []
            receiver_errors: list[str] = []
            stop_receiving = threading.Event()

            def receive_loop() -> None:
                while not stop_receiving.is_set():
                    try:
                        with queue.receive(max_messages=20) as batch:
                            ids = [str(m.id) for m in batch]
                        received.extend(ids)
                        if not ids:
                            time.sleep(0.02)
                    except TransientDatabaseError as error:
                        receiver_errors.append(str(error))
                        time.sleep(0.1)

            receivers = [threading.Thread(target=receive_loop) for _ in range(2)]
            for receiver in receivers:
                receiver.start()
            time.sleep(3)
            cluster.stop("fast")
            time.sleep(2)
            cluster.start()
            time.sleep(3)
            stop.set()
            for sender in senders:
                sender.join(30)
            stop_receiving.set()
            for receiver in receivers:
                receiver.join(30)
            received += drain_ids(queue)
            acknowledged, unknown = list(acknowledged), list(unknown)
            manager.shutdown()
    counts = Counter(received)
    assert [i for i, n in counts.items() if n > 1] == [], "a message was handed out twice"
    assert set(acknowledged) <= set(counts), "an acknowledged send was lost"
    assert set(counts) <= set(acknowledged) | set(unknown)
    assert receiver_errors, "the restart should have been felt as transient errors"
    assert len(acknowledged) > 100


@pytest.mark.parametrize(
    "headers",
    [
        {"huge": "x" * 1_000_000},
        {"many." + str(n): str(n) for n in range(5000)},
        {"": "empty name", " ": None},
    ],
    ids=["1MB-value", "5000-headers", "odd-names"],
)
def test_large_and_odd_header_maps_round_trip(queue, headers: dict) -> None:
    queue.send(b"x", headers=headers)
    with queue.receive() as batch:
        for key, value in headers.items():
            assert batch[0].headers[key] == value


@pytest.mark.parametrize("headers", [{"n": 1}, {"nested": {"a": "b"}}, {"list": ["a"]}, {3: "x"}])
def test_non_string_headers_are_refused_before_sending(queue, headers: dict) -> None:
    with pytest.raises(HeaderFormatError):
        queue.send(b"x", headers=headers)
    assert queue.count() == 0


def test_invalid_utf8_and_100mb_bodies_round_trip(queue) -> None:
    odd = b"\xff\xfe\xc3\x28\xa0\xa1\xed\xa0\x80 not utf-8"
    big = os.urandom(1024 * 1024) * 100  # 100 MB, sent and received in one piece
    queue.send(odd)
    queue.send(big)
    with queue.receive(max_messages=2) as batch:
        assert batch[0].body == odd
        assert len(batch[1].body) == len(big) and batch[1].body[-4096:] == big[-4096:]
    assert queue.count() == 0


def test_null_headers_from_another_system_go_to_the_error_queue(queue, transport: Transport, target) -> None:
    """A table created by another system without NOT NULL on Headers, holding a NULL-headers row."""
    table = rawsql.table_of(queue)
    if target.engine == "postgresql":
        rawsql.execute(transport, f"ALTER TABLE {table} ALTER COLUMN Headers DROP NOT NULL")
    elif target.engine == "sqlserver":
        rawsql.execute(transport, f"ALTER TABLE {table} ALTER COLUMN [Headers] nvarchar(max) NULL")
    else:
        queue.drop()
        rawsql.execute(
            transport,
            f"CREATE TABLE {table} (Id TEXT NOT NULL, CorrelationId TEXT, ReplyToAddress TEXT, "
            "Recoverable INTEGER NOT NULL, Expires TEXT, Headers TEXT NULL, Body BLOB, "
            "RowVersion INTEGER PRIMARY KEY AUTOINCREMENT)",
        )
    p = rawsql.param(transport)
    poison_id = OutgoingMessage(b"").id
    value = poison_id if target.engine == "postgresql" else str(poison_id)
    recoverable = "true" if target.engine == "postgresql" else "1"
    rawsql.execute(
        transport,
        f"INSERT INTO {table} (Id, Recoverable, Headers, Body) VALUES ({p}, {recoverable}, NULL, {p})",
        (value, b"body"),
    )
    good = queue.send(b"next")
    with queue.receive(max_messages=5) as batch:
        assert [m.id for m in batch] == [good] and batch.poisoned == 1
    [(error_id, error_headers, error_body)] = rawsql.all_rows(transport.queue("error"))
    assert error_id == str(poison_id) and error_headers == "" and error_body == b"body"
