"""Queue tables made by NServiceBus.Transport.PostgreSql's own DDL, used by this package without any option:
sends, receives in Seq order, peeks, counts, purges, the pump and the error queue, with the reference's own
statements on the other side of each exchange.

The statements are taken verbatim from Particular/NServiceBus.SqlServer 214c4e8f
(src/NServiceBus.Transport.PostgreSql/PostgreSqlConstants.cs: CreateQueueText, SendText, ReceiveText,
PeekText); {0} is the quoted table name. Npgsql rewrites @Name to a positional parameter; psycopg's form of
that is %(Name)s, the only change made. The reference keeps Expires as UTC wall-clock time in a column
without a time zone: every connection here runs in a session time zone of UTC+14 (PGTZ), so a comparison
that let the session's zone in would be 14 hours off.
"""

from __future__ import annotations

import json
import re
import sys
import time
import uuid
from datetime import timedelta

import pytest
import rawsql

from airflow_provider_sqlqueue.transport import MessagePump, OutgoingMessage, open_transport
from airflow_provider_sqlqueue.transport.browse import queue_tables
from airflow_provider_sqlqueue.transport.headers import decode_headers, encode_headers

pytestmark = pytest.mark.parametrize("target", ["postgresql"], indirect=True)

REFERENCE_CREATE_QUEUE = """
CREATE TABLE IF NOT EXISTS {0} (
    Id uuid NOT NULL PRIMARY KEY,
    Expires TIMESTAMP,
    Headers TEXT NOT NULL,
    Body BYTEA,
    Seq serial NOT NULL UNIQUE
);
"""
REFERENCE_SEND = """
INSERT INTO {0} (
    Id,
    Expires,
    Headers,
    Body)
VALUES (
    @Id,
    (now() AT TIME ZONE 'UTC') + (@TimeToBeReceivedMs || ' ms')::INTERVAL,
    @Headers,
    @Body);"""
REFERENCE_RECEIVE = """
DELETE FROM {0} rs
WHERE rs.id = (SELECT id FROM {0} ORDER BY Seq LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING rs.id,
        CASE WHEN Expires IS NULL
        THEN 0
        WHEN Expires > now() AT TIME ZONE 'UTC' THEN 0 ELSE 1
        END Expired,
        rs.Headers, rs.Body;
"""
REFERENCE_PEEK = """
SELECT COALESCE(cast((SELECT seq FROM {0} ORDER BY seq DESC LIMIT 1 FOR UPDATE SKIP LOCKED) 
- (SELECT seq FROM {0} ORDER BY seq ASC LIMIT 1 FOR UPDATE SKIP LOCKED) + 1 AS int), 0);"""  # noqa: W291
FAST = {"idle_delay": 0.1}


@pytest.fixture
def transport(target, monkeypatch):
    monkeypatch.setenv("PGTZ", "Pacific/Kiritimati")  # UTC+14 in every session libpq opens
    with target.open() as opened:
        yield opened


def reference(transport, statement: str, queue, values: dict | None = None) -> list[tuple]:
    """One of the reference's statements on ``queue``'s table, committed; its rows."""
    sql = re.sub(r"@(\w+)", r"%(\1)s", statement.format(rawsql.table_of(queue)))
    with transport.connection() as connection:
        cursor = connection.cursor()
        cursor.execute(sql, values or {})
        rows = cursor.fetchall() if cursor.description is not None else []
        connection.commit()
    return [tuple(row) for row in rows]


def reference_queue(transport, name: str):
    queue = transport.queue(name)
    reference(transport, REFERENCE_CREATE_QUEUE, queue)
    return queue


def reference_send(transport, queue, body: bytes, ttbr_ms: int | None = None, headers: str | None = None):
    message_id = str(uuid.uuid4())
    text = headers if headers is not None else encode_headers({"NServiceBus.MessageId": message_id})
    values = {"Id": uuid.uuid4(), "TimeToBeReceivedMs": ttbr_ms, "Headers": text, "Body": body}
    reference(transport, REFERENCE_SEND, queue, values)
    return message_id


