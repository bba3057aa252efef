"""Publish/subscribe's surface on real engines (issue 45, part B): endpoints that subscribe on start, the
hook, PublishMessageOperator and the ``sqlqueue subscribe|unsubscribe|subscriptions|publish`` commands.
The transport's own fan-out, concurrency and wire-compatibility tests are in test_pubsub.py."""

from __future__ import annotations

import json
import re
import threading
import time
from types import SimpleNamespace

import pytest
import rawsql
from test_airflow_dags import airflow_db  # noqa: F401  (a fixture)

from airflow_provider_sqlqueue.transport import (
    ConfigurationError,
    Endpoint,
    QueueNotFound,
    SubscriptionSettings,
    Transport,
)
from airflow_provider_sqlqueue.transport import headers as h

# Babelfish where a test runs SQL through a path of its own (the hook in the caller's transaction); the
# transport's statements (subscribe, unsubscribe, the lookup, the bounded listing the Queues page reads)
# are covered on every engine and driver by test_pubsub.py.
ENGINES = ["sqlite", "postgresql", "sqlserver-msodbc"]
NO_SQL_OF_THEIR_OWN = ["sqlite", "postgresql"]


class OrderEvent:
    __sqlqueue_topic__ = "Shop.Events.OrderEvent"


class OrderPlaced(OrderEvent):
    __sqlqueue_topic__ = "Shop.Events.OrderPlaced"


