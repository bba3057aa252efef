"""The scale section of docs/benchmarks.md, from run.py --scale's JSON: receive throughput against queue
depth, storage before and after a drain, peek_estimate against count(), and the consumer's memory."""

from __future__ import annotations

import json
from typing import Any

from pages.throughput import ENGINE_LABELS


def _mib(value: float) -> str:
    return f"{value / 2**20:,.0f} MiB"


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


def vacuum_paragraph(scale: dict[str, Any]) -> list[str]:
    """docs/dba.md's case for vacuuming often: the deepest PostgreSQL drain, with and without autovacuum."""
    (result,) = [result for result in scale["scale"] if result["engine"] == "postgresql"]
    deepest = max(drain["rows"] for drain in result["drains"])
    on, *off = [drain for drain in result["drains"] if drain["rows"] == deepest]
    runs = on["after"]["autovacuum_count"] - on["before"]["autovacuum_count"]
    text = (
        f"[Measured](benchmarks.md#scale) ({scale['meta']['date'][:10]}): one consumer draining "
        f"{deepest:,} queued rows ran at {on['decile_msgs_per_s'][0]:,.0f} messages/s over the first tenth "
        f"and {on['decile_msgs_per_s'][-1]:,.0f} over the last, autovacuum running {runs} time(s) on the "
        f"table during the {on['seconds']:.0f} s drain"
    )
    for drain in off:
        text += (
            f" (with autovacuum off for the table: {drain['decile_msgs_per_s'][0]:,.0f} and "
            f"{drain['decile_msgs_per_s'][-1]:,.0f})"
        )
    text += (
        f"; a plain `VACUUM` afterwards shrank the {_mib(on['after']['total_bytes'])} table to "
        f"{_mib(on['after_vacuum']['total_bytes'])}."
    )
    return [text]


def dba_blocks() -> dict[str, tuple[str, list[str]]]:
    from pages.blocks import ROOT
    from pages.transcribed_text import data_blocks

    scale = json.loads((ROOT / "docs" / "benchmarks" / "scale.json").read_text(encoding="utf-8"))
    return {
        "dba-vacuum-drain": ("docs/benchmarks/scale.json", vacuum_paragraph(scale)),
        **data_blocks("babelfish.json"),
    }
