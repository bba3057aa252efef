"""OpenLineage: the operators that move messages report their queue and sink tables as datasets, named as
OpenLineage's naming spec names each engine's tables (issue 15, point 12)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url
from test_airflow_dags import airflow_db, assert_succeeded, run_dag  # noqa: F401  (airflow_db: a fixture)

pytest.importorskip("airflow.providers.openlineage", reason="the openlineage extra is not installed")

from airflow_provider_sqlqueue.operators.consume import ConsumeMessagesOperator
from airflow_provider_sqlqueue.operators.execute_and_send import ExecuteSqlAndSendOperator
from airflow_provider_sqlqueue.operators.purge import PurgeExpiredMessagesOperator
from airflow_provider_sqlqueue.operators.send import SendMessageOperator
from airflow_provider_sqlqueue.operators.spark_submit import SqlQueueSparkSubmitOperator


@pytest.fixture
def conn(target, monkeypatch: pytest.MonkeyPatch):
    for key, value in target.airflow_env().items():
        monkeypatch.setenv(key, value)
    with target.open() as transport:
        for name in ("error", "orders", "audit", "Billing.Done"):
            transport.queue(name).create()
        yield transport


def expected_naming(target, transport) -> tuple[str, str]:
    """The namespace and the dataset-name prefix the spec gives this target, worked out independently of
    the provider: from the test's URL and the database itself."""
    if target.engine == "sqlite":
        return f"sqlite://{os.path.abspath(make_url(target.url).database)}", "main."
    connection = transport.new_connection()
    try:
        cursor = connection.cursor()
        if target.engine == "postgresql":
            cursor.execute("SELECT current_database(), current_schema()")
        else:
            cursor.execute("SELECT DB_NAME(), SCHEMA_NAME()")
        database, schema = cursor.fetchone()
        connection.rollback()
    finally:
        connection.close()
    schema = target.schema or schema
    if target.engine == "postgresql":
        url = make_url(target.url)
        return f"postgres://{url.host}:{url.port or 5432}", f"{database}.{schema}."
    server = dict(
        part.split("=", 1) for part in target.url.split(";") if part.upper().startswith("SERVER=")
    ).popitem()[1]
    host, _, port = server.partition(",")
    return f"mssql://{host}:{port or 1433}", f"{database}.{schema}."


def names(datasets) -> list[tuple[str, str]]:
    return [(dataset.namespace, dataset.name) for dataset in datasets]


def test_send_consume_and_purge_report_their_queues_after_a_real_run(conn, target) -> None:
    namespace, prefix = expected_naming(target, conn)
    send = SendMessageOperator(task_id="send", queue_name="orders", messages=["a", "b", "c"])
    assert send.execute({})["count"] == 3
    lineage = send.get_openlineage_facets_on_complete(None)
    assert names(lineage.inputs) == [] and names(lineage.outputs) == [(namespace, prefix + "orders")]

    consume = ConsumeMessagesOperator(
        task_id="consume",
        queue_name="orders",
        handler="consume_handlers:record",
        pump_options={"audit_queue": "audit", "idle_delay": 0.1},
    )
    assert consume.execute({})["processed"] == 3
    lineage = consume.get_openlineage_facets_on_complete(None)
    assert names(lineage.inputs) == [(namespace, prefix + "orders")]
    assert names(lineage.outputs) == [(namespace, prefix + "error"), (namespace, prefix + "audit")]

    purge = PurgeExpiredMessagesOperator(task_id="purge", queues=["orders", "Billing.Done"])
    purge.execute({})
    lineage = purge.get_openlineage_facets_on_complete(None)
    assert names(lineage.outputs) == [(namespace, prefix + "orders"), (namespace, prefix + "Billing.Done")]


def test_execute_sql_and_send_reports_the_sqls_tables_and_the_queue(conn, target) -> None:
    """The tables come from OpenLineage's SQL parser in the hook's dialect, named as the hook names its
    queues; the queue is an output after them."""
    namespace, prefix = expected_naming(target, conn)
    staged, ledger = (conn.dialect.qualified_name(conn.resolve(name)) for name in ("staged", "ledger"))
    for table in (staged, ledger):
        with conn.connection() as connection:
            connection.cursor().execute(f"CREATE TABLE {table} (entry varchar(40))")
            connection.commit()
    post = ExecuteSqlAndSendOperator(
        task_id="post",
        sql=[f"INSERT INTO {ledger} (entry) SELECT entry FROM {staged}", f"DELETE FROM {staged}"],
        queue_name="orders",
        body={"posted": True},
    )
    assert post.execute({})["count"] == 1
    lineage = post.get_openlineage_facets_on_complete(None)
    assert names(lineage.inputs) == [(namespace, prefix + "staged")]
    assert sorted(names(lineage.outputs)) == sorted(
        [(namespace, prefix + "ledger"), (namespace, prefix + "staged"), (namespace, prefix + "orders")]
    )
    assert names(lineage.outputs)[-1] == (namespace, prefix + "orders")
    assert "INSERT INTO" in lineage.job_facets["sql"].query


