"""benchmarks/README.md: the Spark drain tables and notes (pages/spark_drain.py), from
docs/data/spark-drain.json."""

from __future__ import annotations

from pages.blocks import load_data
from pages.spark_drain import spark_drain_notes, spark_drain_table, spark_stream_table


def blocks() -> dict[str, tuple[str, list[str]]]:
    return {
        "spark-drain": ("docs/data/spark-drain.json", spark_drain_table(load_data("spark-drain.json"))),
        "spark-drain-notes": ("docs/data/spark-drain.json", spark_drain_notes(load_data("spark-drain.json"))),
        "spark-stream": ("docs/data/spark-drain.json", spark_stream_table(load_data("spark-drain.json"))),
    }
