"""``df.write.format("sqlqueue")`` on SQLite, PostgreSQL and SQL Server (Babelfish): rows become messages,
one transaction per partition with its marker row, so a failed task sends nothing, a retried or duplicate
attempt of a committed partition sends nothing, and a re-run with the same runId sends only what did not
commit.

Spark runs in the shared local[2,4] session of tests/test_spark_jobs.py (2 threads, 4 attempts per task).
The writer's checks run where Spark plans the write; they are also called directly here, without a job.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_spark_jobs as jobs

from airflow_provider_sqlqueue.spark.config import PASSWORD_ENV, URL_ENV, split_credentials
from airflow_provider_sqlqueue.spark.fill import FillConfig, fill_queue
from airflow_provider_sqlqueue.spark.row_messages import ID_NAMESPACE
from airflow_provider_sqlqueue.spark.source.writer import PartitionSent, SqlQueueDataSourceWriter
from airflow_provider_sqlqueue.transport import ConfigurationError

HERE = Path(__file__).resolve().parent
# SQL Server: Babelfish through FreeTDS, where the Spark writes take 20-60 s each
# Babelfish through both drivers in CI's slow step (its Spark reads are slow).
ENGINES = [
    "sqlite",
    "postgresql",
    pytest.param("sqlserver-freetds", marks=pytest.mark.slow),
    pytest.param("sqlserver-msodbc", marks=pytest.mark.slow),
]
pytestmark = pytest.mark.parametrize("target", ENGINES, indirect=True)
spark = jobs.spark  # the module's local[2,4] session (its own instance here)
bridge = jobs.bridge  # the orders, error and results queues and the bridge's tables
FAULT_LOG, rows_of, table = jobs.FAULT_LOG, jobs.rows_of, jobs.table


@pytest.fixture(scope="module")
def sqlqueue(spark):
    """The session with the package's ``sqlqueue`` data source registered, and the tests' failing column
    shipped to the workers."""
    from airflow_provider_sqlqueue.spark import SqlQueueDataSource

    spark.sparkContext.addPyFile(str(HERE / "sqlqueue_write_source.py"))
    spark.dataSource.register(SqlQueueDataSource)
    return spark


def credential_options(target: Any) -> dict[str, str]:
    """The URL without its password and the password apart, as Spark's options must hold them."""
    url, password = split_credentials(target.url)
    return {"url": url, **({"password": password} if password else {})}


def write(frame: Any, target: Any, **options: str) -> None:
    writer = frame.write.format("sqlqueue").mode("append").options(**credential_options(target))
    if target.schema:
        writer = writer.option("defaultSchema", target.schema)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def receive_all(transport: Any, queue: str = "results") -> list[Any]:
    with transport.queue(queue).receive(max_messages=100_000) as batch:
        return list(batch)


def markers(transport: Any, run_id: str) -> list[tuple[int, int]]:
    fill = table(transport, "sqlqueue_spark_fill")
    return sorted(
        (int(part), int(messages))
        for run, part, messages in rows_of(transport, f"SELECT RunId, Part, Messages FROM {fill}")
        if run == run_id
    )


def derived(run_id: str, part: int, position: int) -> uuid.UUID:
    return uuid.uuid5(ID_NAMESPACE, f"{run_id}/{part}/{position}")


def writer_for(target: Any, schema: Any = None, **options: str) -> SqlQueueDataSourceWriter:
    from pyspark.sql.types import LongType, StructField, StructType

    given = {**credential_options(target), "queue": "results", **options}
    if target.schema:
        given["defaultSchema"] = target.schema
    return SqlQueueDataSourceWriter(given, schema or StructType([StructField("order_id", LongType())]))