def wait_for(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def bodies(transport: Transport, queue: str) -> list[bytes]:
    return [body for _, _, body in rawsql.all_rows(transport.queue(queue))]


# ---- endpoints ------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", NO_SQL_OF_THEIR_OWN, indirect=True)
def test_an_endpoint_subscribes_on_start_receives_published_events_and_can_unsubscribe(
    target, transport: Transport
) -> None:
    billing = Endpoint(
        transport, "Billing", instance_specific_queue=False, subscribe_to=[OrderPlaced, "Shop.Refunds"]
    )
    billing.create()
    transport.subscriptions.create()  # shared by every endpoint, made once by an installer
    assert transport.subscriptions.list(endpoint="Billing") == []  # nothing before start
    received: list[tuple[bytes, str]] = []
    lock = threading.Lock()

    def handle(message, context) -> None:
        with lock:
            received.append((message.body, message.headers[h.ENCLOSED_MESSAGE_TYPES]))

    with target.open(subscriptions=SubscriptionSettings(cache_seconds=0)) as publisher:
        billing.start(handle, idle_delay=0.1)
        try:
            stored = str(transport.canonical(billing.address))
            assert {(s.topic, s.queue_address) for s in transport.subscriptions.list(endpoint="Billing")} == {
                ("Shop.Events.OrderPlaced", stored),
                ("Shop.Refunds", stored),
            }
            assert publisher.publish(OrderPlaced, b"order 1").queues == (stored,)
            assert publisher.publish("Shop.Refunds", b"refund 1").queues == (stored,)
            # a publish of the base class alone does not reach a subscriber of the derived one
            assert publisher.publish(OrderEvent, b"any order").queues == ()
            wait_for(lambda: len(received) == 2)

            assert billing.unsubscribe("Shop.Refunds") is True
            assert billing.unsubscribe("Shop.Refunds") is False
            assert publisher.publish("Shop.Refunds", b"refund 2").queues == ()
            assert publisher.publish(OrderPlaced, b"order 2").queues == (stored,)
            wait_for(lambda: len(received) == 3)
        finally:
            assert billing.stop(timeout=5)
    assert sorted(received) == [
        (b"order 1", "Shop.Events.OrderPlaced;Shop.Events.OrderEvent"),
        (b"order 2", "Shop.Events.OrderPlaced;Shop.Events.OrderEvent"),
        (b"refund 1", "Shop.Refunds"),
    ]
    # the subscription outlives the running endpoint, as the reference's
    assert [s.topic for s in transport.subscriptions.list(endpoint="Billing")] == ["Shop.Events.OrderPlaced"]


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_an_endpoint_does_not_start_without_the_subscription_table_and_takes_no_single_string(
    transport: Transport,
) -> None:
    with pytest.raises(ConfigurationError, match="list of topics"):
        Endpoint(transport, "Billing", subscribe_to="Shop.Events.OrderPlaced")  # type: ignore[arg-type]
    billing = Endpoint(transport, "Billing", instance_specific_queue=False, subscribe_to=["Shop.Refunds"])
    for name in billing.queue_names():
        transport.queue(name).create()  # the queues, not the subscription table
    with pytest.raises(QueueNotFound):
        billing.start(lambda message: None, idle_delay=0.1)
    assert billing.pumps == [] and not transport.subscriptions.exists()


# ---- the hook and the operator --------------------------------------------------------------------
@pytest.fixture
def conn(target, monkeypatch: pytest.MonkeyPatch):
    """``sqlqueue_default`` on this test's engine, with ``billing``, ``shipping``, ``error`` and the
    subscription table (``subscription_cache_seconds`` 0, so each publish reads the table)."""
    pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")
    for key, value in target.airflow_env(subscription_cache_seconds=0).items():
        monkeypatch.setenv(key, value)
    with target.open() as transport:
        for name in ("error", "billing", "shipping"):
            transport.queue(name).create()
        transport.subscriptions.create()
        yield transport


@pytest.mark.parametrize("target", ENGINES, indirect=True)
def test_the_hook_subscribes_lists_publishes_in_the_callers_transaction_and_unsubscribes(
    conn: Transport,
) -> None:
    from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook

    hook = SqlQueueHook()
    try:
        billing = hook.subscribe("billing", "Shop.Events.OrderPlaced")
        assert billing.endpoint == "billing"  # the queue's name, as an endpoint subscribes its own queue
        hook.subscribe("shipping", "Shop.Events", endpoint="Shipping")
        listed = hook.subscriptions()
        assert [(s.topic, s.endpoint) for s in listed] == [
            ("Shop.Events", "Shipping"),
            ("Shop.Events.OrderPlaced", "billing"),
        ]
        assert [s.endpoint for s in hook.subscriptions("Shop.Events")] == ["Shipping"]
        assert [s.topic for s in hook.subscriptions(endpoint="billing")] == ["Shop.Events.OrderPlaced"]

        with hook.transaction() as connection:
            result = hook.publish(
                "Shop.Events.OrderPlaced", b"{}", base_topics=["Shop.Events"], connection=connection
            )
            assert conn.queue("billing").count() == 0, "nothing is visible before the caller commits"
        assert len(result.queues) == 2
        assert bodies(conn, "billing") == [b"{}"] and bodies(conn, "shipping") == [b"{}"]

        with pytest.raises(RuntimeError, match="changed my mind"), hook.transaction() as connection:
            hook.publish("Shop.Events", b"rolled back", connection=connection)
            raise RuntimeError("changed my mind")
        assert bodies(conn, "shipping") == [b"{}"]

        assert hook.unsubscribe("Shipping", "Shop.Events") is True
        assert hook.publish("Shop.Events", b"nobody").queues == ()
    finally:
        hook.close()


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_the_hook_reads_where_the_subscription_table_is_from_the_connection(target, monkeypatch) -> None:
    pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")
    from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook

    placed = target.airflow_env(subscription_table="Routes", subscription_cache_seconds="2.5")
    for key, value in placed.items():
        monkeypatch.setenv(key, value)
    hook = SqlQueueHook()
    try:
        store = hook.get_transport().subscriptions
        assert (store.address.table, store.settings.cache_seconds) == ("Routes", 2.5)
    finally:
        hook.close()
    for key, value in target.airflow_env(subscription_cache_seconds="soon").items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigurationError, match="subscription_cache_seconds"):
        SqlQueueHook().get_transport()


def task_instance(run_id: str, try_number: int) -> SimpleNamespace:
    """What the operator reads of its task instance: the fields a deterministic Id is derived from."""
    return SimpleNamespace(
        dag_id="shop", task_id="announce", run_id=run_id, map_index=-1, try_number=try_number
    )


