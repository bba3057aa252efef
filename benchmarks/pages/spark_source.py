"""The ``sqlqueue`` data source's kill tests (tests/test_spark_source.py), from
docs/data/spark-source-kills.json: the table of docs/spark-exactly-once.md. Each row is an entry the test
recorded (tests/reliability_figures.py), copied unchanged from the run's figures file."""

from __future__ import annotations

from typing import Any

from pages.blocks import load_data, run_link

DATA_FILE = "spark-source-kills.json"
SOURCE = f"docs/data/{DATA_FILE}"
ENGINES = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}
STREAMS = {"staged": "staged", "in_place": "in place"}


def kills_table(data: dict[str, Any]) -> list[str]:
    lines = [
        "| engine | stream | killed at (2nd micro-batch) | messages | staged when killed "
        "| queued when killed | in the sink when killed | lost | duplicated |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for entry in sorted(
        data["recorded"].values(), key=lambda e: (e["engine"], e.get("stream", "staged"), e["killed_at"])
    ):
        stream = STREAMS[entry.get("stream", "staged")]
        counts = (
            entry["messages"],
            entry["staged_when_killed"],
            entry.get("queued_when_killed", 0),
            entry["in_sink_when_killed"],
            entry["lost"],
            entry["duplicated"],
        )
        figures = " | ".join(f"{value:,}" for value in counts)
        lines.append(f"| {ENGINES[entry['engine']]} | {stream} | `{entry['killed_at']}` | {figures} |")
    return [*lines, "", run_link(DATA_FILE)]


def spark_source_blocks() -> dict[str, tuple[str, list[str]]]:
    return {"spark-source-kills": (SOURCE, kills_table(load_data(DATA_FILE)))}
