"""OpenLineage: the operators that move messages report their queue and sink tables as datasets, named as
OpenLineage's naming spec names each engine's tables (issue 15, point 12)."""

from __future__ import annotations

import os

import pytest
from sqlalchemy.engine import make_url

pytest.importorskip("airflow.providers.openlineage", reason="the openlineage extra is not installed")

from airflow_provider_sqlqueue.operators.consume import ConsumeMessagesOperator
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
