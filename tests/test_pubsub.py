"""Native publish/subscribe on every engine: the subscription table, subscribe/unsubscribe, the topic
hierarchy, the fan-out in one transaction, the lookup cache (with an injected clock) and concurrent
subscribers."""

from __future__ import annotations

import json
import logging
import multiprocessing
import re
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import rawsql
from conftest import EngineTarget
from pubsub_workers import churn_subscriptions

from airflow_provider_sqlqueue import cli
from airflow_provider_sqlqueue.transport import (
    ConfigurationError,
    Endpoint,
    OutgoingMessage,
    QueueNotFound,
    Subscription,
    SubscriptionSettings,
    SubscriptionStore,
    Transport,
    open_transport,
    topic_name,
    topics_of,
)
from airflow_provider_sqlqueue.transport import headers as h
from airflow_provider_sqlqueue.transport.pump import MessagePump


class OrderEvent:
    __sqlqueue_topic__ = "Sales.Events.IOrderEvent"


class OrderPlaced(OrderEvent):
    __sqlqueue_topic__ = "Sales.Events.OrderPlaced"


class ExpressOrderPlaced(OrderPlaced):
    pass  # no topic of its own: named module.QualName


def drain(transport: Transport, name: str) -> list:
    with transport.queue(name).receive(max_messages=1000) as batch:
        return list(batch)


def test_topics_of_a_class_follow_its_mro_and_a_string_is_exact() -> None:
    express = f"{__name__}.ExpressOrderPlaced"
    assert topic_name(ExpressOrderPlaced) == express
    assert topics_of(ExpressOrderPlaced) == (express, "Sales.Events.OrderPlaced", "Sales.Events.IOrderEvent")
    assert topics_of("Sales.Events.OrderPlaced") == ("Sales.Events.OrderPlaced",)
    assert topics_of("A", ["B", "A", "C"]) == ("A", "B", "C")
    for bad in ("", "  ", 5, "x" * 201):
        with pytest.raises(ConfigurationError):
            topics_of(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="list of topics"):
        topics_of("A", "B")
    with pytest.raises(ConfigurationError, match="cache_seconds"):
        SubscriptionSettings(cache_seconds=-1)
    with pytest.raises(ConfigurationError, match="takes a SubscriptionSettings"):
        open_transport("sqlite:///queues.db", subscriptions={"table": "Routing"})  # type: ignore[arg-type]


def test_subscribe_publish_and_unsubscribe(transport: Transport) -> None:
    store = transport.subscriptions
    assert store.create() is True and store.create() is False and store.exists()
    for name in ("billing", "shipping", "audit", "other", "moved"):
        transport.queue(name).create()
    store.subscribe("Billing", OrderPlaced, "billing")
    store.subscribe("Shipping", "Sales.Events.IOrderEvent", "shipping")
    store.subscribe("Audit", ExpressOrderPlaced, "audit")
    store.subscribe("Audit", "Sales.Events.IOrderEvent", "audit")  # a second topic, the same queue
    store.subscribe("Other", "Sales.Events.Unrelated", "other")
    store.subscribe("Billing", OrderPlaced, "moved")  # the upsert moves Billing's subscription
    canonical = {name: str(transport.canonical(name)) for name in ("billing", "shipping", "audit", "moved")}
    assert Subscription(canonical["moved"], "Billing", "Sales.Events.OrderPlaced") in store.list()
    assert [s.endpoint for s in store.list("Sales.Events.IOrderEvent")] == ["Audit", "Shipping"]
    assert store.list(limit=2) == store.list()[:2] and len(store.list()) == 5
    assert [s.endpoint for s in store.list("Sales.Events.IOrderEvent", endpoint="Shipping", limit=1)] == [
        "Shipping"
    ]
    with pytest.raises(ConfigurationError, match="limit"):
        store.list(limit=0)
    assert [s.topic for s in store.list(endpoint="Audit")] == [
        "Sales.Events.IOrderEvent",
        f"{__name__}.ExpressOrderPlaced",
    ]

    result = transport.publish(ExpressOrderPlaced, b'{"id": 1}', {h.CONTENT_TYPE: "application/json"})
    assert sorted(result.queues) == sorted(canonical[name] for name in ("moved", "shipping", "audit"))
    assert result.topics == topics_of(ExpressOrderPlaced)
    for name in ("moved", "shipping", "audit"):
        (copy,) = drain(transport, name)
        assert copy.body == b'{"id": 1}' and copy.message_id == str(result.message_id)
        assert copy.headers[h.MESSAGE_INTENT] == "Publish"
        assert copy.headers[h.ENCLOSED_MESSAGE_TYPES] == ";".join(result.topics)
        assert copy.headers[h.CONTENT_TYPE] == "application/json"
    assert drain(transport, "billing") == [] and drain(transport, "other") == []

    assert store.unsubscribe("Shipping", "Sales.Events.IOrderEvent") is True
    assert store.unsubscribe("Shipping", "Sales.Events.IOrderEvent") is False
    result = transport.publish("Sales.Events.OrderPlaced", b"2", base_topics=["Sales.Events.IOrderEvent"])
    assert sorted(result.queues) == sorted([canonical["moved"], canonical["audit"]])
    assert drain(transport, "shipping") == []


