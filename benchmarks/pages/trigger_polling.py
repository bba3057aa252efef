"""Deferred sensors on one triggerer loop, a transport per trigger beside the shared poller, from
docs/data/trigger-polling.json (benchmarks/trigger_polling_bench.py), on docs/sensor.md."""

from __future__ import annotations

import statistics
from typing import Any

from pages.blocks import load_data, machine_brief, run_link

DATA_FILE = "trigger-polling.json"
ENGINE_LABELS = {"postgresql": "PostgreSQL", "sqlite": "SQLite", "babelfish": "Babelfish"}
CODE_LABELS = {"before": "a transport per trigger", "after": "shared poller"}


def _latency(result: dict[str, Any]) -> str:
    seen = [value for value in result["latencies_ms"] if value is not None]
    missed = len(result["latencies_ms"]) - len(seen)
    if result["sender_error"] and not result["latencies_ms"]:
        return "the sender could not send: " + result["sender_error"].split(":")[0]
    if not seen:
        return f"none of {missed} seen"
    text = f"{statistics.median(seen):,.0f} ({max(seen):,.0f})"
    return text + (f", {missed} missed" if missed else "")


def _ratio(after: float, before: float) -> str:
    return "n/a" if not before else f"{after / before:.2g}x"


def sensor_lines(data: dict[str, Any]) -> list[str]:
    """The table of both designs per engine, their ratios and how the run was made."""
    [(name, run)] = data["runs"].items()
    by_key = {(r["engine"], r["code"]): r for r in data["results"] if r["run"] == name}
    engines = [e for e in ENGINE_LABELS if (e, "after") in by_key]
    lines = [
        "| engine | sensors / queues | design | connections held | statements per second | CPU, cores busy "
        "| send to event, ms: median (max) |",
        "|---|---:|---|---:|---:|---:|---|",
    ]
    for engine in engines:
        for code in ("before", "after"):
            result = by_key[(engine, code)]
            held = "none sampled" if result["held_max"] is None else str(result["held_max"])
            scale = f"{result.get('sensors', run['sensors']):,} / {result.get('queues', run['queues']):,}"
            lines.append(
                f"| {ENGINE_LABELS[engine]} | {scale} | {CODE_LABELS[code]} | {held} "
                f"| {result['statements_per_second']:,.1f} | {result['cpu_per_second']:.3f} "
                f"| {_latency(result)} |"
            )
    lines += ["", "| engine | statements per second, shared / per trigger | CPU, shared / per trigger |"]
    lines += ["|---|---:|---:|"]
    for engine in engines:
        before, after = by_key[(engine, "before")], by_key[(engine, "after")]
        lines.append(
            f"| {ENGINE_LABELS[engine]} "
            f"| {_ratio(after['statements_per_second'], before['statements_per_second'])} "
            f"| {_ratio(after['cpu_per_second'], before['cpu_per_second'])} |"
        )
    babelfish = (
        f", Babelfish {run['babelfish_settings']}"
        if "babelfish" in engines and "babelfish_settings" in run
        else ""
    )
    lines += [
        "",
        "Deferred `PendingMessagesTrigger`s (`min_messages=1`, `poll_interval` "
        f"{run['poll_interval']:g} seconds) spread over empty queues on one asyncio loop, each "
        f"in its own task as the triggerer runs them, measured for {run['seconds']:g} seconds after "
        f"{run['warmup_polls']} poll intervals of warm-up: connections as the largest sample of "
        "`pg_stat_activity` (SQLite: open descriptors of the database file; Babelfish: the process's open "
        "TCP connections, all to the server), statements as the driver ran them, CPU as the "
        f"process's CPU time per second; then {run['sends']} sends, one at a time to "
        "another queue each, timed from the send's commit to its trigger's event. The per-trigger design "
        "is the package as it was before the shared poller, exported with `git archive` and measured in the "
        f"same run. `benchmarks/trigger_polling_bench.py` on {machine_brief(run)}; PostgreSQL "
        f"a {run['postgresql_settings']}, SQLite {run['sqlite_settings']}{babelfish}. {run_link(DATA_FILE)}",
    ]
    return lines


def sensor_blocks() -> dict[str, tuple[str, list[str]]]:
    return {"deferred-sensors": (f"docs/data/{DATA_FILE}", sensor_lines(load_data(DATA_FILE)))}
