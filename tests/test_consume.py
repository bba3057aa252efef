"""Consuming from Airflow and from the command line: ConsumeMessagesOperator and ``sqlqueue consume``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import consume_handlers
import pytest

from airflow_provider_sqlqueue import cli
from airflow_provider_sqlqueue.transport import ConfigurationError, open_transport

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def conn(target, monkeypatch: pytest.MonkeyPatch):
    """``sqlqueue_default`` pointing at this test's engine and namespace, with ``orders`` and ``error``."""
    for key, value in target.airflow_env().items():
        monkeypatch.setenv(key, value)
    with target.open() as transport:
        transport.queue("error").create()
        transport.queue("orders").create()
        yield transport


def test_consume_operator_stops_at_the_limit_then_at_an_empty_queue(conn) -> None:
    pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")
    from airflow_provider_sqlqueue.operators.consume import ConsumeMessagesOperator

    orders = conn.queue("orders")
    orders.send_batch([f"m{n}".encode() for n in range(25)] + [b"bad one"])
    consume_handlers.seen.clear()
    first = ConsumeMessagesOperator(
        task_id="first",
        queue_name="orders",
        handler="consume_handlers:record",
        max_messages=10,
        max_concurrency=3,
    ).execute({})
    assert first["processed"] == 10 and len(consume_handlers.seen) == 10
    assert orders.count() == 16
    second = ConsumeMessagesOperator(
        task_id="second",
        queue_name="orders",
        handler=consume_handlers.reject_bad,
        strategy="fixed",
        max_concurrency=2,
        pump_options={"immediate_retries": 1, "idle_delay": 0.1},
    ).execute({})
    assert second["processed"] == 15 and second["failed"] == 1 and second["retried"] == 2
    assert second["rate"] > 0 and orders.count() == 0 and conn.queue("error").count() == 1
    with pytest.raises(ConfigurationError, match="cannot load handler"):
        ConsumeMessagesOperator(task_id="bad", queue_name="orders", handler="consume_handlers:nothing")


def test_consume_operator_and_cli_take_a_batch_size(conn, capsys) -> None:
    pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")
    from airflow_provider_sqlqueue.operators.consume import ConsumeMessagesOperator

    orders = conn.queue("orders")
    orders.send_batch([f"m{n}".encode() for n in range(30)])
    consume_handlers.seen.clear()
    counts = ConsumeMessagesOperator(
        task_id="batched", queue_name="orders", handler="consume_handlers:record", batch_size=20
    ).execute({})
    assert counts["processed"] == 30 and len(consume_handlers.seen) == 30
    assert counts["receives"] - counts["empty_receives"] == 2  # 20, then 10
    orders.send_batch([f"n{n}".encode() for n in range(5)])
    command = ["consume", "--conn-id", "sqlqueue_default", "orders", "--handler", "consume_handlers:record"]
    assert cli.main([*command, "--until-empty", "--batch-size", "5"]) == 0
    assert "orders: processed 5, failed 0" in capsys.readouterr().err and orders.count() == 0
    assert cli.main([*command, "--batch-size", "0"]) == cli.Exit.USAGE
    assert "batch_size must be 1 to 1000" in capsys.readouterr().err


def test_cli_runs_until_the_limit(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    with open_transport(url) as transport:
        transport.queue("error").create()
        transport.queue("orders").create()
        transport.queue("orders").send_batch([b"a", b"b", b"c"])
    status = cli.main(
        ["consume", url, "orders", "--handler", "consume_handlers:record", "--max-messages", "2"]
    )
    assert status == 0
    err = capsys.readouterr().err
    assert "orders: processed 2, failed 0" in err and "(limit)" in err
    missing = ["consume", url, "nope", "--handler", "consume_handlers:record", "--until-empty"]
    assert cli.main(missing) == cli.Exit.QUEUE_MISSING
    err = capsys.readouterr().err
    assert "QueueNotFound" in err and "nope" in err and "Traceback" not in err


@pytest.mark.slow
def test_cli_shows_a_status_line_and_stops_cleanly_on_ctrl_c(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    with open_transport(url) as transport:
        transport.queue("error").create()
        orders = transport.queue("orders")
        orders.create()
        orders.send_batch([f"m{n}".encode() for n in range(20)])
        record = tmp_path / "seen.txt"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
            "SQLQUEUE_TEST_RECORD": str(record),
            "COLUMNS": "200",
        }
        command = [sys.executable, "-m", "airflow_provider_sqlqueue.cli", "consume", url, "orders"]
        command += ["--handler", "consume_handlers:record", "--idle-delay", "0.1", "-c", "2"]
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
        )
        try:
            deadline = time.monotonic() + 30
            while not (record.exists() and len(record.read_bytes().splitlines()) == 20):
                assert process.poll() is None, process.communicate()
                assert time.monotonic() < deadline, "the consumer did not handle the messages"
                time.sleep(0.05)
            time.sleep(0.6)  # a status refresh and a depth check
            process.send_signal(signal.SIGINT)
            _out, err = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
        assert process.returncode == 0, err
        assert "Traceback" not in err
        assert "processed 20" in err and "depth" in err
        assert "orders: processed 20, failed 0, retried 0" in err and "(stopped)" in err
        assert orders.count() == 0


