"""The ``sqlqueue`` command line: manage queue tables, send, receive and browse messages, watch depth,
purge expired messages, print DDL for a DBA, inspect tables and run a handler over a queue.

Every subcommand takes the database as ``--url URL`` or ``--conn-id ID`` (an Airflow connection, resolved
through SqlQueueHook; Airflow is imported only then), or from ``SQLQUEUE_URL`` / ``SQLQUEUE_CONN_ID``.
Passwords are masked in everything the command prints. Exit codes are listed in :class:`Exit` and
docs/cli.md; expected failures print one line, never a traceback (``SQLQUEUE_DEBUG=1`` shows them).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import textwrap
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import NoReturn

from rich.console import Console
from rich.logging import RichHandler

from ._support import (
    CONN_ID_ENV,
    DEBUG_ENV,
    SECRETS,
    URL_ENV,
    CliError,
    Exit,
    MaskingFilter,
    consoles,
    duration,
    fail,
    positive_int,
)

__all__ = ["Exit", "main"]

EXIT_CODES = """\
exit codes:
  0    success
  1    any other error (a failed statement, a message too large, an unexpected error)
  2    usage: bad arguments, a URL that cannot be used, an invalid queue name, an unknown --conn-id
  3    a queue does not exist
  4    the database cannot be reached (or refused the login; or the SQLite file does not exist)
  5    nothing there, with --fail-on-empty (receive, peek, depth)
  6    permission denied
  7    inspect found problems
  130  interrupted (Ctrl-C)
"""

MAIN_EPILOG = f"""\
the database:
  --url URL         sqlite:///queues.db, postgresql://user@host/db, mssql+pyodbc://... (or ${URL_ENV})
  --conn-id ID      an Airflow connection, e.g. sqlqueue_default (or ${CONN_ID_ENV}); needs Airflow

examples:
  export {URL_ENV}=sqlite:///queues.db
  sqlqueue create orders error
  echo '{{"order": 42}}' | sqlqueue send orders -H NServiceBus.ContentType=application/json
  sqlqueue peek orders
  sqlqueue receive orders -n 10 --json > orders.jsonl
  sqlqueue stats

{EXIT_CODES}
"sqlqueue COMMAND --help" shows each command's options and examples. Set {DEBUG_ENV}=1 for tracebacks.
"""


class _Parser(argparse.ArgumentParser):
    """argparse with secrets masked in its messages (they may echo a URL) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(Exit.USAGE, f"{self.prog}: error: {SECRETS.mask(message)}\n")


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    where = common.add_argument_group("database")
    where.add_argument("--url", "-u", metavar="URL", help=f"database URL (default: ${URL_ENV})")
    where.add_argument(
        "--conn-id",
        metavar="ID",
        help=f"Airflow connection id, resolved through SqlQueueHook (${CONN_ID_ENV})",
    )
    where.add_argument("--schema", metavar="NAME", help="schema of queue names that do not give one")
    return common


