"""The failed subcommands: list the error queue's messages in groups, show one, retry them to the queue
they failed in, or delete them (after a confirmation); list the archive deleted messages went to, restore
them from it, or purge it by age."""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from ._support import CliError, Exit, connected, existing_queue, iso, note, positive_int, print_json


def _selection(args: argparse.Namespace, *, require: bool) -> Any:
    from ..transport.failed import FailureFilter

    given = {
        "failed_queue": getattr(args, "queue", None),
        "exception_type": getattr(args, "exception_type", None),
        "exception_message": getattr(args, "exception_message", None),
        "group": getattr(args, "group", None),
        "ids": getattr(args, "ids", None) or None,
    }
    if require and not getattr(args, "all", False) and all(value is None for value in given.values()):
        raise CliError(
            Exit.USAGE,
            "say which failed messages: give Ids, --group, --queue, --exception-type or --exception-message",
            "or --all for every message of the error queue",
        )
    return FailureFilter(**given)


def _group_record(error_queue: str, group: Any) -> dict[str, Any]:
    return {
        "error_queue": error_queue,
        "group": group.key,
        "failed_queue": group.failed_queue,
        "exception_type": group.exception_type,
        "exception_message": group.exception_message,
        "count": group.count,
        "first_failure": iso(group.first_failure),
        "last_failure": iso(group.last_failure),
    }


def _list_messages(args: argparse.Namespace, out: Console, transport: Any) -> int:
    """One line per message (Id, group, source, exception, time), read page by page as it prints."""
    from ..transport.failed import failed_rows

    error_queue = existing_queue(transport, args.error_queue)
    selection = _selection(args, require=False)
    for row in failed_rows(error_queue):
        if not selection.matches(row, lambda name: str(transport.canonical(name))):
            continue
        record = {
            "id": row.id,
            "group": row.group_key,
            "failed_queue": row.failed_queue,
            "exception_type": row.exception_type,
            "exception_message": row.exception_message,
            "time_of_failure": iso(row.time_of_failure),
        }
        if args.json:
            print_json(record)
        else:
            out.print(
                f"{row.id}  {row.group_key}  {row.failed_queue or '(unknown)'}  "
                f"{row.exception_type or ''}: {(row.exception_message or '')[:80]}",
                markup=False,
                highlight=False,
            )
    return Exit.OK


def failed_list(args: argparse.Namespace, out: Console, err: Console) -> int:
    from ..transport.failed import failed_groups

    with connected(args) as transport:
        if args.messages:
            return _list_messages(args, out, transport)
        error_queue = existing_queue(transport, args.error_queue)
        groups = failed_groups(error_queue, _selection(args, require=False))
    name = str(error_queue.address)
    if args.json:
        for group in groups:
            print_json(_group_record(name, group))
        return Exit.OK
    if not groups:
        note(out, f"{name}: no failed messages")
        return Exit.OK
    table = Table(title=f"failed messages in {name}", title_justify="left")
    table.add_column("group", no_wrap=True, min_width=12)  # the key to copy into retry or delete
    for column in ("failed in", "exception", "message", "count", "first failure", "last failure"):
        table.add_column(column, justify="right" if column == "count" else "left", overflow="fold")
    for group in groups:
        table.add_row(
            group.key,
            group.failed_queue or "(unknown)",
            group.exception_type or "",
            (group.exception_message or "")[:120],
            f"{group.count:,}",
            iso(group.first_failure) or "",
            iso(group.last_failure) or "",
        )
    out.print(table)
    note(out, f"total: {sum(g.count for g in groups):,} failed message(s) in {len(groups)} group(s)", "bold")
    return Exit.OK


