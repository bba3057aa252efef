"""Delayed delivery on real engines: never early, at most an idle delay late with a running mover, one mover
at a time among an endpoint's instances, past-due messages at once, and failures to the error queue."""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest
import rawsql

from airflow_provider_sqlqueue.transport import (
    ConfigurationError,
    DelayedMover,
    DelayedStore,
    Endpoint,
    MessagePump,
    OutgoingMessage,
    Transport,
    open_transport,
)
from airflow_provider_sqlqueue.transport.headers import decode_headers


@pytest.fixture
def delayed(transport: Transport) -> DelayedStore:
    transport.queue("error").create()
    transport.queue("Billing").create()
    store = DelayedStore(transport, "Sales.Delayed")
    assert store.create() is True
    assert store.create() is False
    return store


def wait_for(condition, timeout: float = 10.0, step: float = 0.005) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise AssertionError("timed out")
        time.sleep(step)
    return time.monotonic() - started


class LatencyProbe:
    """Runs a statement over and over on a thread of its own while a test runs and keeps the slowest round
    trip: what a statement took on this machine, under this run's load, for bounds the test derives."""

    def __init__(self, statement: Callable[[], object], interval: float = 0.05) -> None:
        self._statement = statement
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="latency probe", daemon=True)
        self.slowest = 0.0

    def start(self) -> LatencyProbe:
        self._statement()  # the first execution on a connection is not a round trip of the run
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            started = time.monotonic()
            self._statement()
            self.slowest = max(self.slowest, time.monotonic() - started)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def test_delayed_messages_are_never_early_and_at_most_an_idle_delay_late(
    transport: Transport, delayed: DelayedStore
) -> None:
    arrived: dict[str, float] = {}

    def record(message) -> None:
        arrived[message.message_id] = time.monotonic()

    foreign = DelayedStore(transport, "Sales.Delayed")  # stores that no mover of this process hears of
    expected: dict[str, tuple[float, float]] = {}  # message id: (moment before the store, delay)
    probe = LatencyProbe(lambda: delayed.count()).start()
    mover = DelayedMover(delayed, idle_delay=0.2).start()
    pump = MessagePump(transport.queue("Billing"), record, max_concurrency=4, idle_delay=0.1).start()
    try:
        # A warm-up through both stores: the mover's session and the pump's connections run each statement
        # of the path once before the measured messages (Babelfish parses a statement the first time a
        # connection runs it, seconds under a CI run's load). Never early holds for these too.
        warm_up = {}
        for n in range(8):
            before = time.monotonic()
            store = foreign if n % 2 else delayed
            message_id = store.store("Billing", b"warm-up", delay=timedelta(seconds=0.05))
            warm_up[str(message_id)] = before
        wait_for(lambda: len(arrived) == len(warm_up), timeout=120)
        assert all(arrived[message_id] - before >= 0.05 - 0.001 for message_id, before in warm_up.items())
        measured_rounds = len(mover.rounds)
        for n in range(24):
            store = foreign if n % 4 == 3 else delayed
            delay = 0.05 * (n % 12) + 0.1
            before = time.monotonic()
            message_id = store.store("Billing", f"m{n}".encode(), delay=timedelta(seconds=delay))
            expected[str(message_id)] = (before, delay)
            time.sleep(0.02)
        wait_for(lambda: len(arrived) == len(warm_up) + len(expected), timeout=60)
    finally:
        pump.stop()
        mover.stop()
        probe.stop()
    slowest_move = max(r.ended - r.started for r in list(mover.rounds)[measured_rounds:])
    # The mover's idle delay + the pump's idle delay, plus the slowest move round the mover timed itself,
    # plus a statement round trip for the mover's next-due query and one for the pump's receive, each as
    # slow as the slowest the probe measured meanwhile (a loaded machine makes them slow alike), plus
    # scheduling slack.
    bound = 0.2 + 0.1 + slowest_move + 2 * probe.slowest + 0.25
    for message_id, (before, delay) in expected.items():
        waited = arrived[message_id] - before
        assert waited >= delay - 0.001, f"{message_id} arrived {delay - waited:.3f} s early"
        assert waited - delay <= bound, (
            f"{message_id} arrived {waited - delay:.3f} s late (bound {bound:.3f} s: the slowest move took "
            f"{slowest_move:.3f} s, the slowest statement round trip meanwhile {probe.slowest:.3f} s)"
        )
    assert delayed.count() == 0
    assert mover.moved == len(warm_up) + len(expected)