# ---- rows -> messages --------------------------------------------------------------------------------
def test_rows_become_messages_with_their_bodies_headers_and_ids(sqlqueue, target, bridge) -> None:
    from pyspark.sql import types as T

    given_id = uuid.uuid4()
    schema = T.StructType(
        [
            T.StructField("body", T.BinaryType()),
            T.StructField("headers", T.MapType(T.StringType(), T.StringType())),
            T.StructField("message_id", T.StringType()),
            T.StructField("time_to_be_received_seconds", T.IntegerType()),
        ]
    )
    rows = [
        (b"\x00\xffraw", {"Custom": "a"}, None, None),
        (b"second", None, str(given_id), 90),
        (b"third", {"NServiceBus.ContentType": "text/plain"}, None, None),
        (b"fourth", None, None, None),
    ]
    frame = sqlqueue.createDataFrame(sqlqueue.sparkContext.parallelize(rows, 2), schema)
    write(frame, target, queue="results", runId="w-1", messageType="Sales.Note")
    received = {m.body: m for m in receive_all(bridge)}
    assert sorted(received) == sorted(row[0] for row in rows)
    expected_ids = {
        b"\x00\xffraw": derived("w-1", 0, 0),
        b"second": given_id,
        b"third": derived("w-1", 1, 0),
        b"fourth": derived("w-1", 1, 1),
    }
    assert {body: m.id for body, m in received.items()} == expected_ids
    for message in received.values():
        assert message.headers["SqlQueue.Spark.RunId"] == "w-1"
        assert message.headers["NServiceBus.EnclosedMessageTypes"] == "Sales.Note"
    assert received[b"\x00\xffraw"].headers["Custom"] == "a"
    assert received[b"third"].headers["NServiceBus.ContentType"] == "text/plain"
    assert received[b"second"].headers["NServiceBus.TimeToBeReceived"] == "00:01:30"
    assert received[b"second"].expires is not None and received[b"fourth"].expires is None
    assert markers(bridge, "w-1") == [(0, 2), (1, 2)]

    # without a body column the row is the JSON body; save(<queue>) names the queue
    orders = sqlqueue.range(0, 30, numPartitions=3).selectExpr("id AS order_id", "id % 4 AS customer")
    writer = orders.write.format("sqlqueue").mode("append").options(**credential_options(target))
    writer = writer.option("runId", "w-2")
    if target.schema:
        writer = writer.option("defaultSchema", target.schema)
    writer.save("results")
    bodies = [(json.loads(m.body), m.headers["NServiceBus.ContentType"]) for m in receive_all(bridge)]
    assert sorted(bodies, key=lambda b: b[0]["order_id"]) == [
        ({"order_id": i, "customer": i % 4}, "application/json") for i in range(30)
    ]


# ---- one transaction per partition -------------------------------------------------------------------
def test_a_partition_failing_midway_sends_none_of_its_rows_and_a_rerun_sends_only_it(
    sqlqueue, target, bridge
) -> None:
    """Partition 1's row 2200 of 2500 has an unreadable message_id: every attempt of that task fails after
    sending two chunks of 1000 in its transaction, so none of partition 1 is in the queue while partition 0
    committed. The re-run with the same runId (the row fixed) sends partition 1 alone."""
    from pyspark.sql import functions as F

    def frame(bad_id: str | None) -> Any:
        ids = F.when(F.col("id") == 4700, F.lit(bad_id)).otherwise(F.lit(None).cast("string"))
        return sqlqueue.range(0, 5000, numPartitions=2).select(
            F.col("id").alias("order_id"), ids.alias("message_id")
        )

    with pytest.raises(Exception, match="row 2200 of partition 1: message_id 'not-a-uuid' is not a UUID"):
        write(frame("not-a-uuid"), target, queue="results", runId="w-3")
    assert markers(bridge, "w-3") == [(0, 2500)]
    assert bridge.queue("results").count() == 2500

    write(frame(None), target, queue="results", runId="w-3")
    assert markers(bridge, "w-3") == [(0, 2500), (1, 2500)]
    messages = receive_all(bridge)
    assert len({m.id for m in messages}) == len(messages) == 5000
    assert sorted(json.loads(m.body)["order_id"] for m in messages) == list(range(5000))


