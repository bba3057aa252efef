"""Smoke test of the benchmark runner (benchmarks/run.py) and its renderer (benchmarks/render.py).

Runs the runner in its quickest mode on SQLite and PostgreSQL (a throwaway cluster of its own), for this
project and the raw driver, with the handler-throughput and wake-up sections; peer libraries that are not
importable here are skipped by the runner with a note (benchmarks/setup.sh installs them in
benchmarks/.venv). Checks the JSON has every case with positive throughputs (or, for a pump parameter this
build lacks, the reason instead of a figure) and that the page renders to a temporary folder. Nothing about
the speed is asserted.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from postgres_cluster import find_postgres_bindir

from airflow_provider_sqlqueue.transport.pump import MessagePump

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
CORE_CASES = {"send", "send_batch", "receive_1c", "receive_4c", "receive_batch_1c", "receive_batch_4c"}

pytestmark = pytest.mark.slow


def _engines() -> list[str]:
    """Both engines, always: a machine without PostgreSQL skips the test (a skip CI's list does not expect,
    so it fails there) rather than passing on SQLite alone."""
    if find_postgres_bindir() is None:
        pytest.skip("PostgreSQL is not installed: the runner's smoke test runs on both engines")
    return ["postgresql", "sqlite"]


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"{args} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result


def _positive(value: float) -> bool:
    return isinstance(value, int | float) and value > 0


def test_runner_quick_and_render(tmp_path: Path) -> None:
    engines = _engines()
    results = tmp_path / "results.json"
    run = _run(str(BENCHMARKS / "run.py"), "--quick", "--engines", ",".join(engines), "--json", str(results))
    doc = json.loads(results.read_text(encoding="utf-8"))
    assert doc["meta"]["kind"] == "throughput" and doc["meta"]["quick"] is True
    for key in ("cpu", "cpus", "ram_gib", "kernel"):
        assert doc["meta"]["machine"][key], key
    assert doc["meta"]["versions"]["python"] and doc["meta"]["versions"]["sqlite"]
    assert len(doc["meta"]["commit"].split("+")[0]) >= 7, "the run must record the commit it measured"

    # this project and the raw driver: every case on every engine, both sides positive, checked rounds
    for engine in engines:
        rows = {row["case"]: row for row in doc["core"] if row["engine"] == engine}
        assert set(rows) == CORE_CASES, engine
        for row in rows.values():
            assert _positive(row["raw_msgs_per_s"]) and _positive(row["project_msgs_per_s"]), row["case"]
            assert _positive(row["ratio"])
            assert len(row["rounds"]) == 1
            for sample in row["rounds"][0].values():
                # a receive is timed until its last message, never after its last process finished
                assert 0 < sample["seconds"] <= sample["all_done_seconds"], row["case"]
                if row["case"].startswith("receive"):
                    assert sample["seconds"] < sample["all_done_seconds"], row["case"]
                else:
                    assert sample["seconds"] == sample["all_done_seconds"], row["case"]
        pump = [row for row in doc["pump"] if row["engine"] == engine]
        assert len(pump) == 1 and _positive(pump[0]["msgs_per_s"]["median"])
        assert _positive(pump[0]["ratio_to_raw_receive_4c"]["median"])

    # handler throughput and wake-up latency: every row measured, or (a pump parameter this build lacks,
    # a peer not installed) reported with its reason, never a figure from something else
    parameters = set(inspect.signature(MessagePump).parameters)
    for engine in engines:
        handlers = {row["case"]: row for row in doc["handlers"]["rows"] if row["engine"] == engine}
        assert {"raw_receive_batch", "pump_batch_1", "pump_batch_100"} <= set(handlers), engine
        for row in handlers.values():
            if row["available"]:
                assert row["n"] == doc["meta"]["n_handlers"] and _positive(row["msgs_per_s"]["median"])
            else:
                assert row["reason"] and not row["rounds"], row["case"]
        assert handlers["raw_receive_batch"]["available"] and handlers["pump_batch_1"]["available"]
        assert handlers["pump_batch_100"]["available"] is ("batch_size" in parameters)
        wakeup = {row["case"]: row for row in doc["wakeup"]["rows"] if row["engine"] == engine}
        poll = wakeup["pump_poll"]
        assert (
            poll["available"]
            and len(poll["latencies_ms"]) == poll["sends"] == doc["wakeup"]["settings"]["sends"]
        )
        assert 0 <= poll["p50_ms"] <= poll["p95_ms"] <= poll["max_ms"] < 5_000
        if engine == "postgresql":
            assert wakeup["pump_push"]["available"] is ("wake_up" in parameters)
        else:
            assert "pump_push" not in wakeup  # SQLite: polling only
    for section in ("handlers", "wakeup"):
        assert doc[section]["meta"]["commit"] == doc["meta"]["commit"] and doc[section]["meta"]["seconds"] > 0

    # peers: measured when importable, otherwise skipped with a note in the output and the JSON
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import peers
    finally:
        sys.path.remove(str(BENCHMARKS))
    measured = {(row["peer"], row["engine"]) for row in doc["peers"]}
    skipped = {(row["peer"], row["engine"]) for row in doc["skipped"]}
    for peer in peers.PEERS:
        if peer.engine not in engines:
            continue
        importable = all(importlib.util.find_spec(name) is not None for name in peer.modules)
        if importable:
            assert (peer.key, peer.engine) in measured
        else:
            assert (peer.key, peer.engine) in skipped
            assert f"skipping {peer.key} on" in run.stdout
    for row in doc["peers"]:
        assert _positive(row["send_msgs_per_s"]["median"]) and _positive(row["receive_msgs_per_s"]["median"])

    # the scale run, small (SQLite only, to stay short: the PostgreSQL side shares the code)
    scale = tmp_path / "scale.json"
    _run(
        str(BENCHMARKS / "run.py"),
        "--scale",
        "--engines",
        "sqlite",
        "--scale-sizes",
        "2000",
        "--peek-sizes",
        "1000,2000",
        "--json",
        str(scale),
    )
    scale_doc = json.loads(scale.read_text(encoding="utf-8"))
    assert [result["engine"] for result in scale_doc["scale"]] == ["sqlite"]
    for result in scale_doc["scale"]:
        assert {entry["rows"] for entry in result["peek"]} == {1_000, 2_000}
        for drain in result["drains"]:
            assert _positive(drain["msgs_per_s"]) and len(drain["decile_msgs_per_s"]) == 10
            assert drain["rss_start"] > 0 and drain["rss_peak"] >= drain["rss_start"]

    # the page renders to a temporary folder (never over docs/)
    out, image = tmp_path / "docs" / "benchmarks.md", tmp_path / "docs" / "images" / "benchmarks.png"
    _run(
        str(BENCHMARKS / "render.py"),
        "--results",
        str(results),
        "--scale",
        str(scale),
        "--out",
        str(out),
        "--image",
        str(image),
    )
    page = out.read_text(encoding="utf-8")
    for heading in (
        "## Throughput",
        "## Handler throughput",
        "## Wake-up latency",
        "## Targets",
        "## Scale",
        "## Machine and versions",
        "## How to run",
    ):
        assert heading in page
    assert f"| commit measured | {doc['meta']['commit']} |" in page
    assert "## Tuning: before and after" in page and "(history/performance-tuning.md)" in page
    assert "PASS" in page or "MISS" in page
    if importlib.util.find_spec("matplotlib") is not None:
        assert image.stat().st_size > 10_000
        assert "](images/benchmarks.png)" in page


def _throttled_pair(tmp_path: Path, *extra: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A 2,000-row scale run with ``--throttled-vacuum`` (and ``extra``): the package's drain and the
    throttled one."""
    scale = tmp_path / "scale.json"
    _run(
        str(BENCHMARKS / "run.py"),
        "--scale",
        "--engines",
        "postgresql",
        "--scale-sizes",
        "2000",
        "--peek-sizes",
        "1000",
        "--autovacuum-off",
        "",
        "--throttled-vacuum",
        "2000",
        *extra,
        "--storage-wait",
        "1",
        "--json",
        str(scale),
    )
    (result,) = json.loads(scale.read_text(encoding="utf-8"))["scale"]
    package, throttled = result["drains"]
    return package, throttled


