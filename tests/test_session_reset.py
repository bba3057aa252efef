"""Issue #62, items 2 and 3, on real engines: what a handler changes in its pooled connection's session does
not reach the next borrower (``PooledConnection.lend_to_user``, the dialects' ``reset_session``), and a
connection the transport hands out (``Transport.new_connection``) commits only when its caller commits.

Each engine runs with its own drivers: SQLite (sqlite3), PostgreSQL (psycopg), SQL Server on Babelfish
through FreeTDS and Microsoft's ODBC Driver 18, and PostgreSQL and SQLite through their ODBC drivers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import EngineTarget, odbc_target

from airflow_provider_sqlqueue.model.address import QueueAddress
from airflow_provider_sqlqueue.transport import Transport


@pytest.fixture(params=["postgresql", "sqlite"], ids=["postgresql-odbc", "sqlite-odbc"])
def odbc(request: pytest.FixtureRequest, tmp_path) -> Iterator[EngineTarget]:
    yield from odbc_target(request, request.param, tmp_path)


def one_connection(target: EngineTarget) -> Transport:
    """A transport whose pool holds a single connection, so each loan is the same driver connection."""
    return target.open(pool_size=1, max_overflow=0)


def fetch(connection: Any, transport: Transport, statement: str) -> list[Any]:
    cursor = connection.cursor()
    cursor.execute(statement)
    rows = transport.dialect.fetch_rows(cursor)
    cursor.close()
    return [tuple(row) for row in rows]


def session_settings(connection: Any, transport: Transport) -> dict[str, Any]:
    """What the session runs with, as the transport's statements would see it."""
    engine = transport.dialect.name
    driver = connection.dbapi_connection
    if engine == "sqlite":
        pragmas = (
            "query_only",
            "foreign_keys",
            "busy_timeout",
            "synchronous",
            "recursive_triggers",
            "temp_store",
        )
        settings = {pragma: fetch(connection, transport, f"PRAGMA {pragma}")[0][0] for pragma in pragmas}
        settings["isolation_level"] = getattr(driver, "isolation_level", "odbc")
        settings["autocommit"] = getattr(driver, "autocommit", None)
        return settings
    if engine == "postgresql":
        row = fetch(
            connection,
            transport,
            "SELECT current_setting('default_transaction_isolation'), current_setting('search_path'), "
            "current_setting('statement_timeout'), current_setting('lock_timeout'), current_user, "
            "session_user, current_setting('backend_flush_after')",
        )[0]
        names = ("isolation", "search_path", "statement_timeout", "lock_timeout", "user", "session_user")
        settings = dict(zip(names, row, strict=False))
        settings["backend_flush_after"] = row[6]
        for attribute in ("isolation_level", "read_only", "deferrable", "autocommit"):
            settings[attribute] = getattr(driver, attribute, None)
        return settings
    row = fetch(
        connection,
        transport,
        "SELECT @@LOCK_TIMEOUT, @@OPTIONS & (16384 | 512 | 256 | 32), transaction_isolation_level "
        "FROM sys.dm_exec_sessions WHERE session_id = @@SPID",
    )[0]
    return {"lock_timeout": row[0], "options": row[1], "isolation": row[2], "autocommit": driver.autocommit}


