"""Airflow-level tests on real engines: the example DAGs through ``dag.test()``, least privilege, no leaks.

- The example DAGs run in a subprocess each (``dag_runner.py``): ``dag.test()`` only runs DAGs found in the
  dags folder, it needs a migrated Airflow database, and Airflow's logging and settings are process-wide.
- Least privilege and secrets run the hook, operators and sensor in-process against the session's
  PostgreSQL, with Airflow connections from ``AIRFLOW_CONN_<ID>`` variables.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.metadata
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import rawsql
from sqlalchemy.engine import make_url

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")

from airflow.providers.common.compat.sdk import TaskDeferred

from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator
from airflow_provider_sqlqueue.operators.purge import PurgeExpiredMessagesOperator
from airflow_provider_sqlqueue.operators.send import SendMessageOperator
from airflow_provider_sqlqueue.sensors.queue import QueueSensor
from airflow_provider_sqlqueue.transport import PermissionDenied, TransientDatabaseError

if TYPE_CHECKING:
    from conftest import EngineTarget
    from postgres_plugin import PostgresServer

RUNNER = Path(__file__).with_name("dag_runner.py")
DAG_RUN_TIMEOUT = 300  # seconds; a run takes 5-15 s on 2 cores
DEFERRED = "Pausing task as DEFERRED"
TRIGGER_INLINE = "[DAG TEST] running trigger in line"
TRIGGER_DONE = "[DAG TEST] Trigger completed"
SECRET_PASSWORD = "Sup3r-S3cret-Pw!"
EXPIRED_AT_ONCE = timedelta(milliseconds=1)


# ---- the Airflow database and dag.test() in a subprocess ----------------------------------------------
@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """``airflow db migrate`` once for the session's AIRFLOW_HOME (set by conftest, inherited by runs)."""
    home = Path(os.environ["AIRFLOW_HOME"])
    result = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"airflow db migrate failed:\n{result.stdout}\n{result.stderr}"
    return home


class DagRun:
    """``dag.test()`` of an example DAG in a ``dag_runner.py`` subprocess, ``sqlqueue_default`` pointing at
    ``target``; its output (stdout and stderr) is read line by line as it comes."""

    def __init__(
        self,
        target: EngineTarget,
        dag_id: str,
        run_conf: dict[str, Any] | None = None,
        markers: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        command = [sys.executable, str(RUNNER), dag_id]
        if run_conf is not None:
            command.append(json.dumps(run_conf))
        env = {**os.environ, **target.airflow_env(), "PYTHONUNBUFFERED": "1", **(env or {})}
        self.lines: list[str] = []
        self.seen = {marker: threading.Event() for marker in markers}
        self.process = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            for marker, event in self.seen.items():
                if marker in line:
                    event.set()

    def wait_for_line(self, marker: str, timeout: float = DAG_RUN_TIMEOUT) -> None:
        """Block until a line contains ``marker`` (one of ``markers``); fail if the run ends first."""
        deadline = time.monotonic() + timeout
        while not self.seen[marker].wait(0.2):
            if self.process.poll() is not None and not self.seen[marker].wait(1):
                pytest.fail(f"the DAG run ended without logging {marker!r}:\n{self.output}")
            if time.monotonic() > deadline:
                self.process.kill()
                pytest.fail(f"no {marker!r} within {timeout} s:\n{self.output}")

    def finish(self, timeout: float = DAG_RUN_TIMEOUT) -> str:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"the DAG run did not end within {timeout} s:\n{self.output}")
        self.reader.join(30)
        return self.output

    @property
    def output(self) -> str:
        return "".join(self.lines)

    @property
    def task_instances(self) -> list[dict[str, Any]]:
        """The ``TASK_INSTANCE`` lines ``dag_runner.py`` prints: task_id, map_index, state, queue, try."""
        found = re.findall(r"^TASK_INSTANCE=(\{.*\})$", self.output, flags=re.MULTILINE)
        return [json.loads(line) for line in found]

    @property
    def state(self) -> str | None:
        found = re.findall(r"^DAGRUN_STATE=(\S+)$", self.output, flags=re.MULTILINE)
        return found[-1] if found else None


