"""SqlQueueSparkSubmitOperator and the showcase DAG: credentials only in the environment, summaries as
XCom, and the README's main job (``pipeline_demo``: the example DAG through ``dag.test()``) on SQLite and
PostgreSQL."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")
pytest.importorskip("pyspark", reason="the spark extra is not installed")
pytest.importorskip("airflow.providers.apache.spark", reason="the spark extra is not installed")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs a Java runtime (apt-get install default-jre-headless)", allow_module_level=True)

from airflow.providers.apache.spark.hooks import spark_submit as spark_submit_hook

try:
    from airflow.sdk.log import redact
except ImportError:  # Airflow 3.0
    from airflow.sdk.execution_time.secrets_masker import redact
from sqlalchemy.engine import make_url

from airflow_provider_sqlqueue.demo.orders import make_orders
from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator
from airflow_provider_sqlqueue.operators.spark_submit import (
    ProvisionSparkBridgeOperator,
    SqlQueueSparkSubmitOperator,
    default_run_id,
)
from airflow_provider_sqlqueue.spark import DRAIN_JOB
from airflow_provider_sqlqueue.spark.config import PASSWORD_ENV, URL_ENV
from airflow_provider_sqlqueue.spark.tables import BridgeSql, bridge_tables

BINDIR = str(Path(sys.executable).parent)
DEMO_TIMEOUT = 400


@pytest.fixture
def airflow_env(target, monkeypatch: pytest.MonkeyPatch):
    """``sqlqueue_default`` on the test's engine, ``spark_default`` on local[2,4], spark-submit on PATH."""
    for key, value in target.airflow_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2,4]"}))
    monkeypatch.setenv("PATH", BINDIR + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    return target


def provision(context: dict | None = None) -> None:
    ProvisionQueuesOperator(
        task_id="provision", endpoint="orders", instance_specific_queue=False, audit_queue=None
    ).execute(context or {})
    ProvisionSparkBridgeOperator(
        task_id="bridge",
        queue_name="orders",
        sink_table="order_rows",
        sink_columns=[
            ("message_id", "string", False),
            ("order_id", "long", True),
            ("customer", "string", True),
            ("amount", "double", True),
            ("currency", "string", True),
            ("items", "int", True),
            ("time_sent", "timestamp", True),
        ],
    ).execute(context or {})


class PopenSpy:
    """Wraps subprocess.Popen in the Spark hook's module: records each command and environment."""

    def __init__(self, fake_output: list[str] | None = None) -> None:
        self.calls: list[tuple[list[str], dict[str, str]]] = []
        self.fake_output = fake_output
        self.popen = subprocess.Popen  # the real one, before the test patches the module attribute

    def __call__(self, command, **kwargs):
        self.calls.append((list(command), dict(kwargs.get("env") or os.environ)))
        if self.fake_output is None:
            return self.popen(command, **kwargs)
        return _FakeProcess(self.fake_output)


class _FakeProcess:
    def __init__(self, lines: list[str]) -> None:
        self.stdout = iter(lines)
        self.returncode = 0

    def wait(self) -> int:
        return 0

    def poll(self) -> int:
        return 0


def store_committed_run(transport, run_id: str, summary: dict) -> None:
    sql = BridgeSql(transport, bridge_tables(transport, "orders"))
    with transport.connection() as connection:
        cursor = connection.cursor()
        begin = transport.dialect.begin_write()
        if begin:
            cursor.execute(begin, ())
        cursor.execute(sql.insert_run(), (run_id, "orders", "table:order_rows"))
        cursor.execute(
            f"UPDATE {sql.runs} SET State = 'committed', Summary = {sql.p} WHERE RunId = {sql.p}",
            (json.dumps(summary), run_id),
        )
        connection.commit()


# ---- the operator --------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_credentials_travel_only_in_the_environment_of_a_real_run(
    airflow_env, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, capfd
) -> None:
    target = airflow_env
    password = make_url(target.url).password
    assert password, "the session's PostgreSQL has a password"
    provision()
    with target.open() as transport:
        transport.queue("orders").send_batch(make_orders(300, short_lived_every=None))
    spy = PopenSpy()
    monkeypatch.setattr(spark_submit_hook.subprocess, "Popen", spy)
    operator = SqlQueueSparkSubmitOperator(
        task_id="drain",
        input_queue="orders",
        sink="table:order_rows",
        transform="airflow_provider_sqlqueue.spark.transforms.order_rows",
        run_id="op-1",
        batch_size=100,
        conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
    )
    with caplog.at_level(logging.INFO):
        summary = operator.execute({})
    assert summary["run_id"] == "op-1" and summary["processed"] == summary["written"] == 300
    ((command, env),) = spy.calls
    assert command[0] == "spark-submit" and command[command.index("--run-id") + 1] == "op-1"
    assert env[PASSWORD_ENV] == password and password not in env[URL_ENV]
    assert make_url(env[URL_ENV]).host == make_url(target.url).host
    assert password not in " ".join(command)
    logged = caplog.text + "".join(capfd.readouterr())
    assert "Spark-Submit cmd" in logged and "[sqlqueue] phase 1" in logged  # the logs were captured
    assert password not in logged
    assert password not in redact(f"connecting with {password}")  # registered with the masker
    assert operator.env_vars is None and operator.application_args is None  # nothing kept for rendering
    with target.open() as transport:
        assert transport.queue("orders").count() == 0


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_cluster_settings_keep_the_password_out_of_the_logged_command(
    airflow_env, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, capfd
) -> None:
    """On YARN the provider passes env_vars as --conf spark.yarn.appMasterEnv.*: the password's key name
    makes the provider mask it in the logged command, and the URL variable holds no password."""
    target = airflow_env
    password = make_url(target.url).password
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "yarn"}))
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    provision()
    with target.open() as transport:
        store_committed_run(transport, "yarn-1", {"run_id": "yarn-1", "processed": 0, "written": 0})
    spy = PopenSpy(fake_output=["submitted\n"])
    monkeypatch.setattr(spark_submit_hook.subprocess, "Popen", spy)
    operator = SqlQueueSparkSubmitOperator(
        task_id="drain", input_queue="orders", sink="table:order_rows", run_id="yarn-1", durable=False
    )
    with caplog.at_level(logging.INFO):
        summary = operator.execute({})
    assert summary["run_id"] == "yarn-1"
    ((command, env),) = spy.calls
    assert f"spark.yarn.appMasterEnv.{URL_ENV}=" in " ".join(command)
    assert not any(
        part.startswith(f"spark.yarn.appMasterEnv.{URL_ENV}=") and password in part for part in command
    )
    assert "PYSPARK_PYTHON" not in env  # only local masters get this environment's Python
    logged = caplog.text + "".join(capfd.readouterr())
    assert "Spark-Submit cmd" in logged and password not in logged
    assert f"spark.yarn.appMasterEnv.{PASSWORD_ENV}=******" in logged


