"""The Spark bridge's jobs on real engines: one shared local[2,4] session in-process, and spark-submit runs.

Accounting is exact in every test: each message sent is, at the end, exactly once in the output (table and
queue sinks), at least once with its message id (file sinks), or still in the input queue; expired messages
are counted as dropped; the staging table is empty.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs a Java runtime (apt-get install default-jre-headless)", allow_module_level=True)

from reliability_figures import counted
from spark_cluster import SPARK_HOME
from sqlalchemy.engine import make_url

from airflow_provider_sqlqueue.demo.orders import make_orders
from airflow_provider_sqlqueue.spark import DRAIN_JOB, FILL_JOB
from airflow_provider_sqlqueue.spark.config import (
    PASSWORD_ENV,
    URL_ENV,
    Sink,
    join_credentials,
    safe_path_part,
    split_credentials,
)
from airflow_provider_sqlqueue.spark.drain import (
    Drain,
    DrainConfig,
    load_transform,
    message_row,
    run_drain,
)
from airflow_provider_sqlqueue.spark.drain.receive import receive_partition
from airflow_provider_sqlqueue.spark.fill import FillConfig, fill_queue
from airflow_provider_sqlqueue.spark.tables import (
    BridgeSql,
    bridge_tables,
    create_bridge_tables,
    create_sink_table,
)
from airflow_provider_sqlqueue.spark.transforms import ORDER_ROW_COLUMNS
from airflow_provider_sqlqueue.transport import ConfigurationError, OutgoingMessage, PermissionDenied

HERE = Path(__file__).resolve().parent
FAULTS = HERE / "spark_faults.py"
FAULT_LOG_ENV = "SQLQUEUE_SPARK_FAULT_LOG"  # spark_faults.note_fault appends to it
FAULT_LOG = Path(tempfile.gettempdir()) / f"sqlqueue-spark-faults-{os.getpid()}.log"
ORDER_COLUMNS = ORDER_ROW_COLUMNS
SPARK_SUBMIT_TIMEOUT = 240
pytest_plugins = ["reliability_figures"]  # the figures fixture


# ---- fixtures and helpers ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def spark():
    """One local[2,4] session for the module: 2 threads, 4 attempts per task, so retries happen."""
    saved = {key: os.environ.get(key) for key in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON", FAULT_LOG_ENV)}
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # read when the session starts its Python workers
    os.environ[FAULT_LOG_ENV] = str(FAULT_LOG)  # inherited by the Python workers
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("sqlqueue-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    # py4j logs "Closing down clientserver connection" from __del__ at interpreter exit, after pytest
    # closed the streams it captured; keep its chatter below INFO
    logging.getLogger("py4j").setLevel(logging.WARNING)
    session.sparkContext.addPyFile(str(FAULTS))
    session.sparkContext.setLocalProperty("sqlqueue.tests.fault_log", str(FAULT_LOG))  # spark_faults.py
    yield session
    session.stop()
    FAULT_LOG.unlink(missing_ok=True)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def bridge(target):
    """``orders``, ``error``, ``results`` queues, the bridge's tables and an ``order_rows`` table."""
    with target.open() as transport:
        for name in ("orders", "error", "results"):
            transport.queue(name).create()
        create_bridge_tables(transport, "orders")
        create_sink_table(transport, "order_rows", ORDER_COLUMNS)
        yield transport


def config(target, run_id: str = "run-1", **overrides: Any) -> DrainConfig:
    values: dict[str, Any] = {
        "url": target.url,
        "default_schema": target.schema,
        "input_queue": "orders",
        "sink": "table:order_rows",
        "run_id": run_id,
        "transform": "airflow_provider_sqlqueue.spark.transforms.order_rows",
        "batch_size": 50,
        "partitions": 2,
        "read_slice_rows": 500,
    }
    values.update(overrides)
    return DrainConfig(**values)


def scalar(transport, sql: str, params: tuple = ()) -> Any:
    with transport.connection() as connection:
        cursor = connection.cursor()
        cursor.execute(sql, params)
        rows = transport.dialect.fetch_rows(cursor)
        connection.commit()
    return rows[0][0] if rows else None


def rows_of(transport, sql: str) -> list[tuple]:
    with transport.connection() as connection:
        cursor = connection.cursor()
        cursor.execute(sql, ())
        rows = [tuple(row) for row in transport.dialect.fetch_rows(cursor)]
        connection.commit()
    return rows


def table(transport, name: str) -> str:
    return transport.dialect.qualified_name(transport.resolve(name))


def staged(transport) -> int:
    return int(scalar(transport, f"SELECT count(*) FROM {table(transport, 'sqlqueue_spark_staging')}"))


def run_state(transport, run_id: str) -> str | None:
    sql = BridgeSql(transport, bridge_tables(transport, "orders"))
    with transport.connection() as connection:
        cursor = connection.cursor()
        cursor.execute(sql.get_run(), (run_id,))
        rows = transport.dialect.fetch_rows(cursor)
        connection.commit()
    return rows[0][0] if rows else None


def order_ids_in_table(transport) -> list[int]:
    return [
        int(row[0]) for row in rows_of(transport, f"SELECT order_id FROM {table(transport, 'order_rows')}")
    ]


def send_orders(transport, count: int, **options: Any) -> list[OutgoingMessage]:
    messages = make_orders(count, short_lived_every=None, **options)
    transport.queue("orders").send_batch(messages)
    return messages


def send_unreadable(transport, headers: str) -> None:
    """A row another system wrote, whose headers are not a header map."""
    with transport.connection() as connection:
        connection.cursor().execute(
            f"INSERT INTO {table(transport, 'orders')} (Id, Recoverable, Headers, Body) "
            "VALUES (%s, true, %s, %s)",
            (uuid.uuid4(), headers, b"{}"),
        )
        connection.commit()