def test_this_package_sends_and_the_reference_receives_in_order(transport) -> None:
    queue = reference_queue(transport, "orders")
    first = queue.send(b"one", headers={"NServiceBus.CorrelationId": "c-1"})
    rest = queue.send_batch([b"two", OutgoingMessage(b"three", time_to_be_received=timedelta(hours=1))])
    queue.send(b"gone", time_to_be_received=timedelta(milliseconds=1))
    time.sleep(0.05)
    assert reference(transport, REFERENCE_PEEK, queue) == [(4,)]
    received = [reference(transport, REFERENCE_RECEIVE, queue) for _ in range(5)]
    assert [bytes(rows[0][3]) for rows in received[:4]] == [b"one", b"two", b"three", b"gone"]
    assert [rows[0][1] for rows in received[:4]] == [0, 0, 0, 1]  # the hour is left; the 1 ms is not
    assert received[4] == []
    ids = [decode_headers(rows[0][2])["NServiceBus.MessageId"] for rows in received[:3]]
    assert ids == [str(first), *map(str, rest)]
    assert decode_headers(received[0][0][2])["NServiceBus.CorrelationId"] == "c-1"


def test_the_reference_sends_and_this_package_receives_peeks_counts_and_purges(transport) -> None:
    queue = reference_queue(transport, "orders")
    sent = [reference_send(transport, queue, body) for body in (b"a", b"b")]
    reference_send(transport, queue, b"stale", ttbr_ms=1)
    reference_send(transport, queue, b"kept", ttbr_ms=3_600_000)
    time.sleep(0.05)
    assert queue.peek_estimate() == 4 and queue.peek_bounds()[1] - queue.peek_bounds()[0] == 3
    assert queue.count() == 3  # the expired row is not counted
    assert queue.purge_expired() == 1 and queue.count() == 3
    with queue.receive(max_messages=10) as batch:
        assert [message.body for message in batch] == [b"a", b"b", b"kept"]
        assert [message.message_id for message in batch[:2]] == sent
    assert queue.peek_estimate() == 0 and queue.count() == 0
    assert queue.peek_bounds() == (None, None)


def test_expired_rows_are_dropped_on_receive_by_the_utc_clock(transport) -> None:
    queue = reference_queue(transport, "orders")
    reference_send(transport, queue, b"stale", ttbr_ms=1)
    reference_send(transport, queue, b"fresh", ttbr_ms=60_000)
    time.sleep(0.05)
    with queue.receive(max_messages=10) as batch:
        assert [message.body for message in batch] == [b"fresh"]
        assert batch.expired == 1


def test_the_pump_moves_failures_and_unreadable_rows_to_a_reference_error_queue(transport) -> None:
    error = reference_queue(transport, "error")
    queue = reference_queue(transport, "orders")
    reference_send(transport, queue, b"bad")
    reference_send(transport, queue, b"broken", headers="<corrupted headers")
    reference_send(transport, queue, b"good")
    handled: list[bytes] = []

    def handler(message, context) -> None:
        if message.body == b"bad":
            raise ValueError("cannot handle it")
        handled.append(message.body)
        context.send("error", b"a reply written in the receive's transaction")

    stats = MessagePump(queue, handler, immediate_retries=1, **FAST).run(until_empty=True, timeout=30)
    assert handled == [b"good"]
    assert (stats.processed, stats.failed, stats.poisoned) == (1, 1, 1)
    rows = reference(transport, "SELECT Headers, Body FROM {0} ORDER BY Seq", error)
    by_body = {bytes(body): text for text, body in rows}
    assert sorted(by_body) == [b"a reply written in the receive's transaction", b"bad", b"broken"]
    assert by_body[b"broken"] == "<corrupted headers"  # moved unchanged
    failed = decode_headers(by_body[b"bad"])
    assert failed["NServiceBus.FailedQ"] == str(transport.canonical(queue.address))
    assert failed["NServiceBus.ExceptionInfo.Message"] == "cannot handle it"
    assert queue.count() == 0