def test_operator_defaults_and_argument_checks() -> None:
    operator = SqlQueueSparkSubmitOperator(task_id="drain", input_queue="orders", sink="parquet:/data/out")
    assert operator.application == DRAIN_JOB and Path(DRAIN_JOB).is_file()
    args = operator.job_arguments("r", "sales", "error")
    assert args[:6] == ["--queue", "orders", "--sink", "parquet:/data/out", "--run-id", "r"]
    assert "--default-schema" in args and "--create-tables" not in args
    assert "--read-in-place" not in args and "--stage" not in args  # the job decides (docs/spark.md)
    held = SqlQueueSparkSubmitOperator(task_id="d", input_queue="q", sink="table:t", read_in_place=True)
    assert held.job_arguments("r", None, "error")[-1] == "--read-in-place"
    staged = SqlQueueSparkSubmitOperator(task_id="d", input_queue="q", sink="table:t", read_in_place=False)
    assert staged.job_arguments("r", None, "error")[-1] == "--stage"
    assert {"input_queue", "sink", "transform", "run_id", "env_vars"} <= set(operator.template_fields)
    long_id = default_run_id("d" * 150, "t" * 40, "manual__2026-11-21T00:00:00+00:00", 3)
    assert len(long_id) == 200 and long_id != default_run_id("d" * 150, "t" * 40, "other", 3)
    assert default_run_id("dag", "task", "run") == "dag.task.run"
    with pytest.raises(ValueError):
        SqlQueueSparkSubmitOperator(task_id="x", input_queue="q", sink="nowhere")
    with pytest.raises(ValueError):
        SqlQueueSparkSubmitOperator(task_id="x", input_queue="q", sink="table:t", partitions=0)


