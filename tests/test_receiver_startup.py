"""What happens when a receiver starts, and what provisioning does to a table receivers already use.

- ``MessagePump.start`` inspects the input queue once and logs what it finds (the reference's schema
  inspection): it never fails the start;
- with ``purge_expired_on_start`` it first deletes the expired messages in batches, where a deadlock is a
  warning and the start goes on;
- ``create()`` on an existing table reports a missing index and builds it only with
  ``add_missing_indexes=True``.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

import pytest
import rawsql

from airflow_provider_sqlqueue.dialects.base import IndexSpec, TableOptions
from airflow_provider_sqlqueue.transport import (
    ConfigurationError,
    MessagePump,
    OutgoingMessage,
    TableQueue,
)

PROVISIONING_LOG = "airflow_provider_sqlqueue.transport.queue"
QUEUE_LOG = PROVISIONING_LOG  # the start-up's inspection and purge log under the queue package's name


def _start_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == QUEUE_LOG]


def _run_pump(queue: TableQueue, **switches: object) -> tuple[list[bytes], object]:
    """Start a pump on ``queue`` with the given start-up switches, drain it, and return the bodies handled."""
    handled: list[bytes] = []
    pump = MessagePump(queue, lambda message: handled.append(message.body), idle_delay=0.1, **switches)
    stats = pump.run(until_empty=True, timeout=20)
    return handled, stats


def _send_expired(queue: TableQueue, count: int) -> None:
    queue.send_batch([OutgoingMessage(b"stale", time_to_be_received=timedelta(milliseconds=1))] * count)
    time.sleep(0.05)  # SQL Server's datetime has 3 ms steps; every engine's clock has passed 1 ms by then


# ---- the inspection when a receiver starts -------------------------------------------------------------
def test_a_receiver_start_logs_what_the_inspection_finds_and_starts_anyway(
    queue: TableQueue, target, caplog: pytest.LogCaptureFixture
) -> None:
    expires_index = _expires_index(queue)
    rawsql.drop_index(queue, expires_index.name)
    queue.send(b"work")
    with caplog.at_level(logging.INFO, logger=QUEUE_LOG):
        handled, _ = _run_pump(queue)
    assert handled == [b"work"], "the receiver did not start because of a finding"
    fix = queue.dialect.display_sql(expires_index.create)
    [expires] = [record for record in _start_records(caplog) if fix in record.getMessage()]
    assert expires.levelno == logging.INFO, "without the purge only the purge needs the Expires index"
    # create() makes the legacy Recoverable column, as the reference's table script does: nothing to report
    assert [record for record in _start_records(caplog) if "Recoverable" in record.getMessage()] == []
    clustered = [record for record in _start_records(caplog) if "clustered" in record.getMessage()]
    if target.engine == "sqlserver" and target.variant != "babelfish":
        assert [record.levelno for record in clustered] == [logging.INFO]
    else:  # no such layout; Babelfish reports its clustered indexes as non-clustered
        assert clustered == []

    caplog.clear()
    with caplog.at_level(logging.INFO, logger=QUEUE_LOG):
        _run_pump(queue, purge_expired_on_start=True)
    [expires] = [record for record in _start_records(caplog) if fix in record.getMessage()]
    assert expires.levelno == logging.WARNING, "the purge reads the Expires index"


# On SQLite RowVersion is the rowid (INTEGER PRIMARY KEY): there is no index to drop.
@pytest.mark.parametrize("target", ["postgresql", "sqlserver-freetds", "sqlserver-msodbc"], indirect=True)
def test_a_missing_rowversion_index_is_a_warning_at_start(
    queue: TableQueue, caplog: pytest.LogCaptureFixture
) -> None:
    rowversion_index = queue.dialect.indexes(queue.address, TableOptions())[0]
    rawsql.drop_index(queue, rowversion_index.name)
    queue.send(b"work")
    with caplog.at_level(logging.INFO, logger=QUEUE_LOG):
        handled, _ = _run_pump(queue)
    assert handled == [b"work"]
    [missing] = [
        record for record in _start_records(caplog) if "no index on rowversion" in record.getMessage()
    ]
    assert missing.levelno == logging.WARNING


def test_the_inspection_at_start_can_be_switched_off(queue: TableQueue, caplog) -> None:
    rawsql.drop_index(queue, _expires_index(queue).name)
    with caplog.at_level(logging.DEBUG, logger=QUEUE_LOG):
        _run_pump(queue, inspect_on_start=False)
    assert [record.getMessage() for record in _start_records(caplog) if "Fix:" in record.getMessage()] == []
    assert not any("Recoverable" in record.getMessage() for record in _start_records(caplog))
    with pytest.raises(ConfigurationError, match="inspect_on_start"):
        MessagePump(queue, lambda message: None, inspect_on_start="no")  # type: ignore[arg-type]


# ---- the purge when a receiver starts ------------------------------------------------------------------
def test_a_receiver_purges_expired_messages_at_start_in_batches_only_when_asked(
    queue: TableQueue, caplog: pytest.LogCaptureFixture
) -> None:
    _send_expired(queue, 25)
    queue.send_batch([b"live"] * 3)
    with caplog.at_level(logging.INFO, logger=QUEUE_LOG):
        handled, stats = _run_pump(queue, purge_expired_on_start=True, purge_batch_size=10)
    assert handled == [b"live"] * 3
    assert stats.expired == 0, "the receives met expired messages the purge should have deleted"
    assert any("purged 25 expired message(s)" in record.getMessage() for record in _start_records(caplog))
    assert queue.count() == 0 and rawsql.all_rows(queue) == []

    _send_expired(queue, 4)
    queue.send(b"live")
    handled, stats = _run_pump(queue)
    assert handled == [b"live"] and stats.expired == 4, "without the switch the receives drop them"
    with pytest.raises(ConfigurationError, match="purge_batch_size"):
        MessagePump(queue, lambda message: None, purge_batch_size=0)


def _expires_index(queue: TableQueue) -> IndexSpec:
    return next(
        spec for spec in queue.dialect.indexes(queue.address, TableOptions()) if "Expires" in spec.name
    )


# ---- create() on an existing table ---------------------------------------------------------------------
def test_create_reports_an_index_missing_from_an_existing_table_and_builds_it_only_when_asked(
    queue: TableQueue, caplog: pytest.LogCaptureFixture
) -> None:
    expires_index = _expires_index(queue)
    rawsql.drop_index(queue, expires_index.name)
    with caplog.at_level(logging.WARNING, logger=PROVISIONING_LOG):
        assert queue.create() is False
    [warning] = [record for record in caplog.records if record.name == PROVISIONING_LOG]
    assert [finding.code for finding in queue.inspect()] == ["missing_expires_index"], "create() built it"
    assert warning.levelno == logging.WARNING
    assert queue.dialect.display_sql(expires_index.create) in warning.getMessage()
    assert "add_missing_indexes=True" in warning.getMessage()

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=PROVISIONING_LOG):
        assert queue.create(add_missing_indexes=True) is False
    assert queue.inspect() == []
    assert any(expires_index.name in record.getMessage() for record in caplog.records)


def test_create_of_a_new_table_builds_its_indexes_without_being_asked(transport, caplog) -> None:
    fresh = transport.queue("fresh")
    with caplog.at_level(logging.WARNING, logger=PROVISIONING_LOG):
        assert fresh.create() is True
    assert fresh.inspect() == []
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_the_provision_operator_reports_a_missing_index_and_builds_it_with_its_flag(
    target, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator

    for name, value in target.airflow_env("sqlqueue_startup").items():
        monkeypatch.setenv(name, value)

    def provision(**flags: bool) -> dict:
        operator = ProvisionQueuesOperator(
            task_id="provision",
            endpoint="Sales",
            audit_queue=None,
            sqlqueue_conn_id="sqlqueue_startup",
            **flags,
        )
        return operator.execute(context={})

    def names(listed: list[str]) -> list[str]:
        return [name.partition("@")[0] for name in listed]

    # the error queue comes with its archive, where deleted failed messages go
    assert names(provision()["created"]) == ["Sales", "error", "error_archive"]
    with target.open() as transport:
        sales = transport.queue("Sales")
        rawsql.drop_index(sales, _expires_index(sales).name)
        left = provision()
        assert names(left["findings"]) == ["Sales"]
        [findings] = left["findings"].values()
        assert [finding["code"] for finding in findings] == ["missing_expires_index"]
        added = provision(add_missing_indexes=True)
        assert names(added["existing"]) == ["Sales", "error", "error_archive"] and added["findings"] == {}
        assert sales.inspect() == []


# The purge's first row deleted takes advisory lock (DEADLOCK_KEY, 1), waits until another session queues for
# it, then asks for (DEADLOCK_KEY, 2), which that session holds: a real deadlock, which the purge's session
# detects first (its deadlock_timeout is 20 ms, the other's the default second), so the purge is the victim.
# The trigger does nothing unless the other session holds (DEADLOCK_KEY, 2) and nobody holds the first lock.
DEADLOCK_KEY = 770_016
DEADLOCK_TRIGGER = """
CREATE FUNCTION {schema}.purge_meets_a_deadlock() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = {key} AND objid = 2
               AND granted AND pid <> pg_backend_pid())
       AND NOT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = {key} AND objid = 1)
    THEN
        PERFORM pg_advisory_xact_lock({key}, 1);
        FOR waited IN 1..500 LOOP
            EXIT WHEN EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = {key}
                              AND objid = 1 AND NOT granted);
            PERFORM pg_sleep(0.01);
        END LOOP;
        PERFORM set_config('deadlock_timeout', '20ms', true);
        PERFORM pg_advisory_xact_lock({key}, 2);
    END IF;
    RETURN OLD;
