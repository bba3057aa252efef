"""Smoke test of the benchmark runner (benchmarks/run.py) and its renderer (benchmarks/render.py).

Runs the runner in its quickest mode on SQLite and PostgreSQL (a throwaway cluster of its own), for this
project and the raw driver; peer libraries that are not importable here are skipped by the runner with a
note (benchmarks/setup.sh installs them in benchmarks/.venv). Checks the JSON has every case with positive
throughputs and that the page renders to a temporary folder. Nothing about the speed is asserted.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from postgres_cluster import find_postgres_bindir

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
CORE_CASES = {"send", "send_batch", "receive_1c", "receive_4c", "receive_batch_1c", "receive_batch_4c"}

pytestmark = pytest.mark.slow


def _engines() -> list[str]:
    return ["postgresql", "sqlite"] if find_postgres_bindir() is not None else ["sqlite"]


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
        pump = [row for row in doc["pump"] if row["engine"] == engine]
        assert len(pump) == 1 and _positive(pump[0]["msgs_per_s"]["median"])
        assert _positive(pump[0]["ratio_to_raw_receive_4c"]["median"])

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
    for heading in ("## Throughput", "## Targets", "## Scale", "## Machine and versions", "## How to run"):
        assert heading in page
    assert f"| commit measured | {doc['meta']['commit']} |" in page
    assert "## Tuning: before and after" in page and "(performance.md)" in page
    assert "PASS" in page or "MISS" in page
    if importlib.util.find_spec("matplotlib") is not None:
        assert image.stat().st_size > 10_000
        assert "](images/benchmarks.png)" in page
