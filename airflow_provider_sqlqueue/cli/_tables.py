"""The subcommands that act on the queue tables themselves: create and drop them, print their DDL
(script) and check them against what the transport expects (inspect)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from typing import Any

from rich.console import Console
from rich.text import Text

from ._support import CliError, Exit, connected, existing_queue, json_line, note, open_database, print_json


def table_options(args: argparse.Namespace) -> Any:
    """The table shape the command line asks for (``--layout``, ``--column-layout``, ``--varchar-headers``,
    ``--body-string``, ``--storage-parameter``, ``--no-storage-parameters``)."""
    from ..transport import TableOptions

    storage: dict[str, str] | None = None
    if getattr(args, "no_storage_parameters", False):
        storage = {}
    elif getattr(args, "storage_parameter", None):
        storage = {}
        for item in args.storage_parameter:
            name, equals, value = item.partition("=")
            if not equals:
                raise CliError(Exit.USAGE, f"--storage-parameter takes NAME=VALUE, not {item!r}")
            storage[name.strip()] = value.strip()
    try:
        return TableOptions(
            layout=getattr(args, "layout", "clustered"),
            unicode_headers=not getattr(args, "varchar_headers", False),
            body_string=getattr(args, "body_string", False),
            storage_parameters=storage,
            column_layout=getattr(args, "column_layout", "sqlserver-transport"),
        )
    except ValueError as error:
        raise CliError(Exit.USAGE, str(error)) from None


def _is_error_queue(address: Any, error_address: Any, explicit: bool) -> bool:
    """Whether ``address`` is the error queue, whose archive table (transport/archive.py) is made beside
    it: the queue ``--error-queue`` names; without it, the connection's error queue (else ``error``) in
    any schema the command names."""
    if address == error_address:
        return True
    return not explicit and address.table == error_address.table and address.catalog == error_address.catalog


def _needs_tables(args: argparse.Namespace, command: str) -> None:
    if not args.queues and not args.subscriptions and not args.depth_history:
        raise CliError(Exit.USAGE, f"{command} needs queue names, --subscriptions, --depth-history, or some")


def _depth_history_addresses(resolve: Any, queues: list[Any], schema: str | None) -> list[Any]:
    """The depth history tables ``--depth-history`` makes: one in each schema of the named queues (resolved
    addresses), or in ``--schema`` (the default schema) when none is named."""
    from ..transport import QueueAddress
    from ..transport.depth_samples import DEPTH_SAMPLES_TABLE

    places = [(queue.schema, queue.catalog) for queue in queues] or [(schema, None)]
    return list(
        dict.fromkeys(resolve(QueueAddress(DEPTH_SAMPLES_TABLE, s, c)) for s, c in dict.fromkeys(places))
    )


# ---- create / drop -------------------------------------------------------------------------------------
def create(args: argparse.Namespace, out: Console, err: Console) -> int:
    from ..transport.archive import ErrorArchive
    from ..transport.depth_samples import DepthSampleTable

    _needs_tables(args, "create")
    options = table_options(args)
    created, existing = [], []
    with connected(args, may_create_file=True) as transport:
        error_address = transport.queue(args.error_queue or transport.error_queue or "error").address
        for name in dict.fromkeys(args.queues):
            queue = transport.queue(name)
            made = queue.create(options, add_missing_indexes=args.add_missing_indexes)
            (created if made else existing).append(str(queue.address))
            if _is_error_queue(queue.address, error_address, bool(args.error_queue)):
                archive = ErrorArchive.of(queue)
                (created if archive.create() else existing).append(str(archive.address))
        if args.subscriptions:
            store = transport.subscriptions
            (created if store.create() else existing).append(str(store.address))
        if args.depth_history:
            queues = [transport.queue(name).address for name in dict.fromkeys(args.queues)]
            for address in _depth_history_addresses(transport.resolve, queues, None):
                table = DepthSampleTable(transport, address)
                (created if table.create() else existing).append(str(address))
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
    from ..transport.archive import ErrorArchive, archive_address, archive_script
    from ..transport.depth_samples import DepthSampleTable
    from ..transport.queue.provisioning import table_script
    from ._support import database_choice

    _needs_tables(args, "script")
    options = table_options(args)
    subscriptions: tuple[str, str] | None = None
    histories: list[tuple[str, str]] = []
    if args.engine:
        if database_choice(args) is not None and (args.url or args.conn_id):
            raise CliError(Exit.USAGE, "give either --engine or a database (--url / --conn-id), not both")
        dialect = get_dialect(args.engine)
        error_address = dialect.resolve(QueueAddress.parse(args.error_queue or "error"), args.schema)

        def render(name: str) -> tuple[str, str]:
            address = dialect.resolve(QueueAddress.parse(name), args.schema)
            ddl = table_script(dialect, address, options)  # the script create_script() prints
            if _is_error_queue(address, error_address, bool(args.error_queue)):
                ddl += _archive_comment(archive_address(dialect, address)) + archive_script(dialect, address)
            return str(address), ddl

        engine = dialect.display_name
        parts = [render(name) for name in dict.fromkeys(args.queues)]
        if args.subscriptions:
            address = dialect.resolve(QueueAddress("SubscriptionRouting"), args.schema)
            subscriptions = (
                str(address),
                f"{dialect.display_sql(dialect.create_subscription_table(address))};\n",
            )
        if args.depth_history:
            named = [
                dialect.resolve(QueueAddress.parse(name), args.schema) for name in dict.fromkeys(args.queues)
            ]
            for address in _depth_history_addresses(
                lambda a: dialect.resolve(a, args.schema), named, args.schema
            ):
                statement = dialect.sql("create_depth_samples_table", address)
                histories.append((str(address), f"{dialect.display_sql(statement)};\n"))
    else:
        if database_choice(args) is None:
            raise CliError(
                Exit.USAGE,
                "script needs --engine sqlserver|postgresql|sqlite (no database is used) or a database",
            )
        transport = open_database(args)  # a script creates nothing, not even a SQLite file
        try:
            engine = transport.dialect.display_name
            parts = []
            error_address = transport.queue(args.error_queue or transport.error_queue or "error").address
            for name in dict.fromkeys(args.queues):
                queue = transport.queue(name)
                ddl = queue.create_script(options)
                if _is_error_queue(queue.address, error_address, bool(args.error_queue)):
                    archive = ErrorArchive.of(queue)
                    ddl += _archive_comment(archive.address) + archive.create_script()
                parts.append((str(queue.address), ddl))
            if args.subscriptions:
                store = transport.subscriptions
                subscriptions = (str(store.address), store.create_script())
            if args.depth_history:
                named = [transport.queue(name).address for name in dict.fromkeys(args.queues)]
                for address in _depth_history_addresses(transport.resolve, named, None):
                    histories.append((str(address), DepthSampleTable(transport, address).create_script()))
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
                f"{options.column_layout} columns" if options.column_layout != "sqlserver-transport" else "",
            )
            if item
        )
        lines.append(f"-- queue {address} ({engine}{', ' + flags if flags else ''}); made by sqlqueue script")
        lines.append(ddl)
    if subscriptions is not None:
        address, ddl = subscriptions
        lines.append(
            f"-- subscription table {address} ({engine}), shared by every endpoint; made by sqlqueue script"
        )
        lines.append(ddl)
    for address, ddl in histories:
        lines.append(
            f"-- depth history {address} ({engine}): queue depths that triggers and pumps sample for the "
            "Queues page; made by sqlqueue script"
        )
        lines.append(ddl)
    sys.stdout.write("\n".join(lines))
    sys.stdout.flush()
    return Exit.OK


def _archive_comment(address: Any) -> str:
    return f"-- the error queue's archive {address}: where 'sqlqueue failed delete' moves messages\n"


def storage_fields(storage: Any) -> dict[str, Any]:
    """A table's storage report as JSON values (``storage_parameters`` as a name-to-value object)."""
    fields = dataclasses.asdict(storage)
    fields["storage_parameters"] = (
        None if storage.storage_parameters is None else dict(storage.storage_parameters)
    )
    for key in ("last_vacuum", "last_autovacuum"):
        fields[key] = None if fields[key] is None else fields[key].isoformat()
    fields["advice"] = list(storage.advice)
    return fields


