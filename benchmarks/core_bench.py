"""Core throughput benchmark: this project's transport against the raw driver running the same SQL.

    python benchmarks/core_bench.py [--n 20000] [--n-single 5000] [--repeat 3] [--quick] [--json out.json]

One run starts one throwaway PostgreSQL cluster with durable settings (fsync and synchronous_commit on)
and one SQLite file (WAL, synchronous=FULL) in a temporary folder, and measures with 1 KB bodies:

- send: one message per commit;
- send_batch: 100 messages per commit (one multi-row INSERT);
- receive: one message per transaction, with 1 and with 4 consumer processes;
- receive_batch: up to 100 messages per transaction, with 1 and with 4 consumer processes.

Each case runs on fresh tables twice per round, back to back: once through this project (``open_transport``,
``TableQueue``) and once through plain psycopg / sqlite3 executing the very statement text the project's
dialect renders, with the same transaction structure and pre-built parameters (the ceiling). The ratio is
project msgs/s divided by raw msgs/s, so it isolates the Python overhead of the project; with several
rounds the median is reported. Every timed case runs in freshly spawned processes that connect, prepare
their input and run one full garbage collection (``gc.collect()``: the clock then does not include sweeping
the objects their imports and preparation made) before a common start signal; a send is timed from that
signal until the last process has finished, a receive until the last message was received (its transaction
committed), whichever process got it: a process that then waits in SQLite's busy handler (1, 2, 5, ... up
to 100 ms between tries) only to find the queue empty delays its own exit, not the messages. Receives are
checked: every pre-filled message received exactly once, the table empty after.

Performance is reported from one run, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import multiprocessing
import os
import platform
import queue as queue_module
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

BODY_BYTES = 1024
BODY = random.Random(20240601).randbytes(BODY_BYTES)  # the same 1 KB body in every process
BATCH = 100
TARGET_RATIO = 0.8
DEFAULT_N = 20_000
DEFAULT_N_SINGLE = 5_000
DEFAULT_REPEAT = 3
QUICK_N = 2_000
WORKER_TIMEOUT = 1800.0
ENGINE_LABELS = {"postgresql": "PostgreSQL", "sqlite": "SQLite"}


@dataclass(frozen=True)
class Case:
    key: str
    label: str
    op: str  # "send" or "receive"
    batch: int  # messages per transaction (receive: max_messages)
    consumers: int  # processes

    @property
    def per_commit(self) -> bool:
        return self.batch == 1

    def target_applies(self, engine: str) -> bool:
        """The 0.8x target: every batch row (issue 7), and SQLite's one-message receive (issue 18)."""
        return self.batch > 1 or (engine == "sqlite" and self.op == "receive")


CASES = (
    Case("send", "send, 1/commit", "send", 1, 1),
    Case("send_batch", f"send_batch, {BATCH}/commit", "send", BATCH, 1),
    Case("receive_1c", "receive, 1/txn, 1 consumer", "receive", 1, 1),
    Case("receive_4c", "receive, 1/txn, 4 consumers", "receive", 1, 4),
    Case("receive_batch_1c", f"receive_batch, {BATCH}/txn, 1 consumer", "receive", BATCH, 1),
    Case("receive_batch_4c", f"receive_batch, {BATCH}/txn, 4 consumers", "receive", BATCH, 4),
)


# ---- the rows both sides write ---------------------------------------------------------------------
def raw_rows(dialect: Any, count: int) -> list[tuple[Any, ...]]:
    """Parameters of ``count`` messages shaped exactly as the project writes them.

    One message is built by the project (``OutgoingMessage``) as a template: its standard headers and
    mirrored columns (CorrelationId, ReplyToAddress) are copied into every row with the row's own fresh
    Id put in place of the template's, and the dialect's own ``send_params`` orders them. No TTBR."""
    from airflow_provider_sqlqueue.transport.message import OutgoingMessage

    template = OutgoingMessage.of(BODY)
    template_id = str(template.id)
    headers = template.encoded_headers()
    correlation_id, reply_to = template.correlation_id, template.reply_to_address
    rows = []
    for _ in range(count):
        message_id = uuid.uuid4()
        text = str(message_id)
        rows.append(
            dialect.send_params(
                dialect.row_id(message_id),
                None if correlation_id is None else correlation_id.replace(template_id, text),
                None if reply_to is None else reply_to.replace(template_id, text),
                None,
                headers.replace(template_id, text),
                BODY,
            )
        )
    return rows


