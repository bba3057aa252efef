"""docs/reliability.md: the table of the reliability checks, with the engines each ran on, and its two
detail tables, from docs/data/reliability.json. Every figure is read here from the entries a result names
under "recorded" (copied unchanged from a run's figures file, tests/reliability_figures.py), never
retyped; a result without entries says only that its tests ran and passed in that run."""

from __future__ import annotations

from typing import Any

from pages.blocks import load_data, run_link

DATA_FILE = "reliability.json"
SOURCE = f"docs/data/{DATA_FILE}"
ENGINE_NAMES = {
    "postgresql": "PostgreSQL",
    "sqlite": "SQLite",
    "babelfish-freetds": "Babelfish (FreeTDS)",
    "babelfish-msodbc": "Babelfish (ODBC Driver 18)",
}


def _number(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _with_note(value: Any, note: str | None) -> str:
    return _number(value) + (f" ({note})" if note else "")


def result_figures(result: dict[str, Any], recorded: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The cells of one engine's result, read from the recorded entries it names (none: the tests ran and
    passed in that run but record no figures)."""
    entries = [recorded[node] for node in result.get("recorded", [])]
    if not entries:
        return {"messages": "", "faults_injected": "", "lost": "", "duplicated": ""}
    messages = [entry["messages"] for entry in entries if "messages" in entry]
    if len(entries) > 1 and len(set(messages)) == 1:
        messages_text = f"{len(entries)} tests of {messages[0]:,}"
    elif len(entries) == 1 and "largest_body_bytes" in entries[0]:
        messages_text = f"a {entries[0]['largest_body_bytes'] / 2**20:,.0f} MB body"
    else:
        messages_text = " + ".join(f"{count:,}" for count in messages)
    notes = []
    fault_notes = []
    for entry in entries:
        if "received_by_pumps" in entry:
            notes.append(
                f"{entry['received_by_plain_receivers']:,} by receivers, "
                f"{entry['received_by_pumps']:,} by pumps"
            )
        if "messages_held_when_killed" in entry:
            notes.append(f"{entry['messages_held_when_killed']:,} held by the killed consumers")
        if "acknowledged" in entry:
            notes.append(
                f"{entry['acknowledged']:,} acknowledged; {entry['unacknowledged']:,} unacknowledged, "
                f"{entry['unacknowledged_but_stored']:,} of them stored; the pump handled "
                f"{entry['pump_processed_after_restart']:,} after the restart"
            )
        if "acknowledged" in entry:
            fault_notes.append(f"a restart, {entry['outage_seconds']} s outage")
        if "kills" in entry:
            fault_notes.append(_kills_and_restarts(entry))
        if "handler_failures" in entry:
            fault_notes.append(
                f"{entry['receives_rolled_back']:,} rollbacks, {entry['handler_failures']:,} handler failures"
            )
        if "poison_kinds" in entry:
            fault_notes.append("poison rows")
    faults = [entry["faults_injected"] for entry in entries if "faults_injected" in entry]
    cells = {
        "messages": _with_note(messages_text, "; ".join(notes)) if messages else "",
        "faults_injected": _with_note(f"{sum(faults):,}", "; ".join(fault_notes)) if faults else "",
        "lost": f"{sum(entry['lost'] for entry in entries):,}" if all("lost" in e for e in entries) else "",
        "duplicated": f"{sum(entry['duplicated'] for entry in entries):,}"
        if all("duplicated" in e for e in entries)
        else "",
    }
    watched = [entry for entry in entries if "leaks" in entry]
    if watched:
        entry = watched[0]
        canary = "canary detected" if entry["canary_detected"] else "canary NOT detected"
        cells["faults_injected"] = (
            f"{entry['operators']} operators ({entry['sweeps']:,} sweeps over {entry['processes_watched']} "
            f"processes, {entry['spark_command_lines']} Spark command lines seen, {canary})"
        )
        cells["lost"] = f"{entry['leaks']} leaks"
    return cells


def _kills_and_restarts(entry: dict[str, Any]) -> str:
    restarts = entry["restarts"]
    restart_text = f", {restarts} server restart{'s' if restarts != 1 else ''}" if restarts else ""
    return f"{entry['kills']} kills{restart_text}"


def exactly_once_table(data: dict[str, Any]) -> list[str]:
    """Items 11 and 12 per engine: what the faults undid and what the tables hold afterwards, read from
    the copied entries of the checks that data["exactly_once"]["items"] names."""
    items = set(data["exactly_once"]["items"])
    checks = [check for check in data["checks"] if check["item"] in items]
    engines = sorted(
        {ENGINE_NAMES[result["engine"]] for check in checks for result in check["results"]},
        key=list(ENGINE_NAMES.values()).index,
    )
    lines = [
        f"Executed on {', '.join(engines)} (Babelfish is not Microsoft SQL Server: nothing here was verified "
        "on SQL Server).",
        "",
        "| item | engine | messages | kills | server restarts | handler calls undone by the faults | "
        "failed on purpose (calls) | in the error queue | business rows | counter | sends | lost | "
        "duplicated | seconds |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for check in checks:
        for result in check["results"]:
            for node in result["recorded"]:
                entry = data["recorded"][node]
                failed = (
                    f"{entry['failing_messages']:,} ({entry['handler_calls_failed_on_purpose']:,})"
                    if entry["failing_messages"]
                    else "0"
                )
                lines.append(
                    f"| {check['item']} | {ENGINE_NAMES[result['engine']]} | {entry['messages']:,} | "
                    f"{entry['kills']} | {entry['restarts']} | {entry['handler_calls_undone_by_faults']:,} | "
                    f"{failed} | {entry['error_queue']:,} | {entry['business_rows']:,} | "
                    f"{entry['counter']:,} | {entry['sends']:,} | {entry['lost']:,} | "
                    f"{entry['duplicated']:,} | {entry['seconds']} |"
                )
    return lines


def _joined(cells: list[tuple[str, str]]) -> str:
    """One engine's cell each, or one cell for all when every engine's is the same."""
    filled = [(engine, cell) for engine, cell in cells if cell]
    if not filled:
        return ""
    if len({cell for _, cell in filled}) == 1 and len(filled) == len(cells):
        return filled[0][1]
    return "; ".join(f"{engine} {cell}" for engine, cell in filled)


def runs_covered(data: dict[str, Any]) -> dict[str, list[str]]:
    """Which figures of docs/reliability.md each run recorded: the items and engines whose results name it,
    and the detail tables'."""
    covered: dict[str, list[str]] = {name: [] for name in data["runs"]}
    for check in data["checks"]:
        by_run: dict[str, list[str]] = {}
        for result in check["results"]:
            by_run.setdefault(result["run"], []).append(ENGINE_NAMES[result["engine"]])
        for run, engines in by_run.items():
            covered[run].append(f"item {check['item']} ({', '.join(engines)})")
    covered[data["spark_kills"]["run"]].append("item 4 in detail")
    covered[data["soak"]["run"]].append("item 10 in detail")
    return covered


def checks_table(data: dict[str, Any]) -> list[str]:
    lines = [
        "| # | guarantee | proved by | engines | messages | faults injected | lost | duplicated |",
        "|---|---|---|---|---:|---:|---:|---:|",
    ]
    for check in data["checks"]:
        results = check["results"]
        engines = ", ".join(ENGINE_NAMES[result["engine"]] for result in results)
        cells = {key: [] for key in ("messages", "faults_injected", "lost", "duplicated")}
        for result in results:
            figures = result_figures(result, data["recorded"])
            for key, cell in figures.items():
                cells[key].append((ENGINE_NAMES[result["engine"]], cell))
        lines.append(
            f"| {check['item']} | {check['guarantee']} | {check['proved_by']} | {engines} | "
            + " | ".join(_joined(cells[key]) for key in ("messages", "faults_injected", "lost", "duplicated"))
            + " |"
        )
    return lines


def _test_name(node: str) -> str:
    return node.split("::")[-1].split("[")[0]


def _killed(entry: dict[str, Any]) -> str:
    if "killed_in" in entry:
        return f"driver, while {entry['killed_in']}"
    if "retried_tasks" in entry:
        return f"{entry['faults_injected']} workers mid receive ({entry['retried_tasks']} tasks retried)"
    return f"{entry['faults_injected']} worker mid transform"


def _when_killed(entry: dict[str, Any]) -> str:
    if "queued_when_killed" in entry:
        return f"{entry['staged_when_killed']:,} / {entry['queued_when_killed']:,}"
    if "staged_when_killed" in entry:
        return f"{entry['staged_when_killed']:,} staged"
    return ""


def spark_kills_table(data: dict[str, Any]) -> list[str]:
    """Item 4 test by test, from the recorded entries ``data["spark_kills"]`` names."""
    kills = data["spark_kills"]
    lines = [
        "| test | engine | sink | killed | messages | staged / queued when killed | lost | duplicated |",
        "|---|---|---|---|---:|---|---:|---:|",
    ]
    for node in kills["recorded"]:
        entry = data["recorded"][node]
        lines.append(
            f"| `{_test_name(node)}` | {ENGINE_NAMES[entry['engine']]} | {entry['sink']} | "
            f"{_killed(entry)} | {entry['messages']:,} | {_when_killed(entry)} | {entry['lost']:,} | "
            f"{entry['duplicated']:,} |"
        )
    return lines


def soak_table(data: dict[str, Any]) -> list[str]:
    """Item 10 per engine, from the recorded entries ``data["soak"]`` names."""
    soak = data["soak"]
    entries = [data["recorded"][node] for node in soak["recorded"]]
    seconds = sorted({entry["soak_seconds"] for entry in entries})
    lines = [
        f"{' / '.join(f'{value:g}' for value in seconds)} s per engine.",
        "",
        "| engine | sent | processed | expired (dropped on receive / purged) | RSS start -> end | "
        "connections start -> end (peak) | lost | duplicated |",
        "|---|---:|---:|---|---|---|---:|---:|",
    ]
    for entry in entries:
        lines.append(
            f"| {ENGINE_NAMES[entry['engine']]} | {entry['messages']:,} | {entry['processed']:,} | "
            f"{entry['expired_dropped_on_receive']:,} / {entry['purged_expired']:,} | "
            f"{entry['rss_mb_start']:.1f} -> {entry['rss_mb_end']:.1f} MB | "
            f"{entry['connections_start']} -> {entry['connections_end']} ({entry['connections_peak']}) | "
            f"{entry['lost']:,} | {entry['duplicated']:,} |"
        )
    return lines


def blocks() -> dict[str, tuple[str, list[str]]]:
    data = load_data("reliability.json")
    return {
        "reliability-runs": (SOURCE, [run_link(DATA_FILE)]),
        "reliability-checks": (SOURCE, checks_table(data)),
        "reliability-spark-kills": (SOURCE, spark_kills_table(data)),
        "reliability-soak": (SOURCE, soak_table(data)),
        "reliability-exactly-once": (SOURCE, exactly_once_table(data)),
    }


def lost_and_duplicated(data: dict[str, Any]) -> tuple[int, int]:
    """The messages lost and duplicated over every recorded entry the page shows (the checks', the Spark
    kills' and the soak's), each entry once; an entry without message counts (a leak watch) adds none."""
    nodes = {
        node for check in data["checks"] for result in check["results"] for node in result.get("recorded", [])
    }
    nodes |= set(data["spark_kills"]["recorded"]) | set(data["soak"]["recorded"])
    entries = [data["recorded"][node] for node in sorted(nodes)]
    return (
        sum(entry.get("lost", 0) for entry in entries),
        sum(entry.get("duplicated", 0) for entry in entries),
    )


def readme_blocks() -> dict[str, tuple[str, list[str]]]:
    """The README's one-line summary of the reliability checks, its counts summed from the checks' data."""
    lost, duplicated = lost_and_duplicated(load_data("reliability.json"))
    return {
        "readme-measured": (
            SOURCE,
            [
                "- **Measured** ([reliability](docs/reliability.md), [benchmarks](docs/benchmarks.md),",
                "  [performance tuning](docs/performance.md)): fault injection (killed consumers, database "
                "restarts, killed",
                f"  Spark tasks and drivers, hostile names, poison rows, a soak) with lost = {lost:,} and "
                f"duplicated = {duplicated:,}; throughput",
                "  side by side with the raw database and with pgqueuer, procrastinate, kombu and "
                "persist-queue.",
            ],
        )
    }
