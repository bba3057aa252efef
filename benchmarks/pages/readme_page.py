"""benchmarks/README.md: the first core_bench.py run (superseded, kept as the starting point of the tuning)
from docs/data/core-bench-first-run.json, and the Spark drain table (pages/spark_drain.py). core_bench's
ratios are medians of per-round ratios, so they are data here, not recomputed."""

from __future__ import annotations

from typing import Any

from pages.blocks import load_data
from pages.spark_drain import provenance, spark_drain_notes, spark_drain_table, spark_stream_table

ENGINES = {"postgresql": "PostgreSQL", "sqlite": "SQLite"}
BATCH_OPERATIONS = {"send_batch", "receive_batch"}


def core_bench_table(data: dict[str, Any]) -> list[str]:
    lines = [
        "| engine | case | N | raw msgs/s | project msgs/s | project/raw | min-max | +µs/msg | "
        "client CPU µs/msg raw → project | ≥0.8x |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|:-:|",
    ]
    for row in data["rows"]:
        unit = "commit" if row["operation"].startswith("send") else "txn"
        case = f"{row['operation']}, {row['per_txn']}/{unit}"
        if row["operation"].startswith("receive"):
            case += f", {row['consumers']} consumer{'s' if row['consumers'] > 1 else ''}"
        mark = "PASS" if row["ratio"] >= 0.8 else "MISS"
        if row["operation"] not in BATCH_OPERATIONS:
            mark = f"({mark})"  # the target applies to the batch rows; the others for information
        lines.append(
            f"| {ENGINES[row['engine']]} | {case} | {row['n']:,} | {row['raw_msgs_per_s']:,} | "
            f"{row['project_msgs_per_s']:,} | {row['ratio']:.2f}x | "
            f"{row['ratio_min']:.2f}-{row['ratio_max']:.2f} | {row['added_us_per_msg']:.1f} | "
            f"{row['cpu_us_raw']:.1f} → {row['cpu_us_project']:.1f} | {mark} |"
        )
    return [*lines, "", provenance(data)]


def blocks() -> dict[str, tuple[str, list[str]]]:
    return {
        "core-bench-first-run": (
            "docs/data/core-bench-first-run.json",
            core_bench_table(load_data("core-bench-first-run.json")),
        ),
        "spark-drain": ("docs/data/spark-drain.json", spark_drain_table(load_data("spark-drain.json"))),
        "spark-drain-notes": ("docs/data/spark-drain.json", spark_drain_notes(load_data("spark-drain.json"))),
        "spark-stream": ("docs/data/spark-drain.json", spark_stream_table(load_data("spark-drain.json"))),
    }