def test_templated_fields_take_xcomargs_and_jinja_when_the_dag_is_parsed() -> None:
    """Checked in ``execute``, after rendering: nothing templated is converted when the DAG is parsed."""
    from datetime import datetime

    from airflow.sdk import DAG, task

    @task(multiple_outputs=True)
    def settings() -> dict[str, object]:
        return {}

    with DAG("spark_templated", schedule=None, start_date=datetime(2026, 1, 1)):
        out = settings()
        by_xcom = SqlQueueSparkSubmitOperator(
            task_id="by_xcom",
            input_queue=out["queue"],
            sink=out["sink"],
            transform=out["transform"],
            max_messages=out["max"],
            run_id=out["run_id"],
        )
        by_jinja = SqlQueueSparkSubmitOperator(
            task_id="by_jinja",
            input_queue="{{ params.queue }}",
            sink="{{ params.sink }}",
            transform="{{ params.transform }}",
            max_messages="{{ params.max }}",
            run_id="{{ params.run_id }}",
        )
        ProvisionSparkBridgeOperator(
            task_id="bridge", queue_name=out["queue"], sink_table=out["sink"], sink_columns=[]
        )
    assert repr(by_xcom.sink) == repr(out["sink"]) and by_jinja.sink == "{{ params.sink }}"
    by_jinja.sink = "nowhere"  # what a template may render to: refused when the task runs
    with pytest.raises(ValueError, match="sink 'nowhere' is not one of"):
        by_jinja.execute({})


# ---- the README's main job: the example DAG through dag.test() ----------------------------------
@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_pipeline_demo_runs_the_example_dag_end_to_end(target, tmp_path) -> None:
    command = [sys.executable, "-m", "airflow_provider_sqlqueue.demo.pipeline", "--orders", "3000"]
    command += ["--max-messages", "2000"]
    # the checkout's example: a wheel (.ci/airflow-oldest) ships no dags_examples beside the package
    command += ["--dags-folder", str(Path(__file__).resolve().parents[1] / "dags_examples")]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("AIRFLOW_HOME", None)  # the demo makes its own
    if target.engine != "sqlite":
        env.update(target.airflow_env())
    password = make_url(target.url).password
    demo = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    watch = SecretHolders(password.encode() if password else b"", outside_session=demo.pid)
    watch.start()
    try:
        output, _ = demo.communicate(timeout=DEMO_TIMEOUT)
    finally:
        watch.stop()
        left_behind = _pids_in_session(demo.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(demo.pid, signal.SIGKILL)
        demo.wait()
    assert demo.returncode == 0, output[-6000:]
    assert left_behind == [], f"the demo left processes behind: {left_behind}"
    assert watch.found == {}, f"processes held the password where they should not: {watch.found}"
    for step in (
        "task provision_queues",
        "deferred: the trigger polls",
        "spark: phase 1 done",
        "task summary",
    ):
        assert step in output, output
    assert re.search(r"every order accounted for +True", output), output
    assert re.search(r"orders sent +3000\n", output) and re.search(r"drained into spark +2000\n", output)
    if password:
        assert password not in output


class SecretHolders(threading.Thread):
    """Polls /proc while the demo runs for processes with ``secret`` on their command line, or in their
    environment outside the demo's session (a detached helper that outlives the task keeps the password)."""

    def __init__(self, secret: bytes, outside_session: int) -> None:
        super().__init__(daemon=True)
        self.secret = secret
        self.session = outside_session
        self.found: dict[int, str] = {}
        self._done = threading.Event()

    def run(self) -> None:
        while self.secret and not self._done.wait(0.2):
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit() or int(entry.name) in self.found:
                    continue
                try:
                    pid = int(entry.name)
                    on_command_line = self.secret in (entry / "cmdline").read_bytes()
                    in_environment = self.secret in (entry / "environ").read_bytes()
                    outside = pid != os.getpid() and _session_of(pid) != self.session
                    if on_command_line or (in_environment and outside):
                        self.found[pid] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                except OSError:
                    continue

    def stop(self) -> None:
        self._done.set()
        self.join()


def _session_of(pid: int) -> int:
    try:
        return os.getsid(pid)
    except OSError:
        return -1


def _pids_in_session(session: int) -> list[int]:
    pids = [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]
    return [pid for pid in pids if _session_of(pid) == session]