def failed_show(args: argparse.Namespace, out: Console, err: Console) -> int:
    from ..transport.browse import preview_body
    from ..transport.failed import STACK_TRACE, show_failed

    with connected(args) as transport:
        error_queue = existing_queue(transport, args.error_queue)
        messages = show_failed(error_queue, args.id)
    if not messages:
        raise CliError(
            Exit.EMPTY,
            f"no message {args.id} in {error_queue.address}",
            "list the Ids with: sqlqueue failed list --messages",
        )
    for message in messages:
        record: dict[str, Any] = {
            "error_queue": str(error_queue.address),
            "id": message.id,
            "row_version": message.row_version,
            "headers": message.headers,
            "stack_trace": message.headers.get(STACK_TRACE),
            **preview_body(message.body, args.max_body_bytes).as_dict(),
        }
        if message.header_error:
            record["header_error"] = message.header_error
            record["raw_headers"] = message.raw_headers
        if args.json:
            print_json(record)
            continue
        note(out, f"── {message.id} · RowVersion {message.row_version}", "bold cyan")
        if message.header_error:
            note(out, f"   unreadable headers ({message.header_error}): {message.raw_headers}", "red")
        for key, value in message.headers.items():
            if key != STACK_TRACE:
                out.print(f"   {key}: {value}", style="dim", markup=False, highlight=False)
        more = " …" if record["body_truncated"] else ""
        out.print(
            f"body ({record['body_bytes']:,} bytes, {record['body_encoding']}): {record['body']}{more}",
            markup=False,
            highlight=False,
        )
        if record["stack_trace"]:
            out.print("stack trace:\n" + record["stack_trace"], markup=False, highlight=False)
    return Exit.OK


def _report(
    args: argparse.Namespace,
    out: Console,
    err: Console,
    verb: str,
    error_queue: str,
    outcome: Any,
    extra: dict[str, Any] | None = None,
) -> int:
    if args.json:
        print_json({"error_queue": error_queue, "action": verb, **(extra or {}), **outcome.as_dict()})
    else:
        where = f" into {extra['archive']}" if extra and extra.get("archive") else ""
        note(
            out,
            f"{error_queue}: {verb} {len(outcome.done):,} message(s){where} in {outcome.batches} batch(es)",
        )
        for refusal in outcome.refused:
            note(err, f"refused: {refusal.reason}", "red")
    if not outcome.refused:
        return Exit.OK
    if any(refusal.missing_queue for refusal in outcome.refused):
        return Exit.QUEUE_MISSING
    return Exit.ERROR


def failed_retry(args: argparse.Namespace, out: Console, err: Console) -> int:
    from ..transport.failed import retry_failed

    selection = _selection(args, require=True)
    with connected(args) as transport:
        error_queue = existing_queue(transport, args.error_queue)
        outcome = retry_failed(error_queue, selection, args.batch_size)
    return _report(args, out, err, "retried", str(error_queue.address), outcome)


def failed_delete(args: argparse.Namespace, out: Console, err: Console) -> int:
    from ..transport.archive import ErrorArchive
    from ..transport.failed import delete_failed, failed_groups

    selection = _selection(args, require=True)
    with connected(args) as transport:
        error_queue = existing_queue(transport, args.error_queue)
        archive = None if args.permanent else str(ErrorArchive.of(error_queue).address)
        extra = {"archive": archive}
        how = "for good" if archive is None else f"into the archive {archive}"
        if not args.yes:
            count = sum(group.count for group in failed_groups(error_queue, selection))
            if count == 0:
                return _report(args, out, err, "deleted", str(error_queue.address), _empty(), extra)
            if not sys.stdin.isatty():
                raise CliError(
                    Exit.USAGE,
                    f"delete {count:,} failed message(s) from {error_queue.address}: "
                    "no terminal to confirm on",
                    "pass --yes to delete without asking",
                )
            err.print(f"Delete {count:,} failed message(s) from {error_queue.address} {how}? [y/N] ", end="")
            if input().strip().lower() not in ("y", "yes"):
                note(err, "nothing deleted")
                return Exit.OK
        outcome = delete_failed(error_queue, selection, args.batch_size, permanent=args.permanent)
    return _report(args, out, err, "deleted", str(error_queue.address), outcome, extra)


def failed_purge_archive(args: argparse.Namespace, out: Console, err: Console) -> int:
    from ..transport import ConfigurationError
    from ..transport.archive import ErrorArchive, parse_age

    try:
        age = parse_age(args.older_than)
    except ConfigurationError as error:
        raise CliError(Exit.USAGE, str(error)) from None
    with connected(args) as transport:
        error_queue = existing_queue(transport, args.error_queue)
        archive = ErrorArchive.of(error_queue)
        purged = archive.purge(age, args.batch_size)
    if args.json:
        print_json(
            {
                "error_queue": str(error_queue.address),
                "archive": str(archive.address),
                "older_than_seconds": int(age.total_seconds()),
                "purged": purged,
            }
        )
    else:
        note(out, f"{archive.address}: purged {purged:,} message(s) archived more than {args.older_than} ago")
    return Exit.OK


