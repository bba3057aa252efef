"""Hundreds of deferred requests (issue 67): what they hold and read while they wait, and a reply queue per
request beside one shared reply queue read by correlation, side by side in one run, as counts.

    /work/main/.venv/bin/python benchmarks/request_reply_bench.py [--requests 300] [--poll 1]
        [--seconds 10] [--engines postgresql,sqlite] [--json docs/data/request-reply.json]
    /work/main/.venv/bin/python benchmarks/render.py      # docs/request-reply.md's generated block

Each engine runs in a worker process of its own. ``--requests`` ``RequestReplyOperator`` tasks execute (a
task instance each, as a worker runs them): each sends its request and defers, so the worker's ``execute``
returns and holds nothing. Their ``ReplyTrigger`` s, rebuilt from their serialized form, then wait on one
asyncio loop, each in its own task as Airflow's triggerer runs them (``poll_interval`` ``--poll`` seconds),
until their shared poller has read ``--warmup-polls`` times (its first read resolves every queue and starts
listening to it; psycopg prepares the statement on its sixth run, before which PostgreSQL plans the
statement of hundreds of queues on every read), then ``--seconds`` more, with no reply yet. Counted
meanwhile: the database connections held (PostgreSQL: ``pg_stat_activity`` of the bench's role, sampled each
second, the largest; SQLite: the process's open descriptors of the database file), the statements the driver
ran (psycopg's ``Cursor.execute`` calls; SQLite's statement trace without transaction control and PRAGMAs),
and, on PostgreSQL, the rows the server read for them (``seq_tup_read`` + ``idx_tup_fetch`` of the schema's
tables in ``pg_stat_user_tables``, read after the triggers' connections closed, which flushes their
statistics). The triggerer then stops; a new one rebuilds the triggers while a responder endpoint answers
every request with ``context.reply``; each trigger's event is checked and each task resumes with
``execute_complete``: lost (no reply event) and misrouted (another request's answer) are counted.

The two layouts side by side (:func:`measure`, at the same size, after the tasks): a reply queue per
request, each looked at as the trigger confirms a reply (``ReplyQueue.find_reply``: an ordered read of at
most a few rows of its own queue), beside one shared reply queue holding as many replies, each request
looking for its own by correlation with an ordered read of the whole queue (the read the Queues page browses
with). One poll round, one look per request, in each: the rows the reads returned (every engine), the rows
PostgreSQL read and the statements the driver ran.
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
from collections.abc import Callable
from dataclasses import asdict, dataclass
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
BENCH_PREFIX = "bench.replies"
BENCH_SERVICE = "bench.service"
SHARED = "bench.replies.shared"
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


@dataclass
class ReplyLayoutCost:
    """One poll round, one look per waiting request, in each layout: the rows the reads returned (every
    engine), the rows the server read (PostgreSQL, else None) and the statements, counted, not timed."""

    engine: str
    requests: int
    rounds: int
    own_queue_round: int  # rows returned: a reply queue per request, the trigger's confirming read of each
    shared_queue_round: int  # rows returned: one shared queue, an ordered read of it per request
    own_rows_read: int | None = None
    shared_rows_read: int | None = None
    own_statements: int | None = None
    shared_statements: int | None = None

    @property
    def ratio(self) -> float:
        """Rows a shared queue's round returns over the per-request queues' (above 1: it reads more)."""
        return self.shared_queue_round / self.own_queue_round

    def line(self) -> str:
        return (
            f"{self.engine}: {self.requests} waiting requests, a poll round of one look each returns "
            f"{self.own_queue_round:,} rows with a reply queue per request and {self.shared_queue_round:,} "
            f"with one shared queue read by correlation: ratio {self.ratio:.1f} ({self.rounds} rounds)"
        )


def measure(
    url: str,
    requests: int = 200,
    rounds: int = 1,
    *,
    rows_read: Callable[[], int | None] | None = None,
    statements: Callable[[], int] | None = None,
    **transport_options: object,
) -> ReplyLayoutCost:
    """Both layouts holding ``requests`` answered requests (bench.* queues, dropped again); ``rows_read``
    and ``statements`` count what the server read and the driver ran so far, where they can."""
    from airflow_provider_sqlqueue.transport import OutgoingMessage, open_transport
    from airflow_provider_sqlqueue.transport import headers as h
    from airflow_provider_sqlqueue.transport.browse import browse
    from airflow_provider_sqlqueue.transport.reply_queue import READ_AT_ONCE, ReplyQueue
    from airflow_provider_sqlqueue.transport.requests import correlation_of_reply

    def reply(request_id: uuid.UUID) -> OutgoingMessage:
        return OutgoingMessage(b"{}", {h.CORRELATION_ID: str(request_id), h.MESSAGE_INTENT: "Reply"})

    request_ids = [uuid.uuid4() for _ in range(requests)]
    with open_transport(url, **transport_options) as transport:  # type: ignore[arg-type]
        engine = transport.dialect.name
        for name in ("error", BENCH_SERVICE, SHARED):
            transport.queue(name).create()
        answers = []
        for request_id in request_ids:
            reply_queue = ReplyQueue(transport, BENCH_PREFIX, request_id)
            reply_queue.send_request(BENCH_SERVICE, OutgoingMessage(b'{"item": "widget"}'))
            answers.append(str(reply_queue.queue.send(reply(request_id))))
        transport.queue(SHARED).send_batch([reply(request_id) for request_id in request_ids])

    def own_round(transport: Any) -> int:  # what each trigger's confirming read (find_reply) returns
        returned = 0
        for request_id in request_ids:
            looked = list(browse(ReplyQueue(transport, BENCH_PREFIX, request_id).queue, READ_AT_ONCE))
            assert any(correlation_of_reply(m.headers) == str(request_id) for m in looked)
            returned += len(looked)
        return returned

    def shared_round(transport: Any) -> int:
        returned, shared = 0, transport.queue(SHARED)
        for request_id in request_ids:
            looked = list(browse(shared, requests))
            assert any(correlation_of_reply(m.headers) == str(request_id) for m in looked)
            returned += len(looked)
        return returned

    def counted(layout: Callable[[Any], int]) -> tuple[int, int | None, int | None]:
        """Rows returned, statements run and rows the server read in one round; its connection closes
        before the server's count is read (a backend's statistics arrive when it exits)."""
        rows_before = None if rows_read is None else rows_read()
        with open_transport(url, **transport_options) as transport:  # type: ignore[arg-type]
            ran = None if statements is None else statements()
            returned = layout(transport)
            ran = None if ran is None or statements is None else statements() - ran
        rows_after = None if rows_read is None else rows_read()
        server = None if rows_before is None or rows_after is None else rows_after - rows_before
        return returned, ran, server

    own = shared = (0, None, None)
    for _ in range(rounds):
        own, shared = counted(own_round), counted(shared_round)
    with open_transport(url, **transport_options) as transport:  # type: ignore[arg-type]
        for request_id, answer in zip(request_ids, answers, strict=True):
            ReplyQueue(transport, BENCH_PREFIX, request_id).close("benchmark done", answered_by=answer)
        for name in ("error", BENCH_SERVICE, SHARED):
            transport.queue(name).drop()
    return ReplyLayoutCost(engine, requests, rounds, own[0], shared[0], own[2], shared[2], own[1], shared[1])


def worker(options: dict[str, Any]) -> dict[str, Any]:
    """One engine's measurement (see the module)."""
    logging.disable(logging.WARNING)
    engine = options["engine"]
    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(options["connection"])
    counter = StatementCounter(engine)
    from airflow.providers.common.compat.sdk import TaskDeferred

    from airflow_provider_sqlqueue.operators.request_reply import RequestReplyOperator
    from airflow_provider_sqlqueue.transport import Endpoint, open_transport
    from airflow_provider_sqlqueue.transport import headers as h
    from airflow_provider_sqlqueue.transport.browse import queue_tables
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
        key = shared_database_key(CONN_ID)
        warm_start = time.perf_counter()
        warm_until = warm_start + options["warmup_limit"]
        while time.perf_counter() < warm_until:  # until every watch is known and heard (a read per poll)
            await asyncio.sleep(poll)
            poller = SHARED_POLLERS.poller(key)
            if poller is not None and poller.reads >= options["warmup_polls"]:
                break
        poller = SHARED_POLLERS.poller(key)
        assert poller is not None, "no shared poller started"
        warm_reads, warmup_seconds = poller.reads, time.perf_counter() - warm_start
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
        rounds = poller.reads - warm_reads
        depth_reads = poller.statements
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return {
            "depth_reads": depth_reads,
            "poll_rounds": rounds,
            "warmup_reads": warm_reads,
            "warmup_seconds": warmup_seconds,
            "waiting_statements": ran,
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

    _progress(engine, f"{len(triggers)} tasks deferred")
    rows_before = rows_read()
    waiting = asyncio.run(wait())
    _progress(engine, "waited")
    rows_waiting = None if rows_before is None else rows_read() - rows_before  # all from the depth reads
    events = asyncio.run(answered())
    _progress(engine, f"{len(events)} events after the answers")
    lost = misrouted = 0
    failures: dict[str, int] = {}
    for item in items:
        event = events.get(item)
        if event is None or event.get("status") != "success":
            lost += 1
            reason = "no event" if event is None else f"{event.get('status')}: {event.get('message')}"
            failures[reason[:300]] = failures.get(reason[:300], 0) + 1
            continue
        result = operators[item].execute_complete(context(item), event)
        misrouted += result["body"] != {"item": item}

    with open_transport(options["url"], default_schema=schema) as transport:
        error_depth = transport.queue("error").count()
        reply_queues_left = sum(1 for a in queue_tables(transport) if a.table.startswith(PREFIX + "."))
    _progress(engine, "tasks resumed")
    layouts = measure(
        options["url"], requests, default_schema=schema, rows_read=rows_read, statements=lambda: counter.count
    )
    return {
        **waiting,
        "held_max": max(waiting["held_samples"]) if waiting["held_samples"] else None,
        "statements_per_request_sent": statements_per_request,
        "deferred": len(triggers),
        "replied": requests - lost,
        "lost": lost,
        "misrouted": misrouted,
        "failures": failures,
        "error_queue_depth": error_depth,
        "reply_queues_left": reply_queues_left,
        "waiting_rows_read": rows_waiting,
        "layouts": asdict(layouts),
    }


def _progress(engine: str, what: str) -> None:
    print(f"{datetime.now(timezone.utc):%H:%M:%S} {engine}: {what}", file=sys.stderr, flush=True)


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
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False, cwd=HERE.parent)
    if done.returncode != 0:
        raise RuntimeError(f"the {options['engine']} worker failed (its output is above)")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup-polls", type=int, default=8, help="reads of the poller before counting")
    parser.add_argument("--warmup-limit", type=float, default=300.0, help="seconds to wait for them")
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
                "warmup_limit": args.warmup_limit,
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
        run = f"request-reply-{started:%Y-%m-%d}"
        provenance.write_runs(args.json, run, meta, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
