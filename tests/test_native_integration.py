"""One transaction for the message and the business data, on real engines: a handler's own statements on
the receive's connection (DB-API and SQLAlchemy) commit or roll back with the receive and its sends, each
message of a batch under its own savepoint; sends join a caller's transaction."""

from __future__ import annotations

import sqlite3
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import StatementError
from sqlalchemy.orm import Session
from test_pump import FAST

from airflow_provider_sqlqueue.transport import (
    ConfigurationError,
    DelayedStore,
    Endpoint,
    MessagePump,
    QueueNotFound,
    Transport,
)

FLAVOURS = ["dbapi", "sqlalchemy"]


class Business:
    """An ``invoices`` table beside the queues: one row per order, the order as its primary key."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        dialect = transport.dialect
        self.table = dialect.qualified_name(transport.resolve("invoices"))
        self.mark = dialect.placeholder
        with transport.connection() as connection:
            cursor = connection.cursor()
            if dialect.begin_write():
                cursor.execute(dialect.begin_write(), ())
            cursor.execute(f"CREATE TABLE {self.table} (order_id varchar(40) PRIMARY KEY)", ())
            connection.commit()

    def insert_on(self, context: Any, flavour: str, order: str) -> None:
        """Insert through the connection the handler was lent, in the receive's transaction."""
        if flavour == "dbapi":
            context.connection.execute(f"INSERT INTO {self.table} (order_id) VALUES ({self.mark})", (order,))
        else:
            context.sqlalchemy_connection.execute(
                text(f"INSERT INTO {self.table} (order_id) VALUES (:order)"), {"order": order}
            )

    def orders(self) -> Counter[str]:
        with self.transport.connection() as connection:
            cursor = connection.cursor()
            cursor.execute(f"SELECT order_id FROM {self.table}", ())
            rows = cursor.fetchall()
            connection.commit()
        return Counter(str(row[0]) for row in rows)


def bodies(transport: Transport, name: str) -> Counter[bytes]:
    with transport.queue(name).receive(max_messages=100) as batch:
        return Counter(message.body for message in batch)


@pytest.fixture
def queues(transport: Transport) -> Transport:
    for name in ("error", "out", "orders"):
        transport.queue(name).create()
    return transport


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_handlers_row_and_send_commit_with_the_receive(target, queues, flavour) -> None:
    business = Business(queues)
    queues.queue("orders").send_batch([b"o1", b"o2", b"o3"])

    def handler(message, context) -> None:
        business.insert_on(context, flavour, message.body.decode())
        context.send("out", b"invoiced " + message.body)

    stats = MessagePump(queues.queue("orders"), handler, **FAST).run(until_empty=True, timeout=30)
    assert stats.processed == 3 and stats.failed == 0
    assert business.orders() == Counter({"o1": 1, "o2": 1, "o3": 1})
    assert bodies(queues, "out") == Counter({b"invoiced o1": 1, b"invoiced o2": 1, b"invoiced o3": 1})
    assert queues.queue("orders").count() == 0


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_failing_handler_rolls_back_its_row_and_send_and_the_message_ends_in_the_error_queue(
    target, queues, flavour
) -> None:
    business = Business(queues)
    queues.queue("orders").send(b"o1")
    attempts: list[int] = []

    def handler(message, context) -> None:
        attempts.append(context.attempt)
        business.insert_on(context, flavour, message.body.decode())
        context.send("out", b"invoiced " + message.body)
        raise RuntimeError("the invoice cannot be posted")

    stats = MessagePump(queues.queue("orders"), handler, immediate_retries=2, **FAST).run(
        until_empty=True, timeout=30
    )
    assert attempts == [1, 2, 3]  # received again after each rollback, the row's insert never conflicted
    assert stats.failed == 1 and stats.processed == 0
    assert business.orders() == Counter()
    assert bodies(queues, "out") == Counter()
    assert bodies(queues, "error") == Counter({b"o1": 1})