def test_a_reference_table_is_recognised_by_a_fresh_transport_and_listed_and_inspected(target) -> None:
    with target.open() as setup:
        queue = reference_queue(setup, "orders")
        reference_send(setup, queue, b"x")
    with target.open() as transport:  # nothing remembered: the first receive finds the layout
        queue = transport.queue("orders")
        with queue.receive() as batch:
            assert [message.body for message in batch] == [b"x"]
        assert queue.dialect.layout == "postgresql-transport"
        assert transport.dialect.layout == "sqlserver-transport"  # the other queues keep the package's
        assert [finding.code for finding in queue.inspect()] == ["missing_expires_index"]
        assert queue.create() is False  # leaves the reference's table as it is: no RowVersion index asked for
        assert [address.table for address in queue_tables(transport)] == ["orders"]


def test_this_package_creates_the_reference_layout_when_asked(transport) -> None:
    queue = transport.queue("orders")
    script = queue.create_script(column_layout="postgresql-transport")
    assert "Seq serial NOT NULL UNIQUE" in script and "RowVersion" not in script
    assert queue.create(column_layout="postgresql-transport") is True
    reference(transport, REFERENCE_CREATE_QUEUE, queue)  # the reference's installer finds it and adds nothing
    columns = rawsql.execute(
        transport,
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (rawsql.table_of(queue),),
    )
    assert columns == [
        ("id", "uuid"),
        ("expires", "timestamp without time zone"),
        ("headers", "text"),
        ("body", "bytea"),
        ("seq", "integer"),
    ]
    assert queue.inspect() == []
    reference_send(transport, queue, b"from .NET")
    queue.send(b"from Python")
    received = [reference(transport, REFERENCE_RECEIVE, queue)[0][3] for _ in range(2)]
    assert [bytes(body) for body in received] == [b"from .NET", b"from Python"]


def test_a_publish_reaches_a_subscriber_queue_the_reference_made(transport) -> None:
    """A .NET subscriber's row (its address form) names a queue its installer made: this package's publish
    writes the copy in that queue's layout, and the reference's receive takes it."""
    transport.subscriptions.create()
    billing = reference_queue(transport, "billing")
    own = transport.queue("shipping")
    own.create()
    address = f'"{transport.default_schema}"."billing"'
    transport.subscriptions.subscribe("Billing", "Sales.OrderPlaced", address)
    transport.subscriptions.subscribe("Shipping", "Sales.OrderPlaced", "shipping")
    transport.publish("Sales.OrderPlaced", b"placed")
    [(_, expired, headers, body)] = reference(transport, REFERENCE_RECEIVE, billing)
    assert (expired, bytes(body)) == (0, b"placed")
    assert decode_headers(headers)["NServiceBus.MessageIntent"] == "Publish"
    with own.receive() as batch:
        assert [message.body for message in batch] == [b"placed"]


def test_a_batch_of_bare_bodies_is_copied_in_and_the_reference_receives_it_in_order(transport) -> None:
    """A batch without a time to be received takes the binary COPY of the three columns it fills."""
    queue = reference_queue(transport, "orders")
    ids = queue.send_batch([b"one", b"two", b"three"])
    received = [reference(transport, REFERENCE_RECEIVE, queue)[0] for _ in range(3)]
    assert [(bytes(row[3]), row[1]) for row in received] == [(b"one", 0), (b"two", 0), (b"three", 0)]
    assert [decode_headers(row[2])["NServiceBus.MessageId"] for row in received] == list(map(str, ids))


def test_over_psqlodbc_a_reference_table_takes_sends_receives_and_counts(request, tmp_path, target) -> None:
    """The same layout reached through pyodbc and psqlODBC (``?`` parameters, ids and intervals as text)."""
    from conftest import odbc_target

    with target.open() as setup:
        queue = reference_queue(setup, "orders")
        reference_send(setup, queue, b".NET")
    odbc = odbc_target(request, "postgresql", tmp_path)
    over_odbc = next(odbc)
    try:
        with open_transport(over_odbc.url, default_schema=target.schema) as transport:
            queue = transport.queue("orders")
            queue.send(b"one", time_to_be_received=timedelta(hours=1))
            queue.send_batch([b"two", b"three"])
            assert queue.count() == 4 and queue.peek_estimate() == 4
            with queue.receive(max_messages=10) as batch:
                assert [message.body for message in batch] == [b".NET", b"one", b"two", b"three"]
            assert queue.dialect.layout == "postgresql-transport"
    finally:
        odbc.close()


