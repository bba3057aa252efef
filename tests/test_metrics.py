"""The provider's metrics reach a real StatsD listener on loopback through Airflow's own StatsD backend:
the sensor's trigger sends a queue's gauges each poll (its event loop run here), the consume operator sends
the pump's counters and the gauges (through ``dag.test()``), and ``sqlqueue stats --watch`` prints the
same figures live until Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineTarget
from sqlalchemy.engine import make_url
from test_airflow_dags import airflow_db, assert_succeeded, run_dag  # noqa: F401  (airflow_db: a fixture)
from test_airflow_units import first_event

from airflow_provider_sqlqueue import metrics
from airflow_provider_sqlqueue.metrics import metric_part
from airflow_provider_sqlqueue.sensors.queue import QueueSensor
from airflow_provider_sqlqueue.transport import Transport
from airflow_provider_sqlqueue.transport.pump import MessagePump
from airflow_provider_sqlqueue.triggers.queue import PendingMessagesTrigger

pytest.importorskip("statsd", reason="Airflow's StatsD backend needs the statsd package (the dev extra)")

TESTS = Path(__file__).resolve().parent
PREFIX = "airflow"


class StatsdListener(threading.Thread):
    """A UDP socket on 127.0.0.1 that keeps every StatsD line it receives: name -> [(value, type)]."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                data = self.sock.recv(65535)
            except TimeoutError:
                continue
            self.lines.extend(data.decode().splitlines())

    def values(self, name: str) -> list[tuple[float, str]]:
        found = []
        for line in list(self.lines):
            key, _, rest = line.partition(":")
            if key == name:
                value, _, kind = rest.partition("|")
                found.append((float(value), kind.split("|")[0]))
        return found

    def wait_for(self, name: str, timeout: float = 10) -> list[tuple[float, str]]:
        deadline = time.monotonic() + timeout
        while not self.values(name):
            if time.monotonic() > deadline:
                seen = sorted({line.split(":")[0] for line in self.lines})
                raise AssertionError(f"no {name!r} among {seen}")
            time.sleep(0.05)
        return self.values(name)


@pytest.fixture
def statsd(monkeypatch: pytest.MonkeyPatch) -> Iterator[StatsdListener]:
    listener = StatsdListener()
    listener.start()
    for key, value in {
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(listener.port),
        "AIRFLOW__METRICS__STATSD_PREFIX": PREFIX,
    }.items():
        monkeypatch.setenv(key, value)
    metrics.reset()
    yield listener
    listener.stopped.set()
    listener.join(2)
    listener.sock.close()
    metrics.reset()


@pytest.fixture
def conn(target: EngineTarget, monkeypatch: pytest.MonkeyPatch) -> Iterator[Transport]:
    for key, value in target.airflow_env().items():
        monkeypatch.setenv(key, value)
    with target.open() as transport:
        transport.queue("error").create()
        transport.queue("orders").create()
        yield transport


def fail_into_error_queue(transport: Transport, count: int) -> None:
    source = transport.queue("payments")
    source.create()
    source.send_batch([f"p{n}" for n in range(count)])

    def broken(message, context) -> None:
        raise ConnectionError("payment service unreachable")

    MessagePump(source, broken, transaction_mode="none", idle_delay=0.1).run(until_empty=True, timeout=30)


def name(kind: str, queue: str, what: str, conn_id: str = "sqlqueue_default") -> str:
    return f"{PREFIX}.sqlqueue.{kind}.{metric_part(conn_id)}.{metric_part(queue)}.{what}"


def test_metric_names_keep_only_safe_characters() -> None:
    assert metric_part("orders@[sales]@[db]") == "orders__sales___db_"
    assert metric_part("a.b:c|d@e") == "a_b_c_d_e"
    assert metric_part("") == "_"


def test_the_sensors_trigger_sends_depth_age_and_failed_gauges(
    statsd: StatsdListener, conn: Transport
) -> None:
    fail_into_error_queue(conn, 2)
    orders = conn.queue("orders")
    orders.send_batch(["o1", "o2", "o3"])
    time.sleep(0.05)
    trigger = PendingMessagesTrigger("orders", min_messages=3, count_mode="exact", poll_interval=0.1)
    event = first_event(trigger)
    assert event["status"] == "success" and event["depth"] == 3

    queue = str(orders.address)
    assert statsd.wait_for(name("queue", queue, "depth")) == [(3.0, "g")]
    [(age, kind)] = statsd.wait_for(name("queue", queue, "oldest_age_seconds"))
    assert kind == "g" and 0.05 <= age < 60
    assert statsd.wait_for(name("queue", queue, "failed")) == [(2.0, "g")]


