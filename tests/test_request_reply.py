"""Request and reply (transport/requests.py, Endpoint.request): a request waits for the reply whose
NServiceBus.CorrelationId is its NServiceBus.MessageId on the instance queue, concurrent requests get
their own replies, and a reply nobody waits for any more reaches the error queue with the reason. The
responder is a Python endpoint, or rows written with the reference's own statements and headers."""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import rawsql

from airflow_provider_sqlqueue.transport import Endpoint, OutgoingMessage, Transport
from airflow_provider_sqlqueue.transport import headers as h
from airflow_provider_sqlqueue.transport.headers import decode_headers, encode_headers
from airflow_provider_sqlqueue.transport.requests import RequestTimeout

FAST = {"idle_delay": 0.1}


def _endpoints(transport: Transport) -> tuple[Endpoint, Endpoint]:
    server = Endpoint(transport, "Pricing", instance_suffix="s1")
    client = Endpoint(transport, "Planner", instance_suffix="worker1", reply_settings=FAST)
    for endpoint in (server, client):
        endpoint.create()
    return server, client


def _serve(message, context) -> None:
    context.reply(b"price:" + message.body, {h.CONTENT_TYPE: "text/plain"})


def test_concurrent_requests_each_get_their_own_reply(target, transport: Transport) -> None:
    server, client = _endpoints(transport)
    server.start(_serve, max_concurrency=2, **FAST)
    try:
        with ThreadPoolExecutor(4) as pool:
            asked = [f"item-{n}".encode() for n in range(8)]
            replies = list(pool.map(lambda body: client.request("Pricing", body, timeout=60), asked))

        async def ask_async() -> list:
            bodies = [f"async-{n}".encode() for n in range(4)]
            answers = await asyncio.gather(
                *(client.request_async("Pricing", body, timeout=60) for body in bodies)
            )
            return list(zip(bodies, answers, strict=True))

        async_pairs = asyncio.run(ask_async())
    finally:
        server.stop(timeout=5)
        client.stop(timeout=5)
    for body, reply in [*zip(asked, replies, strict=True), *async_pairs]:
        assert reply.body == b"price:" + body  # its own answer, none misrouted
        assert reply.headers[h.MESSAGE_INTENT] == "Reply"
    correlations = [reply.headers[h.CORRELATION_ID] for reply in replies]
    assert len(set(correlations)) == len(replies)
    assert len(client.pending_requests) == 0
    assert client.instance_queue.count() == 0 and transport.queue("error").count() == 0


def test_a_request_carries_the_instance_queue_and_its_own_message_id(target, transport: Transport) -> None:
    """What the responder reads: ReplyToAddress is the instance queue, CorrelationId the MessageId."""
    _, client = _endpoints(transport)
    request_id = uuid.uuid4()
    with pytest.raises(RequestTimeout, match=str(request_id)):
        client.request("Pricing", b"x", {"Custom": "1"}, timeout=0.2, message_id=request_id)
    client.stop(timeout=5)
    with transport.queue("Pricing").receive() as batch:
        [request] = batch
    assert request.id == request_id
    assert request.headers[h.MESSAGE_ID] == str(request_id)
    assert request.headers[h.CORRELATION_ID] == str(request_id)
    assert request.headers[h.MESSAGE_INTENT] == "Send"
    assert request.headers[h.REPLY_TO_ADDRESS] == client.reply_to_address
    assert request.headers[h.REPLY_TO_ADDRESS] == str(transport.canonical("Planner.worker1"))
    assert request.headers["Custom"] == "1"


