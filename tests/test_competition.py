"""Competing consumers in several processes: every message is received exactly once, none is left."""

from __future__ import annotations

import multiprocessing
import time
from collections import Counter

import pytest
import workers

from airflow_provider_sqlqueue.transport import Transport


def _prefill(transport: Transport, count: int) -> set[str]:
    queue = transport.queue("work")
    queue.create()
    sent: list[str] = []
    for start in range(0, count, 1000):
        sent += [
            str(i)
            for i in queue.send_batch([f"m{n}".encode() for n in range(start, min(count, start + 1000))])
        ]
    return set(sent)


@pytest.mark.slow
def test_competing_processes_receive_each_message_exactly_once(target, transport: Transport) -> None:
    if target.engine == "sqlite":
        processes, threads, count, max_batch = 4, 1, 20_000, 25
    else:
        processes, threads, count, max_batch = 4, 2, 20_000, 10
    sent = _prefill(transport, count)
    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 4  # spawned interpreters import the package before they compete
    with context.Pool(processes) as pool:
        results = pool.starmap(
            workers.consume,
            [
                (target.url, target.schema, "work", threads, max_batch, seed, start_at)
                for seed in range(processes)
            ],
        )
    received = Counter(message_id for result in results for message_id in result)
    duplicates = [message_id for message_id, times in received.items() if times > 1]
    assert duplicates == []
    assert set(received) == sent
    assert transport.queue("work").count() == 0
    # SQLite's busy handler sleeps, so a loser of the write lock may starve; Babelfish's receivers wait for
    # each other instead of skipping held rows (no READPAST, see the DBA guide), so a loser may starve there
    # too (seen once in CI through Driver 18). Neither loses or duplicates a message, as asserted above.
    if target.engine != "sqlite" and not target.babelfish:
        assert all(result for result in results), "every process should have won some messages"


@pytest.mark.slow
def test_processes_creating_the_same_queue_at_once(target, transport: Transport) -> None:
    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 3
    with context.Pool(4) as pool:
        created = pool.starmap(workers.create_queue, [(target.url, target.schema, "contested", start_at)] * 4)
    assert sorted(created) == [False, False, False, True]
    queue = transport.queue("contested")
    assert queue.inspect() == []
    queue.send(b"works")
    assert queue.count() == 1