def _archived_record(error_queue: str, archive: str, message: Any) -> dict[str, Any]:
    return {
        "error_queue": error_queue,
        "archive": archive,
        "id": message.id,
        "failed_queue": message.failed_queue,
        "exception_type": message.exception_type,
        "exception_message": message.exception_message,
        "time_of_failure": iso(message.time_of_failure),
        "archived_at": iso(message.archived_at),
        "body_bytes": message.body_size,
    }


def failed_archive(args: argparse.Namespace, out: Console, err: Console) -> int:
    """One page of the error queue's archive, newest archived first (ErrorArchive.browse)."""
    from ..transport.archive import ErrorArchive

    with connected(args) as transport:
        error_queue = existing_queue(transport, args.error_queue)
        archive = ErrorArchive.of(error_queue)
        page = archive.browse((args.page - 1) * args.limit, args.limit)
    name, archived = str(error_queue.address), str(archive.address)
    if args.json:
        for message in page.messages:
            print_json(_archived_record(name, archived, message))
        return Exit.OK
    if not page.messages:
        note(out, f"{archived}: no archived messages{' on this page' if args.page > 1 else ''}")
        return Exit.OK
    table = Table(
        title=f"archived failed messages of {name} ({archived}), newest first", title_justify="left"
    )
    table.add_column("id", no_wrap=True, min_width=36)  # the Id to copy into restore
    for column in ("failed in", "exception", "message", "archived", "body"):
        table.add_column(column, justify="right" if column == "body" else "left", overflow="fold")
    for message in page.messages:
        table.add_row(
            message.id,
            message.failed_queue or "(unknown)",
            message.exception_type or "",
            (message.exception_message or "")[:120],
            iso(message.archived_at) or "",
            f"{message.body_size:,} B",
        )
    out.print(table)
    if page.more:
        note(out, f"more: --page {args.page + 1}")
    return Exit.OK


