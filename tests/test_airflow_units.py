"""The Airflow surface in-process, on real engines: hook, sensor, triggers, operators, registration."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import timedelta
from urllib.parse import quote, quote_plus

import pytest
import rawsql

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")

from airflow.providers.common.compat.sdk import AirflowException, TaskDeferred

from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_provider_sqlqueue.operators.provision import (
    ProvisionQueuesOperator,
    endpoint_queues,
)
from airflow_provider_sqlqueue.operators.purge import PurgeExpiredMessagesOperator
from airflow_provider_sqlqueue.operators.send import SendMessageOperator
from airflow_provider_sqlqueue.sensors.queue import QueueSensor
from airflow_provider_sqlqueue.transport import ConfigurationError, OutgoingMessage
from airflow_provider_sqlqueue.transport.archive import ErrorArchive
from airflow_provider_sqlqueue.triggers.queue import (
    PendingMessagesTrigger,
    QueueMessagesEventTrigger,
)


@pytest.fixture
def conn(target, monkeypatch: pytest.MonkeyPatch):
    """``sqlqueue_default`` pointing at this test's engine and namespace, with ``orders`` and ``error``."""
    for key, value in target.airflow_env().items():
        monkeypatch.setenv(key, value)
    with target.open() as transport:
        transport.queue("error").create()
        transport.queue("orders").create()
        yield transport


def first_event(trigger, timeout: float = 20.0):
    async def take():
        async for event in trigger.run():
            return event.payload
        return None

    return asyncio.run(asyncio.wait_for(take(), timeout))


# ---- registration ---------------------------------------------------------------------------------
def test_provider_is_registered_with_its_hook_connection_type_and_queue_provider() -> None:
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    assert "airflow-provider-sqlqueue" in manager.providers
    manager.initialize_providers_queues()
    assert (
        "airflow_provider_sqlqueue.queues.sqlqueue.SqlQueueMessageQueueProvider" in manager.queue_class_names
    )
    from airflow_provider_sqlqueue.get_provider_info import get_provider_info

    info = get_provider_info()
    conn_type = info["connection-types"][0]
    assert conn_type["hook-class-name"].endswith("SqlQueueHook")
    assert conn_type["conn-fields"]["connect_options"]["schema"]["format"] == "password"
    for section in ("hooks", "sensors", "triggers", "operators"):
        for module in info[section][0]["python-modules"]:
            __import__(module)


# ---- hook -----------------------------------------------------------------------------------------
def test_hook_sends_receives_and_measures_depth(conn) -> None:
    hook = SqlQueueHook()
    try:
        assert hook.engine in ("sqlite", "postgresql", "sqlserver")
        first = hook.send("orders", b"one", headers={"k": "v"})
        hook.send_batch("orders", [b"two", OutgoingMessage(b"three")])
        assert hook.depth("orders") == 3 and hook.depth("orders", "exact") == 3
        with hook.receive("orders", max_messages=2) as batch:
            assert [m.body for m in batch] == [b"one", b"two"]
            assert str(batch[0].id) == first
        assert hook.depth("orders", "exact") == 1
        with pytest.raises(ConfigurationError, match="count_mode"):
            hook.depth("orders", "roughly")  # type: ignore[arg-type]
        assert hook.test_connection()[0] is True
    finally:
        hook.close()


@pytest.mark.parametrize(
    ("connection", "engine"),
    [
        ({"conn_type": "postgres", "host": "h", "schema": "db"}, "postgresql"),
        ({"conn_type": "sqlite", "host": "/tmp/q.db"}, "sqlite"),
        ({"conn_type": "mssql", "host": "h", "schema": "db"}, "sqlserver"),
        ({"conn_type": "sqlqueue", "extra": {"engine": "SQL Server"}}, "sqlserver"),
    ],
)
def test_hook_takes_existing_connection_types(monkeypatch, connection: dict, engine: str) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_OTHER", json.dumps(connection))
    assert SqlQueueHook(sqlqueue_conn_id="other").engine == engine


