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
