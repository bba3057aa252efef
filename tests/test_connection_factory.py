"""``open_transport(url, connect=factory)``: the pool asks the factory for each new connection, so a password
that changes between connections is read anew, on a real PostgreSQL role, a Babelfish login and a SQLite
file; a transport with the password fixed in its URL cannot reconnect once it changed. And the factory's
wrong answers (it raises, returns another driver's connection, or tries to say where) come out clearly.
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from pathlib import Path

import pytest
from conftest import EngineTarget, _mssql_execute
from sqlalchemy.engine import make_url

from airflow_provider_sqlqueue.transport import (
    ConfigurationError,
    SqlQueueError,
    TransientDatabaseError,
    open_transport,
)


class PasswordFile:
    """Where the current password lives (as a vault agent writes it); the factory reads it per call."""

    def __init__(self, path: Path, key: str) -> None:
        self.path = path
        self.key = key
        self.calls = 0

    def __call__(self) -> dict[str, str]:
        self.calls += 1
        return {self.key: self.path.read_text()}


def _send_and_take_one(transport, text: bytes) -> bytes:
    queue = transport.queue("rotating")
    queue.send(text)
    with queue.receive() as batch:
        return batch[0].body


@pytest.fixture
def pg_role(postgres_server, target: EngineTarget):
    role = f"qrot_{uuid.uuid4().hex[:8]}"
    postgres_server.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD 'first-{role}'")
    postgres_server.execute(f'GRANT USAGE, CREATE ON SCHEMA "{target.schema}" TO "{role}"')
    try:
        yield role
    finally:
        postgres_server.execute(f'DROP OWNED BY "{role}"')
        postgres_server.execute(f'DROP ROLE "{role}"')


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_postgres_password_that_changes_is_read_per_new_connection(
    target: EngineTarget, postgres_server, pg_role: str, tmp_path: Path
) -> None:
    url = make_url(target.url).set(username=pg_role, password=None)
    secret = PasswordFile(tmp_path / "password", "password")
    secret.path.write_text(f"first-{pg_role}")
    fixed_url = url.set(password=f"first-{pg_role}")
    with (
        open_transport(url, default_schema=target.schema, connect=secret) as rotating,
        open_transport(fixed_url, default_schema=target.schema) as fixed,
    ):
        rotating.queue("rotating").create()
        assert _send_and_take_one(rotating, b"before") == b"before"
        assert _send_and_take_one(fixed, b"fixed before") == b"fixed before"
        calls_before = secret.calls
        assert calls_before >= 1

        postgres_server.execute(f"ALTER ROLE \"{pg_role}\" PASSWORD 'second-{pg_role}'")
        secret.path.write_text(f"second-{pg_role}")
        # The server ends the role's sessions: the pooled connections of both transports are dead.
        postgres_server.execute(
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{pg_role}'"
        )
        with contextlib.suppress(TransientDatabaseError):  # the first use may meet the dead connection
            rotating.queue("rotating").count()
        assert _send_and_take_one(rotating, b"after the change") == b"after the change"
        assert secret.calls > calls_before

        with contextlib.suppress(TransientDatabaseError):
            fixed.queue("rotating").count()
        with pytest.raises(TransientDatabaseError, match="password authentication failed"):
            fixed.queue("rotating").count()

        # A disposed pool opens anew as well, through the factory with what it says now.
        postgres_server.execute(f"ALTER ROLE \"{pg_role}\" PASSWORD 'third-{pg_role}'")
        secret.path.write_text(f"third-{pg_role}")
        rotating.close()
        assert _send_and_take_one(rotating, b"after the dispose") == b"after the dispose"


@pytest.mark.slow  # a refused login to Babelfish takes seconds
@pytest.mark.parametrize("target", ["sqlserver-freetds", "sqlserver-msodbc"], indirect=True)
def test_a_babelfish_login_whose_password_changes_is_read_per_new_connection(
    target: EngineTarget, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    import pyodbc
    from sqlserver_bed import SqlServerBed

    bed = request.getfixturevalue("sqlserver_bed")
    name = f"qrot_{uuid.uuid4().hex[:8]}"
    _mssql_execute(target.url, f"CREATE LOGIN [{name}] WITH PASSWORD = 'First-{name}1'")
    try:
        _mssql_execute(target.url, f"CREATE USER [{name}] FOR LOGIN [{name}]")
        _mssql_execute(target.url, f"GRANT SELECT, INSERT, DELETE ON SCHEMA::[{target.schema}] TO [{name}]")
        with open_transport(target.url, default_schema=target.schema) as admin:
            admin.queue("rotating").create()
        runtime = SqlServerBed(bed.host, bed.port, name, f"First-{name}1", bed.database, bed.encrypt)
        fixed_odbc = runtime.odbc(target.driver or "freetds")
        secret = PasswordFile(tmp_path / "password", "PWD")
        secret.path.write_text(f"First-{name}1")
        with (
            open_transport(fixed_odbc, default_schema=target.schema, connect=secret) as rotating,
            open_transport(fixed_odbc, default_schema=target.schema) as fixed,
        ):
            assert _send_and_take_one(rotating, b"before") == b"before"
            assert _send_and_take_one(fixed, b"fixed before") == b"fixed before"
            calls_before = secret.calls

            _mssql_execute(target.url, f"ALTER LOGIN [{name}] WITH PASSWORD = 'Second-{name}2'")
            secret.path.write_text(f"Second-{name}2")
            rotating.close()
            fixed.close()
            assert _send_and_take_one(rotating, b"after the change") == b"after the change"
            assert secret.calls > calls_before
            with pytest.raises((SqlQueueError, pyodbc.Error)) as refused:
                fixed.queue("rotating").count()
            assert "login failed" in str(refused.value).lower() or "18456" in str(refused.value)
    finally:
        for statement in (f"DROP USER [{name}]", f"DROP LOGIN [{name}]"):
            with contextlib.suppress(pyodbc.Error):
                _mssql_execute(target.url, statement)


def test_a_sqlite_factory_gives_connections_or_arguments_for_the_urls_file(tmp_path: Path) -> None:
    path = tmp_path / "queues.db"
    opened: list[sqlite3.Connection] = []

    def own_connection() -> sqlite3.Connection:
        connection = sqlite3.connect(str(path), check_same_thread=False)  # default isolation: the transport's
        opened.append(connection)
        return connection

    with open_transport(f"sqlite:///{path}", connect=own_connection, pool_size=1) as transport:
        transport.queue("rotating").create()
        assert _send_and_take_one(transport, b"through the factory's connection") == (
            b"through the factory's connection"
        )
        with transport.connection() as pooled:
            assert pooled.dbapi_connection is opened[0]
            assert pooled.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
            assert pooled.execute("PRAGMA temp_store").fetchone()[0] == 2  # MEMORY: the statement journal
        transport.close()
        assert transport.queue("rotating").count() == 0
        assert len(opened) == 2  # a new connection after the dispose, from the factory again

    arguments = PasswordFile(tmp_path / "unused", "timeout")
    arguments.path.write_text("5")
    with open_transport(f"sqlite:///{path}", connect=arguments) as transport:
        assert transport.queue("rotating").count() == 0
        assert arguments.calls == 1

    other = tmp_path / "other.db"
    elsewhere = open_transport(
        f"sqlite:///{path}", connect=lambda: sqlite3.connect(str(other), check_same_thread=False)
    )
    with elsewhere, pytest.raises(ConfigurationError, match="not on the URL's file"):
        elsewhere.queue("rotating").count()


def _first_use(transport) -> None:
    """A first operation: the pool's first connection, through the factory; the transport closed after."""
    with transport:
        transport.queue("rotating").count()


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_factory_that_fails_or_answers_wrongly_is_told_so(target: EngineTarget, tmp_path: Path) -> None:
    def token_service_down() -> dict[str, str]:
        raise OSError("token endpoint unreachable")

    with pytest.raises(TransientDatabaseError, match="token_service_down raised OSError: token endpoint"):
        _first_use(open_transport(target.url, default_schema=target.schema, connect=token_service_down))

    stray = sqlite3.connect(str(tmp_path / "stray.db"))
    with pytest.raises(ConfigurationError, match=r"returned a sqlite3\.Connection.*psycopg"):
        _first_use(open_transport(target.url, default_schema=target.schema, connect=lambda: stray))
    with pytest.raises(sqlite3.ProgrammingError):  # refused, and closed rather than leaked
        stray.execute("SELECT 1")

    elsewhere = {"host": "db.example", "password": "x"}
    with pytest.raises(ConfigurationError, match="returned host, which a factory may not set"):
        _first_use(open_transport(target.url, default_schema=target.schema, connect=lambda: elsewhere))

    with pytest.raises(ConfigurationError, match="connect must be a callable"):
        open_transport(target.url, connect="not-a-callable")  # type: ignore[arg-type]