def error_queue_headers(transport) -> list[str]:
    return sorted(row[0] for row in rows_of(transport, f"SELECT Headers FROM {table(transport, 'error')}"))


# ---- pieces without Spark ----------------------------------------------------------------------------
def test_credentials_split_and_join_for_every_url_form() -> None:
    url, password = split_credentials("postgresql+psycopg://app:p%40ss@db:5432/sales?sslmode=require")
    assert password == "p@ss" and "p@ss" not in url and "p%40ss" not in url
    assert make_url(join_credentials(url, password)).password == "p@ss"
    odbc = "DRIVER={ODBC Driver 18 for SQL Server};SERVER=db,1433;UID=app;PWD={se;cret}"
    stripped, password = split_credentials(odbc)
    assert password == "se;cret" and "se;cret" not in stripped
    assert "PWD={se;cret}" in join_credentials(stripped, password)
    wrapped = make_url("mssql+pyodbc:///").set(query={"odbc_connect": odbc})
    stripped, password = split_credentials(wrapped)
    assert password == "se;cret" and "cret" not in stripped
    assert "PWD={se;cret}" in make_url(join_credentials(stripped, password)).query["odbc_connect"]
    assert split_credentials("sqlite:////tmp/q.db") == ("sqlite:////tmp/q.db", None)


def test_sink_run_id_path_and_transform_checks() -> None:
    assert Sink.parse("table:order_totals") == Sink("table", "order_totals")
    assert Sink.parse("parquet:/data/out").is_file
    with pytest.raises(ConfigurationError):
        Sink.parse("jdbc:foo")
    assert safe_path_part("nightly-2026.11.21") == "nightly-2026.11.21"
    cleaned = safe_path_part("dag.task.manual__2026-11-21T00:00:00+00:00")
    assert "/" not in cleaned and ":" not in cleaned and "+" not in cleaned
    assert safe_path_part("a/b") != safe_path_part("a:b")
    with pytest.raises(ConfigurationError, match="cannot import"):
        load_transform("no_such_module.fn")
    with pytest.raises(ConfigurationError, match="no function"):
        load_transform("airflow_provider_sqlqueue.spark.transforms.nothing")
    with pytest.raises(ConfigurationError):
        DrainConfig(url="sqlite:///x", input_queue="q", sink="table:t", run_id="")
    with pytest.raises(ConfigurationError, match="heartbeat"):
        DrainConfig(url="sqlite:///x", input_queue="q", sink="table:t", run_id="r", orphan_timeout=1)
    assert "sqlite" not in repr(
        DrainConfig(url="sqlite:///secret", input_queue="q", sink="table:t", run_id="r")
    )


def test_package_zip_ships_the_jobs_and_the_core_without_airflow(tmp_path) -> None:
    import zipfile

    from airflow_provider_sqlqueue.spark import package_zip

    names = zipfile.ZipFile(package_zip(tmp_path / "sqlqueue.zip")).namelist()
    spark_dir = Path(DRAIN_JOB).parent
    modules = sorted(spark_dir.rglob("*.py"))
    assert {"drain_job.py", "fill_job.py", "run.py", "receive.py"} <= {path.name for path in modules}
    for module in modules:
        shipped = f"airflow_provider_sqlqueue/spark/{module.relative_to(spark_dir).as_posix()}"
        assert shipped in names, shipped
        source = module.read_text()
        assert not re.search(r"^\s*(from|import) airflow(\.|\s|$)", source, re.M), module  # no Airflow
    package = spark_dir.parent
    for core in ("model", "dialects", "transport"):  # what the executors import, every module of it
        for module in sorted((package / core).rglob("*.py")):
            shipped = f"airflow_provider_sqlqueue/{module.relative_to(package).as_posix()}"
            assert shipped in names, shipped


def test_message_row_decodes_headers_text_and_times() -> None:
    headers = json.dumps(
        {
            "NServiceBus.MessageId": "m-1",
            "NServiceBus.ContentType": "application/json; charset=utf-8",
            "NServiceBus.EnclosedMessageTypes": "Sales.OrderPlaced",
            "NServiceBus.TimeSent": "2026-11-21 08:00:00:000000 Z",
        }
    )
    row = message_row(7, "0b5e...", headers, b'{"a": "\xc3\xa9"}', "2026-11-21 08:00:01.500")
    assert row["message_id"] == "m-1" and row["row_version"] == 7
    assert row["content_type"].startswith("application/json") and row["message_type"] == "Sales.OrderPlaced"
    assert row["body"] == '{"a": "é"}'.encode() and row["body_text"] == '{"a": "é"}'
    assert row["time_sent"].year == 2026 and row["time_sent"].tzinfo is not None
    assert row["expires"].microsecond == 500_000
    binary = message_row(8, "id-2", "{}", b"\xff\x00", None)
    assert binary["message_id"] == "id-2" and binary["content_type"] is None and binary["body"] == b"\xff\x00"
    assert binary["body_text"] is None


def test_messages_frame_decodes_text_bodies_only(spark, target, bridge) -> None:
    from airflow_provider_sqlqueue.spark.drain import run_messages

    orders = bridge.queue("orders")
    orders.send(b'{"a": "\xc3\xa9"}', headers={"NServiceBus.ContentType": "application/json"})
    orders.send(b"\xff\x00", headers={"NServiceBus.ContentType": "application/octet-stream"})
    drain = Drain(spark, config(target, sink="parquet:/unused", transform=None))
    try:
        drain.start_run()
        drain.receive(1)
        drain._to_processing()
        frame = run_messages(spark, drain.config)
        rows = sorted(frame.collect(), key=lambda row: row.row_version)
    finally:
        drain.close()
    assert frame.columns[-3:] == ["time_sent", "expires", "body_json"]
    assert rows[0].body_text == '{"a": "é"}' and json.loads(rows[0].body_json.toJson()) == {"a": "é"}
    assert rows[1].body_text is None and rows[1].body_json is None and rows[1].body == b"\xff\x00"
    assert rows[0].headers["NServiceBus.ContentType"] == "application/json" and rows[0].time_sent is not None


