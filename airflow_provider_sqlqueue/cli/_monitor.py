"""The subcommands that watch queues without touching them: depth (estimated or exact message counts)
and stats (counts, expired messages and the oldest message's age, for one schema or named queues)."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..transport.overview import human_age
from ._support import Exit, connected, existing_queue, json_line, note, now


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


def stats(args: argparse.Namespace, out: Console, err: Console) -> int:
    from ..transport import PermissionDenied
    from ..transport.browse import browse, count_expired, queue_tables

    rows = []
    with connected(args) as transport:
        if args.queues:
            queues = [existing_queue(transport, name) for name in dict.fromkeys(args.queues)]
        else:
            queues = [transport.queue(address) for address in queue_tables(transport, args.schema)]
        checked_at = now()
        for queue in queues:
            oldest = browse(queue, 1)
            sent = oldest[0].time_sent if oldest else None
            try:
                estimate: int | None = queue.peek_estimate()
            except PermissionDenied:  # a SELECT-only monitoring role (PostgreSQL row locks need more)
                estimate = None
            rows.append(
                {
                    "queue": str(queue.address),
                    "estimate": estimate,
                    "messages": queue.count(),
                    "expired": count_expired(queue),
                    "oldest_time_sent": sent.isoformat().replace("+00:00", "Z") if sent else None,
                    "oldest_age_seconds": round((checked_at - sent).total_seconds(), 3) if sent else None,
                }
            )
        where = transport.description
    if args.json:
        for row in rows:
            sys.stdout.write(json_line(row) + "\n")
        sys.stdout.flush()
        return Exit.OK
    if not rows:
        note(err, f"no queue tables found in {where}" + (f" schema {args.schema}" if args.schema else ""))
        return Exit.OK
    table = Table(title=Text(f"Queues in {where}"), title_justify="left")
    for column, justify in (
        ("queue", "left"),
        ("depth (estimate)", "right"),
        ("messages", "right"),
        ("expired", "right"),
        ("oldest", "right"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(
            Text(row["queue"]),
            Text("—" if row["estimate"] is None else f"~{row['estimate']:,}"),
            Text(f"{row['messages']:,}"),
            Text(f"{row['expired']:,}", style="yellow" if row["expired"] else ""),
            Text(human_age(row["oldest_age_seconds"])),
        )
    out.print(table)
    return Exit.OK
