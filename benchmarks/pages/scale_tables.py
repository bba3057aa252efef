"""The scale section of docs/benchmarks.md, from run.py --scale's JSON: receive throughput against queue
depth, storage before and after a drain, peek_estimate against count(), and the consumer's memory."""

from __future__ import annotations

from typing import Any

from pages.throughput import ENGINE_LABELS, is_package_drain


def _mib(value: float) -> str:
    return f"{value / 2**20:,.0f} MiB"


def scale_findings(scale: dict[str, Any]) -> list[str]:
    """One bullet per observation, derived from the figures (no hand-written numbers to go stale)."""
    found = []
    for result in scale["scale"]:
        name = ENGINE_LABELS[result["engine"]]
        drains = _package_drains([drain for drain in result["drains"] if drain["autovacuum"] in (True, None)])
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
            ratios = ", ".join(
                f"{min(d['decile_msgs_per_s']) / d['decile_msgs_per_s'][0]:.2f}x at {d['rows']:,} "
                f"(a tenth of {_seconds(d['seconds'] / 10)})"
                for d in drains
            )
            found.append(f"- {name}: the slowest tenth of each drain against its first tenth: {ratios}.")
            returns = [d for d in drains if d.get("storage_return")]
            if returns:
                found.append(
                    f"- {name}: without a manual `VACUUM`, the drained table's storage came back (to 2 % of "
                    "its size, or 1 MiB) " + ", ".join(_returned(d) for d in returns) + "."
                )
            for plain in result["drains"]:
                if plain.get("package_storage_parameters") is not False:
                    continue
                deciles = plain["decile_msgs_per_s"]
                found.append(
                    f"- {name}, {plain['rows']:,} rows again from a table reset to the server's default "
                    f"storage parameters: {plain['msgs_per_s']:,.0f} msgs/s, first tenth {deciles[0]:,.0f}, "
                    f"slowest {min(deciles):,.0f} ({min(deciles) / deciles[0]:.2f}x), autovacuum ran "
                    f"{_runs_during(plain)} time(s) during the drain; storage back {_short_return(plain)}."
                )
            for plain in result["drains"]:
                if plain.get("package_write_back") is not False:
                    continue
                deciles = plain["decile_msgs_per_s"]
                unwritten = max(tenth["dirty_mb"] for tenth in plain["decile_activity"])
                found.append(
                    f"- {name}, {plain['rows']:,} rows again by a session left at the server's "
                    f"`backend_flush_after` ({plain.get('backend_flush_after')}): "
                    f"{plain['msgs_per_s']:,.0f} msgs/s, first tenth {deciles[0]:,.0f}, slowest "
                    f"{min(deciles):,.0f} ({min(deciles) / deciles[0]:.2f}x), unwritten page cache at most "
                    f'{unwritten:,} MiB (docs/dba-maintenance.md, "Deep drains and the disk").'
                )
            if result.get("mixed"):
                found.append(f"- {name}: {_mixed_finding(result['mixed'])}")
            after, vacuumed = deepest["after"], deepest["after_vacuum"]
            runs = after["autovacuum_count"] - deepest["before"]["autovacuum_count"]
            found.append(
                f"- {name}: right after the drain of {deepest['rows']:,} rows the table still held "
                f"{_mib(after['total_bytes'])} ({after['dead_tuples']:,} dead tuples); autovacuum ran {runs} "
                f"time(s) during the {deepest['seconds']:.0f} s drain; a plain `VACUUM` at the end of the "
                f"run left {_mib(vacuumed['total_bytes'])}."
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


def _table_settings(drain: dict[str, Any]) -> str:
    """How a drained table was set up: autovacuum (PostgreSQL) and whose storage parameters it had."""
    if drain["autovacuum"] is None:
        return "-"
    if not drain["autovacuum"]:
        return "off"
    if drain.get("package_storage_parameters") is False:
        return "on, server's defaults"
    if drain.get("package_write_back") is False:
        return "on, package's parameters, backend_flush_after 0"
    if drain.get("throttled_vacuum"):
        delay = drain.get("throttle_cost_delay_ms")
        if delay is not None:
            return f"on, package's parameters, autovacuum_vacuum_cost_delay = {delay:g} ms"
        return "on, package's parameters, the server's autovacuum_vacuum_cost_delay"
    return "on, package's parameters" if drain["before"].get("storage_parameters") else "on"


def _runs_during(drain: dict[str, Any]) -> int:
    """How many times autovacuum ran on the table while it was drained."""
    return int(drain["after"]["autovacuum_count"] - drain["before"]["autovacuum_count"])


def _package_drains(drains: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Leave out the drains of tables reset to the server's defaults (``--server-default-storage``), those
    by a session left at the server's ``backend_flush_after`` (``--no-write-back``) and those of a table
    whose autovacuum sleeps (``--throttled-vacuum``)."""
    return [drain for drain in drains if is_package_drain(drain)]


def _seconds(value: float) -> str:
    if value < 0.1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


def _returned(drain: dict[str, Any]) -> str:
    back = drain["storage_return"]
    if back["back_after_seconds"] is None:
        last = back["samples"][-1]
        return (
            f"not within {back['wait_seconds']:.0f} s at {drain['rows']:,} rows (still {_mib(last[1])}, "
            f"{last[2] - drain['before']['autovacuum_count']} autovacuum run(s))"
        )
    return f"{back['back_after_seconds']:.0f} s after the drain of {drain['rows']:,} rows"


def _mixed_finding(mixed: dict[str, Any]) -> str:
    windows = mixed["windows"]
    rates = [w["receive_msgs_per_s"] for w in windows]
    p50 = [w["receive_p50_ms"] for w in windows]
    return (
        f"senders and receivers together for {mixed['seconds']:.0f} s at {mixed['rate']:,} msgs/s "
        f"over a backlog of {mixed['backlog']:,}: the receivers took {min(rates):,.0f}-{max(rates):,.0f} "
        f"msgs/s in each of the {len(windows)} ten-second windows, a receive of 100 taking {p50[0]:.1f} ms "
        "(median) "
        f"in the first window, {max(p50):.1f} ms at most, {p50[-1]:.1f} ms in the last; "
        f"{mixed['left']:,} messages were queued at the end."
    )


def mixed_section(mixed: dict[str, Any]) -> list[str]:
    lines = [
        "### Senders and receivers together at a steady backlog",
        "",
        f"PostgreSQL: a queue filled with {mixed['backlog']:,} messages, then one sender at "
        f"{mixed['rate']:,} msgs/s (batches of 100) and {mixed['receivers']} receivers sharing that rate "
        f"(`receive(max_messages=100)`), for {mixed['seconds']:.0f} s, so the backlog stays and the deleted "
        "rows pile up behind the receivers. Every minute's first ten-second window: the receive rate and the "
        "receive's latency (median and 95th percentile across the receivers).",
        "",
        "| at s | receive msgs/s | receive p50 ms | receive p95 ms |",
        "|--:|--:|--:|--:|",
    ]
    windows = mixed["windows"]
    for index, window in enumerate(windows):
        if index % 6 and index != len(windows) - 1:
            continue
        lines.append(
            f"| {window['at']:.0f} | {window['receive_msgs_per_s']:,.0f} | {window['receive_p50_ms']:.1f} | "
            f"{window['receive_p95_ms']:.1f} |"
        )
    lines += ["", f"At the end {mixed['left']:,} messages were queued.", ""]
    return lines


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
        "slowest tenth | slowest ÷ first | receives |",
        "|---|--:|:-:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for result in scale["scale"]:
        for drain in result["drains"]:
            deciles = drain["decile_msgs_per_s"]
            autovacuum = _table_settings(drain)
            lines.append(
                f"| {ENGINE_LABELS[result['engine']]} | {drain['rows']:,} | {autovacuum} | "
                f"{drain['fill_rows_per_s']:,.0f} | **{drain['msgs_per_s']:,.0f}** | {deciles[0]:,.0f} | "
                f"{deciles[-1]:,.0f} | {min(deciles):,.0f} | {min(deciles) / deciles[0]:.2f}x | "
                f"{drain['receives']:,} |"
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
                f"| {drain['rows']:,} | {_table_settings(drain)} | "
                f"{_mib(before['total_bytes'])} | "
                f"{_mib(after['total_bytes'])} | {after['dead_tuples']:,} | "
                f"{after['autovacuum_count'] - before['autovacuum_count']} | "
                f"{_mib(vacuumed['total_bytes'])} | "
                f"{vacuumed['dead_tuples']:,} |"
            )
        lines.append("")
        returns = [d for _, d in postgres if d.get("storage_return")]
        if returns:
            lines += [
                "Without a manual `VACUUM`: the table's size (`pg_total_relation_size`) polled every 5 s "
                "after the drain, with the server's `autovacuum_naptime` (1 min); the table's own storage "
                "parameters as the autovacuum column says.",
                "",
                "| queued rows | autovacuum | size after drain | back to | back after | "
                "autovacuum runs by then |",
                "|--:|:-:|--:|--:|--:|--:|",
            ]
            for drain in returns:
                back = drain["storage_return"]
                last = back["samples"][-1]
                after = (
                    f"{back['back_after_seconds']:.0f} s"
                    if back["back_after_seconds"] is not None
                    else f"not within {back['wait_seconds']:.0f} s"
                )
                lines.append(
                    f"| {drain['rows']:,} | {_table_settings(drain)} | {_mib(back['samples'][0][1])} | "
                    f"{_mib(last[1])} | {after} | "
                    f"{last[2] - drain['before']['autovacuum_count']} |"
                )
            lines.append("")
    for result in scale["scale"]:
        if result.get("mixed"):
            lines += mixed_section(result["mixed"])
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
            settings = _table_settings(drain)
            note = "" if settings in ("-", "on", "on, package's parameters") else f" (autovacuum {settings})"
            lines.append(
                f"| {ENGINE_LABELS[result['engine']]} | {drain['rows']:,}{note} | "
                f"{_mib(drain['rss_start'])} | {_mib(drain['rss_peak'])} | {_mib(drain['rss_end'])} | "
                f"{len(drain['rss_samples'])} |"
            )
    return lines


def _short_return(drain: dict[str, Any]) -> str:
    """:func:`_returned` without the row count (the table's row says it)."""
    rows = f"{drain['rows']:,} rows"
    return _returned(drain).replace(f" after the drain of {rows}", "").replace(f" at {rows}", "")
