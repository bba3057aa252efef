"""The pump and delayed delivery through pyodbc (psqlODBC, SQLite3 ODBC): the ``?`` forms of the delayed
statements, binding of due times, and SQLite's move without ``DELETE ... RETURNING``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from conftest import EngineTarget, odbc_target

from airflow_provider_sqlqueue.transport import DelayedMover, DelayedStore, MessagePump

pytest.importorskip("pyodbc", reason="pyodbc (the mssql extra) is not installed")


@pytest.fixture(params=["postgresql", "sqlite"], ids=["postgresql-odbc", "sqlite-odbc"])
def target(request: pytest.FixtureRequest, tmp_path) -> Iterator[EngineTarget]:
    yield from odbc_target(request, request.param, tmp_path)


def test_pump_and_delayed_delivery_over_odbc(transport) -> None:
    transport.queue("error").create()
    billing = transport.queue("Billing")
    billing.create()
    sent = set(billing.send_batch([f"m{n}".encode() for n in range(10)]))
    seen = []
    # One receiver: SQLite over ODBC begins deferred transactions (no BEGIN IMMEDIATE), so two concurrent
    # receives can wait out the driver's whole busy timeout on the lock upgrade.
    stats = MessagePump(billing, lambda message: seen.append(message.id), idle_delay=0.1).run()
    assert stats.processed == 10 and set(seen) == sent

    store = DelayedStore(transport, "Sales.Delayed")
    store.create()
    store.store("Billing", b"past", deliver_at=datetime.now(timezone.utc) - timedelta(minutes=5))
    store.store("Billing", b"later", deliver_at=datetime.now(timezone.utc) + timedelta(hours=1))
    store.store("Billing", b"in an hour", delay=timedelta(hours=1))
    mover = DelayedMover(store)
    assert mover.move_once() == 1
    assert store.count() == 2
    with billing.receive(max_messages=5) as batch:
        assert [m.body for m in batch] == [b"past"]