def test_a_fresh_process_browses_a_reference_queue_and_retries_from_a_reference_error_queue(target) -> None:
    """Tools that render their statements before connecting learn the layout first: browsing, the count of
    expired messages, the error queue's groups and a message's rows, and the retry back to its queue."""
    from airflow_provider_sqlqueue.transport.browse import browse, count_expired
    from airflow_provider_sqlqueue.transport.failed import failed_groups, retry_failed, show_failed
    from airflow_provider_sqlqueue.transport.overview import queues_overview

    with target.open() as setup:
        reference_queue(setup, "error")
        orders = reference_queue(setup, "orders")
        reference_send(setup, orders, b"bad")

        def handler(message, context) -> None:
            raise ValueError("not yet")

        MessagePump(orders, handler, immediate_retries=0, **FAST).run(until_empty=True, timeout=30)
        message_id = reference_send(setup, orders, b"waiting")
        reference_send(setup, orders, b"stale", ttbr_ms=1)
    time.sleep(0.05)
    with target.open() as transport:
        orders, error = transport.queue("orders"), transport.queue("error")
        assert [message.body for message in browse(orders)] == [b"waiting"]
        assert browse(orders)[0].headers["NServiceBus.MessageId"] == message_id and count_expired(orders) == 1
        overview = queues_overview(transport, exact_below=100)
        counted = {(state.address.table, state.messages, state.exact) for state in overview.queues}
        assert counted == {("orders", 1, True), ("error", 1, True)}  # the expired one is not counted
        assert [group.count for group in overview.failed] == [1]
        [group] = failed_groups(error)
        assert group.count == 1
        [(native_id,)] = reference(transport, "SELECT Id FROM {0}", error)
        [shown] = show_failed(error, str(native_id))
        assert shown.body == b"bad"
        outcome = retry_failed(error)
        assert len(outcome.done) == 1 and outcome.refused == []
        assert error.count() == 0
        with orders.receive(max_messages=10) as batch:
            assert [message.body for message in batch] == [b"waiting", b"bad"]


def test_the_command_line_scripts_and_creates_the_reference_layout(transport, target, capsys) -> None:
    from airflow_provider_sqlqueue import cli

    script = ["script", "--engine", "postgresql", "orders", "--column-layout", "postgresql-transport"]
    assert cli.main(script) == 0
    printed = capsys.readouterr().out
    assert "postgresql-transport columns" in printed and "Seq serial NOT NULL UNIQUE" in printed
    create = ["create", "--url", target.url, "--schema", target.schema, "orders"]
    assert cli.main([*create, "--column-layout", "postgresql-transport"]) == 0
    queue = transport.queue("orders")
    reference_send(transport, queue, b".NET")
    assert queue.count() == 1 and queue.dialect.layout == "postgresql-transport"
    assert cli.main(["script", "--engine", "sqlserver", *script[3:]]) != 0  # SQL Server has no such layout


def test_the_triggers_shared_read_sees_a_reference_queue_beside_a_package_queue(target) -> None:
    """The shared poll (transport/depth_reads.py) of a fresh transport, as a triggerer starts it, reads each
    queue in its own layout: the reference's by Seq, this package's by RowVersion, in one statement."""
    from airflow_provider_sqlqueue.transport.depth_reads import DepthReader, Target

    with target.open() as setup:
        theirs = reference_queue(setup, "orders")
        ours = setup.queue("billing")
        ours.create()
        theirs.send(b"a")  # with this package's headers, TimeSent among them (the oldest message's age)
        for body in (b"b", b"c"):
            reference_send(setup, theirs, body)
        ours.send(b"x")
    with target.open() as fresh:
        addresses = [fresh.queue("orders").address, fresh.queue("billing").address]
        reader = DepthReader(fresh)
        looks = reader.read([Target(address) for address in addresses], exact_for={addresses[0]: 0})
        orders, billing = (looks[address] for address in addresses)
        assert not isinstance(orders, BaseException), orders
        assert not isinstance(billing, BaseException), billing
        assert (orders.estimate, orders.exact, billing.estimate) == (3, 3, 1)
        assert orders.oldest_time_sent is not None and billing.oldest_time_sent is not None
        assert reader.statements == 2  # the bounds of both in one, the exact count in another