def change_session(connection: Any, transport: Transport) -> None:
    """What a handler might run on the receive's connection, committed with the receive."""
    engine = transport.dialect.name
    driver = connection.dbapi_connection
    cursor = connection.cursor()
    if engine == "sqlite":
        if not hasattr(driver, "isolation_level"):  # over ODBC: outside a transaction, as PRAGMAs need
            driver.autocommit = True
        for pragma in (
            "query_only=1",
            "foreign_keys=1",
            "busy_timeout=5",
            "synchronous=OFF",
            "recursive_triggers=1",
            "temp_store=FILE",
        ):
            cursor.execute(f"PRAGMA {pragma}")
        if hasattr(driver, "isolation_level"):
            driver.isolation_level = "DEFERRED"
    elif engine == "postgresql":
        cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        cursor.execute("SET search_path TO pg_catalog")
        cursor.execute("SET statement_timeout = '7s'")
        cursor.execute("SET lock_timeout = '3s'")
        cursor.execute("SET backend_flush_after = 0")
        cursor.execute("SET ROLE pg_monitor")
    else:
        # Babelfish refuses SERIALIZABLE and REPEATABLE READ; it runs SNAPSHOT as PostgreSQL's repeatable read
        cursor.execute(
            "SET TRANSACTION ISOLATION LEVEL SNAPSHOT; SET LOCK_TIMEOUT 5; SET XACT_ABORT ON; "
            "SET NOCOUNT OFF; SET QUOTED_IDENTIFIER OFF; SET ANSI_NULLS OFF"
        )
        while cursor.nextset():
            pass
    cursor.close()
    connection.commit()
    if engine == "postgresql" and hasattr(driver, "read_only"):  # psycopg's own, sent with each BEGIN
        driver.isolation_level = 3  # psycopg.IsolationLevel.REPEATABLE_READ
        driver.read_only = True


def received(queue: Any) -> list[bytes]:
    with queue.receive(max_messages=5) as batch:
        return [message.body for message in batch]


def lend_and_change(transport: Transport, expected: dict[str, Any], *, lend: bool = True) -> Any:
    """Borrow the pool's connection, lend it to "user code" that changes its session, give it back; the
    driver connection it was. (The change comes first: Babelfish changes no isolation level after a
    statement of the transaction has run.)"""
    with transport.connection() as connection:
        if lend:
            connection.lend_to_user()
        change_session(connection, transport)
        # the change took effect: otherwise the reset would prove nothing
        assert session_settings(connection, transport) != expected
        connection.rollback()
        return connection.dbapi_connection


def check_the_next_borrower_gets_the_transports_session(target: EngineTarget) -> None:
    with one_connection(target) as transport:
        queue = transport.queue("orders", error_queue=None)
        queue.create()
        with transport.connection() as connection:
            expected = session_settings(connection, transport)
            driver = connection.dbapi_connection
        assert lend_and_change(transport, expected) is driver
        with transport.connection() as connection:
            assert connection.dbapi_connection is driver  # the same session, reset
            assert not connection.lent_to_user
            assert session_settings(connection, transport) == expected
        queue.send(b"after the reset")  # e.g. query_only or a search_path without the queue would refuse it
        assert received(queue) == [b"after the reset"]
        assert transport._pool.session_resets == 1


@pytest.mark.parametrize(
    "target", ["sqlite", "postgresql", "sqlserver-freetds", "sqlserver-msodbc"], indirect=True
)
def test_a_handlers_session_changes_do_not_reach_the_next_borrower(target: EngineTarget) -> None:
    check_the_next_borrower_gets_the_transports_session(target)


def test_a_handlers_session_changes_do_not_reach_the_next_borrower_over_odbc(odbc: EngineTarget) -> None:
    check_the_next_borrower_gets_the_transports_session(odbc)


@pytest.mark.parametrize("target", ["sqlite", "postgresql", "sqlserver-freetds"], indirect=True)
def test_only_lent_connections_are_reset_unless_every_session_is_asked_for(target: EngineTarget) -> None:
    """The transport's own operations change nothing in a session, so by default only a loan marked
    lend_to_user pays the reset; reset_every_session extends it to every return."""
    with one_connection(target) as transport:
        with transport.connection() as connection:
            expected = session_settings(connection, transport)
        lend_and_change(transport, expected, lend=False)
        with transport.connection() as connection:
            assert session_settings(connection, transport) != expected  # kept: nobody said it was lent
        assert transport._pool.session_resets == 0
        transport.reset_every_session = True
        with transport.connection():
            pass
        with transport.connection() as connection:
            assert session_settings(connection, transport) == expected
        assert transport._pool.session_resets >= 1


