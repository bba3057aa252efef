"""The short paths taken for speed (docs/performance.md) give exactly what the general paths give."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from dataclasses import fields, replace
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_sqlqueue.dialects import (
    BabelfishDialect,
    PostgresDialect,
    SqliteDialect,
    SqlServerDialect,
)
from airflow_provider_sqlqueue.dialects.odbc import PostgresOverOdbc, SqliteOverOdbc
from airflow_provider_sqlqueue.model.errors import MessageTooLarge, TransientDatabaseError
from airflow_provider_sqlqueue.transport import headers as h
from airflow_provider_sqlqueue.transport import open_transport
from airflow_provider_sqlqueue.transport.message import (
    OutgoingMessage,
    ReceivedMessage,
    new_id_texts,
    new_message_ids,
    new_message_ids_and_texts,
    uuid_from_int,
)
from airflow_provider_sqlqueue.transport.queue.received_rows import parse_id, parse_text_ids
from airflow_provider_sqlqueue.transport.queue.send_rows import plain_send_rows


def test_default_header_text_is_what_the_encoder_writes() -> None:
    for _ in range(50):
        text_id, time_sent, conversation = str(uuid.uuid4()), h.time_sent_now(), str(uuid.uuid4())
        standard = {h.MESSAGE_ID: text_id, h.CORRELATION_ID: text_id, h.MESSAGE_INTENT: "Send"}
        expected = h.encode_headers({**standard, h.CONVERSATION_ID: conversation, h.TIME_SENT: time_sent})
        assert h.default_headers_text(text_id, time_sent, conversation) == expected


def test_default_header_texts_of_a_batch_are_those_of_each_message() -> None:
    time_sent = h.time_sent_now()
    ids, conversations = new_id_texts(20), new_id_texts(20)
    expected = [
        h.encode_headers(
            {
                h.MESSAGE_ID: message_id,
                h.CORRELATION_ID: message_id,
                h.MESSAGE_INTENT: "Send",
                h.CONVERSATION_ID: conversation,
                h.TIME_SENT: time_sent,
            }
        )
        for message_id, conversation in zip(ids, conversations, strict=True)
    ]
    assert h.default_headers_texts(ids, time_sent, conversations) == expected
    assert len(set(expected)) == 20
    with pytest.raises(ValueError):
        h.default_headers_texts(ids, time_sent, conversations[:-1])


class _TextBodyDialect(SqliteDialect):
    """A dialect whose send_params changes a value (as one binding bodies differently would)."""

    def send_params(self, message_id, correlation_id, reply_to_address, time_to_be_received, headers, body):  # type: ignore[no-untyped-def]
        return super().send_params(
            message_id, correlation_id, reply_to_address, time_to_be_received, headers, body.hex()
        )


class _IdTwiceDialect(SqliteDialect):
    """A dialect that binds the Id twice and leaves CorrelationId out."""

    def send_params(self, message_id, correlation_id, reply_to_address, time_to_be_received, headers, body):  # type: ignore[no-untyped-def]
        return (message_id, message_id, None, None, headers, body)


@pytest.mark.parametrize(
    "dialect",
    [
        SqliteDialect(),
        PostgresDialect(),
        SqlServerDialect(),
        BabelfishDialect(),
        PostgresOverOdbc(),
        SqliteOverOdbc(),
        _TextBodyDialect(),
        _IdTwiceDialect(),
    ],
    ids=lambda dialect: type(dialect).__name__,
)
def test_plain_rows_of_a_batch_are_what_send_params_gives_each(dialect) -> None:
    ids, texts = new_message_ids_and_texts(7)
    keys = [dialect.row_id(value) for value in ids]
    time_sent = h.time_sent_now()
    headers = h.default_headers_texts(texts, time_sent, new_id_texts(7))
    bodies = [bytes([index]) * (index + 1) for index in range(7)]
    expected = [
        dialect.send_params(key, text, None, None, header, body)
        for key, text, header, body in zip(keys, texts, headers, bodies, strict=True)
    ]
    assert plain_send_rows(dialect, keys, texts, headers, bodies) == expected
    with pytest.raises(ValueError):
        plain_send_rows(dialect, keys, texts, headers, bodies[:-1])


def test_received_messages_are_the_dataclass_built_field_by_field(tmp_path) -> None:
    transport = open_transport(f"sqlite:///{tmp_path}/fields.db")
    queue = transport.queue("orders")
    queue.create()
    queue.send_batch([b"one", OutgoingMessage(b"two", {"NServiceBus.CorrelationId": "c-2"})])
    with queue.receive(max_messages=2) as batch:
        received = list(batch)
    transport.close()
    assert [message.body for message in received] == [b"one", b"two"]
    for message in received:
        rebuilt = ReceivedMessage(**{field.name: getattr(message, field.name) for field in fields(message)})
        assert vars(message) == vars(rebuilt)
        assert message == rebuilt
        assert replace(message, body=b"x").body == b"x"
    assert received[1].correlation_id == "c-2"


def test_time_sent_is_the_nservicebus_format_of_now() -> None:
    before = datetime.now(timezone.utc)
    text = h.time_sent_now()
    after = datetime.now(timezone.utc)
    assert before - timedelta(microseconds=1) <= h.parse_timestamp(text) <= after
    assert text == h.format_timestamp(h.parse_timestamp(text))


def test_new_ids_are_random_version_4_uuids() -> None:
    ids = new_message_ids(1000)
    assert len(set(ids)) == 1000
    for value in ids[:50]:
        assert isinstance(value, uuid.UUID)
        assert (value.version, value.variant) == (4, uuid.RFC_4122)
        assert value == uuid.UUID(str(value)) and hash(value) == hash(uuid.UUID(str(value)))
    sample = 0x0123456789ABCDEF0123456789ABCDEF
    assert uuid_from_int(sample) == uuid.UUID(int=sample)  # type: ignore[operator]
    assert new_message_ids(0) == []


def test_ids_with_their_texts_are_what_uuid_writes() -> None:
    ids, texts = new_message_ids_and_texts(1000)
    assert len(set(ids)) == 1000 and len(texts) == 1000
    for value, text in zip(ids, texts, strict=True):
        assert isinstance(value, uuid.UUID) and (value.version, value.variant) == (4, uuid.RFC_4122)
        assert text == str(value) and uuid.UUID(text) == value
    assert new_message_ids_and_texts(0) == ([], [])


@pytest.mark.parametrize("count", [0, 1, 2, 100, 3000])
def test_id_texts_are_random_version_4_uuid_texts(count: int) -> None:
    texts = new_id_texts(count)
    assert len(texts) == len(set(texts)) == count
    for text in texts:
        parsed = uuid.UUID(text)
        assert str(parsed) == text and (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
    if count >= 3000:  # every random digit takes every value it may take (8, 9, a, b for the variant)
        fixed = {8: {"-"}, 13: {"-"}, 14: {"4"}, 18: {"-"}, 19: set("89ab"), 23: {"-"}}
        for position in range(36):
            seen = {text[position] for text in texts}
            assert seen == fixed.get(position, set("0123456789abcdef")), position


def test_default_message_headers_in_order() -> None:
    message = OutgoingMessage(b"x")
    assert list(message.headers) == [
        h.MESSAGE_ID, h.CORRELATION_ID, h.MESSAGE_INTENT, h.CONVERSATION_ID, h.TIME_SENT
    ]  # fmt: skip
    assert message.headers[h.MESSAGE_ID] == message.headers[h.CORRELATION_ID] == str(message.id)
    custom = OutgoingMessage("y", {h.TIME_SENT: "t", "a": "b"})
    assert custom.body == b"y"
    assert list(custom.headers) == [
        h.TIME_SENT, "a", h.MESSAGE_ID, h.CORRELATION_ID, h.MESSAGE_INTENT, h.CONVERSATION_ID
    ]  # fmt: skip
    assert custom.headers[h.TIME_SENT] == "t"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("  \n", {}),
        ('  {"a": "b"} ', {"a": "b"}),
        ('{"a":null}', {"a": None}),
        (b'{"a":"\xc3\xa9"}', {"a": "\u00e9"}),
    ],
)
def test_header_decoding_accepts(text: str | bytes, expected: dict) -> None:
    assert h.decode_headers(text) == expected


def test_bare_bodies_are_sent_as_outgoing_messages_would_be(tmp_path) -> None:
    with open_transport(f"sqlite:///{tmp_path}/q.db") as transport:
        queue = transport.queue("q")
        queue.create()
        ids = queue.send_batch([b"a", "b", OutgoingMessage(b"c", {"k": "v"}), bytearray(b"d")])
        ids.append(queue.send("e"))
        with queue.receive(10) as batch:
            messages = list(batch)
        assert [m.id for m in messages] == ids
        assert [m.body for m in messages] == [b"a", b"b", b"c", b"d", b"e"]
        for message in messages:
            assert message.headers[h.MESSAGE_ID] == str(message.id)
            assert message.correlation_id == str(message.id)
            assert message.headers[h.MESSAGE_INTENT] == "Send"
            assert uuid.UUID(message.headers[h.CONVERSATION_ID]) != message.id
            h.parse_timestamp(message.headers[h.TIME_SENT])
        assert messages[2].headers["k"] == "v"
        connection = sqlite3.connect(f"{tmp_path}/q.db")
        queue.send_batch([b"f"])
        (stored,) = connection.execute('SELECT Id, CorrelationId, Headers FROM "q"').fetchall()
        connection.close()
        assert stored[1] == stored[0]
        assert stored[2] == h.encode_headers(h.decode_headers(stored[2]))


def test_a_batch_of_bare_bodies_writes_the_rows_of_outgoing_messages(tmp_path) -> None:
    with open_transport(f"sqlite:///{tmp_path}/q.db", max_body_bytes=64) as transport:
        queue = transport.queue("q")
        queue.create()
        ids = queue.send_batch(tuple(b"%d" % n for n in range(300)))
        with pytest.raises(MessageTooLarge):
            queue.send_batch([b"small", b"x" * 65])
        connection = sqlite3.connect(f"{tmp_path}/q.db")
        stored = connection.execute(
            'SELECT Id, CorrelationId, Headers, Body FROM "q" ORDER BY RowVersion'
        ).fetchall()
        connection.close()
    assert [row[3] for row in stored] == [b"%d" % n for n in range(300)]  # the too large batch sent nothing
    assert [row[0] for row in stored] == [str(value) for value in ids] == [row[1] for row in stored]
    conversations = set()
    for (text_id, _, headers, _), value in zip(stored, ids, strict=True):
        decoded = h.decode_headers(headers)
        assert list(decoded) == list(OutgoingMessage(b"", id=value).headers)
        assert decoded[h.MESSAGE_ID] == decoded[h.CORRELATION_ID] == text_id
        assert decoded[h.MESSAGE_INTENT] == "Send"
        assert headers == h.encode_headers(decoded)
        conversations.add(uuid.UUID(decoded[h.CONVERSATION_ID]))
    assert len(conversations) == 300 and not conversations & set(ids)
    assert len({h.decode_headers(row[2])[h.TIME_SENT] for row in stored}) == 1  # one TimeSent per call


def _one_by_one(values: list) -> list | None:
    try:
        return [parse_id(value) for value in values]
    except ValueError:
        return None


_uuid_texts = st.uuids().flatmap(
    lambda value: st.sampled_from(
        [str(value), str(value).upper(), value.hex, f"{{{value}}}", f"urn:uuid:{value}"]
    )
)
_id_pieces = st.sampled_from(['"', '","', "\\", "-", "0", "f", "g", " ", "_", "{", "}", "\n"])
_id_texts = st.one_of(
    _uuid_texts, st.text(max_size=40), st.lists(st.one_of(_uuid_texts, _id_pieces)).map("".join)
)


@given(st.lists(_id_texts, min_size=1, max_size=6))
def test_ids_read_as_a_batch_are_the_ids_read_one_by_one(values: list) -> None:
    """The batch read either gives what uuid.UUID gives for every text or declines the batch."""
    batch = parse_text_ids(values)
    if batch is not None:
        assert batch == _one_by_one(values)
        assert all(type(value) is uuid.UUID for value in batch)


def test_ids_that_would_shift_the_joined_array_are_declined() -> None:
    a, b, c = (str(uuid.uuid4()) for _ in range(3))
    assert parse_text_ids([a, b, c]) == [uuid.UUID(a), uuid.UUID(b), uuid.UUID(c)]
    assert parse_text_ids([f'{a}","{b}', c]) is None  # one text that would read as two Ids
    assert parse_text_ids([f'{a}","{b}', f'{c}"]']) is None
    assert parse_text_ids([a, 3]) is None  # not text
    assert parse_text_ids([f"{{{a}}}"]) is None  # uuid.UUID reads braces; the one-by-one path decides


def test_a_row_whose_id_is_not_a_uuid_is_poison_and_the_rest_of_its_batch_is_delivered(tmp_path) -> None:
    with open_transport(f"sqlite:///{tmp_path}/q.db") as transport:
        queue, error = transport.queue("q"), transport.queue("error")
        queue.create()
        error.create()
        before = queue.send_batch([b"1", b"2"])
        connection = sqlite3.connect(f"{tmp_path}/q.db")
        with connection:
            connection.execute(
                'INSERT INTO "q" (Id, Recoverable, Headers, Body) VALUES (?, 1, ?, ?)',
                (f'{before[0]}","{before[1]}', "{}", b"shifted"),
            )
        connection.close()
        after = queue.send_batch([b"3"])
        with queue.receive(max_messages=10) as batch:
            assert [message.id for message in batch] == [*before, *after]
            assert [message.body for message in batch] == [b"1", b"2", b"3"]
            assert batch.poisoned == 1
        connection = sqlite3.connect(f"{tmp_path}/q.db")
        moved = connection.execute('SELECT Id, Headers, Body FROM "error"').fetchall()
        left = connection.execute('SELECT COUNT(*) FROM "q"').fetchone()
        connection.close()
        assert moved == [(f'{before[0]}","{before[1]}', "{}", b"shifted")] and left == (0,)


def test_sqlite_peek_reads_the_ends_of_the_rowid_tree(tmp_path) -> None:
    with open_transport(f"sqlite:///{tmp_path}/q.db") as transport:
        queue = transport.queue("q")
        queue.create()
        assert queue.peek_estimate() == 0 and queue.peek_bounds() == (None, None)
        queue.send_batch([b"1", b"2", b"3"])
        assert queue.peek_estimate() == 3 and queue.peek_bounds() == (1, 3)
        connection = sqlite3.connect(f"{tmp_path}/q.db")
        for statement in (queue._sql.peek_estimate, queue._sql.peek_bounds):
            plan = " ".join(row[-1] for row in connection.execute(f"EXPLAIN QUERY PLAN {statement}"))
            assert "SCAN" not in plan.replace("SCAN CONSTANT ROW", ""), plan
        connection.close()


def test_pool_reuses_returns_and_discards(tmp_path) -> None:
    with open_transport(f"sqlite:///{tmp_path}/q.db", pool_size=1, max_overflow=1) as transport:
        transport._pool._timeout = 0.2
        with transport.connection() as first:
            raw = first.dbapi_connection
            first.cursor().execute("CREATE TABLE t (x)")
            first.cursor().execute("BEGIN")
            first.cursor().execute("INSERT INTO t VALUES (1)")
        # left in a transaction: rolled back on return, then lent again
        with transport.connection() as again:
            assert again.dbapi_connection is raw and not raw.in_transaction
            assert again.cursor().execute("SELECT count(*) FROM t").fetchone() == (0,)
            with transport.connection() as overflow:
                assert overflow.dbapi_connection is not raw
                with pytest.raises(TransientDatabaseError, match="pool timeout"), transport.connection():
                    pass
        # only pool_size connections stay idle; an invalidated one is closed and never lent again
        with transport.connection() as lent:
            lent.invalidate()
            assert not lent.is_valid
        with transport.connection() as fresh:
            assert fresh.dbapi_connection is not raw
            assert fresh.execute("SELECT 1").fetchone() == (1,)  # other methods reach the driver's


def test_pool_waiters_get_a_returned_connection(tmp_path) -> None:
    with open_transport(f"sqlite:///{tmp_path}/q.db", pool_size=1, max_overflow=0) as transport:
        got: list[object] = []
        with transport.connection() as held:
            raw = held.dbapi_connection

            def wait_for_it() -> None:
                with transport.connection() as connection:
                    got.append(connection.dbapi_connection)

            waiter = threading.Thread(target=wait_for_it)
            waiter.start()
            waiter.join(0.2)
            assert waiter.is_alive()  # waiting for the only connection
        waiter.join(5)
        assert got == [raw]
