"""The Queues page of the provider's Airflow plugin: the overview it reads, its web app's answers and
permissions on every engine target, and what the page escapes and hides.

The app runs in-process through Starlette's test client with Airflow's own simple auth manager deciding;
only who is logged in is given (the browser check, tests/browser/airflow_ui_check.py, logs in for real).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EngineTarget
from fastapi.testclient import TestClient
from test_airflow_dags import airflow_db  # noqa: F401  (a fixture)

from airflow_provider_sqlqueue.model.errors import ConfigurationError
from airflow_provider_sqlqueue.transport import QueueAddress, Transport
from airflow_provider_sqlqueue.transport.browse import browse, preview_body
from airflow_provider_sqlqueue.transport.failed import failed_rows
from airflow_provider_sqlqueue.transport.overview import human_age, queues_overview
from airflow_provider_sqlqueue.transport.pump import MessagePump

CONN_ID = "sqlqueue_page"
HOSTILE = "<script>alert('x')</script> & more"


def table(queue: str | None) -> str:
    """The table of a queue name as FailedQ spells it (``payments@[schema]@[db]`` on SQL Server,
    ``"schema"."payments"`` on PostgreSQL)."""
    return QueueAddress.parse(queue).table if queue else ""


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
class Client:
    """The app in-process, called as Airflow's users are: with a bearer token the simple auth manager
    issued (``role`` None: no token), so Airflow's own ``get_user`` and auth manager decide everything."""

    def __init__(self, client: TestClient, manager: Any) -> None:
        self.http = client
        self.manager = manager

    def as_role(self, role: str | None) -> None:
        from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

        self.http.headers.pop("Authorization", None)
        if role is not None:
            token = self.manager.generate_jwt(SimpleAuthManagerUser(username=role.lower(), role=role))
            self.http.headers["Authorization"] = f"Bearer {token}"

    def get(self, path: str, **params: Any) -> Any:
        return self.http.get(path, params=params, follow_redirects=False)

    def post(self, path: str, body: dict[str, Any], **headers: str) -> Any:
        sent = {"Content-Type": "application/json", **headers}
        return self.http.post(path, content=json.dumps(body), headers=sent)


@pytest.fixture
def app(
    airflow_db: Path,  # noqa: F811
    queues: Transport,
    target: EngineTarget,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Client]:
    from airflow.api_fastapi.app import create_auth_manager

    from airflow_provider_sqlqueue.plugins import queues_app

    for key, value in target.airflow_env(CONN_ID).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", secrets.token_urlsafe(64))
    manager = create_auth_manager()
    with TestClient(queues_app.create_app(), base_url="http://airflow.test") as client:
        yield Client(client, manager)


def retry(app: Client, group: str, **headers: str) -> Any:
    return app.post("/api/retry", {"conn_id": CONN_ID, "group": group}, **headers)


def delete(app: Client, conn_id: str = CONN_ID, **selection: str) -> Any:
    return app.post("/api/delete", {"conn_id": conn_id, **selection}, Origin="http://airflow.test")


def a_group(transport: Transport, queue: str) -> str:
    """The group key of the failed messages of ``queue`` (read by the transport, not the app)."""
    rows = [r for r in failed_rows(transport.queue("error")) if table(r.failed_queue) == queue]
    assert rows, f"no failed message of {queue}"
    return rows[0].group_key


def audit_entries(after: int) -> list[tuple[str, str | None, dict[str, Any]]]:
    """(event, owner, extra) of Airflow's audit log entries about this module's connection with an id above
    ``after``: the pytest workers share one Airflow home, so the other worker's tests write to the same log
    meanwhile."""
    from airflow.models.log import Log
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(select(Log.event, Log.owner, Log.extra).where(Log.id > after).order_by(Log.id))
        entries = [(event, owner, json.loads(extra or "{}")) for event, owner, extra in rows]
    return [entry for entry in entries if isinstance(entry[2], dict) and entry[2].get("conn_id") == CONN_ID]


def last_audit_id() -> int:
    from airflow.models.log import Log
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        return int(session.scalar(select(func.max(Log.id))) or 0)


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)  # decided before any database
def test_a_viewer_is_served_no_connection_and_cannot_tell_forbidden_from_unknown(
    app: Client, queues: Transport
) -> None:
    app.as_role("VIEWER")
    group = a_group(queues, "payments")
    message_id = next(r.id for r in failed_rows(queues.queue("error")))
    forbidden = [
        app.get("/api/queues", conn_id=CONN_ID),
        app.get("/api/failed", conn_id=CONN_ID, group=group),
        app.get("/api/message", conn_id=CONN_ID, id=message_id),
        retry(app, group, Origin="http://airflow.test"),
        delete(app, group=group),
    ]
    unknown = [
        app.get("/api/queues", conn_id="nope"),
        app.get("/api/failed", conn_id="nope", group=group),
        app.get("/api/message", conn_id="nope", id=message_id),
        app.post("/api/retry", {"conn_id": "nope", "group": group}, Origin="http://airflow.test"),
        delete(app, "nope", group=group),
    ]
    for refused, missing in zip(forbidden, unknown, strict=True):
        assert (refused.status_code, refused.content) == (missing.status_code, missing.content)
        assert refused.status_code == 404 and refused.json() == {"detail": queues_app_not_served()}
    assert queues.queue("error").count() == 3

    page = app.get("/queues")
    assert page.status_code == 200 and "that you may read" in page.text
    assert CONN_ID not in page.text and 'id="queues"' not in page.text
    for path, params in (
        ("/queues", {"conn_id": CONN_ID}),
        ("/failed", {"conn_id": CONN_ID, "group": group}),
        ("/message", {"conn_id": CONN_ID, "id": message_id}),
    ):
        shown = app.get(path, **params)
        assert shown.status_code == 404 and queues_app_not_served() in shown.text, path
        assert "payment service unreachable" not in shown.text and 'class="retry"' not in shown.text


