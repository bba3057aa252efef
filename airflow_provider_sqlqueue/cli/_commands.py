"""The subcommands that manage and look into queues: create, drop, send, receive, peek, depth, stats,
purge-expired, script and inspect. Each takes the parsed arguments and two consoles (data, diagnostics)
and returns an exit code; expected failures raise :class:`CliError`."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ._support import (
    CliError,
    Exit,
    human_age,
    json_line,
    message_record,
    note,
    now,
    open_database,
    output_file,
    pretty_message,
    probe,
    silence_stdout,
    write_durably,
)

READ_CHUNK = 1 << 20


# ---- shared --------------------------------------------------------------------------------------------
def _options(args: argparse.Namespace) -> Any:
    from ..transport import TableOptions

    return TableOptions(
        layout=getattr(args, "layout", "clustered"),
        unicode_headers=not getattr(args, "varchar_headers", False),
        body_string=getattr(args, "body_string", False),
    )


@contextmanager
def _connected(args: argparse.Namespace, *, may_create_file: bool = False) -> Iterator[Any]:
    transport = open_database(args, may_create_file=may_create_file)
    try:
        probe(transport)
        yield transport
    finally:
        transport.close()


def _existing(transport: Any, name: str) -> Any:
    queue = transport.queue(name)
    if not queue.exists():
        raise CliError(
            Exit.QUEUE_MISSING,
            f"queue {queue.address} does not exist in {transport.description}",
            f"create it with: sqlqueue create {name} (needs DDL rights), or check --schema",
        )
    return queue


def _progress(console: Console) -> Progress:
    """A progress bar on stderr, drawn only on a terminal and cleared when done."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )


def _print_json(record: object) -> None:
    sys.stdout.write(json_line(record) + "\n")
    sys.stdout.flush()


# ---- create / drop -------------------------------------------------------------------------------------
def create(args: argparse.Namespace, out: Console, err: Console) -> int:
    options = _options(args)
    created, existing = [], []
    with _connected(args, may_create_file=True) as transport:
        for name in dict.fromkeys(args.queues):
            queue = transport.queue(name)
            (created if queue.create(options) else existing).append(str(queue.address))
        if args.json:
            _print_json({"created": created, "existing": existing})
        else:
            for name in created:
                note(out, f"created {name}", "green")
            for name in existing:
                note(out, f"{name} already exists")
    return Exit.OK


def drop(args: argparse.Namespace, out: Console, err: Console) -> int:
    with _connected(args) as transport:
        queues = []
        for name in dict.fromkeys(args.queues):
            queue = transport.queue(name)
            if queue.exists():
                queues.append(queue)
            elif not args.if_exists:
                raise CliError(
                    Exit.QUEUE_MISSING,
                    f"queue {queue.address} does not exist in {transport.description}",
                    "nothing was dropped; add --if-exists to skip missing queues",
                )
            else:
                note(err, f"{queue.address} does not exist; skipped")
        counts = {queue.address: queue.count() for queue in queues}
        if queues and not args.yes:
            listing = ", ".join(f"{queue.address} ({counts[queue.address]:,} messages)" for queue in queues)
            if not sys.stdin.isatty():
                raise CliError(
                    Exit.USAGE,
                    f"refusing to drop {listing} without --yes",
                    "dropping deletes every message in the table; add --yes to confirm",
                )
            err.print(Text(f"Drop {listing} from {transport.description}? [y/N] ", style="bold"), end="")
            try:
                answer = input()
            except EOFError:
                answer = ""
            if answer.strip().lower() not in ("y", "yes"):
                note(err, "nothing was dropped")
                return Exit.ERROR
        for queue in queues:
            queue.drop()
            note(out, f"dropped {queue.address} ({counts[queue.address]:,} messages)", "yellow")
    return Exit.OK


# ---- send ----------------------------------------------------------------------------------------------
def _read_body(args: argparse.Namespace) -> bytes:
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
        body = _read_body(args)
        total = args.count or 1
        bodies = (body for _ in range(total))
    ids: list[str] = []
    sent = 0
    started = time.monotonic()
    with _connected(args) as transport:
        queue = _existing(transport, args.queue)
        single = total == 1
        if single:
            message_id = queue.send(next(bodies), headers, ttbr)
            ids.append(str(message_id))
            sent = 1
        else:
            with _progress(err) as progress:
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
            _print_json(record)
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


