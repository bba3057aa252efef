"""A receive takes at most the rows it asks for, whatever plan PostgreSQL chooses.

``DELETE ... WHERE RowVersion IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)`` is only safe while the
planner hashes the subquery's result. Once table statistics make a nested-loop semi join cheaper, the
subquery is rescanned for every row of the outer scan; each rescan skips the rows the statement has already
deleted (they are "modified by this command") and picks the next ones, so a receive of one message deletes
the whole queue and hands back rows nobody asked for. The two-hour soak found it as lost messages once
autovacuum's ANALYZE ran. These tests force that plan with planner settings on the session and check every
statement that deletes a picked set: receive (row and advisory locks), purge and the delayed mover.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from urllib.parse import quote

import psycopg
import pytest
from conftest import EngineTarget
from sqlalchemy.engine import make_url

from airflow_provider_sqlqueue.transport import (
    DelayedStore,
    MessagePump,
    OutgoingMessage,
    SqlQueueError,
    Transport,
    open_transport,
)

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("target", ["postgresql"], indirect=True)]

# Every join method but the nested loop switched off, and no Material node to cache the inner side: the
# plan that rescans the subquery for each outer row.
NESTED_LOOP_ONLY = (
    "-c enable_hashjoin=off -c enable_mergejoin=off -c enable_hashagg=off -c enable_material=off "
    "-c enable_memoize=off -c enable_sort=off"
)


def nested_loop_url(target: EngineTarget) -> str:
    return f"{target.url}?options={quote(NESTED_LOOP_ONLY)}"


@pytest.fixture
def forced(target: EngineTarget) -> Iterator[Transport]:
    with target.open() as admin:
        admin.queue("orders").create()
        admin.queue("error").create()
    with open_transport(nested_loop_url(target), default_schema=target.schema) as transport:
        yield transport


def raw_connection(target: EngineTarget) -> psycopg.Connection:
    url = make_url(nested_loop_url(target))
    return psycopg.connect(
        host=url.host,
        port=url.port,
        user=url.username,
        password=url.password,
        dbname=url.database,
        options=NESTED_LOOP_ONLY,
    )


def test_the_session_really_plans_a_rescanned_subquery(target: EngineTarget, forced: Transport) -> None:
    """Guards the guard: with these settings the old statement form deletes more than its LIMIT."""
    table = f'"{target.schema}"."orders"'
    forced.queue("orders").send_batch([b"m%d" % n for n in range(20)])
    with raw_connection(target) as connection:
        plan = "\n".join(
            row[0]
            for row in connection.execute(
                f"EXPLAIN DELETE FROM {table} WHERE RowVersion IN (SELECT RowVersion FROM {table} "
                "ORDER BY RowVersion LIMIT 1 FOR UPDATE SKIP LOCKED)"
            )
        )
        assert "Nested Loop Semi Join" in plan, plan
        deleted = connection.execute(
            f"DELETE FROM {table} WHERE RowVersion IN (SELECT RowVersion FROM {table} "
            "ORDER BY RowVersion LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING RowVersion"
        ).fetchall()
        connection.rollback()
    assert len(deleted) == 20


@pytest.mark.parametrize("lock_mode", ["row", "advisory"])
def test_a_receive_takes_only_what_it_asks_for_under_a_nested_loop_plan(
    target: EngineTarget, lock_mode: str
) -> None:
    with target.open() as admin:
        admin.queue("orders").create()
        admin.queue("orders").send_batch([b"m%d" % n for n in range(50)])
    with open_transport(nested_loop_url(target), default_schema=target.schema, lock_mode=lock_mode) as forced:
        queue = forced.queue("orders", error_queue=None)
        with queue.receive(1) as batch:
            assert [m.body for m in batch] == [b"m0"]
        assert queue.count() == 49
        with queue.receive(10) as batch:
            assert [m.body for m in batch] == [b"m%d" % n for n in range(1, 11)]
        assert queue.count() == 39


@pytest.mark.parametrize("lock_mode", ["row", "advisory"])
def test_a_receive_through_a_row_version_takes_none_above_it_and_at_most_its_size_under_a_nested_loop_plan(
    target: EngineTarget, lock_mode: str
) -> None:
    """The receive a Spark stream under Trigger.AvailableNow makes on PostgreSQL (parameters: the newest
    RowVersion it takes, how many)."""
    with target.open() as admin:
        admin.queue("orders").create()
        admin.queue("orders").send_batch([b"m%d" % n for n in range(30)])
    with open_transport(nested_loop_url(target), default_schema=target.schema, lock_mode=lock_mode) as forced:
        queue = forced.queue("orders", error_queue=None)
        with forced.connection(queue.address) as connection:
            cursor = connection.cursor()
            cursor.execute(f'SELECT RowVersion FROM "{target.schema}"."orders" ORDER BY RowVersion')
            through = [row[0] for row in cursor.fetchall()][11]
            if lock_mode == "row":
                statement = forced.dialect.optional_sql("receive_batch_through", queue.address)
            else:
                statement = forced.dialect.optional_sql(
                    "receive_batch_through_without_row_locks", queue.address
                )
            assert statement is not None
            taken = [
                len(forced.dialect.receive_rows(cursor, queue.address, statement, size, through))
                for size in (5, 10, 10)
            ]
            connection.commit()
        assert taken == [5, 7, 0]
        with queue.receive(100) as batch:
            assert [m.body for m in batch] == [b"m%d" % n for n in range(12, 30)]


def test_the_pump_loses_nothing_under_a_nested_loop_plan(forced: Transport) -> None:
    queue = forced.queue("orders")
    queue.send_batch([b"m%d" % n for n in range(200)])
    seen: list[bytes] = []
    pump = MessagePump(queue, lambda message: seen.append(message.body), max_concurrency=2)
    stats = pump.run(until_empty=True, timeout=60)
    assert sorted(seen) == sorted(b"m%d" % n for n in range(200))
    assert stats.processed == 200 and queue.count() == 0


def test_a_purge_batch_deletes_at_most_its_size_under_a_nested_loop_plan(
    target: EngineTarget, forced: Transport
) -> None:
    queue = forced.queue("orders")
    queue.send_batch(
        [OutgoingMessage(b"e%d" % n, time_to_be_received=timedelta(microseconds=1)) for n in range(30)]
    )
    queue.send(b"lasting")
    statement = forced.dialect.sql("purge_expired_batch", queue.address)
    with raw_connection(target) as connection:
        deleted = connection.execute(statement, (5,)).rowcount
        connection.commit()
    assert deleted == 5
    assert queue.purge_expired(batch_size=1000) == 25
    assert queue.count() == 1


def test_a_delayed_move_batch_takes_at_most_its_size_under_a_nested_loop_plan(
    target: EngineTarget, forced: Transport
) -> None:
    store = DelayedStore(forced, "orders.Delayed")
    store.create()
    for n in range(12):
        store.store("orders", OutgoingMessage(b"d%d" % n), delay=timedelta(0))
    statement = forced.dialect.sql("select_due_delayed", store.address)
    with raw_connection(target) as connection:
        moved = connection.execute(statement, (3,)).fetchall()
        connection.rollback()
    assert len(moved) == 3


def test_a_receive_that_deletes_more_than_it_asked_for_is_rolled_back(
    target: EngineTarget, forced: Transport
) -> None:
    """The last line of defence, should some engine or plan ever ignore the limit: nothing is lost."""
    queue = forced.queue("orders", error_queue=None)
    queue.send_batch([b"m%d" % n for n in range(50)])
    table = f'"{target.schema}"."orders"'
    unlimited = (
        f"DELETE FROM {table} WHERE RowVersion IN (SELECT RowVersion FROM {table} ORDER BY RowVersion "
        "LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING Id, CorrelationId, ReplyToAddress, false, Headers, Body, "
        "RowVersion, Expires"
    )
    queue._sql.receive_batch = unlimited  # the statement form the planner can rescan
    expected = r"a receive of at most 1 from .* deleted 50 rows; it was rolled back"
    with pytest.raises(SqlQueueError, match=expected), queue.receive(1):
        pytest.fail("the batch must not be handed out")
    assert queue.count() == 50
