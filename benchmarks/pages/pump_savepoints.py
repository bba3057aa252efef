"""What a batching pump costs whose handler writes one row on the lent connection, against its ceiling, from
docs/data/pump-savepoints.json (benchmarks/pump_savepoint_bench.py): the current cost on docs/exactly-once.md,
and beside it the code from before the savepoint travelled with the handler's first statement, measured in
the same run, on docs/history/performance-tuning.md."""

from __future__ import annotations

from typing import Any

from pages.blocks import load_data, machine_at_start, machine_brief, run_link

DATA_FILE = "pump-savepoints.json"
ENGINES = {"postgresql": "PostgreSQL", "sqlite": "SQLite"}
UNIT = {"postgresql": "round trips", "sqlite": "statements"}


def _run(data: dict[str, Any]) -> tuple[dict[str, Any], dict[tuple[str, str], dict[str, Any]]]:
    [(name, run)] = data["runs"].items()
    return run, {(r["engine"], r["case"]): r for r in data["results"] if r["run"] == name}


def _rate(result: dict[str, Any]) -> str:
    spread = result["msgs_per_s"]
    return f"{spread['median']:,.0f} ({spread['min']:,.0f}-{spread['max']:,.0f})"


def _ratio(result: dict[str, Any], ceiling: dict[str, Any]) -> float:
    """The median of the per-round ratios to the ceiling (the same round's drain)."""
    ratios = sorted(mine / raw for mine, raw in zip(result["rounds"], ceiling["rounds"], strict=True))
    middle = len(ratios) // 2
    return ratios[middle] if len(ratios) % 2 else (ratios[middle - 1] + ratios[middle]) / 2


def _per_message(result: dict[str, Any]) -> str:
    traced = result["traced"]
    return f"{traced['counted'] / traced['messages']:.2f}"


def _engines(data: dict[str, Any]) -> list[str]:
    _, by_key = _run(data)
    return [engine for engine in ENGINES if (engine, "ceiling") in by_key]


def _how(run: dict[str, Any], *, on_user_page: bool) -> str:
    return (
        f"Messages per second, median (min-max) of {run['rounds']} rounds, each case draining "
        f"{run['messages']:,} pre-filled messages in batches of {run['batch']} through one connection, in "
        "rotating order, each in a fresh process; the ratio is the median of the rounds' ratios to the "
        "same round's ceiling. The ceiling is the raw driver doing the same work with nothing around it: per "
        "batch the queue's receive statement, one `INSERT` per message, one commit. Per message: what the "
        f"driver sent while {run['traced_messages']} more messages were drained, everything included (the "
        "receives and commits too): round trips on PostgreSQL, statements on SQLite, which runs in the "
        f"process. `benchmarks/pump_savepoint_bench.py` on "
        f"{machine_brief(run) if on_user_page else machine_at_start(run)}; PostgreSQL "
        f"{run['versions'].get('postgresql', '')}, {run['postgresql_settings']}; SQLite "
        f"{run['versions'].get('sqlite', '')}, {run['sqlite_settings']}. "
        + (
            run_link(DATA_FILE)
            if on_user_page
            else f"Every figure it recorded is in `docs/data/{DATA_FILE}`."
        )
    )


def current_cost_lines(data: dict[str, Any]) -> list[str]:
    """The pump against its ceiling per engine, and what each sends per message."""
    run, by_key = _run(data)
    lines = [
        "| engine | ceiling: raw driver, msgs/s | batching pump, msgs/s | pump / ceiling | per message: "
        "ceiling | pump |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for engine in _engines(data):
        ceiling, pump = by_key[(engine, "ceiling")], by_key[(engine, "pump")]
        lines.append(
            f"| {ENGINES[engine]} | {_rate(ceiling)} | {_rate(pump)} | **{_ratio(pump, ceiling):.2f}x** | "
            f"{_per_message(ceiling)} {UNIT[engine]} | {_per_message(pump)} {UNIT[engine]} |"
        )
    return [*lines, "", _how(run, on_user_page=True)]


def before_after_lines(data: dict[str, Any]) -> list[str]:
    """Both codes against the same ceiling, in one run."""
    run, by_key = _run(data)
    before = run["before_commit"]
    lines = [
        f"| engine | ceiling, msgs/s | before ({before}) | after ({run['commit']}) | per message: before | "
        "after |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for engine in _engines(data):
        ceiling = by_key[(engine, "ceiling")]
        old, new = by_key[(engine, "before")], by_key[(engine, "pump")]
        lines.append(
            f"| {ENGINES[engine]} | {_rate(ceiling)} | {_rate(old)}: {_ratio(old, ceiling):.2f}x | "
            f"{_rate(new)}: {_ratio(new, ceiling):.2f}x | {_per_message(old)} {UNIT[engine]} | "
            f"{_per_message(new)} {UNIT[engine]} |"
        )
    return [
        *lines,
        "",
        f"Before is {before}'s package (exported with `git archive` and run in the same run): each message's "
        "savepoint marked when the handler was lent the connection and released after it, each statement "
        "on its own. After: the savepoint sent with the handler's first statement (psycopg's pipeline on "
        "PostgreSQL), where a batch's savepoints nest until its commit instead of each being released; on "
        "SQLite the previous one released just before, and the transaction checked by the driver's state "
        "after each statement instead of a query of the queue; also SQLite's statement journal kept in "
        "memory (`temp_store=MEMORY`: the batch's journal outgrew its 64 KiB and every savepoint wrote to "
        "a temporary file), and a handler's attempt freed when it ends rather than by the garbage "
        "collector. "
        f"Measured {run['date'][:10]}. " + _how(run, on_user_page=False),
    ]


def exactly_once_blocks() -> dict[str, tuple[str, list[str]]]:
    return {"pump-savepoint-cost": (f"docs/data/{DATA_FILE}", current_cost_lines(load_data(DATA_FILE)))}


def history_blocks() -> dict[str, tuple[str, list[str]]]:
    return {
        "pump-savepoint-before-after": (f"docs/data/{DATA_FILE}", before_after_lines(load_data(DATA_FILE)))
    }
