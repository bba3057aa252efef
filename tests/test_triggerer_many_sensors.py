"""Hundreds of deferred ``QueueSensor``s from a real DAG run, held by a real ``airflow triggerer`` (issue 66).

One DAG maps ``QueueSensor(deferrable=True)`` over hundreds of map indices per database (SQLite,
PostgreSQL, and Babelfish with fewer: each poke there is a login), each sensor watching one of its
database's queues for one or two messages. ``dag.test()`` runs the DAG in a subprocess as Airflow does,
but leaves each deferral to the triggerer instead of running the trigger inline: each sensor pokes once
and defers through the Execution API (a row in ``trigger``, the task instance ``deferred``), and an
``airflow triggerer`` process of the same metadata database runs them all on its one event loop. A
trigger that fires schedules its task instance again, and ``dag.test()`` resumes it (``execute_complete``
checks the event).

While the triggerer holds every sensor, the test counts its processes' PostgreSQL connections (their
client ports in ``pg_stat_activity``): one for the shared poller's reads and one for its ``LISTEN``,
however many sensors wait. A producer then connects and sends to a few queues of each database: the
sensors whose queue reached their ``min_messages`` succeed, and a few polls later every other sensor is
still deferred. The three databases share one DAG run and one triggerer, so Airflow's start-up (the
Execution API, the triggerer, the metadata database) is paid once for all of them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EngineTarget, sqlserver_target
from own_connections import checker, own_tcp_ports

sys.path.insert(0, str(Path(__file__).resolve().parent / "browser"))
from airflow_stack import free_port, kill_leftovers

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(900)]

# Sensors and queues per database: hundreds where a poke is cheap, few on Babelfish, where a sensor's poke
# (a login, the table's layout, the depth and the gauges) took 1.8 s of the DAG run's time under load.
# .ci/airflow-oldest sets SQLQUEUE_TRIGGERER_SENSORS=few: on Airflow 3.0, whose dag.test() started the 232
# sensors in about 10 minutes under load, it proves the deferral through a real triggerer with two sensors
# a queue (one waiting for a message, one for two) and some queues left empty; the hundreds are the main
# suite's.
FEW = os.environ.get("SQLQUEUE_TRIGGERER_SENSORS") == "few"
SCALE = (
    {"sqlite": (12, 6), "postgresql": (12, 6), "sqlserver": (12, 6)}
    if FEW
    else {"sqlite": (100, 25), "postgresql": (120, 30), "sqlserver": (12, 6)}
)
POLL_INTERVAL = 1.0
FILLED_TWICE = range(0, 2)  # two messages each: every sensor of these queues succeeds
FILLED_ONCE = range(2, 4)  # one message each: only the sensors waiting for one succeed
QUIET_POLLS = 3  # how long "no other sensor fires" is watched for, in polls
DAG_ID = "sqlqueue_many_deferred_sensors"

DAG_FILE = """
from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_sqlqueue.sensors.queue import QueueSensor

