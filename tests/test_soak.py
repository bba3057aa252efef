"""A bounded soak: senders, a pump and a purge together on PostgreSQL, with memory and connection counts
recorded after warm-up and at the end. ``SQLQUEUE_SOAK_SECONDS`` lengthens it (default 60 s)."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from datetime import timedelta

import pytest

from airflow_provider_sqlqueue.transport import MessagePump, OutgoingMessage, TransientDatabaseError

SOAK_SECONDS = float(os.environ.get("SQLQUEUE_SOAK_SECONDS", "60"))


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.slow
def test_senders_pump_and_purge_together_hold_steady(target, transport, postgres_server) -> None:
    if target.engine != "postgresql":
        pytest.skip("the soak runs on PostgreSQL, the engine with real connections to count")
    queue = transport.queue("soak")
    queue.create()
    transport.queue("error").create()
    processed: list[str] = []
    lock = threading.Lock()

    def handler(message) -> None:
        with lock:
            processed.append(str(message.id))

    sent_lasting: list[str] = []
    sent_short: list[str] = []
    stop = threading.Event()

    def sender(seed: int) -> None:
        number = 0
        while not stop.is_set():
            number += 1
            batch = [OutgoingMessage(b"x" * 512) for _ in range(20)]
            short = [OutgoingMessage(b"y", time_to_be_received=timedelta(milliseconds=50)) for _ in range(2)]
            try:
                queue.send_batch(batch + short)
            except TransientDatabaseError:
                continue
            sent_lasting.extend(str(m.id) for m in batch)
            sent_short.extend(str(m.id) for m in short)
            time.sleep(0.05)  # about 900 messages/s from two senders: the pump keeps up on 2 busy cores

    purged = 0

    def purger() -> None:
        nonlocal purged
        while not stop.wait(2.0):
            purged += queue.purge_expired(batch_size=1000)

    def connections() -> int:
        rows = postgres_server.query(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND backend_type = "
            "'client backend'"
        )
        return int(rows[0][0])

    pump = MessagePump(queue, handler, max_concurrency=4, idle_delay=0.2)
    threads = [threading.Thread(target=sender, args=(n,)) for n in range(2)] + [
        threading.Thread(target=purger)
    ]
    with pump:  # starts it; leaving stops it
        for thread in threads:
            thread.start()
        time.sleep(min(10.0, SOAK_SECONDS / 4))  # warm-up: pools filled, statements prepared
        start_rss, start_connections = rss_mb(), connections()
        time.sleep(SOAK_SECONDS)
        end_rss, end_connections = rss_mb(), connections()
        stop.set()
        for thread in threads:
            thread.join(30)
        deadline = time.monotonic() + 120
        while queue.count() and time.monotonic() < deadline:
            time.sleep(0.2)
        pump.stop()
    # Whatever the pump did not reach is still queued (a slow machine): take it, and count it as left.
    left: list[str] = []
    expired_left = 0
    while True:
        with queue.receive(max_messages=1000) as batch:
            left += [str(m.id) for m in batch]
            expired_left += batch.expired
            if not batch and not batch.expired:
                break
    purged += queue.purge_expired(batch_size=1000)
    assert queue.peek_estimate() == 0, "rows left behind"
    stats = pump.stats()
    counts = Counter(processed + left)
    assert [i for i, n in counts.items() if n > 1] == [], "a message was handed out twice"
    assert set(sent_lasting) <= set(counts), "a message that never expires was lost"
    short_seen = set(sent_short) & set(counts)
    assert len(short_seen) + stats.expired + expired_left + purged == len(sent_short)
    assert len(left) < len(processed) / 10, f"the pump fell far behind: {len(left)} left"
    assert len(sent_lasting) > 1000
    print(
        f"soak {SOAK_SECONDS:.0f} s: sent {len(sent_lasting) + len(sent_short)}, processed {len(processed)}, "
        f"left {len(left)}, "
        f"expired on receive {stats.expired}, purged {purged}; RSS {start_rss:.1f} -> {end_rss:.1f} MB, "
        f"connections {start_connections} -> {end_connections}"
    )
    assert end_connections <= start_connections + 2, "connections grew"
    assert end_rss - start_rss < 50, f"memory grew from {start_rss:.1f} to {end_rss:.1f} MB"