@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
@pytest.mark.parametrize("batch_size", [1, 5])
def test_in_receive_only_mode_the_handlers_rows_still_roll_back_with_the_receive(
    target, queues, batch_size
) -> None:
    business = Business(queues)
    queues.queue("orders").send(b"o1")
    attempts: list[int] = []

    def handler(message, context) -> None:
        attempts.append(context.attempt)
        business.insert_on(context, "sqlalchemy", "o1")  # the retry's insert would collide with a kept row
        if context.attempt == 1:
            raise RuntimeError("not yet")

    stats = MessagePump(
        queues.queue("orders"), handler, transaction_mode="receive_only", batch_size=batch_size, **FAST
    ).run(until_empty=True, timeout=30)
    assert attempts == [1, 2] and stats.processed == 1 and stats.failed == 0
    assert business.orders() == Counter({"o1": 1})


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_mode_none_has_no_receive_transaction_to_lend(target, queues) -> None:
    queues.queue("orders").send(b"o1")
    refusals: list[str] = []

    def handler(message, context) -> None:
        for name in ("connection", "sqlalchemy_connection"):
            with pytest.raises(ConfigurationError, match="transaction mode 'none'") as refused:
                getattr(context, name)
            refusals.append(str(refused.value))

    stats = MessagePump(queues.queue("orders"), handler, transaction_mode="none", **FAST).run(
        until_empty=True, timeout=30
    )
    assert stats.processed == 1 and len(refusals) == 2


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_batch_commits_the_others_rows_and_sends_while_a_failing_messages_roll_back_alone(
    target, queues, flavour
) -> None:
    """The failing message's statement fails in the database (a duplicate key: on PostgreSQL that aborts
    the transaction until the rollback to the savepoint); a flaky one writes, fails, and writes again."""
    business = Business(queues)
    with queues.connection() as connection:  # the duplicate the bad message runs into
        cursor = connection.cursor()
        if queues.dialect.begin_write():
            cursor.execute(queues.dialect.begin_write(), ())
        cursor.execute(f"INSERT INTO {business.table} (order_id) VALUES ({business.mark})", ("bad",))
        connection.commit()
    queues.queue("orders").send_batch([b"good1", b"bad", b"flaky", b"good2"])
    attempts: Counter[bytes] = Counter()
    lock = threading.Lock()

    def handler(message, context) -> None:
        with lock:
            attempts[message.body] += 1
        context.send("out", b"invoiced " + message.body)
        business.insert_on(context, flavour, message.body.decode())
        if message.body == b"flaky" and context.attempt == 1:
            raise RuntimeError("not yet")

    pump = MessagePump(queues.queue("orders"), handler, batch_size=10, immediate_retries=1, **FAST)
    stats = pump.run(until_empty=True, timeout=30)
    assert stats.receives - stats.empty_receives == 1  # one batch took all four
    assert attempts == Counter({b"good1": 1, b"bad": 2, b"flaky": 2, b"good2": 1})
    assert stats.processed == 3 and stats.failed == 1 and stats.retried == 2
    assert business.orders() == Counter({"bad": 1, "good1": 1, "flaky": 1, "good2": 1})  # bad's own row only
    assert bodies(queues, "out") == Counter(
        {b"invoiced good1": 1, b"invoiced flaky": 1, b"invoiced good2": 1}
    )
    assert bodies(queues, "error") == Counter({b"bad": 1})
    assert queues.queue("orders").count() == 0


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_batch_whose_connection_is_lost_before_a_handler_writes_comes_back_without_counting_a_failure(
    target, queues, postgres_server
) -> None:
    """The server ends the receive's session between two messages of a batch, so the second message's
    savepoint cannot be marked: the batch comes back whole and that message is not one failure nearer the
    error queue (with no immediate retry, one counted failure would have sent it there)."""
    business = Business(queues)
    queues.queue("orders").send_batch([b"first", b"second"])
    ended: list[int] = []

    def handler(message, context) -> None:
        if message.body == b"first" and not ended:
            # the session holding this receive: in a transaction that has written (the receive's DELETE
            # gave it a transaction id; a peek's read-only transaction has none) and whose last statement
            # took from this test's orders table (other tests' sessions may be open in the same database)
            orders = queues.dialect.qualified_name(queues.queue("orders").address)
            rows = postgres_server.query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state = 'idle in transaction' AND backend_xid IS NOT NULL AND pid <> pg_backend_pid() "
                f"AND strpos(query, '{orders.replace(chr(39), chr(39) * 2)}') > 0"
            )
            ended.append(len(rows))
            return  # the receive's connection is gone; this handler wrote nothing on it
        business.insert_on(context, "dbapi", message.body.decode())

    pump = MessagePump(queues.queue("orders"), handler, batch_size=10, immediate_retries=0, **FAST)
    stats = pump.run(until_empty=True, timeout=60)
    assert ended == [1], "the receive's session was not the one ended: the test proves nothing"
    assert business.orders() == Counter({"first": 1, "second": 1})
    assert queues.queue("error").count() == 0
    assert queues.queue("orders").count() == 0
    assert stats.failed == 0


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_sqlalchemy_neither_commits_nor_rolls_back_the_lent_connection(target, queues) -> None:
    """Every statement SQLite ran on the driver connection during the handler is traced: SQLAlchemy's
    Connection, its closing, and an ORM Session bound to it commit nothing and roll nothing back."""
    business = Business(queues)
    queues.queue("orders").send_batch([b"o1", b"o2"])
    traced: list[str] = []

    def handler(message, context) -> None:
        driver = context.connection.dbapi_connection
        driver.set_trace_callback(traced.append)
        try:
            order = message.body.decode()
            with context.sqlalchemy_connection as connection:
                connection.execute(text(f"INSERT INTO {business.table} (order_id) VALUES (:o)"), {"o": order})
            with Session(bind=context.sqlalchemy_connection) as session:
                session.execute(
                    text(f"INSERT INTO {business.table} (order_id) VALUES (:o)"), {"o": order + "s"}
                )
                session.commit()
            context.send("out", message.body)
            if message.body == b"o2":
                raise RuntimeError("roll back what o2 wrote")
        finally:
            driver.set_trace_callback(None)

    stats = MessagePump(queues.queue("orders"), handler, immediate_retries=0, **FAST).run(
        until_empty=True, timeout=30
    )
    assert stats.processed == 1 and stats.failed == 1
    assert business.orders() == Counter({"o1": 1, "o1s": 1})
    assert any("INSERT INTO" in statement for statement in traced)
    ended = [s for s in traced if s.split()[0].upper() in ("COMMIT", "ROLLBACK", "END", "BEGIN")]
    assert ended == []
    assert bodies(queues, "out") == Counter({b"o1": 1})


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_the_sqlalchemy_wrapping_does_not_keep_a_transport_alive(target) -> None:
    import gc
    import weakref

    transport = target.open()
    transport.queue("orders").create()
    transport.queue("orders").send(b"o1")
    used: list[bool] = []
    MessagePump(
        transport.queue("orders"),
        lambda message, context: used.append(
            context.sqlalchemy_connection.execute(text("SELECT 1")).scalar()
        ),
        **FAST,
    ).run(until_empty=True, timeout=30)
    assert used == [1]
    transport.close()
    owner = weakref.ref(transport)
    del transport
    gc.collect()
    assert owner() is None


