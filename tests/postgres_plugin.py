"""pytest plugin: the session's PostgreSQL server as the ``postgres_server`` fixture.

A throwaway cluster (``postgres_cluster.py``) started once per test session, or the server named by
``SQLQUEUE_TEST_POSTGRES_DSN``. tests/conftest.py registers it through ``pytest_plugins``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from postgres_cluster import PostgresCluster, find_postgres_bindir

POSTGRES_ENV = "SQLQUEUE_TEST_POSTGRES_DSN"


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
