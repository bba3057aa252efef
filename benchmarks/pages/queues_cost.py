"""What one Queues page load and one trigger poll cost on deep queues, from docs/data/queues-page.json
(benchmarks/queues_page_bench.py): the bounded reads' cost on docs/operating.md, and beside it the code from
before they were bounded, measured in the same run, on docs/history/operating.md."""

from __future__ import annotations

from typing import Any

from pages.blocks import load_data, machine_at_start, machine_brief, run_link

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


def _run(data: dict[str, Any]) -> tuple[dict[str, Any], dict[tuple[str, str], dict[str, Any]]]:
    [(name, run)] = data["runs"].items()
    return run, {(r["code"], r["what"]): r for r in data["results"] if r["run"] == name}


def _tables(run: dict[str, Any]) -> str:
    return f"PostgreSQL, {run['queued']:,} queued and {run['failed']:,} failed messages"


def current_cost_lines(data: dict[str, Any]) -> list[str]:
    """A table of the time each takes with the bounded reads (the run's "after" code), and how it was
    measured; the run's commit, date and load are on docs/runs.md, which the text links."""
    run, by_key = _run(data)
    lines = [f"| {_tables(run)} | time |", "|---|---:|"]
    lines += [f"| {label} | {_seconds(by_key[('after', what)])} |" for what, label in WHAT.items()]
    lines += [
        "",
        f"Wall-clock time of the API server's or the triggerer's side, median (min-max) of {run['rounds']} "
        f"rounds, each in a fresh process after one warm-up call, on tables filled with "
        f"{run['body_bytes']:,}-byte bodies, the error queue's rows in {run['failure_groups']} "
        "failure groups; "
        f"`benchmarks/queues_page_bench.py` on {machine_brief(run)}; PostgreSQL "
        f"{run['postgresql_settings']}. "
        f"{run_link(DATA_FILE)}",
    ]
    return lines


def cost_lines(data: dict[str, Any]) -> list[str]:
    """A table of the time each took, before and after, their ratio, and the run it comes from."""
    run, by_key = _run(data)
    lines = [
        f"| {_tables(run)} | before ({run['before_commit']}) | after ({run['commit']}) | before / after |",
        "|---|---:|---:|---:|",
    ]
    for what, label in WHAT.items():
        before, after = by_key[("before", what)], by_key[("after", what)]
        ratio = before["seconds"]["median"] / after["seconds"]["median"]
        lines.append(f"| {label} | {_seconds(before)} | {_seconds(after)} | {ratio:,.0f}x |")
    lines += [
        "",
        f"Wall-clock time of the API server's or the triggerer's side, median (min-max) of {run['rounds']} "
        f"rounds, both codes on the same tables in each round, in alternating order, each in a fresh process "
        f"after one warm-up call. The tables were filled with {run['body_bytes']:,}-byte bodies, the error "
        f"queue's rows in {run['failure_groups']} failure groups. Before is {run['before_commit']}'s package "
        f"({run['before_how']}): an exact count of every queue, the oldest message read with its body, every "
        f"error-queue header grouped on each load, the error queue counted exactly on each poll. Measured "
        f"{run['date'][:10]} on {machine_at_start(run)}; PostgreSQL {run['postgresql_settings']}.",
    ]
    return lines


def operating_blocks() -> dict[str, tuple[str, list[str]]]:
    return {"queues-page-cost": (f"docs/data/{DATA_FILE}", current_cost_lines(load_data(DATA_FILE)))}


def history_blocks() -> dict[str, tuple[str, list[str]]]:
    return {"queues-page-cost-before-after": (f"docs/data/{DATA_FILE}", cost_lines(load_data(DATA_FILE)))}