with DAG(
    dag_id=DAG_ID,
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
):
    for engine, (sensors, queues) in SCALE.items():
        QueueSensor.partial(
            task_id=f"wait_{engine}",
            sqlqueue_conn_id=f"sqlqueue_{engine}",
            deferrable=True,
            poke_interval=POLL_INTERVAL,
            max_active_tis_per_dagrun=sensors,
        ).expand_kwargs(
            [
                {"queue_name": f"q{n % queues:02d}", "min_messages": 1 + (n // queues) % 2}
                for n in range(sensors)
            ]
        )
"""

# dag.test() as Airflow runs it, but a deferred task waits for the triggerer instead of having its
# trigger run inline: dag.test()'s loop already resumes the task instances a triggerer schedules again.
RUNNER = """
import sys

try:
    from airflow.dag_processing.dagbag import DagBag
except ImportError:  # Airflow 3.0
    from airflow.models.dagbag import DagBag
from airflow.sdk.definitions import dag as dag_module

run_task = dag_module._run_task


def run_task_leaving_triggers_to_the_triggerer(*, run_triggerer=False, **task_instance):
    return run_task(run_triggerer=False, **task_instance)  # ti, and from Airflow 3.1 task


dag_module._run_task = run_task_leaving_triggers_to_the_triggerer
DagBag(sys.argv[1]).get_dag(sys.argv[2]).test()
"""


def expected_successes(sensors: int, queues: int) -> set[int]:
    """The map indices whose queue gets at least their ``min_messages``."""
    return {
        n
        for n in range(sensors)
        if n % queues in FILLED_TWICE or (n % queues in FILLED_ONCE and (n // queues) % 2 == 0)
    }


class Process:
    """A subprocess of this test in its own process group, its output in a file."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], folder: Path) -> None:
        self.name = name
        self.log = folder / f"{name}.log"
        with self.log.open("wb") as output:
            self.popen = subprocess.Popen(
                command, env=env, cwd=folder, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
            )

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace").splitlines()[-lines:]
        return f"--- {self.name} (exit {self.popen.poll()}) ---\n" + "\n".join(text)

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            raise AssertionError(f"{self.name} ended early:\n{self.tail()}")

    def pids(self) -> list[int]:
        """The process and its descendants (the triggerer runs its triggers in a child process)."""
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(parent, []).append(int(entry.name))
        found, todo = [], [self.popen.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, []))
        return found

    def stop(self) -> None:
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
            if self.popen.poll() is not None:
                return
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.popen.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue


def states(metadata: Path) -> dict[str, dict[int, str]]:
    """The sensors' task instance states by engine and map index, read from the metadata database."""
    with contextlib.closing(sqlite3.connect(f"file:{metadata}?mode=ro", uri=True, timeout=30)) as db:
        rows = db.execute(
            "SELECT task_id, map_index, state FROM task_instance WHERE dag_id = ?", (DAG_ID,)
        ).fetchall()
    found: dict[str, dict[int, str]] = {engine: {} for engine in SCALE}
    for task_id, index, state in rows:
        found[task_id.removeprefix("wait_")][int(index)] = str(state)
    return found


def assigned(metadata: Path) -> int:
    """The triggers a triggerer has taken."""
    with contextlib.closing(sqlite3.connect(f"file:{metadata}?mode=ro", uri=True, timeout=30)) as db:
        return int(db.execute("SELECT count(*) FROM trigger WHERE triggerer_id IS NOT NULL").fetchone()[0])


def count(metadata: Path, state: str) -> int:
    return sum(list(by_index.values()).count(state) for by_index in states(metadata).values())


def wait_for(what: str, condition: Callable[[], Any], timeout: float, *alive: Process) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        for process in alive:
            process.check_alive()
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout:.0f} s waiting for {what}\n"
                + "\n".join(process.tail() for process in alive)
            )
        time.sleep(0.25)


def triggerer_connections(target: EngineTarget, triggerer: Process) -> int:
    """The PostgreSQL client connections of the triggerer's processes to the test database."""
    ports = {port for pid in triggerer.pids() for port in own_tcp_ports(pid=pid)}
    with checker(target.url) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND client_port = ANY(%s)",
            (sorted(ports),),
        ).fetchone()
    assert row is not None
    return int(row[0])


def open_files(process: Process, target: EngineTarget) -> int:
    """The triggerer's open descriptors of a SQLite queue database: one per connection to it."""
    from sqlalchemy.engine import make_url

    database = str(make_url(target.url).database)
    held = 0
    for pid in process.pids():
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    held += os.readlink(f"/proc/{pid}/fd/{fd}") == database
    return held


def free_slots(target: EngineTarget) -> int:
    """Connections the PostgreSQL server would still accept from an ordinary role."""
    with checker(target.url) as connection:
        row = connection.execute(
            "SELECT current_setting('max_connections')::int"
            " - current_setting('superuser_reserved_connections')::int"
            " - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def databases(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_server: Any
) -> Iterator[dict[str, EngineTarget]]:
    """One namespace of this test's own per engine: a SQLite file, a PostgreSQL schema, a Babelfish
    schema (through FreeTDS)."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    postgres_server.execute(f'CREATE SCHEMA "{schema}"')
    babelfish = sqlserver_target(request, "freetds")
    try:
        yield {
            "sqlite": EngineTarget("sqlite", f"sqlite:///{tmp_path / 'queues.db'}", None),
            "postgresql": EngineTarget("postgresql", postgres_server.base_url, schema),
            "sqlserver": next(babelfish),
        }
    finally:
        babelfish.close()
        postgres_server.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def airflow_env(tmp_path: Path, databases: dict[str, EngineTarget]) -> dict[str, str]:
    """A migrated Airflow metadata database of this test's own (the triggerer takes every trigger of its
    database, so it must not share the session's, where other tests defer), the DAG, the connections."""
    home = tmp_path / "airflow-home"
    dags = tmp_path / "dags"
    home.mkdir()
    dags.mkdir()
    source = textwrap.dedent(DAG_FILE)
    for name, value in (("DAG_ID", DAG_ID), ("POLL_INTERVAL", POLL_INTERVAL), ("SCALE", SCALE)):
        source = source.replace(name, repr(value))
    (dags / "many_sensors.py").write_text(source)
    (tmp_path / "runner.py").write_text(textwrap.dedent(RUNNER))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            # The runner and the triggerer write to it at once: a writer waits for the other's lock.
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}?timeout=120",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__OPENLINEAGE__DISABLED": "True",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            # Its log server's port of its own: another test's triggerer may hold the default one.
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "PYTHONUNBUFFERED": "1",
        }
    )
    for engine, target in databases.items():
        env.update(target.airflow_env(f"sqlqueue_{engine}"))
    done = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"airflow db migrate failed:\n{done.stdout}\n{done.stderr}"
    return env