def test_publish_with_no_subscriber_sends_nothing_and_says_so(
    transport: Transport, caplog: pytest.LogCaptureFixture
) -> None:
    transport.subscriptions.create()
    transport.queue("billing").create()
    transport.subscriptions.subscribe("Billing", "Sales.Events.Other", "billing")
    with caplog.at_level(logging.INFO, logger="airflow_provider_sqlqueue.transport.publishing"):
        result = transport.publish("Sales.Events.OrderPlaced", b"x")
    assert result.queues == () and drain(transport, "billing") == []
    assert "no subscriber, nothing sent" in caplog.text


def test_a_publish_failing_half_way_leaves_nothing(transport: Transport) -> None:
    transport.subscriptions.create()
    for name in ("a_first", "c_last"):
        transport.queue(name).create()
    for endpoint, queue in (("A", "a_first"), ("B", "b_missing"), ("C", "c_last")):
        transport.subscriptions.subscribe(endpoint, "Sales.Events.OrderPlaced", queue)
    missing = str(transport.canonical("b_missing"))
    with pytest.raises(QueueNotFound, match=re.escape(f"subscription row with QueueAddress {missing!r}")):
        transport.publish("Sales.Events.OrderPlaced", b"x")
    assert drain(transport, "a_first") == [] and drain(transport, "c_last") == []
    transport.queue("b_missing").create()
    assert len(transport.publish("Sales.Events.OrderPlaced", b"y").queues) == 3
    assert [m.body for name in ("a_first", "b_missing", "c_last") for m in drain(transport, name)] == [
        b"y"
    ] * 3


def test_publish_in_the_callers_transaction_commits_with_it(transport: Transport) -> None:
    transport.subscriptions.create()
    transport.queue("billing").create()
    transport.subscriptions.subscribe("Billing", "T", "billing")
    connection = transport.new_connection()
    try:
        if transport.dialect.begin_write():
            connection.cursor().execute(transport.dialect.begin_write())
        transport.publish("T", b"rolled back", connection=connection)
        connection.rollback()
        assert drain(transport, "billing") == []
        if transport.dialect.begin_write():
            connection.cursor().execute(transport.dialect.begin_write())
        transport.publish("T", b"committed", connection=connection)
        connection.commit()
    finally:
        connection.close()
    assert [m.body for m in drain(transport, "billing")] == [b"committed"]