IDLE_DELAY = 10.0
WOKEN_WITHIN = 3.0


def test_a_past_due_message_arrives_at_once_and_local_stores_wake_a_sleeping_mover(
    transport: Transport, delayed: DelayedStore
) -> None:
    """Woken means well within the idle delay: the bounds leave room for a loaded CI machine (and Babelfish's
    first execution of a statement) while a mover that slept its 10 s would miss them by far."""
    billing = transport.queue("Billing")
    mover = DelayedMover(delayed, idle_delay=IDLE_DELAY).start()
    try:
        wait_for(lambda: len(mover.rounds) >= 1)
        time.sleep(0.1)  # asleep for up to IDLE_DELAY now
        past = datetime.now(timezone.utc) - timedelta(hours=1)
        delayed.store("Billing", b"late already", deliver_at=past)
        assert wait_for(lambda: billing.count() == 1) < WOKEN_WITHIN
        delayed.store("Billing", b"soon", delay=0.3)
        took = wait_for(lambda: billing.count() == 2)
        assert 0.25 <= took < 0.3 + WOKEN_WITHIN
        time.sleep(0.1)
        DelayedStore(transport, "Sales.Delayed").store("Billing", b"foreign", delay=0)  # no local wake
        time.sleep(0.5)
        assert billing.count() == 2  # the mover sleeps its idle delay
        mover.notify(0.0)
        assert wait_for(lambda: billing.count() == 3) < WOKEN_WITHIN
    finally:
        mover.stop()
    with billing.receive(max_messages=10) as batch:
        assert [m.body for m in batch] == [b"late already", b"soon", b"foreign"]
        # the stored header text arrives as it was stored, ForwardDestination (naming this queue) included
        assert all(
            m.headers["NServiceBus.SqlServer.ForwardDestination"] == str(transport.canonical(billing.address))
            for m in batch
        )


def test_three_instances_elect_one_mover_at_a_time(target) -> None:
    transports = [target.open() for _ in range(3)]
    endpoints = [
        Endpoint(transport, "Sales", instance_suffix=f"node{n}") for n, transport in enumerate(transports)
    ]
    try:
        for endpoint in endpoints:
            endpoint.create()
        transports[0].queue("Billing").create()
        for endpoint in endpoints:
            endpoint.start(lambda message: None, idle_delay=0.2)
        sent: list[uuid.UUID] = []
        for n in range(60):
            endpoint = endpoints[n % 3]
            sent.append(endpoint.send("Billing", f"m{n}".encode(), delay=0.01 * (n % 30)))
        billing = transports[0].queue("Billing")
        wait_for(lambda: billing.count() == 60)
        movers = [endpoint.mover for endpoint in endpoints]
        rounds = sorted((r.started, r.ended, index) for index, m in enumerate(movers) for r in m.rounds)
        for (_, previous_end, _), (start, _, _) in itertools.pairwise(rounds):
            assert start >= previous_end, "two movers moved at the same time"
        if target.engine == "sqlite":  # every instance moves, one at a time (the write lock)
            assert all(mover.is_leader is False for mover in movers)
        else:  # one elected mover; the others stand by
            assert sum(mover.is_leader for mover in movers) == 1
            leader = next(index for index, mover in enumerate(movers) if mover.is_leader)
            assert {index for _, _, index in rounds} == {leader}
            endpoints[leader].stop()
            others = [index for index in range(3) if index != leader]
            wait_for(lambda: any(movers[index].is_leader for index in others), timeout=3)
            terms = sorted(term for index in range(3) for term in movers[index].leadership)
            for previous, current in itertools.pairwise(terms):
                assert previous[1] is not None and current[0] >= previous[1], "two leaders at once"
            sent.append(endpoints[others[0]].send("Billing", b"after the handover", delay=0.05))
            wait_for(lambda: billing.count() == 61)
        with billing.receive(max_messages=100) as batch:
            received = [m.message_id for m in batch]
        assert sorted(received) == sorted(str(message_id) for message_id in sent)
    finally:
        for endpoint in endpoints:
            endpoint.stop(timeout=5)
        for transport in transports:
            transport.close()


