"""Deferred sensors on one triggerer loop: a transport per trigger (before) beside the shared poller (after).

    /work/main/.venv/bin/python benchmarks/trigger_polling_bench.py [--sensors 1000] [--queues 100]
        [--poll 5] [--seconds 15] [--sends 5] [--json docs/data/trigger-polling.json]
    /work/main/.venv/bin/python benchmarks/render.py      # docs/sensor.md's generated block

**Before** is the package of ``BEFORE_COMMIT``, the parent of the commit that made the triggers of one
connection share a poller: each ``PendingMessagesTrigger`` built its own hook and transport. It is exported
with ``git archive`` and imported by a worker process; **after** is this checkout's package. Each engine runs
both, one after the other in one run, in a worker process of its own: ``--sensors`` triggers
(``min_messages=1``, ``poll_interval=--poll``) spread over ``--queues`` empty queues, each run in its own
task of one asyncio loop as Airflow's triggerer runs them. After ``--warmup-polls`` poll intervals of
warm-up (psycopg prepares a statement on its sixth run, and a triggerer runs for hours) the worker
measures for ``--seconds``: the database connections its triggers hold (PostgreSQL: ``pg_stat_activity`` of
the triggers' role, sampled each second, the largest; SQLite: the process's open descriptors of the
database file), the statements its driver ran per second (psycopg's ``Cursor.execute`` calls; SQLite's
statement trace without transaction control and PRAGMAs) and the process's CPU time per second. Then a
sender opens its own transport and sends ``--sends`` messages, one at a time, each to another queue: the
latency is from the send's commit to the first event of a trigger of that queue (no event within three poll
intervals counts as missed). PostgreSQL is a throwaway cluster with its default ``max_connections`` of 100,
the triggers and the sender logging in as one ordinary role; SQLite one file in WAL mode; Babelfish (in
``--engines`` with ``babelfish``) the TDS engine as the tests start it (tests/sqlserver_bed.py), reached
through Microsoft's ODBC Driver 18, with ``--babelfish-sensors`` over ``--babelfish-queues`` (fewer: each
of its logins costs a server process): its connections are the worker's open TCP sockets (it connects to
nothing else), its statements the ``execute`` calls of the worker's pyodbc cursors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import platform
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

BEFORE_COMMIT = "b8ed77c"  # the parent of the commit that made triggers share a poller
CONN_ID = "sqlqueue_bench"
ROLE = "bench_triggers"
SCHEMA = "bench"
UNCOUNTED = ("BEGIN", "COMMIT", "ROLLBACK", "PRAGMA", "SAVEPOINT", "RELEASE", "END")


class _CountedCursor:
    """A pyodbc cursor whose ``execute`` calls are counted (pyodbc's types take no new attributes)."""

    def __init__(self, cursor: Any, counter: StatementCounter) -> None:
        object.__setattr__(self, "_cursor", cursor)
        object.__setattr__(self, "_counter", counter)

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        self._counter.count += 1
        self._cursor.execute(*args, **kwargs)
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._cursor, name, value)

    def __iter__(self) -> Any:
        return iter(self._cursor)


class _CountedConnection:
    """A pyodbc connection whose cursors count their statements."""

    def __init__(self, connection: Any, counter: StatementCounter) -> None:
        object.__setattr__(self, "_connection", connection)
        object.__setattr__(self, "_counter", counter)

    def cursor(self) -> _CountedCursor:
        return _CountedCursor(self._connection.cursor(), self._counter)

    def execute(self, *args: Any, **kwargs: Any) -> _CountedCursor:
        return self.cursor().execute(*args, **kwargs)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._connection, name, value)

    def __enter__(self) -> _CountedConnection:
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._connection.__exit__(*exc)


class StatementCounter:
    """Counts the statements the driver runs in this process (see the module)."""

    def __init__(self, engine: str) -> None:
        self.count = 0
        if engine == "babelfish":
            import pyodbc

            connect = pyodbc.connect

            def counted_connect(*args: Any, **kwargs: Any) -> Any:
                return _CountedConnection(connect(*args, **kwargs), self)

            pyodbc.connect = counted_connect
        elif engine == "postgresql":
            import psycopg

            original = psycopg.Cursor.execute
            counter = self

            def execute(cursor: Any, *args: Any, **kwargs: Any) -> Any:
                counter.count += 1
                return original(cursor, *args, **kwargs)

            psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        else:
            connect = sqlite3.connect

            def counted(*args: Any, **kwargs: Any) -> Any:
                connection = connect(*args, **kwargs)
                connection.set_trace_callback(self._trace)
                return connection

            sqlite3.connect = counted  # type: ignore[assignment]

    def _trace(self, statement: str) -> None:
        if not statement.lstrip().upper().startswith(UNCOUNTED):
            self.count += 1


def _held_postgres(checker_url: str) -> int | None:
    import psycopg

    try:
        with psycopg.connect(checker_url, autocommit=True) as checker:
            row = checker.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (ROLE,)
            ).fetchone()
    except Exception:
        return None
    return int(row[0]) if row else None