def test_the_lookup_cache_follows_its_clock(target: EngineTarget) -> None:
    now = [1000.0]
    with target.open() as publisher, target.open() as subscriber:
        publisher.subscriptions.create()
        cached = SubscriptionStore(publisher, SubscriptionSettings(cache_seconds=5), clock=lambda: now[0])
        uncached = SubscriptionStore(publisher, SubscriptionSettings(cache_seconds=0), clock=lambda: now[0])
        assert cached.subscriber_queues(["T"]) == [] and uncached.subscriber_queues(["T"]) == []
        subscriber.subscriptions.subscribe("Billing", "T", "billing")  # another process's store
        queue = str(subscriber.canonical("billing"))
        now[0] += 4.9
        assert cached.subscriber_queues(["T"]) == []  # still within cache_seconds
        assert uncached.subscriber_queues(["T"]) == [queue]
        now[0] += 0.1
        assert cached.subscriber_queues(["T"]) == [queue]
        assert (cached.lookups, uncached.lookups) == (2, 2)
        cached.unsubscribe("Billing", "T")  # through the store itself: its cache forgets the topic at once
        assert cached.subscriber_queues(["T"]) == [] and cached.lookups == 3


# Through Driver 18 in every CI run (the FreeTDS runs of this file take turns: tests/conftest.py); the
# deterministic race test covers Babelfish's upsert too.
@pytest.mark.parametrize("target", ["sqlite", "postgresql", "sqlserver-msodbc"], indirect=True)
def test_concurrent_subscribers_of_one_key_leave_one_row(transport: Transport) -> None:
    """The upsert is safe under concurrency (on Babelfish, which refuses MERGE and ignores locking hints,
    through its UPDATE-then-INSERT variant run again when it loses the race)."""
    store = transport.subscriptions
    store.create()
    start = threading.Barrier(6)
    errors: list[BaseException] = []

    def subscribe(index: int) -> None:
        start.wait()
        try:
            store.subscribe("Racer", "T", f"queue{index}")
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=subscribe, args=(index,)) for index in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    (row,) = store.list("T")
    assert row.endpoint == "Racer" and row.queue_address in {
        str(transport.canonical(f"queue{i}")) for i in range(6)
    }


@pytest.mark.parametrize("target", ["sqlite", "postgresql", "sqlserver-msodbc"], indirect=True)
def test_endpoint_publish_and_create(transport: Transport) -> None:
    sales = Endpoint(transport, "Sales", instance_specific_queue=False)
    assert str(transport.subscriptions.address) in sales.create()
    transport.queue("billing").create()
    transport.subscriptions.subscribe("Billing", OrderPlaced, "billing")
    result = sales.publish(OrderPlaced, b"placed")
    (copy,) = drain(transport, "billing")
    assert copy.message_id == str(result.message_id)
    assert copy.headers[h.ORIGINATING_ENDPOINT] == "Sales" and copy.headers[h.MESSAGE_INTENT] == "Publish"
    assert copy.reply_to_address == sales.reply_to_address


@pytest.mark.parametrize("target", ["sqlite", "postgresql", "sqlserver-msodbc"], indirect=True)
def test_a_handler_publish_rolls_back_with_the_receive(transport: Transport) -> None:
    transport.subscriptions.create()
    for name in ("orders", "error", "billing", "shipping"):
        transport.queue(name).create()
    transport.subscriptions.subscribe("Billing", OrderPlaced, "billing")
    transport.subscriptions.subscribe("Shipping", OrderEvent, "shipping")
    transport.queue("orders").send(b"place")
    attempts = Counter[int]()

    def handler(message, context) -> None:
        attempts["calls"] += 1
        context.publish(OrderPlaced, OutgoingMessage(b"placed"))
        if attempts["calls"] == 1:
            raise RuntimeError("the first attempt fails after publishing")

    pump = MessagePump(
        transport.queue("orders"), handler, transaction_mode="sends_atomic_with_receive", idle_delay=0.1
    )
    pump.run(max_messages=1)
    assert attempts["calls"] == 2
    for name in ("billing", "shipping"):
        (copy,) = drain(transport, name)
        assert copy.body == b"placed" and copy.headers[h.MESSAGE_INTENT] == "Publish"