@pytest.mark.parametrize("batch_size", [None, "1000"])
def test_a_task_failing_in_its_first_attempt_is_retried_without_duplicates(
    sqlqueue, target, bridge, batch_size
) -> None:
    """A UDF fails the first attempt of partition 1 after 2200 of its rows (Arrow batches of 500 reach the
    writer, so two chunks are sent in the open transaction first); the retry sends the partition once. With
    ``batchSize`` 1000 the first attempt committed batches 0 and 1 of partition 1, and the retry sends only
    batch 2."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType
    from sqlqueue_write_source import order_id_failing_in_first_attempt

    FAULT_LOG.unlink(missing_ok=True)
    failing = F.udf(order_id_failing_in_first_attempt, LongType())
    frame = sqlqueue.range(0, 5000, numPartitions=2).select(failing(F.col("id")).alias("order_id"))
    sqlqueue.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
    options = {"batchSize": batch_size} if batch_size else {}
    try:
        write(frame, target, queue="results", runId="w-4", **options)
    finally:
        sqlqueue.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert "write_failed_once" in FAULT_LOG.read_text()
    per_partition = [1000, 1000, 500] if batch_size else [2500]
    assert markers(bridge, "w-4") == sorted((part, count) for part in (0, 1) for count in per_partition)
    messages = receive_all(bridge)
    assert len({m.id for m in messages}) == len(messages) == 5000
    assert sorted(json.loads(m.body)["order_id"] for m in messages) == list(range(5000))


def test_writing_again_with_the_same_run_id_sends_nothing_and_without_one_sends_again(
    sqlqueue, target, bridge
) -> None:
    frame = sqlqueue.range(0, 40, numPartitions=2).selectExpr("id AS order_id")
    write(frame, target, queue="results", runId="w-5")
    write(frame, target, queue="results", runId="w-5")
    assert bridge.queue("results").count() == 40
    write(frame, target, queue="results")  # a run id of its own each time
    write(frame, target, queue="results")
    messages = receive_all(bridge)
    assert len(messages) == 120 and len({m.id for m in messages}) == 120
    run_ids = {m.headers["SqlQueue.Spark.RunId"] for m in messages}
    assert len(run_ids) == 3 and "w-5" in run_ids


def test_a_duplicate_attempt_racing_a_committed_one_sends_nothing(target, bridge) -> None:
    """Two attempts of one partition at once (speculation): attempt A holds its transaction open while B
    runs. Whichever commits first wins; the other's marker collides, its sends roll back, and it reports the
    partition as already sent. On SQLite B waits for A's write lock; on PostgreSQL B commits first."""
    from pyspark.sql import Row

    writer = writer_for(target, runId="w-6")
    rows = [Row(order_id=i) for i in range(1500)]
    a_started, release_a = threading.Event(), threading.Event()
    results: dict[str, PartitionSent | BaseException] = {}

    def held(items: list[Any]) -> Iterator[Any]:
        for index, item in enumerate(items):
            if index == 1200:  # one chunk of 1000 sent in A's open transaction
                a_started.set()
                release_a.wait(30)
            yield item

    def attempt(name: str, items: Iterator[Any]) -> None:
        try:
            results[name] = writer.write(items)
        except BaseException as error:
            results[name] = error

    a = threading.Thread(target=attempt, args=("a", held(rows)))
    a.start()
    assert a_started.wait(30)
    b = threading.Thread(target=attempt, args=("b", iter(rows)))
    b.start()
    b.join(3)  # PostgreSQL: B is done; SQLite: B waits for A's lock
    release_a.set()
    a.join(60)
    b.join(60)
    outcomes = sorted((r.sent, r.already_sent) for r in results.values() if isinstance(r, PartitionSent))
    assert outcomes == [(0, True), (1500, False)], results
    assert markers(bridge, "w-6") == [(0, 1500)]
    messages = receive_all(bridge)
    assert len({m.id for m in messages}) == len(messages) == 1500


# ---- checks before anything is sent ------------------------------------------------------------------
def test_bad_options_and_frames_are_refused_before_anything_is_sent(target, bridge) -> None:
    from pyspark.sql import types as T

    def refused(match: str, schema: Any = None, **options: Any) -> None:
        with pytest.raises(ConfigurationError, match=match):
            writer_for(target, schema, **options)

    refused("need option\\('queue'", queue="")
    refused("nowhere.* does not exist", queue="nowhere")
    refused("unknown option 'batchsizes'", batchsizes="10")
    refused("batchSize must be a positive integer, not '0'", batchSize="0")
    refused("batchSize must be a positive integer, not 'ten'", batchSize="ten")
    refused("createTables must be true or false", createTables="yes")
    refused("a run id is at most 200 characters", runId="r" * 201)
    body_long = T.StructType([T.StructField("body", T.LongType())])
    refused("body must be binary or string, not bigint", body_long)
    extra = T.StructType([T.StructField("body", T.StringType()), T.StructField("note", T.StringType())])
    refused("column\\(s\\) note would be dropped", extra)
    headers = T.StructType([T.StructField("headers", T.MapType(T.StringType(), T.LongType()))])
    refused("headers must be map<string,string>", headers)
    with pytest.raises(ConfigurationError, match="only appended to"):
        SqlQueueDataSourceWriter({**credential_options(target), "queue": "results"}, body_long, True)
    assert bridge.queue("results").count() == 0

    # the marker table: missing is an error unless createTables lets the writer create it
    with target.open() as transport:
        transport.queue("fresh").create()
    refused(r"other_fill.* does not exist", queue="fresh", prefix="other")
    created = writer_for(target, queue="fresh", prefix="other", createTables="TRUE")
    assert created.write(iter([])).sent == 0


