"""The subcommands that act on the queue tables themselves: create and drop them, print their DDL
(script) and check them against what the transport expects (inspect)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from rich.console import Console
from rich.text import Text

from ._support import CliError, Exit, connected, existing_queue, json_line, note, open_database, print_json


def table_options(args: argparse.Namespace) -> Any:
    """The table shape the command line asks for (``--layout``, ``--varchar-headers``, ``--body-string``)."""
    from ..transport import TableOptions

    return TableOptions(
        layout=getattr(args, "layout", "clustered"),
        unicode_headers=not getattr(args, "varchar_headers", False),
        body_string=getattr(args, "body_string", False),
    )


# ---- create / drop -------------------------------------------------------------------------------------
def create(args: argparse.Namespace, out: Console, err: Console) -> int:
    options = table_options(args)
    created, existing = [], []
    with connected(args, may_create_file=True) as transport:
        for name in dict.fromkeys(args.queues):
            queue = transport.queue(name)
            made = queue.create(options, add_missing_indexes=args.add_missing_indexes)
            (created if made else existing).append(str(queue.address))
        if args.json:
            print_json({"created": created, "existing": existing})
        else:
            for name in created:
                note(out, f"created {name}", "green")
            for name in existing:
                note(out, f"{name} already exists")
    return Exit.OK


def drop(args: argparse.Namespace, out: Console, err: Console) -> int:
    with connected(args) as transport:
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


# ---- script / inspect ----------------------------------------------------------------------------------
def script(args: argparse.Namespace, out: Console, err: Console) -> int:
    from ..dialects import get_dialect
    from ..transport import QueueAddress
    from ._support import database_choice

    options = table_options(args)
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
    options = table_options(args)
    report: dict[str, list[dict[str, str]]] = {}
    queue_logger = logging.getLogger("airflow_provider_sqlqueue.transport.queue")
    with connected(args) as transport:
        for name in dict.fromkeys(args.queues):
            queue = existing_queue(transport, name)
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
