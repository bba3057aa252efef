"""The Spark benchmark's settle before each application (benchmarks/spark_drain_bench.py ``settle``): on its
PostgreSQL cluster it leaves no dead row and no row autovacuum has yet to visit, so no application pays for
the fill or the job before it. Nothing about speed is asserted."""

from __future__ import annotations

import time
from pathlib import Path

from airflow_provider_sqlqueue.demo.orders import make_orders
from airflow_provider_sqlqueue.transport import open_transport

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _table_state(transport) -> tuple[int, int, bool]:
    """Dead rows, rows inserted since the last vacuum, and whether a vacuum ever ran, of ``orders``."""
    with transport.connection() as connection:
        cursor = connection.cursor()
        cursor.execute("SELECT pg_stat_clear_snapshot()", ())
        cursor.execute(
            "SELECT n_dead_tup, n_ins_since_vacuum, last_vacuum IS NOT NULL FROM pg_stat_user_tables "
            "WHERE relname = 'orders'",
            (),
        )
        dead, inserted, vacuumed = cursor.fetchone()
        connection.commit()
    return int(dead), int(inserted), bool(vacuumed)


def _once_reported(transport, expected: tuple[int, int, bool]) -> tuple[int, int, bool]:
    """The table's state once the server's statistics show ``expected`` (a backend reports its counts a
    moment after its transaction ends), or as it is after 15 s."""
    deadline = time.monotonic() + 15
    state = _table_state(transport)
    while state != expected and time.monotonic() < deadline:
        time.sleep(0.2)
        state = _table_state(transport)
    return state


def test_settle_vacuums_what_the_fill_and_the_job_before_left_on_postgresql(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the benchmark imports its siblings when it runs
    import spark_drain_bench as bench

    with bench.engine_under_test("postgresql", {}) as url, open_transport(url) as transport:
        orders = transport.queue("orders")
        orders.create()
        orders.send_batch(make_orders(300, short_lived_every=None))
        with orders.receive(max_messages=100):
            pass
        before = _once_reported(transport, (100, 300, False))
        bench.settle(transport)
        after = _once_reported(transport, (0, 0, True))
    assert before == (100, 300, False)  # what an application would otherwise find, and autovacuum visit
    assert after == (0, 0, True)
