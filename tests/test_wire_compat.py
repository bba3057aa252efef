""".NET wire compatibility: exact header bytes both ways, standard headers and their formats, and rows
written the way an NServiceBus endpoint writes them, received through real queue tables."""

from __future__ import annotations

import json
import re
import uuid
from datetime import datetime, timedelta, timezone

import pytest
import rawsql

from airflow_provider_sqlqueue import cli
from airflow_provider_sqlqueue.transport import (
    MessagePump,
    OutgoingMessage,
    QueueAddress,
    QueueNotFound,
    Subscription,
)
from airflow_provider_sqlqueue.transport.failed import retry_failed
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


# ---- native publish/subscribe: the reference's own statements on the shared subscription table -------
# Taken verbatim from Particular/NServiceBus.SqlServer 214c4e8f (src/NServiceBus.Transport.SqlServer/
# Queuing/SqlServerConstants.cs and src/NServiceBus.Transport.PostgreSql/PostgreSqlConstants.cs:
# CreateSubscriptionTableText, SubscribeText, GetSubscribersText, UnsubscribeText). {0} is the quoted
# qualified table name, {1} the quoted catalog (SQL Server's creation) or the @Topic_i list (the lookup).
# SqlClient sends the named parameters to sp_executesql; through pyodbc they are DECLAREd before the
# statement, which then runs as written. Npgsql rewrites @Name to a positional parameter; psycopg's form of
# that is %(Name)s, the only change made to the PostgreSQL texts.
REFERENCE_SQLSERVER = {
    "create": """
IF EXISTS (
    SELECT *
    FROM {1}.sys.objects
    WHERE object_id = OBJECT_ID(N'{0}')
        AND type in (N'U'))
RETURN

EXEC sp_getapplock @Resource = '{0}_lock', @LockMode = 'Exclusive'

IF EXISTS (
    SELECT *
    FROM {1}.sys.objects
    WHERE object_id = OBJECT_ID(N'{0}')
        AND type in (N'U'))
BEGIN
    EXEC sp_releaseapplock @Resource = '{0}_lock'
    RETURN
END

BEGIN TRY
    CREATE TABLE {0} (
        QueueAddress NVARCHAR(200) NOT NULL,
        Endpoint NVARCHAR(200) NOT NULL,
        Topic NVARCHAR(200) NOT NULL,
        PRIMARY KEY CLUSTERED
        (
            Endpoint,
            Topic
        )
    )
END TRY
BEGIN CATCH
    EXEC sp_releaseapplock @Resource = '{0}_lock';
    THROW;
END CATCH;

EXEC sp_releaseapplock @Resource = '{0}_lock'""",
    "subscribe": """
MERGE {0} WITH (HOLDLOCK, TABLOCK) AS target
USING(SELECT @Endpoint AS Endpoint, @QueueAddress AS QueueAddress, @Topic AS Topic) AS source
ON target.Endpoint = source.Endpoint
AND target.Topic = source.Topic
WHEN MATCHED AND target.QueueAddress <> source.QueueAddress THEN
UPDATE SET QueueAddress = @QueueAddress
WHEN NOT MATCHED THEN
INSERT
(
    QueueAddress,
    Topic,
    Endpoint
)
VALUES
(
    @QueueAddress,
    @Topic,
    @Endpoint
);""",
    "lookup": """
SELECT DISTINCT QueueAddress
FROM {0}
WHERE Topic IN ({1})
""",
    "unsubscribe": """
DELETE FROM {0}
WHERE
    Endpoint = @Endpoint and
    Topic = @Topic""",
}
REFERENCE_POSTGRESQL = {
    "create": """
CREATE TABLE IF NOT EXISTS {0} (
    QueueAddress VARCHAR(200) NOT NULL,
    Endpoint VARCHAR(200) NOT NULL,
    Topic VARCHAR(200) NOT NULL,
    PRIMARY KEY
    (
        Endpoint,
        Topic
    )
) WITH (fillfactor=100)
""",
    "subscribe": """
INSERT INTO {0}
(
    QueueAddress,
    Topic,
    Endpoint
)
VALUES
(
    @QueueAddress,
    @Topic,
    @Endpoint
)
ON CONFLICT (Endpoint, Topic) DO UPDATE SET QueueAddress = @QueueAddress
;""",
    "lookup": """
SELECT DISTINCT QueueAddress
FROM {0}
WHERE Topic IN ({1})
""",
    "unsubscribe": """
DELETE FROM {0}
WHERE
    Endpoint = @Endpoint and
    Topic = @Topic""",
}
BABELFISH_REFUSES_MERGE = "'MERGE' is not currently supported in Babelfish"


