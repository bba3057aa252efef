"""The Queues page of the provider's Airflow plugin: the overview it reads, its web app's answers and
permissions on every engine target, and what the page escapes and hides.

The app runs in-process through Starlette's test client with Airflow's own simple auth manager deciding;
only who is logged in is given (the browser check, tests/browser/airflow_ui_check.py, logs in for real).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EngineTarget
from fastapi.testclient import TestClient
from test_airflow_dags import airflow_db  # noqa: F401  (a fixture)

from airflow_provider_sqlqueue.transport import Transport
from airflow_provider_sqlqueue.transport.browse import browse
from airflow_provider_sqlqueue.transport.overview import human_age, queues_overview
from airflow_provider_sqlqueue.transport.pump import MessagePump

CONN_ID = "sqlqueue_page"
HOSTILE = "<script>alert('x')</script> & more"


def table(queue: str | None) -> str:
    """The table of a queue name as FailedQ spells it (``payments@[schema]`` on a server)."""
    return (queue or "").split("@")[0]


def fail_all(transport: Transport, name: str, bodies: list[str], error: Exception) -> set[str]:
    """Send ``bodies`` to ``name`` and let a handler raising ``error`` move them to the error queue."""
    queue = transport.queue(name)
    queue.create()
    sent = {str(i) for i in queue.send_batch(bodies)}

    def broken(message: Any, context: Any) -> None:
        raise error

    MessagePump(queue, broken, transaction_mode="none", idle_delay=0.1).run(until_empty=True, timeout=30)
    return sent


@pytest.fixture
def queues(transport: Transport) -> Transport:
    """orders (3 waiting), payments (2 failed: ConnectionError), refunds (1 failed with hostile text)."""
    transport.queue("error").create()
    orders = transport.queue("orders")
    orders.create()
    orders.send_batch(["o1", "o2", "o3"])
    fail_all(transport, "payments", ["p1", "p2"], ConnectionError("payment service unreachable"))
    fail_all(transport, "refunds", ["r1"], ValueError(HOSTILE))
    return transport


def test_the_overview_reads_depth_oldest_age_and_failed_groups(queues: Transport) -> None:
    overview = queues_overview(queues)
    states = {state.address.table: state for state in overview.queues}
    assert {name: states[name].messages for name in ("orders", "payments", "refunds", "error")} == {
        "orders": 3,
        "payments": 0,
        "refunds": 0,
        "error": 3,
    }
    assert states["orders"].oldest_age_seconds is not None and 0 <= states["orders"].oldest_age_seconds < 60
    assert states["payments"].oldest_age_seconds is None
    assert [(table(g.failed_queue), g.exception_type, g.count) for g in overview.failed or []] == [
        ("payments", "ConnectionError", 2),
        ("refunds", "ValueError", 1),
    ]
    assert overview.failed and overview.failed[1].exception_message == HOSTILE


def test_the_overview_says_when_there_is_no_error_queue(transport: Transport) -> None:
    transport.queue("orders").create()
    overview = queues_overview(transport, error_queue="no_such_error_queue")
    assert overview.failed is None
    assert [state.address.table for state in overview.queues] == ["orders"]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "—"),
        (-3, "0s"),
        (59.4, "59s"),
        (61, "1m 01s"),
        (3 * 3600 + 120, "3h 02m"),
        (50 * 3600, "2d 02h"),
    ],
)
def test_ages_are_written_for_people(seconds: float | None, text: str) -> None:
    assert human_age(seconds) == text


# ---- the web app ---------------------------------------------------------------------------------
class LoggedIn:
    """Who the app sees as logged in (None: nobody); Airflow's simple auth manager decides the rest."""

    def __init__(self) -> None:
        self.user: Any = None


@pytest.fixture
def app(
    airflow_db: Path,  # noqa: F811
    queues: Transport,
    target: EngineTarget,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[TestClient, LoggedIn]]:
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from fastapi import HTTPException

    from airflow_provider_sqlqueue.plugins import queues_app

    for key, value in target.airflow_env(CONN_ID).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
    manager = SimpleAuthManager()
    monkeypatch.setattr(queues_app, "_auth_manager", lambda: manager)
    logged_in = LoggedIn()

    def user() -> Any:
        if logged_in.user is None:
            raise HTTPException(401, "Not authenticated")
        return logged_in.user

    application = queues_app.create_app()
    application.dependency_overrides[queues_app._user] = user
    application.dependency_overrides[queues_app._session] = lambda: logged_in.user
    with TestClient(application, base_url="http://airflow.test") as client:
        yield client, logged_in


