"""The delayed mover's rate, from docs/data/delayed-mover.json (benchmarks/mover_bench.py): the current
mover's on docs/delayed-delivery.md, and beside it the mover that read each due row into Python, measured in
the same run, on docs/history/delayed-delivery.md."""

from __future__ import annotations

from typing import Any

from pages.blocks import load_data, machine_at_start, machine_brief, run_link

DATA_FILE = "delayed-mover.json"
ENGINE_LABELS = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


def _rate(result: dict[str, Any]) -> str:
    rate = result["rate"]
    return f"{rate['median']:,.0f} ({rate['min']:,.0f}-{rate['max']:,.0f})"


def _run(data: dict[str, Any]) -> tuple[dict[str, Any], dict[tuple[str, str], dict[str, Any]]]:
    [(name, run)] = data["runs"].items()
    return run, {(r["engine"], r["code"]): r for r in data["results"] if r["run"] == name}


def _engines(run: dict[str, Any]) -> str:
    return f"SQLite {run['sqlite_settings']}, PostgreSQL {run['postgresql_settings']}"


def current_lines(data: dict[str, Any]) -> list[str]:
    """A table of messages moved per second by the current mover (the run's "after" code), per engine, and
    how they were measured; the run's commit, date and load are on docs/runs.md, which the text links."""
    run, by_key = _run(data)
    lines = ["| engine | messages moved per second |", "|---|---:|"]
    lines += [f"| {label} | {_rate(by_key[(engine, 'after')])} |" for engine, label in ENGINE_LABELS.items()]
    lines += [
        "",
        f"Median (min-max) of {run['rounds']} rounds of {run['messages']:,} due messages for one destination "
        f"({run['body_bytes']:,}-byte bodies, batches of {run['batch']}), each round timing `move_once()` "
        f"until the delayed table was empty; `benchmarks/mover_bench.py` on {machine_brief(run)}; "
        f"{_engines(run)}. {run_link(DATA_FILE)}",
    ]
    return lines


def before_after_lines(data: dict[str, Any]) -> list[str]:
    """A table of messages moved per second, before and after, per engine, and the run it comes from."""
    run, by_key = _run(data)
    lines = [
        f"| engine | before: Python round trip ({run['before_commit']}) "
        f"| after: on the server ({run['commit']}) | after / before |",
        "|---|---:|---:|---:|",
    ]
    for engine, label in ENGINE_LABELS.items():
        before, after = by_key[(engine, "before")], by_key[(engine, "after")]
        ratio = after["rate"]["median"] / before["rate"]["median"]
        lines.append(f"| {label} | {_rate(before)} | {_rate(after)} | {ratio:.1f}x |")
    lines += [
        "",
        f"Messages moved per second, median (min-max) of {run['rounds']} rounds of {run['messages']:,} due "
        f"messages ({run['body_bytes']:,}-byte bodies, batches of {run['batch']}), both movers back to back "
        f"in each round, in alternating order: the before mover is {run['before_commit']}'s package "
        f"({run['before_how']}). Measured {run['date'][:10]} on {machine_at_start(run)}; {_engines(run)}.",
    ]
    return lines


def delayed_delivery_blocks() -> dict[str, tuple[str, list[str]]]:
    return {"mover-rate": (f"docs/data/{DATA_FILE}", current_lines(load_data(DATA_FILE)))}


def history_blocks() -> dict[str, tuple[str, list[str]]]:
    return {"mover-rate-before-after": (f"docs/data/{DATA_FILE}", before_after_lines(load_data(DATA_FILE)))}
