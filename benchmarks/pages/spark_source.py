"""The ``sqlqueue`` data source's kill tests (tests/test_spark_source.py), from
docs/data/spark-source-kills.json: the table of docs/spark.md. Each row is an entry the test recorded
(tests/reliability_figures.py), copied unchanged from the run's figures file."""

from __future__ import annotations

from typing import Any

from pages.blocks import load_data

SOURCE = "docs/data/spark-source-kills.json"
ENGINES = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


def kills_table(data: dict[str, Any]) -> list[str]:
    (name, run), *_ = data["runs"].items()
    lines = [
        "| engine | killed at (2nd micro-batch) | messages | staged when killed | in the sink when killed | "
        "lost | duplicated |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for entry in sorted(data["recorded"].values(), key=lambda e: (e["engine"], e["killed_at"])):
        lines.append(
            f"| {ENGINES[entry['engine']]} | `{entry['killed_at']}` | {entry['messages']:,} | "
            f"{entry['staged_when_killed']:,} | {entry['in_sink_when_killed']:,} | {entry['lost']:,} | "
            f"{entry['duplicated']:,} |"
        )
    commits = sorted({entry["commit"] for entry in data["recorded"].values()})
    return [
        *lines,
        "",
        f"(Run {name}, {run['when']} on {run['machine']}; commit {', '.join(commits)}. "
        f"Source: {run['source']}.)",
    ]


def spark_source_blocks() -> dict[str, tuple[str, list[str]]]:
    return {"spark-source-kills": (SOURCE, kills_table(load_data("spark-source-kills.json")))}