def test_the_provision_operator_creates_an_endpoint_in_the_reference_layout(target, monkeypatch) -> None:
    from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator

    for name, value in target.airflow_env("sqlqueue_default").items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match="column_layout"):
        ProvisionQueuesOperator(task_id="bad", endpoint="sales", column_layout="postgresql")
    provision = ProvisionQueuesOperator(
        task_id="provision", endpoint="sales", audit_queue=None, column_layout="postgresql-transport"
    )
    script = ProvisionQueuesOperator(
        task_id="script",
        endpoint="sales",
        audit_queue=None,
        column_layout="postgresql-transport",
        dry_run=True,
    ).execute({})
    assert script.count("Seq serial NOT NULL UNIQUE") == 2 and "RowVersion" not in script.split("_archive")[0]
    result = provision.execute({})
    assert {"sales", "error"} <= {name.split("@")[0] for name in result["created"]}
    with target.open() as fresh:
        sales = fresh.queue("sales")
        assert sales.resolved_dialect().layout == "postgresql-transport"
        sent = reference_send(fresh, sales, b"from .NET")
        with sales.receive() as batch:
            assert [(m.message_id, m.body) for m in batch] == [(sent, b"from .NET")]
        assert fresh.queue("error").resolved_dialect().layout == "postgresql-transport"


def test_a_delayed_message_moves_into_a_reference_queue_and_the_reference_receives_it(transport) -> None:
    from airflow_provider_sqlqueue.transport import DelayedMover, DelayedStore

    orders = reference_queue(transport, "orders")
    store = DelayedStore(transport, "sales.Delayed")
    store.create()
    first = store.store("orders", b"first", delay=timedelta(0), headers={"NServiceBus.CorrelationId": "c-1"})
    second = store.store("orders", b"second", delay=timedelta(0))
    later = store.store("orders", b"an hour later", delay=timedelta(hours=1))
    assert DelayedMover(store).move_once() == 2
    received = [reference(transport, REFERENCE_RECEIVE, orders) for _ in range(3)]
    assert [bytes(rows[0][3]) for rows in received[:2]] == [b"first", b"second"]
    assert received[2] == []
    headers = [decode_headers(rows[0][2]) for rows in received[:2]]
    assert [h["NServiceBus.MessageId"] for h in headers] == [str(first), str(second)]
    assert headers[0]["NServiceBus.CorrelationId"] == "c-1"
    assert store.count() == 1 and later not in (first, second)


def test_a_failed_message_deleted_from_a_reference_error_queue_lands_in_its_archive(transport) -> None:
    from airflow_provider_sqlqueue.transport.archive import ErrorArchive
    from airflow_provider_sqlqueue.transport.failed import delete_failed

    error = reference_queue(transport, "error")
    orders = reference_queue(transport, "orders")
    reference_send(transport, orders, b"bad")

    def handler(message, context) -> None:
        raise ValueError("not yet")

    MessagePump(orders, handler, immediate_retries=0, **FAST).run(until_empty=True, timeout=30)
    [(native_id, seq, headers)] = reference(transport, "SELECT Id, Seq, Headers FROM {0}", error)
    outcome = delete_failed(error)
    assert len(outcome.done) == 1 and error.count() == 0
    archive = ErrorArchive.of(error)
    assert archive.count() == 1
    archived = transport.queue(archive.address, error_queue=None)  # a table to name, as a queue is
    [row] = reference(
        transport, "SELECT Id, ErrorRowVersion, Headers, Body, CorrelationId FROM {0}", archived
    )
    assert row == (native_id, seq, headers, b"bad", None)

    # ... and comes back from it into the reference table (a new Seq), then a retry sends it on
    from airflow_provider_sqlqueue.transport.failed import FailureFilter, retry_failed

    restored = archive.restore([str(native_id)])
    assert restored.restored == [str(native_id)] and restored.moved == 1 and archive.count() == 0
    [(back_id, back_seq, back_headers, back_body)] = reference(
        transport, "SELECT Id, Seq, Headers, Body FROM {0}", error
    )
    assert (back_id, back_headers, bytes(back_body)) == (native_id, headers, b"bad") and back_seq > seq
    assert retry_failed(error, FailureFilter(ids=[str(native_id)])).done == [str(native_id)]
    [received] = reference(transport, REFERENCE_RECEIVE, orders)
    assert received[0] == native_id and bytes(received[3]) == b"bad"