@pytest.mark.slow
def test_fan_out_while_other_processes_subscribe_and_unsubscribe(
    target: EngineTarget, tmp_path: Path
) -> None:
    """Each publish reaches every subscriber present for the whole run exactly once, none absent for the
    whole run, and the churning subscribers at most once per publish."""
    publishes, stable, churners = 20, 4, 2
    with target.open(subscriptions=SubscriptionSettings(cache_seconds=0)) as transport:
        store = transport.subscriptions
        store.create()
        for index in range(stable):
            transport.queue(f"stable{index}").create()
            store.subscribe(f"Stable{index}", "T", f"stable{index}")
        for index in range(churners):
            transport.queue(f"churn{index}").create()
        transport.queue("gone").create()
        store.subscribe("Gone", "T", "gone")
        store.unsubscribe("Gone", "T")
        context = multiprocessing.get_context("spawn")
        stop = tmp_path / "stop"
        started = [context.Event() for _ in range(churners)]
        workers = [
            context.Process(
                target=churn_subscriptions,
                args=(
                    target.url,
                    target.schema,
                    f"Churn{index}",
                    "T",
                    f"churn{index}",
                    str(stop),
                    started[index],
                ),
            )
            for index in range(churners)
        ]
        for worker in workers:
            worker.start()
        try:
            assert all(event.wait(60) for event in started)
            ids = {transport.publish("T", f"event {n}").message_id for n in range(publishes)}
        finally:
            stop.touch()
            for worker in workers:
                worker.join(60)
        assert [worker.exitcode for worker in workers] == [0] * churners
        for index in range(stable):
            received = drain(transport, f"stable{index}")
            got = Counter(message.message_id for message in received)
            assert set(got) == {str(i) for i in ids} and set(got.values()) == {1}
        for index in range(churners):
            got = Counter(message.message_id for message in drain(transport, f"churn{index}"))
            assert set(got) <= {str(i) for i in ids} and set(got.values()) <= {1}
        assert drain(transport, "gone") == []


def reached_the_write(thread: threading.Thread, seconds: float) -> None:
    """Wait until ``thread`` has its connection and writes the subscription (its stack is in the store's
    ``_write``, past opening the connection, which is slow under load), or ends."""
    deadline = time.monotonic() + seconds
    while thread.is_alive() and time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident or -1)
        names = []
        while frame is not None:
            names.append((frame.f_code.co_name, Path(frame.f_code.co_filename).name))
            frame = frame.f_back
        opening = any(file in ("pool.py", "connection.py") for _, file in names)
        if ("_write", "subscriptions.py") in names and not opening:
            return
        time.sleep(0.01)


def blocked_on_the_server(
    request: pytest.FixtureRequest, target: EngineTarget, transport: Transport, seconds: float
) -> None:
    """Wait until the server shows a session waiting on a lock: the racer's write, blocked by the first
    transaction's uncommitted row. SQLite has no server to ask: there, ``reached_the_write`` waits."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if target.engine == "postgresql":
            connection = transport.new_connection()
            try:
                cursor = connection.cursor()
                cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
                waiting = cursor.fetchone()[0]
            finally:
                connection.close()
        else:
            waiting = request.getfixturevalue("sqlserver_bed").sessions_waiting_on_a_lock()
        if waiting:
            return
        time.sleep(0.05)
    raise AssertionError(f"no session waited on a lock within {seconds} s")


def test_a_subscriber_that_loses_the_race_for_a_new_row_still_subscribes(
    transport: Transport,
    target: EngineTarget,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A second first-subscriber of one key writes while the first one's row is uncommitted: it waits,
    then updates that row (on Babelfish, whose INSERT then fails on the primary key, by running again)."""
    store = transport.subscriptions
    store.create()
    first = transport.new_connection()
    errors: list[BaseException] = []

    def second() -> None:
        try:
            store.subscribe("Racer", "T", "second")
        except BaseException as error:
            errors.append(error)

    try:
        begin = transport.dialect.begin_write()
        if begin:
            first.cursor().execute(begin)
        store.subscribe("Racer", "T", "first", connection=first)
        racer = threading.Thread(target=second)
        with caplog.at_level(logging.INFO, logger="airflow_provider_sqlqueue.transport.subscriptions"):
            racer.start()
            if target.engine == "sqlite":
                reached_the_write(racer, 60.0)
                racer.join(1.0)  # it waits for the first transaction (a blocked writer, not a failure)
            else:
                blocked_on_the_server(request, target, transport, 60.0)
            first.commit()
            racer.join(60)
    finally:
        first.close()
    assert errors == [] and not racer.is_alive()
    assert [row.queue_address for row in store.list("T")] == [str(transport.canonical("second"))]
    if transport.dialect.variant == "babelfish":  # the hints were not honoured: the retry did it
        assert "won; writing again" in caplog.text


