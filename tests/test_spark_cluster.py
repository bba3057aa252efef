"""The Spark bridge on a real cluster manager: a standalone master and two workers on loopback
(tests/spark_cluster.py), jobs submitted in client deploy mode, the provider shipped to the executors as a
``--py-files`` zip and nothing else of it installed there.

- the drain job drains SQLite and PostgreSQL queues through the cluster's executors;
- without the zip the executors cannot import the provider, the job fails, and every message is back in
  the queue (shipping is what makes it work, and a failed job loses nothing);
- SqlQueueSparkSubmitOperator does the same from a DAG through ``dag.test()``;
- a worker killed (with its executor and Python workers) in the middle of a drain: the job finishes on
  the other worker and every message is in the table exactly once;
- the ``sqlqueue`` data source (tests/spark_source_cluster_app.py): a batch read and an ``availableNow``
  streaming query read in the cluster's executors, and a worker killed mid-stream loses and duplicates
  nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs a Java runtime (apt-get install default-jre-headless)", allow_module_level=True)

from reliability_figures import counted
from spark_cluster import (
    SPARK_HOME,
    SparkStandalone,
    base_python,
    install_executor_site,
    spark_test_java_options,
)
from test_airflow_dags import airflow_db, assert_succeeded, run_dag  # noqa: F401  (airflow_db: a fixture)
from test_spark_jobs import (
    ORDER_COLUMNS,
    drain_args,
    error_queue_headers,
    finish,
    order_ids_in_table,
    rows_of,
    send_orders,
    send_unreadable,
    spark_submit,
    staged,
    table,
)

from airflow_provider_sqlqueue.spark import DRAIN_JOB, package_zip
from airflow_provider_sqlqueue.spark.tables import create_bridge_tables, create_sink_table

pytestmark = [pytest.mark.slow, pytest.mark.spark_cluster]

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
FAULTS = HERE / "spark_faults.py"
SOURCE_APP = HERE / "spark_source_cluster_app.py"
SOURCE_SINK_COLUMNS = [("batch_id", "long", False), ("message_id", "string", False)]
pytest_plugins = ["reliability_figures"]  # the figures fixture


@pytest.fixture(scope="module")
def executor_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_executor_site(tmp_path_factory.mktemp("executor-site"), REPO / ".ci" / "constraints.txt")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    standalone = SparkStandalone(tmp_path_factory.mktemp("spark-standalone"))
    try:
        standalone.start()
        yield standalone
    finally:
        standalone.stop()


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The provider as the executors get it: a zip for ``--py-files``."""
    return Path(package_zip(tmp_path_factory.mktemp("ship") / "airflow_provider_sqlqueue.zip"))


@pytest.fixture
def orders(target) -> Iterator:
    with target.open() as transport:
        for name in ("orders", "error"):
            transport.queue(name).create()
        create_bridge_tables(transport, "orders")
        create_sink_table(transport, "order_rows", ORDER_COLUMNS)
        yield transport


def submit(
    cluster: SparkStandalone,
    executor_site: Path,
    url: str,
    args: list[str],
    py_files: list[Path],
    executor_env: dict[str, str] | None = None,
    app: Path | str = DRAIN_JOB,
) -> subprocess.Popen:
    """An application (the drain job unless ``app`` says otherwise) on the cluster in client mode, its
    executors on the base Python with only the dependencies in ``executor_site``; the provider reaches
    them only through ``py_files``."""
    conf = {
        "spark.submit.deployMode": "client",
        "spark.pyspark.driver.python": sys.executable,
        "spark.pyspark.python": base_python(),
        "spark.executorEnv.PYTHONPATH": str(executor_site),
        "spark.task.maxFailures": "4",
        "spark.executor.extraJavaOptions": spark_test_java_options(),
        **{f"spark.executorEnv.{key}": value for key, value in (executor_env or {}).items()},
    }
    return spark_submit(str(app), args, url, master=cluster.master_url, py_files=py_files, conf=conf)


