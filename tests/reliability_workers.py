"""Child-process bodies of the reliability tests (spawned, so they live in an importable module)."""

from __future__ import annotations

import logging
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
