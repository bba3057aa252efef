"""The runtime path on a PostgreSQL role holding only SELECT, INSERT and DELETE on the queue tables.

PostgreSQL takes row locks (``FOR UPDATE SKIP LOCKED``) only for roles with an UPDATE privilege, so such a
role's receivers compete through advisory locks. These tests run the core, the pump and mixed
competitions on a real server and check the promise that matters: every message reaches exactly one
receiver, held messages are skipped, nothing blocks on them.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from conftest import EngineTarget
from postgres_plugin import PostgresServer
from sqlalchemy.engine import make_url
from workers import drain_competing

from airflow_provider_sqlqueue.transport import (
    ConfigurationError,
    MessagePump,
    OutgoingMessage,
    PermissionDenied,
    TableQueue,
    Transport,
    open_transport,
)

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("target", ["postgresql"], indirect=True)]

QUEUES = ("orders", "error")


class RuntimeRole:
    """A login role with SELECT, INSERT and DELETE on the test's queues and nothing else."""

    def __init__(self, target: EngineTarget, server: PostgresServer) -> None:
        self.name = f"qmin_{uuid.uuid4().hex[:8]}"
        self.password = f"pw-{uuid.uuid4().hex}"
        self.target = target
        self.server = server
        server.execute(f"CREATE ROLE \"{self.name}\" LOGIN PASSWORD '{self.password}'")
        server.execute(f'GRANT USAGE ON SCHEMA "{target.schema}" TO "{self.name}"')
        tables = ", ".join(f'"{target.schema}"."{queue}"' for queue in QUEUES)
        server.execute(f'GRANT SELECT, INSERT, DELETE ON {tables} TO "{self.name}"')

    @property
    def url(self) -> str:
        url = make_url(self.target.url).set(username=self.name, password=self.password)
        return url.render_as_string(hide_password=False)

    def open(self, **options: object) -> Transport:
        return open_transport(self.url, default_schema=self.target.schema, **options)  # type: ignore[arg-type]

    def drop(self) -> None:
        self.server.execute(f'DROP OWNED BY "{self.name}"')
        self.server.execute(f'DROP ROLE "{self.name}"')


@pytest.fixture
def role(target: EngineTarget, postgres_server: PostgresServer) -> Iterator[RuntimeRole]:
    with target.open() as admin:
        for name in QUEUES:
            admin.queue(name).create()
    runtime = RuntimeRole(target, postgres_server)
    yield runtime
    runtime.drop()


@pytest.fixture
def admin(target: EngineTarget) -> Iterator[Transport]:
    with target.open() as transport:
        yield transport


def advisory_locks_held(server: PostgresServer, role: RuntimeRole) -> int:
    rows = server.query(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        f"WHERE l.locktype = 'advisory' AND a.usename = '{role.name}'"
    )
    return int(rows[0][0])


def test_role_without_update_sends_receives_peeks_counts_and_purges(
    role: RuntimeRole, admin: Transport
) -> None:
    with role.open() as transport:
        queue = transport.queue("orders")
        sent = queue.send_batch([f"m{n}".encode() for n in range(5)])
        queue.send(OutgoingMessage(b"stale", time_to_be_received=timedelta(microseconds=1)))
        time.sleep(0.01)
        assert queue.peek_estimate() == 6
        assert queue.peek_bounds()[0] is not None
        assert queue.count() == 5
        with queue.receive(max_messages=3) as first:
            assert [m.body for m in first] == [b"m0", b"m1", b"m2"]
        assert queue.purge_expired() == 1
        with queue.receive(max_messages=10) as rest:
            assert [m.body for m in rest] == [b"m3", b"m4"]
        assert [m.id for m in first] + [m.id for m in rest] == sent
        assert queue.peek_estimate() == 0
    assert admin.queue("orders").count() == 0


