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
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs a Java runtime (apt-get install default-jre-headless)", allow_module_level=True)

from sqlalchemy.engine import make_url

from airflow_provider_sqlqueue.example_orders import make_orders
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
from airflow_provider_sqlqueue.spark.fill import FillConfig, fill_queue
from airflow_provider_sqlqueue.spark.tables import (
    BridgeSql,
    bridge_tables,
    create_bridge_tables,
    create_sink_table,
)
from airflow_provider_sqlqueue.transport import ConfigurationError, OutgoingMessage

HERE = Path(__file__).resolve().parent
FAULTS = HERE / "spark_faults.py"
ORDER_COLUMNS = [
    ("message_id", "string", False),
    ("order_id", "long", True),
    ("customer", "string", True),
    ("amount", "double", True),
    ("currency", "string", True),
    ("items", "int", True),
    ("time_sent", "timestamp", True),
]
SPARK_SUBMIT_TIMEOUT = 240


# ---- fixtures and helpers ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def spark():
    """One local[2,4] session for the module: 2 threads, 4 attempts per task, so retries happen."""
    saved = {key: os.environ.get(key) for key in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON")}
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # read when the session starts its Python workers
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
    yield session
    session.stop()
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
    for needed in ("spark/drain_job.py", "spark/drain.py", "transport/queue.py", "dialects/postgres.py"):
        assert f"airflow_provider_sqlqueue/{needed}" in names
    spark_dir = Path(DRAIN_JOB).parent
    for module in ("drain_job.py", "drain.py", "fill_job.py", "fill.py", "tables.py", "config.py"):
        source = (spark_dir / module).read_text()
        assert not re.search(r"^\s*(from|import) airflow(\.|\s|$)", source, re.M), module  # no Airflow


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
    assert row[0] == "m-1" and row[2] == 7 and row[5].startswith("application/json")
    assert row[6] == "Sales.OrderPlaced" and row[4] == '{"a": "é"}'.encode()
    assert row[7].year == 2026 and row[7].tzinfo is not None and row[8].microsecond == 500_000
    binary = message_row(8, "id-2", "{}", b"\xff\x00", None)
    assert binary[0] == "id-2" and binary[5] is None and binary[4] == b"\xff\x00"


def test_messages_frame_decodes_text_bodies_only(spark, target, bridge) -> None:
    from airflow_provider_sqlqueue.spark.drain import staged_messages

    orders = bridge.queue("orders")
    orders.send(b'{"a": "\xc3\xa9"}', headers={"NServiceBus.ContentType": "application/json"})
    orders.send(b"\xff\x00", headers={"NServiceBus.ContentType": "application/octet-stream"})
    drain = Drain(spark, config(target, sink="parquet:/unused", transform=None))
    try:
        drain.start_run()
        drain.receive(1)
        frame = staged_messages(spark, drain.config, *drain._staged_stats())
        rows = sorted(frame.collect(), key=lambda row: row.row_version)
    finally:
        drain.close()
    assert frame.columns[-3:] == ["time_sent", "expires", "body_json"]
    assert rows[0].body_text == '{"a": "é"}' and json.loads(rows[0].body_json.toJson()) == {"a": "é"}
    assert rows[1].body_text is None and rows[1].body_json is None and rows[1].body == b"\xff\x00"
    assert rows[0].headers["NServiceBus.ContentType"] == "application/json" and rows[0].time_sent is not None


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
    assert summary["processed"] == summary["written"] == 100
    results = bridge.queue("results")
    with results.receive(max_messages=1000) as batch:
        bodies = [json.loads(message.body) for message in batch]
        assert {m.headers["SqlQueue.Spark.RunId"] for m in batch} == {"run-1"}
        assert {m.headers["NServiceBus.EnclosedMessageTypes"] for m in batch} == {"Sales.OrderRow"}
    assert len(bodies) == 100 and {body["run_id"] for body in bodies} == {"run-1"}
    expired, left = summary["expired"], bridge.queue("orders").count()
    assert 100 + expired + left == 200 - rows_expired_left(bridge)
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
    job: str, args: list[str], url: str, *, master: str = "local[2,4]", py_files: Path | None = None
) -> subprocess.Popen:
    bindir = Path(sys.executable).parent
    stripped, password = split_credentials(url)
    env = {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        URL_ENV: stripped,
        **({PASSWORD_ENV: password} if password else {}),
    }
    command = [str(bindir / "spark-submit"), "--master", master, "--conf", "spark.ui.enabled=false"]
    command += ["--conf", "spark.sql.shuffle.partitions=2"]
    if py_files:
        command += ["--py-files", str(py_files)]
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


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)  # the protocol is the same SQL on each engine
def test_spark_submit_driver_killed_mid_run_then_rerun_finishes(target, bridge) -> None:
    send_orders(bridge, 500)
    args = drain_args(target, "killed")
    args[args.index("--transform") + 1] = "spark_faults.hangs_on_driver"
    process = spark_submit(DRAIN_JOB, args, target.url, py_files=FAULTS)
    deadline = time.monotonic() + SPARK_SUBMIT_TIMEOUT
    while run_state(bridge, "killed") != "processing":
        assert process.poll() is None, process.communicate()[0][-5000:]
        assert time.monotonic() < deadline, "the job never reached phase 2"
        time.sleep(0.5)
    time.sleep(1)
    os.killpg(process.pid, signal.SIGKILL)  # the driver, its JVM and the Python workers
    process.wait(30)
    # killed: the messages are staged under the run, none lost, none in the output
    assert staged(bridge) == 500 and bridge.queue("orders").count() == 0 and order_ids_in_table(bridge) == []
    code, output, summary = finish(spark_submit(DRAIN_JOB, drain_args(target, "killed"), target.url))
    assert code == 0, output[-5000:]
    assert summary["job_attempt"] == 2 and summary["written"] == 500 and summary["received"] == 0
    assert sorted(order_ids_in_table(bridge)) == list(range(1, 501)) and staged(bridge) == 0
