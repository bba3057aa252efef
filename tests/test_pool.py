"""The transport's connection pool (transport/pool.py), on real SQLite connections and, where a driver's
behaviour matters, on PostgreSQL and SQL Server."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_sqlqueue.model.errors import ConfigurationError
from airflow_provider_sqlqueue.spark.source.transactions import execute
from airflow_provider_sqlqueue.transport import open_transport
from airflow_provider_sqlqueue.transport.pool import ConnectionPool, PooledConnection, PoolExhausted


class Opener:
    """Opens real SQLite connections on one file and remembers each, so tests can see which are closed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.opened: list[sqlite3.Connection] = []
        self.fail_next = 0

    def __call__(self) -> sqlite3.Connection:
        if self.fail_next:
            self.fail_next -= 1
            raise sqlite3.OperationalError("unable to open database file (as the test asked)")
        connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.opened.append(connection)
        return connection


def is_closed(connection: sqlite3.Connection) -> bool:
    try:
        connection.execute("SELECT 1")
    except sqlite3.ProgrammingError:
        return True
    return False


def rollback(connection: Any) -> None:
    connection.rollback()


def make_pool(tmp_path: Path, size: int = 1, overflow: int = 0, timeout: float = 5.0) -> tuple:
    opener = Opener(tmp_path / "pool.db")
    return ConnectionPool(opener, rollback, size=size, overflow=overflow, timeout=timeout), opener


def test_many_threads_never_share_a_connection_or_exceed_the_limit(tmp_path: Path) -> None:
    pool, opener = make_pool(tmp_path, size=2, overflow=1)
    lent: set[int] = set()
    most = 0
    guard = threading.Lock()
    errors: list[BaseException] = []
    # The first three borrowers hold their connections until all three have one: the pool's limit (2 + 1
    # overflow) is reached however the threads are scheduled on a loaded machine, and then never passed.
    at_the_limit = threading.Barrier(3, timeout=30)
    first_borrowers = 0

    def borrow_many() -> None:
        nonlocal most, first_borrowers
        try:
            for _ in range(300):
                connection = pool.connect()
                driver = connection.dbapi_connection
                with guard:
                    assert id(driver) not in lent, "one driver connection lent twice at once"
                    lent.add(id(driver))
                    most = max(most, len(lent))
                    waits = first_borrowers < 3
                    first_borrowers += waits
                if waits:
                    at_the_limit.wait()
                connection.execute("SELECT 1").fetchone()
                with guard:
                    lent.discard(id(driver))
                connection.close()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=borrow_many) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert most == 3
    assert pool.open_connections == pool.idle_connections <= 2
    closed = [connection for connection in opener.opened if is_closed(connection)]
    assert len(opener.opened) - len(closed) == pool.open_connections


def test_a_returned_connection_is_rolled_back_and_lent_again(tmp_path: Path) -> None:
    pool, opener = make_pool(tmp_path)
    first = pool.connect()
    first.execute("CREATE TABLE t (x)")
    first.execute("BEGIN")
    first.execute("INSERT INTO t VALUES (1)")
    first.info["kept"] = "with the driver connection"
    first.close()
    again = pool.connect()
    assert again.dbapi_connection is opener.opened[0] and not again.in_transaction
    assert again.execute("SELECT count(*) FROM t").fetchone() == (0,)
    assert again.info == {"kept": "with the driver connection"}
    again.close()


def test_a_given_back_connection_cannot_be_used_and_closing_twice_does_nothing(tmp_path: Path) -> None:
    pool, _ = make_pool(tmp_path)
    connection = pool.connect()
    connection.close()
    connection.close()
    assert not connection.is_valid and "returned" in repr(connection)
    with pytest.raises(RuntimeError, match="given back or invalidated"):
        connection.cursor()
    with pytest.raises(RuntimeError, match="given back or invalidated"):
        connection.execute("SELECT 1")
    assert pool.open_connections == pool.idle_connections == 1


def test_only_size_connections_stay_idle(tmp_path: Path) -> None:
    pool, opener = make_pool(tmp_path, size=1, overflow=2)
    loans = [pool.connect() for _ in range(3)]
    assert pool.open_connections == 3
    for loan in loans:
        loan.close()
    assert pool.open_connections == pool.idle_connections == 1
    assert [is_closed(connection) for connection in opener.opened] == [False, True, True]


def test_a_full_pool_waits_then_says_so(tmp_path: Path) -> None:
    pool, _ = make_pool(tmp_path, size=1, overflow=0, timeout=0.2)
    held = pool.connect()
    started = time.monotonic()
    with pytest.raises(PoolExhausted, match=r"within 0.2 s \(1 in use\)"):
        pool.connect()
    assert time.monotonic() - started >= 0.2
    held.close()
    pool.connect().close()


def test_a_waiter_gets_the_slot_of_an_invalidated_connection(tmp_path: Path) -> None:
    pool, opener = make_pool(tmp_path, size=1, overflow=0)
    held = pool.connect()
    got: list[PooledConnection] = []
    waiter = threading.Thread(target=lambda: got.append(pool.connect()))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()
    held.invalidate()
    assert is_closed(opener.opened[0]) and not held.is_valid
    held.close()
    waiter.join(5)
    assert got and got[0].dbapi_connection is opener.opened[1]
    got[0].close()
    assert pool.open_connections == 1


def test_a_failed_open_frees_its_slot(tmp_path: Path) -> None:
    pool, opener = make_pool(tmp_path, size=1, overflow=0, timeout=0.5)
    opener.fail_next = 1
    with pytest.raises(sqlite3.OperationalError, match="as the test asked"):
        pool.connect()
    assert pool.open_connections == 0
    connection = pool.connect()
    assert connection.execute("SELECT 1").fetchone() == (1,)
    connection.close()


