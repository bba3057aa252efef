"""Hundreds of deferred requests: what they hold and read while they wait, a reply queue per request beside
one shared reply queue read by correlation, from docs/data/request-reply.json
(benchmarks/request_reply_bench.py), on docs/request-reply.md."""

from __future__ import annotations

from typing import Any

from pages.blocks import load_data, machine_brief, run_link

DATA_FILE = "request-reply.json"
ENGINE_LABELS = {"postgresql": "PostgreSQL", "sqlite": "SQLite"}


def _per_request_poll(result: dict[str, Any]) -> float | None:
    """Rows the server read per waiting request per poll round (None where the engine does not count)."""
    rows, reads = result["waiting_rows_read"], result["depth_reads"]
    return None if rows is None or not reads else rows / reads / result["deferred"]


def _per_look(value: int | None, looks: int) -> str:
    return "not counted" if value is None else f"{value / looks:,.1f}"


def _ratio(shared: int | None, own: int | None) -> str:
    return "n/a" if shared is None or not own else f"{shared / own:,.0f}x"


def waiting_lines(data: dict[str, Any]) -> list[str]:
    """The counts per engine, the two reply layouts side by side, and how the run was made."""
    [(name, run)] = data["runs"].items()
    results = {r["engine"]: r for r in data["results"] if r["run"] == name}
    engines = [e for e in ENGINE_LABELS if e in results]
    lines = [
        "| engine | tasks deferred | connections held while they wait | poll rounds counted "
        "| statements per poll round | rows read per waiting request per poll round "
        f"| the poller's first {run['warmup_polls']} reads took |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for engine in engines:
        r = results[engine]
        held = "none sampled" if r["held_max"] is None else str(r["held_max"])
        per_round = "n/a" if not r["poll_rounds"] else f"{r['waiting_statements'] / r['poll_rounds']:.1f}"
        rows = _per_request_poll(r)
        lines.append(
            f"| {ENGINE_LABELS[engine]} | {r['deferred']} of {run['requests']} | {held} "
            f"| {r['poll_rounds']} in {r['measured_seconds']:.0f} s | {per_round} "
            f"| {'not counted' if rows is None else f'{rows:.1f}'} | {r['warmup_seconds']:.0f} s |"
        )
    lines += [
        "",
        "| engine | replies taken | lost | misrouted | in the error queue | reply queues left |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for engine in engines:
        r = results[engine]
        lines.append(
            f"| {ENGINE_LABELS[engine]} | {r['replied']} of {r['deferred']} | {r['lost']} | {r['misrouted']} "
            f"| {r['error_queue_depth']} | {r['reply_queues_left']} |"
        )
    lines += [
        "",
        "| engine | rows returned per look: a reply queue each | one shared queue | shared / each "
        "| rows read per look: a reply queue each | one shared queue | shared / each |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for engine in engines:
        layouts = results[engine]["layouts"]
        looks = layouts["requests"]
        lines.append(
            f"| {ENGINE_LABELS[engine]} | {_per_look(layouts['own_queue_round'], looks)} "
            f"| {_per_look(layouts['shared_queue_round'], looks)} "
            f"| {_ratio(layouts['shared_queue_round'], layouts['own_queue_round'])} "
            f"| {_per_look(layouts['own_rows_read'], looks)} "
            f"| {_per_look(layouts['shared_rows_read'], looks)} "
            f"| {_ratio(layouts['shared_rows_read'], layouts['own_rows_read'])} |"
        )
    lines += [
        "",
        f"{run['requests']} `RequestReplyOperator` tasks executed one after the other, each sending its "
        "request and deferring; their `ReplyTrigger`s, rebuilt from their serialized form, waited on one "
        f"asyncio loop as the triggerer runs them (`poll_interval` {run['poll_interval']:g} s), "
        f"counted for {run['seconds']:g} seconds after their shared poller's first {run['warmup_polls']} "
        "reads, with no reply sent: connections as the largest sample of `pg_stat_activity` (SQLite: open "
        "descriptors of the database file), statements as the driver ran them, rows as PostgreSQL's "
        "`pg_stat_user_tables` counted them (SQLite keeps no such count). Then a new triggerer rebuilt "
        "the triggers while a Python endpoint answered every request with `context.reply`, and each task "
        "resumed with `execute_complete`. Side by side, at the same size: each request's look at its own "
        "reply queue (the read that confirms a reply) beside a look for its reply by correlation in one "
        f"shared queue holding as many replies. `benchmarks/request_reply_bench.py` on "
        f"{machine_brief(run)}; PostgreSQL a {run['postgresql_settings']}, SQLite "
        f"{run['sqlite_settings']}. {run_link(DATA_FILE)}",
    ]
    return lines


def request_reply_blocks() -> dict[str, tuple[str, list[str]]]:
    return {"waiting-requests": (f"docs/data/{DATA_FILE}", waiting_lines(load_data(DATA_FILE)))}