def kill_the_worker_that_noted(
    cluster: SparkStandalone, process: subprocess.Popen, fault_log: Path
) -> int | None:
    """Wait for a Python worker of the cluster to note itself in ``fault_log`` (spark_faults.note_fault),
    then SIGKILL the Spark worker it runs under; the killed worker's index, or None if none noted itself
    while the application ran (3 minutes at most)."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and process.poll() is None:
        for line in fault_log.read_text().splitlines():
            index = cluster.worker_of(int(line.rsplit("pid=", 1)[1]))
            if index is not None:
                cluster.kill_worker(index)
                return index
        time.sleep(0.2)
    return None


@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_the_drain_job_runs_on_a_standalone_cluster_with_the_provider_shipped(
    cluster: SparkStandalone, executor_site: Path, shipped: Path, target, orders
) -> None:
    sent = send_orders(orders, 1500)
    process = submit(cluster, executor_site, target.url, drain_args(target, "cluster-1"), [shipped])
    code, output, summary = finish(process)
    assert code == 0, output[-6000:]
    assert summary is not None and summary["state"] == "committed" and summary["written"] == len(sent)
    assert sorted(order_ids_in_table(orders)) == sorted(json.loads(m.body)["order_id"] for m in sent)
    assert orders.queue("orders").count() == 0 and staged(orders) == 0
    assert cluster.master_url in output or "StandaloneSchedulerBackend" in output or summary["tasks"]


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_without_the_shipped_zip_the_executors_cannot_import_it_and_nothing_is_lost(
    cluster: SparkStandalone, executor_site: Path, target, orders
) -> None:
    sent = send_orders(orders, 300)
    code, output, _ = finish(submit(cluster, executor_site, target.url, drain_args(target, "unshipped"), []))
    assert code != 0
    assert "No module named 'airflow_provider_sqlqueue'" in output, output[-6000:]
    assert orders.queue("orders").count() == len(sent) and staged(orders) == 0
    assert order_ids_in_table(orders) == []


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
@pytest.mark.parametrize("phase_one", ["staging", "in_place"])
def test_a_worker_killed_mid_drain_loses_and_duplicates_nothing(
    cluster: SparkStandalone,
    executor_site: Path,
    shipped: Path,
    target,
    orders,
    tmp_path: Path,
    phase_one: str,
) -> None:
    """A whole Spark worker (its executor JVM and Python workers) is killed while phase 2 runs; its tasks
    run again elsewhere, reading the same staged rows, or with ``read_in_place`` the same rows the driver
    holds in the queue table. The unreadable row reaches the error queue once: found by a receive task
    (staging), or reported by the executors of the cluster to the driver's commit (``read_in_place``)."""
    send_unreadable(orders, "[1, 2]")
    sent = send_orders(orders, 2000)
    fault_log = tmp_path / "faults.log"
    fault_log.touch()
    args = drain_args(target, "cluster-kill")
    args[args.index("--transform") + 1] = "spark_faults.slow_rows"
    process = submit(
        cluster,
        executor_site,
        target.url,
        [
            *args,
            *("--read-slice-rows", "500", "--read-partition-rows", "500"),
            *(["--read-in-place"] if phase_one == "in_place" else ["--stage"]),
        ],
        [shipped, FAULTS],
        {"SQLQUEUE_SPARK_FAULT_LOG": str(fault_log)},
    )
    killed = None
    try:
        killed = kill_the_worker_that_noted(cluster, process, fault_log)
        code, output, summary = finish(process)
    finally:
        if killed is not None:
            cluster.start_worker(killed)
    assert killed is not None, "no executor of the cluster started a slow partition"
    assert code == 0, output[-6000:]
    assert summary is not None and summary["state"] == "committed"
    assert summary["read_in_place"] is (phase_one == "in_place")
    assert summary["poisoned"] == 1 and error_queue_headers(orders) == ["[1, 2]"]
    order_ids = order_ids_in_table(orders)
    expected = sorted(json.loads(m.body)["order_id"] for m in sent)
    assert sorted(set(order_ids)) == expected, "lost messages"
    assert len(order_ids) == len(expected), "duplicated messages"
    assert orders.queue("orders").count() == 0 and staged(orders) == 0


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_the_operator_drains_on_the_cluster_through_dag_test(
    airflow_db: Path,  # noqa: F811
    cluster: SparkStandalone,
    executor_site: Path,
    shipped: Path,
    target,
) -> None:
    with target.open() as transport:
        for name in ("orders", "error"):
            transport.queue(name).create()
        sent = send_orders(transport, 800)
    host, port = cluster.master_url.rsplit(":", 1)
    env = {
        "AIRFLOW_CONN_SPARK_CLUSTER": json.dumps(
            {"conn_type": "spark", "host": host, "port": int(port), "extra": {"deploy-mode": "client"}}
        ),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "AIRFLOW__CORE__DAGS_FOLDER": str(HERE / "dags"),
        "SQLQUEUE_TEST_PY_FILES": str(shipped),
        "SQLQUEUE_TEST_EXECUTOR_PYTHON": base_python(),
        "SQLQUEUE_TEST_EXECUTOR_PATH": str(executor_site),
        # an application on the cluster keeps Spark's real home, as submit() does: the drain's read of the
        # data source is planned on the driver by the executors' Python, which has no PySpark but the zip
        "SPARK_HOME": str(SPARK_HOME),
    }
    run = run_dag(target, "sqlqueue_test_spark_cluster", env=env)
    assert_succeeded(run, target)
    assert cluster.master_url in run.output
    with target.open() as transport:
        assert sorted(order_ids_in_table(transport)) == sorted(json.loads(m.body)["order_id"] for m in sent)
        assert transport.queue("orders").count() == 0 and staged(transport) == 0