@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_a_handler_may_not_end_the_receives_transaction_nor_keep_its_connection(target, queues) -> None:
    business = Business(queues)
    queues.queue("orders").send(b"o1")
    kept: list[Any] = []
    refusals: list[str] = []

    def handler(message, context) -> None:
        business.insert_on(context, "dbapi", "o1")
        for call in (
            context.connection.commit,
            context.connection.rollback,
            context.connection.close,
            context.sqlalchemy_connection.commit,
            context.sqlalchemy_connection.rollback,
            context.sqlalchemy_connection.begin,
        ):
            with pytest.raises(ConfigurationError, match="receive's transaction") as refused:
                call()
            refusals.append(str(refused.value))
        with context.sqlalchemy_connection.begin_nested():  # a savepoint inside the receive's transaction
            business.insert_on(context, "sqlalchemy", "nested")
        kept.extend([context.connection, context.sqlalchemy_connection])

    stats = MessagePump(queues.queue("orders"), handler, **FAST).run(until_empty=True, timeout=30)
    assert stats.processed == 1 and len(refusals) == 6
    assert business.orders() == Counter({"o1": 1, "nested": 1})
    with pytest.raises(ConfigurationError, match="has ended"):
        kept[0].cursor()
    with pytest.raises(StatementError, match="has ended"):  # SQLAlchemy wraps it with the statement
        kept[1].execute(text("SELECT 1"))