def side_table(transport: Transport, target: EngineTarget) -> str:
    """A plain table of the caller's, created and committed; its qualified name."""
    name = transport.dialect.qualified_name(
        QueueAddress("notes", target.schema) if target.schema else QueueAddress("notes")
    )
    with transport.connection() as connection:
        cursor = connection.cursor()
        cursor.execute(f"CREATE TABLE {name} (n int)")
        cursor.close()
        connection.commit()
    return name


def count(transport: Transport, table: str) -> int:
    with transport.connection() as connection:
        rows = fetch(connection, transport, f"SELECT COUNT(*) FROM {table}")
        connection.rollback()
    return int(rows[0][0])


def check_a_new_connection_commits_only_with_its_caller(target: EngineTarget) -> None:
    with target.open() as transport:
        queue = transport.queue("orders", error_queue=None)
        queue.create()
        notes = side_table(transport, target)
        connection = transport.new_connection()
        try:
            cursor = connection.cursor()
            cursor.execute(f"INSERT INTO {notes} (n) VALUES (1)")
            queue.send(b"rolled back", connection=connection)
            connection.rollback()
            assert count(transport, notes) == 0
            assert queue.count() == 0

            cursor.execute(f"INSERT INTO {notes} (n) VALUES (2)")
            queue.send(b"committed", connection=connection)
            connection.commit()
            cursor.close()
        finally:
            connection.close()
        assert count(transport, notes) == 1
        assert received(queue) == [b"committed"]


@pytest.mark.parametrize(
    "target", ["sqlite", "postgresql", "sqlserver-freetds", "sqlserver-msodbc"], indirect=True
)
def test_a_new_connection_commits_only_with_its_caller(target: EngineTarget) -> None:
    check_a_new_connection_commits_only_with_its_caller(target)


def test_a_new_connection_commits_only_with_its_caller_over_odbc(odbc: EngineTarget) -> None:
    check_a_new_connection_commits_only_with_its_caller(odbc)


def test_the_pools_own_sqlite_connections_stay_in_autocommit(tmp_path) -> None:
    """The transport's own SQLite connections begin their transactions explicitly (BEGIN IMMEDIATE), so
    handing out transactional connections must not change theirs."""
    with EngineTarget("sqlite", f"sqlite:///{tmp_path / 'queues.db'}", None).open() as transport:
        handed_out = transport.new_connection()
        try:
            assert handed_out.isolation_level == "IMMEDIATE"
        finally:
            handed_out.close()
        with transport.connection() as connection:
            assert connection.dbapi_connection.isolation_level is None


def handler_changes(transport: Transport) -> list[str]:
    """What a handler runs on ``context.connection`` to change its session, in the receive's transaction."""
    if transport.dialect.name == "sqlite":
        return ["PRAGMA busy_timeout=5", "PRAGMA recursive_triggers=1"]
    return [
        "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE",
        "SET statement_timeout = '7s'",
    ]


@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_what_a_pumps_handler_sets_in_its_session_ends_with_its_receive(target: EngineTarget) -> None:
    from test_pump import FAST

    from airflow_provider_sqlqueue.transport import MessagePump

    with target.open() as transport:
        transport.queue("error").create()
        queue = transport.queue("orders")
        queue.create()
        with transport.connection() as connection:
            expected = session_settings(connection, transport)
        queue.send_batch([b"o1", b"o2", b"o3"])

        def handler(message: Any, context: Any) -> None:
            for statement in handler_changes(transport):
                context.connection.execute(statement)

        stats = MessagePump(queue, handler, **FAST).run(until_empty=True, timeout=30)
        assert stats.processed == 3 and stats.failed == 0
        idle = transport._pool.idle_connections
        loans = [transport.connection() for _ in range(idle)]
        try:
            seen = [session_settings(loan.__enter__(), transport) for loan in loans]
        finally:
            for loan in loans:
                loan.__exit__(None, None, None)
        assert seen, "the pump left no connection in the pool"
        assert all(settings == expected for settings in seen), seen
