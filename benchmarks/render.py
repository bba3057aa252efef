"""Render docs/benchmarks.md and its chart from the JSON of benchmarks/run.py.

    benchmarks/.venv/bin/python benchmarks/render.py [--results docs/benchmarks/results.json]
        [--scale docs/benchmarks/scale.json] [--out docs/benchmarks.md] [--image docs/images/benchmarks.png]

The page holds: the throughput chart (PNG, matplotlib), the table of every figure (median of the rounds with
min-max), the targets as ratios within the run with PASS/MISS, the scale and memory measurements, the
machine and versions, the fairness notes and how to run it again. Nothing is measured here.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_RESULTS = ROOT / "docs" / "benchmarks" / "results.json"
DEFAULT_SCALE = ROOT / "docs" / "benchmarks" / "scale.json"
DEFAULT_OUT = ROOT / "docs" / "benchmarks.md"
DEFAULT_IMAGE = ROOT / "docs" / "images" / "benchmarks.png"
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
def _core(doc: dict[str, Any] | None, engine: str, case: str) -> dict[str, Any] | None:
    for row in (doc or {}).get("core", []):
        if row["engine"] == engine and row["case"] == case:
            return row  # type: ignore[no-any-return]
    return None


def _peer(doc: dict[str, Any] | None, peer: str, engine: str) -> dict[str, Any] | None:
    for row in (doc or {}).get("peers", []):
        if row["peer"] == peer and row["engine"] == engine:
            return row  # type: ignore[no-any-return]
    return None


def _pump(doc: dict[str, Any] | None, engine: str) -> dict[str, Any] | None:
    for row in (doc or {}).get("pump", []):
        if row["engine"] == engine:
            return row  # type: ignore[no-any-return]
    return None


def _peek(scale: dict[str, Any] | None, engine: str) -> dict[int, dict[str, Any]]:
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
        row = _core(doc, engine, case)
        if row is None:
            return None, ""
        return row["ratio"], (
            f"project {row['project_msgs_per_s']:,.0f} / raw {row['raw_msgs_per_s']:,.0f} msgs/s "
            f"(rounds {row['ratio_min']:.2f}-{row['ratio_max']:.2f})"
        )

    def peer_ratio(
        engine: str, case: str, peer: str, phase: str, raw_runs: str = ""
    ) -> tuple[float | None, str]:
        row, other = _core(doc, engine, case), _peer(doc, peer, engine)
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
        peek = _peek(scale, engine)
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
        pump = _pump(doc, engine)
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
        pump = _pump(doc, engine)
        if pump:
            rows.append((f"{name} {pump['label']} — project", pump["msgs_per_s"]))
        for peer in doc.get("peers", []):
            if peer["engine"] == engine:
                rows.append((f"{name} {PEER_NAMES[peer['peer']]} send", peer["send_msgs_per_s"]))
                rows.append((f"{name} {PEER_NAMES[peer['peer']]} receive", peer["receive_msgs_per_s"]))
    return rows


# ---- the chart ------------------------------------------------------------------------------------------
COLORS = {"project": "#1f6fb4", "raw": "#9a9a9a", "pump": "#5aa0dc", "peer": "#e08a2c"}


def chart_bars(doc: dict[str, Any], engine: str) -> list[tuple[str, dict[str, float], str]]:
    bars = []
    for row in doc.get("core", []):
        if row["engine"] == engine:
            operation, batch, consumers = CORE_LABELS.get(
                row["case"], (row["case"], row["batch"], row["consumers"])
            )
            short = f"{operation} x{batch}, {consumers}c"
            bars.append((f"{short}: raw", side_spread(row, "raw"), "raw"))
            bars.append((f"{short}: sqlqueue", side_spread(row, "project"), "project"))
    pump = _pump(doc, engine)
    if pump:
        bars.append(("MessagePump, concurrency 4", pump["msgs_per_s"], "pump"))
    for peer in doc.get("peers", []):
        if peer["engine"] == engine:
            name = {"kombu": "kombu-sqla", "persistqueue": "persist-queue"}.get(peer["peer"], peer["peer"])
            bars.append(
                (f"{name} send x{peer['send_batch']}", peer["send_msgs_per_s"], "peer"),
            )
            bars.append(
                (
                    f"{name} receive x{peer['receive_batch']}, {peer['concurrency']}c",
                    peer["receive_msgs_per_s"],
                    "peer",
                )
            )
    return bars


def draw_chart(doc: dict[str, Any], image: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    engines = [engine for engine in ("postgresql", "sqlite") if chart_bars(doc, engine)]
    heights = [len(chart_bars(doc, engine)) for engine in engines]
    figure, axes = plt.subplots(
        len(engines),
        1,
        figsize=(10, 0.32 * sum(heights) + 1.6 * len(engines)),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    for axis, engine in zip(axes[:, 0], engines, strict=True):
        bars = chart_bars(doc, engine)
        labels = [label for label, _, _ in bars]
        medians = [spread["median"] for _, spread, _ in bars]
        lows = [spread["median"] - spread["min"] for _, spread, _ in bars]
        highs = [spread["max"] - spread["median"] for _, spread, _ in bars]
        positions = list(range(len(bars)))[::-1]
        axis.barh(
            positions,
            medians,
            xerr=[lows, highs],
            color=[COLORS[kind] for _, _, kind in bars],
            error_kw={"ecolor": "#333333", "capsize": 2, "linewidth": 0.8},
        )
        for position, median, (_, spread, _) in zip(positions, medians, bars, strict=True):
            axis.text(max(median, spread["max"]) * 1.1, position, f"{median:,.0f}", va="center", fontsize=7)
        axis.set_yticks(positions, labels, fontsize=8)
        axis.set_xscale("log")
        axis.set_xlim(left=max(min(medians) / 3, 1), right=max(spread["max"] for _, spread, _ in bars) * 4)
        axis.set_title(
            f"{ENGINE_LABELS[engine]}: messages per second (log scale), median and min-max", fontsize=10
        )
        axis.grid(axis="x", which="major", linewidth=0.4, alpha=0.6)
    meta = doc["meta"]
    figure.legend(
        handles=[
            Patch(color=COLORS["project"], label="airflow-provider-sqlqueue"),
            Patch(color=COLORS["raw"], label="raw driver, same SQL"),
            Patch(color=COLORS["pump"], label="MessagePump"),
            Patch(color=COLORS["peer"], label="peer library"),
        ],
        loc="lower center",
        ncol=4,
        fontsize=8,
        frameon=False,
    )
    figure.suptitle(
        f"1 KB messages, N={meta['n']:,} (per-message cases {meta['n_single']:,}), "
        f"{meta['repeat']} round{'s' if meta['repeat'] > 1 else ''}, {meta['machine']['cpus']} CPUs, "
        f"{meta['date'][:10]}",
        fontsize=9,
    )
    figure.tight_layout(rect=(0, 0.03, 1, 0.97))
    image.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(image, dpi=110)
    plt.close(figure)


# ---- the page -----------------------------------------------------------------------------------------
def _mib(value: float) -> str:
    return f"{value / 2**20:,.0f} MiB"


def _n(row: dict[str, Any]) -> str:
    return f"{row['n']:,}"


def throughput_table(doc: dict[str, Any]) -> list[str]:
    lines = [
        "| engine | what | N | per txn | consumers | msgs/s (median) | min-max | vs raw (same round) |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for engine in ("postgresql", "sqlite"):
        name = ENGINE_LABELS[engine]
        for row in doc.get("core", []):
            if row["engine"] != engine:
                continue
            operation, batch, consumers = CORE_LABELS.get(
                row["case"], (row["case"], row["batch"], row["consumers"])
            )
            for side in ("project", "raw"):
                spread = side_spread(row, side)
                who = "**sqlqueue**" if side == "project" else "raw driver"
                vs = (
                    f"**{ratio_text(row['ratio'])}** "
                    f"({ratio_text(row['ratio_min'])}-{ratio_text(row['ratio_max'])})"
                    if side == "project"
                    else ""
                )
                lines.append(
                    f"| {name} | {who} `{operation}` | {_n(row)} | {batch} | {consumers} | "
                    f"{spread['median']:,.0f} | {spread['min']:,.0f}-{spread['max']:,.0f} | {vs} |"
                )
        pump = _pump(doc, engine)
        if pump:
            spread = pump["msgs_per_s"]
            ratio = pump.get("ratio_to_raw_receive_4c")
            vs = (
                f"{ratio_text(ratio['median'])} of raw `receive` x1, 4c ({ratio_text(ratio['min'])}-"
                f"{ratio_text(ratio['max'])})"
                if ratio
                else ""
            )
            lines.append(
                f"| {name} | **sqlqueue** `MessagePump` (monitor, no-op handler) | {_n(pump)} | 1 | "
                "4 threads | "
                f"{spread['median']:,.0f} | {spread['min']:,.0f}-{spread['max']:,.0f} | {vs} |"
            )
        for peer in doc.get("peers", []):
            if peer["engine"] != engine:
                continue
            for phase in ("send", "receive"):
                spread = peer[f"{phase}_msgs_per_s"]
                batch = peer[f"{phase}_batch"]
                consumers = 1 if phase == "send" else peer["concurrency"]
                lines.append(
                    f"| {name} | {PEER_NAMES[peer['peer']]} {phase} | {_n(peer)} | {batch} | {consumers} | "
                    f"{spread['median']:,.0f} | {spread['min']:,.0f}-{spread['max']:,.0f} | |"
                )
    return lines


def targets_table(targets: list[dict[str, Any]]) -> list[str]:
    lines = ["| target | measured | wanted | result | figures |", "|---|--:|--:|:-:|---|"]
    for target in targets:
        mark = {"PASS": "✅ PASS", "MISS": "❌ MISS"}.get(target["status"], target["status"])
        lines.append(
            f"| {target['target']} | {ratio_text(target['value'])} | {target['op']} {target['threshold']}x | "
            f"{mark} | {target['detail']} |"
        )
    return lines


def scale_findings(scale: dict[str, Any]) -> list[str]:
    """One bullet per observation, derived from the figures (no hand-written numbers to go stale)."""
    found = []
    for result in scale["scale"]:
        name = ENGINE_LABELS[result["engine"]]
        drains = [drain for drain in result["drains"] if drain["autovacuum"] in (True, None)]
        if not drains:
            continue
        deepest = max(drains, key=lambda drain: drain["rows"])
        deciles = deepest["decile_msgs_per_s"]
        found.append(
            f"- {name}, {deepest['rows']:,} rows: the drain ran at {deciles[0]:,.0f} msgs/s over its first "
            f"tenth and {deciles[-1]:,.0f} over its last ({deciles[-1] / deciles[0]:.2f}x; slowest tenth "
            f"{min(deciles):,.0f}); over the whole drain {deepest['msgs_per_s']:,.0f} msgs/s, against "
            + ", ".join(
                f"{drain['msgs_per_s']:,.0f} at {drain['rows']:,}" for drain in drains if drain is not deepest
            )
            + "."
        )
        growth = max(drain["rss_peak"] - drain["rss_start"] for drain in result["drains"])
        found.append(
            f"- {name}: the consumer's RSS grew by at most {growth / 2**20:.1f} MiB during any drain "
            f"(start {deepest['rss_start'] / 2**20:.0f} MiB, peak {deepest['rss_peak'] / 2**20:.0f} MiB over "
            f"{deepest['rows']:,} messages): "
            + ("memory stays flat." if growth < 8 * 2**20 else "memory grows with the drain.")
        )
        if result["engine"] == "postgresql":
            after, vacuumed = deepest["after"], deepest["after_vacuum"]
            runs = after["autovacuum_count"] - deepest["before"]["autovacuum_count"]
            found.append(
                f"- {name}: a drained table keeps its size ({_mib(after['total_bytes'])}, "
                f"{after['dead_tuples']:,} dead tuples) until vacuumed; autovacuum ran {runs} time(s) during "
                f"the {deepest['seconds']:.0f} s drain; a plain `VACUUM` then left "
                f"{_mib(vacuumed['total_bytes'])}."
            )
        else:
            refill = deepest["after_refill"]
            grew = refill["page_count"] - deepest["before"]["page_count"]
            found.append(
                f"- {name}: deleted rows' pages go to the freelist "
                f"({deepest['after']['freelist_count']:,} free pages after the drain); refilling "
                f"{deepest['refill_rows']:,} rows "
                + ("reused them: the file did not grow." if grew <= 0 else f"added {grew:,} pages.")
            )
        peeks = {entry["rows"]: entry for entry in result["peek"]}
        if peeks:
            largest = peeks[max(peeks)]
            found.append(
                f"- {name}, {largest['rows']:,} rows: `peek_estimate()` took "
                f"{largest['peek_estimate']['median_us']:,.0f} µs, `count()` "
                f"{largest['count']['median_us'] / 1000:,.1f} ms."
            )
    return found


def scale_section(scale: dict[str, Any] | None) -> list[str]:
    if not scale:
        return [
            "Not measured in this run: `benchmarks/.venv/bin/python benchmarks/run.py --scale --json "
            "docs/benchmarks/scale.json` measures it (see How to run).",
        ]
    meta = scale["meta"]
    lines = [
        f"Run on {meta['date']} with `{meta['command']}`, "
        + ", ".join(
            f"{ENGINE_LABELS[result['engine']]} {result['seconds'] / 60:.1f} min" for result in scale["scale"]
        )
        + f" ({meta['seconds'] / 60:.1f} min in all). One consumer drains each queue with "
        "`receive(max_messages=100)` until empty; the queue is filled first with one bulk `INSERT` "
        "(not timed with the drain).",
        "",
        "What this run shows (computed from the figures below):",
        "",
        *scale_findings(scale),
        "",
        "### Receive throughput against queue depth",
        "",
        "| engine | queued rows | autovacuum | fill rows/s | drain msgs/s | first tenth | last tenth | "
        "slowest tenth | receives |",
        "|---|--:|:-:|--:|--:|--:|--:|--:|--:|",
    ]
    for result in scale["scale"]:
        for drain in result["drains"]:
            deciles = drain["decile_msgs_per_s"]
            autovacuum = {True: "on", False: "off", None: "-"}[drain["autovacuum"]]
            lines.append(
                f"| {ENGINE_LABELS[result['engine']]} | {drain['rows']:,} | {autovacuum} | "
                f"{drain['fill_rows_per_s']:,.0f} | **{drain['msgs_per_s']:,.0f}** | {deciles[0]:,.0f} | "
                f"{deciles[-1]:,.0f} | {min(deciles):,.0f} | {drain['receives']:,} |"
            )
    lines += ["", "### Storage before and after the drain", ""]
    postgres = [(r, d) for r in scale["scale"] if r["engine"] == "postgresql" for d in r["drains"]]
    if postgres:
        lines += [
            "PostgreSQL: table size with its indexes (`pg_total_relation_size`) and tuples "
            "(`pg_stat_user_tables`) after the fill, after the drain, and after a plain `VACUUM` of the "
            "table (it marks the dead rows' space reusable, and gives back empty pages at the end of the "
            "table, which after a full drain is all of it).",
            "",
            "| queued rows | autovacuum | after fill | after drain | dead tuples after drain | "
            "autovacuum runs during drain | after VACUUM | dead tuples after VACUUM |",
            "|--:|:-:|--:|--:|--:|--:|--:|--:|",
        ]
        for _, drain in postgres:
            before, after, vacuumed = drain["before"], drain["after"], drain["after_vacuum"]
            lines.append(
                f"| {drain['rows']:,} | {'on' if drain['autovacuum'] else 'off'} | "
                f"{_mib(before['total_bytes'])} | "
                f"{_mib(after['total_bytes'])} | {after['dead_tuples']:,} | "
                f"{after['autovacuum_count'] - before['autovacuum_count']} | "
                f"{_mib(vacuumed['total_bytes'])} | "
                f"{vacuumed['dead_tuples']:,} |"
            )
        lines.append("")
    sqlite = [(r, d) for r in scale["scale"] if r["engine"] == "sqlite" for d in r["drains"]]
    if sqlite:
        lines += [
            "SQLite: pages of the database file (`PRAGMA page_count`) and free pages (`freelist_count`) "
            "after the fill, after the drain, and after sending a tenth of the rows again: freed pages "
            "are reused, so the file does not grow.",
            "",
            "| queued rows | pages after fill | after drain: pages / free | refilled rows | "
            "after refill: pages / free | file after refill |",
            "|--:|--:|--:|--:|--:|--:|",
        ]
        for _, drain in sqlite:
            before, after, refill = drain["before"], drain["after"], drain["after_refill"]
            lines.append(
                f"| {drain['rows']:,} | {before['page_count']:,} | {after['page_count']:,} / "
                f"{after['freelist_count']:,} | {drain['refill_rows']:,} | {refill['page_count']:,} / "
                f"{refill['freelist_count']:,} | {_mib(refill['file_bytes'])} |"
            )
        lines.append("")
    lines += [
        "### peek_estimate against count()",
        "",
        "Median of repeated calls through `queue.peek_estimate()` (200 calls) and `queue.count()` (50 calls; "
        "5 at 1,000,000 rows), on a full, idle queue.",
        "",
        "| engine | queued rows | peek_estimate µs (min-max) | estimate | count() µs (min-max) |",
        "|---|--:|--:|--:|--:|",
    ]
    for result in scale["scale"]:
        for peek in result["peek"]:
            estimate, count = peek["peek_estimate"], peek["count"]
            lines.append(
                f"| {ENGINE_LABELS[result['engine']]} | {peek['rows']:,} | {estimate['median_us']:,.0f} "
                f"({estimate['min_us']:,.0f}-{estimate['max_us']:,.0f}) | {peek['estimate']:,} | "
                f"{count['median_us']:,.0f} ({count['min_us']:,.0f}-{count['max_us']:,.0f}) |"
            )
    lines += [
        "",
        "### Memory of a draining consumer",
        "",
        "Resident set size of the consumer process (from `/proc/self/statm`), sampled every 100 receives "
        "(10,000 messages) during the drain: before the first receive, the highest sample, and at the end.",
        "",
        "| engine | drained rows | RSS start | RSS peak | RSS end | samples |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for result in scale["scale"]:
        for drain in result["drains"]:
            lines.append(
                f"| {ENGINE_LABELS[result['engine']]} | {drain['rows']:,}"
                f"{'' if drain['autovacuum'] in (True, None) else ' (autovacuum off)'} | "
                f"{_mib(drain['rss_start'])} | {_mib(drain['rss_peak'])} | {_mib(drain['rss_end'])} | "
                f"{len(drain['rss_samples'])} |"
            )
    return lines


def machine_section(doc: dict[str, Any], scale: dict[str, Any] | None) -> list[str]:
    meta = doc["meta"]
    machine = meta["machine"]
    disk = machine.get("disk") or {}
    disk_text = (
        f"{disk.get('fstype', '?')} on {disk.get('source', '?')}"
        + ("" if "rotational" not in disk else (", rotational" if disk["rotational"] else ", not rotational"))
        if disk
        else "unknown"
    )
    versions = dict(meta["versions"])
    if scale:
        versions.update(
            {key: value for key, value in scale["meta"]["versions"].items() if key not in versions}
        )
    load = meta.get("load_average_before", [0, 0, 0])
    return [
        "| | |",
        "|---|---|",
        f"| CPU | {machine['cpu']}, {machine['cpus']} logical CPUs"
        f"{' (virtual machine)' if machine.get('virtual_machine') else ''} |",
        f"| RAM | {machine['ram_gib']} GiB |",
        f"| disk / file system | {disk_text} (the temporary folder with the SQLite files and the cluster) |",
        f"| kernel | Linux {machine['kernel']} |",
        f"| load average (1 min) at the start | {load[0]:.2f} |",
        f"| PostgreSQL | {versions.get('postgresql', 'not run')}: {meta['postgresql_settings']} |",
        f"| SQLite | {versions.get('sqlite', '?')}: {meta['sqlite_settings']} |",
        "| Python | " + versions.get("python", "?") + " |",
        "| libraries | "
        + ", ".join(
            f"{name} {versions[name]}"
            for name in (
                "airflow-provider-sqlqueue",
                "psycopg",
                "sqlalchemy",
                "pgqueuer",
                "asyncpg",
                "procrastinate",
                "kombu",
                "persist-queue",
                "matplotlib",
            )
            if name in versions
        )
        + " |",
    ]


def chart_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def render(doc: dict[str, Any], scale: dict[str, Any] | None, out: Path, image: Path) -> str:
    """Write the page (and the chart, when matplotlib is installed); return the page's text."""
    charted = chart_available()
    if charted:
        draw_chart(doc, image)
    meta = doc["meta"]
    rounds = f"{meta['repeat']} round{'s' if meta['repeat'] > 1 else ''}"
    image_link = Path(os.path.relpath(image, out.parent)).as_posix()
    targets = compute_targets(doc, scale)
    passed = sum(1 for target in targets if target["status"] == "PASS")
    missed = sum(1 for target in targets if target["status"] == "MISS")
    busy = meta.get("load_average_before", [0])[0] > 0.5 * (meta["machine"]["cpus"] or 1)
    lines = [
        "# Benchmarks",
        "",
        "<!-- Generated by benchmarks/render.py from docs/benchmarks/results.json and "
        "docs/benchmarks/scale.json; edit the renderer, not this page. -->",
        "",
        "This project's transport beside the raw database driver running the same statements and beside "
        "other Python queue libraries that keep their messages in PostgreSQL or SQLite, measured in one run "
        "on one database server: 1 KB messages, every figure the median of "
        f"{rounds} with the spread (min-max). Run on {meta['date']} "
        f"(`{meta['command']}`, {meta['seconds'] / 60:.1f} min).",
        "",
        f"**Targets: {passed} met, {missed} missed** (see [Targets](#targets)).",
        "",
    ]
    if busy or meta["machine"]["cpus"] <= 2:
        lines += [
            f"**Read with care:** the machine has {meta['machine']['cpus']} CPUs and was shared with other "
            "work during the run (1-minute load average "
            f"{meta['load_average_before'][0]:.2f} at the start, {meta['load_average_after'][0]:.2f} at the "
            "end). With 4 consumers, 4 client processes and their server backends share those CPUs, so the "
            "4-consumer rows measure contention as much as parallelism, and single figures are noisy: look "
            "at the min-max columns. Ratios pair runs made back to back in the same round.",
            "",
        ]
    if charted:
        lines += [f"![Throughput: this project, the raw driver and the peers]({image_link})", ""]
    else:
        lines += ["(No chart: matplotlib is not installed here; benchmarks/setup.sh installs it.)", ""]
    lines += [
        "## Throughput",
        "",
        f"N is the number of messages of each run (the batch cases {meta['n']:,}; the one-commit-per-message "
        f"cases {meta['n_single']:,}, kombu {min(meta['n_slow'], meta['n_single']):,}, to keep the run "
        "short). *per txn*: messages per send call or per receive. *vs raw*: the median of the per-round "
        "ratios sqlqueue ÷ raw driver, with their range.",
        "",
        *throughput_table(doc),
        "",
    ]
    for skipped in doc.get("skipped", []):
        lines.append(
            f"- {skipped['peer']} on {ENGINE_LABELS[skipped['engine']]}: skipped, {skipped['reason']}."
        )
    if doc.get("skipped"):
        lines.append("")
    lines += [
        "## Targets",
        "",
        "Ratios within this run. Against the raw driver: the median of the per-round ratios (the *vs raw* "
        "column above, with its range); against a peer: this project's median divided by the peer's "
        "median; the peek target from the scale run. On a shared 2-CPU machine a ratio near its threshold "
        "can land on either side from one run to the next: read the ranges.",
        "",
        *targets_table(targets),
        "",
        "Each peer target also shows its *ceiling*: the raw driver running this project's statements, with "
        "nothing of the project around them, divided by the peer. Where the ceiling is below the wanted "
        "ratio, no client issuing these statements can meet the target on this server: a batch send or "
        "receive is one statement and one commit, and its time goes to the server's work on the rows and "
        "to the commit's WAL flush (`synchronous_commit` on, as in production). Meeting such a target "
        "takes another statement shape or another durability model. Batch sends on PostgreSQL took "
        "the first way: they go by binary `COPY`, past what the multi-row `INSERT` can reach. A receive "
        "has no such shape: it must lock, delete and return the rows in one statement to keep its "
        "guarantees (see [Performance tuning](performance.md)).",
        "",
        "## Scale",
        "",
        *scale_section(scale),
        "",
        "## What each case does",
        "",
        "- **sqlqueue / raw driver**: `benchmarks/core_bench.py`'s cases. The raw side runs the statement "
        "text this project's dialect renders, through plain psycopg / sqlite3 with the same transaction "
        "structure and its parameters built before the clock starts: the ceiling. `send` commits every "
        "message; `send_batch` sends 100 per call (one multi-row `INSERT` on the raw side and on SQLite; "
        "the project's PostgreSQL batches go by binary `COPY`, which the raw side does not use, so there "
        "the raw figure is the multi-row `INSERT` baseline the target names, not a ceiling); `receive` "
        "takes one message "
        "per transaction, `receive_batch` up to 100 (`DELETE ... LIMIT 100 RETURNING`), with 1 or 4 "
        "consumer processes draining a pre-filled queue until it is empty.",
        '- **MessagePump**: `MessagePump(queue, handler, max_concurrency=4, strategy="monitor").'
        "run(until_empty=True)` with a handler that only notes the message Id, in one process (a transport "
        "pool of 8 connections), on a pre-filled queue; compared with the raw 4-process one-message receive "
        "of the same round.",
        "- **Peers**, through their public APIs, in the same server (a fresh database per run) or a fresh "
        "SQLite file: the run sends N messages (timed), then its consumers receive and acknowledge all of "
        "them (timed); the benchmark counts every message by a sequence number in its body and fails the "
        "run unless each arrived exactly once and none is left waiting.",
        "",
        "| peer | engine | settings |",
        "|---|---|---|",
    ]
    for peer in doc.get("peers", []):
        lines.append(f"| {PEER_NAMES[peer['peer']]} | {ENGINE_LABELS[peer['engine']]} | {peer['settings']} |")
    lines += [
        "",
        "Fairness: each peer keeps the durability and acknowledgement model it ships with (pgqueuer and "
        "procrastinate keep a log or the finished job; kombu marks a message invisible; persist-queue marks "
        "it acknowledged), and each uses its batch API where it has one. Timing starts when every process "
        "has imported, connected and built its input, and stops when the last one finished. See "
        "`benchmarks/README.md` in the repository for the details.",
        "",
        "## Machine and versions",
        "",
        *machine_section(doc, scale),
        "",
        "## How to run",
        "",
        "```sh",
        "bash benchmarks/setup.sh     # builds benchmarks/.venv: this project + the peers + matplotlib",
        "benchmarks/.venv/bin/python benchmarks/run.py --json docs/benchmarks/results.json       # 10-15 min",
        "benchmarks/.venv/bin/python benchmarks/run.py --scale --json docs/benchmarks/scale.json # 1M rows",
        "benchmarks/.venv/bin/python benchmarks/render.py   # this page and docs/images/benchmarks.png",
        "```",
        "",
        "`--quick` makes a smoke run of a minute; `--peers none` measures this project and the raw driver "
        "only; `--engines sqlite` one engine. Peers that are not installed are skipped with a note.",
        "",
        "## Tuning: before and after",
        "",
        "The record of the hot-path tuning, with the figures before and after each change, is in "
        "[Performance](performance.md).",
        "",
    ]
    text = "\n".join(lines)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="run.py's throughput JSON")
    parser.add_argument("--scale", type=Path, default=DEFAULT_SCALE, help="run.py --scale's JSON (optional)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the page to write")
    parser.add_argument("--image", type=Path, default=DEFAULT_IMAGE, help="the chart to write (PNG)")
    args = parser.parse_args(argv)
    doc = json.loads(args.results.read_text(encoding="utf-8"))
    scale = json.loads(args.scale.read_text(encoding="utf-8")) if args.scale.exists() else None
    render(doc, scale, args.out, args.image)
    print(f"wrote {args.out}" + (f" and {args.image}" if chart_available() else " (no chart: no matplotlib)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