def test_headers_arrow_column_matches_the_item_pairs_form() -> None:
    import pyarrow as pa

    from airflow_provider_sqlqueue.spark.drain.messages import headers_array
    from airflow_provider_sqlqueue.spark.source.schema import arrow_schema, read_schema

    maps = [{"a": "1", "b": None}, {}, {"NServiceBus.MessageId": "m", "é": "\u2028"}, {"only": ""}]
    built = headers_array(maps)
    assert built.type == arrow_schema(read_schema()).field("headers").type
    assert built.equals(pa.array([list(m.items()) for m in maps], type=built.type))
    assert built.to_pylist() == [list(m.items()) for m in maps]


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_copy_text_chunks_store_what_the_row_path_stores(spark, target) -> None:
    """The executors' COPY text (table sinks on PostgreSQL) against the driver's row-by-row COPY."""
    from datetime import date, datetime, timezone
    from decimal import Decimal

    from pyspark.sql import types as T

    from airflow_provider_sqlqueue.spark.drain.copy_text import copy_chunks
    from airflow_provider_sqlqueue.spark.drain.sinks import SinkWriter
    from airflow_provider_sqlqueue.spark.source.transactions import execute

    schema = T.StructType(
        [
            T.StructField("id", T.LongType()),
            T.StructField("text", T.StringType()),
            T.StructField("small", T.IntegerType()),
            T.StructField("ratio", T.DoubleType()),
            T.StructField("single", T.FloatType()),
            T.StructField("price", T.DecimalType(12, 4)),
            T.StructField("flag", T.BooleanType()),
            T.StructField("day", T.DateType()),
            T.StructField("moment", T.TimestampType()),
            T.StructField("wall", T.TimestampNTZType()),
            T.StructField("raw", T.BinaryType()),
        ]
    )
    moment = datetime(2026, 11, 21, 8, 0, 1, 123456, tzinfo=timezone.utc)
    rows = [
        (
            1,
            "tab\tnew\nline\rcr back\\slash \\N é \u2028 '\"",
            7,
            1e300,
            0.1,
            Decimal("-12.3456"),
            True,
            date(2026, 11, 21),
            moment,
            datetime(2026, 1, 2, 3, 4, 5, 600000),
            b"\x00\xff\\",
        ),
        (2, "", -1, float("nan"), float("inf"), Decimal("0.0001"), False, date(1, 1, 1), moment, None, b""),
        (3, None, None, None, None, None, None, None, None, None, None),
        (4, "\\N", 0, -0.0, -1.5, Decimal("99999999.9999"), None, None, None, None, None),
    ]
    frame = spark.createDataFrame(rows, schema).repartition(2)
    ddl = (
        "(id bigint, text text, small integer, ratio double precision, single double precision, "
        "price numeric(12,4), flag boolean, day date, moment timestamptz, wall timestamp, raw bytea)"
    )
    with target.open() as transport:
        for name in ("by_chunks", "by_rows"):
            execute(transport, f"CREATE TABLE {table(transport, name)} {ddl}")
        sql = BridgeSql(transport, bridge_tables(transport, "orders"))
        chunks = copy_chunks(frame)
        assert chunks is not None
        with transport.connection() as connection:
            cursor = connection.cursor()
            by_chunks = SinkWriter(transport, sql, config(target, sink="table:by_chunks"), print)
            written = by_chunks.write_copy_chunks(cursor, frame.columns, chunks.toLocalIterator())
            by_rows = SinkWriter(transport, sql, config(target, sink="table:by_rows"), print)
            by_rows.write_table(cursor, frame.columns, frame.toLocalIterator())
            connection.commit()
        assert written == 4
        chunked = rows_of(transport, f"SELECT * FROM {table(transport, 'by_chunks')} ORDER BY id")
        plain = rows_of(transport, f"SELECT * FROM {table(transport, 'by_rows')} ORDER BY id")
    assert [tuple(map(str, row)) for row in chunked] == [tuple(map(str, row)) for row in plain]
    assert chunked[0][1] == rows[0][1] and chunked[0][8] == moment and bytes(chunked[0][10]) == rows[0][10]
    assert chunked[2] == (3, *[None] * 10) and chunked[3][1] == "\\N"
    assert copy_chunks(frame.selectExpr("id", "map('k', text) AS headers")) is None  # the row path's


# ---- drains on the shared session --------------------------------------------------------------------
def test_drain_into_a_table_exactly_once_while_receives_fail_and_retry(spark, target, bridge) -> None:
    sent = send_orders(bridge, 600)
    summary = run_drain(spark, config(target, fail_receive_batch=2))
    assert summary["state"] == "committed" and summary["processed"] == 600 == summary["written"]
    assert any(task["attempt"] >= 1 for task in summary["tasks"]), summary["tasks"]
    ids = order_ids_in_table(bridge)
    assert sorted(ids) == sorted(json.loads(m.body)["order_id"] for m in sent)
    assert bridge.queue("orders").count() == 0 and staged(bridge) == 0
    again = run_drain(spark, config(target))
    assert again["skipped"] is True and again["written"] == 600
    assert len(order_ids_in_table(bridge)) == 600