def _held_sqlite(database: str) -> int:
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == database:
                held += 1
        except OSError:
            continue
    return held


def _held_tcp() -> int:
    """This process's open TCP connections: the worker connects to nothing but the server under test."""
    tests = str(HERE.parent / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from own_connections import own_tcp_ports

    return len(own_tcp_ports())


def worker(options: dict[str, Any]) -> dict[str, Any]:
    """One measurement with whichever package ``sys.path`` finds first."""
    logging.disable(logging.WARNING)  # a transport per trigger logs each refused connection
    engine = options["engine"]
    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(options["connection"])
    counter = StatementCounter(engine)
    from airflow_provider_sqlqueue.transport import open_transport
    from airflow_provider_sqlqueue.triggers.queue import PendingMessagesTrigger

    names = [f"q{n:04d}" for n in range(options["queues"])]
    with open_transport(options["url"], default_schema=options.get("schema")) as setup:
        setup.queue("error").create()
        for name in names:
            setup.queue(name).create()

    def held() -> int | None:
        if engine == "postgresql":
            return _held_postgres(options["checker_url"])
        if engine == "babelfish":
            return _held_tcp()
        return _held_sqlite(options["database"])

    async def main() -> dict[str, Any]:
        fired: dict[str, float] = {}
        errors = 0

        async def one(trigger: PendingMessagesTrigger) -> None:
            nonlocal errors
            async for event in trigger.run():
                if event.payload.get("status") == "success":
                    fired.setdefault(event.payload["queue"], time.perf_counter())
                else:
                    errors += 1
                return

        poll = options["poll"]
        tasks = [
            asyncio.create_task(
                one(
                    PendingMessagesTrigger(
                        names[n % len(names)], sqlqueue_conn_id=CONN_ID, poll_interval=poll
                    )
                )
            )
            for n in range(options["sensors"])
        ]
        await asyncio.sleep(options.get("warmup_polls", 2) * poll)
        samples: list[int] = []
        statements, usage, started = (
            counter.count,
            resource.getrusage(resource.RUSAGE_SELF),
            time.perf_counter(),
        )
        checker_statements = 0
        while time.perf_counter() - started < options["seconds"]:
            await asyncio.sleep(1.0)
            sample = await asyncio.to_thread(held)
            checker_statements += 1 if engine == "postgresql" else 0
            if sample is not None:
                samples.append(sample)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
        ran = counter.count - statements - checker_statements
        cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)

        latencies: list[float | None] = []
        sender_error = None
        try:
            sender = await asyncio.to_thread(
                open_transport, options["url"], default_schema=options.get("schema")
            )
        except Exception as error:
            sender, sender_error = None, f"{type(error).__name__}: {error}"
        if sender is not None:
            try:
                for n in range(options["sends"]):
                    name = names[n]
                    try:
                        await asyncio.to_thread(sender.queue(name).send, b"wake up")
                    except Exception as error:
                        sender_error = f"{type(error).__name__}: {error}"
                        break
                    sent = time.perf_counter()
                    while name not in fired and time.perf_counter() - sent < 3 * poll:
                        await asyncio.sleep(0.001)
                    latencies.append(fired[name] - sent if name in fired else None)
            finally:
                await asyncio.to_thread(sender.close)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return {
            "held_max": max(samples) if samples else None,
            "held_samples": samples,
            "statements_per_second": ran / wall,
            "cpu_per_second": cpu / wall,
            "measured_seconds": wall,
            "latencies_ms": [None if v is None else round(v * 1000, 1) for v in latencies],
            "sender_error": sender_error[:300] if sender_error else None,
            "error_events": errors,
        }

    return asyncio.run(main())


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


