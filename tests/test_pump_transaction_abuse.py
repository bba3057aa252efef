"""A handler that ends, aborts or nests the receive's transaction behind the pump's back (issue #62), on real
engines, through the single-message and the batching pump: nothing lost, nothing handled twice, no endless
loop, and the error queue and the pump's stats say what happened.

Ten orders; each handler writes its order's row through ``context.connection`` and sends one message, and
the handler of ``o3`` misbehaves in one way per test. Afterwards the tables are counted: every other order
has exactly one row and one send, the offender at most one of each and, where the misbehaviour is one the
pump must act on, exactly one copy in the error queue, and the input queue is empty.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from test_pump import FAST

from airflow_provider_sqlqueue.transport import ConfigurationError, MessagePump, Transport

ORDERS = [f"o{n}" for n in range(10)]
OFFENDER = "o3"
RETRIES = 2


def _begin_statement(engine: str) -> str:
    return "BEGIN TRANSACTION" if engine == "sqlserver" else "BEGIN"


class Shop:
    """The business table beside the queues (no key: a second row for an order is counted, not refused)."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        dialect = transport.dialect
        self.table = dialect.qualified_name(transport.resolve("shipments"))
        self.mark = dialect.placeholder
        for name in ("error", "out", "orders"):
            transport.queue(name).create()
        with transport.connection() as connection:
            cursor = connection.cursor()
            if dialect.begin_write():
                cursor.execute(dialect.begin_write(), ())
            cursor.execute(f"CREATE TABLE {self.table} (order_id varchar(40) NOT NULL)", ())
            connection.commit()

    def insert(self, cursor: Any, order: str) -> None:
        cursor.execute(f"INSERT INTO {self.table} (order_id) VALUES ({self.mark})", (order,))

    def rows(self) -> Counter[str]:
        with self.transport.connection() as connection:
            cursor = connection.cursor()
            cursor.execute(f"SELECT order_id FROM {self.table}", ())
            found = cursor.fetchall()
            connection.commit()
        return Counter(str(row[0]) for row in found)

    def bodies(self, name: str) -> Counter[str]:
        with self.transport.queue(name).receive(max_messages=100) as batch:
            return Counter(message.body.decode() for message in batch)


# ---- the misbehaviours: each runs in o3's handler after its row was written ----------------------------
def sql_commit(context: Any, engine: str, shop: Shop, kept: dict[str, Any]) -> None:
    context.connection.execute("COMMIT")


def sql_rollback_then_write(context: Any, engine: str, shop: Shop, kept: dict[str, Any]) -> None:
    context.connection.execute("ROLLBACK")
    shop.insert(context.connection.cursor(), OFFENDER + "-after")


def sql_begin(context: Any, engine: str, shop: Shop, kept: dict[str, Any]) -> None:
    with contextlib.suppress(Exception):  # SQLite refuses a BEGIN inside a transaction; carry on
        context.connection.execute(_begin_statement(engine))


def swallowed_error(context: Any, engine: str, shop: Shop, kept: dict[str, Any]) -> None:
    with contextlib.suppress(Exception):
        context.connection.execute("SELECT * FROM no_such_table_sqlqueue")


def driver_commit(context: Any, engine: str, shop: Shop, kept: dict[str, Any]) -> None:
    context.connection.dbapi_connection.commit()  # refused: a ConfigurationError, not caught


def raw_commit(context: Any, engine: str, shop: Shop, kept: dict[str, Any]) -> None:
    context.connection.cursor().connection.commit()  # the driver's own object, reached past the guard


def raw_rollback(context: Any, engine: str, shop: Shop, kept: dict[str, Any]) -> None:
    context.connection.cursor().connection.rollback()


def kept_raw_commit(context: Any, engine: str, shop: Shop, kept: dict[str, Any]) -> None:
    kept["raw"].commit()  # the driver object an earlier message's handler kept