def reference_address(transport, table: str) -> str:
    """The address the reference writes for ``table`` in the transport's default schema, built here by its
    own rule (214c4e8f, ``CanonicalQueueAddress.cs`` of each transport), not by this package: PostgreSQL
    ``"schema"."table"`` with ``"`` doubled; SQL Server ``table@[schema]@[catalog]`` with ``]`` doubled."""
    schema = transport.default_schema or transport.dialect.default_schema
    if transport.dialect.name == "postgresql":
        return '"' + schema.replace('"', '""') + '"."' + table.replace('"', '""') + '"'
    catalog = transport.current_catalog()
    return f"{table}@[{schema.replace(']', ']]')}]@[{catalog.replace(']', ']]')}]"


class ReferenceSubscriptions:
    """The reference's statements, run on ``transport``'s database against its subscription table."""

    def __init__(self, transport) -> None:
        self.transport = transport
        store = transport.subscriptions
        address = store.address
        if transport.dialect.name == "sqlserver":
            catalog = transport.current_catalog()
            quote = transport.dialect.quote
            self.texts = REFERENCE_SQLSERVER
            self.table = f"{quote(catalog)}.{quote(address.schema)}.{quote(address.table)}"
            self.catalog = quote(catalog)
        else:
            self.texts = REFERENCE_POSTGRESQL
            self.table = transport.dialect.qualified_name(address)
            self.catalog = ""

    def run(self, name: str, values: dict[str, str], topics: int = 0) -> list[tuple]:
        text = self.texts[name]
        if self.transport.dialect.name == "sqlserver":
            markers = ", ".join(f"@Topic_{index}" for index in range(topics))
            sql = text.format(self.table, markers if name == "lookup" else self.catalog)
            declared = "".join(f"DECLARE @{key} nvarchar(200) = ?;\n" for key in values)
            return rawsql.execute(self.transport, declared + sql, tuple(values.values()))
        markers = ", ".join(f"@Topic_{index}" for index in range(topics))
        sql = re.sub(r"@(\w+)", r"%(\1)s", text.format(self.table, markers))
        with self.transport.connection() as connection:
            cursor = connection.cursor()
            cursor.execute(sql, values)
            rows = cursor.fetchall() if cursor.description is not None else []
            connection.commit()
        return [tuple(row) for row in rows]


@pytest.mark.parametrize(
    ("target", "created_by"),
    [
        *(
            (engine, created_by)
            for engine in ("postgresql", "sqlserver-msodbc")
            for created_by in ("reference", "package")
        ),
        ("sqlserver-freetds", "reference"),  # the driver does not change the table: one run through it
    ],
    indirect=["target"],
)
def test_the_reference_and_this_package_share_the_subscription_table(transport, created_by: str) -> None:
    """On the table the reference's installer creates (or this package's, which the reference's installer
    then leaves as it is), with the reference's own address forms: a subscription its statement writes
    (``"schema"."billing"`` on PostgreSQL) is honoured by this package's publish, one this package writes is
    found by its lookup in the form the reference writes (so a .NET publisher parses it), and its
    unsubscribe removes it. Babelfish refuses the reference's MERGE, so a .NET endpoint cannot subscribe
    there at all; that refusal is what this asserts on Babelfish, where the rest still holds."""
    reference = ReferenceSubscriptions(transport)
    store = transport.subscriptions
    if created_by == "reference":
        reference.run("create", {})
        assert store.exists() and store.create() is False  # the reference's table, found as ours
    else:
        assert store.create() is True
        reference.run("create", {})  # finds it and creates nothing
    for name in ("billing", "shipping"):
        transport.queue(name).create()
    billing, shipping = (reference_address(transport, name) for name in ("billing", "shipping"))
    topic = "Sales.Events.OrderPlaced"

    store.subscribe("Billing", topic, "shipping")  # to be moved by the reference's upsert
    subscribe = {"Endpoint": "Billing", "QueueAddress": billing, "Topic": topic}
    if transport.dialect.variant == "babelfish":
        with pytest.raises(Exception, match=re.escape(BABELFISH_REFUSES_MERGE)):
            reference.run("subscribe", subscribe)
        store.subscribe("Billing", topic, "billing")
    else:
        reference.run("subscribe", subscribe)
    assert store.list(topic) == [Subscription(billing, "Billing", topic)]

    store.subscribe("Shipping", "Sales.Events.IOrderEvent", "shipping")
    topics = {f"Topic_{index}": name for index, name in enumerate([topic, "Sales.Events.IOrderEvent"])}
    assert sorted(row[0] for row in reference.run("lookup", topics, len(topics))) == [billing, shipping]

    result = transport.publish(topic, b"placed", base_topics=["Sales.Events.IOrderEvent"])
    assert sorted(result.queues) == [billing, shipping]
    for name in ("billing", "shipping"):
        with transport.queue(name).receive() as batch:
            assert [message.body for message in batch] == [b"placed"]

    reference.run("unsubscribe", {"Endpoint": "Shipping", "Topic": "Sales.Events.IOrderEvent"})
    assert [row.endpoint for row in store.list()] == ["Billing"]
    assert transport.publish("Sales.Events.IOrderEvent", b"none").queues == ()


