"""docs/reliability.md: the table of the reliability checks, with the engines each ran on, and its two
detail tables, from docs/data/reliability.json. A result either carries the figures of a run whose raw file
is gone (transcribed, its run says so) or names the entries of a raw figures file it was copied from; the
figures of those are read here, never retyped."""

from __future__ import annotations

from typing import Any

from pages.blocks import load_data

SOURCE = "docs/data/reliability.json"
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
    """The cells of one engine's result: a transcribed result as it stands, a copied one from its entries."""
    if not result.get("recorded"):
        return {
            "messages": _with_note(result["messages"], result.get("messages_note"))
            if "messages" in result
            else "",
            "faults_injected": _with_note(result["faults_injected"], result.get("faults_note"))
            if "faults_injected" in result
            else "",
            "lost": _number(result["lost"]) if "lost" in result else "",
            "duplicated": _number(result["duplicated"]) if "duplicated" in result else "",
        }
    entries = [recorded[node] for node in result["recorded"]]
    messages = [entry["messages"] for entry in entries if "messages" in entry]
    if len(entries) > 1 and len(set(messages)) == 1:
        messages_text = f"{len(entries)} tests of {messages[0]:,}"
    elif len(entries) == 1 and "largest_body_bytes" in entries[0]:
        messages_text = f"a {entries[0]['largest_body_bytes'] / 2**20:,.0f} MB body"
    else:
        messages_text = " + ".join(f"{count:,}" for count in messages)
    notes = []
    for entry in entries:
        if "received_by_pumps" in entry:
            notes.append(
                f"{entry['received_by_plain_receivers']:,} by receivers, "
                f"{entry['received_by_pumps']:,} by pumps"
            )
        if "messages_held_when_killed" in entry:
            notes.append(f"{entry['messages_held_when_killed']:,} held by the killed consumers")
    faults = [entry["faults_injected"] for entry in entries if "faults_injected" in entry]
    fault_notes = [_kills_and_restarts(entry) for entry in entries if "kills" in entry]
    return {
        "messages": _with_note(messages_text, "; ".join(notes)),
        "faults_injected": _with_note(f"{sum(faults):,}", "; ".join(fault_notes)) if faults else "",
        "lost": f"{sum(entry['lost'] for entry in entries):,}",
        "duplicated": f"{sum(entry['duplicated'] for entry in entries):,}",
    }


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
    runs = sorted({result["run"] for check in checks for result in check["results"]})
    lines = [
        f"Run {', '.join(runs)}; executed on {', '.join(engines)} (Babelfish is not Microsoft SQL Server: "
        "nothing here was verified on SQL Server).",
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


def runs_text(data: dict[str, Any]) -> list[str]:
    lines = ["Where the figures come from (each row's engines say which run):", ""]
    for name, run in data["runs"].items():
        lines.append(
            f"- **{name}**: {run['command']}; commit {run['commit']}, {run['when']}, on {run['machine']}. "
            f"Engines: {run['engines']}. Source: {run['source']}."
            + (
                " Written as a literal 0 after the exactness assertions passed, not counted (counted "
                "since): " + "; ".join(run["literal_zeros"]) + "."
                if run.get("literal_zeros")
                else ""
            )
        )
    return lines


def checks_table(data: dict[str, Any]) -> list[str]:
    lines = [
        "| # | guarantee | proved by | engines (run) | messages | faults injected | lost | duplicated |",
        "|---|---|---|---|---:|---:|---:|---:|",
    ]
    for check in data["checks"]:
        results = check["results"]
        engines = ", ".join(f"{ENGINE_NAMES[result['engine']]} ({result['run']})" for result in results)
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


def spark_kills_table(data: dict[str, Any]) -> list[str]:
    kills = data["spark_kills"]
    lines = [
        f"Run {kills['run']}.",
        "",
        "| test | engine | sink | killed | messages | staged / queued when killed | lost | duplicated |",
        "|---|---|---|---|---:|---|---:|---:|",
    ]
    for row in kills["rows"]:
        engine = ", ".join(ENGINE_NAMES[name.strip()] for name in row["engine"].split(","))
        lines.append(
            f"| `{row['test']}` | {engine} | {row['sink']} | {row['killed']} | {_number(row['messages'])} | "
            f"{row['staged_or_queued_when_killed']} | {_number(row['lost'])} | {_number(row['duplicated'])} |"
        )
    return lines


def soak_table(data: dict[str, Any]) -> list[str]:
    soak = data["soak"]
    lines = [
        f"Run {soak['run']}, {soak['seconds']} s per engine.",
        "",
        "| engine | sent | processed | expired (dropped on receive / purged) | RSS start -> end | "
        "connections start -> end (peak) | lost | duplicated |",
        "|---|---:|---:|---|---|---|---:|---:|",
    ]
    for row in soak["rows"]:
        lines.append(
            f"| {ENGINE_NAMES[row['engine']]} | {row['sent']:,} | {row['processed']:,} | "
            f"{row['expired_dropped_on_receive']:,} / {row['purged_expired']:,} | "
            f"{row['rss_mb_start']:.1f} -> {row['rss_mb_end']:.1f} MB | "
            f"{row['connections_start']} -> {row['connections_end']} ({row['connections_peak']}) | "
            f"{row['lost']:,} | {row['duplicated']:,} |"
        )
    return lines


def blocks() -> dict[str, tuple[str, list[str]]]:
    data = load_data("reliability.json")
    return {
        "reliability-runs": (SOURCE, runs_text(data)),
        "reliability-checks": (SOURCE, checks_table(data)),
        "reliability-spark-kills": (SOURCE, spark_kills_table(data)),
        "reliability-soak": (SOURCE, soak_table(data)),
        "reliability-exactly-once": (SOURCE, exactly_once_table(data)),
    }


def lost_and_duplicated(data: dict[str, Any]) -> tuple[int, int]:
    """The messages lost and duplicated over every check's results (the cells that count messages; a
    leak count such as "0 leaks" is not a message count)."""
    totals = [0, 0]
    for check in data["checks"]:
        for result in check["results"]:
            figures = result_figures(result, data["recorded"])
            for index, key in enumerate(("lost", "duplicated")):
                if figures[key].replace(",", "").isdigit():
                    totals[index] += int(figures[key].replace(",", ""))
    for row in data["soak"]["rows"]:
        totals[0] += row["lost"]
        totals[1] += row["duplicated"]
    return totals[0], totals[1]


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
