"""The Queues page serves a connection under one spelling of its id, the one the auth manager is asked about
(security finding: "The Queues page finds an environment-variable connection in any letter case but
authorises the id as typed").

Airflow finds ``AIRFLOW_CONN_SECRET_ENV`` for ``secret_env``, ``SECRET_ENV`` or ``Secret_Env`` alike, and an
auth manager with rules per connection id answers for the spelling it is asked about. The page asked about
the id as typed, so ``conn_id=SECRET_ENV`` showed a connection that ``secret_env`` (and Airflow's own
``/api/v2/connections/SECRET_ENV``, which serves stored connections only) refused. The auth manager here is
Airflow's simple one with a rule per connection id on top, recording every id it is asked about.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
from fastapi.testclient import TestClient
from test_airflow_dags import airflow_db  # noqa: F401  (a fixture)
from test_queues_page import Client

from airflow_provider_sqlqueue.plugins.access import canonical_conn_id
from airflow_provider_sqlqueue.plugins.queues_app import NOT_SERVED
from airflow_provider_sqlqueue.transport import open_transport

SECRET = "secret_env"  # the rule refuses this id to everybody
OPEN = "open_env"  # and leaves this one to the roles
STORED = "Stored_Mixed_Case"  # a connection in the metadata database, its id in mixed case


class PerConnectionAuthManager(SimpleAuthManager):
    """Airflow's simple auth manager with one rule per connection id, as an auth manager that grants
    connections one by one has: ``secret_env`` is refused whatever the role."""

    asked: list[str | None] = []

    def is_authorized_connection(self, *, method: Any, user: Any, details: Any = None) -> bool:
        conn_id = details.conn_id if details is not None else None
        type(self).asked.append(conn_id)
        if conn_id == SECRET:
            return False
        return super().is_authorized_connection(method=method, user=user, details=details)


@pytest.fixture
def page(airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:  # noqa: F811
    """The page's app in-process with :class:`PerConnectionAuthManager`; ``secret_env`` and ``open_env``
    from the environment and ``Stored_Mixed_Case`` from the metadata database, all on one provisioned
    SQLite file."""
    from airflow.api_fastapi import app as airflow_app
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    from airflow_provider_sqlqueue.plugins import queues_app

    database = tmp_path / "queues.db"
    with open_transport(f"sqlite:///{database}") as transport:
        transport.queue("orders").create()
        transport.queue("orders").send("hello")
    connection = {"conn_type": "sqlqueue", "host": str(database), "extra": {"engine": "sqlite"}}
    for conn_id in (SECRET, OPEN):
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))
    monkeypatch.setenv("_AIRFLOW_PROCESS_CONTEXT", "server")  # as the API server: stored ones are found
    monkeypatch.setenv("AIRFLOW__CORE__AUTH_MANAGER", f"{__name__}.{PerConnectionAuthManager.__name__}")
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", secrets.token_urlsafe(64))
    monkeypatch.setattr(airflow_app._AuthManagerState, "instance", None)  # restored after the test
    monkeypatch.setattr(PerConnectionAuthManager, "asked", [])
    manager = create_auth_manager()
    assert isinstance(manager, PerConnectionAuthManager)
    with create_session() as session:
        session.add(Connection(conn_id=STORED, conn_type="sqlqueue", host=str(database)))
    try:
        with TestClient(queues_app.create_app(), base_url="http://airflow.test") as client:
            app = Client(client, manager)
            app.as_role("ADMIN")
            yield app
    finally:
        with create_session() as session:
            session.query(Connection).filter(Connection.conn_id == STORED).delete()


def served(app: Client, conn_id: str) -> bool:
    """Whether the page shows ``conn_id``'s queues (else it must answer as for an unknown id)."""
    answer = app.get("/api/queues", conn_id=conn_id)
    if answer.status_code == 200:
        assert answer.json()["conn_id"] == conn_id
        return True
    assert (answer.status_code, answer.json()) == (404, {"detail": NOT_SERVED}), answer.text
    return False


def test_a_connection_refused_under_its_id_is_refused_in_every_letter_case(page: Client) -> None:
    assert [served(page, conn_id) for conn_id in (SECRET, SECRET.upper(), "Secret_Env")] == [False] * 3
    shown = page.get("/queues", conn_id=SECRET.upper())
    assert shown.status_code == 404 and 'id="queues"' not in shown.text
    retry = page.post(
        "/api/retry", {"conn_id": SECRET.upper(), "group": "0" * 12}, Origin="http://airflow.test"
    )
    assert (retry.status_code, retry.json()) == (404, {"detail": NOT_SERVED})


def test_an_environment_connection_is_served_under_its_lower_case_id_only(page: Client) -> None:
    assert served(page, OPEN)
    assert not served(page, OPEN.upper()) and not served(page, "Open_Env")
    assert served(page, STORED), "a stored id keeps its case"
    assert not served(page, STORED.lower()), "and is no other id"


def test_the_page_shows_a_connection_only_under_an_id_the_auth_manager_was_asked_about(page: Client) -> None:
    for conn_id in (SECRET, SECRET.upper(), "Secret_Env", OPEN, OPEN.upper(), STORED, STORED.upper()):
        PerConnectionAuthManager.asked.clear()
        if served(page, conn_id):
            assert conn_id in PerConnectionAuthManager.asked, conn_id
        assert set(PerConnectionAuthManager.asked) <= {canonical_conn_id(conn_id)}, conn_id


def test_the_canonical_id_is_the_lower_case_one_for_the_environment_and_the_stored_one_otherwise(
    page: Client,
) -> None:
    assert {canonical_conn_id(spelling) for spelling in (SECRET, SECRET.upper(), "sEcReT_eNv")} == {SECRET}
    assert canonical_conn_id(STORED) == STORED
    assert canonical_conn_id(STORED.lower()) is None and canonical_conn_id("nope") is None
