"""What a batching pump costs whose handler writes one row on the lent connection, against its ceiling
(issue 62, item 4): messages per second of the pump beside a raw-driver loop doing the same work, and the
pump of ``BEFORE_COMMIT`` (a savepoint and its release per message, each a round trip of its own), side by
side in one run, as ratios.

    /work/main/.venv/bin/python benchmarks/pump_savepoint_bench.py [--messages 5000] [--batch 50]
        [--rounds 3] [--engines postgresql,sqlite] [--commit HEAD] [--json docs/data/pump-savepoints.json]
    /work/main/.venv/bin/python benchmarks/render.py      # docs/exactly-once.md's generated block

Per engine (a throwaway PostgreSQL cluster with fsync and synchronous_commit on; a SQLite file in WAL mode,
synchronous=FULL, as the transport sets them) and per round, each case drains a queue pre-filled (not
timed) with ``--messages`` messages of 1 KB into a table ``handled`` through one connection:

- **ceiling**: the raw driver, no package: per batch one transaction with the queue's own receive
  statement (``DELETE`` of up to ``--batch`` rows, RETURNING them) and one ``INSERT INTO handled`` per row,
  then the commit;
- **pump** (this checkout) and **before** (``BEFORE_COMMIT``'s package, exported with ``git archive``):
  ``MessagePump(queue, handler, batch_size=--batch)`` with one receive at a time, whose handler runs the
  same ``INSERT`` on ``context.connection``.

Each case runs in a fresh worker process that opens its connection before the clock starts; the order of
the cases rotates from round to round. After each case the run checks that the queue is empty and that
``handled`` holds every pre-filled Id exactly once. After the timed rounds each case drains a small queue
once more with the driver's own trace on its one connection, from before the first receive to the end
(psycopg's libpq protocol trace, sqlite3's statement callback), and counts what went to the database per
message, everything included: round trips on PostgreSQL (each time the client waited for the server),
statements on SQLite (no round trips: the engine runs in the process). The JSON records the commits, the
machine and its load.
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

BEFORE_COMMIT = (
    "0a42ca4"  # the parent of the commit that sent the savepoint with the handler's first statement
)
CASES = ("ceiling", "pump", "before")
DEFAULT_MESSAGES = 5_000
DEFAULT_BATCH = 50
DEFAULT_ROUNDS = 3
TRACED_MESSAGES = 200  # drained once per code with the driver's trace on, not timed
HANDLED = "handled"
INSERT = {
    "postgresql": "INSERT INTO handled (id) VALUES (%s)",
    "sqlite": "INSERT INTO handled (id) VALUES (?)",
}


# ---- the worker: one case, in a fresh process -----------------------------------------------------
def _ceiling(task: dict[str, Any]) -> dict[str, Any]:
    """The raw driver's loop: receive a batch, insert a row per message, commit; until the queue is empty."""
    from core_bench import raw_connect

    engine = task["engine"]
    connection = raw_connect(engine, task["raw_target"])
    cursor = connection.cursor()
    begin = "BEGIN IMMEDIATE" if engine == "sqlite" else None
    insert, receive, limit = INSERT[engine], task["receive"], (task["batch"],)
    taken = 0
    with tempfile.TemporaryDirectory(prefix="pump-savepoint-trace-") as scratch:
        tracer = _Tracer(engine, Path(scratch))
        if task.get("traced"):
            tracer.start(connection)
        started = time.perf_counter()
        while True:
            if begin:
                cursor.execute(begin)
            cursor.execute(receive, limit)
            rows = cursor.fetchall()
            for row in rows:
                cursor.execute(insert, (str(row[0]),))
            connection.commit()
            if not rows:
                break
            taken += len(rows)
        seconds = time.perf_counter() - started
        result: dict[str, Any] = {"seconds": seconds, "messages": taken}
        if task.get("traced"):
            result["traced"] = tracer.count()
    connection.close()
    return result


class _Tracer:
    """Counts what the driver sends on the lent connection from the first handler call on: round trips
    (PostgreSQL: the server's ReadyForQuery answers in libpq's protocol trace) or statements (SQLite)."""

    def __init__(self, engine: str, folder: Path) -> None:
        self.engine = engine
        self.path = folder / "trace.txt"
        self.statements = 0
        self.file: Any = None

    def start(self, driver: Any) -> None:
        if self.file is not None:
            return
        if self.engine == "postgresql":
            from psycopg import pq

            self.file = self.path.open("w")
            driver.pgconn.trace(self.file.fileno())
            driver.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        else:
            self.file = True

            def count(_statement: str) -> None:
                self.statements += 1

            driver.set_trace_callback(count)

    def count(self) -> int:
        if self.engine == "postgresql":
            self.file.close()
            return round_trips(self.path.read_text())
        return self.statements