def run_dag(
    target: EngineTarget,
    dag_id: str,
    run_conf: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> DagRun:
    run = DagRun(target, dag_id, run_conf, env=env)
    run.finish()
    return run


# Airflow 3.0's dag.test() runs the task's supervisor in process, and its comms log each request at DEBUG
# with its value: ``Sending request msg=MaskSecret(value='...')``, the registration of a secret for masking
# (the connection's password, by Airflow and by the hook). A worker's supervisor logs no body. On later
# releases the output is checked unfiltered. docs/getting-started.md says so for 3.0.
AIRFLOW_RELEASE = tuple(int(part) for part in importlib.metadata.version("apache-airflow").split(".")[:2])
AIRFLOW_30_LOGS_MASK_REQUESTS = AIRFLOW_RELEASE < (3, 1)


def _output_but_airflow_30_mask_requests(output: str) -> str:
    if not AIRFLOW_30_LOGS_MASK_REQUESTS:
        return output
    return "\n".join(line for line in output.splitlines() if "MaskSecret(value=" not in line)


def assert_succeeded(run: DagRun, target: EngineTarget) -> None:
    assert run.process.returncode == 0 and run.state == "success", f"DAG run failed:\n{run.output}"
    password = make_url(target.url).password if target.engine == "postgresql" else None
    if password:  # the connection carries it: it must not show in the run's output
        assert password not in _output_but_airflow_30_mask_requests(run.output)


# ---- 2. the sensor example: producer -> deferred sensor -> consumer -----------------------------------
@pytest.mark.slow
def test_sensor_example_defers_until_more_orders_arrive_then_consumes_all(
    airflow_db: Path, target: EngineTarget
) -> None:
    run = DagRun(target, "sqlqueue_sensor_example", {"min_messages": 15}, markers=(TRIGGER_INLINE,))
    # The producer sends 10, so the sensor's first poke fails and it defers; the trigger then runs inline.
    run.wait_for_line(TRIGGER_INLINE, timeout=120)
    time.sleep(3)  # the trigger polls every 2 s: let it see only 10 at least once
    fired_too_early = TRIGGER_DONE in run.output
    with target.open() as transport:
        transport.queue("orders").send_batch(
            [json.dumps({"order_id": n, "amount": 1.0}) for n in range(11, 16)]
        )
    output = run.finish()

    assert_succeeded(run, target)
    assert not fired_too_early, f"the trigger fired before the queue held 15 messages:\n{output}"
    deferred_at = output.find(DEFERRED)
    assert deferred_at >= 0 and "task_id=wait_for_orders" in output[deferred_at:].splitlines()[0], output
    assert deferred_at < output.find(TRIGGER_INLINE) < output.find(TRIGGER_DONE), output
    [summary] = re.findall(r"^consumed: (\{.*\})$", output, flags=re.MULTILINE)
    assert ast.literal_eval(summary) == {"depth_seen_by_sensor": 15, "received": 15, "amount": 555.0}
    with target.open() as transport:
        orders = transport.queue("orders")
        assert orders.count() == 0
        assert rawsql.all_rows(orders) == []
    if target.engine == "postgresql":
        assert make_url(target.url).password, "the PostgreSQL connection should carry a password"


# ---- 3. the maintenance example: provisioning twice, purging expired messages, vacuuming ------------
MAINTENANCE_QUEUES = ("Sales", "Sales.example-host", "error", "audit")


# ---- the event-driven example: the DAG its asset watcher schedules drains what arrived -----------------
@pytest.mark.slow
def test_event_driven_example_drains_what_arrived(airflow_db: Path, target: EngineTarget) -> None:
    """The DAG the example's asset watcher schedules, run as that event runs it (the watcher's trigger runs
    in a real triggerer in tests/test_event_trigger_restart.py): it drains the queue and says how many."""
    with target.open() as transport:
        orders = transport.queue("orders")
        if orders.exists():
            orders.drop()
        orders.create()
        orders.send_batch([json.dumps({"order_id": n}) for n in range(7)])
    run = DagRun(target, "sqlqueue_event_driven_example")
    output = run.finish()
    assert_succeeded(run, target)
    assert "drained 7 message(s) from orders" in output, output
    with target.open() as transport:
        assert transport.queue("orders").count() == 0


@pytest.mark.slow
def test_maintenance_example_provisions_endpoint_queues_idempotently_and_purges_expired(
    airflow_db: Path, target: EngineTarget
) -> None:
    first = run_dag(target, "sqlqueue_maintenance_example")
    assert_succeeded(first, target)
    with target.open() as transport:
        for name in MAINTENANCE_QUEUES:
            assert transport.queue(name).exists(), f"{name} was not created:\n{first.output}"
        sales = transport.queue("Sales")
        sales.send(b"stale", time_to_be_received=EXPIRED_AT_ONCE)
        sales.send(b"fresh", time_to_be_received=timedelta(hours=1))
        time.sleep(0.05)
        assert len(rawsql.all_rows(sales)) == 2

    second = run_dag(target, "sqlqueue_maintenance_example")

    assert_succeeded(second, target)
    assert "created none; already there:" in second.output
    assert "purged 1 expired message(s) from Sales" in second.output
    with target.open() as transport:
        for name in MAINTENANCE_QUEUES:
            assert transport.queue(name).exists()
        assert [body for _, _, body in rawsql.all_rows(transport.queue("Sales"))] == [b"fresh"]
        storage = transport.queue("Sales").storage()
    if target.engine == "postgresql":  # the vacuum task ran after the purge, on every queue
        assert "vacuumed Sales: " in second.output and "vacuumed audit: " in second.output
        assert storage.last_vacuum is not None
    else:
        assert f"nothing to vacuum for Sales: {storage.note}" in second.output


# ---- the exactly-once example: a handler writing in the receive's transaction -------------------------
@pytest.mark.slow
@pytest.mark.skipif(
    int(importlib.metadata.version("sqlalchemy").split(".")[0]) < 2,
    reason="the example's handler uses context.sqlalchemy_connection, which needs SQLAlchemy 2.0; "
    "Airflow 3.0 requires 1.4 (docs/getting-started.md, what each Airflow release gets)",
)
def test_exactly_once_example_counts_every_order_once_and_a_failed_one_nowhere(
    airflow_db: Path, target: EngineTarget
) -> None:
    import importlib.util

    path = Path(__file__).parent.parent / "dags_examples" / "sqlqueue_exactly_once_example.py"
    spec = importlib.util.spec_from_file_location("sqlqueue_exactly_once_example", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    refused = [order for order in example.ORDERS if order["amount_cents"] < 0]
    expected: dict[str, list[int]] = {}
    for order in example.ORDERS:
        if order not in refused:
            counts = expected.setdefault(order["customer"], [0, 0])
            counts[0] += 1
            counts[1] += order["amount_cents"]
    assert refused and len(expected) > 1  # the example has both kinds

    run = run_dag(target, "sqlqueue_exactly_once_example")

    assert_succeeded(run, target)
    good = len(example.ORDERS) - len(refused)
    assert f"orders: processed {good}, failed {len(refused)}" in run.output, run.output
    [printed] = re.findall(r"^order totals: (\{.*\})$", run.output, flags=re.MULTILINE)
    assert ast.literal_eval(printed) == expected
    with target.open() as transport:
        table = transport.dialect.qualified_name(transport.resolve("order_totals"))
        rows = rawsql.execute(transport, f"SELECT customer, orders, amount_cents FROM {table}")
        assert {customer: [orders, amount] for customer, orders, amount in rows} == expected
        assert transport.queue("orders").count() == 0
        failed = [json.loads(body) for _, _, body in rawsql.all_rows(transport.queue("error"))]
    assert failed == refused


# ---- PostgreSQL roles for least privilege and secrets ----------------------------------------------
postgres_only = pytest.mark.parametrize("target", ["postgresql"], indirect=True)


@dataclass
class Role:
    """A PostgreSQL login role of one test, with an Airflow connection to the test's schema."""

    name: str
    password: str
    target: EngineTarget
    server: PostgresServer

    @property
    def schema(self) -> str:
        assert self.target.schema is not None
        return self.target.schema

    def table(self, queue: str) -> str:
        return f'"{self.schema}"."{queue}"'

    def grant(self, privileges: str, queues: tuple[str, ...]) -> None:
        tables = ", ".join(self.table(queue) for queue in queues)
        self.server.execute(f'GRANT {privileges} ON {tables} TO "{self.name}"')

    def revoke(self, privileges: str, queues: tuple[str, ...]) -> None:
        tables = ", ".join(self.table(queue) for queue in queues)
        self.server.execute(f'REVOKE {privileges} ON {tables} FROM "{self.name}"')

    def airflow_connection(self) -> str:
        connection = self.target.airflow_connection()
        return json.dumps({**connection, "login": self.name, "password": self.password})

    def dsn(self) -> str:
        url = make_url(self.target.url)
        url = url.set(drivername="postgresql", username=self.name, password=self.password)
        return url.render_as_string(hide_password=False)


@pytest.fixture
def make_role(target: EngineTarget, postgres_server: PostgresServer) -> Iterator[Callable[[str, str], Role]]:
    """Login roles (cluster-wide, so named uniquely) with USAGE on the test's schema; dropped after."""
    created: list[Role] = []

    def make(prefix: str, password: str) -> Role:
        role = Role(f"{prefix}_{uuid.uuid4().hex[:8]}", password, target, postgres_server)
        escaped = password.replace("'", "''")
        postgres_server.execute(f"CREATE ROLE \"{role.name}\" LOGIN PASSWORD '{escaped}'")
        created.append(role)
        postgres_server.execute(f'GRANT USAGE ON SCHEMA "{role.schema}" TO "{role.name}"')
        return role

    yield make
    for role in created:
        postgres_server.execute(f'DROP OWNED BY "{role.name}"')
        postgres_server.execute(f'DROP ROLE "{role.name}"')


RUNTIME_QUEUES = ("orders", "error")
RUNTIME_CONN = "qruntime"


@pytest.fixture
def runtime_role(
    target: EngineTarget, make_role: Callable[[str, str], Role], monkeypatch: pytest.MonkeyPatch
) -> Role:
    """docs/dba-permissions.md's runtime role on queues an admin made: SELECT, INSERT, DELETE, no more."""
    with target.open() as transport:
        for name in RUNTIME_QUEUES:
            transport.queue(name).create()
    role = make_role("qruntime", f"rt-{uuid.uuid4().hex}")
    role.grant("SELECT, INSERT, DELETE", RUNTIME_QUEUES)
    monkeypatch.setenv(f"AIRFLOW_CONN_{RUNTIME_CONN.upper()}", role.airflow_connection())
    return role


def receive_all(hook: SqlQueueHook, queue: str) -> list[bytes]:
    bodies: list[bytes] = []
    while True:
        with hook.receive(queue, max_messages=100) as batch:
            bodies += [message.body for message in batch]
            if not batch:
                return bodies


# ---- 4. least privilege on PostgreSQL ------------------------------------------------------------------
@postgres_only
def test_runtime_role_sends_receives_pokes_and_purges(runtime_role: Role) -> None:
    sent = SendMessageOperator(
        task_id="send", queue_name="orders", messages=[{"n": 1}, {"n": 2}], sqlqueue_conn_id=RUNTIME_CONN
    ).execute(context={})
    assert sent["count"] == 2
    sensor = QueueSensor(task_id="wait", queue_name="orders", min_messages=2, sqlqueue_conn_id=RUNTIME_CONN)
    assert sensor.poke({}).is_done
    exact = QueueSensor(
        task_id="exact",
        queue_name="orders",
        min_messages=3,
        count_mode="exact",
        sqlqueue_conn_id=RUNTIME_CONN,
    )
    assert not exact.poke({}).is_done

    hook = SqlQueueHook(sqlqueue_conn_id=RUNTIME_CONN)
    try:
        assert [json.loads(body) for body in receive_all(hook, "orders")] == [{"n": 1}, {"n": 2}]
        hook.send("orders", b"stale", time_to_be_received=EXPIRED_AT_ONCE)
        hook.send("orders", b"fresh")
    finally:
        hook.close()
    time.sleep(0.05)

    purged = PurgeExpiredMessagesOperator(
        task_id="purge", queues=list(RUNTIME_QUEUES), sqlqueue_conn_id=RUNTIME_CONN
    ).execute(context={})
    assert purged == {"orders": 1, "error": 0}
    hook = SqlQueueHook(sqlqueue_conn_id=RUNTIME_CONN)
    try:
        assert receive_all(hook, "orders") == [b"fresh"]
    finally:
        hook.close()


@postgres_only
def test_runtime_role_cannot_change_a_message(runtime_role: Role) -> None:
    import psycopg

    SendMessageOperator(
        task_id="send", queue_name="orders", body="original", sqlqueue_conn_id=RUNTIME_CONN
    ).execute(context={})
    with psycopg.connect(runtime_role.dsn()) as connection:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            connection.execute(f"UPDATE {runtime_role.table('orders')} SET Headers = '{{}}'")
        connection.rollback()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            connection.execute(f"UPDATE {runtime_role.table('orders')} SET Body = NULL")
    hook = SqlQueueHook(sqlqueue_conn_id=RUNTIME_CONN)
    try:
        assert receive_all(hook, "orders") == [b"original"]
    finally:
        hook.close()


@postgres_only
def test_runtime_role_cannot_provision_a_new_queue_and_is_told_it_needs_create(
    runtime_role: Role, target: EngineTarget
) -> None:
    provision = ProvisionQueuesOperator(
        task_id="provision",
        endpoint="invoices",
        instance_specific_queue=False,
        audit_queue=None,
        sqlqueue_conn_id=RUNTIME_CONN,
    )
    with pytest.raises(PermissionDenied) as refused:
        provision.execute(context={})
    message = str(refused.value)
    assert "CREATE on the schema" in message
    assert "invoices" in message
    with target.open() as transport:
        assert not transport.queue("invoices").exists()


@postgres_only
def test_receive_without_delete_is_refused_with_what_to_grant(runtime_role: Role) -> None:
    runtime_role.revoke("DELETE", RUNTIME_QUEUES)
    hook = SqlQueueHook(sqlqueue_conn_id=RUNTIME_CONN)
    try:
        hook.send("orders", b"kept")  # INSERT alone still works
        with pytest.raises(PermissionDenied) as refused, hook.receive("orders") as batch:
            pytest.fail(f"received {batch!r} without DELETE")
        assert "SELECT, INSERT and DELETE" in str(refused.value)
        assert (
            QueueSensor(task_id="wait", queue_name="orders", sqlqueue_conn_id=RUNTIME_CONN).poke({}).is_done
        )
        assert hook.depth("orders", "exact") == 1  # the refused receive took nothing
    finally:
        hook.close()


@postgres_only
def test_the_lock_mode_extra_reaches_the_transport(
    runtime_role: Role, target: EngineTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    connection = target.airflow_connection(lock_mode="row")
    row_locks = json.dumps({**connection, "login": runtime_role.name, "password": runtime_role.password})
    monkeypatch.setenv("AIRFLOW_CONN_QROWLOCKS", row_locks)
    hook = SqlQueueHook(sqlqueue_conn_id="qrowlocks")
    try:
        hook.send("orders", b"kept")
        with pytest.raises(PermissionDenied, match="lock_mode='row'"), hook.receive("orders"):
            pytest.fail("row locks were taken without an UPDATE privilege")
    finally:
        hook.close()
    hook = SqlQueueHook(sqlqueue_conn_id=RUNTIME_CONN)  # auto: advisory locks for this role
    try:
        assert receive_all(hook, "orders") == [b"kept"]
    finally:
        hook.close()


# ---- 5. the connection's password never shows --------------------------------------------------------
SECRET_CONN = "qsecret"


@pytest.fixture
def secret_role(make_role: Callable[[str, str], Role], monkeypatch: pytest.MonkeyPatch) -> Role:
    """A role with a distinctive password that may create queues in the test's schema."""
    role = make_role("qsecret", SECRET_PASSWORD)
    role.server.execute(f'GRANT CREATE ON SCHEMA "{role.schema}" TO "{role.name}"')
    monkeypatch.setenv(f"AIRFLOW_CONN_{SECRET_CONN.upper()}", role.airflow_connection())
    return role


async def _trigger_events(trigger: Any, then: Callable[[], None], after: float) -> list[Any]:
    """Run a trigger to completion; call ``then`` in a thread ``after`` seconds (it polls meanwhile)."""

    async def later() -> None:
        await asyncio.sleep(after)
        await asyncio.to_thread(then)

    helper = asyncio.create_task(later())
    events = [event async for event in trigger.run()]
    await helper
    return events


def _assert_nowhere(secret: str, records: list[logging.LogRecord], *outputs: str) -> None:
    for record in records:
        shown = [record.getMessage(), repr(record.args), record.exc_text or "", str(record.__dict__)]
        if record.exc_info and record.exc_info[1] is not None:
            shown.append(repr(record.exc_info[1]))
        assert not any(secret in text for text in shown), f"password in log record {record.name}"
    for text in outputs:
        assert secret not in text


@pytest.fixture
def structlog_debug(monkeypatch: pytest.MonkeyPatch) -> bool:
    """Airflow's structlog loggers (operators', hooks' and triggers' ``self.log``, printed to stdout, not
    seen by ``caplog``) at DEBUG for one test; False if this Airflow keeps their levels elsewhere."""
    try:
        from airflow._shared.logging.structlog import PER_LOGGER_LEVELS
    except ImportError:
        return False
    monkeypatch.setitem(PER_LOGGER_LEVELS, "", logging.DEBUG)
    return True


@postgres_only
def test_password_never_appears_in_logs_output_or_rendered_fields(
    secret_role: Role,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    structlog_debug: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)
    context: dict[str, Any] = {"params": {"queue": "orders", "min_messages": 3}, "ds": "2026-01-01"}
    operators: list[Any] = [
        ProvisionQueuesOperator(
            task_id="provision",
            endpoint="{{ params.queue }}",
            instance_specific_queue=False,
            audit_queue=None,
            sqlqueue_conn_id=SECRET_CONN,
        ),
        ProvisionQueuesOperator(
            task_id="provision_dry_run",
            endpoint="{{ params.queue }}",
            instance_suffix="{{ ds }}",
            dry_run=True,
            sqlqueue_conn_id=SECRET_CONN,
        ),
        SendMessageOperator(
            task_id="send",
            queue_name="{{ params.queue }}",
            body={"day": "{{ ds }}"},
            headers={"Source": "{{ params.queue }}-producer"},
            time_to_be_received=EXPIRED_AT_ONCE,
            sqlqueue_conn_id=SECRET_CONN,
        ),
        QueueSensor(
            task_id="poke",
            queue_name="{{ params.queue }}",
            min_messages=1,
            sqlqueue_conn_id=SECRET_CONN,
        ),
        QueueSensor(
            task_id="deferred",
            queue_name="{{ params.queue }}",
            min_messages="{{ params.min_messages }}",
            deferrable=True,
            poke_interval=0.1,
            sqlqueue_conn_id=SECRET_CONN,
        ),
        PurgeExpiredMessagesOperator(
            task_id="purge", queues=["{{ params.queue }}", "error"], sqlqueue_conn_id=SECRET_CONN
        ),
    ]
    for operator in operators:
        operator.render_template_fields(context)
        rendered = {name: getattr(operator, name) for name in operator.template_fields}
        assert SECRET_PASSWORD not in repr(rendered), operator.task_id
    provision, dry_run, send, poke, deferred, purge = operators
    assert deferred.min_messages == "3" and send.queue_name == "orders"

    created = provision.execute(context)["created"]
    assert [name.split("@")[0] for name in created] == ["orders", "error", "error_archive"]
    assert "CREATE TABLE" in dry_run.execute(context)
    send.execute(context)
    # The only message expired at once: the sensor confirms its estimate with an exact count, which
    # leaves expired rows out, so it must not fire yet.
    assert not poke.poke(context).is_done
    SqlQueueHook(sqlqueue_conn_id=SECRET_CONN).send_batch("orders", ["live"])
    assert poke.poke(context).is_done
    with pytest.raises(TaskDeferred) as deferral:
        deferred.execute(context)
    trigger = deferral.value.trigger
    assert SECRET_PASSWORD not in json.dumps(trigger.serialize())
    hook = SqlQueueHook(sqlqueue_conn_id=SECRET_CONN)
    try:
        assert SECRET_PASSWORD not in repr(hook.sqlalchemy_url) + repr(hook.get_transport())
        events = asyncio.run(_trigger_events(trigger, lambda: hook.send_batch("orders", ["a", "b"]), 0.3))
    finally:
        hook.close()
    assert [event.payload["status"] for event in events] == ["success"]
    assert deferred.execute_complete(context, events[0].payload) == 3
    time.sleep(0.05)
    assert purge.execute(context) == {"orders": 1, "error": 0}

    # A connection that fails (nothing listens on the port) must not show the password either.
    unreachable = json.loads(secret_role.airflow_connection()) | {"port": 1}
    monkeypatch.setenv("AIRFLOW_CONN_QSECRET_UNREACHABLE", json.dumps(unreachable))
    with pytest.raises(TransientDatabaseError) as failed:
        QueueSensor(task_id="down", queue_name="orders", sqlqueue_conn_id="qsecret_unreachable").poke({})
    assert SECRET_PASSWORD not in str(failed.value) + repr(failed.value.__cause__)

    captured = capfd.readouterr()
    _assert_nowhere(SECRET_PASSWORD, caplog.records, captured.out, captured.err, caplog.text)
    assert caplog.records and "sent 1 message(s) to orders" in captured.out, "nothing was captured"
    if structlog_debug:  # the trigger's per-poll DEBUG line was captured too
        assert re.search(r"\[debug +\] orders holds \d+ message\(s\) \(estimate\)", captured.out)

    # The checks above would see a leak: nothing masks the password on its way to caplog or the console.
    logging.getLogger("airflow_provider_sqlqueue.canary").debug("canary %s", SECRET_PASSWORD)
    assert SECRET_PASSWORD in caplog.records[-1].getMessage()
    poke.log.debug("canary %s", SECRET_PASSWORD)
    assert SECRET_PASSWORD in capfd.readouterr().out