# ---- sends in the caller's transaction -------------------------------------------------------------------


def callers_engine(target) -> Engine:
    """A SQLAlchemy engine of the caller's own on the test's database (not the transport's)."""
    if target.engine == "sqlite":
        return create_engine(target.url)
    if target.engine == "postgresql":
        return create_engine(target.url.replace("postgresql://", "postgresql+psycopg://", 1))
    return create_engine(f"mssql+pyodbc:///?odbc_connect={quote(target.url)}")


def callers_dbapi(target) -> Any:
    """A DB-API connection of the caller's own, through the transport's driver, outside autocommit."""
    if target.engine == "sqlite":
        return sqlite3.connect(target.url.removeprefix("sqlite:///"))
    if target.engine == "postgresql":
        import psycopg

        return psycopg.connect(target.url)
    import pyodbc

    return pyodbc.connect(target.url, autocommit=False)


def callers_transaction(target, flavour: str) -> Iterator[tuple[Any, Callable[[str, Any], None]]]:
    """Yield (connection, execute(sql, params)) in an open transaction of the caller's."""
    if flavour == "sqlalchemy":
        engine = callers_engine(target)
        with engine.connect() as connection:
            yield connection, lambda sql, params: connection.exec_driver_sql(sql, params)
        engine.dispose()
    else:
        connection = callers_dbapi(target)
        try:
            yield connection, lambda sql, params: connection.cursor().execute(sql, params)
        finally:
            connection.close()


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_sends_join_the_callers_transaction(target, queues, flavour, outcome) -> None:
    business = Business(queues)
    delayed = DelayedStore(queues, "orders.Delayed")
    delayed.create()
    out = queues.queue("out")
    for connection, execute in callers_transaction(target, flavour):
        execute(f"INSERT INTO {business.table} (order_id) VALUES ({business.mark})", ("o1",))
        out.send(b"one", connection=connection)
        out.send(b"with headers", {"Kind": "invoice"}, connection=connection)
        out.send_batch([b"two", b"three"], connection=connection)
        delayed.store("out", b"later", delay=3600, connection=connection)
        assert out.count() == 0  # nothing visible before the caller commits
        connection.commit() if outcome == "commit" else connection.rollback()
    if outcome == "commit":
        assert business.orders() == Counter({"o1": 1})
        expected = Counter({b"one": 1, b"with headers": 1, b"two": 1, b"three": 1})
        assert bodies(queues, "out") == expected
        assert delayed.count() == 1
    else:
        assert business.orders() == Counter()
        assert bodies(queues, "out") == Counter()
        assert delayed.count() == 0


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_connection_that_cannot_hold_the_callers_transaction_is_refused(target, queues, tmp_path) -> None:
    import psycopg

    from airflow_provider_sqlqueue.transport import open_transport

    with open_transport(f"sqlite:///{tmp_path / 'other.db'}") as lite:
        lite_queue = lite.queue("out")
        lite_queue.create()
        with (
            psycopg.connect(target.url) as foreign,
            pytest.raises(ConfigurationError, match=r"through a sqlite3\.Connection"),
        ):
            lite_queue.send(b"x", connection=foreign)
        autocommitting = sqlite3.connect(tmp_path / "other.db", isolation_level=None)
        with pytest.raises(ConfigurationError, match="autocommit"):
            lite_queue.send(b"x", connection=autocommitting)
        autocommitting.execute("BEGIN")  # inside a transaction it serves
        lite_queue.send(b"x", connection=autocommitting)
        autocommitting.rollback()
        autocommitting.close()
        assert lite_queue.count() == 0
    out = queues.queue("out")
    with pytest.raises(ConfigurationError, match=r"through a psycopg\.Connection"):
        out.send(b"x", connection=sqlite3.connect(tmp_path / "other.db"))
    with psycopg.connect(target.url, autocommit=True) as autocommitting:
        with pytest.raises(ConfigurationError, match="autocommit"):
            out.send_batch([b"x"], connection=autocommitting)
        with autocommitting.transaction():
            out.send(b"kept", connection=autocommitting)
    assert bodies(queues, "out") == Counter({b"kept": 1})
    with psycopg.connect(target.url) as caller, pytest.raises(QueueNotFound):  # the transport's error
        queues.queue("missing").send(b"x", connection=caller)


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_a_sqlalchemy_connection_outside_a_transaction_gets_one_its_commit_ends_and_endpoints_send_in_it(
    target, queues
) -> None:
    engine = callers_engine(target)
    out = queues.queue("out")
    sales = Endpoint(queues, "Sales", instance_specific_queue=False)
    sales.create()
    statements: list[str] = []
    event.listen(engine, "commit", lambda connection: statements.append("COMMIT"))
    with engine.connect() as connection:
        assert isinstance(connection, Connection) and not connection.in_transaction()
        out.send(b"x", connection=connection)
        assert connection.in_transaction()
        sales.send("out", b"from sales", connection=connection)  # an endpoint's send, now and delayed
        sales.send("out", b"later", delay=3600, connection=connection)
        assert out.count() == 0 and sales.delayed is not None and sales.delayed.count() == 0
        connection.commit()
    engine.dispose()
    assert statements == ["COMMIT"] and bodies(queues, "out") == Counter({b"x": 1, b"from sales": 1})
    assert sales.delayed.count() == 1


