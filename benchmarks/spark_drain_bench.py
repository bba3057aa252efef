"""Spark drain benchmark: the shipped drain job against a plain Spark JDBC read of the same queue table.

    python benchmarks/spark_drain_bench.py [--n 1000000] [--also-n 100000] [--json out.json]

One run starts a throwaway PostgreSQL cluster with durable settings (fsync and synchronous_commit on) and,
for each size N, fills the ``orders`` queue with N order messages of about 1 KB and runs two
``spark-submit --master local[2]`` applications, each on the same freshly filled queue:

- **drain**: ``airflow_provider_sqlqueue/spark/drain_job.py`` as a DAG author runs it (its default phase 1,
  which on PostgreSQL holds the messages in place), batches of 1,000, 2 partitions, the ``order_rows``
  transform (JSON body -> message id, order id, customer, amount, currency, items, time sent), into a table
  sink; exactly once, the queue ends empty. With ``--staged`` the same drain runs again on a refilled queue
  with ``--stage`` (2 receivers into staging, the path of the other engines).
- **jdbc**: ``spark.read.jdbc`` of the queue table split into 2 partitions by RowVersion (Debian's
  ``libpostgresql-jdbc-java`` jar), the same parsing in Spark SQL, ``write.jdbc`` (append, batches of
  1,000) into a table of the same columns. It deletes nothing and guarantees nothing: the ceiling.

With ``--stream`` the same queue is filled again for two more applications, the streaming comparison:

- **stream**: ``spark.readStream.format("sqlqueue")`` (2 partitions, batches of 1,000,
  ``maxMessagesPerTrigger`` of ``--per-trigger``) with ``Trigger.AvailableNow``, the ``order_rows`` transform,
  into a parquet file sink with its checkpoint; exactly once, the queue ends empty and the staging holds at
  most the last micro-batch (Spark commits a batch to its source when it plans the next one).
- **jdbc-file**: the JDBC baseline's read and parsing written as parquet files (overwrite): the ceiling for
  a file sink.

``--engine`` picks the database (default ``postgresql``). ``--engine sqlite`` fills a SQLite file (WAL) and
runs the same applications; its baseline is a Spark JDBC read and write through Debian's
``libxerial-sqlite-jdbc-java`` jar (SQLite takes one writer at a time: the two partitions' writes wait for
each other through ``busy_timeout``). ``--engine babelfish`` starts the TDS engine as the tests do
(tests/sqlserver_bed.py) and reaches it through Microsoft's ODBC Driver 18 (``--odbc-driver freetds``:
Debian's FreeTDS; the committed run used FreeTDS, as the staged drain through Driver 18 failed here on a
duplicate staging key); no SQL Server JDBC jar is on this machine (Debian packages none, Maven Central is
out of reach), so its baseline is **raw**: one plain Python process reads the queue table with pyodbc in
1,000-row fetches, parses the same fields in Python and writes them with ``executemany``, 1,000 rows a call,
in one transaction (``fast_executemany`` with ODBC Driver 18; FreeTDS takes none, so its rows go one by
one), or as one parquet file with pyarrow, for the stream's comparison. ``--staged`` is PostgreSQL's only:
the default drain stages on the other engines.

Before each application the database is settled (``settle``: on PostgreSQL ``VACUUM (ANALYZE)`` and
``CHECKPOINT``, as core_bench does). Times are measured inside each application from the moment its
SparkSession is up to the end of its work (the JVM start is reported apart). The ratio is drain msgs/s
divided by jdbc msgs/s.
Peak memory and CPU seconds are sampled every 0.2 s from /proc for the process tree of each spark-submit
(the JVM: driver and executors in local mode; the Python driver; the Python workers) and, for CPU, the
PostgreSQL server's processes. Performance is reported, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import provenance  # noqa: E402  (beside this script)

JDBC_JAR = Path("/usr/share/java/postgresql.jar")
SQLITE_JDBC_JAR = Path("/usr/share/java/sqlite-jdbc.jar")  # Debian's libxerial-sqlite-jdbc-java
SQLITE_JDBC_NATIVE = Path("/usr/lib/x86_64-linux-gnu/jni")  # its libsqlitejdbc.so (libxerial-sqlite-jdbc-jni)
ENGINES = ("postgresql", "sqlite", "babelfish")
# The baseline each engine is compared with: a Spark JDBC read + write, or a plain Python read + write
BASELINES = {"postgresql": "jdbc", "sqlite": "jdbc", "babelfish": "raw"}
ORDER_SCHEMA = "order_id long, customer string, amount double, currency string, items int, placed_at string"
RESULT_COLUMNS = [
    ("message_id", "string", False),
    ("order_id", "long", True),
    ("customer", "string", True),
    ("amount", "double", True),
    ("currency", "string", True),
    ("items", "int", True),
    ("time_sent", "timestamp", True),
]


# ---- the JDBC baseline, run by spark-submit with this file as the application --------------------------
def jdbc_baseline(table: str, sink: str, files: str | None = None, engine: str = "postgresql") -> None:
    """The plain read + parse + write; into the table ``sink``, or as parquet files into ``files``."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from sqlalchemy.engine import make_url

    from airflow_provider_sqlqueue.spark.config import url_from_environment

    started = time.monotonic()
    spark = SparkSession.builder.appName("jdbc-baseline").getOrCreate()
    session_seconds = time.monotonic() - started
    url = make_url(url_from_environment())
    if engine == "sqlite":  # one writer at a time: a partition's write waits for the other's commit
        jdbc = f"jdbc:sqlite:{url.database}"
        props = {"driver": "org.sqlite.JDBC", "busy_timeout": "600000"}
    else:
        jdbc = f"jdbc:postgresql://{url.host}:{url.port}/{url.database}"
        props = {"user": url.username, "password": str(url.password), "driver": "org.postgresql.Driver"}
    t0 = time.monotonic()
    bounds = spark.read.jdbc(
        jdbc, f"(SELECT min(rowversion) lo, max(rowversion) hi FROM {table}) b", properties=props
    ).collect()[0]
    queue = spark.read.jdbc(
        jdbc,
        table,
        column="rowversion",
        lowerBound=int(bounds.lo),
        upperBound=int(bounds.hi) + 1,
        numPartitions=2,
        properties={**props, "fetchsize": "1000"},
    )
    order = F.from_json(F.col("body").cast("string"), ORDER_SCHEMA)
    sent = F.get_json_object(F.col("headers"), '$["NServiceBus.TimeSent"]')
    rows = queue.select(
        F.col("id").cast("string").alias("message_id"),
        order.order_id.alias("order_id"),
        order.customer.alias("customer"),
        order.amount.alias("amount"),
        order.currency.alias("currency"),
        order["items"].alias("items"),
        F.to_timestamp(F.substring(sent, 1, 19), "yyyy-MM-dd HH:mm:ss").alias("time_sent"),
    )
    if files is None:
        rows.write.jdbc(jdbc, sink, mode="append", properties={**props, "batchsize": "1000"})
    else:
        rows.write.mode("overwrite").parquet(files)
    seconds = time.monotonic() - t0
    if files is None:
        written = spark.read.jdbc(jdbc, f"(SELECT count(*) n FROM {sink}) c", properties=props).collect()[0].n
    else:
        written = spark.read.parquet(files).count()
    spark.stop()
    report(seconds=seconds, session_seconds=session_seconds, written=int(written))


