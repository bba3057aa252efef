"""The throughput run's figures (benchmarks/run.py's JSON): reading its rows, the targets of issue 7 as
ratios within one run, and the summary run.py prints. Nothing is measured here."""

from __future__ import annotations

import math
from typing import Any

ENGINE_LABELS = {"postgresql": "PostgreSQL", "sqlite": "SQLite"}
CORE_LABELS = {
    "send": ("send", 1, 1),
    "send_batch": ("send_batch", 100, 1),
    "receive_1c": ("receive", 1, 1),
    "receive_4c": ("receive", 1, 4),
    "receive_batch_1c": ("receive_batch", 100, 1),
    "receive_batch_4c": ("receive_batch", 100, 4),
}
PEER_NAMES = {
    "pgqueuer": "pgqueuer",
    "procrastinate": "procrastinate",
    "kombu": "kombu (SQLAlchemy transport)",
    "persistqueue": "persist-queue (SQLiteAckQueue)",
}


# ---- reading the figures ------------------------------------------------------------------------------
def core_row(doc: dict[str, Any] | None, engine: str, case: str) -> dict[str, Any] | None:
    for row in (doc or {}).get("core", []):
        if row["engine"] == engine and row["case"] == case:
            return row  # type: ignore[no-any-return]
    return None


def peer_row(doc: dict[str, Any] | None, peer: str, engine: str) -> dict[str, Any] | None:
    for row in (doc or {}).get("peers", []):
        if row["peer"] == peer and row["engine"] == engine:
            return row  # type: ignore[no-any-return]
    return None


def pump_row(doc: dict[str, Any] | None, engine: str) -> dict[str, Any] | None:
    for row in (doc or {}).get("pump", []):
        if row["engine"] == engine:
            return row  # type: ignore[no-any-return]
    return None


def peek_rows(scale: dict[str, Any] | None, engine: str) -> dict[int, dict[str, Any]]:
    for result in (scale or {}).get("scale", []):
        if result["engine"] == engine:
            return {entry["rows"]: entry for entry in result["peek"]}
    return {}


def side_spread(row: dict[str, Any], side: str) -> dict[str, float]:
    """Median and min-max msgs/s of one side (raw or project) of a core row, from its rounds."""
    values = [sample[side]["msgs_per_s"] for sample in row["rounds"]]
    ordered = sorted(values)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return {"median": median, "min": ordered[0], "max": ordered[-1]}