END $$;
CREATE TRIGGER purge_meets_a_deadlock BEFORE DELETE ON {table}
    FOR EACH ROW EXECUTE FUNCTION {schema}.purge_meets_a_deadlock();
"""


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_purge_at_start_chosen_as_a_deadlock_victim_is_a_warning_and_the_receiver_starts(
    queue: TableQueue, target, caplog: pytest.LogCaptureFixture
) -> None:
    import psycopg

    _send_expired(queue, 5)
    queue.send(b"live")
    dialect = queue.dialect
    schema = dialect.quote(queue.address.schema)
    rawsql.execute(
        queue.transport,
        DEADLOCK_TRIGGER.format(schema=schema, table=rawsql.table_of(queue), key=DEADLOCK_KEY),
    )
    dsn = target.url.replace("postgresql+psycopg://", "postgresql://")
    holding = threading.Event()
    outcome: list[str] = []

    def other_session() -> None:
        with psycopg.connect(dsn) as other:
            other.execute("SELECT pg_advisory_xact_lock(%s, 2)", (DEADLOCK_KEY,))
            holding.set()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # until the purge holds the first lock
                taken = other.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s "
                    "AND objid = 1 AND granted",
                    (DEADLOCK_KEY,),
                ).fetchone()
                if taken and taken[0]:
                    break
                time.sleep(0.01)
            other.execute("SELECT pg_advisory_xact_lock(%s, 1)", (DEADLOCK_KEY,))  # waits for the purge
            outcome.append("granted")

    session = threading.Thread(target=other_session)
    session.start()
    try:
        assert holding.wait(10)
        with caplog.at_level(logging.INFO, logger=QUEUE_LOG):
            handled, stats = _run_pump(queue, purge_expired_on_start=True, purge_batch_size=10)
    finally:
        session.join(20)
    assert outcome == ["granted"], "the other session was the victim, not the purge"
    [victim] = [record for record in _start_records(caplog) if "deadlock victim" in record.getMessage()]
    assert victim.levelno == logging.WARNING and "after 0 were deleted" in victim.getMessage()
    assert handled == [b"live"], "the receiver did not start after the purge's deadlock"
    assert stats.expired == 5, "the purge's batch was rolled back, so the receives dropped the expired rows"


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_purge_at_start_that_fails_otherwise_stops_the_start(queue: TableQueue, caplog) -> None:
    import psycopg

    _send_expired(queue, 3)
    table = rawsql.table_of(queue)
    rawsql.execute(
        queue.transport,
        f"CREATE FUNCTION {queue.dialect.quote(queue.address.schema)}.refuse() RETURNS trigger "
        "LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'expired rows are kept here'; END $$",
    )
    rawsql.execute(
        queue.transport,
        f"CREATE TRIGGER refuse BEFORE DELETE ON {table} FOR EACH ROW EXECUTE FUNCTION "
        f"{queue.dialect.quote(queue.address.schema)}.refuse()",
    )
    pump = MessagePump(queue, lambda message: None, purge_expired_on_start=True)
    with caplog.at_level(logging.WARNING, logger=QUEUE_LOG), pytest.raises(psycopg.Error, match="kept here"):
        pump.start()
    assert any("failed after 0 were deleted" in record.getMessage() for record in _start_records(caplog))
    assert pump.in_flight == 0 and not pump.halted