def failed_restore(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Archived messages back into the error queue by Id (ErrorArchive.restore); exits 5 when an Id was not
    in the archive (the others are restored)."""
    from ..transport.archive import ErrorArchive

    with connected(args) as transport:
        error_queue = existing_queue(transport, args.error_queue)
        archive = ErrorArchive.of(error_queue)
        outcome = archive.restore(args.ids)
    if args.json:
        print_json(
            {
                "error_queue": str(error_queue.address),
                "archive": str(archive.address),
                "action": "restored",
                "done": outcome.restored,
                "moved": outcome.moved,
                "unknown": outcome.unknown,
            }
        )
    else:
        note(
            out,
            f"{error_queue.address}: restored {len(outcome.restored):,} message(s) "
            f"({outcome.moved:,} row(s)) from {archive.address}",
        )
        for message_id in outcome.unknown:
            note(err, f"not in the archive: {message_id}", "red")
    return Exit.EMPTY if outcome.unknown else Exit.OK


def _empty() -> Any:
    from ..transport.failed import FailureOutcome

    return FailureOutcome()


def add_failed_commands(
    commands: argparse._SubParsersAction,
    common: argparse.ArgumentParser,
    command: Callable[..., argparse.ArgumentParser],
    run: Callable[[str], Callable[[argparse.Namespace, Console, Console], int]],
) -> None:
    """``sqlqueue failed list|show|retry|delete|archive|restore|purge-archive``: ``command`` and ``run`` are
    the main parser's helpers."""
    failed = commands.add_parser(
        "failed",
        help="list, show, retry or delete the messages of an error queue; list or restore its archive",
        description=textwrap.fill(
            "Failed messages: the error queue's messages grouped by the queue they failed in "
            "(NServiceBus.FailedQ) and their exception; retry moves them back there with the same Id and "
            "without the failure headers, one transaction per batch.",
            100,
        ),
    )
    failed_commands = failed.add_subparsers(dest="failed_command", required=True, metavar="ACTION")

    def failed_action(name: str, summary: str, examples: str) -> argparse.ArgumentParser:
        action = command(
            failed_commands, name, common, summary, summary[0].upper() + summary[1:] + ".", examples
        )
        action.add_argument(
            "--error-queue", default="error", metavar="QUEUE", help="the error queue (default error)"
        )
        action.add_argument("--json", action="store_true", help="JSON lines for scripts")
        return action

    def failed_selection(action: argparse.ArgumentParser, *, ids: bool = True) -> None:
        choose = action.add_argument_group("which messages")
        if ids:
            choose.add_argument("ids", nargs="*", metavar="ID", help="message Ids (the Id column)")
        choose.add_argument("--group", metavar="KEY", help="a group key from 'sqlqueue failed list'")
        choose.add_argument("--queue", metavar="QUEUE", help="the queue they failed in (NServiceBus.FailedQ)")
        choose.add_argument(
            "--exception-type", metavar="TYPE", help="NServiceBus.ExceptionInfo.ExceptionType"
        )
        choose.add_argument("--exception-message", metavar="TEXT", help="NServiceBus.ExceptionInfo.Message")

    p = failed_action(
        "list",
        "failed messages grouped by source queue and exception, with counts and first and last failure",
        "  sqlqueue failed list --url sqlite:///queues.db\n"
        "  sqlqueue failed list --error-queue error --json\n",
    )
    failed_selection(p, ids=False)
    p.add_argument("--messages", action="store_true", help="one line per message (with its Id), not groups")
    p.set_defaults(run=run("failed_list"))

    p = failed_action(
        "show",
        "one failed message: headers, body preview and stack trace",
        "  sqlqueue failed show 6f1c...e2 --url sqlite:///queues.db\n",
    )
    p.add_argument("id", metavar="ID")
    p.add_argument(
        "--max-body-bytes", type=positive_int, default=4096, metavar="N", help="body preview size (4096)"
    )
    p.set_defaults(run=run("failed_show"))

    for name, verb in (
        ("retry", "move back to the queue they failed in"),
        ("delete", "move into the error queue's archive table (--permanent: delete for good)"),
    ):
        p = failed_action(
            name,
            f"{verb}: the given Ids, a group, or --all",
            f"  sqlqueue failed {name} --group 3f2a9c1b7d40 --url sqlite:///queues.db\n"
            f"  sqlqueue failed {name} --queue orders --json{' --yes' if name == 'delete' else ''}\n",
        )
        failed_selection(p)
        p.add_argument("--all", action="store_true", help="every message of the error queue")
        p.add_argument(
            "--batch-size", type=positive_int, default=100, metavar="N", help="messages per transaction (100)"
        )
        if name == "delete":
            p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
            p.add_argument(
                "--permanent",
                action="store_true",
                help="delete for good instead of moving into <error queue>_archive",
            )
        p.set_defaults(run=run(f"failed_{name}"))

    p = failed_action(
        "archive",
        "one page of the error queue's archive (deleted messages), newest archived first",
        "  sqlqueue failed archive --url sqlite:///queues.db\n"
        "  sqlqueue failed archive --limit 100 --page 2 --json\n",
    )
    p.add_argument(
        "--limit", type=positive_int, default=50, metavar="N", help="messages per page (50, at most 500)"
    )
    p.add_argument("--page", type=positive_int, default=1, metavar="N", help="which page, from 1 (1)")
    p.set_defaults(run=run("failed_archive"))

    p = failed_action(
        "restore",
        "move archived messages back into the error queue by Id, in one transaction",
        "  sqlqueue failed restore 6f1c...e2 0b5c...91 --url sqlite:///queues.db\n",
    )
    p.add_argument("ids", nargs="+", metavar="ID", help="message Ids, from 'sqlqueue failed archive'")
    p.set_defaults(run=run("failed_restore"))

    p = failed_action(
        "purge-archive",
        "delete the messages archived longer ago than --older-than from the error queue's archive",
        "  sqlqueue failed purge-archive --older-than 30d --url sqlite:///queues.db\n"
        "  sqlqueue failed purge-archive --older-than 12h --error-queue error --json\n",
    )
    p.add_argument(
        "--older-than", required=True, metavar="AGE", help="a number and a unit (s, m, h, d, w), e.g. 30d"
    )
    p.add_argument(
        "--batch-size", type=positive_int, default=10_000, metavar="N", help="rows per transaction (10000)"
    )
    p.set_defaults(run=run("failed_purge_archive"))
