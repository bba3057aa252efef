"""The depth history table (transport/depth_samples.py) on every engine: one sample a queue a minute however
many writers sample at once, the purge of samples older than the retention, and a sampler whose table is
absent saying so once and sampling on without it, never raising."""

from __future__ import annotations

import json
import logging
import threading
from datetime import timedelta
from typing import Any

import pytest
from conftest import EngineTarget

from airflow_provider_sqlqueue.transport import QueueAddress, Transport
from airflow_provider_sqlqueue.transport.depth_samples import (
    PURGE_EVERY,
    DepthSample,
    DepthSampler,
    DepthSampleTable,
    depth_samples_address,
)

START = 1_780_000_000.0  # a Unix time on a minute boundary's far side: 2026-05-28 20:26:40 UTC
MINUTE = 60.0


class Clock:
    """Unix seconds that a test moves by hand, shared by samplers that stand for different processes."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def history_table(transport: Transport) -> DepthSampleTable:
    orders = transport.queue("orders").address
    return DepthSampleTable(transport, depth_samples_address(transport, orders))


def test_concurrent_writers_leave_one_sample_a_queue_a_minute(target: EngineTarget) -> None:
    """Six samplers, each on its own transport (six triggerers or pumps), sample one queue in the same
    minute at once: one row holds the minute and exactly one of them inserted it; a sampler asked again in
    that minute runs no statement; the next minute gets the next row."""
    with target.open() as transport:
        table = history_table(transport)
        assert table.create() is True and table.create() is False
        orders = transport.queue("orders").address
        clock = Clock()
        writers = [target.open() for _ in range(6)]
        try:
            samplers = [DepthSampler(writer, clock=clock) for writer in writers]
            barrier = threading.Barrier(len(samplers))
            failures: list[BaseException] = []

            def write(sampler: DepthSampler, messages: int) -> None:
                try:
                    barrier.wait(30)
                    sampler.sample(orders, messages, exact=False, failed=messages % 2)
                except BaseException as error:
                    failures.append(error)

            threads = [
                threading.Thread(target=write, args=(sampler, 100 + n)) for n, sampler in enumerate(samplers)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            assert not failures, failures
            assert sum(sampler.written for sampler in samplers) == 1
            assert all(table.address not in sampler._off for sampler in samplers)
            [samples] = table.read(0).values()
            assert len(samples) == 1 and 100 <= samples[0].messages <= 105
            assert samples[0].failed == samples[0].messages % 2 and samples[0].exact is False
            assert samples[0].at.timestamp() == START // MINUTE * MINUTE

            assert samplers[0].sample(orders, 7, exact=True) is None  # the same minute: nothing asked
            clock.now += MINUTE
            assert samplers[0].sample(orders, 7, exact=True) is not None
            rows = table.read(0)["orders"]
            assert [(s.messages, s.exact, s.failed) for s in rows][1:] == [(7, True, None)]
            assert rows[1].minute == rows[0].minute + 1
        finally:
            for writer in writers:
                writer.close()


def test_the_purge_deletes_what_is_older_than_the_retention_at_most_now_and_then(
    target: EngineTarget,
) -> None:
    with target.open() as transport:
        table = history_table(transport)
        table.create()
        orders = transport.queue("orders").address
        clock = Clock()
        sampler = DepthSampler(transport, retention=timedelta(hours=1), clock=clock)
        for messages in (5, 4, 3):  # three minutes; the first sample ran the purge (nothing to delete)
            sampler.sample(orders, messages, exact=True)
            clock.now += MINUTE
        assert [s.messages for s in table.read(0)["orders"]] == [5, 4, 3]

        clock.now = START + 3600 + MINUTE  # the first sample is now older than the hour kept
        assert timedelta(seconds=clock.now - START) > PURGE_EVERY
        sampler.sample(orders, 2, exact=True)
        assert [s.messages for s in table.read(0)["orders"]] == [4, 3, 2]

        clock.now += 2 * MINUTE  # the second is older than the hour now, but the purge ran 2 minutes ago
        sampler.sample(orders, 1, exact=True)
        assert [s.messages for s in table.read(0)["orders"]] == [4, 3, 2, 1]
        clock.now += PURGE_EVERY.total_seconds()
        sampler.sample(orders, 0, exact=True)
        assert [s.messages for s in table.read(0)["orders"]] == [2, 1, 0]
        assert table.read(int((START + 3600) // MINUTE) + 3) == {"orders": table.read(0)["orders"][1:]}


def test_a_sampler_without_its_table_says_so_once_and_finds_it_when_created(
    target: EngineTarget, caplog: pytest.LogCaptureFixture
) -> None:
    """The table is opt-in, so its absence is logged once at INFO (no warning, no failed insert), and a
    table created while the sampler runs is written from the next catalog check on, within PURGE_EVERY."""
    with target.open() as transport:
        orders = transport.queue("orders").address
        clock = Clock()
        sampler = DepthSampler(transport, clock=clock)
        with caplog.at_level(logging.INFO, "airflow_provider_sqlqueue.transport.depth_samples"):
            for minute in range(3):
                clock.now = START + minute * MINUTE
                assert sampler.sample(orders, minute, exact=False) is None
        said = [r for r in caplog.records if "no depth history table" in r.getMessage()]
        assert [r.levelno for r in said] == [logging.INFO], caplog.text
        assert "sqlqueue_depth_samples" in said[0].getMessage()
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
        assert sampler.written == 0 and not history_table(transport).exists()

        table = history_table(transport)
        table.create()
        clock.now = START + 3 * MINUTE
        assert sampler.sample(orders, 7, exact=False) is None  # not asked again before PURGE_EVERY
        clock.now = START + PURGE_EVERY.total_seconds() + MINUTE
        assert sampler.sample(orders, 8, exact=False) is not None
        assert [s.messages for s in table.read(0)["orders"]] == [8] and sampler.written == 1
        assert len([r for r in caplog.records if "no depth history table" in r.getMessage()]) == 1


def test_a_sampler_without_retention_samples_nothing(target: EngineTarget) -> None:
    with target.open() as transport:
        table = history_table(transport)
        table.create()
        sampler = DepthSampler(transport, retention=None)
        assert sampler.sample(transport.queue("orders").address, 3, exact=True) is None
        assert table.read(0) == {}


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_the_table_lives_in_the_schema_of_the_queue_it_samples(target: EngineTarget) -> None:
    with target.open() as transport:
        elsewhere = depth_samples_address(transport, QueueAddress("orders", "sales"))
        assert (elsewhere.table, elsewhere.schema) == ("sqlqueue_depth_samples", "sales")
        beside = depth_samples_address(transport, transport.queue("orders").address)
        assert (beside.table, beside.schema) == ("sqlqueue_depth_samples", target.schema)


def test_the_command_line_scripts_and_creates_the_table_where_asked(
    target: EngineTarget, capsys: pytest.CaptureFixture[str]
) -> None:
    """``sqlqueue script --depth-history`` prints the DDL that ``sqlqueue create --depth-history`` runs; the
    table is made in the schema of the queues named, once."""
    from airflow_provider_sqlqueue import cli

    database = ["--url", target.url, *(["--schema", target.schema] if target.schema else [])]
    assert cli.main(["script", *database, "--depth-history"]) == cli.Exit.OK
    script = capsys.readouterr().out
    assert script.startswith("-- depth history sqlqueue_depth_samples") and "PRIMARY KEY" in script
    assert cli.main(["create", *database, "orders", "error", "--depth-history", "--json"]) == cli.Exit.OK
    made = json.loads(capsys.readouterr().out)["created"]
    with target.open() as transport:
        table = history_table(transport)
        assert made[-1] == str(table.address) and len(made) == 4 and table.exists()  # and error_archive
        assert table.create_script() in script


def test_a_trigger_event_loop_leaves_the_depths_it_polled(
    target: EngineTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deferred sensor's trigger polls through the triggerer's shared poller; its reads leave samples:
    the exact count the threshold asked for, and the error queue's estimate as Failed. One a minute."""
    pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")
    import asyncio

    from airflow_provider_sqlqueue.triggers.queue import PendingMessagesTrigger

    for key, value in target.airflow_env().items():
        monkeypatch.setenv(key, value)
    with target.open() as transport:
        transport.queue("error").create()
        orders = transport.queue("orders")
        orders.create()
        table = history_table(transport)
        table.create()
        transport.queue("error").send(b"failed before")
        for body in (b"a", b"b"):
            orders.send(body)

    async def first_event() -> dict[str, object]:
        trigger = PendingMessagesTrigger("orders", min_messages=2, poll_interval=0.2)
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    assert asyncio.run(first_event())["depth"] == 2
    with target.open() as transport:
        [samples] = history_table(transport).read(0).values()
    assert 1 <= len(samples) <= 2  # one a minute: two where the polls straddled a minute's end
    assert (samples[-1].queue, samples[-1].messages, samples[-1].exact) == ("orders", 2, True)
    assert samples[-1].failed == 1


