"""Hundreds of deferred requests (issue 67): what they hold and read while they wait, and a reply queue per
request beside one shared reply queue read by correlation, side by side in one run, as counts.

    /work/main/.venv/bin/python benchmarks/request_reply_bench.py [--requests 300] [--poll 1]
        [--seconds 10] [--engines postgresql,sqlite] [--json docs/data/request-reply.json]
    /work/main/.venv/bin/python benchmarks/render.py      # docs/request-reply.md's generated block

Each engine runs in a worker process of its own. ``--requests`` ``RequestReplyOperator`` tasks execute (a
task instance each, as a worker runs them): each sends its request and defers, so the worker's ``execute``
returns and holds nothing. Their ``ReplyTrigger`` s, rebuilt from their serialized form, then wait on one
asyncio loop, each in its own task as Airflow's triggerer runs them, for ``--warmup-polls`` poll intervals
of ``--poll`` seconds and then ``--seconds`` more, with no reply yet. Counted meanwhile: the database
connections held (PostgreSQL: ``pg_stat_activity`` of the bench's database, sampled each second, the
largest; SQLite: the process's open descriptors of the database file), the statements the driver ran
(psycopg's ``Cursor.execute`` calls; SQLite's statement trace without transaction control and PRAGMAs), and,
on PostgreSQL, the rows the server read for them (``seq_tup_read`` + ``idx_tup_fetch`` of the schema's
tables in ``pg_stat_user_tables``, read after the triggers' connections closed, which flushes their
statistics). A responder endpoint then answers every request with ``context.reply``; each trigger's event
is checked and each task resumes with ``execute_complete``: lost (no reply event) and misrouted (another
request's answer) are counted.

The alternative is one shared reply queue that holds the same number of replies, each waiting request
looking for its own by correlation: a plain ordered read of the queue, the read the Queues page browses
with. One poll round of it (one look per request) is run and its rows counted the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from trigger_polling_bench import ROLE, StatementCounter, _held_postgres, _held_sqlite, _targets  # noqa: E402

CONN_ID = "sqlqueue_bench"
SERVICE = "Pricing"
PREFIX = "airflow.replies"
SHARED = "airflow.replies.shared"
ROWS_READ = (
    "SELECT COALESCE(SUM(seq_tup_read + COALESCE(idx_tup_fetch, 0)), 0) FROM pg_stat_user_tables "
    "WHERE schemaname = %s"
)


def _rows_read(checker_url: str, schema: str) -> int:
    """Rows the server read from the schema's tables so far, once the statistics of closed connections
    arrived (they flush when a backend exits; the count is read until it stops changing)."""
    import psycopg

    last = -1
    for _ in range(20):
        with psycopg.connect(checker_url, autocommit=True) as checker:
            row = checker.execute(ROWS_READ, (schema,)).fetchone()
        now = int(row[0]) if row else 0
        if now == last:
            return now
        last = now
        time.sleep(0.5)
    return last


def worker(options: dict[str, Any]) -> dict[str, Any]:
    """One engine's measurement (see the module)."""
    logging.disable(logging.WARNING)
    engine = options["engine"]
    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(options["connection"])
    counter = StatementCounter(engine)
    from airflow.providers.common.compat.sdk import TaskDeferred

    from airflow_provider_sqlqueue.operators.request_reply import RequestReplyOperator
    from airflow_provider_sqlqueue.transport import Endpoint, OutgoingMessage, open_transport
    from airflow_provider_sqlqueue.transport import headers as h
    from airflow_provider_sqlqueue.transport.browse import browse, queue_tables
    from airflow_provider_sqlqueue.transport.requests import correlation_of_reply
    from airflow_provider_sqlqueue.transport.shared_poll import SHARED_POLLERS
    from airflow_provider_sqlqueue.triggers.queue import shared_database_key
    from airflow_provider_sqlqueue.triggers.reply import ReplyTrigger

    requests, poll = options["requests"], options["poll"]
    schema = options.get("schema")

    def held() -> int | None:
        if engine == "postgresql":
            return _held_postgres(options["checker_url"])
        return _held_sqlite(options["database"])

    def rows_read() -> int | None:
        return _rows_read(options["checker_url"], schema) if engine == "postgresql" else None

    def context(item: str) -> dict[str, Any]:
        return {"ti": SimpleNamespace(dag_id="bench", task_id=item, run_id="r", map_index=-1, try_number=1)}

    with open_transport(options["url"], default_schema=schema) as setup:
        setup.queue("error").create()
        Endpoint(setup, SERVICE, instance_specific_queue=False, delayed_delivery=False).create()

    items = [f"item-{n:04d}" for n in range(requests)]
    operators = {
        item: RequestReplyOperator(
            task_id=item,
            destination=SERVICE,
            body={"item": item},
            poll_interval=poll,
            reply_timeout=3600,
            sqlqueue_conn_id=CONN_ID,
        )
        for item in items
    }
    triggers: dict[str, ReplyTrigger] = {}
    before_sends = counter.count
    for item, operator in operators.items():
        try:
            operator.execute(context(item))
        except TaskDeferred as deferred:
            triggers[item] = deferred.trigger
    statements_per_request = (counter.count - before_sends) / requests

    async def wait() -> dict[str, Any]:
        """The triggers wait, no reply sent yet; then the triggerer stops (its connections close)."""
        events: dict[str, dict[str, Any]] = {}
        tasks = [asyncio.create_task(_first_event(t, events, item)) for item, t in rebuilt(triggers)]
        await asyncio.sleep(options["warmup_polls"] * poll)
        samples: list[int] = []
        statements, started = counter.count, time.perf_counter()
        checker_statements = 0
        while time.perf_counter() - started < options["seconds"]:
            await asyncio.sleep(1.0)
            sample = await asyncio.to_thread(held)
            checker_statements += 1 if engine == "postgresql" else 0
            if sample is not None:
                samples.append(sample)
        wall = time.perf_counter() - started
        ran = counter.count - statements - checker_statements
        poller = SHARED_POLLERS.poller(shared_database_key(CONN_ID))
        depth_reads = None if poller is None else poller.statements
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return {
            "depth_reads": depth_reads,
            "events_while_waiting": len(events),
            "held_samples": samples,
            "waiting_statements_per_second": ran / wall,
            "measured_seconds": wall,
        }

    async def answered() -> dict[str, dict[str, Any]]:
        """A restarted triggerer waits again while the service answers every request."""
        events: dict[str, dict[str, Any]] = {}
        tasks = [asyncio.create_task(_first_event(t, events, item)) for item, t in rebuilt(triggers)]
        with open_transport(options["url"], default_schema=schema) as transport:
            service = Endpoint(transport, SERVICE, instance_specific_queue=False, delayed_delivery=False)

            def answer(message: Any, context: Any) -> None:
                asked = json.loads(message.body)
                context.reply(json.dumps(asked), {h.CONTENT_TYPE: "application/json"})

            service.start(answer, idle_delay=0.1, max_concurrency=2)
            try:
                await asyncio.wait(tasks, timeout=options["answer_seconds"])
            finally:
                await asyncio.to_thread(service.stop, 10)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return events

    rows_before = rows_read()
    waiting = asyncio.run(wait())
    rows_waiting = None if rows_before is None else rows_read() - rows_before  # all from the depth reads
    events = asyncio.run(answered())
    lost = misrouted = 0
    for item in items:
        event = events.get(item)
        if event is None or event.get("status") != "success":
            lost += 1
            continue
        result = operators[item].execute_complete(context(item), event)
        misrouted += result["body"] != {"item": item}

    with open_transport(options["url"], default_schema=schema) as transport:
        error_depth = transport.queue("error").count()
        reply_queues_left = sum(1 for a in queue_tables(transport) if a.table.startswith(PREFIX + "."))
        shared = transport.queue(SHARED)
        shared.create()
        request_ids = [uuid.uuid4() for _ in range(requests)]
        replies = [
            OutgoingMessage(b"{}", {h.CORRELATION_ID: str(r), h.MESSAGE_INTENT: "Reply"}) for r in request_ids
        ]
        shared.send_batch(replies)
    shared_rows_before = rows_read()
    with open_transport(options["url"], default_schema=schema) as transport:
        shared = transport.queue(SHARED)
        shared_statements = counter.count
        for request_id in request_ids:
            wanted = str(request_id)
            assert any(correlation_of_reply(m.headers) == wanted for m in browse(shared, requests))
        shared_statements = counter.count - shared_statements
    shared_rows = None if shared_rows_before is None else rows_read() - shared_rows_before
    return {
        **waiting,
        "held_max": max(waiting["held_samples"]) if waiting["held_samples"] else None,
        "statements_per_request_sent": statements_per_request,
        "deferred": len(triggers),
        "replied": requests - lost,
        "lost": lost,
        "misrouted": misrouted,
        "error_queue_depth": error_depth,
        "reply_queues_left": reply_queues_left,
        "waiting_rows_read": rows_waiting,
        "shared_round_statements": shared_statements,
        "shared_round_rows_read": shared_rows,
    }


