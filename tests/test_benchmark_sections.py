"""The handler-throughput and wake-up sections of benchmarks/run.py, from their JSON to their targets and
page (issue 17): each peer compared at its own level, features missing from a build reported as such,
latencies as milliseconds, and a partial run (``--only``) merged into an existing results file. Nothing is
measured here; tests/test_benchmarks_smoke.py runs the sections themselves."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
COMMITTED = json.loads((ROOT / "docs" / "benchmarks" / "results.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def modules() -> dict[str, Any]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import run
        import wakeup_bench
        from pages import benchmarks_page, throughput
    finally:
        sys.path.remove(str(BENCHMARKS))
    return {"run": run, "wakeup": wakeup_bench, "page": benchmarks_page, "throughput": throughput}


def _meta() -> dict[str, Any]:
    return {
        "date": "2026-11-23T23:00:00+00:00",
        "commit": "abc1234",
        "command": "benchmarks/run.py --only handlers,wakeup",
        "load_average_before": [0.1, 0.1, 0.1],
        "seconds": 60.0,
    }


def _handler(
    engine: str, case: str, rates: list[float], level: str = "handler", **extra: Any
) -> dict[str, Any]:
    rounds = [{"msgs_per_s": rate, "seconds": 1.0, "client_cpu_us_per_msg": 10.0} for rate in rates]
    row = {
        "engine": engine,
        "case": case,
        "label": case,
        "level": level,
        "n": 10_000,
        "batch": 100,
        "concurrency": 4,
        "available": bool(rates),
        "rounds": rounds,
        **extra,
    }
    if rates:
        row["msgs_per_s"] = {"median": sorted(rates)[len(rates) // 2], "min": min(rates), "max": max(rates)}
    return row


def _document(batch_rates: list[float] | None, push: dict[str, Any] | None) -> dict[str, Any]:
    doc = copy.deepcopy(COMMITTED)
    unavailable = "not available in this build: MessagePump has no batch_size parameter"
    rows = [
        _handler("postgresql", "raw_receive_batch", [40_000.0, 50_000.0, 60_000.0], "bare receive"),
        _handler("postgresql", "pump_batch_1", [1_400.0, 1_500.0, 1_600.0]),
        _handler("postgresql", "pgqueuer", [5_000.0, 6_000.0, 7_000.0]),
        _handler("postgresql", "procrastinate", [400.0, 500.0, 600.0]),
        _handler("sqlite", "raw_receive_batch", [30_000.0], "bare receive"),
    ]
    if batch_rates is None:
        rows.insert(2, _handler("postgresql", "pump_batch_100", [], reason=unavailable))
        rows.append(_handler("sqlite", "pump_batch_100", [], reason=unavailable))
    else:
        rows.insert(2, _handler("postgresql", "pump_batch_100", batch_rates))
        rows.append(_handler("sqlite", "pump_batch_100", [12_000.0]))
    doc["handlers"] = {"meta": _meta(), "n": 10_000, "repeat": 3, "rows": rows, "skipped": []}
    settings = {"sends": 50, "spacing_s": 0.1, "idle_s": 3.0}
    base = {"engine": "postgresql", "system": "sqlqueue", **settings}
    push_row = (
        {**base, "case": "pump_push", "label": "push", "wake_up": "auto", "available": True, **push}
        if push
        else {
            **base,
            "case": "pump_push",
            "label": "push",
            "wake_up": "auto",
            "available": False,
            "reason": "not available in this build: MessagePump has no wake_up parameter",
        }
    )
    poll = {"p50_ms": 480.0, "p95_ms": 950.0, "max_ms": 1001.0, "min_ms": 3.0}
    doc["wakeup"] = {
        "meta": _meta(),
        "settings": settings,
        "rows": [
            push_row,
            {**base, "case": "pump_poll", "label": "poll", "wake_up": "poll", "available": True, **poll},
        ],
    }
    return doc


def _is(name: str, engine: str, fragment: str) -> bool:
    return name.startswith(engine) and fragment in name


def _targets(modules: dict[str, Any], doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {target["target"]: target for target in modules["throughput"].compute_targets(doc, None)}


def test_no_target_sets_a_peer_consumer_against_a_bare_receive(modules) -> None:
    for name in _targets(modules, COMMITTED):
        if "pgqueuer" in name and "receive" in name:
            pytest.fail(f"a bare receive is compared with pgqueuer's consumer: {name}")


def test_the_batching_pump_is_judged_against_pgqueuers_consumer_and_raw_receive_batch(modules) -> None:
    targets = _targets(
        modules, _document([18_000.0, 20_000.0, 36_000.0], {"p50_ms": 4.0, "p95_ms": 61.0, "max_ms": 70.0})
    )
    peer = next(target for name, target in targets.items() if "vs pgqueuer's consumer" in name)
    assert peer["value"] == pytest.approx(20_000 / 6_000) and peer["status"] == "PASS"
    assert "ceiling: raw receive_batch, no handler, reaches 8.33x" in peer["detail"]
    raw = next(target for name, target in targets.items() if _is(name, "PostgreSQL", "vs raw receive_batch"))
    # the median of the per-round ratios (0.45, 0.4, 0.6), not the ratio of the medians (0.4)
    assert raw["value"] == pytest.approx(0.45) and raw["status"] == "MISS"
    sqlite = next(target for name, target in targets.items() if _is(name, "SQLite", "vs raw receive_batch"))
    assert sqlite["value"] == pytest.approx(0.4)
    p50 = next(target for name, target in targets.items() if "p50 with push" in name)
    p95 = next(target for name, target in targets.items() if "p95 with push" in name)
    assert (p50["value"], p50["status"], p50["op"], p50["unit"]) == (4.0, "PASS", "<=", "ms")
    assert (p95["value"], p95["status"]) == (61.0, "MISS")
    assert modules["throughput"].value_text(p95) == "61.0 ms"
    assert modules["throughput"].wanted_text(p95) == "<= 50.0 ms"


def test_a_pump_feature_missing_from_the_build_is_not_available_never_a_figure(modules) -> None:
    targets = _targets(modules, _document(None, None))
    for fragment in ("vs pgqueuer's consumer", "vs raw receive_batch", "p50 with push", "p95 with push"):
        target = next(target for name, target in targets.items() if _is(name, "PostgreSQL", fragment))
        assert target["value"] is None and target["status"] == "not available in this build", fragment
        assert "MessagePump has no" in target["detail"]
    page = modules["page"].page_text(_document(None, None), None, "images/benchmarks.png", False)
    assert page.count("not available in this build: MessagePump has no batch_size parameter") == 2
    assert "not available in this build: MessagePump has no wake_up parameter" in page


def test_the_page_shows_both_sections_with_their_commit(modules) -> None:
    page = modules["page"].page_text(
        _document([20_000.0] * 3, {"p50_ms": 4.0, "p95_ms": 9.0, "max_ms": 12.0}), None, "x.png", False
    )
    handlers = page[page.index("## Handler throughput") : page.index("## Wake-up latency")]
    assert "| PostgreSQL | raw driver `receive_batch` (1 process) | bare receive | 10,000 |" in handlers
    assert "| PostgreSQL | **sqlqueue** pump_batch_100 | handler | 10,000 | 100 | 4 | 20,000 |" in handlers
    assert "at commit abc1234" in handlers
    wakeup = page[page.index("## Wake-up latency") : page.index("## Targets")]
    assert "| PostgreSQL | **sqlqueue** push | 50 | 4.0 | 9.0 | 12.0 |" in wakeup
    assert "after 3 s idle" in page and "| <= 20.0 ms | ✅ PASS |" in page


def test_the_percentile_is_the_nearest_rank(modules) -> None:
    values = [float(value) for value in range(1, 51)]
    assert modules["wakeup"].percentile(values, 0.5) == 25.0
    assert modules["wakeup"].percentile(values, 0.95) == 48.0
    assert modules["wakeup"].percentile([7.0], 0.95) == 7.0


def test_wake_up_modes_follow_the_pumps_parameters(modules) -> None:
    arguments = modules["wakeup"].pump_wake_up_arguments
    assert arguments("auto", {"queue", "handler"}) is None  # no push without the parameter
    assert arguments("poll", {"queue", "handler"}) == {}  # today's pump polls
    assert arguments("auto", {"queue", "wake_up"}) == {"wake_up": "auto"}
    assert arguments("poll", {"queue", "wake_up"}) == {"wake_up": "poll"}


def test_a_partial_run_replaces_its_sections_and_keeps_the_others(modules, tmp_path: Path) -> None:
    target = tmp_path / "results.json"
    target.write_text(json.dumps(COMMITTED), encoding="utf-8")
    fresh = _document([20_000.0], None)
    partial = {
        "meta": {**COMMITTED["meta"], "sections": ["handlers", "wakeup"], "versions": {"postgresql": "16"}},
        "handlers": fresh["handlers"],
        "wakeup": fresh["wakeup"],
    }
    merged = modules["run"].merged(target, partial)
    assert merged["core"] == COMMITTED["core"] and merged["peers"] == COMMITTED["peers"]
    assert merged["meta"] == {**COMMITTED["meta"], "versions": {**COMMITTED["meta"]["versions"]}}
    assert merged["handlers"]["meta"]["commit"] == "abc1234" and merged["wakeup"] == fresh["wakeup"]
    assert modules["run"].merged(tmp_path / "none.json", partial) is partial
    scale = tmp_path / "scale.json"
    scale.write_text(json.dumps({"meta": {"kind": "scale"}}), encoding="utf-8")
    with pytest.raises(SystemExit, match="not a throughput results file"):
        modules["run"].merged(scale, partial)