def connection_reader_auth_manager() -> Any:
    """An auth manager as deployments configure one (FAB, Keycloak) with a role that may read connections
    but not edit them, which Airflow's simple auth manager has not: its USER may GET a connection."""
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    class ConnectionReaderAuthManager(SimpleAuthManager):
        def is_authorized_connection(self, *, method: Any, user: Any, details: Any = None) -> bool:
            if str(user.role).upper() == "USER":
                return method == "GET"
            return super().is_authorized_connection(method=method, user=user, details=details)

    return ConnectionReaderAuthManager()


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)  # decided before any database
def test_a_user_who_may_read_but_not_edit_the_connection_is_told_so_and_changes_nothing(
    app: Client, queues: Transport, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.api_fastapi import app as api_app

    reader = connection_reader_auth_manager()
    state = getattr(api_app, "_AuthManagerState", None)  # Airflow 3.1; 3.0 keeps a module global
    monkeypatch.setattr(*((state, "instance") if state is not None else (api_app, "auth_manager")), reader)
    app.manager = reader
    app.as_role("USER")
    page = app.get("/queues", conn_id=CONN_ID)
    assert page.status_code == 200 and "payment service unreachable" in page.text
    note = re.search(r'<p class="muted" id="retry-not-allowed">([^<]*)</p>', page.text)
    assert note and note.group(1) == f"Retrying and deleting need the right to edit connection {CONN_ID}."
    assert "data-action=" not in page.text  # no retry or delete button
    group = a_group(queues, "payments")
    refused = retry(app, group, Origin="http://airflow.test")
    assert refused.status_code == 403, refused.text
    assert (
        refused.json()["detail"] == f"retrying failed messages needs the right to edit connection {CONN_ID}"
    )
    assert delete(app, group=group).status_code == 403
    assert queues.queue("error").count() == 3 and queues.queue("payments").count() == 0
    app.as_role("OP")  # the same manager: OP edits, and the page offers the actions
    assert 'id="retry-not-allowed"' not in app.get("/queues", conn_id=CONN_ID).text


def queues_app_not_served() -> str:
    from airflow_provider_sqlqueue.plugins.queues_app import NOT_SERVED

    return NOT_SERVED


def test_an_op_lists_a_group_opens_a_message_retries_and_deletes_and_each_is_audited(
    app: Client, queues: Transport, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_sqlqueue.plugins import failed_views

    app.as_role("OP")
    seen = app.get("/api/queues", conn_id=CONN_ID)
    assert seen.status_code == 200, seen.text
    depths = {table(row["queue"]): row["messages"] for row in seen.json()["queues"]}
    assert depths["orders"] == 3 and depths["error"] == 3
    payments = next(g for g in seen.json()["failed_groups"] if table(g["failed_queue"]) == "payments")
    assert payments["count"] == 2

    listed = app.get("/api/failed", conn_id=CONN_ID, group=payments["group"]).json()
    stored = {r.id for r in failed_rows(queues.queue("error")) if table(r.failed_queue) == "payments"}
    assert {m["id"] for m in listed["messages"]} == stored and listed["more"] is False
    assert {m["exception_message"] for m in listed["messages"]} == {"payment service unreachable"}
    first = app.get("/api/failed", conn_id=CONN_ID, group=payments["group"], limit=1).json()
    assert len(first["messages"]) == 1 and first["more"] is True
    assert first["messages"][0]["id"] == listed["messages"][0]["id"]
    assert app.get("/api/failed", conn_id=CONN_ID, group=payments["group"], limit=0).status_code == 422
    with monkeypatch.context() as patched:  # a group's listing reads a bounded slice of the error queue
        patched.setattr(failed_views, "GROUP_SCAN_ROWS", 1)
        bounded = app.get("/api/failed", conn_id=CONN_ID, group=a_group(queues, "refunds")).json()
        page = app.get("/failed", conn_id=CONN_ID, group=bounded["group"]).text
    assert (bounded["messages"], bounded["more"], bounded["read"]) == ([], True, 1)
    assert "None in the oldest 1 failed messages" in page
    page = app.get("/failed", conn_id=CONN_ID, group=payments["group"])
    assert page.status_code == 200 and all(f'data-id="{i}"' in page.text for i in stored)
    assert 'id="delete-group"' in page.text

    one = sorted(stored)[0]
    shown = app.get("/api/message", conn_id=CONN_ID, id=one).json()
    assert shown["id"] == one and shown["group"] == payments["group"]
    assert shown["body"] in ("p1", "p2") and shown["body_encoding"] == "utf-8"
    assert "ConnectionError: payment service unreachable" in shown["stack_trace"]
    assert "NServiceBus.ExceptionInfo.StackTrace" not in shown["headers"]
    assert table(shown["headers"]["NServiceBus.FailedQ"]) == "payments"
    page = app.get("/message", conn_id=CONN_ID, id=one)
    assert page.status_code == 200 and 'id="stack-trace"' in page.text and 'id="delete-message"' in page.text
    assert (
        'id="confirm"' in page.text
        and 'role="alertdialog"' in page.text
        and 'id="retry-message"' in page.text
    )
    assert "confirm(" not in page.text  # the frame allows no dialogs: the page asks in its own
    absent = str(uuid.uuid4())
    assert app.get("/api/message", conn_id=CONN_ID, id=absent).status_code == 404
    assert app.get("/message", conn_id=CONN_ID, id=absent).status_code == 404

    before = last_audit_id()
    done = retry(app, payments["group"], Origin="http://airflow.test")
    assert done.status_code == 200, done.text
    assert set(done.json()["done"]) == stored and done.json()["refused"] == []
    assert {m.id for m in browse(queues.queue("payments"), 10)} == stored
    refunds = a_group(queues, "refunds")
    [refund_id] = [r.id for r in failed_rows(queues.queue("error"))]
    gone = delete(app, id=refund_id)
    assert gone.status_code == 200, gone.text
    assert gone.json()["done"] == [refund_id] and queues.queue("error").count() == 0
    assert app.get("/api/failed", conn_id=CONN_ID, group=refunds).json()["messages"] == []

    entries = audit_entries(before)
    assert [(event, owner) for event, owner, _ in entries] == [
        ("sqlqueue.retry_failed", "op"),
        ("sqlqueue.delete_failed", "op"),
    ]
    assert entries[0][2] == {
        "conn_id": CONN_ID,
        "group": payments["group"],
        "method": "POST",
        "done": 2,
        "refused": 0,
    }
    assert entries[1][2] == {"conn_id": CONN_ID, "id": refund_id, "method": "POST", "done": 1}


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)  # decided before any database
def test_an_admin_deletes_a_group_and_every_role_reads_only_its_own_connections(
    app: Client, queues: Transport
) -> None:
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    stored = [
        Connection(conn_id="sqlqueue_stored_example", conn_type="sqlqueue", host="/tmp/x.db"),
        Connection(conn_id="hr_postgres_stored", conn_type="postgres", host="127.0.0.1", login="hr"),
    ]
    with create_session() as session:
        session.add_all(stored)
    try:
        pages = {}
        for role in ("VIEWER", "OP", "ADMIN"):
            app.as_role(role)
            pages[role] = app.get("/queues", conn_id=CONN_ID).text
    finally:
        with create_session() as session:
            session.query(Connection).filter(
                Connection.conn_id.in_(["sqlqueue_stored_example", "hr_postgres_stored"])
            ).delete()
    assert "sqlqueue_stored_example" not in pages["VIEWER"]
    for role in ("OP", "ADMIN"):
        assert re.search(r'<option value="sqlqueue_stored_example"', pages[role]), role
        assert re.search(rf'<option value="{CONN_ID}" selected>', pages[role]), role
        assert "hr_postgres_stored" not in pages[role], role

    app.as_role("ADMIN")
    group = a_group(queues, "payments")
    before = last_audit_id()
    gone = delete(app, group=group)
    assert gone.status_code == 200 and len(gone.json()["done"]) == 2
    assert queues.queue("error").count() == 1 and queues.queue("payments").count() == 0
    [(event, owner, extra)] = audit_entries(before)
    assert (event, owner, extra["group"], extra["done"]) == ("sqlqueue.delete_failed", "admin", group, 2)


@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_home_counts_the_failed_messages_of_each_connection_the_user_may_read(
    app: Client, queues: Transport, target: EngineTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow's Home shows home.js, which reads /api/home: per stored sqlqueue connection the user may
    read, the error queue's count (exact, as the page's summary) or why it could not be read."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    from airflow_provider_sqlqueue.plugins import SqlQueuePlugin

    reachable, broken = "sqlqueue_home_stored", "sqlqueue_home_broken"
    missing = tmp_path / "no such folder" / "queues.db"
    stored = [
        Connection.from_json(json.dumps(target.airflow_connection()), conn_id=reachable),
        Connection(conn_id=broken, conn_type="sqlqueue", host=str(missing), extra='{"engine": "sqlite"}'),
    ]
    monkeypatch.setenv("_AIRFLOW_PROCESS_CONTEXT", "server")  # as the API server: stored ones are found
    with create_session() as session:
        session.add_all(stored)
    try:
        answers = {}
        for role in ("OP", "VIEWER", None):
            app.as_role(role)
            answers[role] = app.get("/api/home")
    finally:
        with create_session() as session:
            session.query(Connection).filter(Connection.conn_id.in_([reachable, broken])).delete()
    shown = {row["conn_id"]: row for row in answers["OP"].json()["connections"]}
    failed = queues.queue("error").count()
    assert failed == 3 and shown[reachable]["failed"] == failed and shown[reachable]["failed_exact"] is True
    assert shown[reachable]["error"] is None and table(shown[reachable]["error_queue"]) == "error"
    assert shown[broken]["failed"] is None and shown[broken]["error"], shown[broken]
    assert answers["OP"].json()["failed"] >= failed and answers["OP"].json()["not_shown"] == 0
    assert answers["VIEWER"].json()["connections"] == []  # a viewer reads no connection
    assert answers[None].status_code == 401

    bundle = app.get("/home.js")
    assert bundle.status_code == 200 and bundle.headers["content-type"].startswith("text/javascript")
    assert 'new URL("api/home", import.meta.url)' in bundle.text
    from airflow.plugins_manager import AirflowPlugin

    if not hasattr(AirflowPlugin, "react_apps"):  # Airflow 3.0: no React apps, so Home shows none
        assert "react_apps" not in vars(SqlQueuePlugin)
        return
    [entry] = SqlQueuePlugin.react_apps
    assert entry["destination"] == "dashboard" and entry["bundle_url"].endswith("/home.js")
    assert f'globalThis["{entry["name"]}"] = ' in bundle.text


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
@pytest.mark.parametrize("conn_type", ["postgres", "sqlite"])
def test_a_connection_of_another_type_is_not_served_even_to_an_admin_and_is_never_opened(
    app: Client, conn_type: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``postgres`` connection to a port this test listens on (nothing may connect) or a ``sqlite`` one
    naming a file (nothing may create it): both answer as an unknown id does, for every role."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.setblocking(False)
    database = tmp_path / "hr.db"
    if conn_type == "postgres":
        connection = {
            "conn_type": "postgres",
            "host": "127.0.0.1",
            "port": listener.getsockname()[1],
            "login": "postgres",
            "password": "superuser-secret",
            "schema": "hr",
        }
    else:
        connection = {"conn_type": "sqlite", "host": str(database)}
    monkeypatch.setenv("AIRFLOW_CONN_HR_DATABASE", json.dumps(connection))
    try:
        for role in ("ADMIN", "OP", "VIEWER"):
            app.as_role(role)
            other = app.get("/api/queues", conn_id="hr_database")
            unknown = app.get("/api/queues", conn_id="nope")
            assert (other.status_code, other.content) == (unknown.status_code, unknown.content) and (
                other.status_code == 404
            ), role
            page = app.get("/queues", conn_id="hr_database")
            assert page.status_code == 404 and 'id="queues"' not in page.text, role
            assert "superuser-secret" not in page.text and "127.0.0.1" not in page.text, role
            refused = delete(app, "hr_database", group="0" * 12)
            assert (refused.status_code, refused.content) == (unknown.status_code, unknown.content), role
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
        assert not database.exists()
    finally:
        listener.close()


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)  # decided before any database
def test_a_write_must_be_json_from_this_origin_and_nobody_gets_in_without_a_session(
    app: Client, queues: Transport
) -> None:
    app.as_role("ADMIN")
    group = app.get("/api/queues", conn_id=CONN_ID).json()["failed_groups"][0]["group"]
    message_id = next(r.id for r in failed_rows(queues.queue("error")))
    for path, body in (("/api/retry", {"group": group}), ("/api/delete", {"id": message_id})):
        cross = app.post(path, {"conn_id": CONN_ID, **body}, Origin="http://evil.example")
        assert cross.status_code == 403 and "cross-origin" in cross.json()["detail"], path
        form = app.http.post(path, data={"conn_id": CONN_ID, **body})
        assert form.status_code in (415, 422), path
    assert retry(app, "not-a-group").status_code == 422
    assert delete(app, group=group, id=message_id).status_code == 422
    assert delete(app).status_code == 422
    assert delete(app, id="not-an-id").status_code == 422
    assert queues.queue("error").count() == 3

    app.as_role(None)
    page = app.get("/queues")  # the login page in the whole window, not in the UI's frame
    assert page.status_code == 401 and 'id="log-in"' in page.text and "/auth/login" in page.text
    assert "top.document" in page.text and 'id="queues"' not in page.text
    assert app.get("/message", conn_id=CONN_ID, id=message_id).status_code == 401
    assert app.get("/api/queues", conn_id=CONN_ID).status_code == 401
    assert retry(app, group).status_code == 401
    assert delete(app, group=group).status_code == 401
    assert queues.queue("error").count() == 3


def test_the_user_comes_from_a_bearer_token_else_from_the_session_cookie(app: Client) -> None:
    """As Airflow's own routes take the user: a bearer token first, else the ``_token`` cookie the login set
    (Airflow 3.1 and later read both in ``get_user``; on 3.0, whose ``get_user`` takes a token only, the app
    reads the cookie itself), with Airflow's answers: 401 with neither or an expired one, 403 for a token
    that is not valid, the bearer token deciding when both are there."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    def token(role: str) -> str:
        return str(app.manager.generate_jwt(SimpleAuthManagerUser(username=role.lower(), role=role)))

    app.as_role(None)
    assert app.get("/api/queues", conn_id=CONN_ID).status_code == 401
    app.http.cookies.set(COOKIE_NAME_JWT_TOKEN, token("OP"))
    try:
        assert app.get("/api/queues", conn_id=CONN_ID).status_code == 200
        page = app.get("/queues", conn_id=CONN_ID)
        assert page.status_code == 200 and 'id="log-in"' not in page.text
        app.http.headers["Authorization"] = "Bearer not-a-token"
        assert app.get("/api/queues", conn_id=CONN_ID).status_code == 403  # the bearer token decides
        app.as_role(None)
        app.http.cookies.set(COOKIE_NAME_JWT_TOKEN, token("OP") + "x")
        assert app.get("/api/queues", conn_id=CONN_ID).status_code == 403
    finally:
        app.http.cookies.clear()


def test_the_pages_escape_what_they_show_and_preview_bodies_safely(app: Client, queues: Transport) -> None:
    error = queues.queue("error")
    hostile_id = str(
        error.send(
            HOSTILE + " body",
            headers={
                "NServiceBus.FailedQ": "refunds",
                "NServiceBus.ExceptionInfo.ExceptionType": "<b>Bold</b>",
                "NServiceBus.ExceptionInfo.Message": HOSTILE,
                "NServiceBus.ExceptionInfo.StackTrace": "Traceback " + HOSTILE,
                "X-Hostile<img src=x onerror=alert(1)>": HOSTILE,
            },
        )
    )
    binary_id = str(error.send(b"\xff\xfe<script>" * 1000, headers={"NServiceBus.FailedQ": "refunds"}))
    app.as_role("OP")
    overview = app.get("/queues", conn_id=CONN_ID).text
    hostile_group = a_group_of(queues, hostile_id)
    group_page = app.get("/failed", conn_id=CONN_ID, group=hostile_group).text
    message_page = app.get("/message", conn_id=CONN_ID, id=hostile_id).text
    binary_page = app.get("/message", conn_id=CONN_ID, id=binary_id).text
    for page in (overview, group_page, message_page, binary_page):
        assert "<script>alert(" not in page and "<img src=x" not in page and "<b>Bold" not in page
        assert page.count("<script>") == page.count("</script>")  # only the page's own scripts
    escaped = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; more"
    assert escaped in overview and escaped in group_page
    assert message_page.count(escaped) >= 4  # message header, stack trace, custom header, body
    assert "X-Hostile&lt;img src=x onerror=alert(1)&gt;" in message_page

    binary = app.get("/api/message", conn_id=CONN_ID, id=binary_id).json()
    assert binary["body_encoding"] == "hex" and binary["body_bytes"] == 10_000 and binary["body_truncated"]
    assert binary["body"] == (b"\xff\xfe<script>" * 1000)[:4096].hex()
    assert "10,000 bytes, not UTF-8" in binary_page and "<script>" not in binary["body"]


def a_group_of(transport: Transport, message_id: str) -> str:
    return next(r.group_key for r in failed_rows(transport.queue("error")) if r.id == message_id)


@pytest.mark.parametrize(
    ("body", "limit", "preview"),
    [
        (b"hello", 16, ("hello", "utf-8", 5, False)),
        ("é".encode() * 3, 3, ("é", "utf-8", 6, True)),  # a character cut at the limit is left out
        (b"\xff\x00abc", 2, ("ff00", "hex", 5, True)),
        (b"", 4, ("", "utf-8", 0, False)),
    ],
)
def test_a_body_preview_is_text_only_for_utf8_and_never_longer_than_its_limit(
    body: bytes, limit: int, preview: tuple[str, str, int, bool]
) -> None:
    shown = preview_body(body, limit)
    assert (shown.text, shown.encoding, shown.size, shown.truncated) == preview
    with pytest.raises(ConfigurationError):
        preview_body(body, -1)


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_no_password_reaches_a_page_or_an_error(app: Client, target: EngineTarget, monkeypatch) -> None:
    app.as_role("OP")
    connection = target.airflow_connection()
    password = str(connection["password"])
    page = app.get("/queues", conn_id=CONN_ID).text
    seen = app.get("/api/queues", conn_id=CONN_ID).text
    wrong = dict(connection, port=1, password=password)
    monkeypatch.setenv("AIRFLOW_CONN_SQLQUEUE_BROKEN", json.dumps(wrong))
    broken = app.get("/queues", conn_id="sqlqueue_broken").text
    assert 'id="error"' in broken
    failed = app.get("/api/failed", conn_id="sqlqueue_broken", group="0" * 12)
    assert failed.status_code == 502
    for text in (page, seen, broken, failed.text):
        assert password not in text


def test_the_page_lists_the_spark_data_sources_staged_runs(app: Client, queues: Transport, target) -> None:
    """A batch read that staged the 3 orders and was never acknowledged: the depth no longer counts them,
    the page and /api/queues list the run with its messages; once released, the section is gone."""
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    from airflow_provider_sqlqueue.spark.config import split_credentials
    from airflow_provider_sqlqueue.spark.source.batch import SqlQueueBatchReader
    from airflow_provider_sqlqueue.spark.source.options import SourceOptions
    from airflow_provider_sqlqueue.spark.staged_runs import end_staged_run
    from airflow_provider_sqlqueue.spark.tables import create_bridge_tables

    create_bridge_tables(queues, "orders")
    url, password = split_credentials(target.url)
    options = {"url": url, "queue": "orders", "runId": "nightly-<1>"}
    options |= {"password": password} if password else {}
    options |= {"defaultSchema": target.schema} if target.schema else {}
    assert SqlQueueBatchReader(SourceOptions.parse(options)).partitions()
    assert queues.queue("orders").count() == 0

    app.as_role("OP")
    page = app.get("/queues", conn_id=CONN_ID).text
    assert 'id="staged"' in page and 'data-run="nightly-&lt;1&gt;"' in page, page
    row = page.split('data-run="nightly-&lt;1&gt;"')[1].split("</tr>")[0]
    assert "batch read" in row and ">read<" in row and ">3<" in row
    [run] = app.get("/api/queues", conn_id=CONN_ID).json()["staged_runs"]
    assert (run["run_id"], run["kind"], run["messages"]) == ("nightly-<1>", "batch read", 3)
    assert run["queue"] == queues.queue("orders").name

    assert end_staged_run(queues, "orders", "nightly-<1>", "release") == 3
    assert 'id="staged"' not in app.get("/queues", conn_id=CONN_ID).text
    assert app.get("/api/queues", conn_id=CONN_ID).json()["staged_runs"] == []


@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_the_summary_the_group_totals_pages_and_a_selection_come_from_one_path(
    app: Client, queues: Transport, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page and its /api twin are one read: the summary's failed total is the error queue's exact
    count (all its rows were grouped), the archive is listed as a table, not a queue; a group's page has
    its queue and exception as title, its total and pages; a selection of ids is retried as a group is;
    a malformed address is answered in a sentence, JSON for /api and a page otherwise."""
    app.as_role("OP")
    from airflow_provider_sqlqueue.spark.tables import create_bridge_tables

    fail_all(queues, "payments", ["p3", "p4", "p5"], ConnectionError("payment service unreachable"))
    create_bridge_tables(queues, "orders")
    seen = app.get("/api/queues", conn_id=CONN_ID).json()
    kinds = {table(row["queue"]).split(".")[-1]: row["kind"] for row in seen["queues"]}
    assert kinds["orders"] == "queue" and kinds["error"] == "error queue"
    assert kinds["sqlqueue_spark_staging"] == "Spark bridge: staging", kinds
    summary = seen["summary"]
    assert (summary["failed"], summary["failed_exact"]) == (6, True)
    assert [(table(q["queue"]), q["messages"]) for q in summary["deepest"]] == [("orders", 3)]
    assert table(summary["oldest_queue"]) == "orders"
    from airflow_provider_sqlqueue.plugins import depth_history

    monkeypatch.setattr(depth_history, "MIN_GAP_SECONDS", 0)  # every read a sample
    orders = next(row["queue"] for row in seen["queues"] if table(row["queue"]) == "orders")
    with queues.queue("orders").receive(3) as batch:
        assert len(batch.messages) == 3
    drained = app.get("/api/queues", conn_id=CONN_ID).json()
    assert [sample["messages"] for sample in drained["history"][orders]][-2:] == [3, 0]
    page = app.get("/queues", conn_id=CONN_ID).text
    chart = page.split(f'data-queue="{orders}">\n<figcaption>')[1].split("</figcaption>")[0]
    assert "→ 0 messages" in chart, chart
    summary_html = page.split('id="summary-failed"')[1].split("</div>\n  <div")[0]
    assert ">6<" in summary_html and 'id="internal"' in page
    assert 'data-queue="sqlqueue_spark_staging' not in page and "sqlqueue_spark_staging" in page

    payments = next(g for g in seen["failed_groups"] if table(g["failed_queue"]) == "payments")
    first = app.get("/api/failed", conn_id=CONN_ID, group=payments["group"], limit=2).json()
    last = app.get("/api/failed", conn_id=CONN_ID, group=payments["group"], limit=2, page=3).json()
    assert (first["total"], first["total_exact"], first["more"], len(first["messages"])) == (5, True, True, 2)
    assert (last["page"], last["more"], len(last["messages"])) == (3, False, 1)
    assert table(first["failed_queue"]) == "payments" and first["exception_type"] == "ConnectionError"
    shown = app.get("/failed", conn_id=CONN_ID, group=payments["group"], limit=2, page=2).text
    assert "Failed in" in shown and "ConnectionError</h1>" in shown and 'id="total">5<' in shown
    assert (
        'aria-current="page">2<' in shown and 'id="retry-group"' in shown and 'id="retry-selected"' in shown
    )

    picked = [m["id"] for m in first["messages"]]
    done = app.post("/api/retry", {"conn_id": CONN_ID, "ids": picked}, Origin="http://airflow.test")
    assert done.status_code == 200 and sorted(done.json()["done"]) == sorted(picked), done.text
    again = app.post("/api/retry", {"conn_id": CONN_ID, "ids": picked}, Origin="http://airflow.test")
    assert again.status_code == 200 and again.json()["done"] == []  # a stale view: nothing left to retry
    assert app.get("/api/failed", conn_id=CONN_ID, group=payments["group"]).json()["total"] == 3

    short = app.get("/failed", conn_id=CONN_ID, group="abc")
    assert short.status_code == 422 and "12 hexadecimal digits" in short.text and '"detail"' not in short.text
    api = app.get("/api/failed", conn_id=CONN_ID, group="abc")
    assert api.status_code == 422 and "12 hexadecimal digits" in api.json()["detail"]


def test_the_page_draws_the_stored_depth_history_and_falls_back_to_its_own_reads_without_it(
    app: Client, queues: Transport
) -> None:
    """Without the depth history table the page draws what its own reads saw, and says so; with it, the
    samples the triggers and pumps stored (here written as a sampler writes them) of the last three hours,
    read with a SELECT alone, the older ones left out; the error queue's from the Failed they carry."""
    import time

    from airflow_provider_sqlqueue.transport.depth_samples import (
        DepthSample,
        DepthSampleTable,
        depth_samples_address,
        minute_of,
    )

    app.as_role("OP")
    before = app.get("/api/queues", conn_id=CONN_ID).json()
    orders = next(row["queue"] for row in before["queues"] if table(row["queue"]) == "orders")
    assert before["history_source"] == "memory" and before["history"][orders][-1]["messages"] == 3
    assert 'id="history-note" data-source="memory"' in app.get("/queues", conn_id=CONN_ID).text

    history = DepthSampleTable(queues, depth_samples_address(queues, queues.queue("orders").address))
    history.create()
    now = minute_of(time.time())
    for ago, messages in ((200, 50), (3, 9), (2, 6), (1, 3)):  # the first is older than the page's window
        history.record(DepthSample("orders", now - ago, messages, True, 2))
    seen = app.get("/api/queues", conn_id=CONN_ID).json()
    assert seen["history_source"] == "table" and seen["history_retention_hours"] == 24
    assert [(p["messages"], p["failed"]) for p in seen["history"][orders]] == [(9, 2), (6, 2), (3, 2)]
    error = next(row["queue"] for row in seen["queues"] if row["kind"] == "error queue")
    # nothing sampled the error queue itself: its series is the Failed the other queues' samples carry
    assert [(p["messages"], p["exact"]) for p in seen["history"][error]] == [(2, False)] * 3
    page = app.get("/queues", conn_id=CONN_ID).text
    assert 'id="history-note" data-source="table"' in page and "kept 24 hours" in page
    chart = page.split(f'data-queue="{orders}">\n<figcaption>')[1].split("</figcaption>")[0]
    assert "9 → 3 messages" in chart and "(3 samples)" in chart, chart


def test_the_depth_history_is_bounded_per_queue_and_per_connection() -> None:
    from datetime import datetime, timedelta, timezone

    from airflow_provider_sqlqueue.plugins.depth_history import DepthHistory, sparkline

    history = DepthHistory(samples=3, queues=2, connections=2)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    for n in range(5):
        history.record("a", start + timedelta(seconds=10 * n), {"q1": (50 - 10 * n, True), "q2": (n, False)})
    history.record("a", start + timedelta(seconds=40.5), {"q1": (7, True)})  # under a second: replaces
    assert [s["messages"] for s in history.series("a")["q1"]] == [30, 20, 7]
    history.record("a", start, {"q3": (1, True)})
    assert set(history.series("a")) == {"q1", "q3"}  # the queue read least recently goes first
    history.record("b", start, {"q": (1, True)})
    history.record("c", start, {"q": (1, True)})
    assert history.series("a") == {} and set(history.series("c")) == {"q"}
    line = sparkline(
        history_points := [
            {"at": "2026-01-01T00:00:00Z", "messages": 4},
            {"at": "2026-01-01T00:01:00Z", "messages": 0},
        ]
    )
    assert (line["first"], line["last"], line["high"], line["samples"]) == (4, 0, 4, len(history_points))
    assert line["points"].startswith("2.0,2.0") and line["points"].endswith("118.0,26.0")


def test_the_queues_table_sorts_by_a_column_both_ways_on_the_page_and_in_its_api(
    app: Client, queues: Transport
) -> None:
    """orders holds 3, payments 2 (sent after orders'), refunds none: by depth, by oldest message (a queue
    with none last either way) and by name; the page's header links say and reverse the order."""
    queues.queue("payments").send_batch(["p6", "p7"])
    app.as_role("OP")

    def listed(**sort: str) -> list[str]:
        rows = app.get("/api/queues", conn_id=CONN_ID, **sort).json()["queues"]
        return [table(row["queue"]) for row in rows if row["kind"] == "queue"]

    assert listed(sort="messages") == ["orders", "payments", "refunds"]
    assert listed(sort="messages", order="asc") == ["refunds", "payments", "orders"]
    assert listed(sort="oldest") == ["orders", "payments", "refunds"]
    assert listed(sort="oldest", order="asc") == ["payments", "orders", "refunds"]
    assert listed(sort="queue", order="desc") == ["refunds", "payments", "orders"]

    page = app.get("/queues", conn_id=CONN_ID, sort="messages").text
    header = page.split('<table id="queues"')[1].split("</thead>")[0]
    assert 'aria-sort="descending"><a class="sort" href="?conn_id=' in header, header
    assert f"?conn_id={CONN_ID}&amp;sort=messages&amp;order=asc" in header
    assert f"?conn_id={CONN_ID}&amp;sort=oldest&amp;order=desc" in header
    shown = re.findall(r'<tr data-queue="([^"]+)" data-kind="queue">', page)
    assert [table(name) for name in shown] == ["orders", "payments", "refunds"]
    wrong = app.get("/queues", conn_id=CONN_ID, sort="color")
    assert wrong.status_code == 422 and "sort is one of queue, messages, oldest" in wrong.text


def test_thresholds_come_from_the_settings_and_a_bad_one_is_named_not_guessed() -> None:
    from airflow_provider_sqlqueue.plugins.thresholds import DEFAULTS, thresholds_of

    unset = thresholds_of(dict.fromkeys(DEFAULTS))
    assert (unset.age_warning_seconds, unset.depth_alert, unset.problem) == (300, 10_000, None)
    assert [unset.age_level(s) for s in (None, 299, 300, 3599, 3600)] == [
        None, None, "warning", "warning", "alert",
    ]  # fmt: skip
    off = thresholds_of({"depth_warning": "0", "depth_alert": " 5 "})
    assert [off.depth_level(n) for n in (4, 5, 10**9)] == [None, "alert", "alert"] and off.problem is None
    bad = thresholds_of({"depth_warning": "many", "age_alert_seconds": "60", "age_warning_seconds": "-1"})
    assert (bad.depth_warning, bad.age_warning_seconds, bad.age_alert_seconds) == (1000, 300, 3600)
    assert "[sqlqueue] depth_warning is 'many', not a whole number from 0" in (bad.problem or "")
    assert "[sqlqueue] age_warning_seconds is '-1'" in (bad.problem or "")
    assert "age_alert_seconds (60) is below age_warning_seconds (300)" in (bad.problem or ""), bad.problem


def test_airflow_config_names_every_setting_of_the_provider_with_its_default(tmp_path: Path) -> None:
    """Every [sqlqueue] setting the provider reads is declared with it: `airflow config list` shows each
    with the default the code falls back to, and the environment overrides one."""
    from airflow_provider_sqlqueue.plugins.depth_history import REFRESH_SECONDS
    from airflow_provider_sqlqueue.plugins.thresholds import DEFAULTS
    from airflow_provider_sqlqueue.transport.depth_samples import RETENTION
    from airflow_provider_sqlqueue.transport.overview import EXACT_BELOW

    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__SQLQUEUE__DEPTH_ALERT": "50000"}
    airflow = str(Path(sys.executable).with_name("airflow"))
    listing = [airflow, "config", "list", "--section", "sqlqueue"]
    usage = subprocess.run([*listing, "--help"], capture_output=True, text=True, env=env, timeout=300)
    if "--show-values" in usage.stdout:  # Airflow 3.1 hides the values unless asked; 3.0 always shows them
        listing.append("--show-values")
    listed = subprocess.run(listing, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert listed.returncode == 0, listed.stderr
    shown = dict(re.findall(r"^(\w+) = (\S+)$", listed.stdout, flags=re.M))
    expected = {
        "allow_file_options_in_extra": "False",
        "page_refresh_seconds": str(REFRESH_SECONDS),
        "exact_count_below": str(EXACT_BELOW),
        "depth_history_retention_hours": str(int(RETENTION.total_seconds() // 3600)),
        **{name: str(value) for name, value in DEFAULTS.items()},
        "depth_alert": "50000",
    }
    assert shown == expected, listed.stdout
    read = airflow_provider_sqlqueue_settings_read()
    assert read <= set(shown), f"read but not declared: {read - set(shown)}"


def airflow_provider_sqlqueue_settings_read() -> set[str]:
    """The [sqlqueue] settings the package's code reads from Airflow's configuration."""
    package = Path(__file__).resolve().parents[1] / "airflow_provider_sqlqueue"
    names: set[str] = set()
    for source in package.rglob("*.py"):
        names |= set(re.findall(r'conf\.get\w*\(\s*"sqlqueue",\s*"(\w+)"', source.read_text()))
    thresholds = (package / "plugins" / "thresholds.py").read_text()
    if 'conf.get("sqlqueue", name' in thresholds:
        from airflow_provider_sqlqueue.plugins.thresholds import DEFAULTS

        names |= set(DEFAULTS)
    return names


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)  # decided before any database
def test_the_page_colours_queues_by_the_configured_age_and_depth_and_says_the_limits(
    app: Client, queues: Transport, monkeypatch: pytest.MonkeyPatch
) -> None:
    """orders holds 3 messages: past a depth alert of 3 it is red on the summary and in the table, past a
    warning of 2 only yellow; its oldest message, once a second old, is past an age warning of 1 s; the
    error queue, holding failed messages, is red whatever the settings; the line below the summary names
    the limits in force, and a setting that is not a number is named there while the defaults apply."""
    app.as_role("OP")
    for name, value in {"DEPTH_WARNING": "2", "DEPTH_ALERT": "3", "AGE_WARNING_SECONDS": "1"}.items():
        monkeypatch.setenv(f"AIRFLOW__SQLQUEUE__{name}", value)
    monkeypatch.setenv("AIRFLOW__SQLQUEUE__AGE_ALERT_SECONDS", "0")
    deadline = time.monotonic() + 30
    while True:  # the oldest message's age is the database's clock against its TimeSent
        seen = app.get("/api/queues", conn_id=CONN_ID).json()
        rows = {table(row["queue"]): row for row in seen["queues"]}
        if (rows["orders"]["oldest_age_seconds"] or 0) >= 1 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert (rows["orders"]["depth_level"], rows["orders"]["age_level"]) == ("alert", "warning"), rows
    assert rows["error"]["depth_level"] == "alert" and rows["error"]["age_level"] is None
    assert seen["summary"]["oldest_level"] == "warning"
    assert [q["level"] for q in seen["summary"]["deepest"]] == ["alert"]
    assert seen["thresholds"] == {
        "age_warning_seconds": 1, "age_alert_seconds": 0, "depth_warning": 2, "depth_alert": 3,
        "problem": None,
    }  # fmt: skip
    page = app.get("/queues", conn_id=CONN_ID).text
    orders_row = page.split('data-kind="queue"')[1].split("</tr>")[0]
    assert 'class="n depth bad" data-label="Messages" data-level="alert"' in orders_row, orders_row
    assert 'class="n age warn" data-label="Oldest message" data-level="warning"' in orders_row, orders_row
    assert (
        re.search(r'class="tile bad" id="summary-deepest"', page)
        and 'class="tile warn" id="summary-oldest"' in page
    )
    limits = page.split('id="thresholds">')[1].split("</p>")[0]
    assert limits.startswith(
        "Red: failed messages, or a queue of 3 messages or more; yellow: a message waiting 1s or more, or a "
        "queue of 2 messages or more."
    ), limits

    monkeypatch.setenv("AIRFLOW__SQLQUEUE__DEPTH_ALERT", "4")
    rows = {table(r["queue"]): r for r in app.get("/api/queues", conn_id=CONN_ID).json()["queues"]}
    assert rows["orders"]["depth_level"] == "warning"

    monkeypatch.setenv("AIRFLOW__SQLQUEUE__DEPTH_ALERT", "lots")
    page = app.get("/queues", conn_id=CONN_ID).text
    problem = page.split('id="thresholds-problem">')[1].split("</p>")[0]
    assert (
        problem
        == "[sqlqueue] depth_alert is &#39;lots&#39;, not a whole number from 0: the page uses the defaults "
        "for it."
    ), problem
    assert 'data-level="alert"' not in page.split('data-kind="queue"')[1].split("</tr>")[0]  # 3 < 10,000
