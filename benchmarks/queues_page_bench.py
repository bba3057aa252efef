"""What one load of the Queues page and one queue's reads in a trigger poll cost on deep queues, before and
after they were bounded (issue 42), side by side in one run on PostgreSQL.

    /work/main/.venv/bin/python benchmarks/queues_page_bench.py [--queued 1000000] [--failed 100000]
        [--rounds 3] [--json docs/data/queues-page.json]
    /work/main/.venv/bin/python benchmarks/render.py      # docs/operating.md's generated block

One throwaway PostgreSQL cluster (fsync and synchronous_commit on) holds a queue ``orders`` of
``--queued`` messages and an error queue ``error`` of ``--failed`` failed messages (in ``GROUPS`` failure
groups, NServiceBus failure headers), each row with a ``BODY_BYTES``-byte body, filled by ``INSERT ...
SELECT generate_series`` in one statement per table and then analysed. Both measurements only read.

- **page**: what the API server does for one ``/sqlqueue/api/queues`` request (and the page): open the
  connection's transport, ``queues_overview(transport, "error")``, close it.
- **poll**: the reads one queue gets in a trigger poll (``count_mode="estimate"``), after a first one: the
  depth estimate, then ``queue_gauges(queue, depth)`` (oldest message's age, error queue's count), run as
  the separate statements they are on their own. The triggers do not run them one by one any more: the
  triggers of one connection id in one triggerer loop share one poller, which reads every watched queue's
  bounds, oldest headers and error queue's bounds in one statement per poll, pushed by ``LISTEN`` on
  PostgreSQL (``transport/shared_poll.py``, ``transport/depth_reads.py``; ``trigger_polling_bench.py``
  measures it). What is timed here is the cost of one queue's share of that read, which does not grow
  with the queue's length.

**Before** is the package of commit ``BEFORE_COMMIT`` (an exact ``count(*)`` of every queue, the oldest
message read with its body, every error-queue header paged through and grouped, the error queue counted
exactly each poll), exported with ``git archive`` and imported by a worker process; **after** is this
checkout's package (depth estimates, the oldest row's headers only, the newest 1,000 error rows grouped).
Each round runs both, back to back in alternating order, in fresh worker processes; each worker times one
warm-up call, then the measured one. The JSON records the commits, the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

BEFORE_COMMIT = "2f0fe83"  # the parent of the commit that bounded the page's and the trigger's reads
BODY_BYTES = 1024
GROUPS = 5
DEFAULT_QUEUED = 1_000_000
DEFAULT_FAILED = 100_000
DEFAULT_ROUNDS = 3
SCHEMA = "bench"
TIME_TEXT = "to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS:US') || ' Z'"


def fill_sql(queued: int, failed: int) -> list[str]:
    """The statements that fill ``orders`` and ``error`` (created by the package beforehand)."""
    body = f"convert_to(repeat('x', {BODY_BYTES}), 'UTF8')"
    sent = (
        "json_build_object('NServiceBus.MessageId', id::text, 'NServiceBus.ContentType', 'application/json', "
        "'NServiceBus.EnclosedMessageTypes', 'Sales.OrderAccepted, Sales', "
        f"'NServiceBus.TimeSent', {TIME_TEXT})"
    )
    failure = (
        "json_build_object('NServiceBus.MessageId', id::text, 'NServiceBus.ContentType', 'application/json', "
        f"'NServiceBus.TimeSent', {TIME_TEXT}, 'NServiceBus.FailedQ', 'payments@[{SCHEMA}]', "
        f"'NServiceBus.TimeOfFailure', {TIME_TEXT}, "
        "'NServiceBus.ExceptionInfo.ExceptionType', 'ConnectionError', "
        f"'NServiceBus.ExceptionInfo.Message', 'payment service unreachable (' || (n % {GROUPS}) || ')', "
        "'NServiceBus.ExceptionInfo.StackTrace', repeat('  at Payments.Charge()\n', 20))"
    )

    def insert(table: str, rows: int, headers: str) -> str:
        return (
            f'INSERT INTO "{SCHEMA}"."{table}" (Id, Recoverable, Headers, Body) '
            f"SELECT id, true, {headers}::text, {body} "
            f"FROM (SELECT n, gen_random_uuid() AS id FROM generate_series(1, {rows}) AS n) AS s"
        )

    return [
        insert("orders", queued, sent),
        insert("error", failed, failure),
        f'ANALYZE "{SCHEMA}"."orders"',
        f'ANALYZE "{SCHEMA}"."error"',
    ]


def worker(url: str) -> dict[str, Any]:
    """One measurement with whichever package ``sys.path`` finds first: a warm-up, then the timed calls."""
    from airflow_provider_sqlqueue.transport import open_transport
    from airflow_provider_sqlqueue.transport.overview import queue_gauges, queues_overview

    def page() -> tuple[float, Any]:
        started = time.perf_counter()
        with open_transport(url, default_schema=SCHEMA) as transport:
            overview = queues_overview(transport, "error")
        return time.perf_counter() - started, overview

    def poll(queue: Any) -> tuple[float, Any]:
        started = time.perf_counter()
        depth = queue.peek_estimate()
        gauges = queue_gauges(queue, depth)
        return time.perf_counter() - started, gauges

    page()
    page_seconds, overview = page()
    with open_transport(url, default_schema=SCHEMA) as transport:
        orders = transport.queue("orders")
        poll(orders)
        poll_seconds, gauges = poll(orders)
    depths = {state.address.table: state.messages for state in overview.queues}
    return {
        "page_seconds": page_seconds,
        "poll_seconds": poll_seconds,
        "depths": depths,
        "groups": len(overview.failed or []),
        "grouped": sum(group.count for group in overview.failed or []),
        "gauges": {"depth": gauges.depth, "failed": gauges.failed, "oldest": gauges.oldest_age_seconds},
    }


def _export_before(folder: Path) -> Path:
    archive = subprocess.run(
        ["git", "archive", BEFORE_COMMIT, "airflow_provider_sqlqueue"],
        cwd=HERE.parent,
        capture_output=True,
        check=True,
    ).stdout
    folder.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def _run_worker(code_root: Path, url: str) -> dict[str, Any]:
    environment = {**os.environ, "PYTHONPATH": str(code_root)}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", url]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"worker from {code_root} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def check(code: str, result: dict[str, Any], queued: int, failed: int) -> None:
    """Both codes must see the tables as filled: every depth, every failure (before) or the newest
    1,000 of them (after), the error queue's size in the gauges."""
    if result["depths"].get("orders") != queued or result["depths"].get("error") != failed:
        raise RuntimeError(f"{code} saw depths {result['depths']}, not {queued:,} and {failed:,}")
    if result["gauges"]["depth"] != queued or result["gauges"]["failed"] != failed:
        raise RuntimeError(f"{code}'s poll saw {result['gauges']}")
    grouped = failed if code == "before" else min(failed, 1000)
    if result["grouped"] != grouped or result["groups"] != min(GROUPS, grouped):
        raise RuntimeError(f"{code} grouped {result['grouped']:,} rows in {result['groups']} groups")