# ---- receive / peek ------------------------------------------------------------------------------------
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
    with _connected(args) as transport, output_file(args.output) as handle:
        queue = _existing(transport, args.queue)
        name = str(queue.address)
        with _progress(err) as progress:
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

    with _connected(args) as transport, output_file(args.output) as handle:
        queue = _existing(transport, args.queue)
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


# ---- depth / stats -------------------------------------------------------------------------------------
def depth(args: argparse.Namespace, out: Console, err: Console) -> int:
    rows = []
    with _connected(args) as transport:
        for name in dict.fromkeys(args.queues):
            queue = _existing(transport, name)
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
    with _connected(args) as transport:
        if args.queues:
            queues = [_existing(transport, name) for name in dict.fromkeys(args.queues)]
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


# ---- purge-expired -------------------------------------------------------------------------------------
def purge_expired(args: argparse.Namespace, out: Console, err: Console) -> int:
    from ..transport.browse import count_expired

    results = []
    with _connected(args) as transport:
        queues = [_existing(transport, name) for name in dict.fromkeys(args.queues)]
        with _progress(err) as progress:
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


# ---- script / inspect ----------------------------------------------------------------------------------
def script(args: argparse.Namespace, out: Console, err: Console) -> int:
    from ..dialects import get_dialect
    from ..transport import QueueAddress
    from ._support import database_choice

    options = _options(args)
    if args.engine:
        if database_choice(args) is not None and (args.url or args.conn_id):
            raise CliError(Exit.USAGE, "give either --engine or a database (--url / --conn-id), not both")
        dialect = get_dialect(args.engine)

        def render(name: str) -> tuple[str, str]:
            address = dialect.resolve(QueueAddress.parse(name), args.schema)
            statements = [dialect.create_table(address, options)]
            statements += [index.create for index in dialect.indexes(address, options)]
            return str(address), "".join(f"{dialect.display_sql(s)};\n" for s in statements)

        engine = dialect.display_name
        parts = [render(name) for name in dict.fromkeys(args.queues)]
    else:
        if database_choice(args) is None:
            raise CliError(
                Exit.USAGE,
                "script needs --engine sqlserver|postgresql|sqlite (no database is used) or a database",
            )
        transport = open_database(args, may_create_file=True)
        try:
            engine = transport.dialect.display_name
            parts = []
            for name in dict.fromkeys(args.queues):
                queue = transport.queue(name)
                parts.append((str(queue.address), queue.create_script(options)))
        finally:
            transport.close()
    described = f"layout {options.layout}" if engine == "SQL Server" else ""
    lines = []
    for address, ddl in parts:
        flags = ", ".join(
            item
            for item in (
                described,
                "varchar Headers" if not options.unicode_headers and engine == "SQL Server" else "",
                "BodyString column" if options.body_string else "",
            )
            if item
        )
        lines.append(f"-- queue {address} ({engine}{', ' + flags if flags else ''}); made by sqlqueue script")
        lines.append(ddl)
    sys.stdout.write("\n".join(lines))
    sys.stdout.flush()
    return Exit.OK


def inspect(args: argparse.Namespace, out: Console, err: Console) -> int:
    options = _options(args)
    report: dict[str, list[dict[str, str]]] = {}
    queue_logger = logging.getLogger("airflow_provider_sqlqueue.transport.queue")
    with _connected(args) as transport:
        for name in dict.fromkeys(args.queues):
            queue = _existing(transport, name)
            previous = queue_logger.disabled
            queue_logger.disabled = True  # the findings are printed below, not logged twice
            try:
                findings = queue.inspect(options)
            finally:
                queue_logger.disabled = previous
            report[str(queue.address)] = [
                {"code": f.code, "message": f.message, "fix": f.fix} for f in findings
            ]
    if args.json:
        for name, findings in report.items():
            sys.stdout.write(json_line({"queue": name, "ok": not findings, "findings": findings}) + "\n")
        sys.stdout.flush()
    else:
        for name, findings in report.items():
            if not findings:
                note(out, f"{name}: ok", "green")
                continue
            note(out, f"{name}: {len(findings)} finding(s)", "bold yellow")
            for finding in findings:
                note(out, f"  [{finding['code']}] {finding['message']}")
                note(out, f"    fix: {finding['fix']}", "cyan")
    return Exit.FINDINGS if any(report.values()) else Exit.OK
