"""The history page's measured blocks: the runs that decided the package's settings for deep queues
on PostgreSQL (the picks' plans over a drain, what vacuum gave back and when, what the disk did to a drain's
tenths, the vacuum's cost delay); rendered from the committed result files. The current figures of
docs/dba-maintenance.md are pages/dba_current.py's."""

from __future__ import annotations

import itertools
import json
from typing import Any

from pages.scale_tables import (
    _mib,
    _mixed_finding,
    _returned,
    _runs_during,
    _seconds,
    _short_return,
)
from pages.throughput import is_package_drain


def vacuum_paragraph(scale: dict[str, Any], before: dict[str, Any] | None) -> list[str]:
    """The history page's measured deep drains on PostgreSQL: flat or not, and the storage coming back."""
    (result,) = [result for result in scale["scale"] if result["engine"] == "postgresql"]
    meta = scale["meta"]
    drains = [drain for drain in result["drains"] if drain["autovacuum"]]
    lines = [
        f"Measured ({meta['date'][:10]}, commit {meta.get('commit', 'unknown')}, "
        "`benchmarks/run.py --scale --deep`, kept as `docs/data/raw/scale-2f6db82.json`; "
        "[benchmarks.md](../benchmarks.md#scale) has the latest run), one consumer draining each queue with "
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
    """The history page's bound: how long after a drain a table created with the package's storage parameters
    took to give its storage back without a manual VACUUM, beside the run with the server's defaults;
    ``deep`` is a separate run of the deepest size, with the same parameters, when there is one."""
    meta = doc["meta"]
    drains = _returning_drains(doc) + (_returning_drains(deep) if deep else [])
    parameters = ", ".join(f"`{entry}`" for entry in drains[0]["before"]["storage_parameters"]) or "none"
    load = meta["load_average_before"][0]
    busy = "; other work shared the CPUs" if load > meta["machine"]["cpus"] else ""
    lines = [
        f"[Measured](../benchmarks.md#scale) ({meta['date'][:10]}, commit {meta.get('commit', 'unknown')}, "
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


def storage_bypass_paragraph(doc: dict[str, Any]) -> list[str]:
    """The history page's evidence for ``vacuum_index_cleanup = on``: the run made with only the autovacuum
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
        f"[Measured](../benchmarks.md#scale) ({meta['date'][:10]}, commit {meta['commit']}, "
        f"`{meta['command']}`, kept as `docs/data/raw/storage-return-07d3244.json`), storage parameters "
        f"{parameters} only: "
        f"{returned}; but at {deepest['rows']:,} rows autovacuum ran {runs} time(s) during the "
        f"{deepest['seconds']:.0f} s drain, and the table's storage came back "
        f"{_short_return(deepest)}"
        f"; a manual plain `VACUUM` then left {_mib(vacuumed['total_bytes'])} "
        f"({vacuumed['dead_tuples']:,} dead rows, {vacuumed['live_tuples']:,} live).",
    ]


def deep_explain_paragraph(doc: dict[str, Any]) -> list[str]:
    """The history page's evidence: the pages the receive's pick reads over a drain, from the start and after
    the low-water mark (benchmarks/explain_drain.py)."""
    meta, drain = doc["meta"], doc["drain"]
    points = drain["points"]
    lines = [
        f"[Measured](../benchmarks.md#scale) ({meta['date'][:10]}, commit {meta['commit']}, "
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
    """The history page's deep-drain tenths beside what each coincided with: two runs of one command."""
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


def history_blocks() -> dict[str, tuple[str, list[str]]]:
    from pages.blocks import ROOT

    folder = ROOT / "docs" / "benchmarks"
    # the run with the server's settings, before the package gave queue tables storage parameters: the
    # problem the history page starts from, and the column "with the server's defaults"
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
    latest = json.loads((folder / "scale.json").read_text(encoding="utf-8"))
    server_flush = json.loads(
        (ROOT / "docs" / "data" / "raw" / "server-flush-e0fcf77.json").read_text(encoding="utf-8")
    )
    throttled = json.loads((ROOT / THROTTLED_VACUUM_RUN).read_text(encoding="utf-8"))
    half_ms = json.loads((ROOT / HALF_MS_VACUUM_RUN).read_text(encoding="utf-8"))
    half_ms_again = json.loads((ROOT / HALF_MS_VACUUM_RUN_AGAIN).read_text(encoding="utf-8"))
    return {
        "dba-throttled-vacuum": (
            THROTTLED_VACUUM_RUN,
            throttled_vacuum_paragraph(throttled, THROTTLED_VACUUM_RUN),
        ),
        "dba-throttled-vacuum-half-ms": (
            HALF_MS_VACUUM_RUN,
            throttled_vacuum_paragraph(half_ms, HALF_MS_VACUUM_RUN),
        ),
        "dba-throttled-vacuum-half-ms-again": (
            HALF_MS_VACUUM_RUN_AGAIN,
            throttled_vacuum_paragraph(half_ms_again, HALF_MS_VACUUM_RUN_AGAIN),
        ),
        "dba-server-flush": ("docs/data/raw/server-flush-e0fcf77.json", server_flush_paragraph(server_flush)),
        "dba-write-back": ("docs/benchmarks/scale.json", write_back_paragraph(latest)),
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
    }


THROTTLED_VACUUM_RUN = "docs/data/raw/throttled-vacuum-8bd77eb.json"
HALF_MS_VACUUM_RUN = "docs/data/raw/throttled-vacuum-559c8da-0.5ms.json"
HALF_MS_VACUUM_RUN_AGAIN = "docs/data/raw/throttled-vacuum-8dccbdf-0.5ms.json"


def _delay_label(drain: dict[str, Any]) -> str:
    delay = drain.get("throttle_cost_delay_ms")
    return "the server's cost delay" if delay is None else f"a cost delay of {delay:g} ms"


def _package_label(drain: dict[str, Any]) -> str:
    """The package's table of a pair, named by the cost delay it was created with at the run's commit (the
    package's default has changed since: 0 until 7b38f80, 0.5 ms after)."""
    delay = next(
        (
            entry.split("=", 1)[1]
            for entry in drain["before"]["storage_parameters"]
            if entry.startswith("autovacuum_vacuum_cost_delay=")
        ),
        None,
    )
    if delay is None:
        return "the package's (the server's cost delay)"
    return "unthrottled (the package's then)" if float(delay) == 0 else f"the package's ({float(delay):g} ms)"


def throttled_vacuum_paragraph(doc: dict[str, Any], kept_as: str) -> list[str]:
    """The history page: the deepest drain from a table with the package's parameters of its commit beside
    the same drain from one whose ``autovacuum_vacuum_cost_delay`` is the server's or the run's
    (``--throttled-vacuum``, ``--throttle-cost-delay``)."""
    meta = doc["meta"]
    (result,) = [result for result in doc["scale"] if result["engine"] == "postgresql"]
    package_drains = {
        drain["rows"]: drain for drain in result["drains"] if drain["autovacuum"] and is_package_drain(drain)
    }
    pairs = [
        (package_drains[drain["rows"]], drain) for drain in result["drains"] if drain.get("throttled_vacuum")
    ]
    delays = {_delay_label(throttled) for _, throttled in pairs}
    set_to = (
        "was reset to the server's"
        if delays == {"the server's cost delay"}
        else "was set to " + ", ".join(sorted(label.removeprefix("a cost delay of ") for label in delays))
    )
    lines = [
        f"Measured ({meta['date'][:10]}, commit {meta['commit']}, "
        f"`{meta['command'].split(' --json')[0]}`, kept as `{kept_as}`, "
        f"{meta['machine']['cpus']} CPUs, {meta['machine']['cpu']}): in one run, each size drained by one "
        "consumer with `receive(max_messages=100)` from a table with the "
        f"package's parameters, and once more from a table whose `autovacuum_vacuum_cost_delay` {set_to}, "
        "every other parameter the package's. Per tenth, its rate, the host's I/O stall time "
        "during it, the page cache not yet written to disk at its end, and whether a vacuum of the table "
        "was running then:",
        "",
    ]
    for package, throttled in pairs:
        label, package_label = _delay_label(throttled), _package_label(package)
        lines += [
            f"| {throttled['rows']:,} rows: tenth | {package_label}: msgs/s, I/O stall ms, "
            f"unwritten MiB, vacuum | {label}: msgs/s, I/O stall ms, unwritten MiB, vacuum |",
            "|--:|--:|--:|",
            *_paired_tenths(package, throttled),
            "",
            f"{throttled['rows']:,} rows: {package_label.split(' (')[0]} {_write_back_summary(package)}, "
            f"storage back {_short_return(package)}{_vacuums_after(package)}; with {label}, "
            f"{_write_back_summary(throttled)}, storage back {_short_return(throttled)}"
            f"{_vacuums_after(throttled)}.",
            "",
        ]
    return lines[:-1]


def _write_back_pairs(scale: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each PostgreSQL drain by a session left at ``backend_flush_after`` 0 (``--no-write-back``), with the
    drain of the same size by a session as the package sets it up, from the same run."""
    pairs = []
    for result in scale["scale"]:
        if result["engine"] != "postgresql":
            continue
        for plain in result["drains"]:
            if plain.get("package_write_back") is not False:
                continue
            partner = next(
                drain
                for drain in result["drains"]
                if drain["rows"] == plain["rows"] and drain["autovacuum"] and is_package_drain(drain)
            )
            pairs.append((partner, plain))
    return pairs


def _paired_tenths(left: dict[str, Any], right: dict[str, Any]) -> list[str]:
    """Table rows, one per tenth, of two drains side by side: rate, I/O stall, unwritten MiB, vacuum."""
    rows = []
    for tenth in range(10):
        cells = []
        for drain in (left, right):
            activity = drain["decile_activity"][tenth]
            cells.append(
                f"{drain['decile_msgs_per_s'][tenth]:,.0f}, {activity['io_stall_ms']:,}, "
                f"{activity['dirty_mb']:,}, {'yes' if activity['vacuuming'] else 'no'}"
            )
        rows.append(f"| {tenth + 1} | " + " | ".join(cells) + " |")
    return rows


def _vacuums_after(drain: dict[str, Any]) -> str:
    """For a drain whose storage did not come back: when autovacuum last finished a run while the run
    watched, and what the manual ``VACUUM`` after the wait left."""
    watched = drain.get("storage_return") or {}
    if not watched or watched.get("back_after_seconds") is not None or "after_vacuum" not in drain:
        return ""
    samples = watched["samples"]
    runs = samples[-1][2] - drain["after"]["autovacuum_count"]
    ends = [at for (_, _, before), (at, _, now) in itertools.pairwise(samples) if now > before]
    finished = f"{runs} autovacuum run(s) finished after the drain" + (
        f", the last {ends[-1]:.0f} s after it" if ends else ""
    )
    left = drain["after_vacuum"]["total_bytes"] / 2**20
    return f": {finished}, and a manual `VACUUM` after the wait left {left:,.0f} MiB"


def _write_back_summary(drain: dict[str, Any]) -> str:
    deciles, tenths = drain["decile_msgs_per_s"], drain["decile_activity"]
    unwritten = max(tenth["dirty_mb"] for tenth in tenths)
    stall = max(tenth["io_stall_ms"] for tenth in tenths)
    return (
        f"{drain['seconds']:,.1f} s, {drain['msgs_per_s']:,.0f} msgs/s, slowest tenth / first "
        f"{min(deciles) / deciles[0]:.2f}x, unwritten page cache at most {unwritten:,} MiB, I/O stall at "
        f"most {stall:,} ms in a tenth, autovacuum ran "
        f"{_runs_during(drain)} time(s) during the drain"
    )


def write_back_paragraph(scale: dict[str, Any]) -> list[str]:
    """The history page: the drains by sessions with and without ``backend_flush_after``, tenth by tenth."""
    meta = scale["meta"]
    pairs = _write_back_pairs(scale)
    if not pairs:
        return ["Not measured in the latest scale run: `benchmarks/run.py --scale --no-write-back 1000000`."]
    lines = [
        f"[Measured](../benchmarks.md#scale) ({meta['date'][:10]}, commit {meta['commit']}, "
        f"`{meta['command'].split(' --json')[0]}`, kept as `docs/benchmarks/scale.json`, "
        f"{meta['machine']['cpus']} CPUs, {meta['machine']['cpu']}): each size drained by one consumer with "
        "`receive(max_messages=100)` from a table with the package's settings, once by a session as the "
        f"package sets it up (`backend_flush_after` {pairs[0][0].get('backend_flush_after')}) and once by a "
        f"session left at the server's `backend_flush_after` ({pairs[0][1].get('backend_flush_after')}); "
        "per tenth, its rate, the host's I/O stall time during it, the page cache not yet written to "
        "disk at its end, and whether a vacuum of the table was running then:",
        "",
    ]
    for written, plain in pairs:
        lines += [
            f"| {written['rows']:,} rows: tenth | package's session: msgs/s, I/O stall ms, unwritten MiB, "
            "vacuum | left at 0: msgs/s, I/O stall ms, unwritten MiB, vacuum |",
            "|--:|--:|--:|",
        ]
        lines += _paired_tenths(written, plain)
        lines += [
            "",
            f"{written['rows']:,} rows: the package's session {_write_back_summary(written)}; left at 0, "
            f"{_write_back_summary(plain)}.",
            "",
        ]
    return lines[:-1]


def server_flush_paragraph(doc: dict[str, Any]) -> list[str]:
    """The history page: the deep drains with ``backend_flush_after`` in postgresql.conf (autovacuum workers
    included) beside the same drains with only the package's sessions setting it, two runs back to back."""
    server, package = (run["result"] for run in doc["runs"])
    first = server["meta"]

    def drains(result: dict[str, Any]) -> dict[int, dict[str, Any]]:
        (engine,) = result["scale"]
        return {drain["rows"]: drain for drain in engine["drains"] if drain["autovacuum"]}

    with_server, with_package = drains(server), drains(package)
    deepest = max(with_server)
    lines = [
        f"Measured ({first['date'][:10]}, commit {first['commit']}, two runs back to back of "
        f"`{package['meta']['command'].split(' --json')[0]}`, the first with `--server-setting "
        "backend_flush_after=256kB`; kept as `docs/data/raw/server-flush-e0fcf77.json`): the package's "
        "sessions set 256 kB in both runs; in the first the server's own value covered every backend, the "
        f"autovacuum workers included. The {deepest:,}-row drain, tenth by tenth:",
        "",
        "| tenth | in postgresql.conf: msgs/s, I/O stall ms, unwritten MiB, vacuum | the package's sessions "
        "only: msgs/s, I/O stall ms, unwritten MiB, vacuum |",
        "|--:|--:|--:|",
    ]
    lines += _paired_tenths(with_server[deepest], with_package[deepest])
    lines.append("")
    lines.append(
        "; ".join(
            f"{rows:,} rows: in postgresql.conf {_write_back_summary(with_server[rows])}; the package's "
            f"sessions only, {_write_back_summary(with_package[rows])}"
            for rows in sorted(with_server)
        )
        + "."
    )
    return lines