def as_role(logged_in: LoggedIn, role: str) -> None:
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    logged_in.user = SimpleAuthManagerUser(username=role.lower(), role=role)


def retry(client: TestClient, group: str, **headers: str) -> Any:
    body = json.dumps({"conn_id": CONN_ID, "group": group})
    return client.post("/api/retry", content=body, headers={"Content-Type": "application/json", **headers})


def test_a_viewer_sees_the_queues_and_may_not_retry_an_op_may(app, queues: Transport) -> None:
    client, logged_in = app
    as_role(logged_in, "VIEWER")
    answer = client.get("/api/queues", params={"conn_id": CONN_ID})
    assert answer.status_code == 200, answer.text
    seen = answer.json()
    depths = {table(row["queue"]): row["messages"] for row in seen["queues"]}
    assert depths["orders"] == 3 and depths["error"] == 3
    payments = next(g for g in seen["failed_groups"] if table(g["failed_queue"]) == "payments")
    assert payments["count"] == 2

    refused = retry(client, payments["group"])
    assert refused.status_code == 403 and "edit connection" in refused.json()["detail"]
    assert queues.queue("error").count() == 3

    page = client.get("/queues", params={"conn_id": CONN_ID})
    assert page.status_code == 200 and 'id="retry-not-allowed"' in page.text
    assert 'class="retry"' not in page.text

    as_role(logged_in, "OP")
    failed_ids = {m.id for m in browse(queues.queue("error"), 10) if m.headers.get("NServiceBus.FailedQ")}
    done = retry(client, payments["group"], Origin="http://airflow.test")
    assert done.status_code == 200, done.text
    assert len(done.json()["done"]) == 2 and done.json()["refused"] == []
    back = {m.id for m in browse(queues.queue("payments"), 10)}
    assert back == set(done.json()["done"]) and back <= failed_ids
    assert queues.queue("error").count() == 1
    page = client.get("/queues", params={"conn_id": CONN_ID})
    assert page.text.count('class="retry"') == 1


def test_a_retry_must_be_json_from_this_origin_and_nobody_gets_in_without_a_session(
    app, queues: Transport
) -> None:
    client, logged_in = app
    as_role(logged_in, "ADMIN")
    group = client.get("/api/queues", params={"conn_id": CONN_ID}).json()["failed_groups"][0]["group"]
    cross = retry(client, group, Origin="http://evil.example")
    assert cross.status_code == 403 and "cross-origin" in cross.json()["detail"]
    form = client.post("/api/retry", data={"conn_id": CONN_ID, "group": group})
    assert form.status_code in (415, 422)
    bad = retry(client, "not-a-group")
    assert bad.status_code == 422
    assert queues.queue("error").count() == 3

    logged_in.user = None
    page = client.get("/queues", follow_redirects=False)
    assert page.status_code == 303 and "/auth/login" in page.headers["location"]
    assert client.get("/api/queues", params={"conn_id": CONN_ID}).status_code == 401
    assert retry(client, group).status_code == 401
    assert queues.queue("error").count() == 3


def test_the_page_escapes_what_it_shows_and_lists_stored_connections(app, target: EngineTarget) -> None:
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    client, logged_in = app
    as_role(logged_in, "VIEWER")
    stored = Connection(conn_id="sqlqueue_stored_example", conn_type="sqlqueue", host="/tmp/x.db")
    with create_session() as session:
        session.add(stored)
    try:
        page = client.get("/queues", params={"conn_id": CONN_ID}).text
    finally:
        with create_session() as session:
            session.query(Connection).filter(Connection.conn_id == "sqlqueue_stored_example").delete()
    assert "<script>alert(" not in page
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; more" in page
    assert re.search(r'<option value="sqlqueue_stored_example"', page)
    assert re.search(rf'<option value="{CONN_ID}" selected>', page)


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_no_password_reaches_a_page_or_an_error(app, target: EngineTarget, monkeypatch) -> None:
    client, logged_in = app
    as_role(logged_in, "VIEWER")
    connection = target.airflow_connection()
    password = str(connection["password"])
    page = client.get("/queues", params={"conn_id": CONN_ID}).text
    seen = client.get("/api/queues", params={"conn_id": CONN_ID}).text
    wrong = dict(connection, port=1, password=password)
    monkeypatch.setenv("AIRFLOW_CONN_SQLQUEUE_BROKEN", json.dumps(wrong))
    broken = client.get("/queues", params={"conn_id": "sqlqueue_broken"}).text
    assert 'id="error"' in broken
    for text in (page, seen, broken):
        assert password not in text
