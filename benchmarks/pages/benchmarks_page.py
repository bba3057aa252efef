"""docs/benchmarks.md: the throughput table, the targets, the scale and memory measurements and the
machine, from docs/benchmarks/results.json and docs/benchmarks/scale.json."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pages.chart import chart_available, draw_chart
from pages.scale_tables import scale_section
from pages.throughput import (
    CORE_LABELS,
    ENGINE_LABELS,
    PEER_NAMES,
    compute_targets,
    core_row,
    handler_rows,
    pump_row,
    ratio_text,
    side_spread,
    value_text,
    wakeup_rows,
    wanted_text,
)


# ---- the page -----------------------------------------------------------------------------------------
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
        pump = pump_row(doc, engine)
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
            f"| {target['target']} | {value_text(target)} | {wanted_text(target)} | {mark} | "
            f"{target['detail']} |"
        )
    return lines


REFRESH = (
    "benchmarks/.venv/bin/python benchmarks/run.py --only handlers,wakeup --json docs/benchmarks/results.json"
)


def _section_provenance(section: dict[str, Any]) -> str:
    meta = section["meta"]
    return (
        f"Measured on {meta['date']} at commit {meta['commit']} (`{meta['command']}`, "
        f"{meta['seconds']:.0f} s; "
        f"1-minute load average {meta['load_average_before'][0]:.2f} at the start)."
    )


def handlers_section(doc: dict[str, Any]) -> list[str]:
    """Handler throughput: the pump, pgqueuer's consumer and procrastinate's worker, each calling a no-op
    handler per message, beside the bare raw receive_batch, all at the same N in one run."""
    section = doc.get("handlers")
    if not section:
        return ["Not measured in this run; `" + REFRESH + "` adds it to the results file.", ""]
    lines = [
        "Every row drains the same N messages on the same server, round after round in a rotating order. "
        "*level*: **handler** rows call a no-op handler once per message (the pump's records the Id; "
        "pgqueuer's entrypoint and procrastinate's task are async no-ops); the **bare receive** row "
        "fetches and deletes the rows and calls nothing: it is what the handler rows are judged against, "
        "never a peer's consumer. The pump: `MessagePump(queue, handler, max_concurrency=4, "
        'strategy="monitor", batch_size=100)` for the batching row (the batch-1 row passes no batch_size: '
        "one message per transaction, as before), a transport pool of 8. " + _section_provenance(section),
        "",
        "| engine | what | level | N | per txn | concurrency | msgs/s (median) | min-max |",
        "|---|---|---|--:|--:|--:|--:|--:|",
    ]
    for engine in ("postgresql", "sqlite"):
        for row in handler_rows(doc, engine).values():
            if row["case"] == "raw_receive_batch":
                who = "raw driver `receive_batch` (1 process)"
            elif row["case"] in PEER_NAMES:
                who = row["label"]
            else:
                who = f"**sqlqueue** {row['label']}"
            if row.get("available"):
                spread = row["msgs_per_s"]
                figures = f"{spread['median']:,.0f} | {spread['min']:,.0f}-{spread['max']:,.0f}"
            else:
                figures = f"{row.get('reason', 'not run')} | "
            lines.append(
                f"| {ENGINE_LABELS[engine]} | {who} | {row['level']} | {row['n']:,} | "
                f"{row.get('batch', '-')} | "
                f"{row.get('concurrency', '-')} | {figures} |"
            )
    return [*lines, ""]


def wakeup_section(doc: dict[str, Any]) -> list[str]:
    """Wake-up latency: commit to handler call for an idle consumer, push against polling and pgqueuer."""
    section = doc.get("wakeup")
    if not section:
        return ["Not measured in this run; `" + REFRESH + "` adds it to the results file.", ""]
    settings = section["settings"]
    lines = [
        f"A consumer starts and stays idle for {settings['idle_s']:g} s; then another process sends "
        f"{settings['sends']} single messages, one commit each, {settings['spacing_s'] * 1000:g} ms apart. "
        "The sender notes the monotonic clock right after each commit, the handler on entry (one clock "
        "for all processes of the machine); the latency is the difference, per message. The pump: "
        '`MessagePump(queue, handler, max_concurrency=4, strategy="monitor", wake_up=...)`, polling with '
        "the default idle delay (1 s); pgqueuer's consumer wakes by its own LISTEN/NOTIFY. SQLite has no "
        "push across processes: polling only. " + _section_provenance(section),
        "",
        "| engine | consumer | messages | p50 ms | p95 ms | max ms |",
        "|---|---|--:|--:|--:|--:|",
    ]
    for engine in ("postgresql", "sqlite"):
        for row in wakeup_rows(doc, engine).values():
            who = row["label"] if row["system"] == "pgqueuer" else f"**sqlqueue** {row['label']}"
            if row.get("available"):
                figures = f"{row['p50_ms']:.1f} | {row['p95_ms']:.1f} | {row['max_ms']:.1f}"
            else:
                figures = f"{row.get('reason', 'not run')} | | "
            lines.append(f"| {ENGINE_LABELS[engine]} | {who} | {row['sends']} | {figures} |")
    return [*lines, ""]


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
        *([f"| commit measured | {meta['commit']} |"] if meta.get("commit") else []),
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


def _timing_end(doc: dict[str, Any]) -> str:
    """When a timed run stops, as the run measured it: runs since core_bench noted the last message
    received (their rows carry ``all_done_seconds``) stop there for receives."""
    noted = any(
        "all_done_seconds" in sample[impl]
        for row in doc.get("core", [])
        for sample in row.get("rounds", [])
        for impl in ("raw", "project")
        if impl in sample
    )
    if not noted:
        return "stops when the last one finished."
    return (
        "a send stops when the last process finished; a receive stops when the last message was received "
        "and acknowledged (this project, the raw driver, kombu and persist-queue note it after each "
        "receive), not when the last process, which may be sleeping in SQLite's busy handler (up to 100 ms "
        "between tries), saw the queue empty. The pump beside the raw 4-process receive notes its last "
        "message in the handler, just before that message's commit; in the handler comparison pgqueuer, "
        "procrastinate and the pump, one process each whose acknowledgements are flushed as it ends, stop "
        "when that process finished."
    )


def _copy_against_insert(doc: dict[str, Any]) -> str:
    """How the project's PostgreSQL batch send (binary COPY) compares in this run with the raw driver's
    multi-row INSERT, computed from the run's send_batch row."""
    row = core_row(doc, "postgresql", "send_batch")
    if row is None:
        return ""
    side = "above" if row["ratio"] > 1 else "not above"
    return f", {side} the raw driver's multi-row `INSERT` in this run ({ratio_text(row['ratio'])} of it)"


