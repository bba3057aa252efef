"""The low-water mark of receives on PostgreSQL (transport/queue/low_water.py): a drain stops walking the
index entries of the messages it already took, and a message left behind the mark (another receiver's
rollback) is still received, at once, exactly once."""

from __future__ import annotations

import time

import pytest
from conftest import EngineTarget

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


def index_pages_read(transport: Transport, statement: str, params: tuple) -> int:
    import json

    with transport.connection() as connection:
        cursor = connection.cursor()
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", params)
        plan = cursor.fetchone()[0]
        connection.rollback()
    if isinstance(plan, str):
        plan = json.loads(plan)
    node = plan[0]["Plan"]
    return int(node.get("Shared Hit Blocks", 0)) + int(node.get("Shared Read Blocks", 0))


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
