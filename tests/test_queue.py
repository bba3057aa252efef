"""The behavioural suite of a queue table, run on every engine (SQLite, PostgreSQL, SQL Server when named)."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import uuid
from datetime import timedelta

import pytest
import rawsql

from airflow_provider_sqlqueue.transport import (
    ConfigurationError,
    HeaderFormatError,
    MessageTooLarge,
    OutgoingMessage,
    QueueNotFound,
    TableQueue,
    Transport,
)

SHORT = timedelta(milliseconds=1)


def drain(queue: TableQueue, batch: int = 100) -> list:
    received = []
    while True:
        with queue.receive(max_messages=batch) as messages:
            received.extend(messages)
            if not messages and not messages.expired and not messages.poisoned:
                return received


def wait_for_expiry() -> None:
    time.sleep(0.05)  # SQL Server's datetime has 3 ms steps; every engine's clock has passed 1 ms by then


@pytest.mark.parametrize(
    "body",
    [b"", b"x", b"\x00binary\x00with\xffNULs\x00", os.urandom(10 * 1024 * 1024)],
    ids=["0B", "1B", "binary-nul", "10MB"],
)
def test_bodies_round_trip_byte_for_byte(queue: TableQueue, body: bytes) -> None:
    sent = queue.send(body)
    with queue.receive() as batch:
        [message] = batch
    assert message.id == sent
    assert hashlib.sha256(message.body).digest() == hashlib.sha256(body).digest()
    assert len(message.body) == len(body)


def test_str_body_is_stored_as_utf8(queue: TableQueue) -> None:
    queue.send("grüße 😀")
    with queue.receive() as batch:
        assert batch[0].body == "grüße 😀".encode()
        assert batch[0].text() == "grüße 😀"


def test_headers_round_trip_with_unicode_slashes_and_nulls(queue: TableQueue) -> None:
    headers = {
        "NServiceBus.ContentType": "application/json",
        "NServiceBus.EnclosedMessageTypes": "Sales.OrderPlaced, Sales",
        "unicode": "äöü 漢字 😀",
        "path": "a/b/c",
        "nothing": None,
    }
    sent = queue.send(b"{}", headers=headers)
    [stored_headers] = rawsql.column_values(queue, "Headers")
    assert "a\\/b\\/c" in stored_headers and "application\\/json" in stored_headers
    with queue.receive() as batch:
        [message] = batch
    for key, value in headers.items():
        assert message.headers[key] == value
    assert message.headers["NServiceBus.MessageId"] == str(sent)
    assert message.message_id == str(sent)
    assert message.headers["NServiceBus.TimeSent"].endswith(" Z")
    assert message.content_type == "application/json"


def test_correlation_and_reply_to_are_mirrored_into_the_legacy_columns(queue: TableQueue) -> None:
    queue.send(
        b"1", headers={"NServiceBus.CorrelationId": "abc", "NServiceBus.ReplyToAddress": "Sales@[dbo]"}
    )
    queue.send(b"2", headers={"NServiceBus.CorrelationId": "x" * 300})
    assert rawsql.column_values(queue, "CorrelationId") == ["abc", None]
    assert rawsql.column_values(queue, "ReplyToAddress") == ["Sales@[dbo]", None]
    assert [str(v).lower() in ("1", "true") for v in rawsql.column_values(queue, "Recoverable")] == [
        True,
        True,
    ]
    with queue.receive(max_messages=2) as batch:
        assert batch[0].correlation_id == "abc"
        assert batch[0].reply_to_address == "Sales@[dbo]"
        assert batch[1].correlation_id == "x" * 300


def test_fifo_order_across_single_and_batch_sends(queue: TableQueue) -> None:
    expected = [queue.send(f"single {i}") for i in range(30)]
    expected += queue.send_batch([f"batch {i}" for i in range(1200)])  # spans several INSERT statements
    expected += [queue.send(OutgoingMessage(b"last"))]
    received = drain(queue, batch=7)
    assert [m.id for m in received] == expected
    row_versions = [m.row_version for m in received]
    assert row_versions == sorted(row_versions)


def test_expired_messages_are_deleted_and_never_delivered(queue: TableQueue) -> None:
    keep_before = queue.send(b"keep-1")
    queue.send_batch([OutgoingMessage(b"expire", time_to_be_received=SHORT) for _ in range(5)])
    keep_after = queue.send(b"keep-2", time_to_be_received=timedelta(hours=1))
    wait_for_expiry()
    assert queue.count() == 2
    with queue.receive(max_messages=10) as batch:
        assert [m.id for m in batch] == [keep_before, keep_after]
        assert batch.expired == 5
        assert batch[1].expires is not None and batch[1].expires.tzinfo is not None
    assert rawsql.all_rows(queue) == []


def test_rollback_returns_messages_in_their_original_order(queue: TableQueue) -> None:
    sent = queue.send_batch([f"m{i}" for i in range(5)])
    with pytest.raises(RuntimeError, match="handler failed"), queue.receive(max_messages=3) as batch:
        assert [m.id for m in batch] == sent[:3]
        raise RuntimeError("handler failed")
    with queue.receive(max_messages=5) as batch:
        assert [m.id for m in batch] == sent


def test_receiving_from_an_empty_queue_gives_an_empty_batch(queue: TableQueue) -> None:
    with queue.receive(max_messages=10) as batch:
        assert len(batch) == 0 and batch.expired == 0 and batch.poisoned == 0


@pytest.mark.parametrize(
    "bad_headers",
    ["<corrupted headers", "[1, 2]", '{"count": 3}', '{"truncated": "js'],
    ids=["not-json", "json-array", "non-string", "truncated"],
)
def test_poison_row_moves_unchanged_to_the_error_queue(
    queue: TableQueue, transport: Transport, bad_headers: str, caplog: pytest.LogCaptureFixture
) -> None:
    poison_id = rawsql.insert_foreign_row(queue, bad_headers, body=b"\x00raw body")
    good = queue.send(b"next")
    with caplog.at_level(logging.ERROR), queue.receive() as batch:
        assert len(batch) == 0 and batch.poisoned == 1
    assert any("metadata corruption" in r.message and str(poison_id) in r.message for r in caplog.records)
    with queue.receive() as batch:
        assert [m.id for m in batch] == [good]
    error_rows = rawsql.all_rows(transport.queue("error"))
    assert error_rows == [(str(poison_id), bad_headers, b"\x00raw body")]


def test_poison_row_stays_when_the_error_queue_is_missing(transport: Transport) -> None:
    orders = transport.queue("orders", error_queue="missing_error_queue")
    orders.create()
    poison_id = rawsql.insert_foreign_row(orders, "not json")
    with pytest.raises(QueueNotFound, match="missing_error_queue"), orders.receive():
        pass
    assert [row[0] for row in rawsql.all_rows(orders)] == [str(poison_id)]


def test_poison_row_stays_when_no_error_queue_is_configured(transport: Transport) -> None:
    orders = transport.queue("orders", error_queue=None)
    orders.create()
    poison_id = rawsql.insert_foreign_row(orders, "not json")
    with pytest.raises(HeaderFormatError, match="no error queue"), orders.receive():
        pass
    assert [row[0] for row in rawsql.all_rows(orders)] == [str(poison_id)]


def test_sends_atomic_with_receive_roll_back_with_it(queue: TableQueue, transport: Transport) -> None:
    audit = transport.queue("audit")
    audit.create()
    original = queue.send(b"order")
    with pytest.raises(RuntimeError), queue.receive() as batch:
        batch.send(audit, b"copy")
        batch.send("audit", b"copy 2")
        raise RuntimeError("fail after sending")
    assert audit.count() == 0
    with queue.receive() as batch:
        assert batch[0].id == original
        batch.send_batch("audit", [b"a", b"b"])
    assert audit.count() == 2 and queue.count() == 0


def test_receive_only_sends_commit_at_once(queue: TableQueue, transport: Transport, target) -> None:
    audit = transport.queue("audit")
    audit.create()
    queue.send(b"order")
    if target.engine == "sqlite":
        with (
            pytest.raises(ConfigurationError, match="single writer"),
            queue.receive(transaction_mode="receive_only") as batch,
        ):
            batch.send(audit, b"would wait for our own lock")
        assert audit.count() == 0 and queue.count() == 1
        return
    with pytest.raises(RuntimeError), queue.receive(transaction_mode="receive_only") as batch:
        batch.send(audit, b"ghost")
        raise RuntimeError("fail after sending")
    assert audit.count() == 1  # the reference's documented ghost message
    assert queue.count() == 1


def test_transaction_mode_none_commits_before_the_block(
    queue: TableQueue, caplog: pytest.LogCaptureFixture
) -> None:
    sent = queue.send(b"order")
    with (
        caplog.at_level(logging.ERROR),
        pytest.raises(RuntimeError),
        queue.receive(transaction_mode="none") as batch,
    ):
        assert batch[0].id == sent
        raise RuntimeError("handler failed")
    assert queue.count() == 0
    assert any(str(sent) in record.message for record in caplog.records)


def test_peek_estimate_and_exact_count(queue: TableQueue) -> None:
    assert queue.peek_estimate() == 0 and queue.count() == 0
    queue.send_batch([b"x"] * 10)
    assert queue.peek_estimate() == 10 and queue.count() == 10
    with queue.receive(max_messages=3):
        pass
    assert queue.peek_estimate() == 7 and queue.count() == 7
    queue.send(b"soon gone", time_to_be_received=SHORT)
    wait_for_expiry()
    assert queue.count() == 7
    assert queue.peek_estimate() == 8  # an upper bound: it does not look at Expires


def test_peek_estimate_skips_rows_held_by_a_receiver(queue: TableQueue, target) -> None:
    if target.engine == "sqlite":
        pytest.skip("SQLite has no row locks: a reader sees the last committed state of the whole table")
    queue.send_batch([b"held", b"free"])
    holding, release = threading.Event(), threading.Event()

    def hold_one() -> None:
        with queue.receive():
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold_one)
    holder.start()
    try:
        assert holding.wait(10)
        if target.babelfish:
            # Babelfish accepts READPAST but does not honour it: the peek still counts the held row, and a
            # receive waits for the holder instead of skipping its row (then takes the rest).
            assert queue.peek_estimate() == 2
            threading.Timer(0.5, release.set).start()
        else:
            assert queue.peek_estimate() == 1
        with queue.receive(max_messages=5) as batch:
            assert [m.body for m in batch] == [b"free"]
            batch_ids = [m.id for m in batch]
        assert len(batch_ids) == 1
    finally:
        release.set()
        holder.join()


def test_purge_removes_only_expired_rows_in_batches(queue: TableQueue) -> None:
    queue.send_batch([OutgoingMessage(b"old", time_to_be_received=SHORT) for _ in range(25)])
    queue.send_batch(
        [b"forever"] * 3 + [OutgoingMessage(b"later", time_to_be_received=timedelta(hours=1))] * 2
    )
    wait_for_expiry()
    assert queue.purge_expired(batch_size=10, max_batches=1) == 10
    assert queue.purge_expired(batch_size=10) == 15
    assert queue.purge_expired(batch_size=10) == 0
    bodies = [row[2] for row in rawsql.all_rows(queue)]
    assert bodies == [b"forever"] * 3 + [b"later"] * 2


def test_purge_rejects_a_bad_batch_size(queue: TableQueue) -> None:
    with pytest.raises(ConfigurationError):
        queue.purge_expired(batch_size=0)


def test_create_is_idempotent_and_drop_removes_the_table(transport: Transport) -> None:
    q = transport.queue("lifecycle")
    assert not q.exists()
    assert q.create() is True
    assert q.create() is False
    assert q.exists()
    assert q.inspect() == []
    q.drop()
    assert not q.exists()


def test_body_string_column_shows_text_bodies(transport: Transport, target) -> None:
    q = transport.queue("readable")
    q.create(body_string=True)
    q.send(b"hello text")
    if target.engine != "sqlserver":  # SQL Server's cast reads the bytes as UTF-16, as the reference does
        assert rawsql.column_values(q, "BodyString") == ["hello text"]
    other = transport.queue("readable_later")
    other.create()
    other.create(body_string=True)  # adds the column to an existing table
    assert other.inspect() == []


def test_inspect_reports_a_dropped_index_with_the_statement_that_fixes_it(
    queue: TableQueue, caplog: pytest.LogCaptureFixture
) -> None:
    expires_index = next(
        spec for spec in queue.dialect.indexes(queue.address, _default_options()) if "Expires" in spec.name
    )
    rawsql.drop_index(queue, expires_index.name)
    with caplog.at_level(logging.WARNING):
        findings = queue.inspect()
    assert [f.code for f in findings] == ["missing_expires_index"]
    assert findings[0].fix == expires_index.create
    assert any(expires_index.create in record.getMessage() for record in caplog.records)
    rawsql.execute(queue.transport, findings[0].fix)
    assert queue.inspect() == []


def test_inspect_reports_a_missing_rowversion_index(queue: TableQueue, target) -> None:
    if target.engine == "sqlite":
        pytest.skip("on SQLite RowVersion is the rowid (INTEGER PRIMARY KEY) and cannot be dropped")
    rowversion_index = queue.dialect.indexes(queue.address, _default_options())[0]
    rawsql.drop_index(queue, rowversion_index.name)
    findings = queue.inspect()
    assert [f.code for f in findings] == ["missing_rowversion_index"]
    rawsql.execute(queue.transport, findings[0].fix)
    assert queue.inspect() == []


def test_missing_queue_gives_queue_not_found(transport: Transport) -> None:
    ghost = transport.queue("never_created")
    with pytest.raises(QueueNotFound, match="never_created"):
        ghost.send(b"x")
    with pytest.raises(QueueNotFound), ghost.receive():
        pass
    with pytest.raises(QueueNotFound):
        ghost.inspect()


def test_oversized_bodies_are_refused_before_anything_is_sent(target) -> None:
    with target.open(max_body_bytes=1000) as small:
        q = small.queue("small")
        q.create()
        with pytest.raises(MessageTooLarge, match="1,001-byte body"):
            q.send(b"x" * 1001)
        with pytest.raises(MessageTooLarge):
            q.send_batch([b"ok", b"x" * 5000, b"ok"])
        assert q.count() == 0
        q.send(b"x" * 1000)
        assert q.count() == 1


def test_argument_errors_are_clear(queue: TableQueue) -> None:
    with pytest.raises(ConfigurationError, match="max_messages"):
        queue.receive(max_messages=0).__enter__()
    with pytest.raises(ConfigurationError, match="transaction_mode"):
        queue.receive(transaction_mode="bogus").__enter__()
    with pytest.raises(ConfigurationError, match="positive"):
        queue.send(b"x", time_to_be_received=timedelta(seconds=-1))
    with pytest.raises(TypeError, match="bytes or str"):
        queue.send(123)  # type: ignore[arg-type]
    assert queue.count() == 0


def test_message_ids_are_the_senders(queue: TableQueue) -> None:
    chosen = uuid.uuid4()
    assert queue.send(OutgoingMessage(b"x", id=chosen)) == chosen
    with queue.receive() as batch:
        assert batch[0].id == chosen


def _default_options():
    from airflow_provider_sqlqueue.transport import TableOptions

    return TableOptions()


def test_a_correlation_id_with_nul_stays_in_the_headers(transport: Transport) -> None:
    queue = transport.queue("orders")
    queue.create()
    odd = {"NServiceBus.CorrelationId": "nul\x00inside", "NServiceBus.ReplyToAddress": "a\x00b"}
    ids = queue.send_batch([b"fine", OutgoingMessage(b"odd", odd)])
    queue.send(OutgoingMessage(b"odd alone", odd))
    with queue.receive(max_messages=10) as batch:
        received = list(batch)
    assert [m.id for m in received[:2]] == ids
    assert [m.correlation_id for m in received[1:]] == ["nul\x00inside"] * 2
    assert [m.reply_to_address for m in received[1:]] == ["a\x00b"] * 2