# The reference's delayed table and its two statements on it (PostgreSqlConstants.cs at 214c4e8f:
# CreateDelayedMessageStoreText, StoreDelayedMessageText, MoveDueDelayedMessageText). MoveDue is two commands,
# which Npgsql sends as a batch and psycopg runs one by one (split at the blank line, as written).
REFERENCE_CREATE_DELAYED = """
CREATE TABLE IF NOT EXISTS {0} (
    Id uuid NOT NULL DEFAULT gen_random_uuid() PRIMARY KEY, 
    Headers text NOT NULL,
    Body bytea,
    Due timestamptz NOT NULL
) WITH (fillfactor=100);
"""  # noqa: W291
REFERENCE_STORE_DELAYED = """
WITH params (DueDate) as (
   values (timestamptz (now() AT TIME ZONE 'UTC') + (@DueAfterDays || ' days ')::INTERVAL + (@DueAfterHours || ' hours ')::INTERVAL + (@DueAfterMinutes || ' mins ')::INTERVAL + (@DueAfterSeconds || ' s ')::INTERVAL + (@DueAfterMilliseconds || ' ms')::INTERVAL)
)
INSERT INTO {0} (
    Headers,
    Body,
    Due)
SELECT @Headers, @Body, DueDate
FROM params;"""  # noqa: E501
REFERENCE_MOVE_DUE = """
WITH message as (DELETE FROM {0} WHERE id in (SELECT id from {0} WHERE {0}.Due < now() AT TIME ZONE 'UTC' LIMIT @BatchSize) 
RETURNING id, headers, body)
INSERT into {1} (id, expires, headers, body) SELECT id, NULL, headers, body FROM message;

SELECT now() AT TIME ZONE 'UTC' as UtcNow, Due as NextDue
FROM {0} 
ORDER BY Due LIMIT 1 FOR UPDATE SKIP LOCKED"""  # noqa: E501, W291


def reference_in_utc(transport, statement: str, tables: tuple, values: dict) -> None:
    """One of the reference's statements with two tables, run in a UTC session (``SET LOCAL``) as a .NET
    endpoint's Npgsql session runs: its ``now() AT TIME ZONE 'UTC'`` is UTC wall-clock time read back in the
    session's zone, so in this module's UTC+14 sessions its delayed statements would be 14 hours off."""
    with transport.connection() as connection:
        cursor = connection.cursor()
        cursor.execute("SET LOCAL TIME ZONE 'UTC'")
        for command in statement.format(*map(rawsql.table_of, tables)).split(";\n\n"):
            cursor.execute(re.sub(r"@(\w+)", r"%(\1)s", command), values)
        connection.commit()


def reference_store_delayed(transport, delayed, destination: str, body: bytes, hours: int = 0) -> str:
    message_id = str(uuid.uuid4())
    headers = {"NServiceBus.MessageId": message_id, "NServiceBus.SqlServer.ForwardDestination": destination}
    values = {"Headers": encode_headers(headers), "Body": body, "DueAfterDays": 0, "DueAfterHours": hours}
    values |= {"DueAfterMinutes": 0, "DueAfterSeconds": 0, "DueAfterMilliseconds": 0}
    reference_in_utc(transport, REFERENCE_STORE_DELAYED, (delayed,), values)
    return message_id