@pytest.mark.parametrize("target", NO_SQL_OF_THEIR_OWN, indirect=True)
def test_the_operator_publishes_one_id_per_task_instance_to_every_subscriber(conn: Transport) -> None:
    from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook
    from airflow_provider_sqlqueue.operators.publish import PublishMessageOperator
    from airflow_provider_sqlqueue.operators.send import task_message_id

    operator = PublishMessageOperator(
        task_id="announce",
        topic="Shop.Events.OrderPlaced",
        body={"order": 7},
        headers={"tenant": "eu"},
        base_topics=["Shop.Events"],
    )
    assert operator.execute({"ti": task_instance("r1", 1)}) == {
        "topic": "Shop.Events.OrderPlaced",
        "queues": 0,
        "message_id": str(task_message_id("shop", "announce", "r1", -1, 0)),
    }
    hook = SqlQueueHook()
    try:
        hook.subscribe("billing", "Shop.Events.OrderPlaced")
        hook.subscribe("shipping", "Shop.Events")
    finally:
        hook.close()
    first = operator.execute({"ti": task_instance("r2", 1)})
    retried = operator.execute({"ti": task_instance("r2", 2)})  # a retry after the first try committed
    assert first == retried and first["queues"] == 2
    assert first["message_id"] == str(task_message_id("shop", "announce", "r2", -1, 0))
    for queue in ("billing", "shipping"):
        rows = rawsql.all_rows(conn.queue(queue))
        assert [str(message_id) for message_id, _, _ in rows] == [first["message_id"]] * 2
        headers = json.loads(rows[0][1])
        assert headers[h.MESSAGE_INTENT] == "Publish" and headers["tenant"] == "eu"
        assert headers[h.ENCLOSED_MESSAGE_TYPES] == "Shop.Events.OrderPlaced;Shop.Events"
        assert headers[h.CONTENT_TYPE] == "application/json" and json.loads(rows[0][2]) == {"order": 7}
    assert sorted(operator.published_to) == sorted(
        str(conn.canonical(queue)) for queue in ("billing", "shipping")
    )
    random_ids = PublishMessageOperator(
        task_id="announce", topic="Shop.Events", body="x", deterministic_ids=False
    )
    assert random_ids.execute({"ti": task_instance("r2", 1)})["message_id"] != first["message_id"]


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_the_operator_refuses_a_bad_topic_or_base_topics_before_sending(conn: Transport) -> None:
    from airflow_provider_sqlqueue.operators.publish import PublishMessageOperator

    conn.subscriptions.subscribe("billing", "Shop.Events", "billing")
    for arguments, error in (
        ({"topic": " "}, "topic"),
        ({"topic": "Shop.Events", "base_topics": "Shop"}, "base_topics must be a list"),
        ({"topic": "Shop.Events", "base_topics": ["Shop", 3]}, "base_topics must be topics"),
    ):
        with pytest.raises(ValueError, match=error):
            PublishMessageOperator(task_id="p", body="x", **arguments).execute({})
    assert conn.queue("billing").count() == 0


def test_the_operator_is_registered_and_keeps_its_templated_arguments_raw() -> None:
    pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")
    from airflow_provider_sqlqueue.get_provider_info import get_provider_info
    from airflow_provider_sqlqueue.operators.publish import PublishMessageOperator

    modules = get_provider_info()["operators"][0]["python-modules"]
    assert "airflow_provider_sqlqueue.operators.publish" in modules
    operator = PublishMessageOperator(
        task_id="p", topic="{{ params.topic }}", body="{{ run_id }}", base_topics="{{ params.bases }}"
    )
    assert set(operator.template_fields) == {"topic", "body", "headers", "base_topics"}
    assert (operator.topic, operator.base_topics) == ("{{ params.topic }}", "{{ params.bases }}")


# ---- the command line -----------------------------------------------------------------------------
@pytest.fixture
def cli(target, capsys, monkeypatch):
    """``sqlqueue`` in-process on this test's engine (test_cli's harness: no password, no traceback)."""
    from test_cli import Cli

    monkeypatch.delenv("SQLQUEUE_URL", raising=False)
    monkeypatch.delenv("SQLQUEUE_CONN_ID", raising=False)
    return Cli(target, capsys, monkeypatch)