# ---- PostgreSQL and SQLite through ODBC: the DB-API connection only ---------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def odbc_queues(request: pytest.FixtureRequest, tmp_path) -> Iterator[tuple[Any, Transport]]:
    from conftest import odbc_target

    for target in odbc_target(request, request.param, tmp_path):
        with target.open() as transport:
            for name in ("error", "out", "orders"):
                transport.queue(name).create()
            yield target, transport


def test_through_odbc_a_batch_rolls_back_a_failing_messages_rows_alone_and_sends_join_a_callers_transaction(
    odbc_queues,
) -> None:
    import pyodbc

    target, transport = odbc_queues
    business = Business(transport)
    transport.queue("orders").send_batch([b"good", b"bad"])
    refusals: list[str] = []

    def handler(message, context) -> None:
        with pytest.raises(ConfigurationError, match="SQLAlchemy has no dialect") as refused:
            context.sqlalchemy_connection  # noqa: B018 - the property is what refuses
        refusals.append(str(refused.value))
        business.insert_on(context, "dbapi", message.body.decode())
        if message.body == b"bad":
            raise RuntimeError("cannot")

    stats = MessagePump(transport.queue("orders"), handler, batch_size=5, immediate_retries=0, **FAST).run(
        until_empty=True, timeout=30
    )
    assert stats.processed == 1 and stats.failed == 1 and len(refusals) == 2
    assert business.orders() == Counter({"good": 1})
    odbc = unquote(target.url.partition("odbc_connect=")[2])
    for outcome in ("rollback", "commit"):
        caller = pyodbc.connect(odbc, autocommit=False)
        transport.queue("out").send(outcome.encode(), connection=caller)
        caller.commit() if outcome == "commit" else caller.rollback()
        caller.close()
    assert bodies(transport, "out") == Counter({b"commit": 1})
    other = "DRIVER={SQLite3};Database=" + str(Path(tempfile.mkdtemp()) / "other.db")
    if target.engine == "postgresql":  # a pyodbc connection, but to another engine
        with pytest.raises(ConfigurationError, match="reaches SQLite"):
            transport.queue("out").send(b"x", connection=pyodbc.connect(other, autocommit=False))