def test_a_batch_holds_one_advisory_lock_per_message_and_others_skip_them(
    role: RuntimeRole, postgres_server: PostgresServer
) -> None:
    with role.open() as first, role.open() as second:
        queue = first.queue("orders")
        queue.send_batch([f"m{n}".encode() for n in range(1000)])
        with queue.receive(max_messages=10) as held:
            assert [m.body for m in held] == [f"m{n}".encode() for n in range(10)]
            assert advisory_locks_held(postgres_server, role) == 10
            with second.queue("orders").receive(max_messages=5) as other:
                assert [m.body for m in other] == [f"m{n}".encode() for n in range(10, 15)]
        assert advisory_locks_held(postgres_server, role) == 0
        assert queue.count() == 1000 - 15


def waiting_on_a_lock(server: PostgresServer, role: RuntimeRole) -> bool:
    rows = server.query(
        f"SELECT count(*) FROM pg_stat_activity WHERE usename = '{role.name}' AND wait_event_type = 'Lock'"
    )
    return int(rows[0][0]) > 0


def test_a_pick_whose_rows_were_deleted_meanwhile_takes_the_next_ones(
    role: RuntimeRole, admin: Transport, postgres_server: PostgresServer
) -> None:
    """An advisory pick reads the queue as it was when its statement began. Rows that another session
    deleted and committed meanwhile are gone by the time its DELETE reaches them. Without a second pick the
    receive came back empty with five messages still queued (a drain then stopped early)."""
    table = f'"{role.target.schema}"."orders"'
    with role.open() as transport:
        queue = transport.queue("orders")
        queue.send_batch([f"m{n}".encode() for n in range(10)])
        received: list[bytes] = []
        with admin.connection() as foreign:
            cursor = foreign.cursor()
            # a session that deletes the five oldest without advisory locks, and commits while the pick waits
            cursor.execute(
                f"DELETE FROM {table} WHERE RowVersion IN (SELECT RowVersion FROM {table} "
                "ORDER BY RowVersion LIMIT 5)"
            )

            def receive() -> None:
                with queue.receive(max_messages=5) as batch:
                    received.extend(m.body for m in batch)

            receiver = threading.Thread(target=receive)
            receiver.start()
            deadline = time.monotonic() + 30
            while not waiting_on_a_lock(postgres_server, role):
                assert receiver.is_alive() and time.monotonic() < deadline, "the pick never waited"
                time.sleep(0.05)
            foreign.commit()
            receiver.join(30)
        assert received == [f"m{n}".encode() for n in range(5, 10)]
        assert queue.count() == 0


def test_rolled_back_messages_come_back_in_order(role: RuntimeRole) -> None:
    with role.open() as transport:
        queue = transport.queue("orders")
        queue.send_batch([b"a", b"b", b"c"])
        with pytest.raises(RuntimeError), queue.receive(max_messages=2):
            raise RuntimeError("handler failed")
        with queue.receive(max_messages=3) as again:
            assert [m.body for m in again] == [b"a", b"b", b"c"]


def test_purge_skips_expired_rows_a_receiver_holds_without_waiting(role: RuntimeRole) -> None:
    stale = OutgoingMessage(b"stale", time_to_be_received=timedelta(microseconds=1))
    with role.open() as transport:
        queue = transport.queue("orders")
        queue.send_batch([stale] * 10)
        time.sleep(0.01)
        with queue.receive(max_messages=4) as held:
            assert len(held) == 0 and held.expired == 4
            done: list[int] = []
            purger = threading.Thread(target=lambda: done.append(queue.purge_expired()))
            purger.start()
            purger.join(timeout=20)
            assert done == [6], "the purge waited for, or took, rows a receiver holds"
        assert queue.peek_estimate() == 0


