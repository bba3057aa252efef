"""The ``sqlqueue`` Spark data source's read side on real engines: batch reads staged under a run id until
acknowledged or released, streams whose offsets are staging positions, restarted from their checkpoints, and
spark-submit applications killed at each point of a micro-batch.

Accounting is exact: every message sent is, at the end, in the output exactly once (stream sinks keyed by
batch id, and the file sink), or still staged / queued where the test says so.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs a Java runtime (apt-get install default-jre-headless)", allow_module_level=True)

from reliability_figures import counted
from sqlalchemy.engine import make_url
from test_spark_jobs import finish, rows_of, scalar, send_orders, spark_submit, table

from airflow_provider_sqlqueue.spark import SqlQueueDataSource
from airflow_provider_sqlqueue.spark.config import PASSWORD_ENV, URL_ENV, split_credentials
from airflow_provider_sqlqueue.spark.source import SourceOptions, ack_read, release_read
from airflow_provider_sqlqueue.spark.tables import create_bridge_tables, create_sink_table
from airflow_provider_sqlqueue.transport import ConfigurationError

HERE = Path(__file__).resolve().parent
APP = HERE / "spark_source_app.py"
KILL_POINTS = ("after_receive", "mid_batch", "after_sink", "before_commit")
# SQL Server: Babelfish through FreeTDS (its bed starts once per session, its Spark reads are slow)
# Babelfish through both drivers in CI's slow step (its Spark reads are slow).
ENGINES = [
    "sqlite",
    "postgresql",
    pytest.param("sqlserver-freetds", marks=pytest.mark.slow),
    pytest.param("sqlserver-msodbc", marks=pytest.mark.slow),
]
pytest_plugins = ["reliability_figures"]  # the figures fixture


# ---- fixtures and helpers ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def spark():
    """One local[2,4] session for the module with the ``sqlqueue`` format registered."""
    saved = {key: os.environ.get(key) for key in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON")}
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("sqlqueue-source-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(SqlQueueDataSource)
    yield session
    session.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def queues(target):
    """``orders`` and ``error`` queues and the bridge's tables."""
    with target.open() as transport:
        for name in ("orders", "error"):
            transport.queue(name).create()
        create_bridge_tables(transport, "orders")
        yield transport


def source_options(target, **extra: str) -> dict[str, str]:
    """The data source's options for ``target``: the URL without its password, the password apart."""
    url, password = split_credentials(target.url)
    options = {"url": url, "queue": "orders", "batchSize": "40"}
    if password:
        options["password"] = password
    if target.schema:
        options["defaultSchema"] = target.schema
    return options | extra


def reader(spark, options: dict[str, str]):
    frame_reader = spark.read.format("sqlqueue")
    for key, value in options.items():
        frame_reader = frame_reader.option(key, value)
    return frame_reader.load()


def staged_under(transport, run_id: str) -> int:
    staging = table(transport, "sqlqueue_spark_staging")
    p = transport.dialect.placeholder
    return int(scalar(transport, f"SELECT count(*) FROM {staging} WHERE RunId = {p}", (run_id,)))


def rows_read(source_reader, partition) -> list[dict]:
    """What a reader's ``read`` hands Spark for ``partition`` (Arrow record batches), as one dict per row."""
    return [row for batch in source_reader.read(partition) for row in batch.to_pylist()]


def message_ids(sent) -> list[str]:
    return [str(message.id) for message in sent]


# ---- options, without Spark ----------------------------------------------------------------------------
def test_options_keep_the_password_out_of_the_url_option() -> None:
    with pytest.raises(ConfigurationError, match="holds a password"):
        SourceOptions.parse({"url": "postgresql://app:s3cret@db/sales", "queue": "orders"})
    with pytest.raises(ConfigurationError, match="queue"):
        SourceOptions.parse({"url": "sqlite:////tmp/q.db"})
    with pytest.raises(ConfigurationError, match="SQLQUEUE_URL"):
        SourceOptions.parse({"queue": "orders"}, environ={})
    parsed = SourceOptions.parse(
        {"queue": "orders", "maxMessagesPerTrigger": "7", "Batch_Size": "5"},
        environ={URL_ENV: "postgresql://app@db/sales", PASSWORD_ENV: "s3cret"},
    )
    assert make_url(parsed.url).password == "s3cret" and "s3cret" not in repr(parsed)
    assert (parsed.max_messages_per_trigger, parsed.batch_size, parsed.stream_id) == (7, 5, "stream:orders")
    with pytest.raises(ConfigurationError, match="positive integer"):
        SourceOptions.parse({"url": "sqlite:////tmp/q.db", "queue": "orders", "batch_size": "0"})
    assert parsed.on_uncommitted_batch == "fail"
    with pytest.raises(
        ConfigurationError, match="onUncommittedBatch must be one of fail, redeliver, discard"
    ):
        SourceOptions.parse({"url": "sqlite:////tmp/q.db", "queue": "orders", "onUncommittedBatch": "skip"})