@pytest.mark.parametrize("target", ["sqlite", "postgresql", "sqlserver-msodbc"], indirect=True)
def test_the_command_line_scripts_and_creates_the_subscription_table(
    target: EngineTarget, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sqlqueue script --subscriptions` prints DDL that makes a working table; `create --subscriptions`
    makes it too and says so; neither without a queue or --subscriptions."""
    monkeypatch.delenv("SQLQUEUE_URL", raising=False)
    monkeypatch.delenv("SQLQUEUE_CONN_ID", raising=False)
    database = ["--url", target.url, *(["--schema", target.schema] if target.schema else [])]
    assert cli.main(["script", *database]) == cli.Exit.USAGE
    capsys.readouterr()
    assert cli.main(["script", *database, "--subscriptions"]) == cli.Exit.OK
    script = capsys.readouterr().out
    assert script.startswith("-- subscription table SubscriptionRouting")
    with target.open() as transport:
        store = transport.subscriptions
        rawsql.execute(transport, script.split("\n", 1)[1].strip().rstrip(";"))
        assert store.exists()
        transport.queue("billing").create()
        store.subscribe("Billing", "T", "billing")
        assert transport.publish("T", b"x").queues == (str(transport.canonical("billing")),)
        store.drop()
        assert cli.main(["create", *database, "--subscriptions", "--json"]) == cli.Exit.OK
        assert json.loads(capsys.readouterr().out) == {"created": [str(store.address)], "existing": []}
        assert store.list() == []


@pytest.mark.parametrize("target", ["postgresql", "sqlserver-msodbc"], indirect=True)
def test_two_spellings_of_one_queue_get_one_copy(transport: Transport) -> None:
    """Another writer may spell a subscriber's queue without its catalog and schema (the default ones):
    still one table, one copy."""
    store = transport.subscriptions
    store.create()
    transport.queue("billing").create()
    store.subscribe("Billing", "T", "billing")
    # PostgreSQL's canonical form names the schema (the test's, the transport's default); SQL Server's the
    # catalog too
    other = "billing" if transport.dialect.name == "postgresql" else f"billing@[{transport.default_schema}]"
    assert other != str(transport.canonical("billing"))
    p = rawsql.param(transport)
    table = transport.dialect.qualified_name(store.address)
    rawsql.execute(
        transport,
        f"INSERT INTO {table} (QueueAddress, Endpoint, Topic) VALUES ({p}, {p}, {p})",
        (other, "BillingToo", "T"),
    )
    assert len(store.subscriber_queues(["T"])) == 2
    assert transport.publish("T", b"once").queues == (str(transport.canonical("billing")),)
    assert [message.body for message in drain(transport, "billing")] == [b"once"]


@pytest.fixture(params=["postgresql", "sqlite"], ids=["postgresql-odbc", "sqlite-odbc"])
def odbc(request: pytest.FixtureRequest, tmp_path: Path):
    pytest.importorskip("pyodbc", reason="pyodbc (the mssql extra) is not installed")
    from conftest import odbc_target

    yield from odbc_target(request, request.param, tmp_path)


def test_publish_and_subscribe_over_odbc(odbc: EngineTarget) -> None:
    """PostgreSQL and SQLite reached through pyodbc render the subscription statements with ``?``."""
    with odbc.open() as transport:
        store = transport.subscriptions
        assert store.create() is True
        transport.queue("billing").create()
        store.subscribe("Billing", "T", "shipping")
        store.subscribe("Billing", "T", "billing")  # the upsert's update
        assert [row.queue_address for row in store.list("T", endpoint="Billing")] == [
            str(transport.canonical("billing"))
        ]
        store.subscribe("Audit", "T", "billing")
        assert [row.endpoint for row in store.list("T", limit=1)] == ["Audit"]
        assert transport.publish("T", b"x").queues == (str(transport.canonical("billing")),)
        assert [message.body for message in drain(transport, "billing")] == [b"x"]
        assert store.unsubscribe("Billing", "T") is True and store.unsubscribe("Audit", "T") is True
        assert store.list() == []


@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_a_handler_publish_in_receive_only_mode_commits_at_once(transport: Transport) -> None:
    """As a send: the copies of a failed attempt stay (PostgreSQL); SQLite, one writer, refuses it."""
    transport.subscriptions.create()
    for name in ("orders", "error", "billing"):
        transport.queue(name).create()
    transport.subscriptions.subscribe("Billing", "T", "billing")
    transport.queue("orders").send(b"place")
    outcomes: list[str] = []

    def handler(message, context) -> None:
        try:
            context.publish("T", b"placed")
        except ConfigurationError as error:
            outcomes.append(str(error))
            return
        outcomes.append("published")
        if len(outcomes) == 1:
            raise RuntimeError("the first attempt fails after publishing")

    MessagePump(transport.queue("orders"), handler, transaction_mode="receive_only", idle_delay=0.1).run(
        max_messages=1
    )
    copies = [message.body for message in drain(transport, "billing")]
    if transport.dialect.single_writer:
        assert copies == [] and "single writer" in outcomes[0]
    else:
        assert outcomes == ["published", "published"] and copies == [b"placed", b"placed"]


@pytest.mark.parametrize("target", ["postgresql", "sqlserver-msodbc"], indirect=True)
def test_topic_length_is_counted_as_the_column_counts(transport: Transport) -> None:
    """SQL Server's nvarchar(200) holds 200 UTF-16 code units (a character outside the Basic Multilingual
    Plane takes two), PostgreSQL's varchar(200) 200 characters: 150 such characters are refused before any
    statement on SQL Server, whose column refuses them too, and subscribe and publish on PostgreSQL."""
    store = transport.subscriptions
    store.create()
    transport.queue("billing").create()
    fits, wide = "\U0001f600" * 100, "\U0001f600" * 150
    assert store.subscribe("Billing", fits, "billing").topic == fits
    if transport.dialect.name == "sqlserver":
        for attempt in (
            lambda: store.subscribe("Billing", wide, "billing"),
            lambda: transport.publish(wide, b"x"),
        ):
            with pytest.raises(ConfigurationError, match="300 UTF-16 code units"):
                attempt()
        p = rawsql.param(transport)
        table = transport.dialect.qualified_name(store.address)
        with pytest.raises(Exception, match=COLUMN_REFUSES_LONG_VALUE):
            rawsql.execute(
                transport,
                f"INSERT INTO {table} (QueueAddress, Endpoint, Topic) VALUES ({p}, {p}, {p})",
                ("billing", "Raw", wide),
            )
        assert [row.topic for row in store.list()] == [fits]
    else:
        assert store.subscribe("Billing", wide, "billing").topic == wide
        assert transport.publish(wide, b"x").queues == (str(transport.canonical("billing")),)


COLUMN_REFUSES_LONG_VALUE = "truncated|too long"


@pytest.mark.parametrize("target", ["postgresql", "sqlserver-msodbc"], indirect=True)
def test_a_subscribe_differing_only_in_case_reports_the_row_as_the_table_holds_it(
    transport: Transport,
) -> None:
    """Under SQL Server's case-insensitive default collation a second subscribe that differs only in case is
    the same row, which keeps its first spelling and takes the new queue; PostgreSQL compares exactly."""
    store = transport.subscriptions
    store.create()
    for name in ("billing", "shipping"):
        transport.queue(name).create()
    store.subscribe("Billing", "Sales.OrderPlaced", "billing")
    again = store.subscribe("billing", "SALES.ORDERPLACED", "shipping")
    shipping = str(transport.canonical("shipping"))
    if transport.dialect.name == "sqlserver":
        assert again == Subscription(shipping, "Billing", "Sales.OrderPlaced")
        assert store.list() == [again]
    else:
        assert again == Subscription(shipping, "billing", "SALES.ORDERPLACED")
        assert len(store.list()) == 2