async def _first_event(trigger: Any, events: dict[str, dict[str, Any]], item: str) -> None:
    async for event in trigger.run():
        events[item] = event.payload
        return


def rebuilt(triggers: dict[str, Any]) -> list[tuple[str, Any]]:
    """Each trigger as a triggerer builds it: from its serialized form."""
    pairs = []
    for item, trigger in triggers.items():
        _classpath, kwargs = trigger.serialize()
        pairs.append((item, type(trigger)(**json.loads(json.dumps(kwargs)))))
    return pairs


def _run_worker(options: dict[str, Any]) -> dict[str, Any]:
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(options)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=HERE.parent)
    if done.returncode != 0:
        raise RuntimeError(f"worker failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup-polls", type=int, default=3)
    parser.add_argument("--answer-seconds", type=float, default=300.0)
    parser.add_argument("--engines", default="postgresql,sqlite")
    parser.add_argument("--json", type=Path, default=None, help="where to write the results")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0

    import provenance
    from postgres_bed import throwaway_postgres
    from run import machine

    started = datetime.now(timezone.utc)
    meta: dict[str, Any] = {
        "date": started.isoformat(timespec="seconds"),
        "commit": provenance.commit(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "requests": args.requests,
        "poll_interval": args.poll,
        "seconds": args.seconds,
        "warmup_polls": args.warmup_polls,
        "postgresql_settings": "throwaway cluster, max_connections=100 (PostgreSQL's default)",
        "sqlite_settings": "journal_mode=WAL",
        "load_average_before": os.getloadavg(),
    }
    results = []
    with (
        tempfile.TemporaryDirectory(prefix="request-reply-bench-") as scratch,
        throwaway_postgres(max_connections=100) as cluster,
    ):
        folder = Path(scratch)
        meta["machine"] = machine(folder)
        cluster.psql(f"CREATE ROLE \"{ROLE}\" LOGIN PASSWORD '{ROLE}'")
        for engine in args.engines.split(","):
            options = {
                "engine": engine,
                "requests": args.requests,
                "poll": args.poll,
                "seconds": args.seconds,
                "warmup_polls": args.warmup_polls,
                "answer_seconds": args.answer_seconds,
                **_targets(engine, folder, "requests", cluster),
            }
            result = _run_worker(options)
            results.append({"engine": engine, **result})
            print(json.dumps({k: v for k, v in result.items() if k != "held_samples"}))
    meta["load_average_after"] = os.getloadavg()
    meta["wall_seconds"] = round((datetime.now(timezone.utc) - started).total_seconds(), 1)
    meta["source"] = (
        f"benchmarks/request_reply_bench.py --requests {args.requests} --poll {args.poll} --seconds "
        f"{args.seconds} --warmup-polls {args.warmup_polls}, run at commit {meta['commit']}"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        run = f"request-reply-{started:%Y-%m-%d}"
        document = {"runs": {run: meta}, "results": [{"run": run, **result} for result in results]}
        args.json.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