@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_a_reply_nobody_waits_for_goes_to_the_error_queue_with_the_reason(target, transport) -> None:
    """The request timed out, then its process restarted (a new Endpoint, same instance queue): the late
    reply reaches the error queue with the reason, and the new process's own request is answered."""
    server, client = _endpoints(transport)
    with pytest.raises(RequestTimeout):
        client.request("Pricing", b"late", timeout=0.2)
    client.stop(timeout=5)
    restarted = Endpoint(transport, "Planner", instance_suffix="worker1", reply_settings=FAST)
    server.start(_serve, **FAST)
    try:
        reply = restarted.request("Pricing", b"now", timeout=60)
        deadline = time.monotonic() + 30
        while transport.queue("error").count() == 0:
            assert time.monotonic() < deadline, "the late reply never reached the error queue"
            time.sleep(0.05)
    finally:
        server.stop(timeout=5)
        restarted.stop(timeout=5)
    assert reply.body == b"price:now"
    with transport.queue("error").receive(10) as batch:
        [late] = batch
    assert late.body == b"price:late"
    assert late.headers[h.FAILED_QUEUE] == str(transport.canonical("Planner.worker1"))
    assert late.headers["NServiceBus.ExceptionInfo.ExceptionType"].endswith("UnclaimedReply")
    assert "no request waits for message" in late.headers["NServiceBus.ExceptionInfo.Message"]
    assert restarted.instance_queue.count() == 0


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_a_started_endpoint_hands_replies_to_requests_and_the_rest_to_its_handler(target, transport) -> None:
    server, client = _endpoints(transport)
    handled: list = []
    server.start(_serve, **FAST)
    client.start(lambda message: handled.append(message.body), **FAST)
    try:
        sent = client.send("Pricing", b"plain send")  # its reply is not awaited: the handler takes it
        reply = client.request("Pricing", b"awaited", timeout=60)
        deadline = time.monotonic() + 30
        while not handled:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        server.stop(timeout=5)
        client.stop(timeout=5)
    assert reply.body == b"price:awaited"
    assert handled == [b"price:plain send"] and sent


# ---- a .NET responder: the reference's own statements and the headers NServiceBus Core writes ---------
# Taken verbatim from Particular/NServiceBus.SqlServer (src/NServiceBus.Transport.SqlServer/Queuing/
# SqlServerConstants.cs SendTextWithRecoverable; src/NServiceBus.Transport.PostgreSql/PostgreSqlConstants.cs
# SendText and ReceiveText); {0} is the quoted table name. Named parameters are DECLAREd for pyodbc and
# become %(Name)s for psycopg, as tests/test_wire_compat.py runs the reference's statements.
REFERENCE_SEND_SQLSERVER = """
DECLARE @NOCOUNT VARCHAR(3) = 'OFF';
IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON'
SET NOCOUNT ON;

INSERT INTO {0} (
    Id,
    Recoverable,
    Expires,
    Headers,
    Body)
VALUES (
    @Id,
    1,
    CASE WHEN @TimeToBeReceivedMs IS NOT NULL
        THEN DATEADD(ms, @TimeToBeReceivedMs, GETUTCDATE()) END,
    @Headers,
    @Body);

IF (@NOCOUNT = 'ON') SET NOCOUNT ON;
IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""
REFERENCE_SEND_POSTGRESQL = """
INSERT INTO {0} (
    Id,
    Expires,
    Headers,
    Body)
VALUES (
    @Id,
    NULL,
    @Headers,
    @Body);
"""
REFERENCE_CREATE_QUEUE_POSTGRESQL = """
    CREATE TABLE IF NOT EXISTS {0} (
        Id uuid NOT NULL,
        CorrelationId varchar(255),
        ReplyToAddress varchar(255),
        Expires TIMESTAMP,
        Headers TEXT NOT NULL,
        Body BYTEA,
        RowVersion serial NOT NULL
    );"""
REFERENCE_RECEIVE_POSTGRESQL = """
DELETE FROM
    {0}
USING (
    SELECT Id, 
    CASE WHEN Expires IS NULL
        THEN 0
        WHEN Expires > now() AT TIME ZONE 'UTC' THEN 0 ELSE 1
    END Expired,
    Headers, Body FROM {0} LIMIT 1 FOR UPDATE SKIP LOCKED
) q
WHERE q.id = {0}.id RETURNING q.Id, q.Expired, q.Headers, q.Body;
"""  # noqa: W291 - the reference's text, trailing space included


def _dotnet_reply_headers(request_headers: dict, reply_id: str) -> dict:
    """The headers NServiceBus Core writes on ``context.Reply(new PriceQuote(...))`` answering the request:
    a new MessageId, intent Reply, the request's correlation id, conversation and id (RelatedTo), the
    responder's own reply address and origin, the content and enclosed types, its version and time."""
    return {
        "NServiceBus.MessageId": reply_id,
        "NServiceBus.MessageIntent": "Reply",
        "NServiceBus.RelatedTo": request_headers["NServiceBus.MessageId"],
        "NServiceBus.ConversationId": request_headers["NServiceBus.ConversationId"],
        "NServiceBus.CorrelationId": request_headers["NServiceBus.CorrelationId"],
        "NServiceBus.ReplyToAddress": "Pricing@[dbo]@[nservicebus]",
        "NServiceBus.OriginatingMachine": "PRICING01",
        "NServiceBus.OriginatingEndpoint": "Pricing",
        "$.diagnostics.originating.hostid": "2f2b1d05c29c4b2c9b1e3d6a8f7e5c4a",
        "NServiceBus.ContentType": "application/json",
        "NServiceBus.EnclosedMessageTypes": "Pricing.Messages.PriceQuote, Pricing.Messages, Version=1.0.0.0, "
        "Culture=neutral, PublicKeyToken=null",
        "NServiceBus.Version": "9.2.3",
        "NServiceBus.TimeSent": "2026-11-21 23:05:07:123456 Z",
    }


