""".NET wire compatibility: exact header bytes both ways, standard headers and their formats, and rows
written the way an NServiceBus endpoint writes them, received through real queue tables."""

from __future__ import annotations

import json
import re
import uuid
from datetime import datetime, timedelta, timezone

import pytest
import rawsql

from airflow_provider_sqlqueue.transport import MessagePump, OutgoingMessage, QueueAddress
from airflow_provider_sqlqueue.transport.headers import decode_headers, encode_headers

MESSAGE_ID = "6b7c9d6e-1f2a-4b3c-8d9e-0a1b2c3d4e5f"
DOTNET_HEADERS = {
    "NServiceBus.MessageId": MESSAGE_ID,
    "NServiceBus.MessageIntent": "Send",
    "NServiceBus.ConversationId": "0c4b0f4e-9b8a-4c1d-a2e3-b4c5d6e7f809",
    "NServiceBus.CorrelationId": MESSAGE_ID,
    "NServiceBus.ReplyToAddress": "Sales@[dbo]@[nservicebus]",
    "NServiceBus.OriginatingMachine": "WEB01",
    "NServiceBus.OriginatingEndpoint": "Sales",
    "$.diagnostics.originating.hostid": "2f2b1d05c29c4b2c9b1e3d6a8f7e5c4a",
    "NServiceBus.ContentType": "application/json",
    "NServiceBus.EnclosedMessageTypes": "Sales.Messages.PlaceOrder, Sales.Messages, Version=1.0.0.0, "
    "Culture=neutral, PublicKeyToken=null",
    "NServiceBus.Version": "9.2.3",
    "NServiceBus.TimeSent": "2026-11-21 23:05:07:123456 Z",
    "Customer.Note": "Grüße / ok 😀",
    "Empty": None,
}
# What System.Text.Json with UnsafeRelaxedJsonEscaping writes for the map above, after the transport's
# '/' -> '\/' rewrite: non-ASCII as is, the emoji as a surrogate pair, null as null. Derived from the
# serializer's rules (Particular/NServiceBus.SqlServer 214c4e8f, src/NServiceBus.Transport.Sql.Shared/
# Queuing/DictionarySerializer.cs, and the approval files cited in test_headers.py), not captured from a
# running .NET process: there is no .NET runtime on the test machines.
DOTNET_BYTES = (
    '{"NServiceBus.MessageId":"6b7c9d6e-1f2a-4b3c-8d9e-0a1b2c3d4e5f",'
    '"NServiceBus.MessageIntent":"Send",'
    '"NServiceBus.ConversationId":"0c4b0f4e-9b8a-4c1d-a2e3-b4c5d6e7f809",'
    '"NServiceBus.CorrelationId":"6b7c9d6e-1f2a-4b3c-8d9e-0a1b2c3d4e5f",'
    '"NServiceBus.ReplyToAddress":"Sales@[dbo]@[nservicebus]",'
    '"NServiceBus.OriginatingMachine":"WEB01",'
    '"NServiceBus.OriginatingEndpoint":"Sales",'
    '"$.diagnostics.originating.hostid":"2f2b1d05c29c4b2c9b1e3d6a8f7e5c4a",'
    '"NServiceBus.ContentType":"application\\/json",'
    '"NServiceBus.EnclosedMessageTypes":"Sales.Messages.PlaceOrder, Sales.Messages, Version=1.0.0.0, '
    'Culture=neutral, PublicKeyToken=null",'
    '"NServiceBus.Version":"9.2.3",'
    '"NServiceBus.TimeSent":"2026-11-21 23:05:07:123456 Z",'
    '"Customer.Note":"Grüße \\/ ok \\uD83D\\uDE00",'
    '"Empty":null}'
)
# The same headers as the older DataContractJsonSerializer wrote them (escaped non-ASCII, no '\/' on '$').
LEGACY_BYTES = DOTNET_BYTES.replace("Grüße", "Gr\\u00fc\\u00dfe").replace('"Empty":null', '"Empty":null')


def test_headers_encode_to_the_dotnet_bytes() -> None:
    assert encode_headers(DOTNET_HEADERS) == DOTNET_BYTES
    assert encode_headers(DOTNET_HEADERS).encode("utf-8") == DOTNET_BYTES.encode("utf-8")


