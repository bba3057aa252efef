"""Tables from other NServiceBus versions: the Recoverable column present or absent, detected once per
queue and remembered, and a change under a running sender reported as retryable."""

from __future__ import annotations

import pytest
import rawsql

from airflow_provider_sqlqueue.transport import OutgoingMessage, TransientDatabaseError, Transport


def drop_recoverable(transport: Transport, queue) -> None:
    column = "[Recoverable]" if transport.dialect.name == "sqlserver" else "Recoverable"
    rawsql.execute(transport, f"ALTER TABLE {rawsql.table_of(queue)} DROP COLUMN {column}")


def test_tables_without_recoverable_take_sends_receives_and_poison(target) -> None:
    with target.open() as setup:
        for name in ("modern", "error"):
            queue = setup.queue(name)
            queue.create()
            drop_recoverable(setup, queue)
    with target.open() as transport:  # a fresh process's view: nothing remembered yet
        modern = transport.queue("modern")
        first = modern.send(b"one")
        rest = modern.send_batch([b"two", OutgoingMessage(b"three")])
        p = rawsql.param(transport)
        rawsql.execute(
            transport,
            f"INSERT INTO {rawsql.table_of(modern)} (Id, Headers, Body) VALUES ({p}, {p}, {p})",
            (
                "7b7c9d6e-1f2a-4b3c-8d9e-0a1b2c3d4e5f" if target.engine != "postgresql" else _uuid(),
                "<bad",
                b"x",
            ),
        )
        with modern.receive(max_messages=10) as batch:
            assert [m.id for m in batch] == [first, *rest]
            assert batch.poisoned == 1
        assert [row[1] for row in rawsql.all_rows(transport.queue("error"))] == ["<bad"]


def test_a_column_dropped_under_a_running_sender_is_retryable(target) -> None:
    with target.open() as transport:
        queue = transport.queue("changing")
        queue.create()
        queue.send(b"with the column")  # remembers: the column is there
        drop_recoverable(transport, queue)
        with pytest.raises(TransientDatabaseError, match="Recoverable"):
            queue.send(b"first try")
        queue.send(b"second try")  # checks again and leaves the column out
        with queue.receive(max_messages=5) as batch:
            assert [m.body for m in batch] == [b"with the column", b"second try"]


def _uuid():
    import uuid

    return uuid.UUID("7b7c9d6e-1f2a-4b3c-8d9e-0a1b2c3d4e5f")


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_create_gives_an_older_tables_recoverable_its_default(transport) -> None:
    """A PostgreSQL queue made before Recoverable had a default refuses an INSERT that leaves the column out
    (the reference's SendText); create() on it adds the default, and such an INSERT then lands."""
    queue = transport.queue("older")
    queue.create()
    table = rawsql.table_of(queue)
    rawsql.execute(transport, f"ALTER TABLE {table} ALTER COLUMN Recoverable DROP DEFAULT")
    insert = f"INSERT INTO {table} (Id, Headers, Body) VALUES (%s, %s, %s)"
    with pytest.raises(Exception, match="recoverable"):
        rawsql.execute(transport, insert, (_uuid(), "{}", b"x"))
    assert queue.create() is False
    rawsql.execute(transport, insert, (_uuid(), "{}", b"x"))
    assert rawsql.column_values(queue, "Recoverable") == [True]