def test_a_refused_write_reaches_save_and_sends_nothing(sqlqueue, target, bridge) -> None:
    frame = sqlqueue.range(0, 10).selectExpr("id AS order_id", "CAST(id AS string) AS body")
    with pytest.raises(Exception, match="order_id would be dropped"):
        write(frame, target, queue="results")
    with pytest.raises(Exception, match=r"nowhere.* does not exist"):
        write(frame.select("body"), target, queue="nowhere")
    overwrite = frame.select("body").write.format("sqlqueue").mode("overwrite").option("queue", "results")
    if target.schema:
        overwrite = overwrite.option("defaultSchema", target.schema)
    with pytest.raises(Exception, match="only appended to"):
        overwrite.options(**credential_options(target)).save()
    assert bridge.queue("results").count() == 0


def test_the_fill_job_refuses_the_same_frames_before_sending(sqlqueue, target, bridge) -> None:
    frame = sqlqueue.range(0, 10).selectExpr("id AS order_id", "CAST(id AS string) AS body")
    config = FillConfig(url=target.url, default_schema=target.schema, queue="results", run_id="fill-bad")
    with pytest.raises(ConfigurationError, match="order_id would be dropped"):
        fill_queue(sqlqueue, frame, config)
    assert bridge.queue("results").count() == 0 and markers(bridge, "fill-bad") == []


def test_credentials_come_from_the_environment_and_stay_out_of_reprs_and_errors(
    target, bridge, monkeypatch
) -> None:
    """A URL without its password takes SQLQUEUE_PASSWORD; no URL at all takes SQLQUEUE_URL as the jobs do.
    (PostgreSQL's test server requires the password, so a missing one fails here.)"""
    from pyspark.sql.types import LongType, StructField, StructType

    schema = StructType([StructField("order_id", LongType())])
    stripped, password = split_credentials(target.url)
    base = {"queue": "results", **({"defaultSchema": target.schema} if target.schema else {})}
    monkeypatch.delenv(URL_ENV, raising=False)
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    with pytest.raises(ConfigurationError, match=f"option url .*or {URL_ENV}"):
        SqlQueueDataSourceWriter(base, schema)
    if password:
        with pytest.raises(Exception) as no_password:
            SqlQueueDataSourceWriter({**base, "url": stripped}, schema)
        assert password not in str(no_password.value)
        monkeypatch.setenv(PASSWORD_ENV, password)
    from_option = SqlQueueDataSourceWriter({**base, "url": stripped}, schema)
    monkeypatch.setenv(URL_ENV, stripped)
    from_environment = SqlQueueDataSourceWriter(base, schema)
    for writer in (from_option, from_environment):
        assert writer.write(iter([])).sent == 0
        assert "results" in repr(writer)
        if password:
            assert password not in repr(writer)
    if password:
        with pytest.raises(ConfigurationError) as missing:
            SqlQueueDataSourceWriter({**base, **credential_options(target), "queue": "nowhere"}, schema)
        assert "nowhere" in str(missing.value) and password not in str(missing.value)
        with pytest.raises(ConfigurationError, match="holds a password") as in_url:
            SqlQueueDataSourceWriter({**base, "url": target.url}, schema)
        assert password not in str(in_url.value)


SUBMITTED_WRITE = """
import sys
from pyspark.sql import SparkSession
from airflow_provider_sqlqueue.spark import SqlQueueDataSource

spark = SparkSession.builder.getOrCreate()
spark.dataSource.register(SqlQueueDataSource)
writer = spark.range(0, 100, numPartitions=2).selectExpr("id AS order_id").write.format("sqlqueue")
if sys.argv[1]:
    writer = writer.option("defaultSchema", sys.argv[1])
writer.option("queue", "results").option("runId", "submitted").mode("append").save()
spark.stop()
"""


@pytest.mark.slow
def test_spark_submit_takes_the_credentials_from_the_environment_only(target, bridge, tmp_path) -> None:
    """A spark-submit whose write names no URL: the driver's SQLQUEUE_URL and SQLQUEUE_PASSWORD (the
    password only there on PostgreSQL and SQL Server) reach the executors, and the output never shows it."""
    job = tmp_path / "write_job.py"
    job.write_text(SUBMITTED_WRITE)
    shipped = [HERE / "sqlqueue_write_source.py", HERE / "spark_faults.py"]
    process = jobs.spark_submit(str(job), [target.schema or ""], target.url, py_files=shipped)
    code, output, _ = jobs.finish(process)
    assert code == 0, output[-5000:]
    assert markers(bridge, "submitted") == [(0, 50), (1, 50)]
    assert sorted(json.loads(m.body)["order_id"] for m in receive_all(bridge)) == list(range(100))
    password = split_credentials(target.url)[1]
    if password:
        assert password not in output
