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
                f"{min(d['decile_msgs_per_s']) / d['decile_msgs_per_s'][0]:.2f}x at {d['rows']:,}"
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
    return "on, package's parameters" if drain["before"].get("storage_parameters") else "on"


def _runs_during(drain: dict[str, Any]) -> int:
    """How many times autovacuum ran on the table while it was drained."""
    return int(drain["after"]["autovacuum_count"] - drain["before"]["autovacuum_count"])


def _package_drains(drains: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Leave out the drains of tables reset to the server's defaults (``--server-default-storage``) and
    those by a session left at the server's ``backend_flush_after`` (``--no-write-back``)."""
    defaults = ("package_storage_parameters", "package_write_back")
    return [drain for drain in drains if all(drain.get(key) is not False for key in defaults)]


def _seconds(value: float) -> str:
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


def vacuum_paragraph(scale: dict[str, Any], before: dict[str, Any] | None) -> list[str]:
    """docs/dba.md's measured deep drains on PostgreSQL: flat or not, and the storage coming back."""
    (result,) = [result for result in scale["scale"] if result["engine"] == "postgresql"]
    meta = scale["meta"]
    drains = [drain for drain in result["drains"] if drain["autovacuum"]]
    lines = [
        f"Measured ({meta['date'][:10]}, commit {meta.get('commit', 'unknown')}, "
        "`benchmarks/run.py --scale --deep`, kept as `docs/data/raw/scale-2f6db82.json`; "
        "[benchmarks.md](benchmarks.md#scale) has the latest run), one consumer draining each queue with "
        "`receive(max_messages=100)`, autovacuum on with the server's settings:",
        "",
    ]
    for drain in drains:
        deciles = drain["decile_msgs_per_s"]
        back = drain.get("storage_return")
        text = (
            f"- {drain['rows']:,} rows: {deciles[0]:,.0f} msgs/s over the first tenth, "
            f"{min(deciles):,.0f} over the slowest ({min(deciles) / deciles[0]:.2f}x), "
            f"{drain['msgs_per_s']:,.0f} over the whole {_seconds(drain['seconds'])} drain"
        )
        if back:
            text += "; " + _returned(drain).replace(f" at {drain['rows']:,} rows", "")
            if back["back_after_seconds"] is not None:
                text += " (storage back without a manual `VACUUM`)"
        lines.append(text + ".")
    if result.get("mixed"):
        lines.append(f"- Then {_mixed_finding(result['mixed'])}")
    if before:
        (old,) = [r for r in before["scale"] if r["engine"] == "postgresql"]
        deepest = max((d for d in old["drains"] if d["autovacuum"]), key=lambda d: d["rows"])
        deciles = deepest["decile_msgs_per_s"]
        lines += [
            "",
            f"Before the mark ({before['meta']['date'][:10]}, the run committed in c687d42, "
            "`docs/data/raw/scale-c687d42.json`), "
            f"the {deepest['rows']:,}-row drain ran at {deciles[0]:,.0f} msgs/s over its first tenth and "
            f"{min(deciles):,.0f} over its slowest ({min(deciles) / deciles[0]:.2f}x), and autovacuum ran "
            f"{deepest['after']['autovacuum_count'] - deepest['before']['autovacuum_count']} time(s) during "
            f"the {deepest['seconds']:.0f} s drain.",
        ]
    return lines


def _returning_drains(doc: dict[str, Any], *, package_storage: bool = True) -> list[dict[str, Any]]:
    """The drains watched for their storage: from tables with the package's storage parameters, or (with
    ``package_storage=False``) those reset to the server's defaults in the same run (absent before
    ``--server-default-storage`` existed)."""
    (result,) = [result for result in doc["scale"] if result["engine"] == "postgresql"]
    return [
        drain
        for drain in result["drains"]
        if drain["autovacuum"]
        and drain.get("storage_return")
        and drain.get("package_storage_parameters", True) is package_storage
    ]


def storage_return_paragraph(
    doc: dict[str, Any],
    defaults: dict[str, Any],
    deep: dict[str, Any] | None = None,
    earlier: dict[str, Any] | None = None,
) -> list[str]:
    """docs/dba.md's bound: how long after a drain a table created with the package's storage parameters
    took to give its storage back without a manual VACUUM, beside the run with the server's defaults;
    ``deep`` is a separate run of the deepest size, with the same parameters, when there is one."""
    meta = doc["meta"]
    drains = _returning_drains(doc) + (_returning_drains(deep) if deep else [])
    parameters = ", ".join(f"`{entry}`" for entry in drains[0]["before"]["storage_parameters"]) or "none"
    load = meta["load_average_before"][0]
    busy = "; other work shared the CPUs" if load > meta["machine"]["cpus"] else ""
    lines = [
        f"[Measured](benchmarks.md#scale) ({meta['date'][:10]}, commit {meta.get('commit', 'unknown')}, "
        f"`{meta['command']}`, kept as `docs/benchmarks/storage-return.json`; load average {load:.1f} at the "
        f"start{busy}), queues created by the package (storage parameters "
        f"{parameters}), one consumer draining each with `receive(max_messages=100)`, the server's "
        "`autovacuum_naptime` of 1 min, then the table's size polled every 5 s with no manual `VACUUM`:",
        "",
        "| queued rows | size after the drain | autovacuum runs during the drain | storage back after | "
        "back to | with the server's defaults"
        + (
            " (the deepest size: the same run, below)"
            if deep and _returning_drains(deep, package_storage=False)
            else ""
        )
        + " |",
        "|--:|--:|--:|--:|--:|--:|",
    ]
    (old,) = [r for r in defaults["scale"] if r["engine"] == "postgresql"]
    before = {d["rows"]: d for d in old["drains"] if d["autovacuum"] and d.get("storage_return")}
    if deep:  # the same run's table with the server's defaults, where there is one, over an older run's
        before.update({d["rows"]: d for d in _returning_drains(deep, package_storage=False)})
    for drain in drains:
        back = drain["storage_return"]
        last = back["samples"][-1]
        during = drain["after"]["autovacuum_count"] - drain["before"]["autovacuum_count"]
        after = (
            f"**{back['back_after_seconds']:.0f} s**"
            if back["back_after_seconds"] is not None
            else f"not within {back['wait_seconds']:.0f} s"
        )
        default = before.get(drain["rows"])
        lines.append(
            f"| {drain['rows']:,} | {_mib(back['samples'][0][1])} | {during} | {after} | {_mib(last[1])} | "
            + (_short_return(default) if default else "-")
            + " |"
        )
    if deep:
        deep_meta = deep["meta"]
        lines += [
            "",
            f"The {_returning_drains(deep)[-1]['rows']:,}-row drain ran in a separate run "
            f"({deep_meta['date'][:10]}, commit {deep_meta['commit']}, `{deep_meta['command']}`, kept as "
            f"`docs/benchmarks/storage-return-deep.json`; load average "
            f"{deep_meta['load_average_before'][0]:.1f} at the start).",
        ]
        plain = _returning_drains(deep, package_storage=False)
        if plain:
            lines += _deep_pair(_returning_drains(deep)[-1], plain[-1], earlier)
        else:
            lines += _deep_drain_cost(_returning_drains(deep)[-1], old, defaults["meta"])
    backs = [drain["storage_return"]["back_after_seconds"] for drain in drains]
    if backs and None not in backs:
        lines += [
            "",
            f"Every drain's storage came back within {max(backs):.0f} s of its end, up to "
            f"{drains[-1]['rows']:,} rows.",
        ]
    if not deep:
        lines += [
            "",
            "The deepest size (`--deep`, 10,000,000 rows) has not been measured with these storage "
            "parameters: the bound holds up to the sizes in the table, on PostgreSQL "
            f"{meta['versions']['postgresql'].split()[0]}.",
        ]
    return lines


def _deep_drain_cost(drain: dict[str, Any], defaults: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """What the storage parameters cost the deepest drain itself: its speed and its slowest tenth, beside
    the same size drained from a table with the server's defaults (docs/benchmarks/scale.json)."""
    deciles = drain["decile_msgs_per_s"]
    text = (
        f"That drain took {drain['seconds']:,.0f} s ({drain['msgs_per_s']:,.0f} msgs/s), its slowest tenth "
        f"ran at {min(deciles) / deciles[0]:.2f}x its first"
    )
    (same,) = [d for d in defaults["drains"] if d["rows"] == drain["rows"] and d["autovacuum"]] or [None]
    if same is None:
        return ["", text + "."]
    old = same["decile_msgs_per_s"]
    commit = meta.get("commit", "unknown")
    took = f"{same['seconds']:,.0f} s ({same['msgs_per_s']:,.0f} msgs/s)"
    return [
        "",
        f"{text}; from a table with the server's defaults (commit {commit}) it took {took}, slowest tenth "
        f"{min(old) / old[0]:.2f}x. The two runs differ in the table's settings, and also in commit and day. "
        "With these parameters autovacuum works on the table during the drain. Where a queue that deep is "
        "drained at once and the drain's speed matters, the alternative is to create that table without "
        "them (`--no-storage-parameters`) and schedule `VacuumQueuesOperator` after the drain.",
    ]


def _deep_pair(
    package: dict[str, Any], plain: dict[str, Any], earlier: dict[str, Any] | None = None
) -> list[str]:
    """The deepest size drained twice in one run: from a table with the package's storage parameters and
    from one reset to the server's defaults (``--server-default-storage``), side by side; ``earlier`` is
    a run before it of the package's table alone (docs/data/raw/storage-return-deep-290f200.json)."""
    lines = [
        "",
        f"The same run then drained {plain['rows']:,} rows once more, from a table whose storage parameters "
        "were reset to the server's defaults (`--server-default-storage`), so that the two tables differ "
        "in nothing else:",
        "",
        "| table | fill | drain | msgs/s | slowest tenth / first | autovacuum runs during the drain | "
        "storage back without a manual `VACUUM` |",
        "|---|--:|--:|--:|--:|--:|---|",
    ]
    for label, drain in (("the package's storage parameters", package), ("the server's defaults", plain)):
        deciles = drain["decile_msgs_per_s"]
        lines.append(
            f"| {label} | {drain['fill_seconds']:,.0f} s | {drain['seconds']:,.0f} s | "
            f"{drain['msgs_per_s']:,.0f} | {min(deciles) / deciles[0]:.2f}x | {_runs_during(drain)} | "
            f"{_short_return(drain)} |"
        )
    if earlier:
        (drain,) = _returning_drains(earlier)[-1:]
        deciles = drain["decile_msgs_per_s"]
        meta = earlier["meta"]
        lines += [
            "",
            f"A run of the package's table alone the same day ({meta['date'][11:16]} UTC, commit "
            f"{meta['commit']}, kept as `docs/data/raw/storage-return-deep-290f200.json`) took "
            f"{drain['seconds']:,.0f} s, slowest tenth {min(deciles) / deciles[0]:.2f}x, storage back "
            f"{_short_return(drain)}. Between those two runs of the same table, hours apart, the slowest "
            f"tenth moved from {min(deciles) / deciles[0]:.2f}x to "
            f"{min(package['decile_msgs_per_s']) / package['decile_msgs_per_s'][0]:.2f}x: read the pair "
            "above, not a single run, for what the parameters cost.",
        ]
    return lines


def _short_return(drain: dict[str, Any]) -> str:
    """:func:`_returned` without the row count (the table's row says it)."""
    rows = f"{drain['rows']:,} rows"
    return _returned(drain).replace(f" after the drain of {rows}", "").replace(f" at {rows}", "")


def storage_bypass_paragraph(doc: dict[str, Any]) -> list[str]:
    """docs/dba.md's evidence for ``vacuum_index_cleanup = on``: the run made with only the autovacuum
    settings, whose deepest drained table was not given back, not even by a manual VACUUM."""
    (result,) = [result for result in doc["scale"] if result["engine"] == "postgresql"]
    meta = doc["meta"]
    deepest = max((d for d in result["drains"] if d["autovacuum"]), key=lambda d: d["rows"])
    vacuumed, after = deepest["after_vacuum"], deepest["after"]
    parameters = ", ".join(f"`{entry}`" for entry in deepest["before"]["storage_parameters"])
    runs = after["autovacuum_count"] - deepest["before"]["autovacuum_count"]
    returned = "; ".join(
        _returned(d) for d in result["drains"] if d["autovacuum"] and d is not deepest and d["storage_return"]
    )
    return [
        f"[Measured](benchmarks.md#scale) ({meta['date'][:10]}, commit {meta['commit']}, "
        f"`{meta['command']}`, kept as `docs/data/raw/storage-return-07d3244.json`), storage parameters "
        f"{parameters} only: "
        f"{returned}; but at {deepest['rows']:,} rows autovacuum ran {runs} time(s) during the "
        f"{deepest['seconds']:.0f} s drain, and the table's storage came back "
        f"{_short_return(deepest)}"
        f"; a manual plain `VACUUM` then left {_mib(vacuumed['total_bytes'])} "
        f"({vacuumed['dead_tuples']:,} dead rows, {vacuumed['live_tuples']:,} live).",
    ]


def deep_explain_paragraph(doc: dict[str, Any]) -> list[str]:
    """docs/dba.md's evidence: the pages the receive's pick reads over a drain, from the start and after
    the low-water mark (benchmarks/explain_drain.py)."""
    meta, drain = doc["meta"], doc["drain"]
    points = drain["points"]
    lines = [
        f"[Measured](benchmarks.md#scale) ({meta['date'][:10]}, commit {meta['commit']}, "
        f"`{meta['command']}`): a queue of {drain['rows']:,} rows drained through the package, and at three "
        "points `EXPLAIN (ANALYZE, BUFFERS)` of the pick of 100 (rolled back):",
        "",
        "| messages taken | dead tuples | autovacuum runs | pick from the start: pages, ms | "
        "pick after the mark: pages, ms |",
        "|--:|--:|--:|--:|--:|",
    ]
    for point in points:
        after = point["after_mark"]
        lines.append(
            f"| {point['received']:,} | {point['dead_tuples']:,} | {point['autovacuum_count']} | "
            f"{point['from_start']['pages']:,}, {point['from_start']['ms']:.2f} | "
            + (f"{after['pages']:,}, {after['ms']:.2f} |" if after else "- |")
        )
    return lines


def drain_io_paragraph(doc: dict[str, Any]) -> list[str]:
    """docs/dba.md's deep-drain tenths beside what each coincided with: two runs of one command."""
    runs = doc["runs"]
    first = runs[0]["meta"]
    lines = [
        f"Measured ({first['date'][:10]}, commit {first['commit']}, {len(runs)} runs back to back of "
        f"`{first['command'].split(' --json')[0]}`, kept as `docs/data/raw/drain-io-04ced7b.json`): one "
        "consumer draining 1,000,000 rows with `receive(max_messages=100)`, the package's table settings; "
        "per tenth, its rate, the host's I/O stall time during it (Linux PSI), the page cache not yet "
        "written to disk at its end, and the checkpoints PostgreSQL counted during it:",
        "",
        "| tenth | "
        + " | ".join(
            f"run {i + 1}: msgs/s, I/O stall ms, unwritten MiB, checkpoints" for i in range(len(runs))
        )
        + " |",
        "|--:|" + "--:|" * len(runs),
    ]
    for tenth in range(10):
        cells = []
        for run in runs:
            drain = run["drain"]
            rate = drain["decile_msgs_per_s"][tenth]
            activity = drain["decile_activity"][tenth]
            stall, unwritten = activity["io_stall_ms"], activity["dirty_mb"]
            cells.append(f"{rate:,.0f}, {stall:,}, {unwritten:,}, {activity['checkpoints']}")
        lines.append(f"| {tenth + 1} | " + " | ".join(cells) + " |")
    lines.append("")
    summary = []
    for index, run in enumerate(runs):
        drain = run["drain"]
        deciles = drain["decile_msgs_per_s"]
        vacuumed = any(tenth["vacuuming"] for tenth in drain["decile_activity"])
        ratio = min(deciles) / deciles[0]
        summary.append(
            f"run {index + 1}: {drain['seconds']:.1f} s, slowest tenth / first {ratio:.2f}x, "
            + ("a vacuum of the table ran during the drain" if vacuumed else "no vacuum of the table ran")
        )
    lines.append("; ".join(summary) + ".")
    return lines


def dba_blocks() -> dict[str, tuple[str, list[str]]]:
    from pages.blocks import ROOT
    from pages.transcribed_text import data_blocks

    folder = ROOT / "docs" / "benchmarks"
    # the run with the server's settings, before the package gave queue tables storage parameters: the
    # problem dba.md describes, and the "with the server's defaults" column beside the package's tables
    scale = json.loads((ROOT / "docs" / "data" / "raw" / "scale-2f6db82.json").read_text(encoding="utf-8"))
    before_path = ROOT / "docs" / "data" / "raw" / "scale-c687d42.json"
    before = json.loads(before_path.read_text(encoding="utf-8")) if before_path.exists() else None
    explained = json.loads((folder / "deep-explain.json").read_text(encoding="utf-8"))
    returned = json.loads((folder / "storage-return.json").read_text(encoding="utf-8"))
    deep_path = folder / "storage-return-deep.json"
    deep = json.loads(deep_path.read_text(encoding="utf-8")) if deep_path.exists() else None
    earlier_path = ROOT / "docs" / "data" / "raw" / "storage-return-deep-290f200.json"
    earlier = json.loads(earlier_path.read_text(encoding="utf-8")) if earlier_path.exists() else None
    bypassed_path = ROOT / "docs" / "data" / "raw" / "storage-return-07d3244.json"
    bypassed = json.loads(bypassed_path.read_text(encoding="utf-8"))
    drain_io = json.loads(
        (ROOT / "docs" / "data" / "raw" / "drain-io-04ced7b.json").read_text(encoding="utf-8")
    )
    return {
        "dba-drain-io": ("docs/data/raw/drain-io-04ced7b.json", drain_io_paragraph(drain_io)),
        "dba-storage-bypass": (
            "docs/data/raw/storage-return-07d3244.json",
            storage_bypass_paragraph(bypassed),
        ),
        "dba-vacuum-drain": ("docs/data/raw/scale-2f6db82.json", vacuum_paragraph(scale, before)),
        "dba-storage-return": (
            "docs/benchmarks/storage-return.json",
            storage_return_paragraph(returned, scale, deep, earlier),
        ),
        "dba-deep-explain": ("docs/benchmarks/deep-explain.json", deep_explain_paragraph(explained)),
        **data_blocks("babelfish.json"),
    }
