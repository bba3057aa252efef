"""Child-process bodies of the reliability tests (spawned, so they live in an importable module)."""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections import Counter
from typing import Any

from workers import receive_until_empty

from airflow_provider_sqlqueue.transport import (
    MessagePump,
    OutgoingMessage,
    TransientDatabaseError,
    open_transport,
)


def compete(
    url: str,
    schema: str | None,
    queue_name: str,
    receive_threads: int,
    pump_concurrency: int,
    max_batch: int,
    seed: int,
    start_at: float,
) -> dict[str, Any]:
    """One process of the competition: ``receive_threads`` plain receivers (random batch sizes, ~10% of
    batches rolled back on purpose) and a MessagePump of ``pump_concurrency`` whose handler fails ~5% of
    the time (rolled back, retried). All start at ``start_at``; the receivers stop after five empty
    receives in a row, then the pump is stopped.

    Returns the ids whose receive committed, per consumer kind, and the faults injected.
    """
    # a warning per injected handler failure (thousands) would only bury the test's own output
    logging.getLogger("airflow_provider_sqlqueue").setLevel(logging.ERROR)
    received: list[str] = []
    pumped: list[str] = []
    lock = threading.Lock()
    faults: Counter[str] = Counter()
    handler_failures = [0]

    pump_rng = random.Random(seed * 7919)

    def handler(message) -> None:
        with lock:
            if pump_rng.random() < 0.05:
                handler_failures[0] += 1
                raise RuntimeError("injected handler failure: rolled back and retried")
            pumped.append(str(message.id))

    args = (url, schema, queue_name, max_batch)
    threads = [
        threading.Thread(
            target=receive_until_empty, args=(*args, seed * 100 + n, start_at, received, lock, faults)
        )
        for n in range(receive_threads)
    ]
    with open_transport(url, default_schema=schema) as pump_transport:
        pump = None
        if pump_concurrency:
            pump = MessagePump(
                pump_transport.queue(queue_name),
                handler,
                max_concurrency=pump_concurrency,
                idle_delay=0.1,
                immediate_retries=20,  # 0.05 ** 21: never to the error queue by chance
            )
        time.sleep(max(0.0, start_at - time.time()))
        if pump is not None:
            pump.start()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        stats = {}
        if pump is not None:
            # the plain receivers saw an empty queue five times running: let the pump settle, then stop
            while True:
                before = pump.stats().processed
                time.sleep(0.5)
                if pump.stats().processed == before and pump.stats().in_flight == 0:
                    break
            assert pump.stop(30), "the pump's handlers did not finish"
            stats = pump.stats().as_dict()
    return {
        "received": received,
        "pumped": pumped,
        "rollbacks": faults["rollbacks"],
        "handler_failures": handler_failures[0],
        "transient": faults["transient"],
        "pump": stats,
    }


def send_until_stopped(
    url: str, schema: str | None, queue_name: str, acknowledged, unknown, errors, stop
) -> None:
    """Send one small message at a time until ``stop``; a send either returns (acknowledged) or raises
    TransientDatabaseError (unknown outcome: stored or not). Any other exception ends the process with a
    non-zero exit code. The first error texts go to ``errors`` for the test to check."""
    with open_transport(
        url, default_schema=schema, pool_size=1, max_overflow=0, connect_timeout=2
    ) as transport:
        queue = transport.queue(queue_name)
        while not stop.is_set():
            message = OutgoingMessage(b"x" * 100)
            try:
                queue.send(message)
            except TransientDatabaseError as error:
                unknown.append(str(message.id))
                if len(errors) < 20:
                    errors.append(f"{type(error).__name__}: {error}")
                time.sleep(0.05)
            else:
                acknowledged.append(str(message.id))


class InjectedHandlerFailure(Exception):
    """The exactly-once drill's handler failing on purpose, for a fixed subset of the messages."""


def failing_sequence(sequence: int, fail_every: int) -> bool:
    """Whether the drill's handler fails on the message numbered ``sequence`` (every attempt): one in
    ``fail_every``, none when ``fail_every`` is 0."""
    return fail_every > 0 and sequence % fail_every == fail_every // 2


def pump_into_business_tables(
    url: str,
    schema: str | None,
    batch_size: int,
    max_concurrency: int,
    fail_every: int,
    attempts_path: str,
    stop_path: str,
) -> None:
    """A MessagePump on ``orders`` (``sends_atomic_with_receive``) whose handler, through
    ``context.connection``, inserts a row keyed by the message's Id into ``invoices`` (no unique key),
    adds one to ``tally``'s counter row and sends one message to ``out`` (body: the input's Id; the
    context adds ``NServiceBus.RelatedTo``), then raises for the messages :func:`failing_sequence` picks.
    Every handler call first appends the process id and the message's Id to ``attempts_path`` (outside
    any transaction, so a call whose writes a kill undid is still counted). Starts the pump again while the
    server is down (its start fails at once then, as a supervisor would restart the process); runs until
    ``stop_path`` exists, then stops the pump gracefully."""
    logging.getLogger("airflow_provider_sqlqueue").setLevel(logging.CRITICAL)
    with open_transport(url, default_schema=schema, connect_timeout=2) as transport:
        dialect = transport.dialect
        mark = dialect.placeholder
        invoices = dialect.qualified_name(transport.resolve("invoices"))
        tally = dialect.qualified_name(transport.resolve("tally"))
        insert = f"INSERT INTO {invoices} (message_id, sequence) VALUES ({mark}, {mark})"
        count = f"UPDATE {tally} SET handled = handled + 1 WHERE name = {mark}"
        attempts = os.open(attempts_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

        def handler(message, context) -> None:
            os.write(attempts, f"{os.getpid()} {message.id}\n".encode())
            sequence = int(message.body)
            context.connection.execute(insert, (str(message.id), sequence))
            context.connection.execute(count, ("invoices",))
            context.send("out", str(message.id).encode())
            if failing_sequence(sequence, fail_every):
                raise InjectedHandlerFailure(f"message {sequence} fails on every attempt")

        while True:  # a pump's start fails at once while the server is down: start again, as a supervisor
            pump = MessagePump(
                transport.queue("orders"),
                handler,
                max_concurrency=max_concurrency,
                batch_size=batch_size,
                transaction_mode="sends_atomic_with_receive",
                immediate_retries=2,
                idle_delay=0.1,
            )
            try:
                pump.start()
                break
            except TransientDatabaseError:
                time.sleep(0.5)
        while not os.path.exists(stop_path):
            time.sleep(0.1)
        if not pump.stop(60):
            raise SystemExit("the pump's handlers did not finish within 60 s of the stop")
        os.close(attempts)