@pytest.mark.slow
@pytest.mark.parametrize("target", ["sqlserver-msodbc"], indirect=True)
def test_drain_in_batches_of_a_thousand_stages_each_message_once(spark, target, bridge) -> None:
    """Babelfish through Microsoft's ODBC Driver 18: a staging INSERT of 200 rows with NULL ReplyToAddress
    and Expires (text over 4,000 characters with the driver's @Pn names) silently undid the receive's
    DELETE, so the messages stayed queued and staged, and their next receive failed on staging's key."""
    sent = send_orders(bridge, 600)
    summary = run_drain(spark, config(target, batch_size=1000))
    assert summary["state"] == "committed" and summary["processed"] == 600 == summary["written"]
    assert sorted(order_ids_in_table(bridge)) == sorted(json.loads(m.body)["order_id"] for m in sent)
    assert bridge.queue("orders").count() == 0 and staged(bridge) == 0


def test_transform_failing_once_is_retried_and_counted_exactly(spark, target, bridge) -> None:
    send_orders(bridge, 1000)
    summary = run_drain(spark, config(target, transform="spark_faults.fails_once"))
    assert summary["written"] == 1000
    ids = order_ids_in_table(bridge)
    assert len(ids) == len(set(ids)) == 1000
    assert bridge.queue("orders").count() == 0 and staged(bridge) == 0


def test_always_failing_transform_aborts_and_every_message_goes_back(spark, target, bridge) -> None:
    send_orders(bridge, 300)
    with pytest.raises(Exception, match="injected"):
        run_drain(spark, config(target, transform="spark_faults.always_fails"))
    assert run_state(bridge, "run-1") == "aborted"
    assert bridge.queue("orders").count() == 300 and staged(bridge) == 0
    assert order_ids_in_table(bridge) == []
    # the same run id again, with a transform that works: it starts over and finishes
    summary = run_drain(spark, config(target))
    assert summary["job_attempt"] == 2 and summary["written"] == 300
    assert sorted(order_ids_in_table(bridge)) == list(range(1, 301))


def test_queue_sink_message_limit_and_expired_messages(spark, target, bridge) -> None:
    bridge.queue("orders").send_batch(make_orders(200, short_lived_every=4))
    time.sleep(2.2)  # every 4th order lived 2 s
    summary = run_drain(
        spark,
        config(
            target,
            sink="queue:results",
            transform="airflow_provider_sqlqueue.spark.transforms.order_rows",
            max_messages=100,
            message_type="Sales.OrderRow",
            run_id_column="run_id",
        ),
    )
    processed = summary["processed"]
    if target.babelfish:
        # Babelfish does not skip rows other receivers hold: a partition that waited for another finds
        # those rows gone and ends with fewer than its share, so max_messages is only an upper bound.
        assert 0 < processed <= 100
    else:
        assert processed == 100
    assert summary["written"] == processed
    results = bridge.queue("results")
    with results.receive(max_messages=1000) as batch:
        bodies = [json.loads(message.body) for message in batch]
        assert {m.headers["SqlQueue.Spark.RunId"] for m in batch} == {"run-1"}
        assert {m.headers["NServiceBus.EnclosedMessageTypes"] for m in batch} == {"Sales.OrderRow"}
    assert len(bodies) == processed and {body["run_id"] for body in bodies} == {"run-1"}
    expired, left = summary["expired"], bridge.queue("orders").count()
    assert processed + expired + left == 200 - rows_expired_left(bridge)
    assert staged(bridge) == 0


def rows_expired_left(transport) -> int:
    """Expired rows still in the queue (not counted by count())."""
    everything = int(scalar(transport, f"SELECT count(*) FROM {table(transport, 'orders')}"))
    return everything - transport.queue("orders").count()


def test_unreadable_rows_go_to_the_error_queue_as_they_are_received(spark, target, bridge) -> None:
    send_orders(bridge, 100)
    p, true = bridge.dialect.placeholder, "true" if target.engine == "postgresql" else "1"
    with bridge.connection() as connection:  # a row written by another system, headers corrupted
        connection.cursor().execute(
            f"INSERT INTO {table(bridge, 'orders')} (Id, Recoverable, Headers, Body) "
            f"VALUES ({p}, {true}, {p}, {p})",
            (bridge.dialect.row_id(uuid.uuid4()), "<not json", b"{}"),
        )
        connection.commit()
    send_orders(bridge, 50, first_order_id=101)
    summary = run_drain(spark, config(target))
    assert summary["poisoned"] == 1 and summary["processed"] == summary["written"] == 150
    assert bridge.queue("error").count() == 1 and bridge.queue("orders").count() == 0
    assert sorted(order_ids_in_table(bridge)) == list(range(1, 151)) and staged(bridge) == 0


def test_file_sink_rows_carry_message_ids(spark, target, bridge, tmp_path) -> None:
    sent = send_orders(bridge, 400)
    out = tmp_path / "out"
    summary = run_drain(spark, config(target, sink=f"parquet:{out}", run_id="files 1/1"))
    assert summary["written"] == 400 and staged(bridge) == 0
    frame = spark.read.parquet(str(out))
    assert frame.count() == 400
    ids = {row.message_id for row in frame.select("message_id").collect()}
    assert ids == {str(m.id) for m in sent}
    assert {row.run_id for row in frame.select("run_id").distinct().collect()} == {
        safe_path_part("files 1/1")
    }
    with pytest.raises(ConfigurationError, match="message_id"):
        run_drain(
            spark,
            config(
                target,
                sink=f"json:{out}",
                run_id="r2",
                transform="airflow_provider_sqlqueue.spark.transforms.orders_by_customer",
            ),
        )


def test_nothing_is_received_when_the_setup_is_wrong(spark, target) -> None:
    with target.open() as transport:
        transport.queue("orders").create()
        send_orders(transport, 10)
        with pytest.raises(ConfigurationError, match="provisioning"):
            run_drain(spark, config(target))
        create_bridge_tables(transport, "orders")
        with pytest.raises(ConfigurationError, match="sink table"):
            run_drain(spark, config(target))
        with pytest.raises(ConfigurationError, match="cannot import"):
            run_drain(spark, config(target, transform="nowhere.fn"))
        assert transport.queue("orders").count() == 10
        summary = run_drain(spark, config(target, create_tables=True, sink="table:created_rows"))
        assert summary["written"] == 10
        assert int(scalar(transport, f"SELECT count(*) FROM {table(transport, 'created_rows')}")) == 10


