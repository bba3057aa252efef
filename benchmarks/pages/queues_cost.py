"""What one Queues page load and one trigger poll cost on deep queues, before and after they were
bounded: the generated block of docs/operating.md, from docs/data/queues-page.json
(benchmarks/queues_page_bench.py)."""

from __future__ import annotations

from typing import Any

from pages.blocks import load_data

DATA_FILE = "queues-page.json"
WHAT = {
    "page": "one Queues page load (`/sqlqueue/api/queues`: `queues_overview`)",
    "poll": "one poll of `PendingMessagesTrigger` (its estimate and the gauges)",
}


def _seconds(result: dict[str, Any]) -> str:
    spread = result["seconds"]

    def text(value: float) -> str:
        return f"{value * 1000:,.0f} ms" if value >= 0.01 else f"{value * 1000:,.1f} ms"

    return f"{text(spread['median'])} ({text(spread['min'])}-{text(spread['max'])})"


def cost_lines(data: dict[str, Any]) -> list[str]:
    """A table of the time each took, before and after, their ratio, and the run it comes from."""
    [(name, run)] = data["runs"].items()
    by_key = {(r["code"], r["what"]): r for r in data["results"] if r["run"] == name}
    lines = [
        f"| PostgreSQL, {run['queued']:,} queued and {run['failed']:,} failed messages "
        f"| before ({run['before_commit']}) | after ({run['commit']}) | before / after |",
        "|---|---:|---:|---:|",
    ]
    for what, label in WHAT.items():
        before, after = by_key[("before", what)], by_key[("after", what)]
        ratio = before["seconds"]["median"] / after["seconds"]["median"]
        lines.append(f"| {label} | {_seconds(before)} | {_seconds(after)} | {ratio:,.0f}x |")
    machine = run["machine"]
    load = run["load_average_before"][0]
    lines += [
        "",
        f"Wall-clock time of the API server's or the triggerer's side, median (min-max) of {run['rounds']} "
        f"rounds, both codes on the same tables in each round, in alternating order, each in a fresh process "
        f"after one warm-up call. The tables were filled with {run['body_bytes']:,}-byte bodies, the error "
        f"queue's rows in {run['failure_groups']} failure groups. Before is {run['before_commit']}'s package "
        f"({run['before_how']}): an exact count of every queue, the oldest message read with its body, every "
        f"error-queue header grouped on each load, the error queue counted exactly on each poll. Measured "
        f"{run['date'][:10]} on {machine['cpus']} cores ({machine['cpu']}, "
        f"{machine['disk'].get('fstype', 'unknown')} disk), a 1-minute load average of {load:.1f} at the "
        f"start (other work shared the machine); PostgreSQL {run['postgresql_settings']}.",
    ]
    return lines


def operating_blocks() -> dict[str, tuple[str, list[str]]]:
    return {"queues-page-cost": (f"docs/data/{DATA_FILE}", cost_lines(load_data(DATA_FILE)))}