@pytest.mark.skipif(find_postgres_bindir() is None, reason="PostgreSQL is not installed")
def test_scale_pairs_a_throttled_vacuum_with_the_package_table(tmp_path: Path) -> None:
    """``--throttled-vacuum``: the same size drained again from a table whose autovacuum sleeps as the
    server's default says, every other storage parameter the package's; the pages leave it out of the
    package's figures."""
    package, throttled = _throttled_pair(tmp_path)
    assert (package["throttled_vacuum"], throttled["throttled_vacuum"]) == (False, True)
    assert "autovacuum_vacuum_cost_delay=0.5" in package["before"]["storage_parameters"]
    throttled_parameters = throttled["before"]["storage_parameters"]
    assert not any(entry.startswith("autovacuum_vacuum_cost_delay") for entry in throttled_parameters)
    assert set(throttled_parameters) == set(package["before"]["storage_parameters"]) - {
        "autovacuum_vacuum_cost_delay=0.5"
    }
    assert throttled["rows"] == package["rows"] == 2000 and _positive(throttled["msgs_per_s"])

    sys.path.insert(0, str(BENCHMARKS))
    try:
        from pages.scale_tables import _package_drains
    finally:
        sys.path.remove(str(BENCHMARKS))
    assert _package_drains([package, throttled]) == [package]


@pytest.mark.skipif(find_postgres_bindir() is None, reason="PostgreSQL is not installed")
def test_scale_throttles_the_vacuum_by_the_delay_asked(tmp_path: Path) -> None:
    """``--throttle-cost-delay MS``: the throttled table gets that ``autovacuum_vacuum_cost_delay`` instead of
    the server's, and the record says which."""
    package, throttled = _throttled_pair(tmp_path, "--throttle-cost-delay", "0")
    assert (package["throttle_cost_delay_ms"], throttled["throttle_cost_delay_ms"]) == (None, 0)
    assert "autovacuum_vacuum_cost_delay=0" in throttled["before"]["storage_parameters"]
    assert set(throttled["before"]["storage_parameters"]) - {"autovacuum_vacuum_cost_delay=0"} == set(
        package["before"]["storage_parameters"]
    ) - {"autovacuum_vacuum_cost_delay=0.5"}


def test_the_throttle_delay_needs_a_throttled_size() -> None:
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "run.py"), "--scale", "--throttle-cost-delay", "0.5"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 2 and "needs --throttled-vacuum" in completed.stderr
