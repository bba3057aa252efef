"""PostgreSQL batch sends through binary COPY: the same rows as the multi-row INSERT, in the same order,
and the INSERT wherever COPY cannot do the job (an expiry to compute from the database clock, a table with
other column types)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
import rawsql

from airflow_provider_sqlqueue.transport import OutgoingMessage, TransientDatabaseError, Transport

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("target", ["postgresql"], indirect=True)]


@pytest.fixture
def copies(transport: Transport, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """What each call of the dialect's bulk path answered (True: the rows went by COPY)."""
    answers: list[bool] = []
    original = transport.dialect.bulk_send

    def recorded(*args, **kwargs) -> bool:
        answers.append(original(*args, **kwargs))
        return answers[-1]

    monkeypatch.setattr(transport.dialect, "bulk_send", recorded)
    yield answers


def test_a_batch_goes_by_copy_and_round_trips_exactly_in_order(transport: Transport, copies) -> None:
    queue = transport.queue("orders")
    queue.create()
    messages = [
        OutgoingMessage(b"\x00binary\xff", {"Custom": "value", "Empty": None}),
        OutgoingMessage(
            b"", {"NServiceBus.CorrelationId": "corr-1", "NServiceBus.ReplyToAddress": "replies@[dbo]"}
        ),
        OutgoingMessage("text body: ünïcode".encode()),
        *[OutgoingMessage(b"m%d" % n) for n in range(47)],
    ]
    ids = queue.send_batch([*messages[:3], b"bare one", "bare two", *messages[3:]])
    assert copies == [True]
    rows = rawsql.execute(
        transport,
        f"SELECT Id, CorrelationId, ReplyToAddress, Recoverable, Expires FROM {rawsql.table_of(queue)} "
        "ORDER BY RowVersion",
    )
    assert [row[0] for row in rows] == ids
    assert all(row[3] is True and row[4] is None for row in rows)
    assert rows[1][1:3] == ("corr-1", "replies@[dbo]")
    with queue.receive(max_messages=100) as batch:
        received = list(batch)
    assert [m.id for m in received] == ids
    assert [m.body for m in received] == [
        b"\x00binary\xff",
        b"",
        "text body: ünïcode".encode(),
        b"bare one",
        b"bare two",
        *[b"m%d" % n for n in range(47)],
    ]
    assert received[0].headers["Custom"] == "value" and received[0].headers["Empty"] is None
    assert received[1].correlation_id == "corr-1" and received[1].reply_to_address == "replies@[dbo]"
    assert received[3].headers["NServiceBus.MessageId"] == str(ids[3])


def test_a_batch_with_a_time_to_be_received_takes_the_insert_and_the_database_clock(
    transport: Transport, copies
) -> None:
    queue = transport.queue("orders")
    queue.create()
    queue.send_batch([b"lasting", OutgoingMessage(b"brief", time_to_be_received=timedelta(hours=1))])
    assert copies == [False]
    rows = rawsql.execute(
        transport,
        f"SELECT Body, Expires - statement_timestamp() FROM {rawsql.table_of(queue)} ORDER BY RowVersion",
    )
    assert rows[0] == (b"lasting", None)
    assert timedelta(minutes=59) < rows[1][1] <= timedelta(hours=1)


def test_a_single_message_takes_the_insert(transport: Transport, copies) -> None:
    queue = transport.queue("orders")
    queue.create()
    queue.send_batch([b"one"])
    queue.send(b"two")
    assert copies == []
    assert queue.count() == 2


def test_a_table_with_other_column_types_takes_the_insert(transport: Transport, copies) -> None:
    queue = transport.queue("foreign")
    queue.create()
    rawsql.execute(transport, f"ALTER TABLE {rawsql.table_of(queue)} ALTER COLUMN Headers TYPE varchar(4000)")
    ids = queue.send_batch([b"a", b"b", b"c"])
    assert copies == []  # the check said no: the bulk path was never tried
    with queue.receive(max_messages=10) as batch:
        assert [m.id for m in batch] == ids


def test_a_table_without_recoverable_is_copied_without_it(transport: Transport, copies) -> None:
    queue = transport.queue("modern")
    queue.create()
    rawsql.execute(transport, f"ALTER TABLE {rawsql.table_of(queue)} DROP COLUMN Recoverable")
    ids = queue.send_batch([b"a", b"b"])
    assert copies == [True]
    with queue.receive(max_messages=10) as batch:
        assert [m.id for m in batch] == ids


def test_recoverable_dropped_under_a_batch_sender_is_retryable(transport: Transport, copies) -> None:
    queue = transport.queue("changing")
    queue.create()
    queue.send_batch([b"with", b"the column"])
    rawsql.execute(transport, f"ALTER TABLE {rawsql.table_of(queue)} DROP COLUMN Recoverable")
    with pytest.raises(TransientDatabaseError, match="Recoverable"):
        queue.send_batch([b"first", b"try"])
    queue.send_batch([b"second", b"try"])
    with queue.receive(max_messages=10) as batch:
        assert [m.body for m in batch] == [b"with", b"the column", b"second", b"try"]


def test_a_copy_inside_a_receive_rolls_back_with_it(transport: Transport, copies) -> None:
    source, destination = transport.queue("source"), transport.queue("destination")
    source.create()
    destination.create()
    source.send(b"trigger")
    with pytest.raises(RuntimeError, match="handler failed"), source.receive() as batch:
        batch.send_in_receive_transaction(destination, [b"x", b"y", b"z"])
        raise RuntimeError("handler failed")
    assert copies == [True]
    assert destination.count() == 0 and source.count() == 1
    with source.receive() as batch:
        batch.send_in_receive_transaction(destination, [b"x", b"y", b"z"])
    assert [m.body for m in destination.receive(max_messages=10).__enter__()] == [b"x", b"y", b"z"]


def test_a_failed_copy_sends_nothing_and_the_queue_stays_usable(transport: Transport, copies) -> None:
    queue = transport.queue("orders")
    queue.create()
    rawsql.execute(
        transport, f"ALTER TABLE {rawsql.table_of(queue)} ADD CONSTRAINT no_bad CHECK (Body <> 'bad')"
    )
    with pytest.raises(Exception, match="no_bad"):
        queue.send_batch([b"fine", b"bad", b"fine too"])
    assert copies == [False] or queue.count() == 0
    assert queue.count() == 0
    ids = queue.send_batch([b"after", b"the failure"])
    with queue.receive(max_messages=10) as batch:
        assert [m.id for m in batch] == ids
    assert all(isinstance(i, uuid.UUID) for i in ids)