# ---- under the oldest SQLAlchemy pyproject.toml allows ---------------------------------------------------

FLOOR_SCENARIO = """
import json, sys
import sqlalchemy
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session
from airflow_provider_sqlqueue.transport import MessagePump, open_transport

path = sys.argv[1]
traced = []
with open_transport(f"sqlite:///{path}") as transport:
    for name in ("error", "out", "orders"):
        transport.queue(name).create()
    with transport.connection() as connection:
        connection.cursor().execute("CREATE TABLE invoices (order_id varchar(40) PRIMARY KEY)")
        connection.commit()
    transport.queue("orders").send_batch([b"o1", b"o2"])

    def handler(message, context):
        driver = context.connection.dbapi_connection
        driver.set_trace_callback(traced.append)
        try:
            order = message.body.decode()
            with context.sqlalchemy_connection as connection:
                connection.execute(text("INSERT INTO invoices VALUES (:o)"), {"o": order})
            with Session(bind=context.sqlalchemy_connection) as session:
                session.execute(text("INSERT INTO invoices VALUES (:o)"), {"o": order + "s"})
                session.commit()
            if order == "o2":
                raise RuntimeError("roll back o2")
        finally:
            driver.set_trace_callback(None)

    MessagePump(transport.queue("orders"), handler, immediate_retries=0, idle_delay=0.1).run(
        until_empty=True, timeout=30
    )
    engine = create_engine(f"sqlite:///{path}")
    for outcome in ("rollback", "commit"):
        with engine.connect() as caller:
            transport.queue("out").send(outcome.encode(), connection=caller)
            getattr(caller, outcome)()
    engine.dispose()
    with transport.queue("out").receive(max_messages=10) as batch:
        sent = sorted(m.body.decode() for m in batch)
    with transport.connection() as connection:
        rows = sorted(row[0] for row in connection.cursor().execute("SELECT order_id FROM invoices"))
        connection.commit()
ended = [s for s in traced if s.split()[0].upper() in ("COMMIT", "ROLLBACK", "END", "BEGIN")]
print(json.dumps({"version": sqlalchemy.__version__, "rows": rows, "sent": sent, "ended": ended}))
"""


def test_the_lent_and_the_callers_connections_under_the_oldest_sqlalchemy_allowed(tmp_path) -> None:
    """The lent connection builds on SQLAlchemy's Connection and pool-connection interfaces: run the
    SQLite scenario in a child process with the floor's SQLAlchemy (.ci/setup.sh installs it) first."""
    import json
    import os
    import subprocess
    import sys

    from sqlalchemy_floor import floor_version

    repo = Path(__file__).resolve().parent.parent
    floor = floor_version()
    folder = Path(sys.prefix) / "sqlalchemy-floor" / floor
    if not (folder / "sqlalchemy" / "__init__.py").is_file():
        pytest.fail(f"SQLAlchemy {floor} is not installed in {folder}: run bash .ci/setup.sh")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(repo)])}
    done = subprocess.run(
        [sys.executable, "-c", FLOOR_SCENARIO, str(tmp_path / "queues.db")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"version": floor, "rows": ["o1", "o1s"], "sent": ["commit"], "ended": []}