def raw_connect(engine: str, target: str) -> Any:
    """A plain driver connection set up as the transport sets up its own (see transport/connection.py)."""
    if engine == "postgresql":
        import psycopg

        return psycopg.connect(target, autocommit=False)
    connection = sqlite3.connect(target, timeout=30, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA journal_mode=WAL").fetchall()
    connection.execute("PRAGMA synchronous=FULL")
    return connection


# ---- worker processes ------------------------------------------------------------------------------
# A task is a plain dict: engine, impl ("project" or "raw"), op, batch, count (sends), url (transport URL),
# raw_target (psycopg conninfo or SQLite path), table, and sql (the statements rendered by the dialect).


Runner = tuple[Callable[[], list[Any]], Callable[[], None], dict[str, Any]]


def _project_runner(task: dict[str, Any]) -> Runner:
    from airflow_provider_sqlqueue.transport import open_transport

    transport = open_transport(task["url"])
    queue = transport.queue(task["table"])
    _ = queue._sql  # render the statements before the clock starts
    with transport.connection():  # open the pooled connection before the clock starts
        pass
    batch, count = task["batch"], task["count"]

    def send() -> list[Any]:
        for _ in range(count):
            queue.send(BODY)
        return []

    def send_batch() -> list[Any]:
        bodies = [BODY] * batch
        for _ in range(count // batch):
            queue.send_batch(bodies)
        return []

    info: dict[str, Any] = {}

    def receive() -> list[Any]:
        ids: list[Any] = []
        while True:
            with queue.receive(max_messages=batch) as received:
                got = [message.id for message in received]
            if not got:
                return ids
            info["last_received"] = time.monotonic()  # after the commit
            ids.extend(got)

    if task["op"] == "receive":
        return receive, transport.close, info
    return (send if batch == 1 else send_batch), transport.close, info


def _raw_runner(task: dict[str, Any]) -> Runner:
    from airflow_provider_sqlqueue.dialects import get_dialect

    engine, batch, count, sql = task["engine"], task["batch"], task["count"], task["sql"]
    connection = raw_connect(engine, task["raw_target"])
    cursor = connection.cursor()
    commit = connection.commit
    begin = "BEGIN IMMEDIATE" if engine == "sqlite" else None  # what dialect.begin_write() returns
    info: dict[str, Any] = {}

    if task["op"] == "send":
        built = time.perf_counter()
        rows = raw_rows(get_dialect(engine), count)
        info["build_us_per_msg"] = (time.perf_counter() - built) / count * 1e6
        statement = sql["send"]
        if batch == 1:

            def run() -> list[Any]:
                for params in rows:
                    cursor.execute(statement, params)
                    commit()
                return []

        else:
            batch_statement = sql["send_batch"]
            chunks = [
                [value for row in rows[start : start + batch] for value in row]
                for start in range(0, count, batch)
            ]

            def run() -> list[Any]:
                for chunk in chunks:
                    cursor.execute(batch_statement, chunk)
                    commit()
                return []

    else:
        receive_statement, limit = sql["receive_batch"], (batch,)

        def run() -> list[Any]:
            ids: list[Any] = []
            while True:
                if begin:
                    cursor.execute(begin)
                cursor.execute(receive_statement, limit)
                rows = cursor.fetchall()
                commit()
                if not rows:
                    return ids
                info["last_received"] = time.monotonic()
                ids.extend([row[0] for row in rows])

    return run, connection.close, info


def _runner_for(task: dict[str, Any]) -> Callable[[dict[str, Any]], Runner]:
    """The runner of a task: ``task["runner"]`` ("module:function", for cases defined in other modules,
    e.g. benchmarks/run.py's pump and peers), else the project's or the raw driver's."""
    if task.get("runner"):
        import importlib

        module, _, name = task["runner"].partition(":")
        return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]
    return _project_runner if task["impl"] == "project" else _raw_runner


def _worker(task: dict[str, Any], events: Any, start: Any) -> None:
    """Prepare, report ready, wait for the start signal, run, and report the end time and the Ids."""
    pid = os.getpid()
    try:
        run, close, info = _runner_for(task)(task)
        # The imports and the preparation just made tens of thousands of objects the collector has not
        # seen; left young, the first collections inside the clock would sweep and promote them all.
        gc.collect()
        events.put(("ready", pid))
        if not start.wait(WORKER_TIMEOUT):
            raise TimeoutError("no start signal")
        cpu = time.process_time()
        ids = run()
        finished = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process on Linux
        info["cpu_seconds"] = time.process_time() - cpu
        close()
        events.put(("done", pid, finished, [str(value) for value in ids], info))
    except BaseException:
        events.put(("error", pid, traceback.format_exc()))


def run_processes(
    context: Any, tasks: list[dict[str, Any]]
) -> tuple[float, list[list[str]], list[dict[str, Any]]]:
    """Start one process per task; return the seconds from the start signal until the last one finished,
    each process's received Ids, and what each process noted about its preparation."""
    events, start = context.Queue(), context.Event()
    processes = [context.Process(target=_worker, args=(task, events, start), daemon=True) for task in tasks]
    for process in processes:
        process.start()

    def wait_for(kind: str) -> list[tuple[Any, ...]]:
        got: list[tuple[Any, ...]] = []
        deadline = time.monotonic() + WORKER_TIMEOUT
        while len(got) < len(processes):
            try:
                event = events.get(timeout=2)
            except queue_module.Empty:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"workers did not report {kind!r} in time") from None
                if any(process.exitcode not in (None, 0) for process in processes):
                    raise RuntimeError("a benchmark worker died without reporting") from None
                continue
            if event[0] == "error":
                raise RuntimeError(f"benchmark worker {event[1]} failed:\n{event[2]}")
            got.append(event)
        return got

    try:
        wait_for("ready")
        started = time.monotonic()
        start.set()
        done = wait_for("done")
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
                process.join()
    seconds = max(event[2] for event in done) - started
    for event in done:
        event[4]["finished_s"] = event[2] - started
        if "last_received" in event[4]:
            event[4]["last_received_s"] = event[4].pop("last_received") - started
    return seconds, [event[3] for event in done], [event[4] for event in done]


