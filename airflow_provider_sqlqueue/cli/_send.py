"""The send subcommand: one body (argument, file or stdin), --count copies of it, or one message per line,
sent in batches with a progress bar."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from typing import Any

from rich.console import Console

from ._support import (
    CliError,
    Exit,
    connected,
    duration,
    existing_queue,
    header,
    note,
    print_json,
    progress_bar,
    write_durably,
)


def add_message_arguments(parser: argparse.ArgumentParser, discarded: str) -> None:
    """The arguments that make a message, as ``send`` and ``publish`` take them: BODY, --file, --header,
    --content-type and --ttbr (whose help starts with ``discarded``, what happens to a message too late)."""
    parser.add_argument("body", nargs="?", metavar="BODY", help="the body as text; '-' or absent: read stdin")
    parser.add_argument("--file", "-f", metavar="PATH", help="read the body from a file ('-' for stdin)")
    parser.add_argument(
        "--header",
        "-H",
        type=header,
        action="append",
        metavar="KEY=VALUE",
        help="a header (repeatable), e.g. -H NServiceBus.ContentType=application/json",
    )
    parser.add_argument(
        "--content-type",
        metavar="TYPE",
        help="shorthand for -H NServiceBus.ContentType=TYPE, e.g. application/json",
    )
    parser.add_argument(
        "--ttbr",
        "--time-to-be-received",
        dest="time_to_be_received",
        type=duration,
        metavar="DURATION",
        help=f"{discarded} if not received in time: 90, 90s, 15m, 2h, 1d, 1h30m, HH:MM:SS",
    )


def read_body(args: argparse.Namespace) -> bytes:
    if args.body is not None and args.file is not None:
        raise CliError(Exit.USAGE, "give the body either as an argument or with --file, not both")
    if args.body is not None and args.body != "-":
        return args.body.encode("utf-8")
    path = args.file if args.file is not None else "-"
    if path == "-":
        if args.body is None and args.file is None and sys.stdin.isatty():
            raise CliError(
                Exit.USAGE,
                "no message body: give it as an argument, with --file PATH, or pipe it on stdin",
            )
        return sys.stdin.buffer.read()
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as error:
        raise CliError(Exit.USAGE, f"cannot read {path}: {error.strerror}") from None


def _input_lines(args: argparse.Namespace) -> Iterator[bytes]:
    """``--lines``: each line of the file or stdin is one message body (empty lines skipped)."""
    if args.body is not None and args.body != "-":
        raise CliError(Exit.USAGE, "--lines reads a file or stdin; give --file PATH or pipe the lines")
    path = args.file or "-"
    if path == "-":
        if sys.stdin.isatty():
            raise CliError(Exit.USAGE, "--lines: pipe the lines on stdin or give --file PATH")
        handle = sys.stdin.buffer
        for line in handle:
            line = line.rstrip(b"\r\n")
            if line:
                yield line
        return
    try:
        with open(path, "rb") as file:
            for line in file:
                line = line.rstrip(b"\r\n")
                if line:
                    yield line
    except OSError as error:
        raise CliError(Exit.USAGE, f"cannot read {path}: {error.strerror}") from None


def send(args: argparse.Namespace, out: Console, err: Console) -> int:
    from ..transport import OutgoingMessage

    if args.lines and args.count is not None:
        raise CliError(Exit.USAGE, "--lines sends one message per line; it cannot be combined with --count")
    headers = {"NServiceBus.ContentType": args.content_type} if args.content_type else {}
    headers.update(args.header or [])  # an explicit -H wins
    ttbr = args.time_to_be_received
    bodies: Any
    total: int | None
    if args.lines:
        bodies, total = _input_lines(args), None
    else:
        body = read_body(args)
        total = args.count or 1
        bodies = (body for _ in range(total))
    ids: list[str] = []
    sent = 0
    started = time.monotonic()
    with connected(args) as transport:
        queue = existing_queue(transport, args.queue)
        single = total == 1
        if single:
            message_id = queue.send(next(bodies), headers, ttbr)
            ids.append(str(message_id))
            sent = 1
        else:
            with progress_bar(err) as progress:
                task = progress.add_task(f"sending to {queue.address}", total=total)
                batch: list[Any] = []
                try:
                    for body in bodies:
                        batch.append(OutgoingMessage(body, headers, ttbr))
                        if len(batch) >= args.batch_size:
                            sent += _send_batch(queue, batch, ids, args.ids)
                            progress.update(task, advance=len(batch))
                            batch = []
                    if batch:
                        sent += _send_batch(queue, batch, ids, args.ids)
                        progress.update(task, advance=len(batch))
                except KeyboardInterrupt:
                    note(err, f"interrupted: {sent:,} message(s) had been sent to {queue.address}", "yellow")
                    raise
        elapsed = time.monotonic() - started
        if args.json:
            record: dict[str, Any] = {"queue": str(queue.address), "sent": sent, "seconds": round(elapsed, 3)}
            if single or args.ids:
                record["ids"] = ids
            print_json(record)
        else:
            if single or args.ids:
                write_durably(None, ids)
            if not single:
                rate = f" ({sent / elapsed:,.0f}/s)" if elapsed > 0 and sent >= 1000 else ""
                note(err, f"sent {sent:,} message(s) to {queue.address} in {elapsed:.1f} s{rate}", "green")
    return Exit.OK


def _send_batch(queue: Any, batch: list[Any], ids: list[str], keep: bool) -> int:
    sent = queue.send_batch(batch)
    if keep:
        ids.extend(str(message_id) for message_id in sent)
    return len(sent)