def test_orphaned_run_is_put_back_and_drained_by_the_next_run(spark, target, bridge) -> None:
    send_orders(bridge, 300)
    crashed = config(target, run_id="crashed", heartbeat_interval=0.1, orphan_timeout=0.5)
    drain = Drain(spark, crashed)
    try:
        drain.prepare(load_transform(crashed.transform))
        assert drain.start_run() == ("receiving", 1)
        drain.receive(1)  # phase 1 done, then "the driver dies": no heartbeat from here on
    finally:
        drain.close()
    assert staged(bridge) == 300 and bridge.queue("orders").count() == 0
    time.sleep(0.7)
    summary = run_drain(spark, config(target, run_id="next", heartbeat_interval=0.1, orphan_timeout=0.5))
    assert summary["restored_orphans"] == ["crashed"] and summary["written"] == 300
    assert run_state(bridge, "crashed") == "aborted"
    assert sorted(order_ids_in_table(bridge)) == list(range(1, 301)) and staged(bridge) == 0


def descendants(root: int) -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process below ``root`` (read from /proc)."""
    table: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        table[int(entry)] = (parent, command)
    below: dict[int, tuple[int, str]] = {}
    frontier = {root}
    while frontier:
        children = {pid for pid, (parent, _) in table.items() if parent in frontier and pid not in below}
        below.update({pid: table[pid] for pid in children})
        frontier = children
    return below


def python_workers() -> list[int]:
    """This test process's PySpark Python workers: the processes pyspark.daemon forked (never the daemon)."""
    processes = descendants(os.getpid())
    daemons = {pid for pid, (_, command) in processes.items() if "pyspark.daemon" in command}
    return [pid for pid, (parent, _) in processes.items() if parent in daemons]


def sent_order_ids(sent: list[OutgoingMessage]) -> list[int]:
    return [json.loads(m.body)["order_id"] for m in sent]


def assert_exactly_once_in_table(transport, sent: list[OutgoingMessage]) -> None:
    ids = order_ids_in_table(transport)
    assert sorted(ids) == sorted(json.loads(m.body)["order_id"] for m in sent), "lost or duplicated"
    assert transport.queue("orders").count() == 0 and staged(transport) == 0


@pytest.mark.slow
def test_python_workers_killed_mid_receive_are_retried_and_lose_nothing(
    spark, target, bridge, figures
) -> None:
    """Phase 1 with batches of 10: once some batches are staged, SIGKILL every Python worker (the receive
    tasks, mid-batch: their open receives die with their connections). Spark retries the tasks; the
    output is exact."""
    sent = send_orders(bridge, 4000)
    killed: list[int] = []
    staged_at_kill: list[int] = []
    done = threading.Event()

    def killer() -> None:
        with target.open() as watcher:
            while not done.is_set():
                if run_state(watcher, "run-1") == "receiving" and staged(watcher) >= 200:
                    workers = python_workers()
                    for pid in workers:
                        os.kill(pid, signal.SIGKILL)
                    killed.extend(workers)
                    staged_at_kill.append(staged(watcher))
                    return
                time.sleep(0.01)

    thread = threading.Thread(target=killer)
    thread.start()
    try:
        summary = run_drain(spark, config(target, batch_size=10, read_in_place=False))
    finally:
        done.set()
        thread.join(30)
    assert killed, "the receive tasks finished before the kill"
    assert staged_at_kill[0] < 4000, "the kill came after phase 1"
    assert any(task["attempt"] >= 1 for task in summary["tasks"]), summary["tasks"]
    assert summary["written"] == 4000
    assert_exactly_once_in_table(bridge, sent)
    figures(
        engine=target.engine,
        sink="table",
        messages=4000,
        faults_injected=len(killed),
        staged_when_killed=staged_at_kill[0],
        retried_tasks=sum(1 for task in summary["tasks"] if task["attempt"] >= 1),
        **counted(sent_order_ids(sent), order_ids_in_table(bridge)),
    )


@pytest.mark.parametrize("sink", ["table", "queue", "parquet"])
def test_python_worker_killed_mid_transform_is_retried_per_sink_guarantee(
    spark, target, bridge, tmp_path, sink: str, figures
) -> None:
    """Phase 2: the worker of partition 0's first attempt SIGKILLs itself after 150 rows. Table and queue
    sinks hold each message exactly once; files hold each at least once, by message id."""
    sent = send_orders(bridge, 1000)
    out = tmp_path / "out"
    target_sink = {"table": "table:order_rows", "queue": "queue:results", "parquet": f"parquet:{out}"}[sink]
    FAULT_LOG.unlink(missing_ok=True)
    summary = run_drain(spark, config(target, sink=target_sink, transform="spark_faults.killed_once"))
    kills = FAULT_LOG.read_text().count("killed_once") if FAULT_LOG.exists() else 0
    assert kills >= 1, "no Python worker was killed"
    assert summary["state"] == "committed" and summary["written"] == summary["processed"] == 1000
    expected = sorted(json.loads(m.body)["order_id"] for m in sent)
    if sink == "table":
        assert_exactly_once_in_table(bridge, sent)
        accounted = counted(expected, order_ids_in_table(bridge))
    elif sink == "queue":
        with bridge.queue("results").receive(max_messages=5000) as batch:
            order_ids = sorted(json.loads(m.body)["order_id"] for m in batch)
        assert order_ids == expected
        accounted = counted(expected, order_ids)
    else:
        rows = spark.read.parquet(str(out)).select("message_id", "order_id").collect()
        assert {row.message_id for row in rows} == {str(m.id) for m in sent}  # at least once, by id
        accounted = counted([str(m.id) for m in sent], [row.message_id for row in rows])
    assert bridge.queue("orders").count() == 0 and staged(bridge) == 0
    figures(engine=target.engine, sink=sink, messages=1000, faults_injected=kills, **accounted)


