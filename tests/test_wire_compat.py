""".NET wire compatibility: exact header bytes both ways, standard headers and their formats, and rows
written the way an NServiceBus endpoint writes them, received through real queue tables."""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta, timezone

import pytest
import rawsql

from airflow_provider_sqlqueue.transport import OutgoingMessage, QueueAddress
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
# '/' -> '\/' rewrite: non-ASCII as is, the emoji as a surrogate pair, null as null.
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