@pytest.mark.parametrize("target", NO_SQL_OF_THEIR_OWN, indirect=True)
def test_the_command_line_subscribes_lists_publishes_and_unsubscribes_in_json(cli, transport) -> None:
    from airflow_provider_sqlqueue.cli import Exit

    assert cli("create", "billing", "shipping", "error").code == Exit.OK
    missing = cli("subscriptions")
    assert missing.code == Exit.QUEUE_MISSING and "subscription table" in missing.err
    transport.subscriptions.create()
    billing, shipping = (str(transport.canonical(name)) for name in ("billing", "shipping"))

    made = cli("subscribe", "billing", "Shop.Events.OrderPlaced", "Shop.Events.OrderPaid", "--json")
    assert made.code == Exit.OK, made.err
    assert made.json_lines() == [
        {"endpoint": "billing", "topic": "Shop.Events.OrderPlaced", "queue": billing},
        {"endpoint": "billing", "topic": "Shop.Events.OrderPaid", "queue": billing},
    ]
    assert cli("subscribe", "shipping", "Shop.Events", "--endpoint", "Shipping").code == Exit.OK
    assert cli("subscribe", "nowhere", "Shop.Events").code == Exit.QUEUE_MISSING
    listed = cli("subscriptions", "--json").json_lines()
    assert [(row["topic"], row["endpoint"]) for row in listed] == [
        ("Shop.Events", "Shipping"),
        ("Shop.Events.OrderPaid", "billing"),
        ("Shop.Events.OrderPlaced", "billing"),
    ]
    assert cli("subscriptions", "--endpoint", "Shipping", "--json").json_lines() == [
        {"endpoint": "Shipping", "topic": "Shop.Events", "queue": shipping}
    ]
    assert "Shop.Events.OrderPaid" in cli("subscriptions").out

    published = cli(
        "publish",
        "Shop.Events.OrderPlaced",
        '{"order": 42}',
        "--base-topic",
        "Shop.Events",
        "--content-type",
        "application/json",
        "--json",
    )
    assert published.code == Exit.OK, published.err
    [record] = published.json_lines()
    assert record["topics"] == ["Shop.Events.OrderPlaced", "Shop.Events"]
    assert sorted(record["queues"]) == sorted([billing, shipping])
    for queue in ("billing", "shipping"):
        [(message_id, headers, body)] = rawsql.all_rows(transport.queue(queue))
        assert str(message_id) == record["id"] and body == b'{"order": 42}'
        assert json.loads(headers)[h.CONTENT_TYPE] == "application/json"

    gone = cli("unsubscribe", "billing", "Shop.Events.OrderPlaced", "Shop.Refunds", "--json")
    assert gone.json_lines() == [
        {"endpoint": "billing", "topic": "Shop.Events.OrderPlaced", "removed": True},
        {"endpoint": "billing", "topic": "Shop.Refunds", "removed": False},
    ]
    nobody = cli("publish", "Shop.Events.OrderPlaced", "late")
    assert nobody.code == Exit.OK and "nothing sent" in nobody.out
    assert transport.queue("billing").count() == 1
    assert cli("publish", " ", "x").code == Exit.USAGE