@pytest.mark.parametrize("kill_from", ["another_thread", "sigterm_handler"])
def test_on_kill_stops_the_pump_and_loses_nothing(conn, kill_from: str) -> None:
    """``on_kill`` stops the operator's pump: execute ends at once, the message in flight is committed or
    back in the queue, and the pump's threads are gone.

    ``sigterm_handler`` is how the Task SDK calls it (its SIGTERM handler runs ``on_kill`` on the thread
    that runs ``execute``); ``another_thread`` is how an execution timeout's or a test's caller may.
    """
    pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")
    import threading

    from airflow.providers.common.compat.sdk import AirflowException

    from airflow_provider_sqlqueue.operators.consume import ConsumeMessagesOperator

    orders = conn.queue("orders")
    bodies = {f"order {n}".encode() for n in range(40)}
    orders.send_batch(sorted(bodies))
    started = threading.Event()
    lock = threading.Lock()
    handled: list[bytes] = []

    def slow_handler(message) -> None:
        started.set()
        time.sleep(0.5)
        with lock:
            handled.append(message.body)

    operator = ConsumeMessagesOperator(
        task_id="consume", queue_name="orders", handler=slow_handler, max_concurrency=2
    )
    outcome: dict[str, object] = {}

    def run_execute() -> None:
        try:
            outcome["result"] = operator.execute({})
        except BaseException as error:  # what execute raised is part of what the test checks
            outcome["error"] = error

    if kill_from == "another_thread":
        runner = threading.Thread(target=run_execute)
        runner.start()
        assert started.wait(30), "the handler never ran"
        killed_at = time.monotonic()
        operator.on_kill()
        runner.join(10)
        assert not runner.is_alive(), "execute kept running after on_kill"
    else:
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: operator.on_kill())

        def terminate_once_handling() -> None:
            if started.wait(30):
                outcome["killed_at"] = time.monotonic()
                os.kill(os.getpid(), signal.SIGTERM)

        killer = threading.Thread(target=terminate_once_handling)
        killer.start()
        try:
            run_execute()
        finally:
            signal.signal(signal.SIGTERM, previous)
            killer.join()
        killed_at = outcome["killed_at"]  # type: ignore[assignment]
    assert time.monotonic() - killed_at < 5, "on_kill did not stop the pump promptly"
    error = outcome.get("error")
    assert isinstance(error, AirflowException) and "on_kill" in str(error), outcome
    assert not [thread for thread in threading.enumerate() if thread.name.startswith("pump ")]

    remaining: list[bytes] = []
    with orders.receive(100) as batch:
        remaining = [message.body for message in batch]
    assert 1 <= len(handled) < len(bodies), "the kill came before the first or after the last message"
    assert len(handled) == len(set(handled)) and not set(handled) & set(remaining)
    assert set(handled) | set(remaining) == bodies, "a message was lost"


def test_every_way_of_running_a_pump_refuses_a_misspelt_setting_and_moves_nothing(conn) -> None:
    """The pump's settings are declared once (PumpSettings): the pump, an endpoint, the hook and the operator
    (when the DAG is parsed) refuse a name that is not one, listing the names, before a message moves."""
    pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")
    from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook
    from airflow_provider_sqlqueue.operators.consume import ConsumeMessagesOperator
    from airflow_provider_sqlqueue.transport import Endpoint, MessagePump, PumpSettings

    orders = conn.queue("orders")
    orders.send_batch([b"one", b"two"])
    names = "the settings are: max_concurrency, batch_size"
    with pytest.raises(ConfigurationError, match=f"max_concurency; {names}"):
        MessagePump(orders, consume_handlers.record, max_concurency=2)
    with pytest.raises(ConfigurationError, match=f"max_concurency; {names}"):
        PumpSettings(max_concurency=2)
    with pytest.raises(ConfigurationError, match="batch_sise"):
        Endpoint(conn, "orders").start(consume_handlers.record, batch_sise=10)
    with pytest.raises(ConfigurationError, match="idle_dealy"):
        SqlQueueHook().consume("orders", consume_handlers.record, idle_dealy=0.5)
    with pytest.raises(ConfigurationError, match="immediate_retires"):
        ConsumeMessagesOperator(
            task_id="typo",
            queue_name="orders",
            handler=consume_handlers.record,
            pump_options={"immediate_retires": 1},
        )
    with pytest.raises(ConfigurationError, match="batch_size must be 1 to 1000"):
        ConsumeMessagesOperator(
            task_id="zero", queue_name="orders", handler=consume_handlers.record, batch_size=0
        )
    assert orders.count() == 2
    settings = PumpSettings(max_concurrency=2, idle_delay=0.1)
    stats = SqlQueueHook().consume("orders", consume_handlers.record, settings, batch_size=2)
    assert stats.processed == 2 and orders.count() == 0


def test_the_command_lines_defaults_are_the_pump_settings_defaults() -> None:
    from airflow_provider_sqlqueue.transport import PumpSettings

    args = cli._parser().parse_args(["consume", "orders", "--handler", "consume_handlers:record"])
    defaults = PumpSettings()
    given = {
        "max_concurrency": args.concurrency,
        "batch_size": args.batch_size,
        "strategy": args.strategy,
        "transaction_mode": args.transaction_mode,
        "immediate_retries": args.immediate_retries,
        "idle_delay": args.idle_delay,
        "wake_up": args.wake_up,
        "stop_timeout": args.stop_timeout,
    }
    assert PumpSettings(**given) == defaults
