"""The subcommands that watch queues without touching them: depth (estimated or exact message counts)
and stats (counts, expired messages and the oldest message's age, for one schema or named queues; once,
or live with ``--watch``)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..transport.overview import human_age, queue_state
from ._support import CliError, Exit, connected, existing_queue, json_line, note, now

if TYPE_CHECKING:
    from ..transport import Transport


def depth(args: argparse.Namespace, out: Console, err: Console) -> int:
    rows = []
    with connected(args) as transport:
        for name in dict.fromkeys(args.queues):
            queue = existing_queue(transport, name)
            estimate = queue.peek_estimate()
            exact = queue.count() if args.exact else None
            rows.append({"queue": str(queue.address), "estimate": estimate, "exact": exact})
    if args.json:
        for row in rows:
            sys.stdout.write(json_line(row) + "\n")
        sys.stdout.flush()
    else:
        table = Table(show_edge=False, box=None, pad_edge=False)
        table.add_column("queue")
        table.add_column("estimate", justify="right")
        if args.exact:
            table.add_column("exact", justify="right")
        for row in rows:
            cells = [Text(row["queue"]), Text(f"~{row['estimate']:,}")]
            if args.exact:
                cells.append(Text(f"{row['exact']:,}"))
            table.add_row(*cells)
        out.print(table)
    empty = all((row["exact"] if row["exact"] is not None else row["estimate"]) == 0 for row in rows)
    return Exit.EMPTY if args.fail_on_empty and empty else Exit.OK


def _stats_rows(transport: Transport, queues: list[Any]) -> list[dict[str, Any]]:
    from ..transport import PermissionDenied
    from ..transport.browse import count_expired

    rows = []
    checked_at = now()
    failed = _failed_by_queue(transport)
    for queue in queues:
        state = queue_state(queue, checked_at)
        try:
            estimate: int | None = queue.peek_estimate()
        except PermissionDenied:  # a SELECT-only monitoring role (PostgreSQL row locks need more)
            estimate = None
        sent = state.oldest_time_sent
        rows.append(
            {
                "queue": state.name,
                "estimate": estimate,
                "messages": state.messages,
                "expired": count_expired(queue),
                "failed": failed.get(state.name, 0) if failed is not None else None,
                "oldest_time_sent": sent.isoformat().replace("+00:00", "Z") if sent else None,
                "oldest_age_seconds": state.oldest_age_seconds,
            }
        )
    return rows


def _failed_by_queue(transport: Transport) -> dict[str, int] | None:
    """How many messages of the transport's error queue failed in each queue (None: no error queue)."""
    from ..transport.failed import failed_groups

    errors = transport.queue(transport.error_queue or "error", error_queue=None)
    if not errors.exists():
        return None
    counts: dict[str, int] = {}
    for group in failed_groups(errors):
        try:
            name = str(transport.queue(group.failed_queue or "", error_queue=None).address)
        except Exception:  # no FailedQ, or one that is not a queue address
            continue
        counts[name] = counts.get(name, 0) + group.count
    return counts


def _failed_cell(failed: int | None) -> Text:
    return Text("—" if failed is None else f"{failed:,}", style="red" if failed else "")


def _stats_table(rows: list[dict[str, Any]], where: str, checked: str | None = None) -> Table:
    title = f"Queues in {where}" + (f" · {checked}" if checked else "")
    table = Table(title=Text(title), title_justify="left")
    for column, justify in (
        ("queue", "left"),
        ("depth (estimate)", "right"),
        ("messages", "right"),
        ("expired", "right"),
        ("failed", "right"),
        ("oldest", "right"),
    ):
        table.add_column(column, justify=justify, no_wrap=column == "queue")  # type: ignore[arg-type]
    for row in rows:
        table.add_row(
            Text(row["queue"]),
            Text("—" if row["estimate"] is None else f"~{row['estimate']:,}"),
            Text(f"{row['messages']:,}"),
            Text(f"{row['expired']:,}", style="yellow" if row["expired"] else ""),
            _failed_cell(row["failed"]),
            Text(human_age(row["oldest_age_seconds"])),
        )
    return table


def stats(args: argparse.Namespace, out: Console, err: Console) -> int:
    from ..transport.browse import queue_tables

    with connected(args) as transport:
        if args.queues:
            queues = [existing_queue(transport, name) for name in dict.fromkeys(args.queues)]
        else:
            queues = [transport.queue(address) for address in queue_tables(transport, args.schema)]
        where = transport.description
        if args.watch:
            return _watch(args, out, transport, queues, where)
        rows = _stats_rows(transport, queues)
    if args.json:
        for row in rows:
            sys.stdout.write(json_line(row) + "\n")
        sys.stdout.flush()
        return Exit.OK
    if not rows:
        note(err, f"no queue tables found in {where}" + (f" schema {args.schema}" if args.schema else ""))
        return Exit.OK
    out.print(_stats_table(rows, where))
    return Exit.OK


def _watch(
    args: argparse.Namespace, out: Console, transport: Transport, queues: list[Any], where: str
) -> int:
    """Read the queues again every ``--interval`` seconds until Ctrl-C (exit 0): a live table on a
    terminal, with ``--json`` one line per queue per round, stamped with the round's time."""
    if args.interval <= 0:
        raise CliError(Exit.USAGE, f"--interval must be positive, not {args.interval}")
    try:
        if args.json:
            while True:
                checked = now().isoformat().replace("+00:00", "Z")
                for row in _stats_rows(transport, queues):
                    sys.stdout.write(json_line({"checked_at": checked, **row}) + "\n")
                sys.stdout.flush()
                time.sleep(args.interval)
        with Live(_stats_table([], where), console=out, refresh_per_second=4) as live:
            while True:
                rows = _stats_rows(transport, queues)
                live.update(_stats_table(rows, where, now().strftime("%H:%M:%S UTC")))
                time.sleep(args.interval)
    except KeyboardInterrupt:
        if not args.json and not out.is_terminal:
            out.line()  # Live leaves its last frame without a line end off a terminal
        return Exit.OK
