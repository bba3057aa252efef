"""What the Queues page and the triggers read stays bounded however long the queues are (issue 42, part 3):
depths are estimates unless an exact count is asked for below a threshold, the oldest message's age is read
without its body, failed-message groups come from the newest N rows with a "more" flag, a group's retry
runs in bounded steps through the page's endpoint, and the event trigger sends the queue's gauges.

Each on real engines; the app through Starlette's test client with Airflow's simple auth manager deciding
(fixtures of tests/test_queues_page.py).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import EngineTarget
from postgres_plugin import PostgresServer
from sqlalchemy.engine import make_url
from test_airflow_dags import airflow_db  # noqa: F401  (a fixture)
from test_metrics import StatsdListener, name, statsd  # noqa: F401  (statsd: a fixture)
from test_queues_page import CONN_ID, Client, app, fail_all, queues, table  # noqa: F401  (fixtures)

from airflow_provider_sqlqueue.plugins import queues_app
from airflow_provider_sqlqueue.transport import OutgoingMessage, Transport, open_transport
from airflow_provider_sqlqueue.transport.archive import ErrorArchive
from airflow_provider_sqlqueue.transport.failed import FailureFilter, failed_sample, retry_failed
from airflow_provider_sqlqueue.transport.overview import queue_gauges, queues_overview
from airflow_provider_sqlqueue.triggers.queue import (
    TESTED_TASK_SDK,
    QueueMessagesEventTrigger,
    asset_accessors,
)


def send_with_an_expired_one(transport: Transport) -> None:
    """orders: a message, one that has expired, a message: 3 rows, 2 messages a receiver would get."""
    orders = transport.queue("orders")
    orders.create()
    orders.send(OutgoingMessage(b"first"))
    orders.send(OutgoingMessage(b"gone", time_to_be_received=timedelta(milliseconds=5)))
    orders.send(OutgoingMessage(b"last"))
    time.sleep(0.1)


def depth_of(transport: Transport, **options: Any) -> tuple[int, bool]:
    [state] = [s for s in queues_overview(transport, **options).queues if s.address.table == "orders"]
    return state.messages, state.exact


def test_depths_are_estimates_unless_an_exact_count_is_asked_below_the_threshold(
    transport: Transport,
) -> None:
    send_with_an_expired_one(transport)
    assert depth_of(transport) == (3, False)  # max - min + 1 counts the expired row too
    assert depth_of(transport, exact_below=10) == (2, True)
    assert depth_of(transport, exact_below=3) == (3, False)  # not below the threshold: no count


def fail_in_two_groups(transport: Transport) -> None:
    """error: 3 payments failures (older), then 2 refunds failures (newest)."""
    transport.queue("error").create()
    fail_all(transport, "payments", ["p1", "p2", "p3"], ConnectionError("payment service unreachable"))
    fail_all(transport, "refunds", ["r1", "r2"], ValueError("no such order"))


def test_failed_groups_come_from_the_newest_rows_and_say_when_there_are_more(transport: Transport) -> None:
    fail_in_two_groups(transport)
    newest = queues_overview(transport, failed_limit=2)
    assert [(table(g.failed_queue), g.count) for g in newest.failed or []] == [("refunds", 2)]
    assert (newest.failed_read, newest.failed_more) == (2, True)

    everything = queues_overview(transport, failed_limit=5)
    assert [(table(g.failed_queue), g.count) for g in everything.failed or []] == [
        ("payments", 3),
        ("refunds", 2),
    ]
    assert (everything.failed_read, everything.failed_more) == (5, False)
    assert failed_sample(transport.queue("error"), 6).more is False


@pytest.mark.parametrize(
    "target", ["sqlite", "postgresql", "sqlserver-freetds", "sqlserver-msodbc"], indirect=True
)
def test_a_retry_with_max_rows_stops_there_and_resumes_where_it_stopped(transport: Transport) -> None:
    fail_in_two_groups(transport)
    errors = transport.queue("error")
    payments = failed_sample(errors, 10).groups[0]
    assert table(payments.failed_queue) == "payments" and payments.count == 3

    first = retry_failed(errors, FailureFilter(group=payments.key), max_rows=2)
    assert len(first.done) == 2 and first.more and first.read_to is not None and first.up_to is not None
    second = retry_failed(
        errors, FailureFilter(group=payments.key), max_rows=2, after=first.read_to, up_to=first.up_to
    )
    assert len(second.done) == 1 and second.more  # read the last payments row and one refunds row
    third = retry_failed(
        errors, FailureFilter(group=payments.key), max_rows=2, after=second.read_to, up_to=second.up_to
    )
    assert third.done == [] and not third.more
    assert transport.queue("payments").count() == 3 and errors.count() == 2


def step(client: Client, group: str, after: int = 0, up_to: int | None = None) -> Any:
    body = {"conn_id": CONN_ID, "group": group, "after": after, "up_to": up_to}
    answer = client.post("/api/retry", body, Origin="http://airflow.test")
    assert answer.status_code == 200, answer.text
    return answer.json()


@pytest.mark.parametrize(
    "target", ["sqlite", "postgresql", "sqlserver-freetds", "sqlserver-msodbc"], indirect=True
)
def test_the_page_retries_a_group_in_steps_and_says_how_far_it_got(
    app: Client,  # noqa: F811
    queues: Transport,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = app
    client.as_role("OP")
    fail_all(queues, "payments", ["p3", "p4", "p5"], ConnectionError("payment service unreachable"))
    monkeypatch.setattr(queues_app, "RETRY_ROWS_PER_REQUEST", 2)
    seen = client.get("/api/queues", conn_id=CONN_ID).json()
    payments = next(g for g in seen["failed_groups"] if table(g["failed_queue"]) == "payments")

    answers = [step(client, payments["group"])]
    while answers[-1]["more"]:
        last = answers[-1]
        assert last["left"] > 0 and last["up_to"] >= last["after"]
        answers.append(step(client, payments["group"], last["after"], last["up_to"]))
    # 6 error rows (2 + 1 hostile refunds + 3 more payments), 2 per request: 3 steps, the last says done
    assert len(answers) == 3 and answers[-1]["left"] == 0
    assert sum(len(a["done"]) for a in answers) == 5
    assert all(len(a["done"]) <= 2 for a in answers)
    assert queues.queue("payments").count() == 5 and queues.queue("error").count() == 1


@pytest.mark.parametrize(
    "target", ["sqlite", "postgresql", "sqlserver-freetds", "sqlserver-msodbc"], indirect=True
)
def test_the_page_deletes_a_group_in_steps_and_one_message_by_its_id(
    app: Client,  # noqa: F811
    queues: Transport,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = app
    client.as_role("OP")
    fail_all(queues, "payments", ["p3", "p4", "p5"], ConnectionError("payment service unreachable"))
    monkeypatch.setattr(queues_app, "RETRY_ROWS_PER_REQUEST", 2)
    seen = client.get("/api/queues", conn_id=CONN_ID).json()
    payments = next(g for g in seen["failed_groups"] if table(g["failed_queue"]) == "payments")
    refunds = next(g for g in seen["failed_groups"] if table(g["failed_queue"]) == "refunds")
    hostile_id = client.get("/api/failed", conn_id=CONN_ID, group=refunds["group"]).json()["messages"][0][
        "id"
    ]

    def delete(**selection: Any) -> Any:
        answer = client.post("/api/delete", {"conn_id": CONN_ID, **selection}, Origin="http://airflow.test")
        assert answer.status_code == 200, answer.text
        return answer.json()

    answers = [delete(group=payments["group"])]
    while answers[-1]["more"]:
        last = answers[-1]
        assert last["left"] > 0
        answers.append(delete(group=payments["group"], after=last["after"], up_to=last["up_to"]))
    assert len(answers) == 3 and all(len(a["done"]) <= 2 for a in answers)
    assert sum(len(a["done"]) for a in answers) == 5
    errors = queues.queue("error")
    assert errors.count() == 1
    by_id = delete(id=hostile_id)
    assert by_id["done"] == [hostile_id] and by_id["more"] is False
    assert errors.count() == 0
    archive = ErrorArchive.of(errors)
    assert archive.count() == 6


@pytest.mark.parametrize(
    "target", ["sqlite", "postgresql", "sqlserver-freetds", "sqlserver-msodbc"], indirect=True
)
def test_the_json_says_which_depths_are_estimates_and_whether_more_failed_rows_exist(
    app: Client,  # noqa: F811
    queues: Transport,  # noqa: F811
) -> None:
    client = app
    client.as_role("OP")
    estimated = client.get("/api/queues", conn_id=CONN_ID).json()
    # every queue's depth an estimate but the error queue's: all its rows were read for the groups
    exact = {table(row["queue"]): row["messages_exact"] for row in estimated["queues"]}
    assert exact.pop("error") is True and set(exact.values()) == {False}
    assert (estimated["summary"]["failed"], estimated["summary"]["failed_exact"]) == (3, True)
    assert estimated["failed_more"] is False and estimated["failed_read"] == 3
    counted = client.get("/api/queues", conn_id=CONN_ID, exact="true").json()
    assert {row["messages_exact"] for row in counted["queues"]} == {True}
    depths = {table(row["queue"]): row["messages"] for row in counted["queues"]}
    assert depths["orders"] == 3 and depths["error"] == 3
    page = client.get("/queues", conn_id=CONN_ID)
    assert "Count exactly" in page.text and "≈ 3" in page.text


@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_the_page_says_more_when_older_failed_messages_were_not_grouped(
    app: Client,  # noqa: F811
    queues: Transport,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = app
    client.as_role("OP")
    monkeypatch.setattr(queues_app, "FAILED_GROUPS_LIMIT", 2)
    seen = client.get("/api/queues", conn_id=CONN_ID).json()
    assert (seen["failed_read"], seen["failed_limit"], seen["failed_more"]) == (2, 2, True)
    # the newest two: the refunds failure (hostile text) and the second payments failure
    assert sorted(g["count"] for g in seen["failed_groups"]) == [1, 1]
    page = client.get("/queues", conn_id=CONN_ID)
    assert 'id="failed-more"' in page.text and "Retry all" in page.text
    # the summary's failed total is still exact: the error queue is counted, its estimate being below
    # [sqlqueue] exact_count_below; above that threshold it is the estimate
    assert (seen["summary"]["failed"], seen["summary"]["failed_exact"]) == (3, True)
    monkeypatch.setenv("AIRFLOW__SQLQUEUE__EXACT_COUNT_BELOW", "2")
    estimated = client.get("/api/queues", conn_id=CONN_ID).json()["summary"]
    assert estimated["failed_exact"] is False and estimated["failed"] >= 3, estimated
    monkeypatch.delenv("AIRFLOW__SQLQUEUE__EXACT_COUNT_BELOW")

    monkeypatch.setattr(queues_app, "FAILED_GROUPS_LIMIT", 3)
    everything = client.get("/api/queues", conn_id=CONN_ID).json()
    assert (everything["failed_read"], everything["failed_more"]) == (3, False)
    assert 'id="failed-more"' not in client.get("/queues", conn_id=CONN_ID).text


# ---- the oldest message's age without its body --------------------------------------------------------
@pytest.mark.postgres
@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_the_gauges_and_the_page_never_read_a_body(
    target: EngineTarget, transport: Transport, postgres_server: PostgresServer
) -> None:
    """A role that may read every column but Body builds the page and the gauges: no statement touches it
    (PostgreSQL refuses any that does)."""
    for queue in ("orders", "error"):
        transport.queue(queue).create()
    transport.queue("orders").send_batch([b"x" * 1_000_000, b"small"])
    role, password = f"qmon_{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    postgres_server.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{password}'")
    try:
        postgres_server.execute(f'GRANT USAGE ON SCHEMA "{target.schema}" TO "{role}"')
        for queue in ("orders", "error"):
            postgres_server.execute(
                "GRANT SELECT (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, "
                f'RowVersion) ON "{target.schema}"."{queue}" TO "{role}"'
            )
        url = make_url(target.url).set(username=role, password=password).render_as_string(hide_password=False)
        with open_transport(url, default_schema=target.schema) as monitor:
            gauges = queue_gauges(monitor.queue("orders"))
            assert gauges.depth == 2 and gauges.failed == 0
            assert gauges.oldest_age_seconds is not None and gauges.oldest_age_seconds >= 0
            overview = queues_overview(monitor)
            [orders] = [s for s in overview.queues if s.address.table == "orders"]
            assert orders.messages == 2 and orders.oldest_time_sent is not None
            with pytest.raises(Exception, match="permission denied"):
                from airflow_provider_sqlqueue.transport.browse import browse

                browse(monitor.queue("orders"), 1)  # the statement the gauges used before reads Body
    finally:
        postgres_server.execute(f'DROP OWNED BY "{role}"')
        postgres_server.execute(f'DROP ROLE "{role}"')


# ---- the event trigger's gauges -----------------------------------------------------------------------
@pytest.fixture
def watched(target: EngineTarget, monkeypatch: pytest.MonkeyPatch) -> Any:
    for key, value in target.airflow_env().items():
        monkeypatch.setenv(key, value)
    with target.open() as transport:
        transport.queue("error").create()
        transport.queue("orders").create()
        yield transport


def first_event(trigger: QueueMessagesEventTrigger, timeout: float = 20.0) -> dict[str, Any]:
    async def take() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(asyncio.wait_for(take(), timeout))


@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_the_event_trigger_sends_depth_age_and_failed_gauges(
    statsd: StatsdListener,  # noqa: F811
    watched: Transport,
) -> None:
    fail_all(watched, "payments", ["p1", "p2"], ConnectionError("payment service unreachable"))
    orders = watched.queue("orders")
    orders.send_batch(["o1", "o2", "o3", "o4"])
    time.sleep(0.05)
    event = first_event(QueueMessagesEventTrigger("orders", min_messages=4, poll_interval=0.1))
    assert event["status"] == "success" and event["depth"] == 4

    queue = str(orders.address)
    assert statsd.wait_for(name("queue", queue, "depth")) == [(4.0, "g")]
    [(age, kind)] = statsd.wait_for(name("queue", queue, "oldest_age_seconds"))
    assert kind == "g" and 0.05 <= age < 60
    assert statsd.wait_for(name("queue", queue, "failed")) == [(2.0, "g")]


# ---- public Airflow APIs ------------------------------------------------------------------------------
def test_the_watermark_finds_every_watched_assets_accessor_on_the_pinned_task_sdk() -> None:
    """Airflow lists no accessors of a state store watching several assets; the version-gated lookup holds
    on the pinned Task SDK, and gives up (the watermark stays in memory) on any other release."""
    from importlib.metadata import version

    from airflow.sdk import Asset
    from airflow.sdk.execution_time.context import AssetStateStoreAccessor, AssetStateStoreAccessors

    assert ".".join(version("apache-airflow-task-sdk").split(".")[:2]) in TESTED_TASK_SDK
    store = AssetStateStoreAccessors(inlets=[Asset(name="a", uri="s3://a"), Asset(name="b", uri="s3://b")])
    found = asset_accessors(store)
    assert found is not None and sorted(repr(a) for a in found) == sorted(
        repr(AssetStateStoreAccessor(name=n)) for n in ("a", "b")
    )
    with pytest.raises(ValueError):
        asyncio.run(store.aget("key"))  # the public single-asset form refuses: several assets


def test_the_watermark_lookup_gives_up_on_an_untested_task_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk import Asset
    from airflow.sdk.execution_time.context import AssetStateStoreAccessors

    monkeypatch.setattr("airflow_provider_sqlqueue.triggers.queue.TESTED_TASK_SDK", ("0.0",))
    store = AssetStateStoreAccessors(inlets=[Asset(name="a", uri="s3://a"), Asset(name="b", uri="s3://b")])
    assert asset_accessors(store) is None


def test_metrics_and_triggers_import_no_private_airflow_module() -> None:
    package = Path(__file__).resolve().parent.parent / "airflow_provider_sqlqueue"
    for path in (package / "metrics.py", package / "triggers" / "queue.py"):
        text = path.read_text()
        assert "_shared" not in text and "_single_accessor" not in text, path
