"""Staged runs of the Spark data source, seen and ended without Spark's own session: a batch read planned by
its reader (the driver's ``partitions()``) and a stream's planned micro-batch leave messages outside the
queue; ``sqlqueue spark runs`` and the hook list them per run with their age, ``release`` puts them back at
the end of the queue and ``ack`` deletes them, on SQLite, PostgreSQL and Babelfish."""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from test_airflow_dags import airflow_db  # noqa: F401  (a fixture)
from test_spark_jobs import send_orders

from airflow_provider_sqlqueue import cli
from airflow_provider_sqlqueue.cli._support import Exit
from airflow_provider_sqlqueue.spark.config import split_credentials
from airflow_provider_sqlqueue.spark.runs import RunRow, Runs
from airflow_provider_sqlqueue.spark.source import SourceOptions
from airflow_provider_sqlqueue.spark.source.transactions import execute
from airflow_provider_sqlqueue.spark.staged_runs import end_staged_run, staged_runs
from airflow_provider_sqlqueue.spark.tables import RECEIVING, BridgeSql, bridge_tables, create_bridge_tables
from airflow_provider_sqlqueue.transport import ConfigurationError

ENGINES = ["sqlite", "postgresql", "sqlserver-freetds", "sqlserver-msodbc"]


@pytest.fixture
def queues(target):
    with target.open() as transport:
        for name in ("orders", "error"):
            transport.queue(name).create()
        create_bridge_tables(transport, "orders")
        yield transport


def options(target, **extra: str) -> SourceOptions:
    url, password = split_credentials(target.url)
    given = {"url": url, "queue": "orders", "batchSize": "7"}
    if password:
        given["password"] = password
    if target.schema:
        given["defaultSchema"] = target.schema
    return SourceOptions.parse(given | extra)


def stage_a_batch_read(target, run_id: str) -> None:
    """What a job that failed after planning leaves: its reader received into staging, nobody acked."""
    from airflow_provider_sqlqueue.spark.source.batch import SqlQueueBatchReader

    assert SqlQueueBatchReader(options(target, runId=run_id)).partitions()