def until_last_received(infos: list[dict[str, Any]], seconds: float) -> float:
    """A receive's time: from the start signal until the last message was received, by whichever process
    (the runners note it after each receive that got messages); ``seconds`` when none noted it."""
    noted = [info["last_received_s"] for info in infos if "last_received_s" in info]
    return max(noted) if noted else seconds


# ---- one engine ------------------------------------------------------------------------------------
class EngineBench:
    """One database: an admin connection, provisioning through the project, and the cases run on it.

    Tables are created and dropped through short-lived transports, so that no pooled connection of the
    parent stays open while a case runs (an idle SQLite connection can hold up a WAL checkpoint)."""

    def __init__(self, engine: str, url: str, raw_target: str) -> None:
        from airflow_provider_sqlqueue.dialects import get_dialect

        self.engine, self.url, self.raw_target = engine, url, raw_target
        self.dialect = get_dialect(engine)
        if engine == "postgresql":
            import psycopg

            self.admin = psycopg.connect(raw_target, autocommit=True)
        else:
            self.admin = raw_connect(engine, raw_target)

    def close(self) -> None:
        self.admin.close()

    def query(self, sql: str) -> list[Any]:
        return list(self.admin.execute(sql).fetchall())

    def version(self) -> str:
        if self.engine == "postgresql":
            return str(self.query("SHOW server_version")[0][0])
        return sqlite3.sqlite_version

    def settle(self, table: str | None = None) -> None:
        """Before a timed case: flush dirty pages and the WAL so each case starts from the same state."""
        if self.engine == "postgresql":
            if table:
                self.admin.execute(f"VACUUM (ANALYZE) {table}")
            self.admin.execute("CHECKPOINT")
        else:
            busy, _, _ = self.query("PRAGMA wal_checkpoint(TRUNCATE)")[0]
            if busy:
                print("  warning: the SQLite WAL checkpoint before this case could not finish", flush=True)

    def count(self, table: str) -> int:
        return int(self.query(f"SELECT count(*) FROM {table}")[0][0])

    def provision(self, name: str, prefill: int) -> tuple[dict[str, Any], set[str]]:
        """Create a fresh queue ``name`` through the project and pre-fill it with ``prefill`` messages
        (not timed, in one transaction); return the statements a raw worker runs and the pre-filled Ids."""
        from airflow_provider_sqlqueue.transport import open_transport

        with open_transport(self.url) as transport:
            queue = transport.queue(name)
            queue.drop()
            queue.create()
            statements = {
                "send": queue._sql.send,
                "send_batch": queue._sql.send_batch(BATCH),
                "receive_batch": queue._sql.receive_batch,
                "table": self.dialect.qualified_name(queue.address),
            }
        rows = raw_rows(self.dialect, prefill)
        if rows:
            connection = raw_connect(self.engine, self.raw_target)
            try:
                cursor = connection.cursor()
                if self.engine == "sqlite":
                    cursor.execute("BEGIN IMMEDIATE")
                for start in range(0, prefill, 500):
                    part = rows[start : start + 500]
                    cursor.execute(queue._sql.send_batch(len(part)), [value for row in part for value in row])
                connection.commit()
            finally:
                connection.close()
        return statements, {str(row[0]) for row in rows}

    def drop(self, name: str) -> None:
        from airflow_provider_sqlqueue.transport import open_transport

        with open_transport(self.url) as transport:
            transport.queue(name).drop()

    def run_case(
        self,
        context: Any,
        case: Case,
        impl: str,
        n: int,
        runner: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One timed run of ``case`` by ``impl`` ("project", "raw", or any name with a ``runner``
        "module:function" that builds the worker's run, as in benchmarks/run.py), checked."""
        name = f"bench_{case.key}_{impl}"
        statements, expected = self.provision(name, n if case.op == "receive" else 0)
        table = statements["table"]
        self.settle(table if case.op == "receive" else None)
        task = {
            "runner": runner,
            "engine": self.engine,
            "impl": impl,
            "op": case.op,
            "batch": case.batch,
            "count": n,
            "url": self.url,
            "raw_target": self.raw_target,
            "table": name,
            "sql": statements,
            **(options or {}),
        }
        all_done, received, infos = run_processes(context, [task] * case.consumers)
        seconds = until_last_received(infos, all_done) if case.op == "receive" else all_done
        left = self.count(table)
        result: dict[str, Any] = {
            "seconds": seconds,
            "msgs_per_s": n / seconds,
            "all_done_seconds": all_done,
            # CPU time of the client processes only (for SQLite that includes the database engine, which
            # runs inside them); unlike the wall time it hardly moves when other work shares the machine
            "client_cpu_us_per_msg": sum(info["cpu_seconds"] for info in infos) / n * 1e6,
        }
        if "build_us_per_msg" in infos[0]:
            result["build_us_per_msg"] = infos[0]["build_us_per_msg"]
        if len(infos) > 1:
            # when each process saw the queue empty, from the start signal: SQLite's busy handler makes a
            # waiting process sleep 1, 2, 5, ... up to 100 ms, so the last can finish well after the first
            result["finished_s"] = sorted(round(info["finished_s"], 4) for info in infos)
        extras = [
            {
                k: v
                for k, v in info.items()
                if k not in ("cpu_seconds", "build_us_per_msg", "finished_s", "last_received_s")
            }
            for info in infos
        ]
        if any(extras):
            result["worker_info"] = extras
        if case.op == "send":
            if left != n:
                raise AssertionError(f"{self.engine} {case.key} {impl}: sent {n}, table holds {left}")
        else:
            counts = Counter(message_id for ids in received for message_id in ids)
            duplicates = sum(1 for times in counts.values() if times > 1)
            missing = len(expected - counts.keys())
            unexpected = len(counts.keys() - expected)
            if duplicates or missing or unexpected or left:
                raise AssertionError(
                    f"{self.engine} {case.key} {impl}: {duplicates} received twice, {missing} never "
                    f"received, {unexpected} unknown, {left} left in the table"
                )
            result["per_consumer"] = sorted((len(ids) for ids in received), reverse=True)
        self.drop(name)
        return result


# ---- rounds and reporting --------------------------------------------------------------------------
def run_pair(
    context: Any, bench: EngineBench, case: Case, count: int, raw_first: bool
) -> dict[str, dict[str, Any]]:
    """One round of a case: the raw driver and the project back to back, on fresh tables."""
    label = ENGINE_LABELS[bench.engine]
    sample: dict[str, dict[str, Any]] = {}
    for impl in ("raw", "project") if raw_first else ("project", "raw"):
        sample[impl] = bench.run_case(context, case, impl, count)
        print(
            f"  {label:<10} {case.label:<36} {impl:<7} "
            f"{sample[impl]['msgs_per_s']:>9,.0f} msgs/s  ({sample[impl]['seconds']:.2f} s)",
            flush=True,
        )
    return sample


def summarize(
    engine: str, case: Case, count: int, samples: list[dict[str, dict[str, Any]]]
) -> dict[str, Any]:
    """Medians over the rounds. The ratio is the median of the per-round ratios (each round's raw and
    project runs are back to back, so slow drift of the machine cancels out in each ratio)."""
    ratios = [sample["project"]["msgs_per_s"] / sample["raw"]["msgs_per_s"] for sample in samples]
    raw = statistics.median(sample["raw"]["msgs_per_s"] for sample in samples)
    project = statistics.median(sample["project"]["msgs_per_s"] for sample in samples)
    row: dict[str, Any] = {
        "engine": engine,
        "engine_label": ENGINE_LABELS[engine],
        "case": case.key,
        "label": case.label,
        "batch": case.batch,
        "consumers": case.consumers,
        "n": count,
        "rounds": samples,
        "raw_msgs_per_s": raw,
        "project_msgs_per_s": project,
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "overhead_us_per_msg": 1e6 / project - 1e6 / raw,
        "raw_cpu_us_per_msg": statistics.median(sample["raw"]["client_cpu_us_per_msg"] for sample in samples),
        "project_cpu_us_per_msg": statistics.median(
            sample["project"]["client_cpu_us_per_msg"] for sample in samples
        ),
        "target_applies": case.target_applies(engine),
    }
    builds = [sample["raw"]["build_us_per_msg"] for sample in samples if "build_us_per_msg" in sample["raw"]]
    if builds:
        row["raw_build_us_per_msg"] = statistics.median(builds)
    row["verdict"] = verdict(row)
    return row


def ratio_text(value: float) -> str:
    """Two decimals, rounded down, so that a ratio shown as 0.80x never carries a MISS."""
    return f"{math.floor(value * 100) / 100:.2f}"


def verdict(row: dict[str, Any]) -> str:
    mark = "PASS" if row["ratio"] >= TARGET_RATIO else "MISS"
    return mark if row["target_applies"] else f"({mark})"


def print_table(rows: list[dict[str, Any]], title: str, repeat: int) -> None:
    headings = ["engine", "case", "N", "raw msgs/s", "project msgs/s", "project/raw"]
    if repeat > 1:
        headings.append("min-max")
    headings += ["+us/msg", "CPU us/msg raw->project", f">={TARGET_RATIO}x"]
    cells = []
    for row in rows:
        line = [
            row["engine_label"],
            row["label"],
            f"{row['n']:,}",
            f"{row['raw_msgs_per_s']:,.0f}",
            f"{row['project_msgs_per_s']:,.0f}",
            f"{ratio_text(row['ratio'])}x",
        ]
        if repeat > 1:
            line.append(f"{ratio_text(row['ratio_min'])}-{ratio_text(row['ratio_max'])}")
        line += [
            f"{row['overhead_us_per_msg']:,.1f}",
            f"{row['raw_cpu_us_per_msg']:,.1f} -> {row['project_cpu_us_per_msg']:,.1f}",
            row["verdict"],
        ]
        cells.append(line)
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(text) for text in column) for column in zip(headings, *cells, strict=False)]
        print(title)
        for line in [headings, ["-" * width for width in widths], *cells]:
            print(
                "  ".join(
                    text.ljust(width) if index < 2 else text.rjust(width)
                    for index, (text, width) in enumerate(zip(line, widths, strict=True))
                )
            )
        return
    table = Table(title=title)
    for index, heading in enumerate(headings):
        table.add_column(heading, justify="left" if index < 2 else "right")
    for line in cells:
        style = "green" if line[-1] == "PASS" else "red" if line[-1] == "MISS" else None
        table.add_row(*line[:-1], f"[{style}]{line[-1]}[/]" if style else line[-1])
    Console(width=200).print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, help=f"messages per batch case [{DEFAULT_N}; --quick: {QUICK_N}]")
    parser.add_argument(
        "--n-single",
        type=int,
        help=f"messages per one-message-per-commit case [the smaller of N and {DEFAULT_N_SINGLE}]",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        help=f"rounds of every case; medians are reported [{DEFAULT_REPEAT}; --quick: 1]",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: small N, one round")
    parser.add_argument("--json", type=Path, help="write the results as JSON to this file")
    parser.add_argument(
        "--engines", default="postgresql,sqlite", help="comma-separated subset of postgresql,sqlite"
    )
    parser.add_argument(
        "--cases",
        default=",".join(case.key for case in CASES),
        help="comma-separated subset of the cases",
    )
    args = parser.parse_args(argv)
    n = args.n or (QUICK_N if args.quick else DEFAULT_N)
    n_single = args.n_single or min(n, DEFAULT_N_SINGLE)
    repeat = args.repeat or (1 if args.quick else DEFAULT_REPEAT)
    if n <= 0 or n % BATCH or n_single <= 0 or n_single % BATCH:
        parser.error(f"--n and --n-single must be positive multiples of {BATCH}")
    if repeat < 1:
        parser.error("--repeat must be at least 1")
    engines = [name.strip() for name in args.engines.split(",") if name.strip()]
    if not engines or not set(engines) <= set(ENGINE_LABELS):
        parser.error("--engines takes postgresql and/or sqlite")
    chosen = [key.strip() for key in args.cases.split(",") if key.strip()]
    if not chosen or not set(chosen) <= {case.key for case in CASES}:
        parser.error("--cases takes " + ", ".join(case.key for case in CASES))
    cases = [case for case in CASES if case.key in chosen]

    import provenance  # beside this script
    from postgres_bed import throwaway_postgres

    context = multiprocessing.get_context("spawn")
    started = datetime.now(timezone.utc)
    meta: dict[str, Any] = {
        "date": started.isoformat(timespec="seconds"),
        "commit": provenance.commit(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "sqlite": sqlite3.sqlite_version,
        "body_bytes": BODY_BYTES,
        "batch": BATCH,
        "n": n,
        "n_single": n_single,
        "repeat": repeat,
        "target_ratio": TARGET_RATIO,
        "postgresql_settings": "throwaway_postgres(durable=True): fsync=on, synchronous_commit=on",
        "sqlite_settings": "journal_mode=WAL, synchronous=FULL",
        "load_average_before": os.getloadavg(),
    }
    print(
        f"core_bench: N={n:,} for the batch cases, N={n_single:,} for the one-message-per-commit cases, "
        f"{repeat} round(s), {BODY_BYTES}-byte bodies; Python {meta['python']}, {meta['cpus']} CPUs, "
        f"SQLite {meta['sqlite']}",
        flush=True,
    )
    if n_single != n:
        print(
            f"note: the one-message-per-commit cases use N={n_single:,} instead of {n:,} to keep the run "
            "short (each of their messages waits for its own durable commit)",
            flush=True,
        )
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sqlqueue-bench-") as folder:
        for engine in engines:
            with contextlib.ExitStack() as stack:
                if engine == "postgresql":
                    cluster = stack.enter_context(throwaway_postgres(durable=True))
                    url = raw_target = cluster.url()
                else:
                    raw_target = str(Path(folder) / "bench.db")
                    url = f"sqlite:///{raw_target}"
                bench = EngineBench(engine, url, raw_target)
                stack.callback(bench.close)
                meta[f"{engine}_version"] = bench.version()
                print(f"{ENGINE_LABELS[engine]} {meta[f'{engine}_version']}", flush=True)
                samples: dict[str, list[dict[str, dict[str, Any]]]] = {case.key: [] for case in cases}
                for round_number in range(repeat):
                    if repeat > 1:
                        print(f" round {round_number + 1} of {repeat}", flush=True)
                    for index, case in enumerate(cases):
                        count = n_single if case.per_commit else n
                        raw_first = (index + round_number) % 2 == 0  # alternate who goes first
                        samples[case.key].append(run_pair(context, bench, case, count, raw_first))
                for case in cases:
                    count = n_single if case.per_commit else n
                    rows.append(summarize(engine, case, count, samples[case.key]))
    meta["seconds"] = round((datetime.now(timezone.utc) - started).total_seconds(), 1)
    meta["load_average_after"] = os.getloadavg()
    print()
    summary = f"median of {repeat} rounds" if repeat > 1 else "one round"
    print_table(rows, f"core_bench {meta['date']}: project vs raw driver, same SQL ({summary})", repeat)
    print(
        f"PASS/MISS: project/raw >= {TARGET_RATIO}x. The target applies to the batch rows and to SQLite's "
        "one-message receives; the other per-message rows show the same check in parentheses, for "
        "information."
    )
    print("+us/msg: 1e6/project - 1e6/raw msgs/s (wall clock), the time the project adds to each message.")
    print(
        "CPU us/msg: CPU time of the client processes per message, raw -> project (SQLite's engine runs "
        "inside them; PostgreSQL's server does not); it moves much less than wall time on a busy machine."
    )
    if n_single != n:
        print(f"The per-message rows ran with N={n_single:,}; the batch rows with N={n:,}.")
    builds = [
        f"{row['engine_label']} {row['case']} {row['raw_build_us_per_msg']:.1f} us/msg"
        for row in rows
        if "raw_build_us_per_msg" in row
    ]
    if builds:
        print(
            "Raw sends take their parameters pre-built (Id, header JSON, send_params) outside the clock; "
            "building them cost " + ", ".join(builds) + "."
        )
    before = meta["load_average_before"][0]
    print(f"Total time {meta['seconds']} s; the 1-minute load average was {before:.2f} at the start.")
    if before > 0.5 * (os.cpu_count() or 1):
        print(
            "warning: the machine was busy with other work when this run started; the ratios are noisier "
            "than on an idle machine (each ratio pairs back-to-back runs, which limits but does not remove "
            "this)"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": meta, "results": rows}, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