ABUSES: dict[str, Callable[..., None]] = {
    f.__name__: f
    for f in (
        sql_commit,
        sql_rollback_then_write,
        sql_begin,
        swallowed_error,
        driver_commit,
        raw_commit,
        raw_rollback,
        kept_raw_commit,
    )
}


def expected_error_copies(abuse: str, target: Any) -> int | None:
    """How many copies of the offender the error queue must hold; None where the engine's own behaviour
    decides (the test then checks only that nothing was lost or duplicated)."""
    if abuse == "sql_begin":
        # PostgreSQL warns and stays in the one transaction, SQLite refuses (caught): harmless. SQL Server
        # nests a transaction that the pump's commit would not end: a failure.
        return 1 if target.engine == "sqlserver" else 0
    if abuse == "swallowed_error":
        # PostgreSQL aborts the transaction; SQLite carries on; Babelfish ends the transaction on a missing
        # table (the pump then sees it ended)
        return 0 if target.engine == "sqlite" else 1
    if abuse == "kept_raw_commit":
        return None  # a single-message pump's later receive may run on another pooled connection
    return 1


@pytest.mark.parametrize("batch_size", [1, 10], ids=["single", "batching"])
@pytest.mark.parametrize("abuse", list(ABUSES))
def test_a_handler_that_ends_the_transaction_loses_nothing_and_handles_nothing_twice(
    target, transport: Transport, abuse: str, batch_size: int
) -> None:
    shop = Shop(transport)
    queue = transport.queue("orders")
    queue.send_batch([order.encode() for order in ORDERS])
    misbehave = ABUSES[abuse]
    calls: Counter[str] = Counter()
    kept: dict[str, Any] = {}
    lock = threading.Lock()

    def handler(message: Any, context: Any) -> None:
        order = message.body.decode()
        with lock:
            calls[order] += 1
        cursor = context.connection.cursor()
        kept.setdefault("raw", cursor.connection)
        shop.insert(cursor, order)
        context.send("out", f"for {order}")
        if order == OFFENDER:
            misbehave(context, target.engine, shop, kept)

    pump = MessagePump(queue, handler, batch_size=batch_size, immediate_retries=RETRIES, **FAST)
    stats = pump.run(until_empty=True, timeout=60)

    rows, sent, failed = shop.rows(), shop.bodies("out"), shop.bodies("error")
    others = [order for order in ORDERS if order != OFFENDER]
    assert queue.count() == 0, "every message was settled"
    assert pump.stop_reason == "empty", "bounded: the run ended by itself"
    assert {order: rows[order] for order in others} == dict.fromkeys(others, 1), "each other order once"
    assert {f"for {order}": sent[f"for {order}"] for order in others} == {f"for {o}": 1 for o in others}
    assert set(failed) <= {OFFENDER} and failed[OFFENDER] <= 1
    assert rows[OFFENDER] <= 1 and rows[OFFENDER + "-after"] <= 1 and sent[f"for {OFFENDER}"] <= 1
    assert calls[OFFENDER] <= RETRIES + 1, "no endless loop: the retries bound the offender's calls"
    assert stats.failed == failed[OFFENDER] and stats.processed == len(ORDERS) - stats.failed
    handled = failed[OFFENDER] + rows[OFFENDER] - (1 if rows[OFFENDER] and failed[OFFENDER] else 0)
    assert handled >= 1, "the offender was processed or is in the error queue: not lost"
    expected = expected_error_copies(abuse, target)
    if expected is not None:
        assert failed[OFFENDER] == expected
    if expected == 0:
        assert rows[OFFENDER] == 1 and sent[f"for {OFFENDER}"] == 1
    if failed[OFFENDER] and abuse not in ("sql_commit", "raw_commit", "kept_raw_commit"):
        # rolled back or failed: its work is undone with the receive. A write after the handler's ROLLBACK
        # commits on its own on SQLite (autocommit) and Babelfish: the one row the pump cannot take back;
        # on PostgreSQL it is in the next transaction, which the pump rolls back
        assert rows[OFFENDER] == 0
        if abuse == "sql_rollback_then_write" and target.engine == "postgresql":
            assert rows[OFFENDER + "-after"] == 0