@pytest.mark.parametrize("text", [DOTNET_BYTES, LEGACY_BYTES, DOTNET_BYTES.replace("\\/", "/")])
def test_dotnet_headers_decode_exactly(text: str) -> None:
    assert decode_headers(text) == DOTNET_HEADERS


def test_outgoing_messages_carry_the_standard_headers_in_their_formats() -> None:
    message = OutgoingMessage(b"{}", {"NServiceBus.ContentType": "application/json"})
    headers = message.headers
    assert headers["NServiceBus.MessageId"] == str(message.id)
    assert headers["NServiceBus.CorrelationId"] == str(message.id)
    assert headers["NServiceBus.MessageIntent"] == "Send"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{6} Z", headers["NServiceBus.TimeSent"])
    sent = datetime.strptime(headers["NServiceBus.TimeSent"], "%Y-%m-%d %H:%M:%S:%f Z")
    assert abs(sent.replace(tzinfo=timezone.utc) - datetime.now(timezone.utc)) < timedelta(minutes=1)
    overridden = OutgoingMessage(
        b"", {"NServiceBus.MessageIntent": "Reply", "NServiceBus.CorrelationId": "c1"}
    )
    assert overridden.headers["NServiceBus.MessageIntent"] == "Reply"
    assert overridden.headers["NServiceBus.CorrelationId"] == "c1"


def test_reply_addresses_round_trip_as_nservicebus_writes_them() -> None:
    for text in ("Sales", "Sales@[dbo]", "Sales.WEB01@[dbo]@[nservicebus]", "Sales@[]@[n service.bus&#]"):
        assert str(QueueAddress.parse(text)) == text


def test_a_row_written_like_a_dotnet_endpoint_is_received(queue, transport) -> None:
    """NServiceBus inserts an upper-case GUID, Recoverable 1, its header text and the body."""
    native_id = uuid.uuid4()
    p = rawsql.param(transport)
    recoverable = "true" if transport.dialect.name == "postgresql" else "1"
    value = native_id if transport.dialect.name == "postgresql" else str(native_id).upper()
    rawsql.execute(
        transport,
        f"INSERT INTO {rawsql.table_of(queue)} (Id, Recoverable, Headers, Body) "
        f"VALUES ({p}, {recoverable}, {p}, {p})",
        (value, DOTNET_BYTES, b'{"OrderId":42}'),
    )
    with queue.receive() as batch:
        [message] = batch
    assert message.id == native_id
    assert message.headers == DOTNET_HEADERS
    assert message.message_id == MESSAGE_ID  # the header wins over the native Id, as in NServiceBus Core
    assert message.reply_to_address == "Sales@[dbo]@[nservicebus]"
    assert message.content_type == "application/json"
    assert message.body == b'{"OrderId":42}'


def test_a_sent_row_is_what_a_dotnet_endpoint_reads(queue) -> None:
    message = OutgoingMessage(b'{"OrderId":42}', DOTNET_HEADERS)
    queue.send(message)
    [(row_id, headers_text, body)] = rawsql.all_rows(queue)
    assert uuid.UUID(row_id) == message.id
    assert headers_text == DOTNET_BYTES
    assert body == b'{"OrderId":42}'
    assert rawsql.column_values(queue, "CorrelationId") == [MESSAGE_ID]
    assert rawsql.column_values(queue, "ReplyToAddress") == ["Sales@[dbo]@[nservicebus]"]


# ---- headers passed on unchanged: forwarding, the error queue, audit ----------------------------------
# Header texts as other writers store them, each lacking one standard header (or with an unusual key order),
# with members .NET would write differently today: a legacy \u00fc escape and a bare '/'. What is passed on
# must keep each member's text byte for byte and gain only what the reference adds.
_MEMBERS = {
    "NServiceBus.MessageId": f'"NServiceBus.MessageId":"{MESSAGE_ID}"',
    "NServiceBus.ConversationId": '"NServiceBus.ConversationId":"0c4b0f4e-9b8a-4c1d-a2e3-b4c5d6e7f809"',
    "NServiceBus.CorrelationId": f'"NServiceBus.CorrelationId":"{MESSAGE_ID}"',
    "NServiceBus.MessageIntent": '"NServiceBus.MessageIntent":"Send"',
    "NServiceBus.TimeSent": '"NServiceBus.TimeSent":"2026-11-21 23:05:07:123456 Z"',
    "NServiceBus.ContentType": '"NServiceBus.ContentType":"application/json"',
    "Customer.Note": '"Customer.Note":"Gr\\u00fc\\u00dfe \\/ ok"',
    "Empty": '"Empty":null',
}
_STANDARD = [
    "NServiceBus.MessageId",
    "NServiceBus.CorrelationId",
    "NServiceBus.MessageIntent",
    "NServiceBus.TimeSent",
]
_VARIANTS = [[key for key in _MEMBERS if key != missing] for missing in _STANDARD] + [
    ["Empty", "Customer.Note", "NServiceBus.TimeSent", "NServiceBus.ContentType"],  # no Id, odd order
]
_FORWARD = '"NServiceBus.SqlServer.ForwardDestination":"{}"'