# ---- batch reads -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ENGINES, indirect=True)
def test_batch_read_drains_the_queue_into_staged_rows_until_ack(spark, target, queues) -> None:
    """A batch read receives everything (two competing receivers), every action reads the same staged
    rows, the columns carry the messages, and ack_read deletes them; the run id cannot be read again."""
    sent = send_orders(queues, 230)
    options = source_options(target, run_id="nightly-1", receivers="2", partitions="3")
    frame = reader(spark, options)
    rows = frame.collect()
    assert sorted(row.message_id for row in rows) == sorted(message_ids(sent))
    assert queues.queue("orders").count() == 0 and staged_under(queues, "nightly-1") == 230
    by_id = {str(m.id): m for m in sent}
    for row in rows[:20]:
        message = by_id[row.message_id]
        assert bytes(row.body) == message.body
        assert json.loads(row.body_text) == json.loads(message.body)
        assert row.headers["NServiceBus.MessageId"] == row.message_id == row.native_id.lower()
        assert row.content_type == "application/json" and row.time_sent is not None
        assert row.correlation_id == row.headers.get("NServiceBus.CorrelationId")
    assert frame.count() == 230  # a second action: the same staged rows, nothing received
    send_orders(queues, 5)
    assert reader(spark, options).count() == 230 and queues.queue("orders").count() == 5
    assert ack_read(options) == 230 and ack_read(options) == 0
    assert staged_under(queues, "nightly-1") == 0
    with pytest.raises(Exception, match="was acknowledged"):
        reader(spark, options).count()


@pytest.mark.parametrize("target", ENGINES, indirect=True)
def test_batch_read_of_a_failed_job_loses_nothing(spark, target, queues) -> None:
    """The job's action fails after the receive: the messages stay staged, a re-read of the run id returns
    the same messages, release_read puts them back in order, and a later read takes them again."""
    from pyspark.sql import functions as F

    sent = send_orders(queues, 120)
    options = source_options(target, runId="fails", maxMessages="100")
    broken = F.udf(lambda _: 1 / 0, "double")
    with pytest.raises(Exception, match="ZeroDivisionError"):
        reader(spark, options).select(broken("body")).collect()
    assert staged_under(queues, "fails") == 100 and queues.queue("orders").count() == 20
    again = [row.message_id for row in reader(spark, options).orderBy("row_version").collect()]
    assert again == message_ids(sent)[:100]
    assert release_read(options) == 100 and release_read(options) == 0
    assert staged_under(queues, "fails") == 0 and queues.queue("orders").count() == 120
    retry = source_options(target, runId="fails")  # a released run id receives anew
    received = [row.message_id for row in reader(spark, retry).collect()]
    assert sorted(received) == sorted(message_ids(sent))
    assert ack_read(retry) == 120
    assert queues.queue("orders").count() == 0
    with pytest.raises(Exception, match="runId"):
        reader(spark, source_options(target)).count()


# ---- the stream reader's calls, without a query ---------------------------------------------------------
@pytest.mark.parametrize("target", ENGINES, indirect=True)
def test_stream_offsets_are_staging_positions_and_a_second_query_cannot_stage(target, queues) -> None:
    """latestOffset receives up to the limit into staging, hands out rows already staged beyond start
    before receiving more, read returns them by position, commit deletes through the end; a receive that
    starts from a stale position (another query moved the stream) rolls back, its messages still queued."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from airflow_provider_sqlqueue.spark.source.staging import (
        StreamConflict,
        StreamMark,
        bridge_sql,
        stage_stream_batch,
    )
    from airflow_provider_sqlqueue.spark.source.stream import SqlQueueStreamReader

    sent = send_orders(queues, 25)
    options = SourceOptions.parse(
        source_options(
            target, maxMessagesPerTrigger="10", batchSize="4", stageAhead="false", readInPlace="false"
        )
    )
    stream_reader = SqlQueueStreamReader(options)
    start = stream_reader.initialOffset()
    assert start["position"] == 0
    end = stream_reader.latestOffset(start, stream_reader.getDefaultReadLimit())
    assert end["position"] == 10 and queues.queue("orders").count() == 15
    assert stream_reader.latestOffset(start, ReadMaxRows(6))["position"] == 6  # staged rows first
    assert queues.queue("orders").count() == 15
    partitions = stream_reader.partitions(start, end)
    rows = [row for partition in partitions for row in rows_read(stream_reader, partition)]
    assert [row["message_id"] for row in rows] == message_ids(sent)[:10]
    assert [row["row_version"] for row in rows] == list(range(1, 11))
    stream_reader.commit(end)
    assert staged_under(queues, "stream:orders") == 0
    queue = queues.queue("orders")
    with pytest.raises(StreamConflict, match="one stream id belongs to one streaming query"):
        stage_stream_batch(queues, queue, bridge_sql(queues, options), "stream:orders", 5, StreamMark(3, 10))
    assert queue.count() == 15 and staged_under(queues, "stream:orders") == 0
    assert stream_reader.latestOffset(end, ReadMaxRows(100))["position"] == 25
    assert queue.count() == 0


def rows_in_orders(transport) -> int:
    """Every row of the orders table, expired ones included (``count()`` leaves those out)."""
    return int(scalar(transport, f"SELECT count(*) FROM {table(transport, 'orders')}"))


def queue_unreadable_and_expired(transport, target) -> tuple[list[str], list[str]]:
    """Orders around one row another system wrote with corrupt headers and one message that expired; returns
    the readable orders' ids before and after them."""
    from datetime import timedelta

    before = message_ids(send_orders(transport, 3))
    p, true = transport.dialect.placeholder, "true" if target.engine == "postgresql" else "1"
    with transport.connection() as connection:
        connection.cursor().execute(
            f"INSERT INTO {table(transport, 'orders')} (Id, Recoverable, Headers, Body) "
            f"VALUES ({p}, {true}, {p}, {p})",
            (transport.dialect.row_id(uuid.uuid4()), "<not json", b"{}"),
        )
        connection.commit()
    transport.queue("orders").send(b"{}", time_to_be_received=timedelta(seconds=1))
    after = message_ids(send_orders(transport, 4, first_order_id=4))
    time.sleep(1.2)
    return before, after


