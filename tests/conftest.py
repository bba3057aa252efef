"""The real-engine test bed: SQLite files, a throwaway PostgreSQL cluster, and SQL Server when one is named.

- PostgreSQL: a private cluster started once per test session from Debian's server binaries (or the server
  in ``SQLQUEUE_TEST_POSTGRES_DSN``). Each test gets its own schema, dropped afterwards.
- SQLite: a fresh file per test.
- SQL Server: only when ``SQLQUEUE_TEST_MSSQL`` holds an ODBC connection string; each test gets a schema.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from airflow_provider_sqlqueue.testing import PostgresCluster, find_postgres_bindir
from airflow_provider_sqlqueue.transport import Transport, open_transport

REPO = Path(__file__).resolve().parent.parent
# Airflow reads its home and settings at import: give the whole session a private one, before any test
# module imports Airflow. Subprocesses (dag.test runs) inherit it.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="sqlqueue-airflow-home-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(REPO / "dags_examples"))
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")

MSSQL_ENV = "SQLQUEUE_TEST_MSSQL"
POSTGRES_ENV = "SQLQUEUE_TEST_POSTGRES_DSN"
ENGINES = ["sqlite", "postgresql", "sqlserver"]


@dataclass
class EngineTarget:
    """Where one test's queues live: a URL plus the schema that isolates the test.

    ``engine`` is the database (sqlite, postgresql, sqlserver); ``driver`` is ``odbc`` when the test reaches
    it through pyodbc instead of its native driver.
    """

    engine: str
    url: str
    schema: str | None
    driver: str | None = None

    def open(self, **options: object) -> Transport:
        return open_transport(self.url, default_schema=self.schema, **options)  # type: ignore[arg-type]

    def airflow_connection(self, **extra: object) -> dict[str, object]:
        """This target as an Airflow connection of type ``sqlqueue`` (for ``AIRFLOW_CONN_<ID>``)."""
        if self.engine == "sqlite":
            return {
                "conn_type": "sqlqueue",
                "host": make_url(self.url).database,
                "extra": {"engine": "sqlite", **extra},
            }
        if self.engine == "postgresql":
            url = make_url(self.url)
            return {
                "conn_type": "sqlqueue",
                "host": url.host,
                "port": url.port,
                "login": url.username,
                "password": url.password,
                "schema": url.database,
                "extra": {"engine": "postgresql", "default_schema": self.schema, **extra},
            }
        return {
            "conn_type": "sqlqueue",
            "extra": {
                "engine": "sqlserver",
                "default_schema": self.schema,
                "odbc_connect": self.url,
                **extra,
            },
        }

    def airflow_env(self, conn_id: str = "sqlqueue_default", **extra: object) -> dict[str, str]:
        env = {f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(self.airflow_connection(**extra))}
        if self.engine == "sqlserver":  # the test server's odbc_connect names its ODBC driver
            env["AIRFLOW__PROVIDERS_ODBC__ALLOW_DRIVER_IN_EXTRA"] = "True"
        return env


class PostgresServer:
    """The session's PostgreSQL: a throwaway cluster, or the server named by SQLQUEUE_TEST_POSTGRES_DSN."""

    def __init__(self) -> None:
        self.cluster: PostgresCluster | None = None
        dsn = os.environ.get(POSTGRES_ENV)
        if dsn:
            self.base_url = dsn
            return
        if find_postgres_bindir() is None:
            raise RuntimeError(
                "PostgreSQL is required by the test suite: install Debian's postgresql package "
                f"or set {POSTGRES_ENV} to a server the tests may create schemas in"
            )
        self.cluster = PostgresCluster()
        self.cluster.start()
        self.base_url = self.cluster.url()

    def execute(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(
            self.base_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True
        ) as c:
            c.execute(sql)

    def query(self, sql: str) -> list[tuple]:
        import psycopg

        with psycopg.connect(self.base_url.replace("postgresql+psycopg://", "postgresql://")) as c:
            return c.execute(sql).fetchall()

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.remove()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        yield server
    finally:
        server.close()


def _mssql_execute(odbc: str, sql: str) -> None:
    import pyodbc

    with pyodbc.connect(odbc, autocommit=True) as connection:
        connection.execute(sql)


@pytest.fixture(params=ENGINES)
def target(request: pytest.FixtureRequest, tmp_path) -> Iterator[EngineTarget]:
    """Each behavioural test runs once per engine, in a namespace of its own."""
    engine = request.param
    if engine == "sqlite":
        yield EngineTarget("sqlite", f"sqlite:///{tmp_path / 'queues.db'}", None)
        return
    schema = f"t_{uuid.uuid4().hex[:12]}"
    if engine == "postgresql":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        server.execute(f'CREATE SCHEMA "{schema}"')
        try:
            yield EngineTarget("postgresql", server.base_url, schema)
        finally:
            server.execute(f'DROP SCHEMA "{schema}" CASCADE')
        return
    odbc = os.environ.get(MSSQL_ENV)
    if not odbc:
        pytest.skip(f"SQL Server live suite: set {MSSQL_ENV} to an ODBC connection string to run it")
    _mssql_execute(odbc, f"CREATE SCHEMA [{schema}]")
    try:
        yield EngineTarget("sqlserver", odbc, schema)
    finally:
        _mssql_execute(
            odbc,
            "DECLARE @sql nvarchar(max) = N''; "
            "SELECT @sql += N'DROP TABLE ' + QUOTENAME(s.name) + N'.' + QUOTENAME(t.name) + N'; ' "
            f"FROM sys.tables t JOIN sys.schemas s ON s.schema_id = t.schema_id WHERE s.name = N'{schema}'; "
            f"EXEC sp_executesql @sql; DROP SCHEMA [{schema}];",
        )


def odbc_target(request: pytest.FixtureRequest, engine: str, tmp_path: Path) -> Iterator[EngineTarget]:
    """PostgreSQL (psqlODBC) or SQLite (SQLite3 ODBC driver) reached through pyodbc and unixODBC."""
    from urllib.parse import quote

    if engine == "sqlite":
        odbc = f"DRIVER={{SQLite3}};Database={tmp_path / 'queues.db'};Timeout=30000"
        yield EngineTarget("sqlite", f"sqlite+pyodbc:///?odbc_connect={quote(odbc)}", None, "odbc")
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    url = make_url(server.base_url)
    odbc = (
        f"DRIVER={{PostgreSQL Unicode}};SERVER={url.host};PORT={url.port};DATABASE={url.database};"
        f"UID={url.username};PWD={{{url.password}}}"
    )
    schema = f"t_{uuid.uuid4().hex[:12]}"
    server.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield EngineTarget("postgresql", f"postgresql+pyodbc:///?odbc_connect={quote(odbc)}", schema, "odbc")
    finally:
        server.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def transport(target: EngineTarget) -> Iterator[Transport]:
    with target.open() as opened:
        yield opened


@pytest.fixture
def queue(transport: Transport):
    """An ``orders`` queue with its ``error`` queue, both created."""
    transport.queue("error").create()
    orders = transport.queue("orders")
    orders.create()
    return orders
