"""Only provisioning creates a SQLite queue file (security finding: "A SQLite connection creates the file it
names").

Whoever may edit an Airflow connection could otherwise make an empty database wherever a worker, the
triggerer or the API server may write, by pointing a ``sqlqueue`` connection at the path and opening the
Queues page, or by any task that reads it. Every use of the hook but provisioning opens an existing file
(a SQLite URI with ``mode=rw``) or fails with a ConfigurationError naming the path and the fix; the hook's
``provision``, ``ProvisionQueuesOperator`` and ``sqlqueue create`` create it. Real SQLite files, Airflow
connections from the environment, the real trigger, sensor, web app and command line throughout.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")

from fastapi.testclient import TestClient
from sqlalchemy.engine import URL
from test_airflow_dags import airflow_db  # noqa: F401  (a fixture)
from test_cli import Cli
from test_queues_page import Client

from airflow_provider_sqlqueue.cli import Exit
from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator
from airflow_provider_sqlqueue.sensors.queue import QueueSensor
from airflow_provider_sqlqueue.transport import ConfigurationError, open_transport
from airflow_provider_sqlqueue.triggers.queue import PendingMessagesTrigger

CONN_ID = "sqlqueue_missing_file"
# A file name that a URI would misread unquoted: "?mode=rwc" would be the query that creates it anyway,
# "#" would end the path and "%41" would become "A".
ODD_NAME = "queues ?mode=rwc#%41.db"
FIX = "create the queues first"


def point_connection_at(monkeypatch: pytest.MonkeyPatch, path: Path, conn_id: str = CONN_ID) -> None:
    """The Airflow connection ``conn_id``, from the environment, naming the SQLite file ``path``."""
    connection = {"conn_type": "sqlqueue", "host": str(path), "extra": {"engine": "sqlite"}}
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))


def assert_refused(error: BaseException | str, path: Path) -> None:
    """The error says which file and what to do about it."""
    text = str(error)
    assert str(path) in text and FIX in text and "ProvisionQueuesOperator" in text, text


@pytest.fixture
def missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A SQLite file that does not exist, in a folder that does, named by the connection ``CONN_ID``."""
    path = tmp_path / "missing.db"
    point_connection_at(monkeypatch, path)
    return path


def the_files(path: Path) -> list[str]:
    """What is in the folder of ``path``: no database, and no -wal or -shm file beside one either."""
    return sorted(entry.name for entry in path.parent.iterdir())


# ---- the transport core --------------------------------------------------------------------------------
def test_a_transport_opened_without_creation_refuses_a_missing_file_and_opens_an_existing_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / ODD_NAME
    url = URL.create("sqlite", database=str(path))
    with open_transport(url, create_missing_file=False) as opening:
        with pytest.raises(ConfigurationError) as refused:
            opening.queue("orders").count()
        assert_refused(refused.value, path)
        assert the_files(path) == []

        with open_transport(url) as provisioning:  # the core's default: the caller's own path is created
            provisioning.queue("orders").create()
            provisioning.queue("orders").send("hello")
        assert path.is_file() and "queues " not in the_files(path), "the file of the whole name, quoted"
        assert opening.queue("orders").count() == 1, "the same file, opened without creation once it exists"