@pytest.mark.parametrize("target", ENGINES, indirect=True)
def test_stream_drops_expired_messages_and_moves_unreadable_ones_as_a_receive_does(target, queues) -> None:
    """A stream's receive (moved by the server on PostgreSQL) drops the expired message, moves the row with
    corrupt headers to the error queue in the same transaction, and stages the rest in order; positions
    only grow (an unreadable row may use one up) and the stream's end is its last position."""
    from airflow_provider_sqlqueue.spark.source.stream import SqlQueueStreamReader

    before, after = queue_unreadable_and_expired(queues, target)
    stream_reader = SqlQueueStreamReader(
        SourceOptions.parse(source_options(target, stageAhead="false", readInPlace="false"))
    )
    start = stream_reader.initialOffset()
    end = stream_reader.latestOffset(start, stream_reader.getDefaultReadLimit())
    rows = [row for p in stream_reader.partitions(start, end) for row in rows_read(stream_reader, p)]
    assert [row["message_id"] for row in rows] == before + after
    positions = [row["row_version"] for row in rows]
    assert positions == sorted(set(positions)) and end["position"] == positions[-1]
    assert queues.queue("error").count() == 1 and rows_in_orders(queues) == 0
    stream_reader.commit(end)
    assert staged_under(queues, "stream:orders") == 0
    assert stream_reader.latestOffset(end, stream_reader.getDefaultReadLimit()) == end


@pytest.mark.parametrize("target", ENGINES, indirect=True)
def test_batch_read_drops_expired_messages_and_moves_unreadable_ones_as_a_receive_does(
    spark, target, queues
) -> None:
    before, after = queue_unreadable_and_expired(queues, target)
    options = source_options(target, runId="with-poison")
    rows = reader(spark, options).orderBy("row_version").collect()
    assert [row.message_id for row in rows] == before + after
    assert queues.queue("error").count() == 1 and rows_in_orders(queues) == 0
    assert ack_read(options) == 7 and staged_under(queues, "with-poison") == 0


@pytest.mark.parametrize("target", ENGINES, indirect=True)
def test_a_new_checkpoint_refuses_a_batch_an_earlier_query_read_and_never_committed(target, queues) -> None:
    """A query plans a micro-batch and stops before Spark asks it for the next end (stop(), a failure, a
    killed driver), so the batch may or may not be in its sink: a query on a new checkpoint refuses to start,
    nothing received or deleted, unless onUncommittedBatch says redeliver (start before it) or discard (start
    after it, deleted by its first latestOffset). Staged rows no micro-batch read are always a new query's
    start."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from airflow_provider_sqlqueue.spark.source.stream import SqlQueueStreamReader

    sent = send_orders(queues, 30)

    def stream_reader(**extra: str) -> SqlQueueStreamReader:
        options = source_options(target, batchSize="4", stageAhead="false", readInPlace="false", **extra)
        return SqlQueueStreamReader(SourceOptions.parse(options))

    unread = stream_reader(streamId="never-read")
    assert unread.latestOffset(unread.initialOffset(), ReadMaxRows(3))["position"] == 3
    assert stream_reader(streamId="never-read").initialOffset()["position"] == 0  # no batch read them

    ended = stream_reader()
    first = ended.latestOffset(ended.initialOffset(), ReadMaxRows(10))
    partitions = ended.partitions({"position": 0}, first)
    read = [row["message_id"] for p in partitions for row in rows_read(ended, p)]
    assert read == message_ids(sent)[3:13]
    with pytest.raises(ConfigurationError, match=r"10 messages \(positions 1 to 10\).*onUncommittedBatch"):
        stream_reader().initialOffset()
    assert staged_under(queues, "stream:orders") == 10 and queues.queue("orders").count() == 17

    assert stream_reader(onUncommittedBatch="redeliver").initialOffset()["position"] == 0
    discarding = stream_reader(onUncommittedBatch="discard")
    start = discarding.initialOffset()
    assert start["position"] == 10
    end = discarding.latestOffset(start, ReadMaxRows(100))
    assert end["position"] == 27 and queues.queue("orders").count() == 0
    assert staged_under(queues, "stream:orders") == 17  # the discarded 10 deleted
    rows = [row["message_id"] for p in discarding.partitions(start, end) for row in rows_read(discarding, p)]
    assert rows == message_ids(sent)[13:]
    discarding.commit(end)
    assert staged_under(queues, "stream:orders") == 0


# ---- streams -----------------------------------------------------------------------------------------------
def stream(spark, options: dict[str, str]):
    stream_reader = spark.readStream.format("sqlqueue")
    for key, value in options.items():
        stream_reader = stream_reader.option(key, value)
    return stream_reader.load()


def run_available_now(writer) -> list[int]:
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination(180)
    assert not query.isActive and query.exception() is None
    return [progress["numInputRows"] for progress in query.recentProgress]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_stream_into_files_with_a_read_limit_restarts_from_its_checkpoint(
    spark, target, queues, tmp_path
) -> None:
    """availableNow with maxMessagesPerTrigger into a Parquet sink, stopped and restarted from the
    checkpoint with more messages sent in between: every message once in the files, batches within the
    limit, and the staged rows of committed batches deleted."""
    first = send_orders(queues, 130)
    options = source_options(target, maxMessagesPerTrigger="50")

    def writer():
        return (
            stream(spark, options)
            .writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
        )

    assert run_available_now(writer()) == [50, 50, 30]
    second = send_orders(queues, 70)
    assert run_available_now(writer()) == [50, 20]
    written = [row.message_id for row in spark.read.parquet(str(tmp_path / "out")).collect()]
    accounted = counted(message_ids(first + second), written)
    assert accounted == {"lost": 0, "duplicated": 0} and len(written) == 200
    assert queues.queue("orders").count() == 0
    # Spark's last latestOffset of each run (it found no more) came after the last batch's commit log entry
    assert staged_under(queues, "stream:orders") == 0

    third = send_orders(queues, 15)
    new_checkpoint = (
        stream(spark, options)
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "after" / "out"))
        .option("checkpointLocation", str(tmp_path / "after" / "checkpoint"))
    )
    assert run_available_now(new_checkpoint) == [15]  # nothing uncommitted to refuse
    after = [row.message_id for row in spark.read.parquet(str(tmp_path / "after" / "out")).collect()]
    assert sorted(after) == sorted(message_ids(third))
    assert staged_under(queues, "stream:orders") == 0


def write_batch_idempotently(transport, table_name: str):
    """A foreachBatch sink keyed by batch id: one transaction replaces the batch id's rows."""
    target_table = table(transport, table_name)
    p = transport.dialect.placeholder

    def write(frame, batch_id: int) -> None:
        rows = [(batch_id, row.message_id, row.native_id) for row in frame.collect()]
        with transport.connection() as connection:
            cursor = connection.cursor()
            begin = transport.dialect.begin_write()
            if begin:
                cursor.execute(begin, ())
            cursor.execute(f"DELETE FROM {target_table} WHERE batch_id = {p}", (batch_id,))
            if rows:
                cursor.executemany(
                    f"INSERT INTO {target_table} (batch_id, message_id, native_id) VALUES ({p}, {p}, {p})",
                    rows,
                )
            connection.commit()

    return write