def _storage_lines(storage: Any) -> list[tuple[str, str]]:
    """The text form of a storage report: (line, style) pairs."""
    if not storage.applicable:
        return [(f"  storage: {storage.note}", "")]

    def count(value: int | None) -> str:
        return "unknown" if value is None else f"{value:,}"

    def when(value: Any) -> str:
        return "never" if value is None else value.isoformat(timespec="seconds")

    parameters = storage.storage_parameters or ()
    lines = [
        (
            f"  storage: table {(storage.table_bytes or 0) / 2**20:,.1f} MiB, indexes "
            f"{(storage.index_bytes or 0) / 2**20:,.1f} MiB; {count(storage.live_tuples)} live rows, "
            f"{count(storage.dead_tuples)} dead; last vacuum {when(storage.last_vacuum)}, last autovacuum "
            f"{when(storage.last_autovacuum)}",
            "",
        ),
        (
            "  storage parameters: "
            + (", ".join(f"{name}={value}" for name, value in parameters) if parameters else "none"),
            "",
        ),
    ]
    if storage.note:
        lines.append((f"  note: {storage.note}", "yellow"))
    lines += [(f"  advice: {line}", "cyan") for line in storage.advice]
    return lines


def inspect(args: argparse.Namespace, out: Console, err: Console) -> int:
    options = table_options(args)
    report: dict[str, list[dict[str, str]]] = {}
    storages: dict[str, Any] = {}
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
            storages[str(queue.address)] = queue.storage()
    if args.json:
        for name, findings in report.items():
            line = {
                "queue": name,
                "ok": not findings,
                "findings": findings,
                "storage": storage_fields(storages[name]),
            }
            sys.stdout.write(json_line(line) + "\n")
        sys.stdout.flush()
    else:
        for name, findings in report.items():
            if not findings:
                note(out, f"{name}: ok", "green")
            else:
                note(out, f"{name}: {len(findings)} finding(s)", "bold yellow")
            for finding in findings:
                note(out, f"  [{finding['code']}] {finding['message']}")
                note(out, f"    fix: {finding['fix']}", "cyan")
            for text, style in _storage_lines(storages[name]):
                note(out, text, style or None)
    return Exit.FINDINGS if any(report.values()) else Exit.OK
