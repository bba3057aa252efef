"""The low-water mark of receives on PostgreSQL (transport/queue/low_water.py): a drain stops walking the
index entries of the messages it already took, and a message left behind the mark (another receiver's
rollback) is still received, at once, exactly once."""

from __future__ import annotations

import time

import pytest
from conftest import EngineTarget

from airflow_provider_sqlqueue.dialects.postgres import AFTER_ROW_VERSION
from airflow_provider_sqlqueue.transport import Transport
from airflow_provider_sqlqueue.transport.queue.low_water import LowWaterMark


def test_the_mark_moves_past_full_batches_and_is_forgotten_on_a_short_one() -> None:
    mark = LowWaterMark(reset_seconds=60)
    assert mark.position() is None
    mark.taken(100, asked=100, got=100)
    assert mark.position() == 100
    mark.taken(250, asked=100, got=100)
    assert mark.position() == 250
    mark.taken(90, asked=100, got=100)  # an older batch finishing late never moves it back
    assert mark.position() == 250
    mark.taken(260, asked=100, got=10)
    assert mark.position() is None
    mark.taken(300, asked=10, got=10)
    mark.reset()
    assert mark.position() is None
    mark.taken(None, asked=10, got=0)
    assert mark.position() is None


def test_the_mark_is_forgotten_after_its_reset_interval() -> None:
    mark = LowWaterMark(reset_seconds=0.2)
    mark.taken(100, asked=100, got=100)
    mark.taken(200, asked=100, got=100)  # moving it does not restart the clock
    assert mark.position() == 200
    time.sleep(0.25)
    assert mark.position() is None


def row_versions(batch) -> list[int]:
    return [message.row_version for message in batch]


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_message_behind_the_mark_is_received_next_exactly_once(target: EngineTarget) -> None:
    with target.open() as first, target.open() as second:
        first.queue("error").create()
        queue = first.queue("orders")
        queue.create()
        queue.send_batch([f"m{n}" for n in range(300)])
        other = second.queue("orders")

        with queue.receive(100) as batch:
            taken = row_versions(batch)
        assert queue._low_water.position() == max(taken)

        with pytest.raises(RuntimeError), other.receive(100) as held:
            held_versions = row_versions(held)
            with queue.receive(100) as batch:  # skips the held rows: after the mark, past the locks
                after = row_versions(batch)
            raise RuntimeError("the other receiver fails: its 100 messages go back, behind the mark")
        assert min(after) > max(held_versions) > min(held_versions) > max(taken)
        assert queue._low_water.position() == max(after)

        with queue.receive(100) as batch:  # nothing after the mark: topped up from the start at once
            back = row_versions(batch)
        assert back == sorted(held_versions)
        assert queue._low_water.position() is None
        assert queue.count() == 0
        assert sorted(taken + after + back) == sorted(set(taken + after + back))


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_rolled_back_receive_is_taken_again_first(target: EngineTarget) -> None:
    with target.open() as transport:
        transport.queue("error").create()
        queue = transport.queue("orders")
        queue.create()
        queue.send_batch([f"m{n}" for n in range(250)])
        with queue.receive(100) as batch:
            first = row_versions(batch)
        with pytest.raises(RuntimeError), queue.receive(100) as batch:
            second = row_versions(batch)
            raise RuntimeError("the handler fails: the batch rolls back")
        with queue.receive(100) as batch:
            assert row_versions(batch) == second, "the rolled-back batch comes back first, in order"
        assert min(second) > max(first)


def explained(transport: Transport, options: str, statement: str, params: tuple) -> dict:
    """The top node of ``EXPLAIN (options, FORMAT JSON) statement``, in a transaction rolled back."""
    import json

    with transport.connection() as connection:
        cursor = connection.cursor()
        cursor.execute(f"EXPLAIN ({options}FORMAT JSON) {statement}", params)
        plan = cursor.fetchone()[0]
        connection.rollback()
    if isinstance(plan, str):
        plan = json.loads(plan)
    return plan[0]["Plan"]  # type: ignore[no-any-return]


