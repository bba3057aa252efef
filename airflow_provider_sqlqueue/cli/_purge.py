"""The purge-expired subcommand: delete the messages whose time to be received has passed, in batches,
for a bounded time if asked."""

from __future__ import annotations

import argparse
import sys
import time

from rich.console import Console

from ._support import Exit, connected, existing_queue, json_line, note, progress_bar


def purge_expired(args: argparse.Namespace, out: Console, err: Console) -> int:
    from ..transport.browse import count_expired

    results = []
    with connected(args) as transport:
        queues = [existing_queue(transport, name) for name in dict.fromkeys(args.queues)]
        with progress_bar(err) as progress:
            for queue in queues:
                name = str(queue.address)
                expected = count_expired(queue)
                task = progress.add_task(f"purging {name}", total=max(expected, 1))
                started = time.monotonic()
                purged = batches = 0
                while True:
                    deleted = queue.purge_expired(args.batch_size, max_batches=1)
                    purged += deleted
                    batches += 1
                    progress.update(task, completed=min(purged, max(expected, 1)))
                    if deleted < args.batch_size:
                        break
                    if args.max_seconds and time.monotonic() - started >= args.max_seconds.total_seconds():
                        break
                progress.update(task, completed=max(expected, 1))
                results.append(
                    {
                        "queue": name,
                        "purged": purged,
                        "batches": batches,
                        "seconds": round(time.monotonic() - started, 3),
                    }
                )
    if args.json:
        for row in results:
            sys.stdout.write(json_line(row) + "\n")
        sys.stdout.flush()
        return Exit.OK
    for row in results:
        note(
            out,
            f"{row['queue']}: purged {row['purged']:,} expired message(s) in {row['batches']} batch(es) "
            f"({row['seconds']:.1f} s)",
        )
    if len(results) > 1:
        note(out, f"total: {sum(row['purged'] for row in results):,} expired message(s) purged", "bold")
    return Exit.OK