def raw_baseline(table: str, sink: str, files: str | None = None) -> None:
    """The baseline without Spark: one Python process reads the queue table in 1,000-row fetches, parses the
    fields the JDBC baseline parses, and writes them to the table ``sink`` in batches of 1,000 (one
    transaction), or as one parquet file into the folder ``files``. It deletes nothing."""
    import shutil

    from airflow_provider_sqlqueue.spark.config import url_from_environment

    url = url_from_environment()
    t0 = time.monotonic()
    if url.startswith("sqlite"):
        import sqlite3

        from sqlalchemy.engine import make_url

        path = make_url(url).database
        reading, writing = sqlite3.connect(path), sqlite3.connect(path)
    else:  # an ODBC connection string (the SQL Server dialect)
        import pyodbc

        reading, writing = pyodbc.connect(url), pyodbc.connect(url)
    insert = writing.cursor()
    if hasattr(insert, "fast_executemany") and "libtdsodbc" not in url:  # FreeTDS: row by row
        insert.fast_executemany = True
    names, marks = ", ".join(name for name, _, _ in RESULT_COLUMNS), ", ".join("?" * len(RESULT_COLUMNS))
    statement = f"INSERT INTO {sink} ({names}) VALUES ({marks})"
    cursor = reading.cursor()
    cursor.execute(f"SELECT Id, Headers, Body FROM {table} ORDER BY RowVersion")
    columns: list[list[Any]] = [[] for _ in RESULT_COLUMNS]
    while batch := cursor.fetchmany(1000):
        rows = [parsed_order(message_id, headers, body) for message_id, headers, body in batch]
        if files is None:
            insert.executemany(statement, rows)
        else:
            for row in rows:
                for column, value in zip(columns, row, strict=True):
                    column.append(value)
    if files is None:
        writing.commit()
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        shutil.rmtree(files, ignore_errors=True)
        Path(files).mkdir(parents=True)
        types = {"string": pa.string(), "long": pa.int64(), "double": pa.float64(), "int": pa.int32()}
        schema = pa.schema([(name, types.get(kind, pa.timestamp("us"))) for name, kind, _ in RESULT_COLUMNS])
        pq.write_table(pa.table(columns, schema=schema), str(Path(files) / "part-0.parquet"))
    reading.commit()
    seconds = time.monotonic() - t0
    if files is None:
        insert.execute(f"SELECT count(*) FROM {sink}")
        written = insert.fetchone()[0]
    else:
        import pyarrow.parquet as pq

        written = pq.ParquetDataset(files).read().num_rows
    reading.close()
    writing.close()
    report(seconds=seconds, session_seconds=0.0, written=int(written))


def parsed_order(message_id: Any, headers: str, body: bytes | None) -> tuple[Any, ...]:
    """One message as the result columns, parsed as the JDBC baseline parses it in Spark SQL (a field that
    is missing or not JSON is null; the time sent is the header's first 19 characters)."""
    try:
        order = json.loads(bytes(body or b"")) if body is not None else {}
    except ValueError:
        order = {}
    order = order if isinstance(order, dict) else {}
    try:
        sent = json.loads(headers).get("NServiceBus.TimeSent")
        time_sent = datetime.strptime(sent[:19], "%Y-%m-%d %H:%M:%S") if sent else None
    except (ValueError, TypeError, AttributeError):
        time_sent = None
    return (
        str(message_id),
        order.get("order_id"),
        order.get("customer"),
        None if order.get("amount") is None else float(order["amount"]),
        order.get("currency"),
        order.get("items"),
        time_sent,
    )