SINK_TABLE_COLUMNS = [
    ("batch_id", "long", False),
    ("message_id", "string", False),
    ("native_id", "string", False),
]


@pytest.mark.slow
@pytest.mark.parametrize("target", ENGINES, indirect=True)
def test_stream_foreach_batch_table_sink_restarts_exactly_once(spark, target, queues, tmp_path) -> None:
    """foreachBatch into a table keyed by batch id, two runs on one checkpoint: every message once in the
    table. (Two queries on one stream id: test_a_query_that_starts_on_a_stream_id_takes_it_...)"""
    create_sink_table(queues, "stream_out", SINK_TABLE_COLUMNS)
    sent = send_orders(queues, 90)
    options = source_options(target, maxMessagesPerTrigger="40", partitions="3")

    def writer():
        return (
            stream(spark, options)
            .writeStream.foreachBatch(write_batch_idempotently(queues, "stream_out"))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
        )

    assert run_available_now(writer()) == [40, 40, 10]
    sent += send_orders(queues, 45)
    assert run_available_now(writer()) == [40, 5]
    written = [row[0] for row in rows_of(queues, f"SELECT message_id FROM {table(queues, 'stream_out')}")]
    assert counted(message_ids(sent), written) == {"lost": 0, "duplicated": 0}
    assert len(written) == 135 and queues.queue("orders").count() == 0