@pytest.mark.parametrize("target", ["postgresql", "sqlserver-msodbc"], indirect=True)
def test_a_reference_subscription_row_naming_no_table_fails_the_publish_naming_the_row(transport) -> None:
    """As the reference's dispatch fails on a subscriber queue that does not exist, the publish fails, names
    the row's QueueAddress as stored, and sends nobody a copy; the other subscribers' rows still work once
    the row is gone."""
    reference = ReferenceSubscriptions(transport)
    store = transport.subscriptions
    store.create()
    transport.queue("billing").create()
    store.subscribe("Billing", "T", "billing")
    nowhere = reference_address(transport, "nowhere")
    p = rawsql.param(transport)
    rawsql.execute(
        transport,
        f"INSERT INTO {reference.table} (QueueAddress, Endpoint, Topic) VALUES ({p}, {p}, {p})",
        (nowhere, "Gone", "T"),
    )
    with pytest.raises(QueueNotFound, match=re.escape(f"QueueAddress {nowhere!r} (a subscriber of T)")):
        transport.publish("T", b"x")
    assert rawsql.all_rows(transport.queue("billing")) == []
    store.unsubscribe("Gone", "T")
    assert transport.publish("T", b"y").queues == (reference_address(transport, "billing"),)


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_reference_postgresql_addresses_in_headers_and_arguments(transport, target, capsys) -> None:
    """A .NET PostgreSQL endpoint writes ReplyToAddress as ``"schema"."table"``: a handler's reply reaches
    that queue. The FailedQ this package writes is in that form (what ServiceControl and .NET retries
    parse), and a retry reads it back. The command line takes the form as a queue argument."""
    for name in ("orders", "Sales.WEB01", "error", "billing"):
        transport.queue(name).create()
    orders = transport.queue("orders")
    sales = reference_address(transport, "Sales.WEB01")  # an instance queue: a dot inside the quotes
    dotnet = encode_headers({**DOTNET_HEADERS, "NServiceBus.ReplyToAddress": sales})
    rawsql.insert_foreign_row(orders, dotnet, b"order")
    rawsql.insert_foreign_row(orders, dotnet, b"fail")

    def handle(message, context) -> None:
        if message.body == b"fail":
            raise ValueError("no")
        context.reply(b"ack")

    MessagePump(orders, handle, immediate_retries=0, idle_delay=0.1).run(until_empty=True, timeout=30)
    with transport.queue("Sales.WEB01").receive() as batch:
        [reply] = batch
    assert reply.body == b"ack" and reply.headers["NServiceBus.CorrelationId"] == MESSAGE_ID
    [(_, failed_text, _)] = rawsql.all_rows(transport.queue("error"))
    assert decode_headers(failed_text)["NServiceBus.FailedQ"] == reference_address(transport, "orders")
    outcome = retry_failed(transport.queue("error"))
    assert len(outcome.done) == 1 and outcome.refused == []
    assert [body for _, _, body in rawsql.all_rows(orders)] == [b"fail"]

    database = ["--url", target.url, "--schema", target.schema]
    transport.subscriptions.create()
    billing = reference_address(transport, "billing")
    assert cli.main(["subscribe", billing, "T", *database, "--json"]) == cli.Exit.OK
    assert json.loads(capsys.readouterr().out)["queue"] == billing
    assert transport.subscriptions.list("T") == [Subscription(billing, "billing", "T")]