def plan_a_micro_batch(target, stream_id: str, rows: int) -> None:
    """What a stream leaves when its query ends: a planned micro-batch Spark never committed to the source."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from airflow_provider_sqlqueue.spark.source.stream import SqlQueueStreamReader

    reader = SqlQueueStreamReader(
        options(target, streamId=stream_id, stageAhead="false", readInPlace="false")
    )
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(rows))
    assert reader.partitions(start, end)


def cli_args(target) -> list[str]:
    args = ["--url", target.url]
    return [*args, "--schema", target.schema] if target.schema else args


def cli_json(capsys, target, *command: str) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert cli.main(["spark", *command[:1], *cli_args(target), *command[1:], "--json"]) == Exit.OK
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


@pytest.mark.parametrize("target", ENGINES, indirect=True)
def test_staged_runs_are_listed_then_released_to_the_end_of_the_queue_or_acknowledged(
    target, queues, capsys
) -> None:
    sent = send_orders(queues, 30)
    stage_a_batch_read(target, "nightly-1")  # takes all 30
    late = send_orders(queues, 12, first_order_id=31)
    plan_a_micro_batch(target, "orders-stream", 5)
    orders = queues.queue("orders")
    assert orders.count() == 7

    runs = cli_json(capsys, target, "runs", "orders")
    assert [(r["run_id"], r["kind"], r["state"], r["messages"]) for r in runs] == [
        ("nightly-1", "batch read", "read", 30),
        ("orders-stream", "stream", "streaming", 5),
    ]
    assert all(r["queue"] == orders.name and 0 <= r["idle_seconds"] <= r["age_seconds"] < 600 for r in runs)
    listed = [(r.run_id, r.kind, r.messages, r.low, r.high) for r in staged_runs(queues, "orders")]
    assert listed == [(r["run_id"], r["kind"], r["messages"], r["low"], r["high"]) for r in runs]

    released = cli_json(capsys, target, "release", "orders", "nightly-1")
    assert released == [{"queue": orders.name, "run_id": "nightly-1", "action": "release", "messages": 30}]
    with orders.receive(100) as batch:
        waiting = [str(message.id) for message in batch]
    # the 7 late orders the stream did not take, then the released 30 in their order
    assert waiting == [str(m.id) for m in late[5:]] + [str(m.id) for m in sent]
    assert end_staged_run(queues, "orders", "nightly-1", "release") == 0  # released before

    assert cli.main(["spark", "ack", *cli_args(target), "orders", "orders-stream"]) == Exit.USAGE
    acked = cli_json(capsys, target, "ack", "orders", "orders-stream", "--yes")
    assert acked[0]["messages"] == 5
    assert staged_runs(queues, "orders") == [] and orders.count() == 0
    with pytest.raises(ConfigurationError, match="is aborted: it cannot be acknowledged"):
        end_staged_run(queues, "orders", "nightly-1", "ack")


@pytest.mark.parametrize("target", ENGINES, indirect=True)
def test_an_acknowledged_batch_read_is_committed_and_a_drain_run_is_not_ended_by_hand(target, queues) -> None:
    send_orders(queues, 9)
    stage_a_batch_read(target, "nightly-2")
    assert end_staged_run(queues, "orders", "nightly-2", "ack") == 9
    assert end_staged_run(queues, "orders", "nightly-2", "ack") == 0
    assert queues.queue("orders").count() == 0 and staged_runs(queues, "orders") == []
    sql = BridgeSql(queues, bridge_tables(queues, "orders"))
    execute(queues, sql.insert_run(), ("drain-7", queues.queue("orders").name, "table:totals"))
    with pytest.raises(ConfigurationError, match="drain job's run"):
        end_staged_run(queues, "orders", "drain-7", "release")
    with pytest.raises(ConfigurationError, match="unknown"):
        end_staged_run(queues, "orders", "never-ran", "release")


@pytest.mark.parametrize("target", ENGINES, indirect=True)
def test_two_starts_of_one_run_id_at_once_make_one_run_and_both_resume_it(target, queues) -> None:
    """Two drivers of one run id (two tries of one Airflow task) start it at the same moment: one inserts
    the run's row; the other's insert fails on the key, a driver error the transport does not translate, and
    it takes the row as it is. The drain, the batch read and the stream all start runs this one way."""
    runs = Runs(queues, BridgeSql(queues, bridge_tables(queues, "orders")))
    name = queues.queue("orders").name
    for round_ in range(3):

        def start(run_id: str, barrier: threading.Barrier) -> tuple[RunRow, bool]:
            barrier.wait()
            return runs.start(run_id, name, "spark.read")

        with ThreadPoolExecutor(2) as pool:
            barrier = threading.Barrier(2)
            futures = [pool.submit(start, f"raced-{round_}", barrier) for _ in range(2)]
            started = [future.result() for future in futures]
        assert sorted(created for _row, created in started) == [False, True]
        assert [row[:3] for row, _created in started] == [(RECEIVING, 1, name)] * 2
        assert runs.row(f"raced-{round_}") == RunRow(RECEIVING, 1, name, None)
    with pytest.raises(ConfigurationError, match=re.escape(f"belongs to queue {name}")):
        runs.start("raced-0", queues.queue("error").name, "spark.read")
    send_orders(queues, 4)
    stage_a_batch_read(target, "raced-1")  # the batch read resumes the run a racing start made
    assert end_staged_run(queues, "orders", "raced-1", "release") == 4


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_streams_first_start_that_loses_the_race_for_its_row_takes_the_row(target, queues) -> None:
    """Two queries start one new stream: the rival has inserted the stream's row but not committed it, so
    this query reads no row, and its insert waits on the rival's key, then fails on it when the rival
    commits. That unique violation is not a SqlQueueError: the start reads the rival's row and goes on from
    it (as a run of the drain or a batch read does), instead of failing the query."""
    from airflow_provider_sqlqueue.spark.runs import STREAM_SINK
    from airflow_provider_sqlqueue.spark.source.staging import StreamMark
    from airflow_provider_sqlqueue.spark.source.stream import SqlQueueStreamReader
    from airflow_provider_sqlqueue.spark.tables import STREAMING

    runs = Runs(queues, BridgeSql(queues, bridge_tables(queues, "orders")))
    name = queues.queue("orders").name
    reader = SqlQueueStreamReader(options(target, streamId="raced", stageAhead="false", readInPlace="false"))
    waiting = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE wait_event_type = 'Lock' AND datname = current_database()"
    )
    with queues.connection() as rival, ThreadPoolExecutor(1) as pool:
        rival.cursor().execute(
            runs.sql.insert_stream(), ("raced", name, STREAM_SINK, StreamMark(0).summary())
        )
        started = pool.submit(reader.initialOffset)
        deadline = time.monotonic() + 60
        while execute(queues, waiting, write=False)[0][0] == 0:  # the query's insert waits on the key
            assert not started.done(), started.exception()
            assert time.monotonic() < deadline, "the query never inserted the stream's row"
            time.sleep(0.05)
        rival.commit()
        offset = started.result(timeout=60)
    assert offset["position"] == 0
    row = runs.row("raced")
    assert row is not None and (row.state, row.attempt, row.queue) == (STREAMING, 1, name)
    assert StreamMark.parse(row.summary, "raced").owner == reader.owner  # the query went on to claim it


def test_a_queue_without_the_bridge_tables_has_no_staged_runs(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    assert cli.main(["create", "--url", url, "orders"]) == Exit.OK
    capsys.readouterr()
    assert cli.main(["spark", "runs", "--url", url, "orders"]) == Exit.OK
    assert "no staged runs" in capsys.readouterr().out
    assert cli.main(["spark", "release", "--url", url, "orders", "x"]) == Exit.USAGE
    assert "has no Spark bridge tables" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_a_retried_spark_read_in_airflow_reads_what_its_failed_try_staged(
    airflow_db,  # noqa: F811
    target,
    tmp_path,
) -> None:
    """dag.test(): the read's first try stages the 20 orders and fails; the retry gets the same 20 under the
    same run id (no runId in the application: the task instance's); the ack task ends that run by the
    reading task's id. Nothing is left queued or staged."""
    import os
    import re
    import sys
    from pathlib import Path

    from test_airflow_dags import assert_succeeded, run_dag

    env = {
        "AIRFLOW__CORE__DAGS_FOLDER": str(Path(__file__).with_name("dags")),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2,4]"}),
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    run = run_dag(target, "sqlqueue_test_spark_read_retry", {"out": str(tmp_path)}, env=env)

    assert_succeeded(run, target)
    tries = {ti["task_id"]: ti["try_number"] for ti in run.task_instances}
    assert tries["read"] == 2, run.task_instances
    first, second = (json.loads((tmp_path / f"try-{n}.json").read_text()) for n in (1, 2))
    run_id = first["run_id"]
    assert run_id.startswith("sqlqueue_test_spark_read_retry.read.") and second["run_id"] == run_id
    assert len(first["ids"]) == 20 and second["ids"] == first["ids"]
    [acked] = re.findall(r"^ack returned (\{.*\})", run.output, flags=re.MULTILINE)
    assert json.loads(acked) == {"queue": "orders", "run_id": run_id, "action": "ack", "messages": 20}
    with target.open() as transport:
        assert transport.queue("orders").count() == 0 and staged_runs(transport, "orders") == []


def test_a_batch_read_without_run_id_takes_the_one_airflow_put_in_its_environment(tmp_path) -> None:
    """SqlQueueSparkApplicationOperator's SQLQUEUE_RUN_ID is the read's runId unless the read names one."""
    database = tmp_path / "q.db"
    database.touch()
    given = {"url": f"sqlite:///{database}", "queue": "orders"}
    environ = {"SQLQUEUE_RUN_ID": "dag.read.manual__1"}
    assert SourceOptions.parse(given, environ).run_id == "dag.read.manual__1"
    assert SourceOptions.parse(given | {"runId": "mine"}, environ).run_id == "mine"
    assert SourceOptions.parse(given, {}).run_id is None
    with pytest.raises(ConfigurationError, match="at most 200 characters"):
        SourceOptions.parse(given, {"SQLQUEUE_RUN_ID": "x" * 201})