def test_the_reference_stores_delayed_messages_and_this_package_moves_them_to_both_layouts(
    transport, caplog
) -> None:
    from airflow_provider_sqlqueue.transport import DelayedMover, DelayedStore

    store = DelayedStore(transport, "sales.Delayed")
    delayed = transport.queue(store.address, error_queue=None)  # a table to name, as a queue is
    reference(transport, REFERENCE_CREATE_DELAYED, delayed)
    shipping = reference_queue(transport, "shipping")
    billing = transport.queue("billing")
    billing.create()
    transport.queue("error").create()
    to_shipping = reference_store_delayed(transport, delayed, rawsql.table_of(shipping), b"to .NET's table")
    to_billing = reference_store_delayed(transport, delayed, "billing", b"to this package's table")
    later = reference_store_delayed(transport, delayed, "billing", b"in an hour", hours=1)
    nowhere = rawsql.table_of(transport.queue("nowhere"))
    lost = reference_store_delayed(transport, delayed, nowhere, b"no such queue")
    [(shipping_row_id,)] = [
        row[:1]
        for row in reference(transport, "SELECT Id, Headers FROM {0}", delayed)
        if to_shipping in row[1]
    ]
    caplog.set_level("INFO", logger="airflow_provider_sqlqueue.transport.delayed")
    assert DelayedMover(store).move_once() == 3
    assert "has the postgresql-transport layout" in caplog.text
    [(row_id, _, headers, body)] = reference(transport, REFERENCE_RECEIVE, shipping)
    assert (row_id, bytes(body), decode_headers(headers)["NServiceBus.MessageId"]) == (
        shipping_row_id,
        b"to .NET's table",
        to_shipping,
    )
    with billing.receive() as batch:
        assert [(m.message_id, m.body) for m in batch] == [(to_billing, b"to this package's table")]
    with transport.queue("error").receive() as batch:
        [failed] = list(batch)
    assert failed.message_id == lost and failed.headers["NServiceBus.FailedQ"]
    assert store.count() == 1
    assert [
        decode_headers(row[0])["NServiceBus.MessageId"]
        for row in reference(transport, "SELECT Headers FROM {0}", delayed)
    ] == [later]


def test_this_package_creates_and_stores_into_the_reference_delayed_table_which_the_reference_moves(
    transport,
) -> None:
    from datetime import datetime, timezone

    from airflow_provider_sqlqueue.transport import DelayedMover, DelayedStore

    store = DelayedStore(transport, "sales.Delayed")
    script = store.create_script(column_layout="postgresql-transport")
    assert "Id uuid NOT NULL DEFAULT gen_random_uuid() PRIMARY KEY" in script and "RowVersion" not in script
    assert store.create(column_layout="postgresql-transport")
    delayed = transport.queue(store.address, error_queue=None)
    columns = reference(
        transport,
        "SELECT lower(attname) FROM pg_attribute WHERE attrelid = to_regclass('{0}') AND attnum > 0 "
        "ORDER BY attnum",
        delayed,
    )
    assert [c for (c,) in columns] == ["id", "headers", "body", "due"]
    sales = reference_queue(transport, "sales")  # the endpoint's input queue, where the reference moves to
    shipping = reference_queue(transport, "shipping")
    billing = transport.queue("billing")
    billing.create()
    yesterday = datetime.now(timezone.utc) - timedelta(days=1)
    first = store.store("shipping", b"first", deliver_at=yesterday)
    second = store.store("billing", b"second", deliver_at=yesterday)
    store.store("billing", b"in an hour", delay=timedelta(hours=1))
    reference_in_utc(transport, REFERENCE_MOVE_DUE, (delayed, sales), {"BatchSize": 10})
    assert store.count() == 1 and DelayedMover(store).move_once() == 0
    moved = [
        decode_headers(h) for (h,) in reference(transport, "SELECT Headers FROM {0} ORDER BY Seq", sales)
    ]
    forwards = [headers["NServiceBus.SqlServer.ForwardDestination"] for headers in moved]
    assert forwards == [rawsql.table_of(shipping), rawsql.table_of(billing)]  # the form .NET parses
    # the receiver of the endpoint's queue forwards each to its destination, as the reference's does
    MessagePump(sales, lambda message, context: None, **FAST).run(until_empty=True, timeout=30)
    [(_, _, headers, body)] = reference(transport, REFERENCE_RECEIVE, shipping)
    assert (decode_headers(headers)["NServiceBus.MessageId"], bytes(body)) == (str(first), b"first")
    with billing.receive() as batch:
        assert [(m.message_id, m.body) for m in batch] == [(str(second), b"second")]


def orders_into_results(target):
    """A drain of ``orders`` through the example's transform into the queue ``results``."""
    from airflow_provider_sqlqueue.spark.drain import DrainConfig

    return DrainConfig(
        url=target.url,
        default_schema=target.schema,
        input_queue="orders",
        sink="queue:results",
        run_id="d1",
        transform="airflow_provider_sqlqueue.spark.transforms.order_rows",
        partitions=1,
    )


