"""A ``sqlqueue`` stream read in place on PostgreSQL (``spark/source/in_place.py``), the reader's methods
driven as Spark drives them: the driver's uncommitted delete holds a micro-batch in the queue until the
next ``latestOffset`` says it is in the commit log; a dead driver's batch goes back to the queue and a
restart from the checkpoint replays or settles it; a new checkpoint applies ``onUncommittedBatch``;
unreadable headers reach the error queue with the batch; where the driver cannot hold, the stream stages.

Every test counts what is queued, held, delivered and in the error queue with the database's own counts.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs a Java runtime (apt-get install default-jre-headless)", allow_module_level=True)

from test_spark_jobs import send_orders, send_unreadable, table
from test_spark_source import message_ids, queues, rows_read, source_options, staged_under

from airflow_provider_sqlqueue.spark.source import SourceOptions
from airflow_provider_sqlqueue.spark.source.in_place import is_in_place
from airflow_provider_sqlqueue.transport import ConfigurationError

pytestmark = pytest.mark.parametrize("target", ["postgresql"], indirect=True)
__all__ = ["queues"]  # test_spark_source's fixture: the orders and error queues and the bridge's tables


STARTED: list = []  # this test's readers, stopped before its queues go (a held batch locks their rows)


@pytest.fixture(autouse=True)
def stop_readers(queues):
    yield
    while STARTED:
        STARTED.pop().stop()


def new_reader(target, **options: str):
    from airflow_provider_sqlqueue.spark.source.stream import SqlQueueStreamReader

    reader = SqlQueueStreamReader(SourceOptions.parse(source_options(target, batchSize="4", **options)))
    STARTED.append(reader)
    return reader


def read_all(stream_reader, start: dict, end: dict) -> list[dict]:
    return [row for part in stream_reader.partitions(start, end) for row in rows_read(stream_reader, part)]


def read_to_the_end(stream_reader, start: dict, triggers: int = 10) -> tuple[list[str], bool]:
    """Drive micro-batches from ``start`` as Trigger.AvailableNow does: the message ids delivered, and
    whether the query ended (an offset that did not move) within ``triggers``."""
    delivered: list[str] = []
    for _ in range(triggers):
        end = stream_reader.latestOffset(start, stream_reader.getDefaultReadLimit())
        if end == start:
            return delivered, True
        delivered += [row["message_id"] for row in read_all(stream_reader, start, end)]
        start = end
    return delivered, False


def receive_ids(transport, count: int) -> list[str]:
    """What a competing receiver gets from the orders queue now."""
    with transport.queue("orders").receive(max_messages=count) as batch:
        return [message.message_id for message in batch]


def test_a_batch_is_held_in_the_queue_until_the_next_latest_offset(target, queues) -> None:
    """No staging row is written; a competing receiver gets only messages after the held ones (planning a
    batch holds the next one ahead); the executors read the held rows in order; they leave the queue when
    Spark asks for the next end."""
    sent = message_ids(send_orders(queues, 25))
    stream_reader = new_reader(target, maxMessagesPerTrigger="10")
    start = stream_reader.initialOffset()
    assert start["ranges"] == []
    end = stream_reader.latestOffset(start, stream_reader.getDefaultReadLimit())
    assert staged_under(queues, "stream:orders") == 0
    assert receive_ids(queues, 3) == sent[10:13]
    rows = read_all(stream_reader, start, end)
    assert [row["message_id"] for row in rows] == sent[:10]
    assert queues.queue("orders").count() == 22  # held rows are still the queue's until settled
    stream_reader.wait_for_staging_ahead()  # planning the batch started holding the next one
    assert receive_ids(queues, 1) == sent[23:24]
    following = stream_reader.latestOffset(end, stream_reader.getDefaultReadLimit())
    assert [row["message_id"] for row in read_all(stream_reader, end, following)] == sent[13:23]
    assert queues.queue("orders").count() == 11
    last = stream_reader.latestOffset(following, stream_reader.getDefaultReadLimit())
    assert [row["message_id"] for row in read_all(stream_reader, following, last)] == sent[24:]
    assert stream_reader.latestOffset(last, stream_reader.getDefaultReadLimit()) == last
    assert queues.queue("orders").count() == 0
    stream_reader.stop()


def test_a_dead_drivers_batch_is_replayed_or_settled_from_the_checkpoint(target, queues) -> None:
    """The driver stops holding (its connection goes): the batch is queued again. A restarted query replays
    it from the offsets in its checkpoint (the same messages), or, when the batch reached the commit log,
    deletes it before taking the next."""
    sent = message_ids(send_orders(queues, 12))
    first = new_reader(target, maxMessagesPerTrigger="5")
    start = first.initialOffset()
    end = first.latestOffset(start, first.getDefaultReadLimit())
    assert [row["message_id"] for row in read_all(first, start, end)] == sent[:5]
    first.stop()  # as a killed driver's connection: the hold rolls back
    assert queues.queue("orders").count() == 12

    replayed = new_reader(target, maxMessagesPerTrigger="5")
    assert [row["message_id"] for row in read_all(replayed, start, end)] == sent[:5]
    replayed.stop()
    assert queues.queue("orders").count() == 12

    settled = new_reader(target, maxMessagesPerTrigger="5")  # batch end in the commit log
    following = settled.latestOffset(end, settled.getDefaultReadLimit())
    assert queues.queue("orders").count() == 7  # the first five gone, the next five held
    assert [row["message_id"] for row in read_all(settled, end, following)] == sent[5:10]
    settled.stop()


def test_a_new_checkpoint_applies_on_uncommitted_batch_to_a_batch_never_settled(target, queues) -> None:
    sent = message_ids(send_orders(queues, 8))
    first = new_reader(target, maxMessagesPerTrigger="3")
    start = first.initialOffset()
    end = first.latestOffset(start, first.getDefaultReadLimit())
    read_all(first, start, end)
    first.stop()
    for staged in ("true", "false"):  # a staging query on the stream id refuses it too
        with pytest.raises(ConfigurationError, match="never committed to this source"):
            new_reader(target, readInPlace=staged).initialOffset()
    assert queues.queue("orders").count() == 8

    redelivering = new_reader(target, onUncommittedBatch="redeliver", maxMessagesPerTrigger="3")
    again = redelivering.initialOffset()
    after = redelivering.latestOffset(again, redelivering.getDefaultReadLimit())
    assert [row["message_id"] for row in read_all(redelivering, again, after)] == sent[:3]
    redelivering.stop()

    discarding = new_reader(target, onUncommittedBatch="discard")
    fresh = discarding.initialOffset()
    assert queues.queue("orders").count() == 5
    last = discarding.latestOffset(fresh, discarding.getDefaultReadLimit())
    assert [row["message_id"] for row in read_all(discarding, fresh, last)] == sent[3:]
    discarding.stop()


def test_unreadable_headers_go_to_the_error_queue_with_the_batch(target, queues) -> None:
    before = message_ids(send_orders(queues, 2))
    send_unreadable(queues, "<not json")
    after = message_ids(send_orders(queues, 2, first_order_id=3))
    stream_reader = new_reader(target)
    start = stream_reader.initialOffset()
    end = stream_reader.latestOffset(start, stream_reader.getDefaultReadLimit())
    assert [row["message_id"] for row in read_all(stream_reader, start, end)] == before + after
    assert queues.queue("error").count() == 0  # until the batch is in the sink
    assert stream_reader.latestOffset(end, stream_reader.getDefaultReadLimit()) == end
    assert queues.queue("error").count() == 1 and queues.queue("orders").count() == 0
    stream_reader.stop()


def test_where_the_driver_cannot_hold_the_stream_stages(target, queues, caplog) -> None:
    """A session limit that would end the hold: the default stages (and says why), ``readInPlace`` true is
    refused before anything is received; ``readInPlace`` false stages."""
    send_orders(queues, 3)
    limited = {
        "url": source_options(target)["url"] + "?options=-c%20idle_in_transaction_session_timeout%3D60s"
    }
    with caplog.at_level(logging.INFO, logger="airflow_provider_sqlqueue.spark"):
        staging = new_reader(target, **limited)
        assert "ranges" not in staging.initialOffset()
    assert "idle_in_transaction_session_timeout" in caplog.text
    with pytest.raises(ConfigurationError, match="cannot read in place"):
        new_reader(target, readInPlace="true", **limited).initialOffset()
    plain = new_reader(target, readInPlace="false", streamId="plain")
    assert "ranges" not in plain.initialOffset()
    assert queues.queue("orders").count() == 3


def test_a_query_restarted_from_a_checkpoint_older_than_the_streams_newest_holds_nothing(
    target, queues
) -> None:
    """A holds a batch and dies; B starts from a new checkpoint (redeliver) and holds the same messages. A
    restarted from its checkpoint fails at once, without waiting on B's held rows or deleting any; B
    settles its batch as usual."""
    sent = message_ids(send_orders(queues, 12))
    a = new_reader(target, maxMessagesPerTrigger="5")
    a_start = a.initialOffset()
    a_end = a.latestOffset(a_start, a.getDefaultReadLimit())
    assert [row["message_id"] for row in read_all(a, a_start, a_end)] == sent[:5]
    a.stop()
    b = new_reader(target, maxMessagesPerTrigger="8", onUncommittedBatch="redeliver")
    b_start = b.initialOffset()
    b_end = b.latestOffset(b_start, b.getDefaultReadLimit())
    assert [row["message_id"] for row in read_all(b, b_start, b_end)] == sent[:8]
    for call in (
        lambda restarted: restarted.partitions(a_start, a_end),
        lambda restarted: restarted.latestOffset(a_end, restarted.getDefaultReadLimit()),
        lambda restarted: restarted.commit(a_end),
    ):
        with pytest.raises(
            ConfigurationError, match="a query started on this stream id from a new checkpoint"
        ):
            call(new_reader(target, maxMessagesPerTrigger="5"))
    assert queues.queue("orders").count() == 12  # B's batch is held, not settled
    last = b.latestOffset(b_end, b.getDefaultReadLimit())
    assert [row["message_id"] for row in read_all(b, b_end, last)] == sent[8:]
    b.latestOffset(last, b.getDefaultReadLimit())
    assert queues.queue("orders").count() == 0


@pytest.mark.parametrize("read_in_place", ["true", "false"])
def test_available_now_takes_no_message_sent_after_the_query_started(target, queues, read_in_place) -> None:
    """Trigger.AvailableNow on PostgreSQL stops at the queue's newest RowVersion when the query starts, read
    in place or staged: another receiver taking some of the earlier messages meanwhile does not let the
    query take later ones in their place, and the query ends with the later ones still queued."""
    sent = message_ids(send_orders(queues, 12))
    stream_reader = new_reader(target, maxMessagesPerTrigger="5", readInPlace=read_in_place)
    stream_reader.prepareForTriggerAvailableNow()  # Spark calls it before the query's first offset
    later = message_ids(send_orders(queues, 7, first_order_id=13))
    taken_by_another = receive_ids(queues, 3)
    assert taken_by_another == sent[:3]
    start = stream_reader.initialOffset()
    assert is_in_place(start) == (read_in_place == "true")
    delivered, ended = read_to_the_end(stream_reader, start)
    assert delivered == sent[3:]
    assert ended and queues.queue("orders").count() == len(later)
    assert receive_ids(queues, len(later)) == later


@pytest.mark.parametrize("read_in_place", ["true", "false"])
def test_available_now_takes_a_message_whose_send_committed_after_the_query_started(
    target, queues, read_in_place
) -> None:
    """A send that began before the query started and commits after it has a RowVersion below the one the
    query stops at: the query takes it with the others. A staged stream that counted the queue instead got
    one fewer than it took and left the newest of the earlier messages queued."""
    with queues.connection() as sender:
        late = uuid.uuid4()
        sender.cursor().execute(
            f"INSERT INTO {table(queues, 'orders')} (Id, Recoverable, Headers, Body) "
            "VALUES (%s, true, %s, %s)",
            (late, "{}", b"{}"),
        )
        sent = message_ids(send_orders(queues, 6))
        stream_reader = new_reader(target, maxMessagesPerTrigger="5", readInPlace=read_in_place)
        stream_reader.prepareForTriggerAvailableNow()
        start = stream_reader.initialOffset()
        first = stream_reader.latestOffset(start, stream_reader.getDefaultReadLimit())
        sender.commit()
    later = message_ids(send_orders(queues, 2, first_order_id=7))
    delivered = [row["message_id"] for row in read_all(stream_reader, start, first)]
    delivered += read_to_the_end(stream_reader, first)[0]
    assert sorted(delivered) == sorted([str(late), *sent])
    assert receive_ids(queues, 10) == later