def test_a_connection_whose_reset_fails_is_closed(tmp_path: Path) -> None:
    opener = Opener(tmp_path / "pool.db")
    failing = {"now": False}

    def reset(connection: Any) -> None:
        if failing["now"]:
            raise sqlite3.OperationalError("disk I/O error (as the test asked)")
        connection.rollback()

    pool = ConnectionPool(opener, reset, size=1, overflow=0, timeout=1.0)
    connection = pool.connect()
    failing["now"] = True
    connection.close()
    assert is_closed(opener.opened[0]) and pool.open_connections == 0
    failing["now"] = False
    fresh = pool.connect()
    assert fresh.dbapi_connection is opener.opened[1]
    fresh.close()


def test_a_return_interrupted_mid_reset_closes_the_connection_and_frees_its_place(tmp_path: Path) -> None:
    opener = Opener(tmp_path / "pool.db")

    interrupt = {"now": True}

    def reset(connection: Any) -> None:
        if interrupt["now"]:
            raise KeyboardInterrupt
        connection.rollback()

    pool = ConnectionPool(opener, reset, size=1, overflow=0, timeout=0.5)
    connection = pool.connect()
    with pytest.raises(KeyboardInterrupt):
        connection.close()
    assert is_closed(opener.opened[0]) and pool.open_connections == 0
    interrupt["now"] = False
    pool.connect().close()  # its place is free: no wait, no PoolExhausted
    assert pool.open_connections == pool.idle_connections == 1


def test_dispose_closes_idle_now_and_lent_on_return(tmp_path: Path) -> None:
    pool, opener = make_pool(tmp_path, size=2, overflow=0)
    idle, lent = pool.connect(), pool.connect()
    idle.close()
    pool.dispose()
    assert is_closed(opener.opened[0]) and not is_closed(opener.opened[1])
    assert lent.execute("SELECT 1").fetchone() == (1,)
    lent.close()
    assert is_closed(opener.opened[1]) and pool.open_connections == 0
    after = pool.connect()  # still usable: it opens a new one
    assert after.dbapi_connection is opener.opened[2]
    after.close()


def test_the_transport_refuses_a_pool_that_cannot_lend(tmp_path: Path) -> None:
    for size, overflow in ((0, 10), (1, -1)):
        with pytest.raises(ConfigurationError, match="pool_size must be at least 1"):
            open_transport(f"sqlite:///{tmp_path}/q.db", pool_size=size, max_overflow=overflow)


def test_the_transport_resets_returned_connections_through_its_dialect(tmp_path: Path) -> None:
    with open_transport(f"sqlite:///{tmp_path}/q.db", pool_size=1, max_overflow=0) as transport:
        queue = transport.queue("orders")
        queue.create()
        queue.send(b"kept")
        with transport.connection() as connection:
            connection.cursor().execute("BEGIN IMMEDIATE")
            connection.cursor().execute('DELETE FROM "orders"')
        with queue.receive() as batch:
            assert [message.body for message in batch] == [b"kept"]


def test_the_cursors_of_a_loan_are_closed_when_it_ends(tmp_path: Path) -> None:
    pool, opener = make_pool(tmp_path)
    loan = pool.connect()
    given_back = loan.cursor()
    given_back.execute("SELECT 1").fetchone()
    loan.close()
    with pytest.raises(sqlite3.ProgrammingError, match="closed cursor"):
        given_back.execute("SELECT 1")
    loan = pool.connect()
    invalidated = loan.cursor()
    loan.invalidate()
    loan.close()
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        invalidated.execute("SELECT 1")
    assert is_closed(opener.opened[0]) and pool.open_connections == 0


def test_a_thread_borrowing_what_another_just_gave_back_runs_its_statements(target) -> None:
    """A cursor that outlives its loan is closed with it. pyodbc frees a cursor's statement on its driver
    connection without holding the GIL, so one dying in its thread after the loan, while another thread ran
    a statement on the same connection (the last one given back is the first lent), failed that statement
    or crashed the process (FreeTDS); the Spark drain's heartbeat thread met it beside the driver's."""
    errors: list[tuple[str, BaseException]] = []
    stop = threading.Event()
    with target.open() as transport:
        beats = transport.dialect.qualified_name(transport.resolve("beats"))
        p = transport.dialect.placeholder
        execute(transport, f"CREATE TABLE {beats} (RunId VARCHAR(50) PRIMARY KEY, Beats INT)")
        execute(transport, f"INSERT INTO {beats} VALUES ({p}, 0)", ("run",))
        beat = f"UPDATE {beats} SET Beats = Beats + 1 WHERE RunId = {p}"

        def heartbeat() -> None:
            while not stop.wait(0.001):
                try:
                    execute(transport, beat, ("run",))
                except BaseException as error:
                    errors.append(("heartbeat", error))

        thread = threading.Thread(target=heartbeat, daemon=True)
        thread.start()
        try:
            for _ in range(1000):
                execute(transport, beat, ("run",))
                execute(transport, f"SELECT Beats FROM {beats} WHERE RunId = {p}", ("run",), write=False)
        except BaseException as error:
            errors.append(("driver", error))
        finally:
            stop.set()
            thread.join(30)
        beaten = execute(transport, f"SELECT Beats FROM {beats} WHERE RunId = {p}", ("run",), write=False)
    assert not errors, errors[:3]
    assert int(beaten[0][0]) >= 1000