def test_hook_refuses_unknown_engines_and_types(monkeypatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_BAD", json.dumps({"conn_type": "sqlqueue", "extra": {"engine": "oracle"}})
    )
    with pytest.raises(ConfigurationError, match="oracle"):
        _ = SqlQueueHook(sqlqueue_conn_id="bad").engine
    monkeypatch.setenv("AIRFLOW_CONN_HTTP", json.dumps({"conn_type": "http", "host": "x"}))
    with pytest.raises(ConfigurationError, match="http"):
        _ = SqlQueueHook(sqlqueue_conn_id="http").engine


def test_mssql_connection_becomes_an_odbc_string_with_quoted_values(monkeypatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_MS",
        json.dumps(
            {
                "conn_type": "mssql",
                "host": "db.example",
                "port": 1433,
                "schema": "erp",
                "login": "sa",
                "password": "p;w}d",
                "extra": {"connect_options": "TDS_Version=7.4"},
            }
        ),
    )
    hook = SqlQueueHook(sqlqueue_conn_id="ms", driver="ODBC Driver 18 for SQL Server")
    odbc = hook.sqlalchemy_url.query["odbc_connect"]
    assert odbc == (
        "DRIVER=ODBC Driver 18 for SQL Server;SERVER=db.example,1433;DATABASE=erp;UID=sa;PWD={p;w}}d};"
        "TDS_VERSION=7.4"
    )
    shown = repr(hook.sqlalchemy_url) + str(hook.sqlalchemy_url)
    for form in (
        "p;w}d",
        "{p;w}}d}",
        quote("p;w}d", safe=""),
        quote("{p;w}}d}", safe=""),
        quote_plus("{p;w}}d}"),
    ):
        assert form not in shown, f"the password shows as {form!r} in {shown!r}"
    assert "PWD%3D%2A%2A%2A" in shown
    assert hook.placeholder == "?"


# ---- sensor ---------------------------------------------------------------------------------------
def test_sensor_returns_at_once_when_the_threshold_is_met(conn) -> None:
    conn.queue("orders").send_batch([b"a", b"b"])
    sensor = QueueSensor(task_id="wait", queue_name="orders", min_messages=2, deferrable=True)
    assert sensor.execute({}) == 2


def test_sensor_defers_below_the_threshold_with_a_round_tripping_trigger(conn) -> None:
    conn.queue("orders").send(b"a")
    sensor = QueueSensor(
        task_id="wait",
        queue_name="orders",
        min_messages=3,
        count_mode="exact",
        deferrable=True,
        poke_interval=7,
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, PendingMessagesTrigger)
    assert deferred.value.method_name == "execute_complete"
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_sqlqueue.triggers.queue.PendingMessagesTrigger"
    assert kwargs == {
        "queue_name": "orders",
        "sqlqueue_conn_id": "sqlqueue_default",
        "min_messages": 3,
        "count_mode": "exact",
        "poll_interval": 7.0,
    }
    assert PendingMessagesTrigger(**kwargs).serialize() == (classpath, kwargs)


def test_sensor_pokes_without_deferring(conn) -> None:
    sensor = QueueSensor(task_id="wait", queue_name="orders", min_messages="2", deferrable=False)
    assert sensor.poke({}).is_done is False
    conn.queue("orders").send_batch([b"a", b"b"])
    result = sensor.poke({})
    assert result.is_done is True and result.xcom_value == 2


def test_execute_complete_checks_the_event() -> None:
    sensor = QueueSensor(task_id="wait", queue_name="orders", min_messages=2)
    assert sensor.execute_complete({}, {"status": "success", "queue": "orders", "depth": 5}) == 5
    bad_events = [
        None,
        "success",
        {"depth": 5},
        {"status": "error", "queue": "orders", "message": "QueueNotFound: no table"},
        {"status": "success", "queue": "other", "depth": 5},
        {"status": "success", "queue": "orders", "depth": 1},
        {"status": "success", "queue": "orders", "depth": "5"},
    ]
    for event in bad_events:
        with pytest.raises(AirflowException):
            sensor.execute_complete({}, event)  # type: ignore[arg-type]