class DotnetResponder:
    """Takes one request from ``Pricing`` and answers it the way a .NET endpoint's ``context.Reply`` does,
    written with the reference's send statement to the request's ReplyToAddress."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.request_headers: dict | None = None
        self.reply_id = str(uuid.uuid4())

    def _take_request(self) -> tuple[str, bytes] | None:
        queue = self.transport.queue("Pricing")
        if self.transport.dialect.name == "postgresql":
            sql = REFERENCE_RECEIVE_POSTGRESQL.format(rawsql.table_of(queue))
            rows = rawsql.execute(self.transport, sql)
            return (rows[0][2], bytes(rows[0][3])) if rows else None
        # Babelfish refuses the reference's receive (DML through a CTE): the request is taken by this
        # package's receive, the reply written with the reference's own INSERT
        with queue.receive() as batch:
            return (batch[0].headers_text, batch[0].body) if len(batch) else None

    def write_reply(self, reply_queue, headers_text: str, body: bytes) -> None:
        """The reference's send statement, with the parameters its dispatcher binds."""
        table = rawsql.table_of(reply_queue)
        native_id = uuid.uuid4()
        if self.transport.dialect.name == "postgresql":
            sql = re.sub(r"@(\w+)", r"%(\1)s", REFERENCE_SEND_POSTGRESQL.format(table))
            with self.transport.connection() as connection:
                connection.cursor().execute(sql, {"Id": native_id, "Headers": headers_text, "Body": body})
                connection.commit()
            return
        declared = (
            "DECLARE @Id uniqueidentifier = ?;\nDECLARE @TimeToBeReceivedMs int = NULL;\n"
            "DECLARE @Headers nvarchar(max) = ?;\nDECLARE @Body varbinary(max) = ?;\n"
        )
        sql = declared + REFERENCE_SEND_SQLSERVER.format(table)
        rawsql.execute(self.transport, sql, (str(native_id).upper(), headers_text, body))

    def answer_one(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        taken = self._take_request()
        while taken is None:
            assert time.monotonic() < deadline, "no request arrived"
            time.sleep(0.05)
            taken = self._take_request()
        headers_text, body = taken
        self.request_headers = decode_headers(headers_text)
        reply_to = self.request_headers["NServiceBus.ReplyToAddress"]
        reply_queue = self.transport.queue(reply_to)
        reply_headers = encode_headers(_dotnet_reply_headers(self.request_headers, self.reply_id))
        self.write_reply(reply_queue, reply_headers, b'{"Price":12.5,"Item":' + body + b"}")


@pytest.mark.parametrize("target", ["postgresql", "sqlserver-msodbc", "sqlserver-freetds"], indirect=True)
def test_a_request_is_answered_by_a_reply_written_with_the_reference_statements(target, transport) -> None:
    if transport.dialect.name == "postgresql":
        # the instance queue as the reference's installer creates it: its INSERT has no Recoverable, which
        # this package's PostgreSQL table requires (see the strict xfail below)
        instance = transport.queue("Planner.worker1")
        rawsql.execute(transport, REFERENCE_CREATE_QUEUE_POSTGRESQL.format(rawsql.table_of(instance)))
    _, client = _endpoints(transport)
    responder = DotnetResponder(transport)
    answering = threading.Thread(target=responder.answer_one, daemon=True)
    answering.start()
    try:
        reply = client.request(
            "Pricing",
            b'"widget"',
            {h.CONTENT_TYPE: "application/json", h.ENCLOSED_MESSAGE_TYPES: "Planning.Messages.GetPrice"},
            timeout=60,
        )
    finally:
        answering.join(30)
        client.stop(timeout=5)
    request = responder.request_headers
    assert request is not None
    assert request["NServiceBus.ReplyToAddress"] == client.reply_to_address
    assert request["NServiceBus.CorrelationId"] == request["NServiceBus.MessageId"]
    assert request["NServiceBus.MessageIntent"] == "Send"
    assert reply.body == b'{"Price":12.5,"Item":"widget"}'
    assert reply.message_id == responder.reply_id
    assert reply.headers["NServiceBus.CorrelationId"] == request["NServiceBus.MessageId"]
    assert reply.headers["NServiceBus.EnclosedMessageTypes"].startswith("Pricing.Messages.PriceQuote")
    assert client.instance_queue.count() == 0 and transport.queue("error").count() == 0


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_the_reference_send_statement_writes_into_a_queue_this_package_created(target, transport) -> None:
    queue = transport.queue("Planner.worker1")
    queue.create()
    headers = encode_headers({h.MESSAGE_ID: "m", h.CORRELATION_ID: "c", h.MESSAGE_INTENT: "Reply"})
    DotnetResponder(transport).write_reply(queue, headers, b"{}")
    assert queue.count() == 1


def test_a_message_that_is_not_a_reply_is_not_taken_for_one() -> None:
    """As the reference: the correlation must name a waiting request, and the intent must be Reply unless
    the sender predates NServiceBus 5 (which did not write it)."""
    from airflow_provider_sqlqueue.transport.requests import correlation_of_reply

    assert correlation_of_reply({h.CORRELATION_ID: "c", h.MESSAGE_INTENT: "Reply"}) == "c"
    assert correlation_of_reply({h.CORRELATION_ID: "c", h.MESSAGE_INTENT: "Send"}) is None
    assert correlation_of_reply({h.CORRELATION_ID: "c"}) is None
    old = {h.CORRELATION_ID: "c", h.MESSAGE_INTENT: "Send", h.NSERVICEBUS_VERSION: "4.7.2"}
    assert correlation_of_reply(old) == "c"
    assert correlation_of_reply({h.MESSAGE_INTENT: "Reply"}) is None
    assert OutgoingMessage(b"").headers[h.CORRELATION_ID]  # sends always carry one


@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_the_request_reply_benchmark_runs_both_layouts(target, monkeypatch) -> None:
    """benchmarks/request_reply_bench.py at a toy size: both layouts read every reply, and what a request
    opened is closed again (no reply queue, no service or error queue left)."""
    import sys
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    bench = __import__("request_reply_bench")
    try:
        cost = bench.measure(target.url, requests=4, rounds=1, default_schema=target.schema)
    finally:
        sys.modules.pop("request_reply_bench", None)
    assert cost.requests == 4 and cost.own_queue_round > 0 and cost.ratio > 0
    assert "4 waiting requests" in cost.line()
    with target.open() as transport:
        from airflow_provider_sqlqueue.transport.browse import queue_tables

        assert [a.table for a in queue_tables(transport) if a.table.startswith("bench.")] == []


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_a_reply_to_a_dropped_reply_queue_fails_at_its_sender_and_the_request_reaches_its_error_queue(
    target, transport: Transport
) -> None:
    """docs/request-reply.md: a reply sent after its per-request reply queue was dropped (the task gave up)
    fails at the responder, whose retries then move the request it answers to its own error queue."""
    server, client = _endpoints(transport)
    gone = transport.queue("Planner.reply.gone")
    gone.create()
    gone.drop()
    request_id = uuid.uuid4()
    transport.queue("Pricing").send(
        OutgoingMessage(
            b"widget",
            headers={h.REPLY_TO_ADDRESS: str(transport.canonical("Planner.reply.gone"))},
            id=request_id,
        )
    )
    server.start(_serve, immediate_retries=1, **FAST)
    try:
        deadline = time.monotonic() + 60
        while not transport.queue("error").count():
            assert time.monotonic() < deadline, "the request never reached the error queue"
            time.sleep(0.1)
    finally:
        server.stop(timeout=5)
        client.stop(timeout=5)
    with transport.queue("error").receive() as batch:
        [failed] = batch
    assert failed.body == b"widget" and failed.headers[h.MESSAGE_ID] == str(request_id)
    assert failed.headers[h.FAILED_QUEUE] == str(transport.canonical("Pricing"))
    assert "Planner.reply.gone" in failed.headers["NServiceBus.ExceptionInfo.Message"]
    assert transport.queue("Pricing").count() == 0