def round_trips(trace: str) -> int:
    """The times the client waited for the server in a libpq protocol trace: each run of messages it sent
    (``F`` lines: a simple query, or Parse/Bind/Execute up to a Sync or Flush) followed by the server's
    answers (``B`` lines) is one round trip."""
    waits, sending = 0, False
    for line in trace.splitlines():
        if line.startswith("F"):
            sending = True
        elif line.startswith("B") and sending:
            waits, sending = waits + 1, False
    return waits


def _pump(task: dict[str, Any]) -> dict[str, Any]:
    """This code's batching pump draining the queue, one receive at a time, its handler inserting a row.
    Traced, on a pool of one connection, traced from before the first receive."""
    from airflow_provider_sqlqueue.transport import MessagePump, open_transport

    engine, traced = task["engine"], task.get("traced", False)
    insert = INSERT[engine]
    calls = 0

    def handler(message: Any, context: Any) -> None:
        nonlocal calls
        calls += 1
        context.connection.execute(insert, (str(message.id),))

    pool = {"pool_size": 1, "max_overflow": 0} if traced else {}
    with tempfile.TemporaryDirectory(prefix="pump-savepoint-trace-") as scratch:
        tracer = _Tracer(engine, Path(scratch))
        with open_transport(task["url"], **pool) as transport:
            queue = transport.queue(task["queue"])
            with transport.connection() as connection:  # opened before the clock starts
                if traced:
                    tracer.start(connection.dbapi_connection)
            pump = MessagePump(queue, handler, batch_size=task["batch"], max_concurrency=1, idle_delay=0.1)
            started = time.perf_counter()
            stats = pump.run(until_empty=True, timeout=600)
            seconds = time.perf_counter() - started
            counted = tracer.count() if traced else None
    if stats.processed != task["messages"] or calls != task["messages"]:
        raise RuntimeError(f"the pump processed {stats.processed} in {calls} handler calls")
    result: dict[str, Any] = {"seconds": seconds, "messages": stats.processed, "receives": stats.receives}
    if traced:
        result["traced"] = counted
    return result


def worker(task: dict[str, Any]) -> dict[str, Any]:
    return _ceiling(task) if task["case"] == "ceiling" else _pump(task)


# ---- the parent: beds, rounds, checks --------------------------------------------------------------
def _export(commit: str, folder: Path) -> Path:
    """The package as of ``commit``, untouched by whatever the working tree holds."""
    archive = subprocess.run(
        ["git", "archive", commit, "airflow_provider_sqlqueue"],
        cwd=HERE.parent,
        capture_output=True,
        check=True,
    ).stdout
    folder.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def _run_worker(code_root: Path, task: dict[str, Any]) -> dict[str, Any]:
    environment = {**os.environ, "PYTHONPATH": str(code_root)}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(task)]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{task['case']} worker from {code_root} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _prepare(bench: Any, name: str, messages: int) -> tuple[dict[str, Any], set[str]]:
    """A fresh queue of ``messages`` and an empty ``handled`` table; the statements and the Ids."""
    statements, ids = bench.provision(name, messages)
    bench.admin.execute(f"DROP TABLE IF EXISTS {HANDLED}")
    bench.admin.execute(f"CREATE TABLE {HANDLED} (id VARCHAR(40) NOT NULL)")
    if bench.engine == "sqlite":
        bench.admin.commit()
    bench.settle(statements["table"])
    return statements, ids


def _check(bench: Any, case: str, statements: dict[str, Any], ids: set[str]) -> None:
    left = bench.count(statements["table"])
    rows = [str(row[0]) for row in bench.query(f"SELECT id FROM {HANDLED}")]
    if left or len(rows) != len(ids) or set(rows) != ids:
        raise RuntimeError(f"{case}: {left} left queued, {len(rows)} handled rows for {len(ids)} messages")


