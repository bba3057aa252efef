"""Functions that run in child processes (spawned), so they live in an importable module."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable

from airflow_provider_sqlqueue.transport import TableQueue, TransientDatabaseError, open_transport


class _Rollback(Exception):
    pass


def drain_competing(
    queue: TableQueue,
    rng: random.Random,
    max_batch: int,
    lock: threading.Lock,
    record: Callable[[list[uuid.UUID]], None],
    faults: Counter[str] | None = None,
) -> None:
    """One competing receiver on ``queue``: receive random batch sizes until five empty receives in a row,
    rolling back ~10% of non-empty batches on purpose. ``record`` gets each committed batch's ids (called
    under ``lock``); rollbacks and transient errors are counted in ``faults`` when given."""
    faults = Counter() if faults is None else faults
    empty_rounds = 0
    while empty_rounds < 5:
        try:
            with queue.receive(max_messages=rng.randint(1, max_batch)) as batch:
                ids = [message.id for message in batch]
                if ids and rng.random() < 0.1:
                    raise _Rollback
        except _Rollback:
            with lock:
                faults["rollbacks"] += 1
            continue
        except TransientDatabaseError:
            with lock:
                faults["transient"] += 1
            time.sleep(0.01)
            continue
        if ids:
            empty_rounds = 0
            with lock:
                record(ids)
        else:
            empty_rounds += 1
            time.sleep(0.02)


def receive_until_empty(
    url: str,
    schema: str | None,
    queue_name: str,
    max_batch: int,
    thread_seed: int,
    start_at: float,
    committed: list[str],
    lock: threading.Lock,
    faults: Counter[str] | None = None,
) -> None:
    """:func:`drain_competing` on a transport of its own, from ``start_at``; committed ids, as text, go to
    ``committed``."""
    with open_transport(url, default_schema=schema, pool_size=1, max_overflow=0) as transport:
        queue = transport.queue(queue_name)
        queue.peek_estimate()  # connect before the start
        time.sleep(max(0.0, start_at - time.time()))
        drain_competing(
            queue,
            random.Random(thread_seed),
            max_batch,
            lock,
            lambda ids: committed.extend(map(str, ids)),
            faults,
        )


def consume(
    url: str, schema: str | None, queue_name: str, threads: int, max_batch: int, seed: int, start_at: float
) -> list[str]:
    """From a common start time, drain a queue with competing threads; ~10% of receives roll back.

    Returns the ids of messages whose receive committed.
    """
    committed: list[str] = []
    lock = threading.Lock()
    args = (url, schema, queue_name, max_batch)
    workers = [
        threading.Thread(target=receive_until_empty, args=(*args, seed * 100 + n, start_at, committed, lock))
        for n in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return committed


def create_queue(url: str, schema: str | None, queue_name: str, start_at: float) -> bool:
    """Wait for a common start time, then create the same queue as the other processes."""
    with open_transport(url, default_schema=schema) as transport:
        queue = transport.queue(queue_name)
        time.sleep(max(0.0, start_at - time.time()))
        return queue.create()


def receive_and_hold(url: str, schema: str | None, queue_name: str, max_messages: int, held, ids_out) -> None:
    """Receive inside a transaction, report what is held, then wait to be killed (never commit)."""
    with (
        open_transport(url, default_schema=schema, pool_size=1, max_overflow=0) as transport,
        transport.queue(queue_name).receive(max_messages=max_messages) as batch,
    ):
        ids_out.extend([str(message.id) for message in batch])
        held.set()
        time.sleep(3600)


def send_forever(url: str, schema: str | None, queue_name: str, acknowledged, unknown, stop) -> None:
    """Send one message at a time until told to stop; sort ids by whether the commit was acknowledged."""
    from airflow_provider_sqlqueue.transport import OutgoingMessage

    with open_transport(
        url, default_schema=schema, pool_size=1, max_overflow=0, connect_timeout=2
    ) as transport:
        queue = transport.queue(queue_name)
        while not stop.is_set():
            message = OutgoingMessage(b"x" * 100)
            try:
                queue.send(message)
            except TransientDatabaseError:
                unknown.append(str(message.id))
                time.sleep(0.05)
            else:
                acknowledged.append(str(message.id))


def pump_batches_then_hang(
    url: str, schema: str | None, queue_name: str, hang_at: int, hanging, seen
) -> None:
    """A batching pump (fixed strategy, one worker, batches of 10) whose handler records each message's id
    in ``seen`` and, at the ``hang_at``-th message, sets ``hanging`` and blocks until it is killed."""
    from airflow_provider_sqlqueue.transport import MessagePump

    def handler(message) -> None:
        seen.append(str(message.id))
        if len(seen) == hang_at:
            hanging.set()
            time.sleep(3600)

    with open_transport(url, default_schema=schema) as transport:
        queue = transport.queue(queue_name)
        MessagePump(queue, handler, batch_size=10, strategy="fixed", idle_delay=0.1).run(timeout=120)