def _run_worker(code_root: Path, options: dict[str, Any]) -> dict[str, Any]:
    environment = {**os.environ, "PYTHONPATH": str(code_root)}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(options)]
    done = subprocess.run(
        command, env=environment, capture_output=True, text=True, check=False, cwd=code_root
    )
    if done.returncode != 0:
        raise RuntimeError(f"worker from {code_root} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _targets(engine: str, folder: Path, code: str, cluster: Any, bed: Any) -> dict[str, Any]:
    if engine == "babelfish":
        import pyodbc

        schema = f"{SCHEMA}_{code}"
        with pyodbc.connect(bed.drivers["msodbc"], autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA [{schema}]")
        return {
            "url": bed.drivers["msodbc"],
            "schema": schema,
            "connection": {
                "conn_type": "sqlqueue",
                "extra": {
                    "engine": "sqlserver",
                    "default_schema": schema,
                    "odbc_connect": bed.drivers["msodbc"],
                },
            },
        }
    if engine == "sqlite":
        database = str(folder / f"{code}.db")
        return {
            "url": f"sqlite:///{database}",
            "database": database,
            "connection": {"conn_type": "sqlqueue", "host": database, "extra": {"engine": "sqlite"}},
        }
    database = f"bench_{code}"
    cluster.psql(f'CREATE DATABASE "{database}" OWNER "{ROLE}"')
    cluster.psql(f'CREATE SCHEMA "{SCHEMA}" AUTHORIZATION "{ROLE}"', database=database)
    return {
        "url": cluster.url(database, user=ROLE, password=ROLE),
        "schema": SCHEMA,
        "checker_url": cluster.url(database),
        "connection": {
            "conn_type": "sqlqueue",
            "host": "127.0.0.1",
            "port": cluster.port,
            "login": ROLE,
            "password": ROLE,
            "schema": database,
            "extra": {"engine": "postgresql", "default_schema": SCHEMA},
        },
    }


@contextlib.contextmanager
def _babelfish(wanted: bool, meta: dict[str, Any]) -> Iterator[Any]:
    """The TDS engine as the tests start it, reached through ODBC Driver 18 (None when not wanted)."""
    if not wanted:
        yield None
        return
    sys.path.insert(0, str(HERE.parent / "tests"))
    from sqlserver_bed import register_msodbc, start_bed

    register_msodbc()  # the workers inherit ODBCSYSINI
    os.environ["AIRFLOW__PROVIDERS_ODBC__ALLOW_DRIVER_IN_EXTRA"] = "True"  # the bed's string names its driver
    bed, reason = start_bed()
    if bed is None or "msodbc" not in bed.drivers:
        raise SystemExit(f"Babelfish: {reason or bed.missing.get('msodbc') if bed else reason}")
    try:
        import pyodbc

        with pyodbc.connect(bed.drivers["msodbc"], autocommit=True) as probe:
            version = probe.execute(
                "SELECT CAST(SERVERPROPERTY('BabelfishVersion') AS varchar(40))"
            ).fetchone()
        meta["babelfish_settings"] = (
            f"{version[0] if version else ''}, the TDS engine as tests/sqlserver_bed.py starts it, "
            "through ODBC Driver 18"
        )
        yield bed
    finally:
        bed.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sensors", type=int, default=1000)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--poll", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--warmup-polls", type=int, default=8)
    parser.add_argument("--sends", type=int, default=5)
    parser.add_argument("--babelfish-sensors", type=int, default=100)
    parser.add_argument("--babelfish-queues", type=int, default=20)
    parser.add_argument("--engines", default="postgresql,sqlite,babelfish")
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
        "before_commit": BEFORE_COMMIT,
        "before_how": "the parent commit's package, exported with git archive and run in the same run",
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "sensors": args.sensors,
        "queues": args.queues,
        "poll_interval": args.poll,
        "seconds": args.seconds,
        "sends": args.sends,
        "babelfish_sensors": args.babelfish_sensors,
        "babelfish_queues": args.babelfish_queues,
        "warmup_polls": args.warmup_polls,
        "postgresql_settings": "throwaway cluster, max_connections=100 (PostgreSQL's default)",
        "sqlite_settings": "journal_mode=WAL",
        "load_average_before": os.getloadavg(),
    }
    engines = args.engines.split(",")
    results = []
    with (
        tempfile.TemporaryDirectory(prefix="trigger-bench-") as scratch,
        throwaway_postgres(max_connections=100) as cluster,
        _babelfish("babelfish" in engines, meta) as bed,
    ):
        folder = Path(scratch)
        meta["machine"] = machine(folder)
        cluster.psql(f"CREATE ROLE \"{ROLE}\" LOGIN PASSWORD '{ROLE}'")
        codes = {"before": _export_before(folder / "before"), "after": HERE.parent}
        for engine in engines:
            sensors, queues = (
                (args.babelfish_sensors, args.babelfish_queues)
                if engine == "babelfish"
                else (args.sensors, args.queues)
            )
            for code in ("before", "after"):
                options = {
                    "engine": engine,
                    "sensors": sensors,
                    "queues": queues,
                    "poll": args.poll,
                    "seconds": args.seconds,
                    "sends": args.sends,
                    "warmup_polls": args.warmup_polls,
                    **_targets(engine, folder, code, cluster, bed),
                }
                result = _run_worker(codes[code], options)
                results.append(
                    {"engine": engine, "code": code, "sensors": sensors, "queues": queues, **result}
                )
                print(
                    f"{engine} {code}: held {result['held_max']}, {result['statements_per_second']:.1f} "
                    f"statements/s, cpu {result['cpu_per_second']:.2f}, latencies {result['latencies_ms']}, "
                    f"sender {result['sender_error']}"
                )
    meta["load_average_after"] = os.getloadavg()
    meta["wall_seconds"] = round((datetime.now(timezone.utc) - started).total_seconds(), 1)
    meta["source"] = (
        f"benchmarks/trigger_polling_bench.py --sensors {args.sensors} --queues {args.queues} "
        f"--poll {args.poll} --seconds {args.seconds} --warmup-polls {args.warmup_polls} "
        f"--sends {args.sends} --babelfish-sensors {args.babelfish_sensors} "
        f"--babelfish-queues {args.babelfish_queues} --engines {args.engines}, run at commit {meta['commit']}"
    )
    if args.json:
        run = f"trigger-polling-{started:%Y-%m-%d}"
        provenance.write_runs(args.json, run, meta, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