def test_the_sensor_in_poke_mode_sends_the_same_gauges_each_poke(
    statsd: StatsdListener, conn: Transport
) -> None:
    fail_into_error_queue(conn, 1)
    orders = conn.queue("orders")
    orders.send_batch(["o1"])
    time.sleep(0.05)
    sensor = QueueSensor(task_id="wait", queue_name="orders", min_messages=3, deferrable=False)
    assert not sensor.poke({}).is_done
    queue = str(orders.address)
    assert statsd.wait_for(name("queue", queue, "depth")) == [(1.0, "g")]
    assert statsd.wait_for(name("queue", queue, "failed")) == [(1.0, "g")]
    [(age, kind)] = statsd.wait_for(name("queue", queue, "oldest_age_seconds"))
    assert kind == "g" and 0.05 <= age < 60

    orders.send_batch(["o2", "o3"])
    done = sensor.poke({})
    assert done.is_done and done.xcom_value == 3
    deadline = time.monotonic() + 10
    while len(statsd.values(name("queue", queue, "depth"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert statsd.values(name("queue", queue, "depth")) == [(1.0, "g"), (3.0, "g")]


def test_a_broken_metrics_backend_never_fails_the_trigger(conn: Transport, monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "no-such-host.invalid")
    metrics.reset()
    try:
        conn.queue("orders").send_batch(["o1"])
        event = first_event(PendingMessagesTrigger("orders", min_messages=1, poll_interval=0.1))
        assert event["status"] == "success"
    finally:
        metrics.reset()


@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_the_consume_operator_sends_the_pumps_counters_and_the_gauges(
    airflow_db: Path,  # noqa: F811
    statsd: StatsdListener,
    target: EngineTarget,
    conn: Transport,
) -> None:
    orders = conn.queue("orders")
    orders.send_batch([*(f"good {n}" for n in range(5)), "bad 1", "bad 2"])
    env = {
        "AIRFLOW__CORE__DAGS_FOLDER": str(TESTS / "dags"),
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        **{key: value for key, value in os.environ.items() if key.startswith("AIRFLOW__METRICS__")},
    }
    run = run_dag(target, "sqlqueue_test_consume_metrics", env=env)
    assert_succeeded(run, target)

    queue = str(orders.address)
    logged = re.search(r"processed (\d+), failed (\d+), retried (\d+)", run.output)
    assert logged is not None, run.output
    processed, failed, retried = (int(n) for n in logged.groups())
    assert (processed, failed) == (5, 2) and retried >= 2  # each bad message: its attempts, then moved
    assert sum(v for v, _ in statsd.wait_for(name("pump", queue, "processed"))) == processed
    assert sum(v for v, _ in statsd.wait_for(name("pump", queue, "failed"))) == failed
    assert sum(v for v, _ in statsd.wait_for(name("pump", queue, "retried"))) == retried
    assert {kind for _, kind in statsd.values(name("pump", queue, "processed"))} == {"c"}
    [(rate, _)] = statsd.wait_for(name("pump", queue, "rate"))[-1:]
    assert rate > 0
    assert statsd.wait_for(name("queue", queue, "depth"))[-1] == (0.0, "g")
    assert statsd.wait_for(name("queue", queue, "failed"))[-1] == (2.0, "g")
    password = make_url(target.url).password if target.engine == "postgresql" else None
    assert password is None or all(password not in line for line in statsd.lines)


def test_stats_watch_prints_rounds_until_ctrl_c(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    from airflow_provider_sqlqueue.transport import open_transport

    with open_transport(url) as transport:
        transport.queue("error").create()
        transport.queue("orders").create()
        transport.queue("orders").send_batch(["a", "b"])
        fail_into_error_queue(transport, 1)
        command = [sys.executable, "-m", "airflow_provider_sqlqueue.cli", "stats", "--url", url]
        command += ["--watch", "--interval", "0.2", "--json"]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        printed: list[dict] = []
        reader = threading.Thread(
            target=lambda: printed.extend(json.loads(line) for line in process.stdout), daemon=True
        )
        reader.start()

        def seen(messages: int, rounds: int) -> bool:
            """Wait (as long as the machine takes to start the command) for ``rounds`` rounds printed and
            the last of them showing ``messages`` in orders."""
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and process.poll() is None:
                shown = list(printed)
                orders = [row["messages"] for row in shown if row["queue"] == "orders"]
                if orders and orders[-1] == messages and len({row["checked_at"] for row in shown}) >= rounds:
                    return True
                time.sleep(0.05)
            return False

        try:
            assert seen(2, 1), process.stderr.read() if process.poll() is not None else printed
            transport.queue("orders").send_batch(["c"])
            assert seen(3, 3), printed
            process.send_signal(signal.SIGINT)
            process.wait(timeout=30)
            reader.join(timeout=30)
            err = process.stderr.read()
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 0, err
    assert "Traceback" not in err
    rows = printed
    orders = [row for row in rows if row["queue"] == "orders"]
    rounds = sorted({row["checked_at"] for row in rows})
    assert len(rounds) >= 3
    assert orders[0]["messages"] == 2 and orders[-1]["messages"] == 3
    assert all(row["failed"] == 0 for row in orders)
    assert [row["failed"] for row in rows if row["queue"] == "payments"][-1] == 1
