"""Secrets while everything runs: the Spark bridge operator (a real spark-submit, its JVM and Python
workers) and the queue operators run against PostgreSQL with a role whose password is distinctive, while a
background thread reads the command line of every process on the machine from /proc every 50 ms. Neither
a command line, a captured log line, the console output nor a rendered template field may contain the
password (raw or URL-encoded) or the URL that carries it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")
pytest.importorskip("pyspark", reason="the spark extra is not installed")
pytest.importorskip("airflow.providers.apache.spark", reason="the spark extra is not installed")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs a Java runtime (apt-get install default-jre-headless)", allow_module_level=True)

from sqlalchemy.engine import make_url

from airflow_provider_sqlqueue.demo.orders import make_orders
from airflow_provider_sqlqueue.operators.consume import ConsumeMessagesOperator
from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator
from airflow_provider_sqlqueue.operators.purge import PurgeExpiredMessagesOperator
from airflow_provider_sqlqueue.operators.send import SendMessageOperator
from airflow_provider_sqlqueue.operators.spark_submit import (
    ProvisionSparkBridgeOperator,
    SqlQueueSparkSubmitOperator,
)
from airflow_provider_sqlqueue.sensors.queue import QueueSensor

pytest_plugins = ["reliability_figures"]  # the figures fixture

BINDIR = str(Path(sys.executable).parent)


class CommandLineWatch(threading.Thread):
    """Reads /proc/<pid>/cmdline of every process every ``interval`` seconds; notes any that holds one of
    ``secrets``, and every distinct command line seen (to show what it watched)."""

    def __init__(self, secrets: list[str], interval: float = 0.05) -> None:
        super().__init__(name="cmdline-watch", daemon=True)
        self.secrets = [secret.encode() for secret in secrets]
        self.interval = interval
        self.stopped = threading.Event()
        self.sweeps = 0
        self.pids: set[int] = set()
        self.commands: set[str] = set()
        self.leaks: list[tuple[int, str]] = []

    def sweep(self) -> None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as file:
                    raw = file.read()
            except OSError:  # gone, or not ours to read
                continue
            if not raw:
                continue
            self.pids.add(int(entry))
            command = raw.replace(b"\0", b" ")
            if len(self.commands) < 20_000:
                self.commands.add(command.decode(errors="replace")[:400])
            if any(secret in command for secret in self.secrets):
                self.leaks.append((int(entry), command.decode(errors="replace")))
        self.sweeps += 1

    def run(self) -> None:
        while not self.stopped.is_set():
            self.sweep()
            self.stopped.wait(self.interval)

    def __enter__(self) -> CommandLineWatch:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.join(10)


@pytest.fixture
def secret_connection(target, postgres_server, monkeypatch: pytest.MonkeyPatch):
    """A login role with a distinctive password (with characters URLs must encode) that may create tables
    in the test's schema, as ``sqlqueue_default``; ``spark_default`` on local[2,4]."""
    password = f"Tok3n/{uuid.uuid4().hex[:12]}@p#ss"
    role = f"qsecret_{uuid.uuid4().hex[:8]}"
    postgres_server.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{password}'")
    postgres_server.execute(f'GRANT USAGE, CREATE ON SCHEMA "{target.schema}" TO "{role}"')
    connection = {**target.airflow_connection(), "login": role, "password": password}
    monkeypatch.setenv("AIRFLOW_CONN_SQLQUEUE_DEFAULT", json.dumps(connection))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2,4]"}))
    monkeypatch.setenv("PATH", BINDIR + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    url = make_url(target.url).set(username=role, password=password)
    try:
        yield password, url
    finally:
        postgres_server.execute(f'DROP OWNED BY "{role}"')
        postgres_server.execute(f'DROP ROLE "{role}"')


def forms_of(password: str, url: Any) -> list[str]:
    """The password as it could show: raw, URL-encoded, and inside the full URL."""
    return [password, quote(password, safe=""), quote(password), url.render_as_string(hide_password=False)]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_no_command_line_log_line_or_rendered_field_holds_the_password(
    target, secret_connection, caplog: pytest.LogCaptureFixture, capfd, figures
) -> None:
    password, url = secret_connection
    secrets = forms_of(password, url)
    caplog.set_level(logging.DEBUG)
    context: dict[str, Any] = {"params": {"queue": "orders", "rows": "order_rows"}, "ds": "2026-11-22"}
    operators: list[Any] = [
        ProvisionQueuesOperator(
            task_id="provision",
            endpoint="{{ params.queue }}",
            instance_specific_queue=False,
            audit_queue=None,
        ),
        ProvisionSparkBridgeOperator(
            task_id="bridge",
            queue_name="{{ params.queue }}",
            sink_table="{{ params.rows }}",
            sink_columns=[
                ("message_id", "string", False),
                ("order_id", "long", True),
                ("customer", "string", True),
                ("amount", "double", True),
                ("currency", "string", True),
                ("items", "int", True),
                ("time_sent", "timestamp", True),
            ],
        ),
        SendMessageOperator(
            task_id="send",
            queue_name="{{ params.queue }}",
            messages=[json.loads(m.body) for m in make_orders(400, short_lived_every=None)],
        ),
        QueueSensor(task_id="poke", queue_name="{{ params.queue }}", min_messages=400),
        SqlQueueSparkSubmitOperator(
            task_id="drain",
            input_queue="{{ params.queue }}",
            sink="table:{{ params.rows }}",
            transform="airflow_provider_sqlqueue.spark.transforms.order_rows",
            run_id="secrets-{{ ds }}",
            max_messages=300,
            batch_size=50,
            conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
        ),
        ConsumeMessagesOperator(
            task_id="consume", queue_name="{{ params.queue }}", handler="consume_handlers:record", timeout=60
        ),
        PurgeExpiredMessagesOperator(task_id="purge", queues=["{{ params.queue }}", "error"]),
    ]
    results: dict[str, Any] = {}
    with CommandLineWatch(secrets) as watch:
        for operator in operators:
            operator.render_template_fields(context)
            rendered = {name: getattr(operator, name, None) for name in operator.template_fields}
            assert not any(s in repr(rendered) for s in secrets), f"password in {operator.task_id}'s fields"
            if isinstance(operator, QueueSensor):
                results[operator.task_id] = operator.poke(context).is_done
            else:
                results[operator.task_id] = operator.execute(context)
            rendered = {name: getattr(operator, name, None) for name in operator.template_fields}
            assert not any(s in repr(rendered) for s in secrets), f"password in {operator.task_id}'s fields"
        # the watch would see a leak: a short-lived process with the password among its arguments
        canary = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)", "--", password])
        time.sleep(0.5)
        canary.wait(10)
        time.sleep(0.1)
    canary_leaks = [pid for pid, _ in watch.leaks if pid == canary.pid]
    other_leaks = [(pid, command[:300]) for pid, command in watch.leaks if pid != canary.pid]
    assert canary_leaks, "the /proc watch cannot see a password on a command line"
    assert other_leaks == [], "a password on a process's command line"

    # it ran, and the watch saw the Spark processes it started
    assert results["poke"] is True
    assert results["drain"]["written"] == 300 and results["consume"]["processed"] == 100
    spark_commands = [c for c in watch.commands if "drain_job.py" in c]
    assert any("spark-submit" in c or "SparkSubmit" in c for c in spark_commands), sorted(watch.commands)[:50]
    assert any("pyspark.daemon" in c for c in watch.commands), "the watch never saw a Python worker"
    assert watch.sweeps > 50

    captured = capfd.readouterr()
    logged = [caplog.text, captured.out, captured.err]
    for record in caplog.records:
        logged += [record.getMessage(), repr(record.args), record.exc_text or ""]
    assert "Spark-Submit cmd" in caplog.text + captured.out, "the spark-submit log lines were not captured"
    assert "[sqlqueue] phase 1" in caplog.text + captured.out
    for text in logged:
        assert not any(s in text for s in secrets), "password in a log line or the console"
    figures(
        engine="postgresql",
        processes_watched=len(watch.pids),
        sweeps=watch.sweeps,
        distinct_command_lines=len(watch.commands),
        spark_command_lines=len(spark_commands),
        log_records=len(caplog.records),
        operators=len(operators),
        leaks=len(other_leaks),
        canary_detected=bool(canary_leaks),
    )
