"""What restoring a returned connection's session costs (issue #62): one-message receives per second with the
reset off and on, side by side in one run, as a ratio.

The pool restores the session of a connection that was lent to a handler (``PooledConnection.lend_to_user``);
``Transport.reset_every_session`` makes it restore every returned connection, which is what is measured
here: each receive's loan then pays the dialect's ``reset_session`` (PostgreSQL: one round trip with
``RESET SESSION AUTHORIZATION; RESET ROLE; RESET ALL`` and ``backend_flush_after``; SQL Server: one batch of
``SET`` statements and a commit; SQLite: its PRAGMAs, no round trip). The queue is filled beforehand, outside
the timing; the rounds alternate off, on, off, on... on one transport and one pooled connection, so drift
(caches, the server's autovacuum, the machine's other load) falls on both alike. Nothing is asserted: the
figures are for the reader (docs/concurrency.md cites them).

    python benchmarks/session_reset_bench.py sqlite:////tmp/reset.db postgresql://user:pw@host/db
    python benchmarks/session_reset_bench.py --messages 2000 --rounds 6 'DRIVER=...;SERVER=...'
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from dataclasses import dataclass

from airflow_provider_sqlqueue.transport import open_transport


@dataclass
class ResetCost:
    """Receives per second of each mode (median over its rounds) and what one reset adds."""

    engine: str
    messages: int
    rounds: int
    without_reset: float  # receives/s
    with_reset: float  # receives/s

    @property
    def ratio(self) -> float:
        """Receives/s with the reset over without it (1.0: free)."""
        return self.with_reset / self.without_reset

    @property
    def microseconds_per_reset(self) -> float:
        return (1 / self.with_reset - 1 / self.without_reset) * 1e6

    def line(self) -> str:
        return (
            f"{self.engine}: {self.without_reset:,.0f} receives/s without the reset, {self.with_reset:,.0f} "
            f"with it: ratio {self.ratio:.2f} ({self.microseconds_per_reset:,.0f} µs per reset; "
            f"{self.rounds} rounds of {self.messages} one-message receives each)"
        )


def _receive_all(queue: object, messages: int) -> float:
    """Seconds to take ``messages`` messages one receive at a time."""
    start = time.perf_counter()
    taken = 0
    while taken < messages:
        with queue.receive(max_messages=1) as batch:  # type: ignore[attr-defined]
            taken += len(list(batch))
    return time.perf_counter() - start


def measure(url: str, *, messages: int = 1000, rounds: int = 6, schema: str | None = None) -> ResetCost:
    """Alternate rounds without and with the reset on one transport; ``schema`` places the queue."""
    transport = open_transport(url, default_schema=schema, pool_size=1, max_overflow=0)
    with transport:
        queue = transport.queue(f"reset_bench_{uuid.uuid4().hex[:8]}", error_queue=None)
        queue.create()
        try:
            seconds: dict[bool, list[float]] = {False: [], True: []}
            for round_number in range(rounds * 2):
                reset = round_number % 2 == 1
                queue.send_batch([b"x" * 100] * messages)
                transport.reset_every_session = reset
                seconds[reset].append(_receive_all(queue, messages))
                transport.reset_every_session = False
        finally:
            queue.drop()
        return ResetCost(
            engine=transport.dialect.display_name,
            messages=messages,
            rounds=rounds,
            without_reset=messages / statistics.median(seconds[False]),
            with_reset=messages / statistics.median(seconds[True]),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("urls", nargs="+", help="transport URLs (or ODBC strings), one measurement each")
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--schema", default=None)
    arguments = parser.parse_args()
    for url in arguments.urls:
        print(
            measure(url, messages=arguments.messages, rounds=arguments.rounds, schema=arguments.schema).line()
        )


if __name__ == "__main__":
    main()
