"""Smoke test of benchmarks/queues_page_bench.py at tiny sizes on a real PostgreSQL, and of the renderer of
its figures (benchmarks/pages/queues_cost.py: the current cost and the before/after pair), so neither rots
between the runs that publish figures.

The benchmark itself checks what both codes saw (every depth, the error queue's size in the gauges, the
before code grouping every failed message and the after code only the newest 1,000); more failed
messages than that here make the after code's bounded sample the one measured.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def test_the_queues_page_benchmark_runs_both_codes_and_renders(tmp_path: Path) -> None:
    out = tmp_path / "queues-page.json"
    command = [
        sys.executable,
        str(BENCHMARKS / "queues_page_bench.py"),
        *("--queued", "300", "--failed", "1200", "--rounds", "2", "--json", str(out)),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    data = json.loads(out.read_text(encoding="utf-8"))
    [(name, run)] = data["runs"].items()
    assert (run["queued"], run["failed"], run["rounds"]) == (300, 1200, 2)
    assert run["commit"] and run["before_commit"] and run["machine"]["cpus"] >= 1
    measured = {(r["code"], r["what"]): r for r in data["results"]}
    assert set(measured) == {(code, what) for code in ("before", "after") for what in ("page", "poll")}
    for result in measured.values():
        assert result["run"] == name and len(result["rounds"]) == 2
        assert all(seconds > 0 for seconds in result["rounds"])

    sys.path.insert(0, str(BENCHMARKS))
    try:
        from pages.queues_cost import cost_lines, current_cost_lines
    finally:
        sys.path.remove(str(BENCHMARKS))
    for lines in (cost_lines(data), current_cost_lines(data)):
        assert "300 queued and 1,200 failed messages" in lines[0]
        assert len([line for line in lines if line.startswith("| one ")]) == 2
    assert run["commit"] not in "\n".join(current_cost_lines(data))