def test_a_triggerer_holding_hundreds_of_deferred_sensors_fires_only_those_whose_queue_filled(
    databases: dict[str, EngineTarget], airflow_env: dict[str, str], tmp_path: Path
) -> None:
    sensors = sum(count for count, _ in SCALE.values())
    for engine, target in databases.items():
        with target.open() as transport:
            transport.queue("error").create()
            for n in range(SCALE[engine][1]):
                transport.queue(f"q{n:02d}").create()
    home = Path(airflow_env["AIRFLOW_HOME"])
    metadata = home / "airflow.db"
    started = time.monotonic()
    triggerer = Process("triggerer", [sys.executable, "-m", "airflow", "triggerer"], airflow_env, tmp_path)
    runner = Process(
        "dag-test",
        [sys.executable, str(tmp_path / "runner.py"), airflow_env["AIRFLOW__CORE__DAGS_FOLDER"], DAG_ID],
        airflow_env,
        tmp_path,
    )
    try:
        wait_for(
            f"{sensors} deferred sensors",
            lambda: count(metadata, "deferred") == sensors,
            600,
            runner,
            triggerer,
        )
        deferred_at = time.monotonic()
        wait_for(
            "the triggerer to take every trigger",
            lambda: assigned(metadata) == sensors,
            120,
            runner,
            triggerer,
        )
        postgresql = databases["postgresql"]
        wait_for(
            "the triggerer to connect", lambda: triggerer_connections(postgresql, triggerer), 120, triggerer
        )
        held, files = 0, 0
        for _ in range(QUIET_POLLS * 4):  # the most it holds over a few polls
            held = max(held, triggerer_connections(postgresql, triggerer))
            files = max(files, open_files(triggerer, databases["sqlite"]))
            time.sleep(POLL_INTERVAL / 4)
        slots = free_slots(postgresql)

        for target in databases.values():
            with target.open() as sender:  # a producer still connects
                for n in FILLED_TWICE:
                    sender.queue(f"q{n:02d}").send_batch([b"a", b"b"])
                for n in FILLED_ONCE:
                    sender.queue(f"q{n:02d}").send(b"a")
        expected = {engine: expected_successes(*SCALE[engine]) for engine in SCALE}

        def succeeded() -> dict[str, set[int]]:
            return {
                e: {n for n, s in by_index.items() if s == "success"}
                for e, by_index in states(metadata).items()
            }

        wait_for(
            "the sensors of the filled queues to succeed",
            lambda: all(succeeded()[e] >= expected[e] for e in SCALE),
            120,
            runner,
            triggerer,
        )
        time.sleep(QUIET_POLLS * POLL_INTERVAL)
        final = states(metadata)
        elapsed = time.monotonic() - started
        print(
            f"{sensors} sensors deferred in {deferred_at - started:.1f} s, the run took {elapsed:.1f} s; "
            f"the triggerer held {held} PostgreSQL connection(s) (the server had {slots} free) and "
            f"{files} SQLite one(s)"
        )
    finally:
        runner.stop()
        triggerer.stop()
        kill_leftovers(home)  # anything of this Airflow home that left the process groups

    assert 1 <= held <= 2, (
        f"the triggerer held {held} PostgreSQL connections for {SCALE['postgresql'][0]} sensors"
    )
    assert slots > 0
    assert 1 <= files <= 2, f"the triggerer held {files} SQLite connections for {SCALE['sqlite'][0]} sensors"
    for engine, (count_of, _) in SCALE.items():
        assert {n for n, s in final[engine].items() if s == "success"} == expected[engine], (
            engine,
            final[engine],
        )
        rest = {s for n, s in final[engine].items() if n not in expected[engine]}
        assert rest == {"deferred"} and len(final[engine]) == count_of, (engine, final[engine])