@pytest.mark.parametrize("retention_hours", ["24", "0"])
def test_a_pump_run_through_the_hook_leaves_its_peeks_depth(
    target: EngineTarget, monkeypatch: pytest.MonkeyPatch, retention_hours: str
) -> None:
    """A pump (the monitoring strategy) run by the hook samples the depth its first peek saw; with
    ``[sqlqueue] depth_history_retention_hours`` 0 it samples nothing."""
    pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")
    from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook

    for key, value in target.airflow_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AIRFLOW__SQLQUEUE__DEPTH_HISTORY_RETENTION_HOURS", retention_hours)
    with target.open() as transport:
        transport.queue("error").create()
        orders = transport.queue("orders")
        orders.create()
        history_table(transport).create()
        for n in range(5):
            orders.send(f"m{n}".encode())
    handled: list[object] = []
    hook = SqlQueueHook()
    try:
        stats = hook.consume("orders", handled.append, timeout=60)
    finally:
        hook.close()
    assert stats.processed == 5 and len(handled) == 5
    with target.open() as transport:
        history = history_table(transport).read(0)
    if retention_hours == "0":
        assert history == {}
        return
    samples = history["orders"]
    assert 1 <= len(samples) <= 2 and samples[0].messages == 5 and samples[0].exact is False
    assert samples[0].failed is None  # a peek reads no error queue