def test_the_spark_bridge_reports_its_queue_and_its_sink(conn, target) -> None:
    namespace, prefix = expected_naming(target, conn)
    table = SqlQueueSparkSubmitOperator(task_id="drain", input_queue="orders", sink="table:totals")
    lineage = table.get_openlineage_facets_on_complete(None)
    assert names(lineage.inputs) == [(namespace, prefix + "orders")]
    assert names(lineage.outputs) == [(namespace, prefix + "totals"), (namespace, prefix + "error")]
    files = SqlQueueSparkSubmitOperator(
        task_id="drain_files", input_queue="orders", sink="parquet:s3a://lake/orders/"
    )
    assert names(files.get_openlineage_facets_on_complete(None).outputs) == [
        (namespace, prefix + "error"),
        ("s3://lake", "/orders/"),
    ]
    local = SqlQueueSparkSubmitOperator(task_id="drain_local", input_queue="orders", sink="json:/data/out")
    assert ("file", "/data/out") in names(local.get_openlineage_facets_on_complete(None).outputs)


def test_sql_server_namespace_comes_from_the_odbc_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """No server needed: the namespace is read from the connection alone."""
    import json

    from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook

    for server, expected in (
        ("tcp:sql.example.com,14330", "mssql://sql.example.com:14330"),
        ("sql.example.com\\SALES", "mssql://sql.example.com:1433"),
        ("(local)", "mssql://localhost:1433"),
    ):
        connection = {"conn_type": "mssql", "host": server, "schema": "shop", "login": "u", "password": "p"}
        monkeypatch.setenv("AIRFLOW_CONN_SHOP", json.dumps(connection))
        assert SqlQueueHook(sqlqueue_conn_id="shop").openlineage_namespace() == expected


@pytest.mark.slow
def test_retry_all_reports_every_queue_it_retried_into_through_dag_test(
    airflow_db: Path,  # noqa: F811
    target,
    tmp_path: Path,
) -> None:
    """dag.test() of RetryFailedMessagesOperator(retry_all=True) with OpenLineage writing its events to a
    file: the task's COMPLETE event reads the error queue and writes both queues the messages went back
    to; its XCom is a count with the first and last Id."""
    from test_failed import Handler, drain

    handler = Handler()
    with target.open() as transport:
        transport.queue("error").create()
        for name, bodies in (("orders", [b"v1", b"v2", b"k1"]), ("invoices", [b"v4"])):
            transport.queue(name).create()
            transport.queue(name).send_batch(bodies)
            drain(transport.queue(name), handler)
        namespace, prefix = expected_naming(target, transport)
        addresses = {name: str(transport.queue(name).address) for name in ("orders", "invoices")}
    events = tmp_path / "openlineage.jsonl"
    env = {
        "AIRFLOW__CORE__DAGS_FOLDER": str(Path(__file__).with_name("dags")),
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(events), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "sqlqueue-tests",
    }
    run = run_dag(target, "sqlqueue_test_failed_retry_all", env=env)

    assert_succeeded(run, target)
    [returned] = re.findall(r"^retry returned (\{.*\})", run.output, flags=re.MULTILINE)
    result = json.loads(returned)
    assert result["count"] == 4 and result["refused"] == 0 and result["batches"] == 2
    assert result["queues"] == {addresses["orders"]: 3, addresses["invoices"]: 1}
    handler.broken = False
    with target.open() as transport:
        for name in ("orders", "invoices"):
            drain(transport.queue(name), handler)
    assert len(handler.seen) == 4 and {result["first_id"], result["last_id"]} <= set(handler.seen)

    completed = [
        event
        for event in map(json.loads, events.read_text().splitlines())
        if event["eventType"] == "COMPLETE" and event["job"]["name"].endswith(".retry_all")
    ]
    assert len(completed) == 1, events.read_text()
    [event] = completed
    assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [(namespace, prefix + "error")]
    assert sorted((d["namespace"], d["name"]) for d in event["outputs"]) == [
        (namespace, prefix + "invoices"),
        (namespace, prefix + "orders"),
    ]