@pytest.mark.parametrize("target", ["sqlite", "postgresql", "sqlserver-freetds"], indirect=True)
def test_the_driver_connection_lent_to_a_handler_refuses_ending_and_is_withdrawn(
    target, transport: Transport
) -> None:
    shop = Shop(transport)
    queue = transport.queue("orders")
    queue.send(b"o1")
    seen: dict[str, Any] = {}

    def handler(message: Any, context: Any) -> None:
        driver = context.connection.dbapi_connection
        seen["driver"] = driver
        seen["is_driver_type"] = isinstance(driver, type(context.connection.cursor().connection))
        for method in ("commit", "rollback", "close"):
            with pytest.raises(ConfigurationError, match="refused"):
                getattr(driver, method)()
        shop.insert(driver.cursor(), "o1")  # everything else is the driver's own

    stats = MessagePump(queue, handler, **FAST).run(until_empty=True, timeout=30)
    assert stats.processed == 1 and shop.rows() == Counter({"o1": 1})
    assert seen["is_driver_type"], "libraries that check the driver's type accept it"
    with pytest.raises(ConfigurationError, match="has ended"):
        seen["driver"].cursor()


def test_a_batch_whose_first_writer_fails_rolls_back_to_its_savepoint_and_carries_on(
    target, transport: Transport
) -> None:
    """No false alarm: the first handler of a batch to use the connection (the pump names the transaction
    then) writes and fails on its first attempt; rolling back to its savepoint must not read as the
    transaction ended (on Babelfish that rollback releases what was taken after the savepoint began)."""
    shop = Shop(transport)
    queue = transport.queue("orders")
    queue.send_batch([order.encode() for order in ORDERS])
    attempts: Counter[str] = Counter()
    lock = threading.Lock()

    def handler(message: Any, context: Any) -> None:
        order = message.body.decode()
        with lock:
            attempts[order] += 1
            first_attempt = attempts[order] == 1
        shop.insert(context.connection.cursor(), order)
        if order == ORDERS[0] and first_attempt:
            raise ValueError("fails once")

    pump = MessagePump(queue, handler, batch_size=10, immediate_retries=RETRIES, **FAST)
    stats = pump.run(until_empty=True, timeout=60)
    assert shop.rows() == Counter(ORDERS), "each order once: the failed attempt's row rolled back"
    assert shop.bodies("error") == Counter() and queue.count() == 0
    assert stats.processed == len(ORDERS) and stats.failed == 0 and stats.retried == 1
    assert attempts == Counter({order: 2 if order == ORDERS[0] else 1 for order in ORDERS})