def test_a_delayed_send_from_a_handler_commits_with_the_receive(target, transport: Transport) -> None:
    sales = Endpoint(transport, "Sales", instance_specific_queue=False)
    sales.create()
    billing = transport.queue("Billing")
    billing.create()
    sales.send("Sales", b"order")
    attempts: list[int] = []

    def handler(message, context) -> None:
        attempts.append(context.attempt)
        context.send("Billing", b"invoice", delay=0.2)
        if context.attempt == 1:
            raise RuntimeError("first attempt fails after its delayed send")

    started = time.monotonic()
    with sales.start(handler, idle_delay=0.1):
        wait_for(lambda: billing.count() == 1)
        took = time.monotonic() - started
        time.sleep(0.3)
    assert attempts == [1, 2] and took >= 0.2
    assert billing.count() == 1 and sales.delayed.count() == 0  # the first attempt's store rolled back
    with billing.receive() as batch:
        [invoice] = batch
    assert invoice.headers["NServiceBus.ReplyToAddress"] == str(transport.canonical(sales.address))
    assert invoice.headers["NServiceBus.OriginatingEndpoint"] == "Sales"


def test_messages_for_a_missing_queue_or_unreadable_go_to_the_error_queue(
    target, transport: Transport, delayed: DelayedStore
) -> None:
    error = transport.queue("error")
    past = datetime.now(timezone.utc) - timedelta(seconds=1)
    delayed.store("nowhere", b"lost", headers={"k": "v"}, deliver_at=past)
    table = delayed.dialect.qualified_name(delayed.address)
    p = rawsql.param(transport)
    due = {"sqlite": "'2000-01-01 00:00:00.000'", "postgresql": "'2000-01-01T00:00:00Z'"}.get(
        target.engine,
        "'2000-01-01T00:00:00'",  # Babelfish refuses the 'Z' that SQL Server's datetime takes
    )
    insert = f"INSERT INTO {table} (Headers, Body, Due) VALUES ({p}, {p}, {due})"
    rawsql.execute(transport, insert, ("{{", b"x"))
    dotnet = '{"k2":"v2","NServiceBus.SqlServer.ForwardDestination":"nowhere"}'  # no standard header
    rawsql.execute(transport, insert, (dotnet, b"dotnet"))
    mover = DelayedMover(delayed)
    assert mover.move_once() == 3
    assert delayed.count() == 0
    rows = rawsql.all_rows(error)
    assert sorted(row[2] for row in rows) == [b"dotnet", b"lost", b"x"]
    copied = decode_headers(next(row for row in rows if row[2] == b"dotnet")[1])
    assert copied["k2"] == "v2" and copied["NServiceBus.FailedQ"] == str(
        transport.canonical(transport.resolve("nowhere"))
    )
    invented = {"NServiceBus.MessageId", "NServiceBus.CorrelationId", "NServiceBus.MessageIntent"}
    assert not invented & set(copied) and "NServiceBus.TimeSent" not in copied
    raw = next(row for row in rows if row[2] == b"x")
    assert raw[1] == "{{"  # unreadable: copied unchanged, as a poison row
    lost = next(row for row in rows if row[2] == b"lost")
    headers = decode_headers(lost[1])
    assert headers["k"] == "v" and "NServiceBus.SqlServer.ForwardDestination" not in headers
    assert headers["NServiceBus.FailedQ"] == str(transport.canonical("nowhere"))
    assert "does not exist" in headers["NServiceBus.ExceptionInfo.Message"]


FORWARD = "NServiceBus.SqlServer.ForwardDestination"
STANDARD_HEADERS = {
    "NServiceBus.MessageId": "7a4c6a52-0f0b-4c5e-9d0e-b1f3a9b3e0aa",
    "NServiceBus.CorrelationId": "corr-1",
    "NServiceBus.MessageIntent": "Publish",
    "NServiceBus.TimeSent": "2026-11-23 08:00:00:000000 Z",
}