def _stored(keys: list[str], forward_to: str | None = None) -> tuple[str, list[str]]:
    """A header text of the members named (ForwardDestination third when given) and its members."""
    members = [_MEMBERS[key] for key in keys]
    if forward_to is not None:
        members.insert(2, _FORWARD.format(forward_to))
    return "{" + ",".join(members) + "}", members


def _insert_rows(queue, texts: list[str]) -> dict[bytes, uuid.UUID]:
    return {
        f"case-{n}".encode(): rawsql.insert_foreign_row(queue, text, f"case-{n}".encode())
        for n, text in enumerate(texts)
    }


def _stored_rows(queue) -> dict[bytes, tuple[str, str]]:
    return {body: (row_id, text) for row_id, text, body in rawsql.all_rows(queue)}


def _pairs(text: str) -> list[tuple[str, str | None]]:
    return json.loads(text, object_pairs_hook=list)


def test_a_forwarded_message_keeps_its_stored_header_text(queue, transport) -> None:
    """The reference removes only ForwardDestination and sends the rest as a new row (a new Id)."""
    destination = transport.queue("dest")
    destination.create()
    cases = [_stored(keys, forward_to="dest") for keys in _VARIANTS]
    sent = _insert_rows(queue, [text for text, _ in cases])
    handled: list[bytes] = []
    MessagePump(queue, lambda message: handled.append(message.body), idle_delay=0.1).run(
        until_empty=True, timeout=30
    )
    arrived = _stored_rows(destination)
    assert handled == [] and sorted(arrived) == sorted(sent)
    for n, (_, members) in enumerate(cases):
        row_id, text = arrived[f"case-{n}".encode()]
        assert text == "{" + ",".join(m for m in members if "ForwardDestination" not in m) + "}"
        assert uuid.UUID(row_id) != sent[f"case-{n}".encode()]


def test_a_failed_message_keeps_its_stored_header_text_and_gains_the_failure_headers(
    queue, transport
) -> None:
    """NServiceBus Core sets FailedQ, the exception headers and the processing endpoint and machine on a
    copy of the received headers; nothing else is added (no invented MessageId, CorrelationId, ...)."""
    cases = [_stored(keys) for keys in _VARIANTS]
    sent = _insert_rows(queue, [text for text, _ in cases])

    def fail(message) -> None:
        raise ValueError("no")

    MessagePump(queue, fail, immediate_retries=0, idle_delay=0.1).run(until_empty=True, timeout=30)
    failed = _stored_rows(transport.queue("error"))
    assert sorted(failed) == sorted(sent)
    for n, (text, _) in enumerate(cases):
        row_id, stored = failed[f"case-{n}".encode()]
        assert stored.startswith(text[:-1] + ',"NServiceBus.FailedQ":')
        added = [key for key, _ in _pairs(stored)][len(_pairs(text)) :]
        assert added == [
            "NServiceBus.FailedQ",
            "NServiceBus.ExceptionInfo.ExceptionType",
            "NServiceBus.ExceptionInfo.HelpLink",
            "NServiceBus.ExceptionInfo.Message",
            "NServiceBus.ExceptionInfo.Source",
            "NServiceBus.ExceptionInfo.StackTrace",
            "NServiceBus.TimeOfFailure",
            "NServiceBus.ProcessingMachine",
            "NServiceBus.ProcessingEndpoint",
        ]
        assert uuid.UUID(row_id) != sent[f"case-{n}".encode()]


