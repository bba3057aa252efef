"""The subcommands that read messages out: receive (removes them, only after the output is written) and
peek (shows the oldest, removes nothing), as pretty text, JSON lines or bodies, to stdout or a file."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from typing import IO, Any

from rich.console import Console

from ._support import (
    CliError,
    Exit,
    connected,
    existing_queue,
    json_line,
    message_record,
    note,
    output_file,
    pretty_message,
    progress_bar,
    silence_stdout,
    write_durably,
)


def _format(args: argparse.Namespace, queue_name: str, messages: Any) -> Iterator[str]:
    for message in messages:
        if args.json:
            yield json_line(message_record(queue_name, message))
        elif args.body_only:
            yield message.body.decode("utf-8", errors="replace")


def _emit(
    args: argparse.Namespace, out: Console, handle: IO[str] | None, queue_name: str, messages: Any, index: int
) -> None:
    if args.json or args.body_only or handle is not None:
        if not (args.json or args.body_only):
            args = argparse.Namespace(**{**vars(args), "json": True})  # files get JSON lines
        write_durably(handle, _format(args, queue_name, messages))
        return
    try:
        for offset, message in enumerate(messages):
            out.print(pretty_message(index + offset, message), end="")
    except SystemExit:  # rich's answer to a closed stdout (| head): treat it as the broken pipe it is
        raise BrokenPipeError from None
    sys.stdout.flush()


def receive(args: argparse.Namespace, out: Console, err: Console) -> int:
    got = expired = poisoned = 0
    deadline = time.monotonic() + (args.wait.total_seconds() if args.wait else 0.0)
    with connected(args) as transport, output_file(args.output) as handle:
        queue = existing_queue(transport, args.queue)
        name = str(queue.address)
        with progress_bar(err) as progress:
            task = progress.add_task(f"receiving from {name}", total=args.count)
            while got < args.count:
                wanted = min(args.count - got, args.batch_size)
                try:
                    with queue.receive(wanted) as batch:
                        # Written (and for files, fsynced) before the block ends: the DELETE commits only
                        # after the messages are stored; a failed write rolls it back.
                        _emit(args, out, handle, name, batch, got + 1)
                except BrokenPipeError:
                    silence_stdout()
                    raise CliError(
                        Exit.ERROR, "the output was closed; the messages of the last batch were not removed"
                    ) from None
                except OSError as error:
                    target = args.output or "stdout"
                    raise CliError(
                        Exit.ERROR,
                        f"cannot write {target}: {error.strerror or error}; the messages of the last batch "
                        "were not removed",
                    ) from None
                got += len(batch)
                expired += batch.expired
                poisoned += batch.poisoned
                progress.update(task, advance=len(batch))
                if len(batch) + batch.expired + batch.poisoned == 0:
                    if got == 0 and time.monotonic() < deadline:
                        time.sleep(min(0.25, max(deadline - time.monotonic(), 0)))
                        continue
                    break
        if expired:
            note(err, f"{expired:,} expired message(s) were deleted and not shown", "yellow")
        if poisoned:
            note(err, f"{poisoned:,} message(s) with unreadable headers were moved to the error queue", "red")
        if handle is not None:
            note(err, f"received {got:,} message(s) from {name} into {args.output}")
        elif not (args.json or args.body_only):
            note(err, f"received {got:,} message(s) from {name}")
    if got == 0 and args.fail_on_empty:
        return Exit.EMPTY
    return Exit.OK


def peek(args: argparse.Namespace, out: Console, err: Console) -> int:
    from ..transport.browse import browse

    with connected(args) as transport, output_file(args.output) as handle:
        queue = existing_queue(transport, args.queue)
        name = str(queue.address)
        messages = browse(queue, args.count)
        try:
            _emit(args, out, handle, name, messages, 1)
        except BrokenPipeError:
            silence_stdout()
            return Exit.OK  # e.g. | head: nothing was taken, so nothing is lost
        if not (args.json or args.body_only) and handle is None:
            note(err, f"{name}: showed the {len(messages):,} oldest message(s); nothing was removed")
    if not messages and args.fail_on_empty:
        return Exit.EMPTY
    return Exit.OK