def _stored_texts(destination: str) -> list[str]:
    """Header texts as .NET endpoints store them: each lacking one standard header (or all of them), keys
    in an unusual order, ForwardDestination first, in the middle or last, and spacing and escapes that
    a re-encoding would not reproduce."""
    forward = json.dumps(destination)
    texts = []
    for missing in STANDARD_HEADERS:
        kept = [(key, value) for key, value in reversed(STANDARD_HEADERS.items()) if key != missing]
        members = [f"{json.dumps(key)}:{json.dumps(value)}" for key, value in kept]
        members.insert(len(texts) % (len(members) + 1), f"{json.dumps(FORWARD)}:{forward}")
        texts.append("{" + ",".join(members) + "}")
    texts.append("{" + f"{json.dumps(FORWARD)}:{forward}" + "}")  # no standard header at all
    texts.append(
        '{ "z.Custom" : "caf\\u00e9 \\/ x", "a.Null": null,\n  ' + f'"{FORWARD}": {forward}, "m": ""' + " }"
    )
    return texts


def test_the_mover_carries_the_stored_header_text_unchanged_to_a_new_row(
    target, transport: Transport, delayed: DelayedStore
) -> None:
    """Moved on the server, never rebuilt: no invented MessageId, CorrelationId, MessageIntent or TimeSent,
    no reordering or re-escaping; the destination row gets a new Id, as the reference's NEWID() does."""
    billing = transport.queue("Billing")
    texts = _stored_texts(str(billing.address))
    table = delayed.dialect.qualified_name(delayed.address)
    p = rawsql.param(transport)
    due = {"sqlite": "'2000-01-01 00:00:00.000'", "postgresql": "'2000-01-01T00:00:00Z'"}.get(
        target.engine, "'2000-01-01T00:00:00'"
    )
    for n, text in enumerate(texts):
        rawsql.execute(
            transport,
            f"INSERT INTO {table} (Headers, Body, Due) VALUES ({p}, {p}, {due})",
            (text, b"body %d" % n),
        )
    assert DelayedMover(delayed).move_once() == len(texts)
    assert delayed.count() == 0
    rows = rawsql.all_rows(billing)
    assert sorted((row[1], row[2]) for row in rows) == sorted(
        (text, b"body %d" % n) for n, text in enumerate(texts)
    )
    ids = {uuid.UUID(row[0]) for row in rows}
    assert len(ids) == len(texts) and all(row_id.version == 4 for row_id in ids)
    assert not {str(row_id) for row_id in ids} & set(STANDARD_HEADERS.values())
    with billing.receive(max_messages=len(texts)) as batch:
        received = {m.body: m.headers for m in batch}
    for n, text in enumerate(texts):
        assert received[b"body %d" % n] == decode_headers(text)  # nothing added on the way


def test_error_and_audit_copies_of_a_moved_message_drop_the_forward_destination_naming_its_queue(
    transport: Transport, delayed: DelayedStore
) -> None:
    """A moved row keeps ForwardDestination (naming the queue it now is in); copies sent on to the error or
    audit queue must not carry it, or a .NET receiver there would forward them back to this queue."""
    audit = transport.queue("audit")
    audit.create()
    billing = transport.queue("Billing")
    headers = {"z.Custom": "kept", "NServiceBus.MessageId": "m-1"}
    delayed.store("Billing", b"fails", headers=headers, delay=timedelta(0))
    delayed.store("Billing", b"works", headers=headers, delay=timedelta(0))
    assert DelayedMover(delayed).move_once() == 2
    assert all(FORWARD in decode_headers(row[1]) for row in rawsql.all_rows(billing))
    handled: list[bytes] = []

    def handler(message) -> None:
        handled.append(message.body)
        if message.body == b"fails":
            raise ValueError("refused")

    pump = MessagePump(billing, handler, immediate_retries=0, audit_queue="audit", idle_delay=0.1)
    stats = pump.run(until_empty=True, timeout=30)
    assert sorted(handled) == [b"fails", b"works"] and stats.failed == 1
    copies = {"error": rawsql.all_rows(transport.queue("error")), "audit": rawsql.all_rows(audit)}
    assert [row[2] for row in copies["error"]] == [b"fails"] and [row[2] for row in copies["audit"]] == [
        b"works"
    ]
    for name, rows in copies.items():
        copied = decode_headers(rows[0][1])
        assert FORWARD not in copied, name
        assert copied["z.Custom"] == "kept" and copied["NServiceBus.MessageId"] == "m-1", name