# ---- the sqlqueue data source ------------------------------------------------------------------------------
def source_args(target, mode: str, sink: str, *extra: str) -> list[str]:
    args = [mode, "--queue", "orders", "--sink-table", sink, *extra]
    return [*args, "--default-schema", target.schema] if target.schema else args


def message_ids_in(transport, sink: str) -> list[str]:
    return [str(row[0]) for row in rows_of(transport, f"SELECT message_id FROM {table(transport, sink)}")]


def source_summary(output: str) -> dict | None:
    lines = [line for line in output.splitlines() if line.startswith("SQLQUEUE_SOURCE_SUMMARY ")]
    return json.loads(lines[-1].split(" ", 1)[1]) if lines else None


@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_the_data_source_reads_in_batch_and_streams_on_the_cluster(
    cluster: SparkStandalone, executor_site: Path, shipped: Path, target, orders, tmp_path: Path
) -> None:
    """spark.read and spark.readStream of format("sqlqueue") with the provider shipped as a zip: the reads
    run in the executors; the batch read is acknowledged, the stream runs availableNow in several batches,
    and each sink holds every message it was sent exactly once."""
    create_sink_table(orders, "batch_rows", SOURCE_SINK_COLUMNS)
    create_sink_table(orders, "stream_rows", SOURCE_SINK_COLUMNS)
    read_in_batch = [str(m.id) for m in send_orders(orders, 1200)]
    args = source_args(target, "batch", "batch_rows", "--run-id", "cluster-read", "--partitions", "3")
    code, output, _ = finish(submit(cluster, executor_site, target.url, args, [shipped], app=SOURCE_APP))
    assert code == 0, output[-6000:]
    assert source_summary(output) == {"read": 1200, "acknowledged": 1200}
    assert counted(read_in_batch, message_ids_in(orders, "batch_rows")) == {"lost": 0, "duplicated": 0}
    assert orders.queue("orders").count() == 0 and staged(orders) == 0

    streamed = [str(m.id) for m in send_orders(orders, 900)]
    args = source_args(target, "stream", "stream_rows", "--checkpoint", str(tmp_path / "checkpoint"))
    code, output, _ = finish(
        submit(cluster, executor_site, target.url, [*args, "--limit", "300"], [shipped], app=SOURCE_APP)
    )
    assert code == 0, output[-6000:]
    summary = source_summary(output)
    assert summary is not None and len(summary["batches"]) == 3, output[-6000:]
    assert counted(streamed, message_ids_in(orders, "stream_rows")) == {"lost": 0, "duplicated": 0}
    assert orders.queue("orders").count() == 0 and staged(orders) <= 300


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_worker_killed_mid_stream_loses_and_duplicates_nothing(
    cluster: SparkStandalone, executor_site: Path, shipped: Path, target, orders, tmp_path: Path, figures
) -> None:
    """A slowed availableNow stream of the data source; the worker running one of its partitions is killed
    with everything under it. Spark runs the partition again on the other worker from the same staged rows,
    and the foreachBatch sink keyed by batch id holds every message exactly once."""
    create_sink_table(orders, "stream_rows", SOURCE_SINK_COLUMNS)
    sent = [str(m.id) for m in send_orders(orders, 600)]
    fault_log = tmp_path / "faults.log"
    fault_log.touch()
    args = source_args(target, "stream", "stream_rows", "--checkpoint", str(tmp_path / "checkpoint"))
    args += ["--limit", "200", "--slow", "0.02"]
    started = time.monotonic()
    process = submit(
        cluster,
        executor_site,
        target.url,
        args,
        [shipped, FAULTS],
        {"SQLQUEUE_SPARK_FAULT_LOG": str(fault_log)},
        app=SOURCE_APP,
    )
    killed = None
    try:
        killed = kill_the_worker_that_noted(cluster, process, fault_log)
        code, output, _ = finish(process)
    finally:
        if killed is not None:
            cluster.start_worker(killed)
    assert killed is not None, "no executor of the cluster started a slow partition"
    assert code == 0, output[-6000:]
    accounted = counted(sent, message_ids_in(orders, "stream_rows"))
    assert accounted == {"lost": 0, "duplicated": 0}
    assert orders.queue("orders").count() == 0 and staged(orders) <= 200
    figures(
        engine=target.engine,
        messages=len(sent),
        workers_killed=1,
        **accounted,
        seconds=round(time.monotonic() - started, 1),
    )