def _subscriptions_option(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument(
        "--subscriptions",
        action="store_true",
        help=f"{verb} the publish/subscribe subscription table (SubscriptionRouting, or the connection's "
        "subscription_table; with --engine, in --schema)",
    )


def _depth_history_option(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument(
        "--depth-history",
        action="store_true",
        help=f"{verb} the depth history table (sqlqueue_depth_samples) in each named queue's schema, or in "
        "--schema / the default schema: triggers and pumps sample queue depths into it for the Queues page",
    )


def _table_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("table options")
    group.add_argument(
        "--layout",
        choices=["clustered", "heap"],
        default="clustered",
        help="SQL Server: clustered RowVersion index (default) or heap with non-clustered indexes",
    )
    group.add_argument(
        "--column-layout",
        choices=["sqlserver-transport", "postgresql-transport"],
        default="sqlserver-transport",
        help="the columns of new tables: the NServiceBus SQL Server transport's (default, every engine) or, "
        "on PostgreSQL, NServiceBus.Transport.PostgreSql's (Id, Expires, Headers, Body, Seq)",
    )
    group.add_argument("--body-string", action="store_true", help="add the readable BodyString column")
    group.add_argument("--varchar-headers", action="store_true", help="SQL Server: varchar(max) Headers")
    storage = group.add_mutually_exclusive_group()
    storage.add_argument(
        "--storage-parameter",
        action="append",
        metavar="NAME=VALUE",
        help="PostgreSQL: a WITH (...) storage parameter of new tables, instead of the package's autovacuum "
        "settings (repeat for several)",
    )
    storage.add_argument(
        "--no-storage-parameters",
        action="store_true",
        help="PostgreSQL: create tables without the package's autovacuum settings",
    )


def _output_options(parser: argparse.ArgumentParser, *, file_help: str) -> None:
    group = parser.add_argument_group("output")
    form = group.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="one JSON object per message (JSON lines)")
    form.add_argument("--body-only", action="store_true", help="only the bodies, one per line")
    group.add_argument("--output", "-o", metavar="FILE", help=file_help)
    group.add_argument(
        "--fail-on-empty", action="store_true", help=f"exit {int(Exit.EMPTY)} when there is no message"
    )


def _command(
    commands: argparse._SubParsersAction,
    name: str,
    common: argparse.ArgumentParser,
    summary: str,
    description: str,
    examples: str,
) -> argparse.ArgumentParser:
    return commands.add_parser(
        name,
        parents=[common],
        help=summary,
        description=textwrap.fill(description, 100),
        epilog="examples:\n" + examples,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _parser() -> argparse.ArgumentParser:
    from ..transport.pump import PumpSettings, Strategy
    from ..transport.queue import TransactionMode
    from ._send import add_message_arguments

    parser = _Parser(
        prog="sqlqueue",
        description="Durable message queues in SQL tables (SQL Server, PostgreSQL, SQLite).",
        epilog=MAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _common()

    p = _command(
        commands,
        "create",
        common,
        "create queue tables (idempotent)",
        "Create the queue tables and their indexes if they are missing; existing tables are left alone: "
        "an index missing from one is reported with its statement, and built only with "
        "--add-missing-indexes (building it blocks the receivers using the table). "
        "Safe to run from many places at once. Needs DDL rights (the provisioning role).",
        "  sqlqueue create --url sqlite:///queues.db orders error\n"
        "  sqlqueue create --conn-id sqlqueue_default orders@[sales] --layout heap\n"
        "  sqlqueue create --url sqlite:///queues.db --subscriptions\n",
    )
    p.add_argument("queues", nargs="*", metavar="QUEUE", help="queue address, e.g. orders or orders@[sales]")
    _subscriptions_option(p, "also create")
    _depth_history_option(p, "also create")
    _table_options(p)
    p.add_argument(
        "--add-missing-indexes",
        action="store_true",
        help="also build indexes missing from existing tables; this blocks their receivers while it runs",
    )
    p.add_argument("--json", action="store_true", help='print {"created": [...], "existing": [...]}')
    p.add_argument(
        "--error-queue",
        metavar="QUEUE",
        help="the listed queue that is the error queue, made with its archive table <error>_archive "
        "(default: the connection's error queue, else error)",
    )
    p.set_defaults(run=_run("create"))

    p = _command(
        commands,
        "drop",
        common,
        "drop queue tables and every message in them",
        "Drop queue tables. Asks for confirmation on a terminal; elsewhere --yes is required.",
        "  sqlqueue drop --url sqlite:///queues.db orders --yes\n"
        "  sqlqueue drop --conn-id sqlqueue_default old_orders --if-exists --yes\n",
    )
    p.add_argument("queues", nargs="+", metavar="QUEUE")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.add_argument("--if-exists", action="store_true", help="skip queues that do not exist (exit 0)")
    p.set_defaults(run=_run("drop"))

    p = _command(
        commands,
        "send",
        common,
        "send a message (body from an argument, a file or stdin)",
        "Send a message. The body is the BODY argument, the contents of --file, or stdin (also with BODY "
        "'-'). It is stored as bytes exactly as given. Prints the message id. With --count, sends that many "
        "copies in batches (each batch one transaction) with a progress bar; with --lines, each line of "
        "the input is one message.",
        "  sqlqueue send --url sqlite:///queues.db orders 'hello'\n"
        "  sqlqueue send orders --file order.json --content-type application/json -H MyApp.Tenant=42\n"
        "  echo '{\"id\": 1}' | sqlqueue send orders --ttbr 15m\n"
        "  sqlqueue send orders 'load test' --count 100000\n"
        "  sqlqueue send orders --lines --file orders.jsonl\n",
    )
    p.add_argument("queue", metavar="QUEUE")
    add_message_arguments(p, "discard the message")
    p.add_argument("--count", "-c", type=positive_int, metavar="N", help="send N copies (progress bar)")
    p.add_argument("--lines", action="store_true", help="one message per line of the input")
    p.add_argument(
        "--batch-size", type=positive_int, default=500, metavar="N", help="messages per transaction (500)"
    )
    p.add_argument("--ids", action="store_true", help="print every id when sending many")
    p.add_argument("--json", action="store_true", help='print {"queue", "sent", "seconds", "ids"}')
    p.set_defaults(run=_run("send"))

    p = _command(
        commands,
        "receive",
        common,
        "receive (remove) messages and print them or write JSON lines",
        "Receive up to N of the oldest messages and print them. The messages are removed only after they "
        "were written: each batch's DELETE commits after its output is flushed (and, with --output, "
        "fsynced); if writing fails, the batch stays in the queue. --output appends JSON lines to a file.",
        "  sqlqueue receive --url sqlite:///queues.db orders\n"
        "  sqlqueue receive orders -n 100 --json > orders.jsonl\n"
        "  sqlqueue receive orders -n 1000 --output orders.jsonl\n"
        "  sqlqueue receive orders --wait 30s --fail-on-empty --body-only\n",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--count", "-n", type=positive_int, default=1, metavar="N", help="at most N messages (1)")
    p.add_argument(
        "--batch-size", type=positive_int, default=100, metavar="N", help="messages per transaction (100)"
    )
    p.add_argument("--wait", type=duration, metavar="DURATION", help="wait this long for a first message")
    _output_options(p, file_help="append JSON lines to FILE (fsynced before the messages are removed)")
    p.set_defaults(run=_run("receive"))

    p = _command(
        commands,
        "peek",
        common,
        "browse the oldest messages without removing them",
        "Show the oldest N unexpired messages, leaving them in the queue (a plain read: no messages are "
        "locked or removed, receivers are not slowed). A snapshot: receivers may take them a moment "
        "later. SQL Server skips messages receivers hold right now; PostgreSQL and SQLite show them until "
        "the receiver commits.",
        "  sqlqueue peek --url sqlite:///queues.db orders\n"
        "  sqlqueue peek orders -n 50 --json | jq .headers\n",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument(
        "--count", "-n", type=positive_int, default=10, metavar="N", help="at most N messages (10)"
    )
    _output_options(p, file_help="append JSON lines to FILE")
    p.set_defaults(run=_run("peek"))

    p = _command(
        commands,
        "depth",
        common,
        "how many messages wait (estimate, or exact with --exact)",
        "Print the depth of queues: the estimate (max - min + 1 of RowVersion, cheap at any length, an "
        "upper bound) and with --exact the exact count of unexpired messages (scans the table).",
        "  sqlqueue depth --url sqlite:///queues.db orders\n"
        "  sqlqueue depth orders error --exact --json\n"
        "  sqlqueue depth orders --fail-on-empty || echo 'nothing to do'\n",
    )
    p.add_argument("queues", nargs="+", metavar="QUEUE")
    p.add_argument("--exact", action="store_true", help="also count exactly")
    p.add_argument("--json", action="store_true", help="one JSON object per queue")
    p.add_argument(
        "--fail-on-empty", action="store_true", help=f"exit {int(Exit.EMPTY)} when every queue is empty"
    )
    p.set_defaults(run=_run("depth"))

    p = _command(
        commands,
        "stats",
        common,
        "depth, messages, expired count and oldest age per queue",
        "A table of queues: depth estimate, exact messages, expired messages waiting for a purge, and the "
        "age of the oldest message (from its NServiceBus.TimeSent header). Without QUEUE: every table of "
        "the schema (--schema, or the default) that has a queue table's columns.",
        "  sqlqueue stats --url sqlite:///queues.db\n  sqlqueue stats orders error --json\n"
        "  sqlqueue stats --watch --interval 5\n",
    )
    p.add_argument("queues", nargs="*", metavar="QUEUE")
    p.add_argument("--json", action="store_true", help="one JSON object per queue (per round with --watch)")
    p.add_argument("--watch", action="store_true", help="read again every --interval seconds until Ctrl-C")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between rounds of --watch (2)")
    p.set_defaults(run=_run("stats"))

    p = _command(
        commands,
        "purge-expired",
        common,
        "delete expired messages in batches",
        "Delete expired messages in batches (each its own transaction), skipping rows receivers hold, so "
        "it runs safely beside them. Shows a progress bar and the totals.",
        "  sqlqueue purge-expired --url sqlite:///queues.db orders\n"
        "  sqlqueue purge-expired orders error --batch-size 5000 --max-seconds 5m --json\n",
    )
    p.add_argument("queues", nargs="+", metavar="QUEUE")
    p.add_argument(
        "--batch-size", type=positive_int, default=10_000, metavar="N", help="rows per DELETE (10,000)"
    )
    p.add_argument("--max-seconds", type=duration, metavar="DURATION", help="stop after about this long")
    p.add_argument("--json", action="store_true", help="one JSON object per queue")
    p.set_defaults(run=_run("purge_expired"))

    from ._failed import add_failed_commands
    from ._spark import add_spark_commands

    add_failed_commands(commands, common, _command, _run)
    add_spark_commands(commands, common, _command, _run)

    from ._pubsub import add_pubsub_commands

    add_pubsub_commands(commands, common, _command, _run)

    p = _command(
        commands,
        "script",
        common,
        "print the DDL of queue tables for a DBA (no database needed)",
        "Print the CREATE TABLE and CREATE INDEX statements that create would run, to review and run by "
        "hand. With --engine nothing connects and no database is needed; with --url or --conn-id the "
        "engine comes from the database (still without connecting).",
        "  sqlqueue script --engine sqlserver orders@[queues] error@[queues] > queues.sql\n"
        "  sqlqueue script --engine postgresql orders --schema app --body-string\n"
        "  sqlqueue script --engine sqlserver --subscriptions\n",
    )
    p.add_argument("queues", nargs="*", metavar="QUEUE")
    _subscriptions_option(p, "also script")
    _depth_history_option(p, "also script")
    p.add_argument("--engine", choices=["sqlserver", "postgresql", "sqlite"], help="render for this engine")
    p.add_argument(
        "--error-queue",
        metavar="QUEUE",
        help="the listed queue that is the error queue, scripted with its archive table <error>_archive "
        "(default: the connection's error queue, else error)",
    )
    _table_options(p)
    p.set_defaults(run=_run("script"))

    p = _command(
        commands,
        "inspect",
        common,
        "check the indexes and column types of queue tables, and their storage",
        f"Check that queue tables have the indexes and column types the transport expects; each finding "
        f"comes with the statement that fixes it. Exit {int(Exit.FINDINGS)} when there are findings. On "
        "PostgreSQL also show each table's storage: its storage parameters, live and dead rows, last "
        "vacuums, table and index size, and the maintenance they call for (advice does not change the "
        "exit status).",
        "  sqlqueue inspect --url sqlite:///queues.db orders error\n"
        "  sqlqueue inspect --conn-id sqlqueue_default orders --layout heap --json\n",
    )
    p.add_argument("queues", nargs="+", metavar="QUEUE")
    _table_options(p)
    p.add_argument("--json", action="store_true", help="one JSON object per queue")
    p.set_defaults(run=_run("inspect"))

    p = _command(
        commands,
        "consume",
        common,
        "run a handler over a queue until Ctrl-C",
        "Run the message pump in the foreground with a live status line (processed, failed, rate, depth). "
        "Ctrl-C stops it gracefully: no new receives, running handlers finish (a second Ctrl-C abandons "
        "them, and their messages roll back). The database may also be given as the first argument.",
        "  sqlqueue consume --url sqlite:///queues.db orders --handler handlers:process\n"
        "  sqlqueue consume sqlite:///queues.db orders --handler handlers:process --until-empty\n"
        "  sqlqueue consume --conn-id sqlqueue_default orders --handler handlers:process -c 8\n"
        "  sqlqueue consume --conn-id sqlqueue_default orders --handler h:process -c 4 --batch-size 100\n",
    )
    p.add_argument("target", nargs="+", metavar="[URL] QUEUE", help="queue address, e.g. orders")
    p.add_argument("--handler", required=True, help="module:function taking (message[, context])")
    pump = PumpSettings()  # the defaults, declared once
    p.add_argument("-c", "--concurrency", type=int, default=pump.max_concurrency, help="receives in flight")
    p.add_argument("--batch-size", type=int, default=pump.batch_size, help="messages per receive (1-1000)")
    p.add_argument("--strategy", choices=[s.value for s in Strategy], default=Strategy(pump.strategy).value)
    p.add_argument(
        "--transaction-mode",
        choices=[m.value for m in TransactionMode],
        default=TransactionMode(pump.transaction_mode).value,
    )
    p.add_argument("--max-messages", type=int, default=None, help="stop after this many messages")
    p.add_argument("--until-empty", action="store_true", help="stop when the queue is empty")
    p.add_argument("--error-queue", default=None, help="where failed messages go (default error)")
    p.add_argument("--audit-queue", default=None)
    p.add_argument("--immediate-retries", type=int, default=pump.immediate_retries)
    p.add_argument("--idle-delay", type=float, default=pump.idle_delay, help="seconds, >= 0.1 (%(default)s)")
    p.add_argument(
        "--wake-up",
        choices=["auto", "poll"],
        default=pump.wake_up,
        help="auto: wake on a committed send where the engine pushes it (PostgreSQL); poll: idle delay only",
    )
    p.add_argument(
        "--stop-timeout", type=float, default=pump.stop_timeout, help="seconds handlers get on stop"
    )
    p.add_argument("--log-level", default="WARNING")
    p.set_defaults(run=_run("consume"))
    return parser


# Each subcommand's function and the module that holds it, one module per kind of work.
_COMMAND_MODULES = {
    "create": "_tables",
    "drop": "_tables",
    "script": "_tables",
    "inspect": "_tables",
    "send": "_send",
    "receive": "_receive",
    "peek": "_receive",
    "depth": "_monitor",
    "stats": "_monitor",
    "purge_expired": "_purge",
    "consume": "_consume",
    "subscribe": "_pubsub",
    "unsubscribe": "_pubsub",
    "subscriptions": "_pubsub",
    "publish": "_pubsub",
}
# The commands of a group (``sqlqueue failed list``: failed_list) live in the group's module.
_GROUP_MODULES = {"failed": "_failed", "spark": "_spark"}


def _run(name: str) -> Callable[[argparse.Namespace, Console, Console], int]:
    """The subcommand's function, imported when it runs (keeps ``--help`` fast)."""
    module_name = _COMMAND_MODULES.get(name) or _GROUP_MODULES[name.split("_")[0]]

    def run(args: argparse.Namespace, out: Console, err: Console) -> int:
        module = importlib.import_module(f"{__name__}.{module_name}")
        return getattr(module, name)(args, out, err)

    return run


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("airflow-provider-sqlqueue")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


def _exit_code(error: BaseException) -> tuple[Exit, str | None]:
    """The exit code and a hint for an error of the transport."""
    from ..transport import (
        ConfigurationError,
        HeaderFormatError,
        InvalidQueueName,
        PermissionDenied,
        QueueNotFound,
    )

    if isinstance(error, QueueNotFound):
        return Exit.QUEUE_MISSING, "create it with: sqlqueue create QUEUE (needs DDL rights)"
    if isinstance(error, PermissionDenied):
        return Exit.PERMISSION_DENIED, "see the permissions in docs/dba-permissions.md"
    if isinstance(error, InvalidQueueName | ConfigurationError | HeaderFormatError):
        return Exit.USAGE, None
    return Exit.ERROR, None


def _logging(args: argparse.Namespace, console: Console) -> None:
    level = str(getattr(args, "log_level", "WARNING")).upper()
    handler = RichHandler(console=console, show_path=False, markup=False, rich_tracebacks=False)
    handler.addFilter(MaskingFilter())
    logging.basicConfig(level=level, format="%(message)s", handlers=[handler], force=True)


# After Ctrl-C the command unwinds (its open receive rolls back) and exits 130; if that unwinding is stuck
# (a lock left held by the interrupt, a driver call that ignores it), the process exits 130 anyway after
# this many seconds, plus the handlers' --stop-timeout for consume, whose handlers may finish first.
INTERRUPT_GRACE_SECONDS = 10.0
_unwinding_allowance = 0.0


def _exit_even_if_stuck_after_ctrl_c() -> Callable[[], None]:
    """Install the SIGINT handler of the ``sqlqueue`` program; return what restores the previous one.

    Nothing is lost by the hard exit: every command commits a receive only after its output is written,
    and the database rolls back what an ended connection left open."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGINT)

    def interrupted(signum: int, frame: object) -> None:
        grace = INTERRUPT_GRACE_SECONDS + _unwinding_allowance
        watchdog = threading.Timer(grace, os._exit, args=(int(Exit.INTERRUPTED),))
        watchdog.daemon = True
        watchdog.start()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C interrupts the unwinding
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupted)
    return lambda: signal.signal(signal.SIGINT, previous)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (see ``sqlqueue --help``)."""
    if argv is not None:  # called from Python (tests, embedding): leave the caller's signal handling alone
        return _main(argv)
    restore = _exit_even_if_stuck_after_ctrl_c()
    try:
        return _main(argv)
    finally:
        restore()


def _main(argv: Sequence[str] | None) -> int:
    out, err = consoles()
    debug = os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        args = _parser().parse_args(argv)
    except SystemExit as stop:  # --help, --version, usage errors
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else int(Exit.USAGE))
    _logging(args, err)
    global _unwinding_allowance
    _unwinding_allowance = max(0.0, float(getattr(args, "stop_timeout", 0.0) or 0.0))
    try:
        return int(args.run(args, out, err))
    except CliError as error:
        return fail(err, error)
    except KeyboardInterrupt:
        err.print("sqlqueue: interrupted", style="yellow")
        return int(Exit.INTERRUPTED)
    except Exception as error:
        from ..transport import SqlQueueError

        if debug:
            err.print(SECRETS.mask(traceback.format_exc()), style="dim")
        if isinstance(error, SqlQueueError):
            code, hint = _exit_code(error)
            return fail(err, CliError(code, f"{type(error).__name__}: {error}", hint))
        return fail(
            err,
            CliError(
                Exit.ERROR,
                f"unexpected {type(error).__name__}: {error}",
                None if debug else f"set {DEBUG_ENV}=1 to see the traceback",
            ),
        )


if __name__ == "__main__":
    sys.exit(main())