# ---- killed applications --------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("point", KILL_POINTS)
@pytest.mark.parametrize(
    ("target", "mode"),
    [("sqlite", "staged"), ("postgresql", "staged"), ("postgresql", "in_place")],
    indirect=["target"],
)
def test_stream_killed_at_each_point_then_restarted_delivers_exactly_once(
    target, queues, tmp_path, point: str, mode: str, figures
) -> None:
    """SIGKILL the whole spark-submit application (driver, JVM, Python workers) at one point of its second
    micro-batch, then run it again on the same checkpoint: the foreachBatch table sink keyed by batch id
    holds every message exactly once, and nothing is left queued or staged but the last batch's rows. Read
    in place, the killed driver's held batch is back in the queue when it dies."""
    create_sink_table(queues, "stream_out", SINK_TABLE_COLUMNS)
    count, limit = 200, 60
    sent = send_orders(queues, count)
    note = tmp_path / "killed.log"
    args = ["--queue", "orders", "--sink-table", "stream_out", "--limit", str(limit)]
    args += ["--checkpoint", str(tmp_path / "checkpoint")]
    args += ["--read-in-place", "true" if mode == "in_place" else "false"]
    if target.schema:
        args += ["--default-schema", target.schema]
    started = time.monotonic()
    code, output, _ = finish(
        spark_submit(str(APP), [*args, "--kill", point, "--note", str(note)], target.url)
    )
    assert code == -signal.SIGKILL, output[-5000:]
    assert note.read_text().startswith(f"killed {point}"), output[-5000:]
    staged_when_killed = staged_under(queues, "stream:orders")
    in_sink_when_killed = int(scalar(queues, f"SELECT count(*) FROM {table(queues, 'stream_out')}"))
    queued_when_killed = queues.queue("orders").count()
    if mode == "in_place":  # nothing staged: batches Spark had committed are gone, the others queued again
        settled = 2 * limit if point == "before_commit" else limit
        assert staged_when_killed == 0 and queued_when_killed == count - settled
    if point in ("after_receive", "mid_batch"):  # batch 0 in the sink, batch 1 staged (or queued) only
        assert in_sink_when_killed == limit
        assert staged_when_killed >= limit or mode == "in_place"
    if point in ("after_sink", "before_commit"):
        assert in_sink_when_killed == 2 * limit
    code, output, _ = finish(spark_submit(str(APP), args, target.url))
    assert code == 0, output[-5000:]
    written = [row[0] for row in rows_of(queues, f"SELECT message_id FROM {table(queues, 'stream_out')}")]
    accounted = counted(message_ids(sent), written)
    assert accounted == {"lost": 0, "duplicated": 0} and len(written) == count
    assert queues.queue("orders").count() == 0
    assert staged_under(queues, "stream:orders") <= limit
    figures(
        engine=target.engine,
        stream=mode,
        queued_when_killed=queued_when_killed,
        killed_at=point,
        messages=count,
        faults_injected=1,
        staged_when_killed=staged_when_killed,
        in_sink_when_killed=in_sink_when_killed,
        **accounted,
        seconds=round(time.monotonic() - started, 1),
    )