def test_a_batch_for_several_destinations_moves_each_group_and_keeps_due_order(
    target, transport: Transport, delayed: DelayedStore
) -> None:
    shipping = transport.queue("Shipping")
    shipping.create()
    billing = transport.queue("Billing")
    base = datetime.now(timezone.utc) - timedelta(minutes=10)
    for n in range(7):
        destination = "Shipping" if n % 3 == 0 else "Billing"
        delayed.store(destination, f"m{n}".encode(), deliver_at=base + timedelta(seconds=60 - n))
    delayed.store("Billing", b"later", delay=timedelta(hours=1))
    mover = DelayedMover(delayed, batch_size=5)
    assert mover.move_once() == 5
    assert mover.move_once() == 2
    assert delayed.count() == 1
    bodies = {queue: [row[2] for row in rawsql.all_rows(queue)] for queue in (billing, shipping)}
    if target.engine == "sqlserver":  # DELETE ... OUTPUT ... INTO keeps no order, as in the reference
        bodies = {queue: sorted(moved, reverse=True) for queue, moved in bodies.items()}
    assert bodies[billing] == [b"m5", b"m4", b"m2", b"m1"]
    assert bodies[shipping] == [b"m6", b"m3", b"m0"]


def test_delayed_store_arguments_are_checked(transport: Transport, delayed: DelayedStore) -> None:
    with pytest.raises(ConfigurationError, match="exactly one"):
        delayed.store("Billing", b"x")
    with pytest.raises(ConfigurationError, match="exactly one"):
        delayed.store("Billing", b"x", delay=1, deliver_at=datetime.now(timezone.utc))
    with pytest.raises(ConfigurationError, match="time to be received"):
        delayed.store("Billing", OutgoingMessage(b"x", time_to_be_received=timedelta(seconds=5)), delay=1)
    with pytest.raises(ConfigurationError, match="timedelta or seconds"):
        delayed.store("Billing", b"x", delay="soon")  # type: ignore[arg-type]
    naive = datetime.now(timezone.utc).replace(tzinfo=None) + timedelta(hours=1)
    delayed.store("Billing", b"naive means UTC", deliver_at=naive)
    assert delayed.count() == 1
    assert DelayedMover(delayed).move_once() == 0
    assert "CREATE TABLE" in delayed.create_script()


def test_concurrent_moves_on_sqlite_never_overlap(tmp_path) -> None:
    """SQLite elects per move: movers racing on one file take turns on the write lock."""
    with open_transport(f"sqlite:///{tmp_path / 'q.db'}") as transport:
        transport.queue("error").create()
        transport.queue("Billing").create()
        store = DelayedStore(transport, "Sales.Delayed")
        store.create()
        past = datetime.now(timezone.utc) - timedelta(seconds=1)
        for n in range(150):
            store.store("Billing", f"m{n}".encode(), deliver_at=past)
        movers = [DelayedMover(store, batch_size=4) for _ in range(3)]
        threads = [threading.Thread(target=lambda m=m: [m.move_once() for _ in range(20)]) for m in movers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sum(m.moved for m in movers) == 150 and transport.queue("Billing").count() == 150
        rounds = sorted((r.started, r.ended) for m in movers for r in m.rounds)
        assert all(b[0] >= a[1] for a, b in itertools.pairwise(rounds))


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_runtime_role_without_update_rights_can_store_and_move_on_postgresql(
    target, postgres_server
) -> None:
    if postgres_server.cluster is None:
        pytest.skip("needs the throwaway PostgreSQL cluster (role creation)")
    with target.open() as admin:
        admin.queue("error").create()
        admin.queue("Billing").create()
        DelayedStore(admin, "Sales.Delayed").create()
    role = f"app_{uuid.uuid4().hex[:8]}"
    postgres_server.execute(
        f"CREATE ROLE {role} LOGIN PASSWORD 'pw'; GRANT USAGE ON SCHEMA \"{target.schema}\" TO {role}; "
        f'GRANT SELECT, INSERT, DELETE ON ALL TABLES IN SCHEMA "{target.schema}" TO {role}'
    )
    try:
        with open_transport(
            postgres_server.cluster.url(user=role, password="pw"), default_schema=target.schema
        ) as app:
            store = DelayedStore(app, "Sales.Delayed")
            store.store("Billing", b"due", delay=0)
            mover = DelayedMover(store, idle_delay=0.2).start()
            try:
                wait_for(lambda: mover.moved == 1)
                assert mover.is_leader
            finally:
                mover.stop()
    finally:
        postgres_server.execute(f"DROP OWNED BY {role}; DROP ROLE {role}")
