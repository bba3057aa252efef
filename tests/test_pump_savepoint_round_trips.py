"""What a batching pump sends for the savepoint of each message (issue 62, item 4), read from the driver
itself: psycopg's libpq protocol trace on PostgreSQL (which messages went out before the client waited),
sqlite3's statement callback on SQLite. The savepoint must cost no round trip of its own on PostgreSQL:
the savepoint travels in one pipeline with the handler's first statement (and is not released: a batch's
savepoints nest there). The handler writes one row per message through ``context.connection``; the pump
runs one receive at a time on a pool of one connection, so the traced connection is the one every batch
runs on.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EngineTarget, odbc_target
from test_pump import FAST

from airflow_provider_sqlqueue.dialects.transaction_state import POSTGRES_THE_TRANSACTIONS_NAME as NAME_QUERY
from airflow_provider_sqlqueue.transport import MessagePump, Transport

MESSAGES = 12
BATCH = 6
PREPARE = "prepare: "  # psycopg preparing a statement it ran often: once per statement and connection
SAVEPOINT_STATEMENT = re.compile(r"\b(SAVEPOINT|RELEASE)\b", re.IGNORECASE)


def _drain(target: Any, trace: Any) -> tuple[Transport, str, Any]:
    """Fill a queue, start ``trace`` on the pool's one connection, drain the queue with a batching pump
    whose handler inserts a row per message; the start of the handler's statement and the pump's stats."""
    transport = target.open(pool_size=1, max_overflow=0)
    transport.queue("error").create()
    queue = transport.queue("orders")
    queue.create()
    queue.send_batch([f"m{n}".encode() for n in range(MESSAGES)])
    dialect = transport.dialect
    table = dialect.qualified_name(transport.resolve("handled"))
    with transport.connection() as connection:
        cursor = connection.cursor()
        if dialect.begin_write():
            cursor.execute(dialect.begin_write(), ())
        cursor.execute(f"CREATE TABLE {table} (id varchar(40) NOT NULL)", ())
        connection.commit()
        trace.start(connection.dbapi_connection)
    insert = f"INSERT INTO {table} (id) VALUES ({dialect.placeholder})"

    def handler(message: Any, context: Any) -> None:
        context.connection.execute(insert, (str(message.id),))

    pump = MessagePump(queue, handler, batch_size=BATCH, max_concurrency=1, **FAST)
    stats = pump.run(until_empty=True, timeout=60)
    return transport, f"INSERT INTO {table}", stats


class PostgresTrace:
    """libpq's protocol trace of one connection, cut into round trips: the messages the client sent
    before it waited, with the statements among them."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "libpq-trace.txt"
        self.file: Any = None
        self.driver: Any = None

    def start(self, driver: Any) -> None:
        from psycopg import pq

        self.driver = driver
        self.file = self.path.open("w")
        driver.pgconn.trace(self.file.fileno())
        driver.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)

    def round_trips(self) -> list[list[str]]:
        self.driver.pgconn.untrace()
        self.file.close()
        trips: list[list[str]] = []
        prepared: dict[str, str] = {}  # psycopg prepares a statement it ran often, then only binds it
        sending = False
        for line in self.path.read_text().splitlines():
            if line.startswith("F"):
                if not sending:
                    trips.append([])
                    sending = True
                query = re.search(r'\tQuery\t "(.*)"', line)
                parse = re.search(r'\tParse\t "([^"]*)" "(.*)" \d', line)
                bind = re.search(r'\tBind\t "[^"]*" "([^"]+)"', line)
                if query:
                    trips[-1].append(query.group(1))
                elif parse and parse.group(1):
                    prepared[parse.group(1)] = parse.group(2)
                    trips[-1].append(PREPARE + parse.group(2))
                elif parse:
                    trips[-1].append(parse.group(2))
                elif bind:
                    trips[-1].append(prepared[bind.group(1)])
            elif line.startswith("B"):
                sending = False
        return trips


class SqliteTrace:
    """sqlite3's statement callback: every statement the library ran, in order."""

    def __init__(self, folder: Path) -> None:
        self.statements: list[str] = []

    def start(self, driver: Any) -> None:
        driver.set_trace_callback(self.statements.append)