@pytest.fixture
def spark_runtime_role(target, bridge, postgres_server) -> Iterator[str]:
    """A login role with only SELECT, INSERT, DELETE on the queue tables (orders, error, results), the
    bridge's rights on its three control tables, and INSERT on the sink table; no DDL. Yields its URL."""
    name, password = f"qspark_{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    schema = target.schema
    postgres_server.execute(f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}'")
    postgres_server.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{name}"')
    queues = ", ".join(f'"{schema}"."{queue}"' for queue in ("orders", "error", "results"))
    postgres_server.execute(f'GRANT SELECT, INSERT, DELETE ON {queues} TO "{name}"')
    control = ", ".join(f'"{schema}"."sqlqueue_spark_{suffix}"' for suffix in ("runs", "staging", "fill"))
    postgres_server.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON {control} TO "{name}"')
    postgres_server.execute(f'GRANT SELECT, INSERT ON "{schema}"."order_rows" TO "{name}"')
    try:
        yield make_url(target.url).set(username=name, password=password).render_as_string(hide_password=False)
    finally:
        postgres_server.execute(f'DROP OWNED BY "{name}"')
        postgres_server.execute(f'DROP ROLE "{name}"')


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_receiver_does_not_stop_early_when_its_advisory_pick_finds_its_rows_deleted_meanwhile(
    target, bridge, spark_runtime_role: str, postgres_server
) -> None:
    """Phase 1's server-side move on a role without UPDATE picks through advisory locks. It reads the queue as
    it was when its statement began, so rows that another session deleted and committed meanwhile are gone
    when its DELETE reaches them. That first move came back empty, and the receiver stopped with five
    messages still queued (CI saw a drain write 250 of 400)."""
    role = make_url(spark_runtime_role).username
    run_config = config(target, url=spark_runtime_role, run_id="lp-race", batch_size=5, partitions=1)
    send_orders(bridge, 10)
    drain = Drain(None, run_config)  # type: ignore[arg-type]  # phase 1's bookkeeping needs no Spark
    try:
        state, job_attempt = drain.start_run()
    finally:
        drain.close()
    table = f'"{target.schema}"."orders"'
    tasks: list[dict[str, Any]] = []
    with bridge.connection() as foreign:
        cursor = foreign.cursor()
        cursor.execute(
            f"DELETE FROM {table} WHERE RowVersion IN "
            f"(SELECT RowVersion FROM {table} ORDER BY RowVersion LIMIT 5)"
        )
        receiver = threading.Thread(
            target=lambda: tasks.extend(receive_partition(run_config, job_attempt, [None], 0, []))
        )
        receiver.start()
        deadline = time.monotonic() + 30
        while not int(
            postgres_server.query(
                f"SELECT count(*) FROM pg_stat_activity WHERE usename = '{role}' AND wait_event_type = 'Lock'"
            )[0][0]
        ):
            assert receiver.is_alive() and time.monotonic() < deadline, "the move never waited"
            time.sleep(0.05)
        foreign.commit()
        receiver.join(30)
    (task,) = tasks
    assert (state, task["received"], task["stopped"]) == ("receiving", 5, "empty"), task
    assert staged(bridge) == 5 and bridge.queue("orders").count() == 0


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_drain_runs_on_a_role_without_update_or_ddl_on_the_queues(
    spark, target, bridge, spark_runtime_role: str, figures
) -> None:
    """The Spark drain's runtime path (receive into staging, abort and put back, commit into a table and
    into a queue) with only SELECT/INSERT/DELETE on the queue tables; creating a missing sink table is
    refused with what is missing, before anything is received."""
    role_url = spark_runtime_role
    for queue in ("orders", "results"):
        assert not scalar(
            bridge,
            "SELECT has_any_column_privilege(%s, %s, 'UPDATE')",
            (make_url(role_url).username, f"{target.schema}.{queue}"),
        )
    sent = send_orders(bridge, 600)
    with pytest.raises(Exception, match="injected"):
        run_drain(spark, config(target, url=role_url, run_id="lp-0", transform="spark_faults.always_fails"))
    assert bridge.queue("orders").count() == 600 and staged(bridge) == 0  # put back by the role
    summary = run_drain(spark, config(target, url=role_url, run_id="lp-1", max_messages=400))
    assert summary["written"] == 400
    summary = run_drain(spark, config(target, url=role_url, run_id="lp-2", sink="queue:results"))
    assert summary["written"] == 200
    with bridge.queue("results").receive(max_messages=1000) as batch:
        in_queue = [json.loads(m.body)["order_id"] for m in batch]
    combined = sorted(order_ids_in_table(bridge) + in_queue)
    assert combined == sorted(sent_order_ids(sent)), "lost or duplicated"
    accounted = counted(sent_order_ids(sent), combined)
    assert bridge.queue("orders").count() == 0 and staged(bridge) == 0
    send_orders(bridge, 10, first_order_id=1001)
    with pytest.raises((PermissionDenied, ConfigurationError)) as refused:
        run_drain(
            spark,
            config(target, url=role_url, run_id="lp-3", sink="table:new_rows", create_tables=True),
        )
    assert "CREATE on the schema" in str(refused.value), str(refused.value)
    assert "sink table" in str(refused.value) and "new_rows" in str(refused.value), str(refused.value)
    assert bridge.queue("orders").count() == 10 and staged(bridge) == 0
    figures(
        engine="postgresql",
        messages=600,
        sinks="table, queue",
        **accounted,
    )