# ---- the example DAG pair through dag.test() ------------------------------------------------------
def example_module(name: str):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent.parent / "dags_examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_the_example_producer_reaches_both_example_consumer_dags_once_each(
    airflow_db,  # noqa: F811
    target,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The consumer DAGs' provision tasks subscribe (billing to the topic, shipping to its base topic; run
    in-process, as a deployment's first runs would), the producer DAG publishes one order, the billing DAG
    handles its copy; shipping's copy waits in its own queue with the same Id."""
    from test_airflow_dags import assert_succeeded, run_dag

    from airflow_provider_sqlqueue.operators.send import task_message_id

    for key, value in target.airflow_env().items():
        monkeypatch.setenv(key, value)
    consumers = example_module("sqlqueue_subscribe_example")
    for queue, dag in consumers.CONSUMER_DAGS.items():
        provisioned = dag.get_task("provision").execute({})
        assert provisioned["subscribed"] == consumers.SUBSCRIBERS[queue]
    with target.open() as transport:
        assert {(s.endpoint, s.topic) for s in transport.subscriptions.list()} == {
            ("billing", "Shop.Events.OrderPlaced"),
            ("shipping", "Shop.Events"),
        }

    producer = run_dag(target, "sqlqueue_publish_example", {"order_id": 7, "amount": 12.5})
    assert_succeeded(producer, target)
    assert "to 2 queue(s)" in producer.output, producer.output
    with target.open() as transport:
        [(message_id, headers, body)] = rawsql.all_rows(transport.queue("shipping"))
        event = json.loads(body)
        assert (event["order_id"], event["amount"]) == (7, 12.5)  # native rendering: numbers stay numbers
        # the Id is the task instance's, so a retry of the task would publish the same one
        expected = task_message_id("sqlqueue_publish_example", "announce_order", event["run_id"], -1, 0)
        assert str(message_id) == str(expected)
        sent = json.loads(headers)
        assert sent[h.MESSAGE_INTENT] == "Publish" and sent["Shop.Source"] == "airflow"
        assert sent[h.ENCLOSED_MESSAGE_TYPES] == "Shop.Events.OrderPlaced;Shop.Events"
        assert transport.queue("billing").count() == 1

    billing = run_dag(target, "sqlqueue_billing_example")
    assert_succeeded(billing, target)
    handled = re.findall(r"^billing got order (\d+) \((.*)\) id (\S+)$", billing.output, flags=re.MULTILINE)
    assert handled == [("7", "Shop.Events.OrderPlaced;Shop.Events", str(expected))], billing.output
    with target.open() as transport:
        assert transport.queue("billing").count() == 0 and transport.queue("error").count() == 0
        assert transport.queue("shipping").count() == 1


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_provisioning_with_subscribe_to_scripts_the_subscription_table_in_a_dry_run(conn: Transport) -> None:
    from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator

    conn.subscriptions.drop()
    script = ProvisionQueuesOperator(
        task_id="p", endpoint="billing", audit_queue=None, subscribe_to=["Shop.Events"], dry_run=True
    ).execute({})
    assert "SubscriptionRouting" in script and "billing" in script
    assert not conn.subscriptions.exists()  # a dry run creates and subscribes nothing