def _within_batches(sequence: list[list[str]], insert: str) -> list[list[list[str]]]:
    """The stretches from one handler INSERT to the next inside one batch (no receive or commit between)."""
    stretches, current = [], None
    for step in sequence:
        text = " ".join(step).upper()
        if any(statement.startswith(insert) for statement in step):
            if current is not None:
                stretches.append(current)
            current = [step]
        elif current is not None and ("DELETE" in text or "COMMIT" in text):
            current = None
        elif current is not None:
            current.append(step)
    return stretches


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_postgresql_sends_each_savepoint_with_the_handlers_first_statement(target, tmp_path) -> None:
    trace = PostgresTrace(tmp_path)
    transport, insert, stats = _drain(target, trace)
    with transport:
        trips = trace.round_trips()
    assert stats.processed == MESSAGES and stats.failed == 0
    with_insert = [trip for trip in trips if any(statement.startswith(insert) for statement in trip)]
    assert len(with_insert) == MESSAGES  # the trace is of the connection the pump ran on
    of_their_own = [
        trip for trip in trips if trip not in with_insert and any(SAVEPOINT_STATEMENT.search(s) for s in trip)
    ]
    assert not of_their_own, f"savepoint statements in round trips of their own: {of_their_own}"
    for trip in with_insert:
        savepoints = [statement for statement in trip if SAVEPOINT_STATEMENT.search(statement)]
        # this message's mark alone: on PostgreSQL the savepoints of a batch nest until its commit
        assert savepoints == ['SAVEPOINT "sqlqueue_message"'] and trip[-2].startswith(insert)
        assert trip[-1] == NAME_QUERY  # the pump's check of the transaction, behind the handler's statement
    # between two messages of a batch: the one round trip of the message's own statement (and, once per
    # connection, psycopg preparing a statement)
    stretches = _within_batches(trips, insert)
    assert len(stretches) == MESSAGES - MESSAGES // BATCH
    waits = [
        [trip for trip in stretch if not all(s.startswith(PREPARE) for s in trip)] for stretch in stretches
    ]
    assert {len(stretch) for stretch in waits} == {1}, [stretch for stretch in waits if len(stretch) != 1]


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_sqlite_runs_one_savepoint_and_one_release_per_message(target, tmp_path) -> None:
    trace = SqliteTrace(tmp_path)
    transport, insert, stats = _drain(target, trace)
    with transport:
        statements = [[statement] for statement in trace.statements]
    assert stats.processed == MESSAGES and stats.failed == 0
    assert sum(1 for [statement] in statements if statement.startswith(insert)) == MESSAGES
    stretches = _within_batches(statements, insert)
    assert len(stretches) == MESSAGES - MESSAGES // BATCH
    for stretch in stretches:
        kinds = [statement.split()[0].upper() for [statement] in stretch[1:]]
        # the release of this message's savepoint and the next one's mark, just before the next handler's
        # statement; no read to check the transaction (the driver's state after each statement tells)
        assert kinds == ["RELEASE", "SAVEPOINT"], stretch


@pytest.mark.parametrize("reach", ["cursor", "driver"])
def test_a_handler_whose_first_statement_fails_rolls_back_alone_however_it_reached_the_connection(
    target, reach
) -> None:
    """The duplicate key is the bad message's first statement: through ``context.connection.cursor()`` it
    travels with the savepoint (in one pipeline on PostgreSQL), through the driver's own connection the
    savepoint is marked before it; either way the attempt rolls back to its savepoint, is retried, then
    moved to the error queue, and the batch's other rows commit once."""
    _first_statement_fails(target, reach)


@pytest.fixture(params=["postgresql", "sqlite"], ids=["postgresql-odbc", "sqlite-odbc"])
def odbc(request: pytest.FixtureRequest, tmp_path) -> Iterator[EngineTarget]:
    pytest.importorskip("pyodbc", reason="pyodbc (the mssql extra) is not installed")
    yield from odbc_target(request, request.param, tmp_path)


def test_through_odbc_the_release_and_the_savepoint_run_before_the_handlers_first_statement(odbc) -> None:
    """pyodbc has no pipeline: the previous message's release and the savepoint run one after another
    just before the handler's first statement, with the same outcome."""
    _first_statement_fails(odbc, "cursor")


def _first_statement_fails(target: Any, reach: str) -> None:
    with target.open() as transport:
        for name in ("error", "orders"):
            transport.queue(name).create()
        dialect = transport.dialect
        table = dialect.qualified_name(transport.resolve("handled"))
        insert = f"INSERT INTO {table} (id) VALUES ({dialect.placeholder})"
        with transport.connection() as connection:
            cursor = connection.cursor()
            if dialect.begin_write():
                cursor.execute(dialect.begin_write(), ())
            cursor.execute(f"CREATE TABLE {table} (id varchar(40) NOT NULL PRIMARY KEY)", ())
            cursor.execute(insert, ("bad",))
            connection.commit()
        orders = ["a", "b", "bad", "c", "d"]
        transport.queue("orders").send_batch([order.encode() for order in orders])

        def handler(message: Any, context: Any) -> None:
            connection = context.connection if reach == "cursor" else context.connection.dbapi_connection
            connection.cursor().execute(insert, (message.body.decode(),))

        pump = MessagePump(transport.queue("orders"), handler, batch_size=10, immediate_retries=1, **FAST)
        stats = pump.run(until_empty=True, timeout=60)
        with transport.connection() as connection:
            cursor = connection.cursor()
            cursor.execute(f"SELECT id FROM {table}", ())
            rows = sorted(str(row[0]) for row in cursor.fetchall())
            connection.commit()
        assert rows == sorted(orders)  # bad's row is the one inserted beforehand
        assert stats.processed == 4 and stats.failed == 1 and stats.retried == 1
        with transport.queue("error").receive(max_messages=10) as batch:
            assert [message.body for message in batch] == [b"bad"]
        assert transport.queue("orders").count() == 0