def test_a_message_failing_to_be_forwarded_reaches_the_error_queue_in_the_transports_order(
    queue, transport
) -> None:
    """The transport's own path: ForwardDestination removed, the exception headers set (the first takes
    the removed header's place, as in a .NET Dictionary), FailedQ (the destination) last."""
    text, members = _stored(_VARIANTS[0], forward_to="missing")
    _insert_rows(queue, [text])
    MessagePump(queue, lambda message: None, immediate_retries=0, idle_delay=0.1).run(
        until_empty=True, timeout=30
    )
    [(_, stored)] = _stored_rows(transport.queue("error")).values()
    keys = [key for key, _ in _pairs(stored)]
    assert keys[2] == "NServiceBus.ExceptionInfo.ExceptionType" and keys[-1] == "NServiceBus.FailedQ"
    assert _pairs(stored)[-1][1] == str(transport.canonical(transport.resolve("missing")))
    kept = [m for m in members if "ForwardDestination" not in m]
    assert stored.startswith("{" + ",".join(kept[:2]) + ',"NServiceBus.ExceptionInfo.ExceptionType":')
    assert ",".join(kept[2:]) in stored
    assert "ForwardDestination" not in stored


def test_an_audited_message_keeps_its_stored_header_text_and_gains_the_processing_headers(
    queue, transport
) -> None:
    audit = transport.queue("audit")
    audit.create()
    cases = [_stored(keys) for keys in _VARIANTS]
    sent = _insert_rows(queue, [text for text, _ in cases])
    MessagePump(queue, lambda message: None, audit_queue="audit", idle_delay=0.1).run(
        until_empty=True, timeout=30
    )
    audited = _stored_rows(audit)
    assert sorted(audited) == sorted(sent)
    for n, (text, _) in enumerate(cases):
        row_id, stored = audited[f"case-{n}".encode()]
        assert stored.startswith(text[:-1] + ',"NServiceBus.ProcessingStarted":')
        assert [key for key, _ in _pairs(stored)][len(_pairs(text)) :] == [
            "NServiceBus.ProcessingStarted",
            "NServiceBus.ProcessingEnded",
            "NServiceBus.ProcessingEndpoint",
            "NServiceBus.ProcessingMachine",
        ]
        assert uuid.UUID(row_id) != sent[f"case-{n}".encode()]


# ---- headers the reference writes on a send ------------------------------------------------------------
def test_a_send_with_a_time_to_be_received_writes_the_dotnet_time_span_header(queue) -> None:
    """NServiceBus Core writes TimeToBeReceived as TimeSpan.ToString(); the Expires column is unchanged."""
    queue.send(OutgoingMessage(b"{}", DOTNET_HEADERS, time_to_be_received=timedelta(minutes=10)))
    queue.send(b"x", time_to_be_received=timedelta(days=1, seconds=1, microseconds=500_000))
    [(_, first, _), (_, second, _)] = rawsql.all_rows(queue)
    assert first == DOTNET_BYTES[:-1] + ',"NServiceBus.TimeToBeReceived":"00:10:00"}'
    assert decode_headers(second)["NServiceBus.TimeToBeReceived"] == "1.00:00:01.5000000"
    assert all(value is not None for value in rawsql.column_values(queue, "Expires"))
    queue.send(b"never", time_to_be_received=timedelta.max)
    assert "NServiceBus.TimeToBeReceived" not in decode_headers(rawsql.all_rows(queue)[-1][1])


def test_a_send_that_starts_a_conversation_writes_a_new_conversation_id(queue) -> None:
    """Core gives a send without an incoming message a new ConversationId; one given is kept."""
    queue.send(b"a")
    queue.send_batch([b"b", "c", OutgoingMessage(b"d", {"k": "v"})])
    queue.send(b"e", headers={"NServiceBus.ConversationId": "mine"})
    rows = [(uuid.UUID(row_id), decode_headers(text)) for row_id, text, _ in rawsql.all_rows(queue)]
    started = [uuid.UUID(headers["NServiceBus.ConversationId"]) for _, headers in rows[:4]]
    assert len(set(started)) == 4 and not set(started) & {row_id for row_id, _ in rows}
    assert all(value.version == 4 for value in started)
    assert rows[4][1]["NServiceBus.ConversationId"] == "mine"