def measure(cluster: Any, codes: dict[str, Path], queued: int, failed: int, rounds: int) -> dict[str, Any]:
    """Fill the tables, then time both codes ``rounds`` times; the seconds per code and what it took."""
    from airflow_provider_sqlqueue.transport import open_transport

    url = cluster.url()
    cluster.psql(f'CREATE SCHEMA "{SCHEMA}"')
    with open_transport(url, default_schema=SCHEMA) as transport:
        for name in ("orders", "error"):
            transport.queue(name).create()
    started = time.perf_counter()
    for statement in fill_sql(queued, failed):
        cluster.psql(statement)
    fill_seconds = time.perf_counter() - started
    seconds: dict[str, dict[str, list[float]]] = {}
    for round_number in range(rounds):
        order = ["before", "after"] if round_number % 2 == 0 else ["after", "before"]
        for code in order:
            result = _run_worker(codes[code], url)
            check(code, result, queued, failed)
            for what in ("page", "poll"):
                seconds.setdefault(code, {}).setdefault(what, []).append(result[f"{what}_seconds"])
            print(
                f"round {round_number + 1} {code}: page {result['page_seconds']:.3f} s, "
                f"poll {result['poll_seconds']:.4f} s"
            )
    return {"fill_seconds": round(fill_seconds, 1), "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queued", type=int, default=DEFAULT_QUEUED)
    parser.add_argument("--failed", type=int, default=DEFAULT_FAILED)
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument("--json", type=Path, default=None, help="where to write the results")
    parser.add_argument("--worker", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker)))
        return 0

    import provenance
    from postgres_bed import throwaway_postgres
    from run import machine

    started = datetime.now(timezone.utc)
    meta: dict[str, Any] = {
        "date": started.isoformat(timespec="seconds"),
        "commit": provenance.commit(),
        "before_commit": BEFORE_COMMIT,
        "before_how": "the package of the commit before the reads were bounded, exported with git archive "
        "and run in the same run",
        "python": platform.python_version(),
        "queued": args.queued,
        "failed": args.failed,
        "failure_groups": GROUPS,
        "rounds": args.rounds,
        "body_bytes": BODY_BYTES,
        "postgresql_settings": "throwaway_postgres(durable=True): fsync=on, synchronous_commit=on",
        "load_average_before": os.getloadavg(),
    }
    with (
        tempfile.TemporaryDirectory(prefix="queues-page-bench-") as scratch,
        throwaway_postgres(durable=True) as cluster,
    ):
        folder = Path(scratch)
        meta["machine"] = machine(folder)
        codes = {"before": _export_before(folder / "before"), "after": HERE.parent}
        measured = measure(cluster, codes, args.queued, args.failed, args.rounds)
    meta["fill_seconds"] = measured["fill_seconds"]
    meta["load_average_after"] = os.getloadavg()
    meta["seconds"] = round((datetime.now(timezone.utc) - started).total_seconds(), 1)
    meta["source"] = (
        f"benchmarks/queues_page_bench.py --queued {args.queued} --failed {args.failed} "
        f"--rounds {args.rounds}, run at commit {meta['commit']}"
    )
    run = f"queues-page-{started:%Y-%m-%d}"
    results = [
        {"run": run, "code": code, "what": what, "seconds": provenance.spread(values), "rounds": values}
        for code, by_what in measured["seconds"].items()
        for what, values in by_what.items()
    ]
    if args.json:
        provenance.write_runs(args.json, run, meta, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
