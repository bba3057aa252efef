"""Push wake-up on PostgreSQL: a committed send NOTIFYs its queue's channel once per statement, and an idle
pump LISTENing on its own connection wakes at once; polling stays the fallback."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
import time
from datetime import timedelta

import psycopg
import pytest

from airflow_provider_sqlqueue.model.address import QueueAddress
from airflow_provider_sqlqueue.transport import (
    ConfigurationError,
    MessagePump,
    OutgoingMessage,
    open_transport,
)

postgres_only = pytest.mark.parametrize("target", ["postgresql"], indirect=True)


class Handled:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.bodies: list[bytes] = []

    def __call__(self, message) -> None:
        self.bodies.append(message.body)
        self.event.set()


def send_from_another_process(target, queue_name: str, body: str) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        from airflow_provider_sqlqueue.transport import open_transport
        with open_transport(sys.stdin.readline().strip(), default_schema={target.schema!r}) as transport:
            transport.queue({queue_name!r}).send({body!r})
        """
    )
    subprocess.run([sys.executable, "-c", script], input=target.url + "\n", text=True, check=True, timeout=60)


def wait_listening(pump: MessagePump) -> None:
    assert pump._listener is not None, "the pump does not listen"
    assert pump._listener.connected.wait(10), "the listener never connected"
    time.sleep(0.2)  # the pump's first receives found nothing; it is waiting


@postgres_only
def test_an_idle_pump_wakes_when_another_process_sends_and_a_polling_one_waits(target, transport) -> None:
    transport.queue("error").create()
    queue = transport.queue("orders")
    queue.create()
    handled = Handled()
    with MessagePump(queue, handled, idle_delay=10) as pump:
        wait_listening(pump)
        send_from_another_process(target, "orders", "pushed")
        assert handled.event.wait(5), "a send committed by another process did not wake the idle pump"
    assert handled.bodies == [b"pushed"]

    polled = Handled()
    with MessagePump(queue, polled, idle_delay=3, wake_up="poll") as pump:
        assert pump._listener is None
        time.sleep(0.3)
        queue.send(b"polled")
        assert not polled.event.wait(1.0), "a polling pump woke before its idle delay"
        assert polled.event.wait(5)


@postgres_only
def test_a_killed_listening_connection_falls_back_to_polling_and_recovers(target, transport, caplog) -> None:
    transport.queue("error").create()
    queue = transport.queue("orders")
    queue.create()
    channel = transport.dialect.wake_up_channel(queue.address)
    handled = Handled()
    with (
        caplog.at_level(logging.INFO, logger="airflow_provider_sqlqueue.transport.wakeup"),
        MessagePump(queue, handled, idle_delay=10) as pump,
    ):
        wait_listening(pump)
        with psycopg.connect(**_conninfo(transport), autocommit=True) as admin:
            killed = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = %s",
                (f'LISTEN "{channel}"',),
            ).fetchall()
        assert killed == [(True,)]
        deadline = time.monotonic() + 10
        while pump._listener.reconnects == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        queue.send(b"while it was away")
        assert handled.event.wait(12), "the pump stopped receiving when its listener was killed"
        assert pump._listener.connected.wait(10)
        handled.event.clear()
        time.sleep(0.3)
        send_from_another_process(target, "orders", "after the recovery")
        assert handled.event.wait(5), "push wake-up did not come back after the reconnect"
    assert handled.bodies == [b"while it was away", b"after the recovery"]
    assert "push wake-up lost" in caplog.text and "push wake-up is back" in caplog.text
    assert pump._listener.reconnects >= 1


@postgres_only
def test_a_notify_is_sent_once_per_statement_and_only_when_the_inserting_transaction_commits(
    target, transport
) -> None:
    transport.queue("error").create()
    queue = transport.queue("orders")
    queue.create()
    out = transport.queue("out")
    out.create()
    listener = psycopg.connect(**_conninfo(transport), autocommit=True)
    try:
        listener.execute(f'LISTEN "{transport.dialect.wake_up_channel(out.address)}"')

        def heard() -> int:
            return sum(1 for _ in listener.notifies(timeout=0.3))

        queue.send(b"work")
        with pytest.raises(RuntimeError), queue.receive() as batch:
            batch.send(out, b"never committed")
            raise RuntimeError("roll the receive back")
        assert heard() == 0 and out.count() == 0
        with queue.receive() as batch:
            batch.send(out, b"committed with the receive")
            assert heard() == 0  # not before the commit
        assert heard() == 1
        out.send_batch([f"m{n}".encode() for n in range(100)])  # one bulk statement
        assert heard() == 1
        ttbr = [
            OutgoingMessage(f"t{n}", time_to_be_received=timedelta(minutes=1)) for n in range(250)
        ]  # INSERTs
        out.send_batch(ttbr)
        assert heard() == 1
        out.send(b"one")
        assert heard() == 1
    finally:
        listener.close()


@postgres_only
def test_channels_fit_postgresqls_identifier_length_and_differ_per_queue(target, transport) -> None:
    dialect = transport.dialect
    long_schema, long_table = "s" * 60, "q" * 60
    names = {
        dialect.wake_up_channel(QueueAddress(table, schema))
        for table, schema in [
            (long_table, long_schema),
            (long_table + "x", long_schema),
            ("orders", "public"),
        ]
    }
    assert len(names) == 3 and all(len(name.encode()) <= 63 for name in names)


def test_wake_up_is_checked(tmp_path) -> None:
    with open_transport(f"sqlite:///{tmp_path / 'q.db'}") as transport:
        with pytest.raises(ConfigurationError, match="wake_up"):
            MessagePump(transport.queue("orders"), print, wake_up="push-please")
        assert transport.dialect.listen_statement(transport.queue("orders").address) is None


def _conninfo(transport) -> dict[str, object]:
    connection = transport.new_connection()
    try:
        info = connection.info.get_parameters()
        info["password"] = connection.info.password
        info["port"] = connection.info.port
        info["host"] = connection.info.host
        return info
    finally:
        connection.close()