def test_fill_sends_each_batch_once_across_retries_and_reruns(spark, target, bridge) -> None:
    from pyspark.sql import functions as F

    frame = spark.range(0, 1000, numPartitions=2).select(
        F.col("id").alias("order_id"), (F.col("id") % 7).alias("customer")
    )
    fill = FillConfig(
        url=target.url,
        default_schema=target.schema,
        queue="results",
        run_id="fill-1",
        batch_size=100,
        message_type="Sales.Backfill",
        fail_after_batch=2,  # every task's first attempt dies after committing two batches
    )
    summary = fill_queue(spark, frame, fill)
    assert summary["run_messages"] == 1000 and summary["run_batches"] == 10
    assert [(t["attempt"], t["skipped"], t["sent"]) for t in summary["tasks"]] == [(1, 200, 300)] * 2
    again = fill_queue(spark, frame, fill)
    assert again["sent"] == 0 and again["skipped_already_sent"] == 1000
    results = bridge.queue("results")
    with results.receive(max_messages=5000) as batch:
        order_ids = [json.loads(m.body)["order_id"] for m in batch]
        assert len({m.id for m in batch}) == 1000
    assert sorted(order_ids) == list(range(1000))


# ---- spark-submit ------------------------------------------------------------------------------------
def spark_submit(
    job: str,
    args: list[str],
    url: str,
    *,
    master: str = "local[2,4]",
    py_files: Path | list[Path] | None = None,
    conf: dict[str, str] | None = None,
) -> subprocess.Popen:
    """``spark-submit`` of a shipped job with the credentials in its environment. A local master's Python
    workers run this Python; for a cluster give ``conf`` (deploy mode, the executors' Python, ...)."""
    bindir = Path(sys.executable).parent
    stripped, password = split_credentials(url)
    env = {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
        "SPARK_LOCAL_IP": "127.0.0.1",
        URL_ENV: stripped,
        **({PASSWORD_ENV: password} if password else {}),
    }
    if master.startswith("local"):
        env["PYSPARK_PYTHON"] = sys.executable
    else:
        env.pop("PYSPARK_PYTHON", None)
        # A cluster's Python processes (the executors', the driver's data source planning) run an interpreter
        # without PySpark: they need Spark's own home, whose pyspark.zip tests/conftest.py's home leaves out.
        env["SPARK_HOME"] = str(SPARK_HOME)
    command = [str(bindir / "spark-submit"), "--master", master, "--conf", "spark.ui.enabled=false"]
    command += ["--conf", "spark.sql.shuffle.partitions=2"]
    for key, value in (conf or {}).items():
        command += ["--conf", f"{key}={value}"]
    if py_files:
        files = py_files if isinstance(py_files, list) else [py_files]
        command += ["--py-files", ",".join(str(path) for path in files)]
    return subprocess.Popen(
        [*command, job, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def finish(process: subprocess.Popen) -> tuple[int, str, dict | None]:
    output, _ = process.communicate(timeout=SPARK_SUBMIT_TIMEOUT)
    summary = None
    for line in output.splitlines():
        if line.startswith("SQLQUEUE_SPARK_SUMMARY "):
            summary = json.loads(line.split(" ", 1)[1])
    return process.returncode, output, summary


def drain_args(target, run_id: str, *extra: str) -> list[str]:
    args = ["--queue", "orders", "--sink", "table:order_rows", "--run-id", run_id, "--batch-size", "100"]
    args += ["--transform", "airflow_provider_sqlqueue.spark.transforms.order_rows"]
    if target.schema:
        args += ["--default-schema", target.schema]
    return [*args, *extra]


@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_spark_submit_fill_then_drain_with_retries(target, bridge, tmp_path) -> None:
    """A real spark-submit of each shipped job: files -> fill_job -> queue -> drain_job (failing receives
    retried) -> table. The password travels in the environment only."""
    source = tmp_path / "orders.json"
    source.write_text("".join(m.body.decode() + "\n" for m in make_orders(800, short_lived_every=None)))
    fill_args = ["--queue", "orders", "--source", f"json:{source}", "--run-id", "load-1", "--partitions", "2"]
    if target.schema:
        fill_args += ["--default-schema", target.schema]
    code, output, fill_summary = finish(spark_submit(FILL_JOB, fill_args, target.url))
    assert code == 0, output[-5000:]
    assert fill_summary["run_messages"] == 800 and bridge.queue("orders").count() == 800
    drain = spark_submit(DRAIN_JOB, drain_args(target, "submit-1", "--fail-receive-batch", "2"), target.url)
    code, output, summary = finish(drain)
    assert code == 0, output[-5000:]
    assert summary["processed"] == summary["written"] == 800
    assert "drill: the first attempt" in output  # the injected failures did happen and were retried
    ids = order_ids_in_table(bridge)
    assert sorted(ids) == list(range(1, 801)) and staged(bridge) == 0
    password = make_url(target.url).password
    if password:
        assert password not in output


@contextmanager
def writers_frozen(transport, engine: str) -> Iterator[None]:
    """Hold the bridge's receivers still: on PostgreSQL they wait for the staging table (inside their batch's
    transaction, after the run-state check), on SQLite for the write lock. Released (rolled back) on
    leaving.

    SQLite's busy handler sleeps between its tries, so a writer that waits in it can starve while the
    receivers commit batch after batch: the lock is taken here with no busy wait, retried at once, so it
    is held from the first gap between two of their transactions."""
    with transport.connection() as connection:
        cursor = connection.cursor()
        if engine == "postgresql":
            cursor.execute(f"LOCK TABLE {table(transport, 'sqlqueue_spark_staging')} IN SHARE MODE", ())
        else:
            (busy_timeout,) = cursor.execute("PRAGMA busy_timeout").fetchone()
            cursor.execute("PRAGMA busy_timeout = 0")
            deadline = time.monotonic() + 60
            while True:
                try:
                    cursor.execute("BEGIN IMMEDIATE", ())
                    break
                except sqlite3.OperationalError as error:
                    if "locked" not in str(error) or time.monotonic() > deadline:
                        raise
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout)}")
        try:
            yield
        finally:
            connection.rollback()


