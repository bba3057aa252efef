"""The deferred-sensors table of docs/sensor.md, from its data to its lines
(benchmarks/pages/trigger_polling.py): both designs per engine, their ratios, a sender that could not
connect and a send no trigger saw said as such. Nothing is measured here; the benchmark measures."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def page() -> Any:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from pages import trigger_polling
    finally:
        sys.path.remove(str(BENCHMARKS))
    return trigger_polling


def _result(engine: str, code: str, held: int | None, statements: float, cpu: float, **extra: Any) -> dict:
    return {
        "run": "r",
        "engine": engine,
        "code": code,
        "held_max": held,
        "statements_per_second": statements,
        "cpu_per_second": cpu,
        "latencies_ms": [10.0, 30.0, 20.0],
        "sender_error": None,
        **extra,
    }


def _data() -> dict[str, Any]:
    run = {
        "date": "2026-12-06T08:00:00+00:00",
        "commit": "abc1234",
        "before_commit": "b8ed77c",
        "before_how": "exported",
        "sensors": 1000,
        "queues": 100,
        "poll_interval": 5.0,
        "seconds": 15.0,
        "sends": 3,
        "warmup_polls": 8,
        "postgresql_settings": "cluster",
        "sqlite_settings": "WAL",
        "babelfish_settings": "Babelfish 4.3 via Driver 18",
        "load_average_before": [0.5, 0.5, 0.5],
        "machine": {"cpus": 2, "cpu": "cpu", "disk": {"fstype": "ext4"}},
    }
    return {
        "runs": {"r": run},
        "results": [
            _result(
                "postgresql",
                "before",
                97,
                400.0,
                0.8,
                latencies_ms=[],
                sender_error="TransientDatabaseError: x",
            ),
            _result("postgresql", "after", 2, 2.0, 0.02),
            _result("sqlite", "before", 1000, 600.0, 1.2, latencies_ms=[100.0, None, 300.0]),
            _result("sqlite", "after", 1, 2.0, 0.03),
            _result("babelfish", "before", 100, 20.0, 0.02, sensors=100, queues=20),
            _result("babelfish", "after", 1, 1.0, 0.01, sensors=100, queues=20),
        ],
    }


def test_both_designs_and_their_ratios_are_rendered(page: Any) -> None:
    lines = page.sensor_lines(_data())
    assert lines[2] == (
        "| PostgreSQL | 1,000 / 100 | a transport per trigger | 97 | 400.0 | 0.800 | the sender could not "
        "send: TransientDatabaseError |"
    )
    assert lines[3] == "| PostgreSQL | 1,000 / 100 | shared poller | 2 | 2.0 | 0.020 | 20 (30) |"
    assert lines[4] == (
        "| SQLite | 1,000 / 100 | a transport per trigger | 1000 | 600.0 | 1.200 | 200 (300), 1 missed |"
    )
    assert "| Babelfish | 100 / 20 | shared poller | 1 | 1.0 | 0.010 | 20 (30) |" in lines
    assert "| PostgreSQL | 0.005x | 0.025x |" in lines
    assert "| SQLite | 0.0033x | 0.025x |" in lines
    assert "| Babelfish | 0.05x | 0.5x |" in lines
    assert "Babelfish 4.3 via Driver 18" in lines[-1] and "runs.md#trigger-polling" in lines[-1]
    assert "b8ed77c" not in lines[-1] and "abc1234" not in lines[-1], "the commits belong on docs/runs.md"
