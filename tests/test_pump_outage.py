"""The circuit breaker for real: PostgreSQL stops under a running pump and starts again.

The test runs its own throwaway cluster, so the session's shared server is never disturbed.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from postgres_cluster import find_postgres_bindir, throwaway_postgres

from airflow_provider_sqlqueue.transport import CircuitBreakerSettings, MessagePump, open_transport

pytestmark = [
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.skipif(find_postgres_bindir() is None, reason="needs PostgreSQL server binaries"),
]


def wait_for(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_pump_resumes_by_itself_after_an_outage_and_reports_it_after_the_configured_time() -> None:
    with throwaway_postgres() as cluster, open_transport(cluster.url(), connect_timeout=2) as transport:
        transport.queue("error").create()
        queue = transport.queue("orders")
        queue.create()
        sent = set(queue.send_batch([f"m{n}".encode() for n in range(400)]))
        handled: Counter = Counter()
        lock = threading.Lock()
        critical: list[tuple[float, str]] = []

        def handler(message) -> None:
            time.sleep(0.002)
            with lock:
                handled[message.id] += 1

        settings = CircuitBreakerSettings(time_to_trigger=1.0, armed_delay=0.1, triggered_delay=0.3)
        pump = MessagePump(
            queue,
            handler,
            max_concurrency=4,
            idle_delay=0.1,
            circuit_breaker=settings,
            on_critical_error=lambda name, error: critical.append((time.monotonic(), name)),
        )
        with pump:
            wait_for(lambda: len(handled) >= 100, 20)
            stopped_at = time.monotonic()
            cluster.stop("fast")
            wait_for(lambda: critical, 10)
            reported_after = critical[0][0] - stopped_at
            time.sleep(0.5)
            cluster.start()
            restarted_at = time.monotonic()
            wait_for(lambda: set(handled) >= sent and pump.in_flight == 0, 30)
            recovered_after = time.monotonic() - restarted_at
            wait_for(lambda: not pump.peek_breaker.armed and not pump.receive_breaker.armed, 5)
        assert 1.0 <= reported_after < 3.0, reported_after
        assert {name for _, name in critical} <= {
            f"Failed to peek {queue.address}",
            f"Failed to receive from {queue.address}",
        }
        assert set(handled) == sent  # nothing lost (a handler whose commit died may have run twice)
        assert queue.count() == 0
        assert recovered_after < 5.0, recovered_after