def json_sink_message_ids(out: Path) -> list[str]:
    ids: list[str] = []
    for part in sorted(out.glob("run_id=*/*.json")):
        ids += [json.loads(line)["message_id"] for line in part.read_text().splitlines() if line.strip()]
    return ids


def sink_order_ids(transport, sink: str, out: Path) -> list[int]:
    if sink == "table":
        return order_ids_in_table(transport)
    if sink == "queue":
        with transport.queue("results").receive(max_messages=10_000) as batch:
            return [json.loads(m.body)["order_id"] for m in batch]
    ids: list[int] = []
    for part in sorted(out.glob("run_id=*/*.json")):
        ids += [json.loads(line)["order_id"] for line in part.read_text().splitlines() if line.strip()]
    return ids


DRIVER_KILLS = [
    ("sqlite", "table", "receiving"),
    ("sqlite", "table", "processing"),
    ("postgresql", "queue", "receiving"),
    ("postgresql", "json", "receiving"),
    ("postgresql", "table", "processing"),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "sink", "phase"),
    DRIVER_KILLS,
    indirect=["target"],
    ids=[f"{engine}-{sink}-{phase}" for engine, sink, phase in DRIVER_KILLS],
)
def test_spark_submit_driver_killed_mid_job_then_rerun_accounts_exactly(
    target, bridge, tmp_path, sink: str, phase: str, figures
) -> None:
    """SIGKILL the whole spark-submit (driver, JVM, Python workers) in phase 1 while its receivers are
    mid-loop with batches staged, or in phase 2 while the driver builds the plan. Then every message is
    staged under the run or still queued, none in the output. A re-run of the run id finishes it: table
    and queue sinks hold each message exactly once, the JSON files at least once by message id. The
    staging path (``--stage``; tests/test_spark_hold.py kills a driver that holds in place)."""
    count = 3000 if phase == "receiving" else 500
    sent = send_orders(bridge, count)
    out = tmp_path / "out"
    sink_arg = {"table": "table:order_rows", "queue": "queue:results", "json": f"json:{out}"}[sink]
    args = drain_args(target, "killed", "--stage")
    args[args.index("--sink") + 1] = sink_arg
    if phase == "receiving":
        args[args.index("--batch-size") + 1] = "10"
    else:
        args[args.index("--transform") + 1] = "spark_faults.hangs_on_driver"
    process = spark_submit(DRAIN_JOB, args, target.url, py_files=FAULTS)
    deadline = time.monotonic() + SPARK_SUBMIT_TIMEOUT
    started = time.monotonic()

    def reached() -> bool:
        state = run_state(bridge, "killed")
        return state == phase and (phase == "processing" or staged(bridge) >= 100)

    while not reached():
        assert process.poll() is None, process.communicate()[0][-5000:]
        assert time.monotonic() < deadline, f"the job never reached {phase}"
        time.sleep(0.05)
    if phase == "receiving":
        with writers_frozen(bridge, target.engine):
            # while frozen no receiver can finish its batch, so phase 1 cannot end before the kill
            assert run_state(bridge, "killed") == "receiving" and bridge.queue("orders").count() > 0, (
                "phase 1 ended before the receivers were held: the kill would not land mid-receive"
            )
            time.sleep(1)  # every receiver now waits in the middle of its batch loop
            os.killpg(process.pid, signal.SIGKILL)  # the driver, its JVM and the Python workers
            process.wait(30)
    else:
        time.sleep(1)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
    assert process.returncode == -signal.SIGKILL
    seconds_to_kill = time.monotonic() - started
    # killed: each message staged under the run or still queued; none lost, none in the output
    staged_after_kill, queued_after_kill = staged(bridge), bridge.queue("orders").count()
    assert run_state(bridge, "killed") == phase
    assert staged_after_kill + queued_after_kill == count and staged_after_kill >= 100
    assert sink_order_ids(bridge, sink, out) == []
    if phase == "processing":
        assert queued_after_kill == 0
    rerun_args = drain_args(target, "killed")
    rerun_args[rerun_args.index("--sink") + 1] = sink_arg
    rerun_started = time.monotonic()
    code, output, summary = finish(spark_submit(DRAIN_JOB, rerun_args, target.url))
    rerun_seconds = time.monotonic() - rerun_started
    assert code == 0, output[-5000:]
    assert summary["job_attempt"] == 2 and summary["written"] == count
    assert summary["received"] == queued_after_kill  # processing: none; receiving: the rest
    order_ids = sink_order_ids(bridge, sink, out)
    expected = sorted(json.loads(m.body)["order_id"] for m in sent)
    if sink == "json":  # at least once, by message id
        message_ids = json_sink_message_ids(out)
        assert set(message_ids) == {str(m.id) for m in sent} and set(order_ids) == set(expected)
        accounted = counted([str(m.id) for m in sent], message_ids)
    else:
        assert sorted(order_ids) == expected, "lost or duplicated"
        accounted = counted(expected, order_ids)
    assert bridge.queue("orders").count() == 0 and staged(bridge) == 0
    figures(
        engine=target.engine,
        sink=sink,
        killed_in=phase,
        messages=count,
        faults_injected=1,
        staged_when_killed=staged_after_kill,
        queued_when_killed=queued_after_kill,
        **accounted,
        seconds_to_kill=round(seconds_to_kill, 1),
        rerun_seconds=round(rerun_seconds, 1),
    )