def test_the_default_of_the_core_still_creates_the_file_it_is_given(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    with open_transport(f"sqlite:///{path}") as transport:
        transport.queue("orders").create()
    assert path.is_file()


# ---- every use of the hook but provisioning ----------------------------------------------------------------
def test_the_hooks_reads_and_connections_refuse_a_missing_file_and_create_nothing(missing: Path) -> None:
    hook = SqlQueueHook(sqlqueue_conn_id=CONN_ID)
    try:
        for use in (
            lambda: hook.depth("orders"),
            hook.get_conn,
            lambda: hook.send("orders", "x"),
            lambda: hook.get_records("SELECT 1"),
            lambda: hook.get_sqlalchemy_engine().connect(),
        ):
            with pytest.raises(ConfigurationError) as refused:
                use()
            assert_refused(refused.value, missing)
            assert the_files(missing) == []
        assert "CREATE TABLE" in hook.provision(["orders"], dry_run=True)["script"]
        assert the_files(missing) == [], "a dry run renders the DDL and creates nothing"
    finally:
        hook.close()


def test_an_engine_of_the_hook_opens_the_file_once_it_exists_and_never_makes_another(missing: Path) -> None:
    hook = SqlQueueHook(sqlqueue_conn_id=CONN_ID)
    engine = None
    try:
        hook.provision(["orders"])
        hook.send("orders", "x")
        engine = hook.get_sqlalchemy_engine()
        with engine.connect() as connection:
            assert connection.exec_driver_sql('SELECT COUNT(*) FROM "orders"').scalar() == 1
        hook.close()
        engine.dispose()
        for name in the_files(missing):
            (missing.parent / name).unlink()
        with pytest.raises(Exception, match="unable to open database file"), engine.connect():
            pass  # the file went away after the engine was made: mode=rw does not bring it back
        assert the_files(missing) == []
    finally:
        hook.close()
        if engine is not None:
            engine.dispose()


def test_an_engine_made_by_the_caller_from_get_uri_never_creates_the_file(missing: Path) -> None:
    """``create_engine(hook.get_uri())`` in user code (pandas, a SQL operator of another provider) opens the
    file only once provisioning made it: the URI carries ``mode=rw``."""
    hook = SqlQueueHook(sqlqueue_conn_id=CONN_ID)
    engine = sqlalchemy.create_engine(hook.get_uri())
    try:
        with pytest.raises(Exception, match="unable to open database file"), engine.connect():
            pass
        assert the_files(missing) == []
        hook.provision(["orders"])
        hook.send("orders", "x")
        engine.dispose()
        with engine.connect() as connection:
            assert connection.exec_driver_sql('SELECT COUNT(*) FROM "orders"').scalar() == 1
    finally:
        hook.close()
        engine.dispose()


def test_the_sensor_and_its_trigger_refuse_a_missing_file_and_create_nothing(missing: Path) -> None:
    sensor = QueueSensor(task_id="wait", queue_name="orders", sqlqueue_conn_id=CONN_ID, min_messages=1)
    with pytest.raises(ConfigurationError) as refused:
        sensor.poke({})
    assert_refused(refused.value, missing)

    async def first_event() -> dict[str, Any]:
        run = PendingMessagesTrigger("orders", sqlqueue_conn_id=CONN_ID, poll_interval=0.1).run()
        try:
            return (await asyncio.wait_for(run.__anext__(), 20)).payload
        finally:
            await run.aclose()

    event = asyncio.run(first_event())
    assert event["status"] == "error", event
    assert_refused(event["message"], missing)
    assert the_files(missing) == []


@pytest.fixture
def page(airflow_db: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:  # noqa: F811
    """The Queues page's app in-process, an admin logged in (as tests/test_queues_page.py drives it)."""
    from airflow.api_fastapi import app as airflow_app
    from airflow.api_fastapi.app import create_auth_manager

    from airflow_provider_sqlqueue.plugins import queues_app

    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", secrets.token_urlsafe(64))
    monkeypatch.setattr(airflow_app._AuthManagerState, "instance", None)
    manager = create_auth_manager()
    with TestClient(queues_app.create_app(), base_url="http://airflow.test") as client:
        app = Client(client, manager)
        app.as_role("ADMIN")
        yield app


def test_the_queues_page_refuses_a_missing_file_and_creates_nothing_on_the_api_server(
    page: Client, missing: Path
) -> None:
    answer = page.get("/api/queues", conn_id=CONN_ID)
    assert answer.status_code == 502, answer.text
    assert_refused(answer.json()["detail"], missing)
    shown = page.get("/queues", conn_id=CONN_ID)
    assert shown.status_code == 502 and FIX in shown.text and 'id="queues"' not in shown.text
    assert the_files(missing) == []


# ---- provisioning creates it ---------------------------------------------------------------------------
def test_the_hooks_provision_creates_the_file_and_every_use_then_opens_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / ODD_NAME
    point_connection_at(monkeypatch, path)
    hook = SqlQueueHook(sqlqueue_conn_id=CONN_ID)
    try:
        assert hook.provision(["orders", "error"])["created"] == ["orders", "error"]
        assert path.is_file()
        hook.send("orders", "x")
        assert hook.depth("orders", "exact") == 1
    finally:
        hook.close()
    assert SqlQueueHook(sqlqueue_conn_id=CONN_ID).create_database_file() is False, "it exists now"


def test_the_provision_operator_creates_the_file(missing: Path) -> None:
    result = ProvisionQueuesOperator(
        task_id="provision", sqlqueue_conn_id=CONN_ID, endpoint="orders", audit_queue=None
    ).execute({})
    assert "orders" in result["created"] and missing.is_file()
    sensor = QueueSensor(task_id="wait", queue_name="orders", sqlqueue_conn_id=CONN_ID)
    assert sensor.poke({}).is_done is False, "the sensor opens the provisioned file"


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    monkeypatch.delenv("SQLQUEUE_URL", raising=False)
    monkeypatch.delenv("SQLQUEUE_CONN_ID", raising=False)
    return Cli(None, capsys, monkeypatch)


def test_the_command_line_refuses_a_missing_file_except_in_create(cli: Cli, missing: Path) -> None:
    url = f"sqlite:///{missing}"
    for database in (["--conn-id", CONN_ID], ["--url", url]):
        for command in (["depth", "orders"], ["send", "orders", "x"], ["script", "orders"]):
            result = cli(command[0], *database, *command[1:], database=False)
            if command[0] == "script":  # renders the DDL and creates nothing
                assert result.code == 0, result.err
            else:
                assert result.code == Exit.UNREACHABLE, result.err
                assert_refused(" ".join(result.err.split()), missing)
            assert the_files(missing) == [], (database, command)

    assert cli("create", "--conn-id", CONN_ID, "orders", database=False).code == 0
    assert missing.is_file()
    opened = cli("depth", "--url", url, "orders", "--exact", database=False)
    assert opened.code == 0 and opened.out.split()[-1] == "0", opened.out

    other = missing.with_name("by-url.db")
    assert cli("create", "--url", f"sqlite:///{other}", "orders", database=False).code == 0
    assert other.is_file()


# ---- the Spark jobs, opened from a connection's environment ---------------------------------------------


def test_the_spark_jobs_open_the_connections_file_without_creating_it(missing: Path) -> None:
    """The drain and fill jobs and the data source's reader and writer open the URL the operator hands them
    (``queue_environment`` of the hook), so they too refuse a file that provisioning did not make."""
    from airflow_provider_sqlqueue.operators.spark_submit import queue_environment
    from airflow_provider_sqlqueue.spark.config import url_from_environment
    from airflow_provider_sqlqueue.spark.drain.config import DrainConfig
    from airflow_provider_sqlqueue.spark.fill import FillConfig

    hook = SqlQueueHook(sqlqueue_conn_id=CONN_ID)
    url = url_from_environment(queue_environment(hook))
    jobs = {
        "drain": DrainConfig(url=url, input_queue="orders", sink="table:rows", run_id="r-1"),
        "fill": FillConfig(url=url, queue="orders", run_id="r-1"),
    }
    for name, job in jobs.items():
        with pytest.raises(ConfigurationError) as refused, job.open(pool_size=1) as transport:
            transport.queue("orders").count()
        assert_refused(refused.value, missing)
        assert the_files(missing) == [], name
    hook.provision(["orders"])
    with jobs["drain"].open(pool_size=1) as transport:
        assert transport.queue("orders").count() == 0