def page_text(doc: dict[str, Any], scale: dict[str, Any] | None, image_link: str, charted: bool) -> str:
    """The whole page; ``charted`` says whether it shows the chart at ``image_link`` or says why not."""
    meta = doc["meta"]
    rounds = f"{meta['repeat']} round{'s' if meta['repeat'] > 1 else ''}"
    targets = compute_targets(doc, scale, issue18=True)
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
            f"**Read with care:** the machine has {meta['machine']['cpus']} CPUs"
            + (" and was shared with other work during the run" if busy else "")
            + " (1-minute load average "
            f"{meta['load_average_before'][0]:.2f} at the start, {meta['load_average_after'][0]:.2f} at the "
            "end). With 4 consumers, 4 client processes and their server backends share those CPUs, so the "
            "4-consumer rows measure contention as much as parallelism, and single figures are noisy: look "
            "at the min-max columns. Ratios pair runs made back to back in the same round.",
            "",
        ]
    if charted:
        lines += [f"![Throughput: this project, the raw driver and the peers]({image_link})", ""]
    elif not doc.get("core"):
        lines += ["(No chart: this results file holds no project-vs-raw throughput section.)", ""]
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
        "## Handler throughput",
        "",
        *handlers_section(doc),
        "## Wake-up latency",
        "",
        *wakeup_section(doc),
        "## Targets",
        "",
        "Ratios within this run. Against the raw driver: the median of the per-round ratios (the *vs raw* "
        "column above, with its range); against a peer: this project's median divided by the peer's "
        "median; the peek target from the scale run. Every comparison with a peer is made at one level: "
        "bare send or receive against the peer's bare send or receive (kombu's `get` + `ack`), a handler "
        "called per message against the peer's consumer calling its entrypoint. Wake-up targets are "
        "milliseconds, not ratios. A target whose feature this build lacks says so. On a shared 2-CPU "
        "machine a ratio near its threshold can land on either side from one run to the next: read the "
        "ranges.",
        "",
        *targets_table(targets),
        "",
        "Each peer target also shows its *ceiling*: the raw driver running this project's statements, with "
        "nothing of the project around them, divided by the peer. Where the ceiling is below the wanted "
        "ratio, no client issuing these statements can meet the target on this server: a batch send or "
        "receive is one statement and one commit, and its time goes to the server's work on the rows and "
        "to the commit's WAL flush (`synchronous_commit` on, as in production). Meeting such a target "
        "takes another statement shape or another durability model. Batch sends on PostgreSQL took "
        "the first way: they go by binary `COPY`"
        + _copy_against_insert(doc)
        + ". A receive has no such shape: it must lock, delete and return the rows in one statement to "
        "keep its guarantees (see [Performance tuning](performance.md)).",
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
        f"has imported, connected and built its input, and {_timing_end(doc)} See "
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
        "benchmarks/.venv/bin/python benchmarks/run.py --json docs/benchmarks/results.json  # every section",
        "benchmarks/.venv/bin/python benchmarks/run.py --only handlers,wakeup "
        "--json docs/benchmarks/results.json",
        "benchmarks/.venv/bin/python benchmarks/run.py --scale --json docs/benchmarks/scale.json # 1M rows",
        "benchmarks/.venv/bin/python benchmarks/render.py   # this page and docs/images/benchmarks.png",
        "```",
        "",
        "`--only handlers,wakeup` refreshes the handler-throughput and wake-up sections in an existing "
        "results file and keeps the others (each section records its own commit). "
        "`--quick` makes a smoke run; `--peers none` measures this project and the raw driver "
        "only; `--engines sqlite` one engine. Peers that are not installed are skipped with a note.",
        "",
        "## Tuning: before and after",
        "",
        "The record of the hot-path tuning, with the figures before and after each change, is in "
        "[the performance tuning history](history/performance-tuning.md).",
        "",
    ]
    return "\n".join(lines)


def render(doc: dict[str, Any], scale: dict[str, Any] | None, out: Path, image: Path) -> str:
    """Write the page (and the chart, when matplotlib is installed); return the page's text."""
    charted = chart_available() and bool(doc.get("core"))
    if charted:
        draw_chart(doc, image)
    text = page_text(doc, scale, Path(os.path.relpath(image, out.parent)).as_posix(), charted)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return text