# ---- targets --------------------------------------------------------------------------------------------
def compute_targets(doc: dict[str, Any] | None, scale: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every target of issue 7 as a ratio within one run: value, threshold, PASS / MISS / not measured."""
    targets: list[dict[str, Any]] = []

    def add(name: str, value: float | None, threshold: float, detail: str, at_most: bool = False) -> None:
        if value is None:
            status = "not measured"
        else:
            status = "PASS" if (value <= threshold if at_most else value >= threshold) else "MISS"
        targets.append(
            {
                "target": name,
                "value": value,
                "threshold": threshold,
                "op": "<=" if at_most else ">=",
                "status": status,
                "detail": detail,
            }
        )

    def core_ratio(engine: str, case: str) -> tuple[float | None, str]:
        row = core_row(doc, engine, case)
        if row is None:
            return None, ""
        return row["ratio"], (
            f"project {row['project_msgs_per_s']:,.0f} / raw {row['raw_msgs_per_s']:,.0f} msgs/s "
            f"(rounds {row['ratio_min']:.2f}-{row['ratio_max']:.2f})"
        )

    def peer_ratio(
        engine: str, case: str, peer: str, phase: str, raw_runs: str = ""
    ) -> tuple[float | None, str]:
        row, other = core_row(doc, engine, case), peer_row(doc, peer, engine)
        if row is None or other is None:
            return None, "" if row is None else f"{peer} not run"
        theirs = other[f"{phase}_msgs_per_s"]["median"]
        ceiling = row["raw_msgs_per_s"] / theirs
        raw = (
            f"the raw driver running {raw_runs} reaches {ceiling:.2f}x"
            if raw_runs
            else f"ceiling: the raw driver running the same statements reaches {ceiling:.2f}x"
        )
        return row["project_msgs_per_s"] / theirs, (
            f"project {row['project_msgs_per_s']:,.0f} / {peer} {theirs:,.0f} msgs/s; {raw}"
        )

    value, detail = core_ratio("postgresql", "send_batch")
    add("PostgreSQL batch send (100/commit) vs raw multi-row INSERT", value, 0.8, detail)
    value, detail = peer_ratio(
        "postgresql",
        "send_batch",
        "pgqueuer",
        "send",
        "the multi-row INSERT (the project sends by binary COPY)",
    )
    add("PostgreSQL batch send vs pgqueuer batched enqueue (100)", value, 1.5, detail)
    for consumers in (1, 4):
        value, detail = core_ratio("postgresql", f"receive_batch_{consumers}c")
        add(
            f"PostgreSQL batch receive (100), {consumers} consumer{'s' if consumers > 1 else ''}, vs raw "
            "DELETE ... LIMIT 100 RETURNING",
            value,
            0.8,
            detail,
        )
    value, detail = peer_ratio("postgresql", "receive_batch_1c", "pgqueuer", "receive")
    add("PostgreSQL batch receive (100), 1 consumer, vs pgqueuer batch-100 consume", value, 8.0, detail)
    value, detail = core_ratio("postgresql", "receive_4c")
    add("PostgreSQL single-message receive, 4 consumers, vs raw", value, 0.9, detail)
    for engine in ("postgresql", "sqlite"):
        value, detail = peer_ratio(engine, "receive_4c", "kombu", "receive")
        add(
            f"{ENGINE_LABELS[engine]} single-message receive, 4 consumers, vs kombu-sqlalchemy (4 consumers)",
            value,
            10.0,
            detail,
        )
    value, detail = core_ratio("sqlite", "send_batch")
    add("SQLite batch send (100/commit) vs raw sqlite3", value, 0.8, detail)
    for consumers in (1, 4):
        value, detail = core_ratio("sqlite", f"receive_batch_{consumers}c")
        add(
            f"SQLite batch receive (100), {consumers} consumer{'s' if consumers > 1 else ''}, vs raw sqlite3",
            value,
            0.8,
            detail,
        )
    for engine in ("postgresql", "sqlite"):
        peek = peek_rows(scale, engine)
        small, large = peek.get(1_000), peek.get(1_000_000)
        if small and large:
            value = large["peek_estimate"]["median_us"] / small["peek_estimate"]["median_us"]
            detail = (
                f"peek_estimate {small['peek_estimate']['median_us']:,.0f} -> "
                f"{large['peek_estimate']['median_us']:,.0f} µs; "
                f"count() {small['count']['median_us']:,.0f} -> "
                f"{large['count']['median_us']:,.0f} µs"
            )
        else:
            value, detail = None, "needs run.py --scale with peek sizes 1,000 and 1,000,000"
        add(
            f"{ENGINE_LABELS[engine]} peek_estimate cost at 1,000,000 rows / at 1,000 rows",
            value,
            2.0,
            detail,
            True,
        )
    for engine in ("postgresql", "sqlite"):
        pump = pump_row(doc, engine)
        if pump and "ratio_to_raw_receive_4c" in pump:
            ratio = pump["ratio_to_raw_receive_4c"]
            value = ratio["median"]
            detail = (
                f"pump {pump['msgs_per_s']['median']:,.0f} / raw 4-consumer receive "
                f"{pump['raw_receive_4c_msgs_per_s']['median']:,.0f} msgs/s (rounds {ratio['min']:.2f}-"
                f"{ratio['max']:.2f})"
            )
        else:
            value, detail = None, ""
        add(
            f"{ENGINE_LABELS[engine]} MessagePump, concurrency 4, vs raw 4-consumer receive",
            value,
            0.7,
            detail,
        )
    return targets


def ratio_text(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{math.floor(value * 100) / 100:.2f}x"  # rounded down: a ratio shown as 0.80x never misses 0.8


# ---- text for the terminal --------------------------------------------------------------------------
def summary_text(doc: dict[str, Any]) -> str:
    lines = []
    if doc["meta"]["kind"] == "throughput":
        lines.append("throughput (msgs/s, median [min-max]):")
        for label, spread in figures(doc):
            lines.append(
                f"  {label:<70} {spread['median']:>9,.0f} [{spread['min']:,.0f}-{spread['max']:,.0f}]"
            )
        for skipped in doc.get("skipped", []):
            lines.append(f"  skipped {skipped['peer']} on {skipped['engine']}: {skipped['reason']}")
        targets = compute_targets(doc, None)
    else:
        for result in doc["scale"]:
            for drain in result["drains"]:
                lines.append(
                    f"  {ENGINE_LABELS[result['engine']]} {drain['rows']:,} rows: "
                    f"{drain['msgs_per_s']:,.0f} msgs/s,"
                    f" RSS {drain['rss_start'] / 2**20:.0f}/{drain['rss_peak'] / 2**20:.0f}/"
                    f"{drain['rss_end'] / 2**20:.0f} MiB"
                )
        targets = compute_targets(None, doc)
    lines.append("targets:")
    for target in targets:
        if target["status"] != "not measured":
            lines.append(
                f"  {target['status']:<5} {target['target']}: {ratio_text(target['value'])} "
                f"({target['op']} {target['threshold']}x) {target['detail']}"
            )
    return "\n".join(lines)


def figures(doc: dict[str, Any]) -> list[tuple[str, dict[str, float]]]:
    """(label, median/min/max msgs/s) of every throughput figure, in table order."""
    rows = []
    for engine in ("postgresql", "sqlite"):
        name = ENGINE_LABELS[engine]
        for row in doc.get("core", []):
            if row["engine"] == engine:
                for side in ("project", "raw"):
                    rows.append((f"{name} {row['label']} — {side}", side_spread(row, side)))
        pump = pump_row(doc, engine)
        if pump:
            rows.append((f"{name} {pump['label']} — project", pump["msgs_per_s"]))
        for peer in doc.get("peers", []):
            if peer["engine"] == engine:
                rows.append((f"{name} {PEER_NAMES[peer['peer']]} send", peer["send_msgs_per_s"]))
                rows.append((f"{name} {PEER_NAMES[peer['peer']]} receive", peer["receive_msgs_per_s"]))
    return rows