def measure_engine(
    engine: str, bench: Any, codes: dict[str, Path], messages: int, batch: int, rounds: int
) -> dict[str, Any]:
    """Every case ``rounds`` times in rotating order, then the traced drain of each code."""
    seconds: dict[str, list[float]] = {case: [] for case in CASES}
    for round_number in range(rounds):
        order = CASES[round_number % len(CASES) :] + CASES[: round_number % len(CASES)]
        for case in order:
            name = f"savepoint_bench_{case}"
            statements, ids = _prepare(bench, name, messages)
            task = {
                "case": case,
                "engine": engine,
                "url": bench.url,
                "raw_target": bench.raw_target,
                "queue": name,
                "receive": statements["receive_batch"],
                "batch": batch,
                "messages": messages,
            }
            result = _run_worker(codes.get(case, codes["pump"]), task)
            _check(bench, case, statements, ids)
            bench.drop(name)
            seconds[case].append(result["seconds"])
            print(
                f"{engine} round {round_number + 1} {case}: {messages / result['seconds']:,.0f} msgs/s",
                flush=True,
            )
    traced: dict[str, Any] = {}
    for case in CASES:
        name = f"savepoint_trace_{case}"
        statements, ids = _prepare(bench, name, TRACED_MESSAGES)
        task = {
            "case": case,
            "engine": engine,
            "url": bench.url,
            "raw_target": bench.raw_target,
            "queue": name,
            "batch": batch,
            "messages": TRACED_MESSAGES,
            "traced": True,
        }
        task["receive"] = statements["receive_batch"]
        result = _run_worker(codes.get(case, codes["pump"]), task)
        _check(bench, case, statements, ids)
        bench.drop(name)
        traced[case] = {
            "messages": TRACED_MESSAGES,
            "counted": result["traced"],
            "receives": result.get("receives"),
        }
        print(f"{engine} {case}: {result['traced']} counted for {TRACED_MESSAGES} messages", flush=True)
    return {"seconds": seconds, "traced": traced}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES)
    parser.add_argument("--batch", type=int, default=DEFAULT_BATCH)
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument("--engines", default="postgresql,sqlite")
    parser.add_argument("--json", type=Path, default=None, help="where to write the results")
    parser.add_argument(
        "--commit",
        default="HEAD",
        help="the commit whose package the pump case runs (exported with git archive)",
    )
    parser.add_argument("--worker", metavar="TASK", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0

    import contextlib

    import provenance
    from core_bench import EngineBench
    from postgres_bed import throwaway_postgres
    from run import machine

    started = datetime.now(timezone.utc)
    engines = [engine.strip() for engine in args.engines.split(",") if engine.strip()]
    meta: dict[str, Any] = {
        "date": started.isoformat(timespec="seconds"),
        "commit": None,  # the pump's code, below
        "script_commit": provenance.commit(),  # the checkout this script and its workers ran from
        "before_commit": BEFORE_COMMIT,
        "python": platform.python_version(),
        "messages": args.messages,
        "batch": args.batch,
        "rounds": args.rounds,
        "traced_messages": TRACED_MESSAGES,
        "postgresql_settings": "throwaway_postgres(durable=True): fsync=on, synchronous_commit=on",
        "sqlite_settings": "WAL, synchronous=FULL",
        "load_average_before": os.getloadavg(),
    }
    results: list[dict[str, Any]] = []
    run = f"pump-savepoints-{started:%Y-%m-%d}"
    with tempfile.TemporaryDirectory(prefix="pump-savepoint-bench-") as scratch:
        folder = Path(scratch)
        meta["machine"] = machine(folder)
        commit = subprocess.run(
            ["git", "rev-parse", "--short", args.commit],
            cwd=HERE.parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        codes = {"pump": _export(commit, folder / "pump")}
        meta["commit"] = commit
        codes["before"] = _export(BEFORE_COMMIT, folder / "before")
        sys.path.insert(0, str(codes["pump"]))  # the parent provisions with the measured package too
        for engine in engines:
            with contextlib.ExitStack() as stack:
                if engine == "postgresql":
                    cluster = stack.enter_context(throwaway_postgres(durable=True))
                    url = raw_target = cluster.url()
                else:
                    raw_target = str(folder / "bench.db")
                    url = f"sqlite:///{raw_target}"
                bench = EngineBench(engine, url, raw_target)
                stack.callback(bench.close)
                meta.setdefault("versions", {})[engine] = bench.version()
                measured = measure_engine(engine, bench, codes, args.messages, args.batch, args.rounds)
            for case, values in measured["seconds"].items():
                rates = [args.messages / value for value in values]
                results.append(
                    {
                        "run": run,
                        "engine": engine,
                        "case": case,
                        "msgs_per_s": provenance.spread(rates),
                        "rounds": rates,
                        **({"traced": measured["traced"][case]} if case in measured["traced"] else {}),
                    }
                )
    meta["load_average_after"] = os.getloadavg()
    meta["seconds"] = round((datetime.now(timezone.utc) - started).total_seconds(), 1)
    meta["source"] = (
        f"benchmarks/pump_savepoint_bench.py --messages {args.messages} --batch {args.batch} "
        f"--rounds {args.rounds} --engines {','.join(engines)} --commit {meta['commit']}"
    )
    for row in results:
        ceiling = next(r for r in results if r["engine"] == row["engine"] and r["case"] == "ceiling")
        print(
            f"{row['engine']} {row['case']}: {row['msgs_per_s']['median']:,.0f} msgs/s, "
            f"{row['msgs_per_s']['median'] / ceiling['msgs_per_s']['median']:.2f}x of the ceiling"
        )
    if args.json:
        provenance.write_runs(args.json, run, meta, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
