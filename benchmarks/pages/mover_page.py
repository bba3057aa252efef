"""The delayed mover's rate before and after it moved due rows on the server: the generated block of
docs/delayed-delivery.md, from docs/data/delayed-mover.json (benchmarks/mover_bench.py)."""

from __future__ import annotations

from typing import Any

from pages.blocks import load_data

DATA_FILE = "delayed-mover.json"
ENGINE_LABELS = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


def _rate(result: dict[str, Any]) -> str:
    rate = result["rate"]
    return f"{rate['median']:,.0f} ({rate['min']:,.0f}-{rate['max']:,.0f})"


def mover_lines(data: dict[str, Any]) -> list[str]:
    """A table of messages moved per second, before and after, per engine, and the run it comes from."""
    [(name, run)] = data["runs"].items()
    by_key = {(r["engine"], r["code"]): r for r in data["results"] if r["run"] == name}
    lines = [
        f"| engine | before: Python round trip ({run['before_commit']}) "
        f"| after: on the server ({run['commit']}) | after / before |",
        "|---|---:|---:|---:|",
    ]
    for engine, label in ENGINE_LABELS.items():
        before, after = by_key[(engine, "before")], by_key[(engine, "after")]
        ratio = after["rate"]["median"] / before["rate"]["median"]
        lines.append(f"| {label} | {_rate(before)} | {_rate(after)} | {ratio:.1f}x |")
    machine = run["machine"]
    load = run["load_average_before"][0]
    lines += [
        "",
        f"Messages moved per second, median (min-max) of {run['rounds']} rounds of {run['messages']:,} due "
        f"messages ({run['body_bytes']:,}-byte bodies, batches of {run['batch']}), both movers back to back "
        f"in each round, in alternating order: the before mover is {run['before_commit']}'s package "
        f"({run['before_how']}). Measured {run['date'][:10]} on {machine['cpus']} cores ({machine['cpu']}, "
        f"{machine['disk'].get('fstype', 'unknown')} disk), a 1-minute load average of {load:.1f} at the "
        f"start (other work shared the machine); SQLite {run['sqlite_settings']}, PostgreSQL "
        f"{run['postgresql_settings']}.",
    ]
    return lines


def delayed_delivery_blocks() -> dict[str, tuple[str, list[str]]]:
    return {"mover-rate": (f"docs/data/{DATA_FILE}", mover_lines(load_data(DATA_FILE)))}