# ---- a batching pump on PostgreSQL reads the transaction's name behind a handler's first statement ---------
@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
@pytest.mark.parametrize("ending", ["COMMIT AND CHAIN", "ROLLBACK AND CHAIN"])
def test_a_first_statement_that_ends_the_transaction_and_begins_the_next_is_seen(
    target, transport: Transport, ending: str
) -> None:
    """The pump reads the transaction's name in the pipeline of the handler's first statement, and does not
    read it again when that statement was the handler's only one. ``COMMIT AND CHAIN`` and ``ROLLBACK AND
    CHAIN`` are one command each that leaves a new transaction open, as a statement that ends the receive's
    and begins another would: the name read behind it says so. No handler here reaches the driver's own
    object (which would make the pump read the name after every handler instead)."""
    shop = Shop(transport)
    queue = transport.queue("orders")
    queue.send_batch([order.encode() for order in ORDERS])
    calls: Counter[str] = Counter()
    lock = threading.Lock()

    def handler(message: Any, context: Any) -> None:
        order = message.body.decode()
        with lock:
            calls[order] += 1
        if order == OFFENDER:
            context.connection.execute(ending)
        else:
            shop.insert(context.connection.cursor(), order)

    pump = MessagePump(queue, handler, batch_size=10, immediate_retries=RETRIES, **FAST)
    stats = pump.run(until_empty=True, timeout=60)
    assert not pump.driver_reached
    others = [order for order in ORDERS if order != OFFENDER]
    rows, failed = shop.rows(), shop.bodies("error")
    assert queue.count() == 0 and pump.stop_reason == "empty"
    assert rows == Counter(others), "each other order once, none lost, none twice"
    assert failed == Counter({OFFENDER: 1}), "the offender is in the error queue, once"
    assert calls[OFFENDER] <= RETRIES + 1
    assert stats.failed == 1 and stats.processed == len(others)


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_first_statement_of_several_commands_runs_as_outside_a_pipeline(
    target, transport: Transport
) -> None:
    """psycopg runs a text of several commands without parameters outside a pipeline, not inside one: the
    handler's first statement, sent with its savepoint in one, runs again outside it."""
    shop = Shop(transport)
    queue = transport.queue("orders")
    queue.send_batch([order.encode() for order in ORDERS])

    def handler(message: Any, context: Any) -> None:
        order = message.body.decode()
        context.connection.execute(
            f"INSERT INTO {shop.table} (order_id) VALUES ('{order}'); "
            f"INSERT INTO {shop.table} (order_id) VALUES ('{order}-2')"
        )

    stats = MessagePump(queue, handler, batch_size=10, **FAST).run(until_empty=True, timeout=60)
    assert stats.processed == len(ORDERS) and stats.failed == 0
    assert shop.rows() == Counter([*ORDERS, *(f"{order}-2" for order in ORDERS)])


def sql_rollback_begin_then_write(context: Any, engine: str, shop: Shop, kept: dict[str, Any]) -> None:
    context.connection.execute("ROLLBACK")
    context.connection.execute(_begin_statement(engine))
    shop.insert(context.connection.cursor(), OFFENDER + "-after")


FOLLOWED = {f.__name__: f for f in (sql_commit, sql_rollback_then_write, sql_rollback_begin_then_write)}


@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
@pytest.mark.parametrize("batch_size", [1, 10], ids=["single", "batching"])
@pytest.mark.parametrize("abuse", list(FOLLOWED))
def test_a_handler_that_uses_only_the_lent_statements_is_followed_statement_by_statement(
    target, transport: Transport, abuse: str, batch_size: int
) -> None:
    """Handlers that never reach the driver's own objects: the pump follows their statements. On SQLite it
    reads the driver's state after each one instead of querying the queue after the handler
    (``state_follows_statements``), so an end followed by a statement that opens the next transaction
    (``ROLLBACK``, ``BEGIN``, a write) must still be seen as the end it was."""
    shop = Shop(transport)
    queue = transport.queue("orders")
    queue.send_batch([order.encode() for order in ORDERS])
    calls: Counter[str] = Counter()

    def handler(message: Any, context: Any) -> None:
        order = message.body.decode()
        calls[order] += 1
        shop.insert(context.connection.cursor(), order)
        if order == OFFENDER:
            FOLLOWED[abuse](context, target.engine, shop, {})

    pump = MessagePump(queue, handler, batch_size=batch_size, immediate_retries=RETRIES, **FAST)
    stats = pump.run(until_empty=True, timeout=60)

    rows, failed = shop.rows(), shop.bodies("error")
    others = [order for order in ORDERS if order != OFFENDER]
    assert not pump.driver_reached, "the handler stayed on the lent connection's statements"
    assert queue.count() == 0 and pump.stop_reason == "empty"
    assert {order: rows[order] for order in others} == dict.fromkeys(others, 1), "each other order once"
    assert failed == Counter({OFFENDER: 1}), "the offender, once, in the error queue"
    assert calls[OFFENDER] <= RETRIES + 1
    assert stats.failed == 1 and stats.processed == len(ORDERS) - 1
    if abuse != "sql_commit":  # what ran before a ROLLBACK is undone; what ran after it, with the receive
        assert rows[OFFENDER] == 0
    if abuse == "sql_rollback_begin_then_write":
        assert rows[OFFENDER + "-after"] == 0