def index_pages_read(transport: Transport, statement: str, params: tuple) -> int:
    node = explained(transport, "ANALYZE, BUFFERS, ", statement, params)
    return int(node.get("Shared Hit Blocks", 0)) + int(node.get("Shared Read Blocks", 0))


def plan_nodes(transport: Transport, statement: str, params: tuple) -> set[str]:
    """The node types of ``statement``'s plan (EXPLAIN only: nothing runs)."""
    found: set[str] = set()
    nodes = [explained(transport, "", statement, params)]
    while nodes:
        node = nodes.pop()
        found.add(node["Node Type"])
        nodes.extend(node.get("Plans", []))
    return found


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_drain_after_the_mark_reads_the_head_of_the_queue_not_its_dead_past(target: EngineTarget) -> None:
    with target.open() as transport:
        transport.queue("error").create()
        queue = transport.queue("orders")
        queue.create()
        # The mark's own reset (one second) would send a slow run's receives back to the start of the
        # index, and that walk marks the dead entries it passes, which is what this test measures.
        queue._low_water = LowWaterMark(reset_seconds=3600)
        queue.send_batch([f"m{n}" for n in range(20_000)])
        with transport.connection() as connection:  # autovacuum must not tidy up behind the test's back
            connection.cursor().execute(
                f"ALTER TABLE {transport.dialect.qualified_name(queue.address)} "
                "SET (autovacuum_enabled = false)"
            )
            connection.commit()
        for _ in range(190):
            with queue.receive(100):
                pass
        mark = queue._low_water.position()
        assert mark is not None
        table = transport.dialect.qualified_name(queue.address)
        from_start = f"SELECT RowVersion FROM {table} ORDER BY RowVersion LIMIT 100 FOR UPDATE SKIP LOCKED"
        after_mark = (
            f"SELECT RowVersion FROM {table} WHERE RowVersion > %s "
            "ORDER BY RowVersion LIMIT 100 FOR UPDATE SKIP LOCKED"
        )
        dead_walk = index_pages_read(transport, from_start, ())
        direct = index_pages_read(transport, after_mark, (mark,))
        assert direct * 5 < dead_walk, (direct, dead_walk)
        assert queue.count() == 1_000


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_receive_after_the_mark_walks_the_index_even_when_the_statistics_lag_the_queue(
    target: EngineTarget,
) -> None:
    """Statistics taken when the queue held other RowVersions make the planner expect a few rows after a
    mark where tens of thousands lie. Written with the mark in plain sight, the pick then reads and sorts all
    of them; written as the dialect writes it, the planner cannot see the mark and walks the index."""
    with target.open() as transport:
        queue = transport.queue("orders")
        queue.create()
        table = transport.dialect.qualified_name(queue.address)
        with transport.connection() as connection:
            connection.cursor().execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
            connection.commit()
        queue.send_batch([f"old{n}" for n in range(20_000)])
        with transport.connection() as connection:  # a used queue: new rows land in the holes of old ones
            connection.cursor().execute(f"DELETE FROM {table} WHERE RowVersion %% 2 = 0", ())
            connection.commit()
        queue.vacuum()
        queue.send_batch([f"mid{n}" for n in range(10_000)])
        with transport.connection() as connection:
            connection.cursor().execute(f"ANALYZE {table}")
            connection.commit()
        for _ in range(6):
            queue.send_batch([f"new{n}" for n in range(10_000)])
        with transport.connection() as connection:
            cursor = connection.cursor()
            cursor.execute(f"SELECT min(RowVersion), max(RowVersion) FROM {table}")
            low, high = cursor.fetchone()
            connection.rollback()
        mark = (low + high) // 2
        unseen = transport.dialect.optional_sql("receive_batch_after", queue.address)
        seen = unseen.replace(AFTER_ROW_VERSION, "RowVersion > %s")  # the mark in plain sight
        assert seen != unseen
        assert "Sort" in plan_nodes(transport, seen, (mark, 1000))  # misled: reads every row after the mark
        for batch in (100, 1000):
            assert "Sort" not in plan_nodes(transport, unseen, (mark, batch))
            assert index_pages_read(transport, unseen, (mark, batch)) < 8 * batch
        with queue.receive(100) as received:
            assert len(received) == 100