def _compete(queue_of: Callable[[int], TableQueue], threads: int, seed: int) -> Counter[uuid.UUID]:
    """Drain with competing threads, each rolling back ~10% of its receives; count committed ids."""
    received: Counter[uuid.UUID] = Counter()
    lock = threading.Lock()
    workers = [
        threading.Thread(
            target=drain_competing, args=(queue_of(n), random.Random(seed + n), 50, lock, received.update)
        )
        for n in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    return received


def test_competing_advisory_receivers_get_every_message_exactly_once(role: RuntimeRole) -> None:
    transports = [role.open(pool_size=1, max_overflow=0) for _ in range(4)]
    try:
        sent: set[uuid.UUID] = set()
        for start in range(0, 6000, 1000):
            sent |= set(
                transports[0].queue("orders").send_batch([f"m{start + n}".encode() for n in range(1000)])
            )
        received = _compete(lambda n: transports[n].queue("orders"), threads=4, seed=7)
        assert set(received) == sent, f"lost {len(sent - set(received))}"
        assert [i for i, times in received.items() if times > 1] == [], "duplicated"
        assert transports[0].queue("orders").count() == 0
    finally:
        for transport in transports:
            transport.close()


def test_row_lock_and_advisory_receivers_mixed_on_one_queue_never_share_a_message(
    role: RuntimeRole, target: EngineTarget
) -> None:
    transports = [role.open(pool_size=1, max_overflow=0) for _ in range(2)]
    transports += [target.open(pool_size=1, max_overflow=0) for _ in range(2)]
    try:
        sent: set[uuid.UUID] = set()
        for start in range(0, 4000, 1000):
            sent |= set(
                transports[2].queue("orders").send_batch([f"m{start + n}".encode() for n in range(1000)])
            )
        received = _compete(lambda n: transports[n].queue("orders"), threads=4, seed=11)
        assert set(received) == sent, f"lost {len(sent - set(received))}"
        assert [i for i, times in received.items() if times > 1] == [], "duplicated"
    finally:
        for transport in transports:
            transport.close()


def test_the_pump_runs_on_a_role_without_update(role: RuntimeRole) -> None:
    seen: Counter[uuid.UUID] = Counter()
    lock = threading.Lock()

    def handler(message, context) -> None:
        with lock:
            seen[message.id] += 1

    with role.open() as transport:
        queue = transport.queue("orders")
        sent = set(queue.send_batch([f"m{n}".encode() for n in range(2000)]))
        stats = MessagePump(queue, handler, max_concurrency=4, idle_delay=0.1).run(
            until_empty=True, timeout=120
        )
        assert set(seen) == sent and max(seen.values()) == 1
        assert stats.processed == 2000 and queue.count() == 0


def test_lock_mode_can_be_chosen_and_row_locks_without_update_are_refused_clearly(
    role: RuntimeRole, admin: Transport
) -> None:
    with pytest.raises(ConfigurationError, match="lock_mode"):
        open_transport(role.url, lock_mode="rows")  # type: ignore[arg-type]
    with role.open(lock_mode="row") as transport:
        queue = transport.queue("orders")
        queue.send(b"kept")
        with pytest.raises(PermissionDenied, match="SELECT, INSERT and DELETE"), queue.receive():
            pytest.fail("row locks were granted without UPDATE")
    forced = admin.queue("orders")
    with (
        open_transport(role.target.url, default_schema=role.target.schema, lock_mode="advisory") as transport,
        transport.queue("orders").receive() as batch,
    ):
        assert [m.body for m in batch] == [b"kept"]
    assert forced.count() == 0


def test_create_on_an_older_table_by_a_role_that_may_not_alter_it_leaves_it_and_says_why(
    role: RuntimeRole, admin: Transport, caplog: pytest.LogCaptureFixture
) -> None:
    """create() gives an older table's Recoverable its default where it may (tests/test_legacy_tables.py);
    a role without the right to alter the table gets the table left as it is and a warning naming the
    statement, and sends and receives as before."""
    table = f'"{role.target.schema}"."orders"'
    role.server.execute(f"ALTER TABLE {table} ALTER COLUMN Recoverable DROP DEFAULT")
    with role.open() as transport, caplog.at_level("WARNING"):
        queue = transport.queue("orders")
        assert queue.create() is False
        queue.send(b"still")
        with queue.receive() as batch:
            assert [m.body for m in batch] == [b"still"]
    assert "may not alter the table" in caplog.text and "SET DEFAULT true" in caplog.text
    rows = role.server.query(
        "SELECT a.atthasdef FROM pg_attribute a WHERE a.attrelid = to_regclass('"
        f"{role.target.schema}.orders') AND a.attname = 'recoverable'"
    )
    assert rows[0][0] in (False, "f")