def test_sensor_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="min_messages"):
        QueueSensor(task_id="a", queue_name="q", min_messages=0)
    with pytest.raises(ValueError, match="count_mode"):
        QueueSensor(task_id="b", queue_name="q", count_mode="roughly")
    sensor = QueueSensor(task_id="c", queue_name="orders", queue="celery-high")
    assert sensor.queue == "celery-high" and sensor.queue_name == "orders"


# ---- triggers -------------------------------------------------------------------------------------
def test_trigger_fires_when_another_thread_fills_the_queue(conn) -> None:
    orders = conn.queue("orders")

    def producer() -> None:
        for _ in range(3):
            time.sleep(0.3)
            orders.send(b"x")

    thread = threading.Thread(target=producer)
    thread.start()
    started = time.monotonic()
    event = first_event(PendingMessagesTrigger("orders", min_messages=3, poll_interval=0.1))
    thread.join()
    assert event == {"status": "success", "queue": "orders", "depth": 3, "count_mode": "estimate"}
    assert time.monotonic() - started >= 0.8


def test_trigger_reports_a_missing_queue_as_an_error_event(conn) -> None:
    event = first_event(PendingMessagesTrigger("never_created", count_mode="exact", poll_interval=0.1))
    assert event["status"] == "error" and "QueueNotFound" in event["message"]


def test_event_trigger_rearms_and_fires_only_for_new_messages(conn) -> None:
    orders = conn.queue("orders")
    trigger = QueueMessagesEventTrigger("orders", min_messages=2, poll_interval=0.1)

    async def watch() -> list[dict]:
        events: list[dict] = []
        run = trigger.run()
        orders.send_batch([b"a", b"b"])
        events.append((await asyncio.wait_for(run.__anext__(), 10)).payload)
        with pytest.raises(asyncio.TimeoutError):  # nothing new: no second event
            await asyncio.wait_for(asyncio.shield(_next(run, events)), 0.6)
        orders.send(b"c")
        await asyncio.wait_for(_wait_for(events, 2), 10)
        await run.aclose()
        return events

    events = asyncio.run(watch())
    assert [e["depth"] for e in events] == [2, 3]
    assert events[1]["newest"] > events[0]["newest"]


def test_event_trigger_fires_for_a_queue_created_again_whose_row_versions_start_over(conn) -> None:
    """A watermark above every RowVersion means the table was dropped and created: its messages are new."""
    orders = conn.queue("orders")
    orders.send_batch([b"a", b"b", b"c"])
    trigger = QueueMessagesEventTrigger("orders", poll_interval=0.1)

    async def watch() -> list[dict]:
        run = trigger.run()
        events = [(await asyncio.wait_for(run.__anext__(), 10)).payload]
        await asyncio.to_thread(orders.drop)
        await asyncio.to_thread(orders.create)
        await asyncio.to_thread(orders.send, b"d")
        events.append((await asyncio.wait_for(run.__anext__(), 10)).payload)
        await run.aclose()
        return events

    first, second = asyncio.run(watch())
    assert (first["depth"], second["depth"]) == (3, 1)
    assert second["newest"] < first["newest"]


async def _next(run, events: list) -> None:
    events.append((await run.__anext__()).payload)


async def _wait_for(events: list, count: int) -> None:
    while len(events) < count:
        await asyncio.sleep(0.05)


def test_message_queue_trigger_dispatches_to_the_sqlqueue_provider(conn) -> None:
    from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger

    by_scheme = MessageQueueTrigger(scheme="sqlqueue", queue_name="orders", min_messages=1, poll_interval=0.1)
    classpath, kwargs = by_scheme.serialize()
    assert classpath == "airflow_provider_sqlqueue.triggers.queue.QueueMessagesEventTrigger"
    assert kwargs["queue_name"] == "orders"
    with pytest.warns(Warning):
        by_uri = MessageQueueTrigger(queue="sqlqueue://sqlqueue_default/orders", poll_interval=0.1)
    assert by_uri.serialize()[1]["queue_name"] == "orders"
    conn.queue("orders").send(b"x")
    assert first_event(by_scheme)["depth"] == 1


