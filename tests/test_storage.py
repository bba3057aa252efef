"""A queue table's storage after a drain (transport/queue/storage.py, dialects/postgres_storage.py): the
autovacuum storage parameters PostgreSQL tables are created with, what ``storage()`` reports (dead rows,
sizes, the advice), and ``vacuum()`` giving a drained table's space back; on SQLite and SQL Server both say
there is nothing to schedule."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from conftest import EngineTarget
from postgres_plugin import PostgresServer
from sqlalchemy.engine import make_url

from airflow_provider_sqlqueue.transport import (
    PermissionDenied,
    QueueNotFound,
    TableOptions,
    TableQueue,
    TableStorage,
    Transport,
    open_transport,
)

postgres_only = pytest.mark.parametrize("target", ["postgresql"], indirect=True)
PACKAGE_PARAMETERS = [
    "autovacuum_vacuum_scale_factor=0",
    "autovacuum_vacuum_threshold=1000",
    "autovacuum_vacuum_cost_delay=0.5",
    "vacuum_index_cleanup=on",
]
# Autovacuum off for the tables whose dead rows a test counts: it must not clean them up first.
NO_AUTOVACUUM = TableOptions(storage_parameters={"autovacuum_enabled": False})
DRAINED = 3000


def reloptions(server: PostgresServer, target: EngineTarget, table: str) -> list[str] | None:
    rows = server.query(
        "SELECT c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        f"WHERE n.nspname = '{target.schema}' AND c.relname = '{table}'"
    )
    return rows[0][0]


def heap_bytes(server: PostgresServer, target: EngineTarget, table: str) -> int:
    return int(server.query(f'SELECT pg_relation_size(\'"{target.schema}"."{table}"\')')[0][0])


def drained(transport: Transport, name: str = "orders") -> TableQueue:
    """A queue (autovacuum off) that held DRAINED messages, all received."""
    queue = transport.queue(name)
    queue.create(NO_AUTOVACUUM)
    queue.send_batch([b"x" * 1024] * DRAINED)
    taken = 0
    while True:
        with queue.receive(500) as batch:
            if not batch:
                break
            taken += len(batch)
    assert taken == DRAINED
    return queue


def settled_storage(queue: TableQueue, dead_at_least: int) -> TableStorage:
    """``storage()`` once the server's statistics show the drain (backends publish their counters about
    once a second); the last reading if they never do, for the assertions to report."""
    deadline = time.monotonic() + 30
    while True:
        storage = queue.storage()
        if (storage.dead_tuples or 0) >= dead_at_least or time.monotonic() > deadline:
            return storage
        time.sleep(0.5)


@postgres_only
def test_a_new_table_gets_the_autovacuum_storage_parameters_and_options_override_them(
    target: EngineTarget, postgres_server: PostgresServer
) -> None:
    with target.open() as transport:
        transport.queue("orders").create()
        transport.queue("plain").create(storage_parameters={})
        transport.queue("tuned").create(storage_parameters={"autovacuum_vacuum_threshold": 50})
        storage = transport.queue("orders").storage()

    assert reloptions(postgres_server, target, "orders") == PACKAGE_PARAMETERS
    assert reloptions(postgres_server, target, "plain") is None
    assert reloptions(postgres_server, target, "tuned") == ["autovacuum_vacuum_threshold=50"]
    assert storage.applicable
    assert [f"{name}={value}" for name, value in storage.storage_parameters or ()] == PACKAGE_PARAMETERS
    assert storage.advice == ()


def test_storage_parameters_are_checked_before_they_reach_the_ddl() -> None:
    for bad in (
        {"autovacuum_enabled = off); DROP TABLE x; --": 1},
        {"fillfactor": "90); DROP TABLE x"},
        {"Fillfactor": 90},
        {"fillfactor": None},
    ):
        with pytest.raises(ValueError, match="storage parameter"):
            TableOptions(storage_parameters=bad)
    options = TableOptions(storage_parameters={"fillfactor": 90, "toast.autovacuum_enabled": True})
    assert options.storage_parameters == (("fillfactor", "90"), ("toast.autovacuum_enabled", "true"))


@postgres_only
def test_an_old_table_without_the_parameters_gets_the_alter_statement_as_advice(
    target: EngineTarget, postgres_server: PostgresServer
) -> None:
    with target.open() as transport:
        queue = transport.queue("orders")
        queue.create(storage_parameters={})  # as a table made before the package set them
        (advice,) = queue.storage().advice
        fix = advice[advice.index("ALTER TABLE") :]
        postgres_server.execute(fix)

        assert fix.startswith(f'ALTER TABLE "{target.schema}"."orders" SET (')
        assert reloptions(postgres_server, target, "orders") == PACKAGE_PARAMETERS
        assert queue.storage().advice == ()


@postgres_only
def test_storage_reports_the_dead_rows_of_a_drain_and_advises_vacuum(target: EngineTarget) -> None:
    with target.open() as transport:
        queue = drained(transport)
        storage = settled_storage(queue, DRAINED)

    assert storage.live_tuples == 0 and storage.dead_tuples == DRAINED, storage
    assert storage.table_bytes and storage.table_bytes > DRAINED * 1024
    assert storage.index_bytes and storage.index_bytes > 0
    assert storage.last_vacuum is None and storage.last_autovacuum is None
    off, dead = storage.advice
    assert "autovacuum is off for this table" in off
    assert f"{DRAINED:,} dead rows against 0 live" in dead
    assert dead.endswith(f'run: VACUUM (INDEX_CLEANUP ON) "{target.schema}"."orders"')


@postgres_only
def test_vacuum_gives_a_drained_tables_storage_back(
    target: EngineTarget, postgres_server: PostgresServer
) -> None:
    with target.open() as transport:
        queue = drained(transport)
        before = heap_bytes(postgres_server, target, "orders")
        result = queue.vacuum()
        storage = settled_storage(queue, 0)

    assert before > DRAINED * 1024
    assert result.ran and result.queue == str(queue.address)
    assert result.bytes_before is not None and result.bytes_after is not None
    assert result.bytes_after < result.bytes_before / 10, result
    assert heap_bytes(postgres_server, target, "orders") == 0
    assert storage.last_vacuum is not None
    assert not any("dead rows" in line for line in storage.advice)


@postgres_only
def test_vacuum_of_a_queue_with_a_hostile_name(target: EngineTarget, postgres_server: PostgresServer) -> None:
    name = 'or"ders%s; --'
    with target.open() as transport:
        queue = drained(transport, name)
        storage = settled_storage(queue, DRAINED)
        result = queue.vacuum()

    assert storage.advice[-1].endswith(f'run: VACUUM (INDEX_CLEANUP ON) "{target.schema}"."or""ders%s; --"')
    assert result.ran and result.bytes_after is not None and result.bytes_after < result.bytes_before
    assert heap_bytes(postgres_server, target, name.replace('"', '""')) == 0


# ---- a runtime role (SELECT, INSERT, DELETE only) ------------------------------------------------------
@pytest.fixture
def runtime_url(target: EngineTarget, postgres_server: PostgresServer) -> Iterator[str]:
    name, password = f"qmin_{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    postgres_server.execute(f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}'")
    postgres_server.execute(f'GRANT USAGE ON SCHEMA "{target.schema}" TO "{name}"')
    try:
        yield make_url(target.url).set(username=name, password=password).render_as_string(hide_password=False)
    finally:
        postgres_server.execute(f'DROP OWNED BY "{name}"')
        postgres_server.execute(f'DROP ROLE "{name}"')


@postgres_only
def test_a_runtime_role_reads_the_storage_but_may_not_vacuum(
    target: EngineTarget, postgres_server: PostgresServer, runtime_url: str
) -> None:
    role = make_url(runtime_url).username
    with target.open() as admin:
        drained(admin)
    postgres_server.execute(f'GRANT SELECT, INSERT, DELETE ON "{target.schema}"."orders" TO "{role}"')
    with open_transport(runtime_url, default_schema=target.schema) as runtime:
        queue = runtime.queue("orders")
        storage = settled_storage(queue, DRAINED)
        with pytest.raises(PermissionDenied, match="needs the table's owner") as refused:
            queue.vacuum()

    assert storage.dead_tuples == DRAINED and storage.note == ""
    assert make_url(runtime_url).password not in str(refused.value)
    assert heap_bytes(postgres_server, target, "orders") > DRAINED * 1024  # nothing was vacuumed


@postgres_only
def test_a_role_that_may_not_read_the_statistics_gets_the_rest_and_a_note(
    target: EngineTarget, postgres_server: PostgresServer, runtime_url: str
) -> None:
    role = make_url(runtime_url).username
    with target.open() as admin:
        drained(admin)
    postgres_server.execute(f'GRANT SELECT, INSERT, DELETE ON "{target.schema}"."orders" TO "{role}"')
    postgres_server.execute("REVOKE SELECT ON pg_catalog.pg_stat_user_tables FROM PUBLIC")
    try:
        with open_transport(runtime_url, default_schema=target.schema) as runtime:
            storage = runtime.queue("orders").storage()
    finally:
        postgres_server.execute("GRANT SELECT ON pg_catalog.pg_stat_user_tables TO PUBLIC")

    assert storage.applicable and storage.dead_tuples is None and storage.live_tuples is None
    assert "may not read pg_stat_user_tables" in storage.note
    assert storage.table_bytes and storage.table_bytes > DRAINED * 1024
    assert storage.storage_parameters == (("autovacuum_enabled", "false"),)


# ---- engines that need no vacuum -----------------------------------------------------------------------
@pytest.mark.parametrize("target", ["sqlite", "sqlserver-freetds", "sqlserver-msodbc"], indirect=True)
def test_other_engines_say_there_is_nothing_to_schedule(target: EngineTarget) -> None:
    with target.open() as transport:
        queue = transport.queue("orders")
        queue.create(NO_AUTOVACUUM)  # storage parameters are PostgreSQL's; elsewhere they change nothing
        queue.send_batch([b"x"] * 10)
        storage = queue.storage()
        result = queue.vacuum()
        assert queue.count() == 10

    assert not storage.applicable and storage.note.startswith("not applicable")
    assert "Babelfish" in storage.note if target.babelfish else "Babelfish" not in storage.note
    assert storage.dead_tuples is None and storage.advice == ()
    assert not result.ran and result.note == storage.note


def test_the_provision_operator_passes_storage_parameters_and_refuses_bad_ones_when_parsed() -> None:
    from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator

    operator = ProvisionQueuesOperator(
        task_id="provision", endpoint="Sales", storage_parameters={"autovacuum_vacuum_threshold": 50}
    )
    assert operator.options.storage_parameters == (("autovacuum_vacuum_threshold", "50"),)
    assert ProvisionQueuesOperator(task_id="default", endpoint="Sales").options.storage_parameters is None
    with pytest.raises(ValueError, match="storage parameter"):
        ProvisionQueuesOperator(task_id="bad", endpoint="Sales", storage_parameters={"x); --": 1})


@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_storage_and_vacuum_of_a_missing_queue_say_so(target: EngineTarget) -> None:
    with target.open() as transport:
        missing = transport.queue("nope")
        with pytest.raises(QueueNotFound):
            missing.storage()
        with pytest.raises(QueueNotFound):
            missing.vacuum()


@postgres_only
def test_a_vacuum_that_cannot_take_the_table_keeps_its_pages_and_inspect_still_advises_one(
    target: EngineTarget, postgres_server: PostgresServer
) -> None:
    """A reader holding the table while the vacuum asks for its brief exclusive lock: the dead rows go, the
    empty pages stay, and no autovacuum would come for them (no dead rows left to count)."""
    import psycopg

    with target.open() as transport:
        queue = transport.queue("orders")
        queue.create(NO_AUTOVACUUM)
        queue.send_batch([b"x" * 1024] * 10_000)
        while True:
            with queue.receive(1000) as batch:
                if not batch:
                    break
        dsn = make_url(target.url).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(dsn) as reader:
            reader.execute(f'SELECT 1 FROM "{target.schema}"."orders" LIMIT 0')  # holds ACCESS SHARE
            kept = queue.vacuum()
        storage = queue.storage()
        given_back = queue.vacuum()

    assert kept.ran and kept.bytes_after is not None and kept.bytes_after > kept.bytes_before / 2, kept
    assert storage.dead_tuples == 0 and storage.live_tuples == 0, storage
    assert " table pages hold 0 live rows: the pages without live rows stay" in storage.advice[-1]
    assert storage.advice[-1].endswith(f'run: VACUUM (INDEX_CLEANUP ON) "{target.schema}"."orders"')
    assert given_back.bytes_after is not None and given_back.bytes_after < kept.bytes_after / 10
    assert heap_bytes(postgres_server, target, "orders") == 0


def receive_all_but(queue: TableQueue, left: int) -> None:
    while queue.count() > left:
        with queue.receive(min(1000, queue.count() - left)):
            pass


@postgres_only
@pytest.mark.parametrize("made", ["by the package", "without its settings"])
def test_the_last_rows_of_a_drain_do_not_pin_its_pages(
    target: EngineTarget, postgres_server: PostgresServer, made: str
) -> None:
    """A vacuum that finds few dead rows on a large table skips the indexes unless told not to, and leaves
    the rows' line pointers in their pages, which then cannot be given back. The tables' own setting covers
    autovacuum (a plain VACUUM here stands for it); ``vacuum()`` asks for the index cleanup itself."""
    table = f'"{target.schema}"."orders"'
    with target.open() as transport:
        queue = transport.queue("orders")
        queue.create(storage_parameters=None if made == "by the package" else {})
        queue.send_batch([b"x" * 1024] * 20_000)
        receive_all_but(queue, 200)
        postgres_server.execute(f"VACUUM {table}")  # during the drain: the head's rows go
        receive_all_but(queue, 0)  # the last 1 %: a vacuum would skip the indexes for so few
        if made == "by the package":
            postgres_server.execute(f"VACUUM {table}")
        else:
            queue.vacuum()

    assert heap_bytes(postgres_server, target, "orders") == 0
