"""The ``sqlqueue`` command line.

``sqlqueue consume <url> <queue> --handler module:function`` runs the message pump in the foreground with a
live status line (processed, failed, rate, depth) and stops gracefully on Ctrl-C: no new receives, running
handlers finish (a second Ctrl-C abandons them, and their messages roll back).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence

from rich.console import Console
from rich.live import Live
from rich.logging import RichHandler
from rich.text import Text

from .transport import MessagePump, PumpStats, SqlQueueError, Strategy, TransactionMode, open_transport

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sqlqueue", description="Message queues in SQL tables.")
    commands = parser.add_subparsers(dest="command", required=True)
    consume = commands.add_parser(
        "consume", help="run a handler over a queue until Ctrl-C", description=__doc__.split("\n\n")[1]
    )
    consume.add_argument("url", help="database URL, e.g. sqlite:///queues.db or postgresql://u:p@host/db")
    consume.add_argument("queue", help="queue address, e.g. orders or orders@[sales]")
    consume.add_argument("--handler", required=True, help="module:function taking (message[, context])")
    consume.add_argument("-c", "--concurrency", type=int, default=1, help="messages in flight (default 1)")
    consume.add_argument("--strategy", choices=[s.value for s in Strategy], default=Strategy.MONITOR.value)
    consume.add_argument(
        "--transaction-mode",
        choices=[m.value for m in TransactionMode],
        default=TransactionMode.SENDS_ATOMIC_WITH_RECEIVE.value,
    )
    consume.add_argument("--max-messages", type=int, default=None, help="stop after this many messages")
    consume.add_argument("--until-empty", action="store_true", help="stop when the queue is empty")
    consume.add_argument("--schema", default=None, help="default schema of queue names")
    consume.add_argument("--error-queue", default="error")
    consume.add_argument("--audit-queue", default=None)
    consume.add_argument("--immediate-retries", type=int, default=5)
    consume.add_argument("--idle-delay", type=float, default=1.0, help="seconds (0.1 to 10)")
    consume.add_argument("--stop-timeout", type=float, default=30.0, help="seconds handlers get on stop")
    consume.add_argument("--log-level", default="WARNING")
    return parser


def _status(stats: PumpStats, depth: int | None, state: str) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")  # one line, however narrow the terminal
    text.append(f"{state} ", style="bold cyan")
    text.append(f"processed {stats.processed:,}", style="green")
    text.append(" · ")
    text.append(f"failed {stats.failed:,}", style="red" if stats.failed else "")
    text.append(f" · retried {stats.retried:,} · {stats.rate:,.1f}/s · depth ")
    text.append("?" if depth is None else f"~{depth:,}")
    text.append(f" · in flight {stats.in_flight}")
    return text


def _consume(args: argparse.Namespace, console: Console) -> int:
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # handlers next to where the command runs, as with python -m
    with open_transport(args.url, default_schema=args.schema, error_queue=args.error_queue) as transport:
        queue = transport.queue(args.queue)
        pump = MessagePump(
            queue,
            args.handler,
            max_concurrency=args.concurrency,
            strategy=args.strategy,
            transaction_mode=args.transaction_mode,
            immediate_retries=args.immediate_retries,
            audit_queue=args.audit_queue,
            idle_delay=args.idle_delay,
            stop_timeout=args.stop_timeout,
        )
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
            live.update(_status(pump.stats(), depth, "stopped"))
        if not console.is_terminal:
            console.line()  # Live leaves its last frame without a line end off a terminal
        stats = pump.stats()
        console.print(
            f"{args.queue}: processed {stats.processed:,}, failed {stats.failed:,}, retried {stats.retried:,}"
            f" in {stats.elapsed:.1f} s ({pump.stop_reason})"
            + ("" if clean else "; handlers still running were abandoned and roll back")
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    console = Console(stderr=True)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(message)s",
        handlers=[RichHandler(console=console, show_path=False)],
    )
    try:
        return _consume(args, console)
    except SqlQueueError as error:
        console.print(f"[red]sqlqueue: {type(error).__name__}: {error}[/red]")
        return 1


if __name__ == "__main__":
    sys.exit(main())