def test_the_provisioning_operator_creates_the_table_when_asked(
    target: EngineTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ProvisionQueuesOperator(depth_history=True)`` makes the table beside the endpoint's queue (its dry
    run scripts it); without it, no table."""
    pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")
    from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator

    for key, value in target.airflow_env().items():
        monkeypatch.setenv(key, value)
    plain = ProvisionQueuesOperator(task_id="plain", endpoint="orders", audit_queue=None).execute({})
    with target.open() as transport:
        table = history_table(transport)
        assert not table.exists() and str(table.address) not in plain["created"]
        script = ProvisionQueuesOperator(
            task_id="dry", endpoint="orders", depth_history=True, dry_run=True
        ).execute({})
        assert table.create_script() in script and not table.exists()
        made = ProvisionQueuesOperator(task_id="made", endpoint="orders", depth_history=True).execute({})
        assert str(table.address) in made["created"] and table.exists()


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_role_that_may_only_read_the_table_draws_it_but_does_not_write_it(
    target: EngineTarget, postgres_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A monitoring role with SELECT alone on the history table (the Queues page's) reads the samples; as a
    writer it is refused, warns once and samples on without raising."""
    import uuid

    from sqlalchemy.engine import make_url

    from airflow_provider_sqlqueue.transport import open_transport

    with target.open() as admin:
        table = history_table(admin)
        table.create()
        table.record(DepthSample("orders", 100, 4, True, None))
    name, password = f"qread_{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    postgres_server.execute(f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}'")
    try:
        postgres_server.execute(f'GRANT USAGE ON SCHEMA "{target.schema}" TO "{name}"')
        postgres_server.execute(f'GRANT SELECT ON "{target.schema}"."sqlqueue_depth_samples" TO "{name}"')
        url = make_url(target.url).set(username=name, password=password).render_as_string(hide_password=False)
        with open_transport(url, default_schema=target.schema) as monitoring:
            assert [s.messages for s in history_table(monitoring).read(0)["orders"]] == [4]
            clock = Clock()
            sampler = DepthSampler(monitoring, clock=clock)
            with caplog.at_level(logging.WARNING, "airflow_provider_sqlqueue.transport.depth_samples"):
                for minute in range(3):
                    clock.now = START + minute * MINUTE
                    sampler.sample(monitoring.queue("orders").address, 9, exact=True)
            warnings = [r for r in caplog.records if "not sampling queue depths" in r.getMessage()]
            assert len(warnings) == 1 and "PermissionDenied" in warnings[0].getMessage(), caplog.text
            assert sampler.written == 0
    finally:
        postgres_server.execute(f'DROP OWNED BY "{name}"')
        postgres_server.execute(f'DROP ROLE "{name}"')
    with target.open() as admin:
        assert [s.messages for s in history_table(admin).read(0)["orders"]] == [4]
