"""``sqlqueue spark runs|release|ack``: the Spark data source's staged runs of a queue (messages taken out of
the queue by a batch read or a stream and not yet acknowledged), and ending one by hand."""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from ._support import CliError, Exit, connected, existing_queue, json_line, note

__all__ = ["add_spark_commands", "spark_ack", "spark_release", "spark_runs"]


def add_spark_commands(
    commands: argparse._SubParsersAction,
    common: argparse.ArgumentParser,
    command: Callable[..., argparse.ArgumentParser],
    run: Callable[[str], Callable[[argparse.Namespace, Console, Console], int]],
) -> None:
    """``sqlqueue spark runs|release|ack``: ``command`` and ``run`` are the main parser's helpers."""
    from ..spark.tables import DEFAULT_PREFIX

    spark = commands.add_parser(
        "spark",
        help="staged runs of the Spark data source: list them, release or acknowledge one",
        description=textwrap.fill(
            "A batch read of format('sqlqueue') keeps what it received staged under its run id until "
            "ack_read or release_read; a stream keeps its last planned micro-batch staged until Spark "
            "commits it. Staged messages are out of the queue (depth and stats do not count them). List "
            "them per run, put a run's messages back at the end of the queue, or delete them.",
            100,
        ),
    )
    actions = spark.add_subparsers(dest="spark_command", required=True, metavar="ACTION")

    def spark_action(name: str, summary: str, description: str, examples: str) -> argparse.ArgumentParser:
        action = command(actions, name, common, summary, description, examples)
        action.add_argument(
            "--prefix",
            default=DEFAULT_PREFIX,
            metavar="PREFIX",
            help=f"the bridge tables' prefix (default {DEFAULT_PREFIX})",
        )
        action.add_argument("--json", action="store_true", help="JSON lines for scripts")
        return action

    p = spark_action(
        "runs",
        "the runs with staged messages, per queue: kind, state, messages, age",
        "The runs of each queue that hold staged messages: run id (a batch read's runId, a stream's "
        "streamId, a drain job's run id), kind, state, messages, seconds since the run started (age) and "
        "since its last activity (idle). A queue without the bridge's tables has none.",
        "  sqlqueue spark runs --url sqlite:///queues.db orders\n"
        "  sqlqueue spark runs --conn-id sqlqueue_default orders invoices --json\n",
    )
    p.add_argument("queues", nargs="+", metavar="QUEUE")
    p.set_defaults(run=run("spark_runs"))

    p = spark_action(
        "release",
        "put a staged run's messages back at the end of its queue",
        "Put the staged messages of a batch read (which becomes aborted, as release_read does) or of a "
        "stream back at the end of the queue, in their order, in one transaction. Stop a stream's query "
        "first. A drain job's run is refused: it finishes when re-run with its run id.",
        "  sqlqueue spark release --url sqlite:///queues.db orders nightly-2026-11-27\n",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("run_id", metavar="RUN_ID", help="the run id from 'sqlqueue spark runs'")
    p.set_defaults(run=run("spark_release"))

    p = spark_action(
        "ack",
        "delete a staged run's messages (they are safely in the sink)",
        "Delete the staged messages of a batch read (which becomes committed, as ack_read does) or of a "
        "stream, in one transaction: only when the sink has them. Stop a stream's query first. Needs --yes.",
        "  sqlqueue spark ack --url sqlite:///queues.db orders nightly-2026-11-27 --yes\n",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("run_id", metavar="RUN_ID", help="the run id from 'sqlqueue spark runs'")
    p.add_argument("--yes", "-y", action="store_true", help="confirm: the messages are deleted")
    p.set_defaults(run=run("spark_ack"))


def spark_runs(args: argparse.Namespace, out: Console, err: Console) -> int:
    from ..spark.staged_runs import staged_runs

    with connected(args) as transport:
        runs = []
        for name in dict.fromkeys(args.queues):
            existing_queue(transport, name)
            runs += staged_runs(transport, name, args.prefix)
    if args.json:
        for staged in runs:
            sys.stdout.write(json_line(staged.as_dict()) + "\n")
        sys.stdout.flush()
        return Exit.OK
    if not runs:
        note(out, "no staged runs")
        return Exit.OK
    table = Table("queue", "run id", "kind", "state", "messages", "age", "idle")
    for staged in runs:
        table.add_row(
            staged.queue,
            staged.run_id,
            staged.kind,
            staged.state,
            f"{staged.messages:,}",
            _age(staged.age_seconds),
            _age(staged.idle_seconds),
        )
    out.print(table)
    return Exit.OK


def _age(seconds: float) -> str:
    whole = int(seconds)
    if whole < 120:
        return f"{whole} s"
    if whole < 7200:
        return f"{whole // 60} min"
    if whole < 172800:
        return f"{whole // 3600} h"
    return f"{whole // 86400} d"


def _end(args: argparse.Namespace, out: Console, action: str) -> int:
    from ..spark.staged_runs import end_staged_run

    with connected(args) as transport:
        queue = existing_queue(transport, args.queue)
        count = end_staged_run(transport, args.queue, args.run_id, action, args.prefix)  # type: ignore[arg-type]
    done = "released" if action == "release" else "acknowledged"
    if args.json:
        record = {"queue": queue.name, "run_id": args.run_id, "action": action, "messages": count}
        sys.stdout.write(json_line(record) + "\n")
        sys.stdout.flush()
    else:
        where = f"back at the end of {queue.name}" if action == "release" else "deleted"
        note(out, f"run {args.run_id}: {done}, {count:,} message(s) {where}")
    return Exit.OK


def spark_release(args: argparse.Namespace, out: Console, err: Console) -> int:
    return _end(args, out, "release")


def spark_ack(args: argparse.Namespace, out: Console, err: Console) -> int:
    if not args.yes:
        raise CliError(
            Exit.USAGE,
            f"refusing to delete the staged messages of run {args.run_id} without --yes",
            "ack deletes them: only when the sink has them; 'sqlqueue spark release' puts them back instead",
        )
    return _end(args, out, "ack")
