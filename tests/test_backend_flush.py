"""PostgreSQL connections write back their own evicted pages as they go (``backend_flush_after``, set in
``dialects/postgres_session.py``): a deep drain then leaves no pile of unwritten page cache for a
checkpoint's fsync to flush while commits wait (docs/dba-maintenance.md). A value anyone else chose is
kept."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from conftest import EngineTarget, odbc_target
from postgres_plugin import PostgresServer
from sqlalchemy.engine import make_url

from airflow_provider_sqlqueue.dialects.postgres_session import BACKEND_FLUSH_AFTER
from airflow_provider_sqlqueue.transport import Transport, open_transport

postgres_only = pytest.mark.parametrize("target", ["postgresql"], indirect=True)


def flush_after(transport: Transport) -> str:
    with transport.connection() as connection:
        cursor = connection.cursor()
        cursor.execute("SHOW backend_flush_after")
        value = str(cursor.fetchone()[0])
        connection.rollback()
    return value


@postgres_only
def test_a_new_connection_writes_back_its_evictions(transport: Transport) -> None:
    assert flush_after(transport) == BACKEND_FLUSH_AFTER


@postgres_only
def test_the_setting_outlives_a_rolled_back_receive(transport: Transport) -> None:
    queue = transport.queue("orders")
    queue.create()
    queue.send(b"kept")
    with pytest.raises(RuntimeError), queue.receive(1):
        raise RuntimeError("handler failed")
    assert flush_after(transport) == BACKEND_FLUSH_AFTER
    with queue.receive(1) as batch:
        assert [message.body for message in batch] == [b"kept"]


@postgres_only
def test_a_value_given_in_the_url_is_kept(target: EngineTarget) -> None:
    url = make_url(target.url).update_query_dict({"options": "-c backend_flush_after=0"})
    with open_transport(url, default_schema=target.schema) as transport:
        assert flush_after(transport) == "0"


@postgres_only
def test_a_value_set_for_the_role_is_kept(target: EngineTarget, postgres_server: PostgresServer) -> None:
    role = f"flush_{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    postgres_server.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
    try:
        postgres_server.execute(f"ALTER ROLE {role} SET backend_flush_after = '64kB'")
        url = make_url(target.url).set(username=role, password=password)
        with open_transport(url) as transport:
            assert flush_after(transport) == "64kB"
    finally:
        postgres_server.execute(f"DROP ROLE {role}")


@pytest.fixture
def odbc_postgres(request: pytest.FixtureRequest, tmp_path) -> Iterator[EngineTarget]:
    yield from odbc_target(request, "postgresql", tmp_path)


def test_psqlodbc_connections_write_back_their_evictions_too(odbc_postgres: EngineTarget) -> None:
    with odbc_postgres.open() as transport:
        assert flush_after(transport) == BACKEND_FLUSH_AFTER


@postgres_only
def test_a_server_that_refuses_the_setting_still_serves_queues(
    target: EngineTarget, postgres_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A role denied ``pg_settings`` (as on a server without it): the statement fails, the session stays
    at the server's value, a warning says so, and queues work on that connection."""
    import airflow_provider_sqlqueue.dialects.postgres_session as session

    role = f"flush_{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    postgres_server.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
    postgres_server.execute(f"CREATE DATABASE {role} OWNER {role}")
    try:
        denied = make_url(target.url).set(database=role)
        with psycopg.connect(
            denied.set(drivername="postgresql").render_as_string(False), autocommit=True
        ) as c:
            c.execute("REVOKE SELECT ON pg_catalog.pg_settings FROM PUBLIC")
        session._refusal_logged = False
        url = denied.set(username=role, password=password)
        with caplog.at_level(logging.WARNING), open_transport(url) as transport:
            assert flush_after(transport) == "0"
            queue = transport.queue("orders")
            queue.create()
            queue.send(b"served")
            with queue.receive(1) as batch:
                assert [message.body for message in batch] == [b"served"]
        assert "backend_flush_after not set" in caplog.text
        assert "permission denied" in caplog.text
    finally:
        postgres_server.execute(f"DROP DATABASE {role} WITH (FORCE)")
        postgres_server.execute(f"DROP ROLE {role}")