# ---- operators ------------------------------------------------------------------------------------
def test_provisioning_twice_is_harmless_and_reports_findings(conn, target) -> None:
    operator = ProvisionQueuesOperator(task_id="p", endpoint="Sales", instance_suffix="node1")
    first = operator.execute({})
    archive = ErrorArchive.of(conn.queue("error"))
    created = [conn.queue(n).name for n in ["Sales", "Sales.node1", "audit"]] + [str(archive.address)]
    assert sorted(first["created"]) == sorted(created) and archive.exists()
    assert first["existing"] == [conn.queue("error").name] and first["findings"] == {}
    second = operator.execute({})
    assert second["created"] == [] and len(second["existing"]) == 5
    assert endpoint_queues("Sales", instance_specific_queue=False, audit_queue=None) == ["Sales", "error"]


def test_dry_run_renders_every_statement_and_creates_nothing(conn, target, tmp_path) -> None:
    script_file = tmp_path / "ddl.sql"
    operator = ProvisionQueuesOperator(
        task_id="p", endpoint="Billing", instance_suffix="node1", dry_run=True, script_path=str(script_file)
    )
    script = operator.execute({})
    assert script_file.read_text() == script
    for name in ("Billing", "Billing.node1", "audit"):
        queue = conn.queue(name)
        assert not queue.exists()
        assert queue.create_script() in script
    archive = ErrorArchive.of(conn.queue("error"))
    assert archive.create_script() in script and not archive.exists()
    assert script.count("CREATE TABLE") == 5  # error and its archive too: a script is for an empty database


def test_purge_operator_counts_per_queue(conn) -> None:
    orders = conn.queue("orders")
    orders.send_batch(
        [OutgoingMessage(b"old", time_to_be_received=timedelta(milliseconds=1))] * 5 + [b"keep"]
    )
    time.sleep(0.05)
    result = PurgeExpiredMessagesOperator(task_id="purge", queues=["orders", "error"], batch_size=2).execute(
        {}
    )
    assert result == {"orders": 5, "error": 0}
    assert orders.count() == 1


def test_send_operator_sends_json_text_and_batches(conn) -> None:
    one = SendMessageOperator(task_id="s", queue_name="orders", body={"order": 1}).execute({})
    two = SendMessageOperator(
        task_id="b",
        queue_name="orders",
        messages=["text", {"body": b"raw", "headers": {"k": "v"}, "time_to_be_received": 3600}],
        headers={"source": "airflow"},
    ).execute({})
    assert one["count"] == 1 and one["first_id"] == one["last_id"] and two["count"] == 2
    with conn.queue("orders").receive(max_messages=3) as batch:
        assert json.loads(batch[0].body) == {"order": 1}
        assert batch[0].content_type == "application/json"
        assert batch[1].body == b"text" and batch[1].headers["source"] == "airflow"
        assert batch[2].headers["k"] == "v" and batch[2].expires is not None
    assert [row[0] for row in rawsql.all_rows(conn.queue("orders"))] == []
    with pytest.raises(ValueError, match="either body"):
        SendMessageOperator(task_id="x", queue_name="orders")


def test_a_sqlqueue_connection_without_an_engine_must_say_which(monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_VAGUE", json.dumps({"conn_type": "sqlqueue", "host": "db.example.com"}))
    with pytest.raises(ConfigurationError, match="Engine field"):
        _ = SqlQueueHook(sqlqueue_conn_id="vague").engine
    monkeypatch.setenv("AIRFLOW_CONN_FILE", json.dumps({"conn_type": "sqlqueue", "host": "/tmp/queues.db"}))
    assert SqlQueueHook(sqlqueue_conn_id="file").engine == "sqlite"