@pytest.fixture
def spark(monkeypatch):
    """A local Spark session with the ``sqlqueue`` format registered."""
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    from airflow_provider_sqlqueue.spark import SqlQueueDataSource

    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[1]")
        .appName("sqlqueue-reference-layout")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    session.dataSource.register(SqlQueueDataSource)
    yield session
    session.stop()


def test_the_spark_bridge_refuses_to_read_a_reference_queue_before_receiving(
    target, transport, spark
) -> None:
    """The bridge's moves into staging and its holds in place know this package's layout only: a batch read,
    a stream and a drain of a queue the reference made fail on the driver with an error naming the layout,
    and the queue keeps its message. Through a real Spark session."""
    from test_spark_source import reader, source_options

    from airflow_provider_sqlqueue.spark.drain import run_drain
    from airflow_provider_sqlqueue.spark.tables import create_bridge_tables

    orders = reference_queue(transport, "orders")
    reference_send(transport, orders, b"stays")
    create_bridge_tables(transport, "orders")
    refusal = "orders@.* has the postgresql-transport layout .* the Spark bridge does not read yet"
    with pytest.raises(Exception, match=refusal):
        reader(spark, source_options(target, runId="r1")).collect()
    stream = spark.readStream.format("sqlqueue")
    for key, value in source_options(target, streamId="s1").items():
        stream = stream.option(key, value)
    query = stream.load().writeStream.format("noop").trigger(availableNow=True).start()
    with pytest.raises(Exception, match=refusal):
        query.awaitTermination(120)
    with pytest.raises(Exception, match=refusal.replace("orders", "input queue orders")):
        run_drain(spark, orders_into_results(target))
    assert orders.count() == 1


def test_spark_writes_into_a_reference_queue_once_per_run_and_the_reference_receives_it(
    target, transport, spark
) -> None:
    """The data source's writer and the drain's queue sink send through the queue, which writes its table's
    layout: a frame written twice under one run id lands once in a queue the reference made, and the
    reference's own ReceiveText takes each message in order, unexpired, with the headers it parses; so
    does a drain's result sent into such a queue."""
    from test_spark_source import source_options

    from airflow_provider_sqlqueue.demo.orders import make_orders
    from airflow_provider_sqlqueue.spark.drain import run_drain
    from airflow_provider_sqlqueue.spark.tables import create_bridge_tables

    results = reference_queue(transport, "results")
    create_bridge_tables(transport, "results")
    frame = spark.createDataFrame([(f"body {i}",) for i in range(5)], "body string").coalesce(1)
    for _ in range(2):  # the second write of the same run id finds its batches' markers and sends nothing
        write = frame.write.format("sqlqueue").mode("append")
        for key, value in source_options(target, queue="results", runId="w1", batchSize="2").items():
            write = write.option(key, value)
        write.save()
    received = [reference(transport, REFERENCE_RECEIVE, results) for _ in range(6)]
    assert [rows for rows in received[5:]] == [[]], "sent twice"
    taken = [rows[0] for rows in received[:5]]
    assert [bytes(body) for _, _, _, body in taken] == [f"body {i}".encode() for i in range(5)]
    assert {expired for _, expired, _, _ in taken} == {0}
    ids = [decode_headers(headers)["NServiceBus.MessageId"] for _, _, headers, _ in taken]
    assert [str(row_id) for row_id, _, _, _ in taken] == ids and len(set(ids)) == 5

    orders = transport.queue("orders")
    orders.create()
    orders.send_batch(make_orders(20, first_order_id=1, short_lived_every=None))
    create_bridge_tables(transport, "orders")
    summary = run_drain(spark, orders_into_results(target))
    assert summary["written"] == 20 and orders.count() == 0
    drained = [reference(transport, REFERENCE_RECEIVE, results) for _ in range(21)]
    assert drained[20] == [] and all(len(rows) == 1 for rows in drained[:20])
    order_ids = sorted(json.loads(bytes(rows[0][3]))["order_id"] for rows in drained[:20])
    assert order_ids == list(range(1, 21))