# ---- the Queues page ------------------------------------------------------------------------------
@pytest.mark.parametrize("target", NO_SQL_OF_THEIR_OWN, indirect=True)
def test_the_queues_page_lists_subscriptions_per_topic_bounded_and_only_to_readers(
    target,
    transport: Transport,
    airflow_db,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fastapi.testclient import TestClient
    from test_queues_page import CONN_ID, HOSTILE, Client

    from airflow_provider_sqlqueue.plugins import queues_app, subscriptions_view

    for name in ("error", "billing", "shipping"):
        transport.queue(name).create()
    for key, value in target.airflow_env(CONN_ID).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "a-test-secret-" + "x" * 50)
    from airflow.api_fastapi.app import create_auth_manager

    manager = create_auth_manager()
    with TestClient(queues_app.create_app(), base_url="http://airflow.test") as http:
        app = Client(http, manager)
        app.as_role("OP")
        before = app.get("/api/queues", conn_id=CONN_ID).json()["subscriptions"]
        assert before["exists"] is False and before["topics"] == []
        assert 'id="no-subscription-table"' in app.get("/queues", conn_id=CONN_ID).text

        store = transport.subscriptions
        store.create()
        store.subscribe("billing", "Shop.Events.OrderPlaced", "billing")
        store.subscribe("Shipping", "Shop.Events.OrderPlaced", "shipping")
        store.subscribe("Shipping", "Shop.Events", "shipping")
        store.subscribe("Shipping", HOSTILE, "shipping")
        billing, shipping = (str(transport.canonical(name)) for name in ("billing", "shipping"))

        seen = app.get("/api/queues", conn_id=CONN_ID).json()["subscriptions"]
        assert seen["exists"] is True and seen["more"] is False
        # topics in the table's order; the endpoints of a topic in its collation's (case-insensitive on SQL
        # Server), so compared as sets
        assert [
            (t["topic"], sorted((s["endpoint"], s["queue"]) for s in t["subscribers"]))
            for t in seen["topics"]
        ] == [
            (HOSTILE, [("Shipping", shipping)]),
            ("Shop.Events", [("Shipping", shipping)]),
            ("Shop.Events.OrderPlaced", [("Shipping", shipping), ("billing", billing)]),
        ]
        page = app.get("/queues", conn_id=CONN_ID).text
        assert 'id="subscriptions"' in page and page.count('<tr data-topic="Shop.Events.OrderPlaced">') == 2
        assert "<script>alert(" not in page and "&lt;script&gt;alert(&#39;x&#39;)" in page

        monkeypatch.setattr(subscriptions_view, "SUBSCRIPTIONS_LIMIT", 2)
        bounded = app.get("/api/queues", conn_id=CONN_ID).json()["subscriptions"]
        assert bounded["more"] is True and bounded["limit"] == 2
        assert [t["topic"] for t in bounded["topics"]] == [HOSTILE, "Shop.Events"]
        assert 'id="subscriptions-more"' in app.get("/queues", conn_id=CONN_ID).text

        app.as_role("VIEWER")  # may open the page, may not read the connection
        refused = app.get("/api/queues", conn_id=CONN_ID)
        assert refused.status_code == 404 and "Shop.Events" not in refused.text
        shown = app.get("/queues", conn_id=CONN_ID)
        assert shown.status_code == 404 and "Shop.Events" not in shown.text


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_the_operator_reports_each_subscriber_queue_it_wrote_to_as_lineage(conn: Transport, target) -> None:
    pytest.importorskip("airflow.providers.openlineage", reason="the openlineage extra is not installed")
    import os

    from sqlalchemy.engine import make_url

    from airflow_provider_sqlqueue.operators.publish import PublishMessageOperator

    conn.subscriptions.subscribe("billing", "Shop.Events", "billing")
    conn.subscriptions.subscribe("shipping", "Shop.Events", "shipping")
    operator = PublishMessageOperator(task_id="announce", topic="Shop.Events", body="x")
    assert operator.execute({})["queues"] == 2
    lineage = operator.get_openlineage_facets_on_complete(None)
    namespace = f"sqlite://{os.path.abspath(make_url(target.url).database)}"
    assert lineage.inputs == []
    assert [(d.namespace, d.name) for d in lineage.outputs] == [
        (namespace, "main.billing"),
        (namespace, "main.shipping"),
    ]


# ---- privileges -----------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_runtime_role_publishes_with_select_and_subscribes_only_once_granted_update(
    target, transport: Transport, postgres_server
) -> None:
    """docs/dba-ddl.md: publishing needs SELECT on the subscription table; the subscribe upsert needs UPDATE
    too, which the narrow runtime grants (SELECT, INSERT, DELETE) leave out."""
    from test_least_privilege import RuntimeRole

    from airflow_provider_sqlqueue.transport import PermissionDenied

    for name in ("orders", "error"):
        transport.queue(name).create()
    transport.subscriptions.create()
    transport.subscriptions.subscribe("orders", "Shop.Events", "orders")
    role = RuntimeRole(target, postgres_server)
    table = f'"{target.schema}"."SubscriptionRouting"'
    try:
        postgres_server.execute(f'GRANT SELECT, INSERT, DELETE ON {table} TO "{role.name}"')
        with role.open(subscriptions=SubscriptionSettings(cache_seconds=0)) as runtime:
            assert runtime.publish("Shop.Events", b"x").queues == (str(transport.canonical("orders")),)
            with pytest.raises(PermissionDenied):
                runtime.subscriptions.subscribe("orders", "Shop.Refunds", "orders")
            postgres_server.execute(f'GRANT UPDATE ON {table} TO "{role.name}"')
            runtime.subscriptions.subscribe("orders", "Shop.Refunds", "orders")
            assert runtime.subscriptions.unsubscribe("orders", "Shop.Refunds") is True
        assert transport.queue("orders").count() == 1
    finally:
        role.drop()
