"""``sqlqueue consume``: the message pump in the foreground with a live status line (processed, failed,
rate, depth); Ctrl-C stops it gracefully: no new receives, running handlers finish (a second Ctrl-C
abandons them, and their messages roll back)."""

from __future__ import annotations

import argparse
import os
import sys
import time

from rich.console import Console
from rich.live import Live
from rich.text import Text

from ._support import CliError, Exit, note, open_database, probe


def _status(stats: object, depth: int | None, state: str) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")  # one line, however narrow the terminal
    text.append(f"{state} ", style="bold cyan")
    text.append(f"processed {stats.processed:,}", style="green")  # type: ignore[attr-defined]
    text.append(" · ")
    failed = stats.failed  # type: ignore[attr-defined]
    text.append(f"failed {failed:,}", style="red" if failed else "")
    text.append(f" · retried {stats.retried:,} · {stats.rate:,.1f}/s · depth ")  # type: ignore[attr-defined]
    text.append("?" if depth is None else f"~{depth:,}")
    text.append(f" · in flight {stats.in_flight}")  # type: ignore[attr-defined]
    return text


def consume(args: argparse.Namespace, out: Console, console: Console) -> int:
    from ..transport import ConfigurationError, MessagePump, PumpSettings, SqlQueueError

    if len(args.target) == 2:
        if args.url or args.conn_id:
            raise CliError(
                Exit.USAGE, "give the database either as the first argument or as --url / --conn-id"
            )
        args.url, queue_name = args.target
    elif len(args.target) == 1:
        queue_name = args.target[0]
    else:
        raise CliError(Exit.USAGE, "consume takes [URL] QUEUE")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # handlers next to where the command runs, as with python -m
    transport = open_database(args)
    if args.error_queue is not None:
        transport.error_queue = args.error_queue
    try:
        probe(transport)
        queue = transport.queue(queue_name)
        try:
            settings = PumpSettings(
                max_concurrency=args.concurrency,
                batch_size=args.batch_size,
                strategy=args.strategy,
                transaction_mode=args.transaction_mode,
                immediate_retries=args.immediate_retries,
                idle_delay=args.idle_delay,
                wake_up=args.wake_up,
                stop_timeout=args.stop_timeout,
            )
            pump = MessagePump(queue, args.handler, settings, audit_queue=args.audit_queue)
        except ConfigurationError as error:
            raise CliError(Exit.USAGE, str(error)) from None
        depth: int | None = queue.peek_estimate()
        checked = time.monotonic()
        pump.start(max_messages=args.max_messages, until_empty=args.until_empty)
        state = "consuming"
        with Live(_status(pump.stats(), depth, state), console=console, refresh_per_second=4) as live:
            try:
                while not pump.wait(0.25):
                    if time.monotonic() - checked >= 1.0:
                        checked = time.monotonic()
                        try:
                            depth = queue.peek_estimate()
                        except SqlQueueError:
                            depth = None
                    live.update(_status(pump.stats(), depth, state))
            except KeyboardInterrupt:
                state = "stopping"
                live.update(_status(pump.stats(), depth, state))
            try:
                clean = pump.stop()
            except KeyboardInterrupt:
                clean = pump.stop(0)  # a second Ctrl-C: do not wait; running handlers roll back
            try:
                depth = queue.peek_estimate()
            except SqlQueueError:
                depth = None
            live.update(_status(pump.stats(), depth, "stopped"))
        if not console.is_terminal:
            console.line()  # Live leaves its last frame without a line end off a terminal
        stats = pump.stats()
        note(
            console,
            f"{queue_name}: processed {stats.processed:,}, failed {stats.failed:,}, retried {stats.retried:,}"
            f" in {stats.elapsed:.1f} s ({pump.stop_reason})"
            + ("" if clean else "; handlers still running were abandoned and roll back"),
        )
    finally:
        transport.close()
    return Exit.OK