def report(**figures: Any) -> None:
    """The application's figures, with its Python driver's peak RSS, on the line the harness reads."""
    figures["py_peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print("BENCH_RESULT " + json.dumps(figures), flush=True)


# ---- the streaming data source, run by spark-submit with this file as the application ----------------
def stream_application(
    queue: str, files: str, checkpoint: str, per_trigger: int, stream_id: str, all_columns: bool = False
) -> None:
    """``readStream.format("sqlqueue")`` with ``availableNow`` through ``order_rows`` into parquet files;
    the read names the columns ``order_rows`` reads (as Spark's JDBC read selects only the columns a query
    uses), or with ``all_columns`` reads every column of the source."""
    from pyspark.sql import SparkSession

    from airflow_provider_sqlqueue.spark import SqlQueueDataSource
    from airflow_provider_sqlqueue.spark.source import source_columns
    from airflow_provider_sqlqueue.spark.transforms import ORDER_MESSAGE_COLUMNS, order_rows

    started = time.monotonic()
    spark = SparkSession.builder.appName("stream-bench").getOrCreate()
    spark.dataSource.register(SqlQueueDataSource)
    session_seconds = time.monotonic() - started
    t0 = time.monotonic()
    read = spark.readStream.format("sqlqueue")
    if not all_columns:
        read = read.schema(source_columns(*ORDER_MESSAGE_COLUMNS))
    messages = (
        read.option("queue", queue)
        .option("streamId", stream_id)  # one stream id per checkpoint (docs/spark.md)
        .option("batchSize", "1000")
        .option("partitions", "2")
        .option("maxMessagesPerTrigger", str(per_trigger))
        .load()
    )
    query = (
        order_rows(messages)
        .writeStream.format("parquet")
        .option("path", files)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.monotonic() - t0
    batches = sum(1 for progress in query.recentProgress if progress["numInputRows"])
    # in-place offsets name RowVersion ranges (a source's endOffset is its JSON text)
    read_in_place = any("ranges" in str(progress["sources"]) for progress in query.recentProgress)
    phases: dict[str, int] = {}  # Spark's own split of each trigger's time, summed over the query
    for progress in query.recentProgress:
        for phase, millis in (progress["durationMs"] or {}).items():
            phases[phase] = phases.get(phase, 0) + int(millis)
    output = spark.read.parquet(files)
    written, distinct = output.count(), output.select("message_id").distinct().count()
    spark.stop()
    report(
        seconds=seconds,
        session_seconds=session_seconds,
        written=int(written),
        distinct=int(distinct),
        micro_batches=batches,
        read_in_place=read_in_place,
        phase_seconds={phase: round(millis / 1000, 1) for phase, millis in sorted(phases.items())},
    )


# ---- the data source's receive, run by Python with this file as the program -----------------------------
def source_receive(queue: str, run_id: str) -> None:
    """The data source's batch read as it plans (``SqlQueueBatchReader.partitions``, where Spark's planner
    runs it): its receivers, threads of one process with a connection each, move the queue into staging
    under ``run_id``; then the read is acknowledged (its staged rows deleted), outside the timing. The same
    batch size and number of receivers as the staged drain's receive tasks."""
    from airflow_provider_sqlqueue.spark.source import SourceOptions, ack_read
    from airflow_provider_sqlqueue.spark.source.batch import SqlQueueBatchReader

    options = {"queue": queue, "runId": run_id, "batchSize": "1000", "receivers": "2"}
    started = time.monotonic()
    tasks = SqlQueueBatchReader(SourceOptions.parse(options)).partitions()
    seconds = time.monotonic() - started
    staged = ack_read(options)
    report(seconds=seconds, staged=staged, read_tasks=len(tasks))


# ---- the harness -------------------------------------------------------------------------------------
class MemorySampler(threading.Thread):
    """Peak RSS of the JVM and of the Python driver in a process tree, and the CPU seconds of each kind of
    process (the JVM, the Python driver, the Python workers, the PostgreSQL server's processes), sampled
    from /proc every 0.2 s.

    A process's CPU is its last sample (a process that ends between two samples loses at most 0.2 s). The
    server's CPU is measured as a difference from the start: its postmaster's own time and that of the
    backends it reaped, plus the live processes', so connections that came and went during the run count.
    """

    def __init__(self, pid: int, driver_marker: str, postmaster: int | None = None) -> None:
        super().__init__(daemon=True)
        self.pid, self.marker, self.postmaster = pid, driver_marker, postmaster
        self.peaks = {"jvm_mb": 0.0, "python_driver_mb": 0.0, "python_workers_mb": 0.0}
        self.cpu_by_pid: dict[int, tuple[str, float]] = {}
        self.server_start = self._server_cpu()
        self.server_cpu = 0.0
        self.stopped = threading.Event()

    def _server_cpu(self) -> float:
        """The PostgreSQL server's CPU seconds so far: postmaster, the children it reaped, live ones."""
        import psutil

        if self.postmaster is None:
            return 0.0
        try:
            root = psutil.Process(self.postmaster)
            times = root.cpu_times()
            total = times.user + times.system + times.children_user + times.children_system
            for child in root.children(recursive=True):
                try:
                    child_times = child.cpu_times()
                    total += child_times.user + child_times.system
                except psutil.Error:
                    continue
            return total
        except psutil.Error:
            return 0.0

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds by kind of process over the application's life."""
        totals = {"jvm": 0.0, "python_driver": 0.0, "python_workers": 0.0}
        for kind, seconds in self.cpu_by_pid.values():
            totals[kind] += seconds
        if self.postmaster is not None:
            totals[SERVER_NAME[0]] = self.server_cpu
        return {kind: round(seconds, 1) for kind, seconds in totals.items()}

    def run(self) -> None:
        while not self.stopped.wait(0.2):
            self.sample()
        self.sample()

    def sample(self) -> None:
        import psutil

        if self.postmaster is not None:
            self.server_cpu = max(self.server_cpu, self._server_cpu() - self.server_start)
        try:
            root = psutil.Process(self.pid)
            processes = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        workers = 0.0
        for process in processes:
            try:
                name, rss, cmdline = process.name(), process.memory_info().rss / 2**20, process.cmdline()
                times = process.cpu_times()
            except psutil.Error:
                continue
            text = " ".join(cmdline)
            if name == "java":
                kind = "jvm"
                self.peaks["jvm_mb"] = max(self.peaks["jvm_mb"], rss)
            elif "python" in name and self.marker in text:
                kind = "python_driver"
                self.peaks["python_driver_mb"] = max(self.peaks["python_driver_mb"], rss)
            elif "python" in name and "pyspark" in text:
                kind = "python_workers"
                workers += rss
            else:
                continue
            self.cpu_by_pid[process.pid] = (kind, times.user + times.system)
        self.peaks["python_workers_mb"] = max(self.peaks["python_workers_mb"], workers)


def disk_mb() -> dict[str, float]:
    """MB read and written so far by the machine's whole disks (/proc/diskstats: partitions, loop and ram
    devices left out), whoever did it: the machine is shared, so this counts other work's too."""
    import re

    read = written = 0
    for line in Path("/proc/diskstats").read_text().splitlines():
        fields = line.split()
        if re.fullmatch(r"(sd|vd|xvd|hd)[a-z]+|nvme\d+n\d+", fields[2]):
            read, written = read + int(fields[5]), written + int(fields[9])
    return {"read": read * 512 / 2**20, "written": written * 512 / 2**20}


POSTMASTER: list[int] = []  # the benchmark's PostgreSQL server, whose CPU each application's sampler reads
SERVER_NAME = ["postgresql"]  # what the data file calls that server's CPU ("babelfish" for the TDS engine)
JARS: list[Path] = [JDBC_JAR]  # the JDBC driver of the engine under test


def spark_submit(application: str, args: list[str], env: dict[str, str], marker: str) -> dict[str, Any]:
    bindir = Path(sys.executable).parent
    command = [str(bindir / "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false"]
    command += ["--conf", "spark.sql.shuffle.partitions=2", "--jars", ",".join(map(str, JARS))]
    if SQLITE_JDBC_JAR in JARS:
        command += ["--driver-library-path", str(SQLITE_JDBC_NATIVE)]
    return measured([*command, application, *args], env, marker, application)


def measured(command: list[str], env: dict[str, str], marker: str, application: str) -> dict[str, Any]:
    """One application's process tree run to its end: wall time, peak memory, CPU and disk, and the figures
    it printed."""
    started, disk_before = time.monotonic(), disk_mb()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = MemorySampler(process.pid, marker, POSTMASTER[0] if POSTMASTER else None)
    sampler.start()
    output, _ = process.communicate()
    sampler.stopped.set()
    sampler.join()
    wall = time.monotonic() - started
    if process.returncode:
        raise RuntimeError(f"{application} failed:\n{output[-5000:]}")
    result: dict[str, Any] = {
        "wall_seconds": round(wall, 2),
        **{k: round(v) for k, v in sampler.peaks.items()},
        "cpu_seconds": sampler.cpu_seconds(),
        "disk_mb": {kind: round(mb - disk_before[kind]) for kind, mb in disk_mb().items()},
    }
    for line in output.splitlines():
        if line.startswith(("BENCH_RESULT ", "SQLQUEUE_SPARK_SUMMARY ")):
            result["job"] = json.loads(line.split(" ", 1)[1])
    return result


def settle(transport) -> None:
    """Before a timed job, leave the database as core_bench and peers leave it before each timed run:
    otherwise a job pays, in its own time, for the fill's work or the job before it. PostgreSQL:
    ``VACUUM (ANALYZE)`` (the dead rows the job before left, and the fill's new rows, which autovacuum would
    otherwise visit during whichever application runs next) and ``CHECKPOINT`` (every dirty page written);
    SQLite: the WAL checkpointed into the database file; Babelfish: ``CHECKPOINT`` through its PostgreSQL
    port."""
    if SETTLE:
        SETTLE[0]()
        return
    with transport.connection() as connection:
        connection.commit()
        connection.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)", ())
        connection.commit()


SETTLE: list[Any] = []  # the server's settle through its own socket (PostgreSQL, Babelfish), when one runs


def fill(transport, n: int) -> float:
    from airflow_provider_sqlqueue.demo.orders import make_orders

    started = time.monotonic()
    queue = transport.queue("orders")
    chunk = 5000
    for first in range(1, n + 1, chunk):
        queue.send_batch(
            make_orders(
                min(chunk, n - first + 1), first_order_id=first, short_lived_every=None, body_bytes=1024
            )
        )
    return time.monotonic() - started


def run_size(
    url: str, n: int, env: dict[str, str], per_trigger: int | None, folder: str, staged: bool = False
) -> dict[str, Any]:
    from airflow_provider_sqlqueue.spark.tables import create_bridge_tables, create_sink_table
    from airflow_provider_sqlqueue.transport import open_transport

    result: dict[str, Any] = {"n": n, "baseline": BASELINE[0]}
    with open_transport(url) as transport:
        for name in ("orders", "error"):
            transport.queue(name).drop()
            transport.queue(name).create()
        create_bridge_tables(transport, "orders")
        for table in ("bench_rows", "jdbc_rows"):
            with transport.connection() as connection:
                connection.cursor().execute(f"DROP TABLE IF EXISTS {table}", ())
                connection.commit()
            create_sink_table(transport, table, RESULT_COLUMNS)
        average = 0
        with transport.connection() as connection:
            cursor = connection.cursor()
            result["fill_seconds"] = round(fill(transport, n), 1)
            length = {"sqlite": "length", "sqlserver": "datalength"}.get(
                transport.dialect.name, "octet_length"
            )
            cursor.execute(f"SELECT avg({length}(body) * 1.0) FROM orders", ())
            average = float(cursor.fetchone()[0])
            connection.commit()
        result["body_bytes_avg"] = round(average)
        print(
            f"  N={n:,}: queue filled in {result['fill_seconds']} s ({result['body_bytes_avg']} B bodies)",
            flush=True,
        )

        settle(transport)
        result["jdbc"] = baseline(["--jdbc-baseline"], env)
        print(f"  {BASELINE[0]} read+write: {result['jdbc']['job']['seconds']:.1f} s", flush=True)
        assert result["jdbc"]["job"]["written"] == n, result["jdbc"]["job"]
        queue_left = transport.queue("orders").count()
        assert queue_left == n, f"the baseline must not change the queue ({queue_left})"

        args = ["--queue", "orders", "--sink", "table:bench_rows", "--run-id", f"bench-{n}-{time.time():.0f}"]
        args += ["--transform", "airflow_provider_sqlqueue.spark.transforms.order_rows"]
        args += ["--batch-size", "1000", "--partitions", "2"]
        settle(transport)
        result["drain"] = drain_job(env, args, "drain")
        job = result["drain"]["job"]
        assert job["processed"] == job["written"] == n, job
        assert transport.queue("orders").count() == 0
        if staged:
            result.update(run_staged(transport, n, env, args))
        if per_trigger:
            result.update(run_stream(transport, n, env, per_trigger, Path(folder) / f"stream-{n}"))
    jdbc_rate = n / result["jdbc"]["job"]["seconds"]
    drain_rate = n / job["seconds"]
    result.update(
        jdbc_msgs_per_s=round(jdbc_rate),
        drain_msgs_per_s=round(drain_rate),
        ratio=round(drain_rate / jdbc_rate, 2),
    )
    if staged:
        staged_rate = n / result["drain_staged"]["job"]["seconds"]
        result.update(
            drain_staged_msgs_per_s=round(staged_rate), staged_ratio=round(staged_rate / jdbc_rate, 2)
        )
    return result


BASELINE = ["jdbc"]  # the engine's baseline: "jdbc" (a Spark application) or "raw" (a Python process)
ENGINE = ["postgresql"]  # the engine under test, which the JDBC baseline's application is told


def baseline(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """The engine's baseline application: this file through spark-submit (JDBC), or through Python (raw)."""
    this = str(Path(__file__).resolve())
    if BASELINE[0] == "raw":
        args = ["--raw-baseline", *args[1:]]
        return measured([sys.executable, this, *args], env, "spark_drain_bench", this)
    return spark_submit(this, [*args, "--engine", ENGINE[0]], env, "spark_drain_bench")


def drain_job(env: dict[str, str], args: list[str], label: str) -> dict[str, Any]:
    """One spark-submit of the shipped drain job, its time split printed."""
    from airflow_provider_sqlqueue.spark import DRAIN_JOB

    run = spark_submit(DRAIN_JOB, args, env, "drain_job.py")
    job = run["job"]
    path = "held in place" if job["read_in_place"] else "staged"
    print(
        f"  {label} ({path}): {job['seconds']:.1f} s (phase 1 {job['receive_seconds']:.1f} s, "
        f"transform+commit {job['process_seconds']:.1f} s)",
        flush=True,
    )
    return run


def run_staged(transport, n: int, env: dict[str, str], args: list[str]) -> dict[str, Any]:
    """The drain again on a freshly filled queue, with ``--stage`` (2 receivers move the messages into
    staging, as on the other engines); every message once in the table, the queue empty."""
    result: dict[str, Any] = {"staged_fill_seconds": round(fill(transport, n), 1)}
    run_id = args.index("--run-id") + 1
    args = [*args[:run_id], f"{args[run_id]}-staged", *args[run_id + 1 :], "--stage"]
    settle(transport)
    result["drain_staged"] = drain_job(env, args, "drain --stage")
    job = result["drain_staged"]["job"]
    assert job["processed"] == job["written"] == n and not job["read_in_place"], job
    assert transport.queue("orders").count() == 0
    # the receive into staging of the data source's batch read, beside the drain's receive tasks
    fill(transport, n)
    settle(transport)
    this = str(Path(__file__).resolve())
    source_run_id = f"{args[run_id]}-source"
    result["source_receive"] = measured(
        [sys.executable, this, "--source-receive", source_run_id], env, "spark_drain_bench", this
    )
    source = result["source_receive"]["job"]
    assert source["staged"] == n and transport.queue("orders").count() == 0, source
    print(
        f"  the data source's receive into staging: {source['seconds']:.1f} s (the drain's receive tasks: "
        f"{job['receive_seconds']:.1f} s)",
        flush=True,
    )
    return result


def run_stream(transport, n: int, env: dict[str, str], per_trigger: int, folder: Path) -> dict[str, Any]:
    """The streaming comparison on a freshly filled queue: parquet files from the JDBC read, then from
    the ``sqlqueue`` stream reading the columns the job uses, then (the queue filled again) from the stream
    reading every column; every message once in each stream's files, the queue and staging empty."""
    from airflow_provider_sqlqueue.spark.transforms import ORDER_MESSAGE_COLUMNS

    result: dict[str, Any] = {"stream_fill_seconds": round(fill(transport, n), 1)}
    files = folder / "jdbc-files"
    baseline_args = ["--jdbc-baseline", "--files", str(files)]
    settle(transport)
    result["jdbc_file"] = baseline(baseline_args, env)
    print(f"  {BASELINE[0]} read+parquet: {result['jdbc_file']['job']['seconds']:.1f} s", flush=True)
    assert result["jdbc_file"]["job"]["written"] == n, result["jdbc_file"]["job"]
    assert transport.queue("orders").count() == n, "the baseline must not change the queue"
    jdbc_rate = n / result["jdbc_file"]["job"]["seconds"]
    result.update(stream_per_trigger=per_trigger, jdbc_file_msgs_per_s=round(jdbc_rate))
    result["stream_columns"] = list(ORDER_MESSAGE_COLUMNS)
    result["stream"] = stream_once(transport, n, env, per_trigger, folder / "columns", all_columns=False)
    result["stream_left_staged"] = result["stream"].pop("left_staged")
    stream_rate = n / result["stream"]["job"]["seconds"]
    result.update(stream_msgs_per_s=round(stream_rate), stream_ratio=round(stream_rate / jdbc_rate, 2))
    fill(transport, n)
    result["stream_all_columns"] = stream_once(
        transport, n, env, per_trigger, folder / "all", all_columns=True
    )
    result["stream_all_columns"].pop("left_staged")
    all_rate = n / result["stream_all_columns"]["job"]["seconds"]
    result.update(
        stream_all_columns_msgs_per_s=round(all_rate), stream_all_columns_ratio=round(all_rate / jdbc_rate, 2)
    )
    return result


def stream_once(
    transport, n: int, env: dict[str, str], per_trigger: int, folder: Path, all_columns: bool
) -> dict[str, Any]:
    """One ``spark-submit`` of the stream application over the ``n`` queued messages, checked: every message
    once in its files, the queue empty, at most the last micro-batch left staged."""
    this = str(Path(__file__).resolve())
    stream_id = f"bench-stream-{n}-{'all' if all_columns else 'columns'}"
    args = [
        "--stream-app",
        "--files",
        str(folder / "stream-files"),
        "--checkpoint",
        str(folder / "checkpoint"),
    ]
    args += ["--per-trigger", str(per_trigger), "--stream-id", stream_id] + (
        ["--all-columns"] if all_columns else []
    )
    settle(transport)
    result = spark_submit(this, args, env, "spark_drain_bench")
    job = result["job"]
    phases = ", ".join(f"{phase} {seconds} s" for phase, seconds in job.get("phase_seconds", {}).items())
    label = "every column" if all_columns else "the job's columns"
    batches = job["micro_batches"]
    print(f"  stream ({label}, {batches} batches): {job['seconds']:.1f} s ({phases})", flush=True)
    assert job["written"] == job["distinct"] == n, job
    assert transport.queue("orders").count() == 0
    with transport.connection() as connection:
        cursor = connection.cursor()
        mark = "%s" if transport.dialect.name == "postgresql" else "?"
        cursor.execute(f"SELECT count(*) FROM sqlqueue_spark_staging WHERE RunId = {mark}", (stream_id,))
        staged = cursor.fetchone()[0]
        connection.commit()
    # Spark commits a micro-batch to its source when it plans the next one, so the last batch of a query
    # that ends stays staged (already in the files) until the query's next run: at most one trigger's worth.
    assert staged <= per_trigger, f"{staged} rows left in staging, more than the last micro-batch"
    result["left_staged"] = staged
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--also-n", type=int, default=100_000, help="a second, smaller size (0: none)")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--data", type=Path, help="also write the figures as the docs' data file (docs/data/spark-drain.json)"
    )
    parser.add_argument(
        "--staged",
        action="store_true",
        help="also run the drain with --stage (receivers move the messages into staging)",
    )
    parser.add_argument(
        "--stream",
        type=int,
        nargs="?",
        const=250_000,  # the source's default: batchSize 1,000 x DEFAULT_RECEIVES_PER_TRIGGER
        default=None,
        metavar="PER_TRIGGER",
        help="also compare the sqlqueue stream (availableNow, maxMessagesPerTrigger PER_TRIGGER, default "
        "250,000, the source's default) with the JDBC read written as parquet files",
    )
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="postgresql",
        help="the queue database: a throwaway PostgreSQL cluster (default), a SQLite file, or Babelfish (the "
        "TDS engine, as the tests start it)",
    )
    parser.add_argument(
        "--odbc-driver",
        choices=("msodbc", "freetds"),
        default="msodbc",
        help="Babelfish's ODBC driver: Microsoft's ODBC Driver 18 (default) or FreeTDS",
    )
    parser.add_argument("--jdbc-baseline", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--raw-baseline", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stream-app", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--source-receive", metavar="RUN_ID", help=argparse.SUPPRESS)
    parser.add_argument("--files", help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", help=argparse.SUPPRESS)
    parser.add_argument("--per-trigger", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--stream-id", help=argparse.SUPPRESS)
    parser.add_argument("--all-columns", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.jdbc_baseline:
        jdbc_baseline("orders", "jdbc_rows", args.files, args.engine)
        return 0
    if args.raw_baseline:
        raw_baseline("orders", "jdbc_rows", args.files)
        return 0
    if args.staged and args.engine != "postgresql":
        parser.error("--staged is PostgreSQL's: the default drain stages on the other engines")
    if args.engine == "sqlite" and not SQLITE_JDBC_JAR.exists():
        print(f"needs {SQLITE_JDBC_JAR}: apt-get install libxerial-sqlite-jdbc-java", file=sys.stderr)
        return 2
    if args.source_receive:
        source_receive("orders", args.source_receive)
        return 0
    if args.stream_app:
        stream_application(
            "orders", args.files, args.checkpoint, args.per_trigger, args.stream_id, args.all_columns
        )
        return 0
    if args.engine == "postgresql" and not JDBC_JAR.exists():
        print(f"needs {JDBC_JAR}: apt-get install libpostgresql-jdbc-java", file=sys.stderr)
        return 2
    from run import machine

    from airflow_provider_sqlqueue.spark.config import PASSWORD_ENV, URL_ENV, split_credentials

    started = datetime.now(timezone.utc)
    meta = {
        "date": started.isoformat(timespec="seconds"),
        "commit": provenance.commit(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_before": os.getloadavg(),
        "master": "local[2]",
        "engine": args.engine,
        "baseline": BASELINES[args.engine],
    }
    if args.engine == "postgresql":
        meta["postgresql"] = "throwaway_postgres(durable=True)"
    sizes = sorted({size for size in (args.also_n, args.n) if size})
    results = []
    BASELINE[:], ENGINE[:] = [BASELINES[args.engine]], [args.engine]
    with (
        engine_under_test(args.engine, meta, args.odbc_driver) as url,
        tempfile.TemporaryDirectory() as folder,
    ):
        meta["machine"] = machine(Path(folder))
        stripped, password = split_credentials(url)
        bindir = str(Path(sys.executable).parent)
        env = {
            **os.environ,
            URL_ENV: stripped,
            PASSWORD_ENV: password or "",
            "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYTHONPATH": str(REPO),
            "TMPDIR": folder,
        }
        for n in sizes:
            print(f"spark_drain_bench: N={n:,}", flush=True)
            results.append(run_size(url, n, env, args.stream, folder, args.staged))
    meta["seconds"] = round((datetime.now(timezone.utc) - started).total_seconds(), 1)
    meta["load_average_after"] = os.getloadavg()
    print()
    print(
        f"| N | {BASELINE[0]} read+write msgs/s | drain msgs/s | ratio | drain: receive / transform+commit s "
        "| JVM peak MB (drain / jdbc) | Python driver peak MB (drain / jdbc) |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in results:
        job = row["drain"]["job"]
        print(
            f"| {row['n']:,} | {row['jdbc_msgs_per_s']:,} | {row['drain_msgs_per_s']:,} | {row['ratio']}x | "
            f"{job['receive_seconds']:.1f} / {job['process_seconds']:.1f} | "
            f"{row['drain']['jvm_mb']} / {row['jdbc']['jvm_mb']} | "
            f"{row['drain']['python_driver_mb']} / {row['jdbc']['python_driver_mb']} |"
        )
    streamed = [row for row in results if "stream" in row]
    if streamed:
        print()
        print(
            f"| N | {BASELINE[0]} read+parquet msgs/s | stream msgs/s | ratio | micro-batches | JVM peak MB |"
        )
        print("|---|---|---|---|---|---|")
        for row in streamed:
            print(
                f"| {row['n']:,} | {row['jdbc_file_msgs_per_s']:,} | {row['stream_msgs_per_s']:,} | "
                f"{row['stream_ratio']}x | {row['stream']['job']['micro_batches']} | "
                f"{row['stream']['jvm_mb']} / {row['jdbc_file']['jvm_mb']} |"
            )
            print(
                f"| {row['n']:,} (every column) | {row['jdbc_file_msgs_per_s']:,} | "
                f"{row['stream_all_columns_msgs_per_s']:,} | {row['stream_all_columns_ratio']}x | "
                f"{row['stream_all_columns']['job']['micro_batches']} | "
                f"{row['stream_all_columns']['jvm_mb']} / {row['jdbc_file']['jvm_mb']} |"
            )
    print("\nCPU seconds over each whole application (JVM start included), by process:")
    for row in results:
        for label in ("jdbc", "drain", "drain_staged", "jdbc_file", "stream", "stream_all_columns"):
            if label in row:
                cpu = ", ".join(f"{kind} {seconds}" for kind, seconds in row[label]["cpu_seconds"].items())
                disk = row[label]["disk_mb"]
                print(
                    f"  N={row['n']:,} {label}: {cpu} (wall {row[label]['wall_seconds']} s; disks read "
                    f"{disk['read']} MB, wrote {disk['written']} MB)"
                )
    print(f"\nTotal {meta['seconds']} s; load average before {meta['load_average_before'][0]:.2f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=2, default=str) + "\n")
        print(f"wrote {args.json}")
    if args.data:
        command = " ".join(["spark_drain_bench.py", *(argv if argv is not None else sys.argv[1:])])
        data = data_file(meta, results, command)
        before = json.loads(args.data.read_text()) if args.data.exists() else None
        if args.engine != "postgresql":  # beside the PostgreSQL run, which stays as it was
            engines = (before or {}).get("engines", {})
            engines[args.engine] = {"runs": {f"spark-drain-{args.engine}": data["runs"]["spark-drain"]}}
            engines[args.engine]["rows"] = data["rows"]
            data = before or data
            data["engines"] = dict(sorted(engines.items()))
        elif before:  # the run it replaces stays beside it, as "the run before"; the other engines' stay
            data["previous"] = {"runs": before["runs"], "rows": before["rows"]}
            if "engines" in before:
                data["engines"] = before["engines"]
        args.data.write_text(json.dumps(data, indent=2) + "\n")
        print(f"wrote {args.data}")
    return 0


@contextlib.contextmanager
def engine_under_test(engine: str, meta: dict[str, Any], driver: str = "msodbc") -> Iterator[str]:
    """The URL of the database under test, started for the run and stopped after it."""
    if engine == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            meta["sqlite"] = f"a file in a temporary folder, sqlite3 {sqlite3_version()}"
            JARS[:] = [SQLITE_JDBC_JAR]
            yield f"sqlite:///{folder}/bench.db"
        return
    if engine == "babelfish":
        sys.path.insert(0, str(REPO / "tests"))
        from sqlserver_bed import DRIVER_NAMES, register_msodbc, start_bed

        register_msodbc()  # before any process starts: Spark's JVM and workers inherit ODBCSYSINI
        bed, reason = start_bed()
        if bed is None or driver not in bed.drivers:
            raise SystemExit(f"Babelfish: {reason or bed.missing.get(driver) if bed else reason}")
        try:
            meta["babelfish"] = f"the TDS engine (tests/sqlserver_bed.py) through {DRIVER_NAMES[driver]}"
            pids = sorted(bed.workdir.rglob("postmaster.pid")) if bed.workdir else []
            if pids:
                data = pids[0].read_text().split("\n")
                POSTMASTER[:] = [int(data[0])]
                SERVER_NAME[:] = ["babelfish"]
                socket_dir, port = data[4], int(data[3])
                SETTLE[:] = [lambda: postgres_settle(socket_dir, port, vacuum=False)]
            yield bed.drivers[driver]
        finally:
            bed.stop()
        return
    from postgres_bed import throwaway_postgres

    with throwaway_postgres(durable=True) as cluster:
        POSTMASTER[:] = [int((cluster.data / "postmaster.pid").read_text().split()[0])]
        SETTLE[:] = [lambda: postgres_settle(str(cluster.root), cluster.port)]
        try:
            yield cluster.url()
        finally:
            SETTLE.clear()


def sqlite3_version() -> str:
    import sqlite3

    return sqlite3.sqlite_version


def postgres_settle(socket_dir: str, port: int, vacuum: bool = True) -> None:
    """``VACUUM (ANALYZE)`` (with ``vacuum``) and ``CHECKPOINT`` on a PostgreSQL server through its socket,
    as its superuser: the benchmark's own cluster, or the server under Babelfish."""
    import psycopg

    with psycopg.connect(
        host=socket_dir, port=port, user="postgres", dbname="postgres", autocommit=True
    ) as c:
        if vacuum:
            c.execute("VACUUM (ANALYZE)")
        c.execute("CHECKPOINT")


def data_file(meta: dict[str, Any], results: list[dict[str, Any]], command: str) -> dict[str, Any]:
    """The run as docs/data/spark-drain.json, which benchmarks/render.py puts into the docs."""
    run = {
        "commit": meta["commit"],
        "when": meta["date"],
        "command": command,
        "machine": meta["machine"],
        "load_average_before": [round(value, 2) for value in meta["load_average_before"]],
        "load_average_after": [round(value, 2) for value in meta["load_average_after"]],
        "seconds": meta["seconds"],
        "source": f"written by {command}, one run at commit {meta['commit']}",
        "engine": meta["engine"],
        "baseline": meta["baseline"],
    }
    rows = []
    for row in results:
        job = row["drain"]["job"]
        rows.append(
            {
                "n": row["n"],
                "baseline": row["baseline"],
                "jdbc_msgs_per_s": row["jdbc_msgs_per_s"],
                "drain_msgs_per_s": row["drain_msgs_per_s"],
                "drain_read_in_place": job["read_in_place"],
                "jdbc_s": round(row["jdbc"]["job"]["seconds"], 1),
                "drain_s": round(job["seconds"], 1),
                "drain_receive_s": round(job["receive_seconds"], 1),
                "drain_read_transform_s": round(job["compute_seconds"], 1),
                "drain_write_commit_s": round(job["commit_seconds"], 1),
                "jvm_peak_mb_drain": row["drain"]["jvm_mb"],
                "jvm_peak_mb_jdbc": row["jdbc"]["jvm_mb"],
                "python_peak_mb_drain": row["drain"]["python_driver_mb"],
                "python_peak_mb_jdbc": row["jdbc"]["python_driver_mb"],
                "python_workers_peak_mb_drain": row["drain"]["python_workers_mb"],
                "cpu_s_drain": row["drain"]["cpu_seconds"],
                "cpu_s_jdbc": row["jdbc"]["cpu_seconds"],
                "wall_s_drain": row["drain"]["wall_seconds"],
                "wall_s_jdbc": row["jdbc"]["wall_seconds"],
                "disk_mb_drain": row["drain"]["disk_mb"],
                "disk_mb_jdbc": row["jdbc"]["disk_mb"],
            }
        )
        if job.get("hold_seconds") is not None:
            rows[-1]["drain_hold_s"] = round(job["hold_seconds"], 1)
        if "drain_staged" in row:
            staged = row["drain_staged"]
            rows[-1].update(
                drain_staged_msgs_per_s=row["drain_staged_msgs_per_s"],
                drain_staged_s=round(staged["job"]["seconds"], 1),
                drain_staged_receive_s=round(staged["job"]["receive_seconds"], 1),
                drain_staged_read_transform_s=round(staged["job"]["compute_seconds"], 1),
                drain_staged_write_commit_s=round(staged["job"]["commit_seconds"], 1),
                source_staged_receive_s=round(row["source_receive"]["job"]["seconds"], 1),
                jvm_peak_mb_drain_staged=staged["jvm_mb"],
                python_peak_mb_drain_staged=staged["python_driver_mb"],
                cpu_s_drain_staged=staged["cpu_seconds"],
                wall_s_drain_staged=staged["wall_seconds"],
                disk_mb_drain_staged=staged["disk_mb"],
            )
        if "stream" in row:
            stream = row["stream"]
            rows[-1].update(
                stream_per_trigger=row["stream_per_trigger"],
                jdbc_file_msgs_per_s=row["jdbc_file_msgs_per_s"],
                stream_msgs_per_s=row["stream_msgs_per_s"],
                jdbc_file_s=round(row["jdbc_file"]["job"]["seconds"], 1),
                stream_s=round(stream["job"]["seconds"], 1),
                stream_micro_batches=stream["job"]["micro_batches"],
                stream_read_in_place=stream["job"].get("read_in_place", False),
                jvm_peak_mb_stream=stream["jvm_mb"],
                jvm_peak_mb_jdbc_file=row["jdbc_file"]["jvm_mb"],
                python_peak_mb_stream=stream["python_driver_mb"],
                python_peak_mb_jdbc_file=row["jdbc_file"]["python_driver_mb"],
                stream_phase_s=stream["job"]["phase_seconds"],
                cpu_s_stream=stream["cpu_seconds"],
                cpu_s_jdbc_file=row["jdbc_file"]["cpu_seconds"],
                wall_s_stream=stream["wall_seconds"],
                wall_s_jdbc_file=row["jdbc_file"]["wall_seconds"],
                disk_mb_stream=stream["disk_mb"],
                disk_mb_jdbc_file=row["jdbc_file"]["disk_mb"],
                stream_columns=row["stream_columns"],
            )
        if "stream_all_columns" in row:
            every = row["stream_all_columns"]
            rows[-1].update(
                stream_all_columns_msgs_per_s=row["stream_all_columns_msgs_per_s"],
                stream_all_columns_s=round(every["job"]["seconds"], 1),
                stream_all_columns_phase_s=every["job"]["phase_seconds"],
                cpu_s_stream_all_columns=every["cpu_seconds"],
                wall_s_stream_all_columns=every["wall_seconds"],
            )
    return {
        "about": "The Spark drain benchmark (benchmarks/spark_drain_bench.py) shown in benchmarks/README.md "
        "and docs/spark.md, rendered by benchmarks/render.py (pages/spark_drain.py); written by the "
        'benchmark\'s --data option. "previous" keeps the run this one replaced. "engines" holds the runs '
        'of --engine sqlite and --engine babelfish, each beside its own baseline (a row\'s "baseline": jdbc '
        "or raw; its jdbc_* fields hold that baseline's figures).",
        "runs": {"spark-drain": run},
        "rows": rows,
    }


if __name__ == "__main__":
    sys.exit(main())