# ---- an empty queue, ownership of a stream id, options refused, a bounded trigger -----------------------
EVERY_ENGINE = ENGINES
# Without a Spark query; Babelfish's connections take seconds, so those runs are slow too.
NO_SPARK_ENGINES = [
    "sqlite",
    "postgresql",
    pytest.param("sqlserver-freetds", marks=pytest.mark.slow),
    pytest.param("sqlserver-msodbc", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("target", EVERY_ENGINE, indirect=True)
def test_an_empty_queue_reads_as_an_empty_frame_and_an_empty_stream_ends(
    spark, target, queues, tmp_path
) -> None:
    """Nothing arrived since the last run: the batch read is an empty DataFrame (PySpark hands read() its
    placeholder partition), ack_read acknowledges 0; an availableNow stream runs its trigger and ends, and a
    later run on the same checkpoint reads what came meanwhile."""
    options = source_options(target, runId="nothing-yet")
    frame = reader(spark, options)
    assert frame.collect() == [] and frame.count() == 0
    assert ack_read(options) == 0 and staged_under(queues, "nothing-yet") == 0

    def writer():
        return (
            stream(spark, source_options(target))
            .writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
        )

    assert sum(run_available_now(writer())) == 0
    sent = send_orders(queues, 3)
    assert sum(run_available_now(writer())) == 3
    written = [row.message_id for row in spark.read.parquet(str(tmp_path / "out")).collect()]
    assert sorted(written) == sorted(message_ids(sent))


def stream_rows(stream_reader, partitions) -> list[str]:
    return [row["message_id"] for p in partitions for row in rows_read(stream_reader, p)]


@pytest.mark.parametrize("target", NO_SPARK_ENGINES, indirect=True)
def test_a_query_that_starts_on_a_stream_id_takes_it_and_the_other_reads_nothing_more(target, queues) -> None:
    """The interleaving of two queries on one stream id (the reader's methods in Spark's order): B starts
    (initialOffset) after A staged a batch and before A planned it. B owns the stream from then on: A's
    partitions, receives, reads and commits fail naming the stream id, and no message reaches both."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from airflow_provider_sqlqueue.spark.source.staging import StreamConflict
    from airflow_provider_sqlqueue.spark.source.stream import SqlQueueStreamReader

    sent = message_ids(send_orders(queues, 30))

    def stream_reader(**extra: str) -> SqlQueueStreamReader:
        options = source_options(target, batchSize="4", stageAhead="false", readInPlace="false", **extra)
        return SqlQueueStreamReader(SourceOptions.parse(options))

    a, b = stream_reader(), stream_reader()
    a_start = a.initialOffset()
    a_end = a.latestOffset(a_start, ReadMaxRows(10))
    b_start = b.initialOffset()
    a_read: list[str] = []
    with pytest.raises(StreamConflict, match="stream:orders"):
        a_read += stream_rows(a, a.partitions(a_start, a_end))
    b_end = b.latestOffset(b_start, ReadMaxRows(10))
    b_read = stream_rows(b, b.partitions(b_start, b_end))
    assert b_read == sent[:10] and not set(a_read) & set(b_read)
    with pytest.raises(StreamConflict, match="stream:orders"):
        a.latestOffset(a_end, ReadMaxRows(10))
    with pytest.raises(StreamConflict, match="stream:orders"):
        a.commit(a_end)
    assert queues.queue("orders").count() == 20 and staged_under(queues, "stream:orders") == 10

    # B planned and is reading its second batch when C takes the stream over (redeliver): B's reads stop.
    # B's latestOffset(b_end) came after its first batch was in its commit log: those staged rows are gone.
    b_next = b.latestOffset(b_end, ReadMaxRows(10))
    assert staged_under(queues, "stream:orders") == 10 and queues.queue("orders").count() == 10
    planned = b.partitions(b_end, b_next)
    c = stream_reader(onUncommittedBatch="redeliver")
    c_start = c.initialOffset()
    with pytest.raises(StreamConflict, match="stream:orders"):
        b_read += stream_rows(b, planned)
    c_end = c.latestOffset(c_start, ReadMaxRows(100))
    c_read = stream_rows(c, c.partitions(c_start, c_end))
    assert c_read == sent[10:] and not set(b_read[10:]) & set(c_read)
    c.commit(c_end)
    assert staged_under(queues, "stream:orders") == 0 and queues.queue("orders").count() == 0


@pytest.mark.parametrize("target", NO_SPARK_ENGINES, indirect=True)
def test_a_query_restarted_from_a_checkpoint_older_than_the_streams_newest_is_refused(target, queues) -> None:
    """A plans a batch and dies; B starts on the stream id from a new checkpoint (redeliver), delivers and
    commits. A restarted from its own checkpoint would replay a batch B delivered: its replay and its next
    plan fail naming the stream, and touch nothing. B restarted from its checkpoint goes on."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from airflow_provider_sqlqueue.spark.source.stream import SqlQueueStreamReader

    sent = message_ids(send_orders(queues, 25))

    def stream_reader(**extra: str) -> SqlQueueStreamReader:
        options = source_options(target, batchSize="4", stageAhead="false", readInPlace="false", **extra)
        return SqlQueueStreamReader(SourceOptions.parse(options))

    a = stream_reader()
    a_start = a.initialOffset()
    a_end = a.latestOffset(a_start, ReadMaxRows(10))
    assert stream_rows(a, a.partitions(a_start, a_end)) == sent[:10]
    a.stop()
    b = stream_reader(onUncommittedBatch="redeliver")
    b_start = b.initialOffset()
    assert (a_start["checkpoint"], b_start["checkpoint"]) == (1, 2)
    b_end = b.latestOffset(b_start, ReadMaxRows(15))
    assert stream_rows(b, b.partitions(b_start, b_end)) == sent[:15]
    b.commit(b_end)
    queued, staged = queues.queue("orders").count(), staged_under(queues, "stream:orders")

    for call in (
        lambda restarted: restarted.partitions(a_start, a_end),
        lambda restarted: restarted.latestOffset(a_end, ReadMaxRows(10)),
        lambda restarted: restarted.commit(a_end),
    ):
        with pytest.raises(
            ConfigurationError, match="stream:orders: a query started on this stream id from a new"
        ):
            call(stream_reader())
    assert (queues.queue("orders").count(), staged_under(queues, "stream:orders")) == (queued, staged)

    b_again = stream_reader()
    b_next = b_again.latestOffset(b_end, ReadMaxRows(10))
    assert b_next["checkpoint"] == 2
    assert stream_rows(b_again, b_again.partitions(b_end, b_next)) == sent[15:]
    b_again.commit(b_next)
    assert staged_under(queues, "stream:orders") == 0 and queues.queue("orders").count() == 0


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_a_staged_read_on_sqlite_sees_the_rows_as_they_were_when_it_checked_its_owner(
    target, queues, monkeypatch
) -> None:
    """SQLite has no shared row lock to make a takeover wait for a reader that checked it owns the stream, as
    PostgreSQL and SQL Server do: its check and its read are one snapshot instead. Here query C takes the
    stream over (discarding B's planned batch), reads and commits between B's check and B's read; B still
    reads its whole planned batch, as it would have with the takeover waiting for it."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from airflow_provider_sqlqueue.spark.source import staging
    from airflow_provider_sqlqueue.spark.source.stream import SqlQueueStreamReader

    sent = message_ids(send_orders(queues, 30))

    def stream_reader(**extra: str) -> SqlQueueStreamReader:
        options = source_options(target, batchSize="4", stageAhead="false", **extra)
        return SqlQueueStreamReader(SourceOptions.parse(options))

    b = stream_reader(partitions="1")
    b_start = b.initialOffset()
    b_end = b.latestOffset(b_start, ReadMaxRows(10))
    planned = b.partitions(b_start, b_end)
    c_read: list[str] = []
    checked, taken = staging._check_owner, []

    def check_then_take_over(*args, **kwargs) -> None:
        checked(*args, **kwargs)
        if taken:  # C's own reads
            return
        taken.append(True)
        c = stream_reader(onUncommittedBatch="discard")
        c_start = c.initialOffset()
        c_end = c.latestOffset(c_start, ReadMaxRows(100))
        c_read.extend(stream_rows(c, c.partitions(c_start, c_end)))
        c.commit(c_end)

    monkeypatch.setattr(staging, "_check_owner", check_then_take_over)
    assert len(planned) == 1
    b_read = stream_rows(b, planned)
    assert c_read == sent[10:]
    assert sorted(b_read) == sorted(sent[:10])
    assert staged_under(queues, "stream:orders") == 0 and queues.queue("orders").count() == 0


@pytest.mark.parametrize("target", NO_SPARK_ENGINES, indirect=True)
def test_a_stream_without_a_read_limit_stages_a_bounded_batch_per_trigger(target, queues) -> None:
    """No maxMessagesPerTrigger: a micro-batch takes at most batchSize * DEFAULT_RECEIVES_PER_TRIGGER
    messages, with Spark's default limit and with ReadAllAvailable alike, so a deep backlog is staged a
    batch at a time and a producer that keeps pace cannot hold a trigger."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from airflow_provider_sqlqueue.spark.source.options import DEFAULT_RECEIVES_PER_TRIGGER
    from airflow_provider_sqlqueue.spark.source.stream import SqlQueueStreamReader

    bound = 2 * DEFAULT_RECEIVES_PER_TRIGGER
    send_orders(queues, bound + 15)
    options = source_options(target, batchSize="2", stageAhead="false", readInPlace="false")
    stream_reader = SqlQueueStreamReader(SourceOptions.parse(options))
    start = stream_reader.initialOffset()
    end = stream_reader.latestOffset(start, stream_reader.getDefaultReadLimit())
    assert end["position"] == bound and queues.queue("orders").count() == 15
    stream_reader.partitions(start, end)
    stream_reader.commit(end)
    assert stream_reader.latestOffset(end, ReadAllAvailable())["position"] == bound + 15


@pytest.mark.parametrize("target", NO_SPARK_ENGINES, indirect=True)
def test_a_stream_stages_the_next_trigger_while_spark_runs_the_planned_one(target, queues) -> None:
    """Once partitions() planned a micro-batch, the reader stages the next trigger's messages (no more) in
    the background; the next latestOffset hands them out without receiving, the batch after it reads them
    in order, and once a receive finds the queue empty nothing more is staged ahead. Without stageAhead it
    receives only in latestOffset."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from airflow_provider_sqlqueue.spark.source.stream import SqlQueueStreamReader

    sent = message_ids(send_orders(queues, 25))
    options = source_options(target, batchSize="4", maxMessagesPerTrigger="10", stageAhead="true")
    stream_reader = SqlQueueStreamReader(SourceOptions.parse(options))
    start = stream_reader.initialOffset()
    end = stream_reader.latestOffset(start, stream_reader.getDefaultReadLimit())
    assert end["position"] == 10 and queues.queue("orders").count() == 15
    first = [row for p in stream_reader.partitions(start, end) for row in rows_read(stream_reader, p)]
    stream_reader.wait_for_staging_ahead(timeout=60)
    assert queues.queue("orders").count() == 5 and staged_under(queues, "stream:orders") == 20
    following = stream_reader.latestOffset(end, ReadMaxRows(10))
    assert following["position"] == 20 and queues.queue("orders").count() == 5
    second = [row for p in stream_reader.partitions(end, following) for row in rows_read(stream_reader, p)]
    stream_reader.wait_for_staging_ahead(timeout=60)
    assert queues.queue("orders").count() == 0 and staged_under(queues, "stream:orders") == 15
    last = stream_reader.latestOffset(following, ReadMaxRows(10))
    third = [row for p in stream_reader.partitions(following, last) for row in rows_read(stream_reader, p)]
    stream_reader.wait_for_staging_ahead(timeout=60)
    assert [row["message_id"] for row in first + second + third] == sent
    assert stream_reader.latestOffset(last, ReadMaxRows(10)) == last
    assert staged_under(queues, "stream:orders") == 0

    send_orders(queues, 8, first_order_id=26)
    plain = SqlQueueStreamReader(
        SourceOptions.parse(source_options(target, batchSize="4", streamId="plain", readInPlace="false"))
    )
    plain_start = plain.initialOffset()
    plain_end = plain.latestOffset(plain_start, ReadMaxRows(4))
    plain.partitions(plain_start, plain_end)
    plain.wait_for_staging_ahead(timeout=60)
    assert queues.queue("orders").count() == 4


def test_body_text_is_the_body_decoded_for_text_content_types_and_replaces_bytes_that_are_not_utf8() -> None:
    """What message_row() gives for each body: decoded by Arrow, by Python when a text body is not UTF-8."""
    from airflow_provider_sqlqueue.spark.source.columns import message_row
    from airflow_provider_sqlqueue.spark.source.returned_rows import body_columns

    bodies = [b'{"a":1}', None, b"\xff\xfe", b"hi", b"", "\u00e9".encode()]
    for first in ("application/octet-stream", "text/plain"):
        types = ["application/JSON", "text/plain", first, None, "Text/CSV", "application/xml"]
        expected = [
            message_row(1, "n", json.dumps({"NServiceBus.ContentType": kind} if kind else {}), body, None)[
                "body_text"
            ]
            for body, kind in zip(bodies, types, strict=True)
        ]
        body, text = body_columns(bodies, types)
        assert body.to_pylist() == bodies and text.to_pylist() == expected
    assert expected[2] == "\ufffd\ufffd"


def test_options_refuse_unknown_keys_and_a_missing_sqlite_file(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'queues.db'}"
    with pytest.raises(ConfigurationError, match=r"unknown option 'maxMessagez'.*maxMessagesPerTrigger"):
        SourceOptions.parse({"url": url, "queue": "orders", "maxMessagez": "5"})
    missing = tmp_path / "typo.db"
    with pytest.raises(ConfigurationError, match=r"typo\.db does not exist"):
        SourceOptions.parse({"url": f"sqlite:///{missing}", "queue": "orders"})
    assert not missing.exists()


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)  # refused before the engine is reached
def test_unknown_options_and_another_schema_are_refused_before_anything_is_received(
    spark, target, queues, tmp_path
) -> None:
    """A typo in an option or a schema other than the source's fails the read where Spark plans it,
    nothing received or staged; the source's own schema is honoured."""
    from pyspark.sql.types import LongType, StructField, StructType

    from airflow_provider_sqlqueue.spark.source.returned_rows import source_schema

    send_orders(queues, 5)
    with pytest.raises(Exception, match=r"(?i)unknown option 'maxMessagez'.*known: queue"):
        reader(spark, source_options(target, runId="typo", maxMessagez="2")).count()
    other = StructType([StructField("message_id", LongType())])
    options = source_options(target, runId="schema")

    def with_schema(schema):
        frame_reader = spark.read.format("sqlqueue").schema(schema)
        for key, value in options.items():
            frame_reader = frame_reader.option(key, value)
        return frame_reader.load()

    with pytest.raises(Exception, match="schema"):
        with_schema(other).count()
    stream_reader = spark.readStream.format("sqlqueue").schema(other)
    for key, value in source_options(target).items():
        stream_reader = stream_reader.option(key, value)
    with pytest.raises(Exception, match="schema"):
        writer = stream_reader.load().writeStream.format("noop").trigger(availableNow=True)
        writer.option("checkpointLocation", str(tmp_path / "checkpoint")).start().awaitTermination(180)
    assert queues.queue("orders").count() == 5 and staged_under(queues, "schema") == 0
    assert with_schema(source_schema()).count() == 5
    assert ack_read(options) == 5


@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_a_schema_naming_some_columns_reads_only_those_with_the_same_values(
    spark, target, queues, tmp_path
) -> None:
    """A ``.schema(...)`` naming some of the source's columns (in any order) gives those columns, each value
    what the full read gives, in a batch read and in a stream (held in place on PostgreSQL); the executors
    build and hand Spark only those columns. A column the source lacks, a wrong type or a column named twice
    is refused at planning, nothing received."""
    from pyspark.sql.types import StructType

    from airflow_provider_sqlqueue.spark.source.returned_rows import source_arrow_schema, source_schema

    full = source_schema()
    picked = StructType([full["time_sent"], full["body_text"], full["message_id"]])
    sent = send_orders(queues, 30)

    def with_schema(schema, options):
        frame_reader = spark.read.format("sqlqueue").schema(schema)
        for key, value in options.items():
            frame_reader = frame_reader.option(key, value)
        return frame_reader.load()

    for refused in (
        "message_id string, shoe_size int",
        "message_id string, message_id string",
        "body string",
    ):
        with pytest.raises(Exception, match=r"\.schema\(\.\.\.\) for format\('sqlqueue'\)"):
            with_schema(refused, source_options(target, runId="refused")).count()
    assert queues.queue("orders").count() == 30 and staged_under(queues, "refused") == 0

    # a DDL string: every column nullable (the source's message_id is not); a not null body_text is refused
    with pytest.raises(Exception, match="body_text may be null"):
        with_schema("body_text string not null", source_options(target, runId="refused")).count()
    ddl = with_schema("message_id string, body binary", source_options(target, runId="ddl")).collect()
    assert sorted(row.message_id for row in ddl) == sorted(message_ids(sent))
    assert release_read(source_options(target, runId="ddl")) == 30
    partial = with_schema(picked, source_options(target, runId="picked")).collect()
    assert partial and list(partial[0].asDict()) == ["time_sent", "body_text", "message_id"]
    whole = {row.message_id: row for row in reader(spark, source_options(target, runId="picked")).collect()}
    assert sorted(whole) == sorted(row.message_id for row in partial) == sorted(message_ids(sent))
    for row in partial:
        assert (row.time_sent, row.body_text) == (
            whole[row.message_id].time_sent,
            whole[row.message_id].body_text,
        )
    assert ack_read(source_options(target, runId="picked")) == 30

    options = source_options(target, runId="", batchSize="10")
    options.pop("runId")
    stream_options = {**options, "maxMessagesPerTrigger": "20"}
    more = send_orders(queues, 25)
    stream_reader = spark.readStream.format("sqlqueue").schema(picked)
    for key, value in stream_options.items():
        stream_reader = stream_reader.option(key, value)
    writer = (
        stream_reader.load()
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
    )
    assert run_available_now(writer) == [20, 5]
    written = spark.read.parquet(str(tmp_path / "out"))
    assert written.columns == ["time_sent", "body_text", "message_id"]
    assert counted(message_ids(more), [row.message_id for row in written.collect()]) == {
        "lost": 0,
        "duplicated": 0,
    }
    assert queues.queue("orders").count() == 0

    from airflow_provider_sqlqueue.spark.source.stream import SqlQueueStreamReader

    direct = SqlQueueStreamReader(replace(SourceOptions.parse(options), columns=(("message_id", True),)))
    latest = send_orders(queues, 3)
    try:
        start = direct.initialOffset()
        end = direct.latestOffset(start, direct.getDefaultReadLimit())
        batches = [batch for part in direct.partitions(start, end) for batch in direct.read(part)]
        assert all(batch.schema == source_arrow_schema((("message_id", True),)) for batch in batches)
        assert sorted(row["message_id"] for batch in batches for row in batch.to_pylist()) == sorted(
            message_ids(latest)
        )
    finally:
        direct.stop()
