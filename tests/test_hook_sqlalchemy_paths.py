"""Every SQLAlchemy path SqlQueueHook inherits from DbApiHook, under the oldest SQLAlchemy pyproject.toml
allows and under the venv's: no connection field or extra reaches an ODBC driver library through them.

SQLAlchemy 2.0's pyodbc dialect percent-decodes ``odbc_connect`` once more after the URL's own decoding
(2.1 does not), so a password of ``x%3BDRIVER%3D/path/lib.so`` reached the driver manager there as
``PWD=x;DRIVER=/path/lib.so``. Each attack runs in a child process, once with the venv's SQLAlchemy and
once with the floor's first on ``PYTHONPATH`` (installed by ``.ci/setup.sh`` into
``.venv/sqlalchemy-floor/<version>``), against a real shared library that writes a marker file when the
driver manager loads it. The positive controls, with ``[providers.odbc] allow_driver_in_extra`` on, prove
that each path does load a library the connection names and that SQLAlchemy 2.0 decodes each encoded form
into a DRIVER the driver manager loads; the refusals then prove that without the setting nothing is loaded.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy_floor import floor_version

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")
pytest.importorskip("pyodbc", reason="the mssql extra is not installed")

from conftest import EngineTarget
from sqlserver_bed import MSODBC_NAME

from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_provider_sqlqueue.transport.connection import odbc_pairs, parse_odbc_string
from airflow_provider_sqlqueue.transport.odbc_drivers import reads_port_keyword

REPO = Path(__file__).resolve().parent.parent
ALLOW_ENV = "AIRFLOW__PROVIDERS_ODBC__ALLOW_DRIVER_IN_EXTRA"
MARKER_ENV = "SQLQUEUE_TEST_DRIVER_MARKER"
# The driver the code chooses in these runs: a library that does not exist, so that no real driver is
# ever loaded beside the test library (one crashed a process that had loaded both).
NO_DRIVER = "/nonexistent/libsqlqueue-no-driver.so"
LIBRARY_SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void loaded(void) {
    const char *marker = getenv("SQLQUEUE_TEST_DRIVER_MARKER");
    if (marker) { FILE *file = fopen(marker, "w"); if (file) { fputs("loaded\n", file); fclose(file); } }
}
"""
SERVER = {"host": "127.0.0.1", "port": 1, "login": "sa", "schema": "erp"}


def floor_folder() -> Path:
    """Where .ci/setup.sh installs the floor SQLAlchemy (``pip install --target``); a failure, not a skip,
    when it is missing: these runs are the point of the test."""
    folder = Path(sys.prefix) / "sqlalchemy-floor" / floor_version()
    if not (folder / "sqlalchemy" / "__init__.py").is_file():
        pytest.fail(f"SQLAlchemy {floor_version()} is not installed in {folder}: run bash .ci/setup.sh")
    return folder


def attacks(library: str) -> dict[str, dict[str, Any]]:
    """Connections whose fields name ``library`` only once percent-decoded."""
    sqlserver = {"engine": "sqlserver"}
    return {
        "password %3B on mssql": {
            "conn_type": "mssql",
            **SERVER,
            "password": f"x%3BDRIVER%3D{library}",
        },
        "password %3b, + for a space, on sqlqueue": {
            "conn_type": "sqlqueue",
            **SERVER,
            "password": f"x%3b+DRIVER%3d{library}",
            "extra": sqlserver,
        },
        "password %7D closing its braces on mssql": {
            "conn_type": "mssql",
            **SERVER,
            "password": f"p;w%7D%3BDRIVER%3D{library}%3B",
        },
        "password %7B...%7D braces on odbc": {
            "conn_type": "odbc",
            **SERVER,
            "password": f"%7Bx%7D%3BDRIVER%3D%7B{library}%7D",
        },
        "connect_options APP= on sqlqueue": {
            "conn_type": "sqlqueue",
            **SERVER,
            "extra": {**sqlserver, "connect_options": f"APP=x%3BDRIVER%3D{library}"},
        },
        "connect_options APP= on mssql": {
            "conn_type": "mssql",
            **SERVER,
            "extra": {"connect_options": f"Encrypt=no;APP=x%3BDRIVER%3D{library}"},
        },
        "odbc_connect on sqlqueue": {
            "conn_type": "sqlqueue",
            "extra": {**sqlserver, "odbc_connect": f"SERVER=127.0.0.1,1;APP=x%3BDRIVER%3D{library}"},
        },
        "odbc_connect on mssql": {
            "conn_type": "mssql",
            "extra": {"odbc_connect": f"SERVER=127.0.0.1,1;UID=sa;PWD=x%3B%20DRIVER%3D{library}"},
        },
        "extra value on odbc": {"conn_type": "odbc", **SERVER, "extra": {"APP": f"x%3BDRIVER%3D{library}"}},
    }


# The driver manager's own reading (unixODBC 2.3.11, see transport/odbc_string.py): each UTF-16 unit cut to
# its low byte (U+013B is ';', U+013D '=', U+017D '}', U+0144 'D', U+0100 ends the string), text after a
# closing brace starts a new pair, and the last DRIVER wins. Each case says what the hook must do:
# "written" (the value is braced and reaches the driver as it is: the driver manager loads the hook's own
# driver) or "refused" (a ConfigurationError before anything connects).
SEMI, EQ, CLOSE = "\u013b", "\u013d", "\u017d"


def reading_attacks(library: str) -> dict[str, tuple[dict[str, Any], str]]:
    """Connections that name ``library`` only as the driver manager reads them, and the expected outcome."""
    sqlserver = {"engine": "sqlserver"}
    smuggled = f"x{SEMI}DRIVER{EQ}{library}"
    return {
        "password U+013B/U+013D on mssql": (
            {"conn_type": "mssql", **SERVER, "password": smuggled},
            "written",
        ),
        "password U+013B/U+013D on sqlqueue": (
            {"conn_type": "sqlqueue", **SERVER, "password": smuggled, "extra": sqlserver},
            "written",
        ),
        "login U+013B/U+013D on sqlqueue": (
            {"conn_type": "sqlqueue", **SERVER, "login": smuggled, "extra": sqlserver},
            "written",
        ),
        "host U+013B/U+013D on mssql": (
            {"conn_type": "mssql", **SERVER, "host": f"127.0.0.1{SEMI}DRIVER{EQ}{library}"},
            "written",
        ),
        "schema U+013B/U+013D on mssql": ({"conn_type": "mssql", **SERVER, "schema": smuggled}, "written"),
        "connect_options value U+013B/U+013D": (
            {"conn_type": "mssql", **SERVER, "extra": {"connect_options": f"Encrypt=no;APP={smuggled}"}},
            "written",
        ),
        "password switching to a DSN": (
            {"conn_type": "mssql", **SERVER, "password": f"x{SEMI}DRIVER{EQ}{SEMI}DSN{EQ}evil"},
            "written",
        ),
        "password U+017D closing the braces": (
            {"conn_type": "mssql", **SERVER, "password": f"x{CLOSE}{SEMI}DRIVER{EQ}{library}"},
            "refused",
        ),
        "password U+0100 cutting the string": (
            {"conn_type": "mssql", **SERVER, "password": "x\u0100"},
            "refused",
        ),
        "odbc_connect U+013B/U+013D": (
            {
                "conn_type": "sqlqueue",
                "extra": {**sqlserver, "odbc_connect": f"SERVER=127.0.0.1,1;APP={smuggled}"},
            },
            "refused",
        ),
        "odbc_connect text after a closing brace": (
            {
                "conn_type": "mssql",
                "extra": {"odbc_connect": f"SERVER=127.0.0.1,1;APP={{a}}DRIVER={library}"},
            },
            "refused",
        ),
        "odbc_connect keyword U+0144 read as D": (
            {
                "conn_type": "sqlqueue",
                "extra": {**sqlserver, "odbc_connect": f"SERVER=h;\u0144RIVER={library}"},
            },
            "refused",
        ),
        "odbc_connect DMConnAttr": (
            {"conn_type": "mssql", "extra": {"odbc_connect": "SERVER=h;DMConnAttr=[105]=\\/tmp/trace.log"}},
            "refused",
        ),
        "extra value U+013B/U+013D on odbc": (
            {"conn_type": "odbc", **SERVER, "extra": {"APP": smuggled}},
            "refused",
        ),
    }


def direct(library: str) -> dict[str, Any]:
    """A connection that names ``library`` outright (the positive control of every path)."""
    return {
        "conn_type": "sqlqueue",
        **SERVER,
        "extra": {"engine": "sqlserver", "connect_options": f"Encrypt=no;Driver={{{library}}}"},
    }


# Each path of the hook that can open a database connection, as the child process runs it.
PATHS = [
    "sqlalchemy_url, get_sqlalchemy_engine().connect()",
    "inspector",
    "get_conn()",
    "get_records()",
    "run()",
    "get_df() (pandas)",
    "get_pandas_df()",
    "get_df_by_chunks() (pandas)",
    "test_connection()",
    "create_engine(get_uri())",
    "create_engine(sqlalchemy_url)",
    "PendingMessagesTrigger.run()",
    "queue_environment() for Spark, then open_transport()",
    "sqlqueue depth (CLI)",
]

GET_URI_PROBE = "the ODBC string SQLAlchemy makes of get_uri()"

_ATTEMPTS_IN_A_CHILD = r"""
import asyncio, contextlib, io, json, os, sys
import sqlalchemy
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from airflow_provider_sqlqueue.hooks.connection_url import (
    odbc_string_sqlalchemy_hands_over, sqlalchemy_decodes_odbc_connect
)
from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook


def engine_connect(hook):
    _ = hook.sqlalchemy_url
    with hook.get_sqlalchemy_engine().connect() as connection:
        connection.execute(text("SELECT 1"))


def tested_connection(hook):
    works, message = hook.test_connection()
    if not works:
        raise RuntimeError(message)


def trigger_run(hook):
    from airflow_provider_sqlqueue.transport.shared_poll import Watch
    from airflow_provider_sqlqueue.triggers.queue import PendingMessagesTrigger

    async def first_event():
        trigger = PendingMessagesTrigger("orders", hook.sqlqueue_conn_id, poll_interval=0.1)
        async for event in trigger.run():
            return event.payload

    said = []  # a real driver's failed login is transient: the trigger polls on; what each poll raised
    polled = Watch.next

    async def recorded(self):
        try:
            return await polled(self)
        except Exception as error:
            said.append(f"{type(error).__name__}: {error}")
            raise

    async def event_or_first_failure():
        task = asyncio.ensure_future(first_event())
        for _ in range(600):
            if task.done() or said:
                break
            await asyncio.sleep(0.1)
        if not task.done():
            task.cancel()
            raise RuntimeError(said[0] if said else "the trigger fired no event in 60 s")
        return task.result()

    Watch.next = recorded
    try:
        payload = asyncio.run(event_or_first_failure())
    finally:
        Watch.next = polled
    if payload["status"] != "success":
        raise RuntimeError(payload.get("message"))


def spark_environment(hook):
    from airflow_provider_sqlqueue.operators.spark_submit import queue_environment
    from airflow_provider_sqlqueue.spark.config import url_from_environment
    from airflow_provider_sqlqueue.transport import open_transport

    with open_transport(url_from_environment(queue_environment(hook))) as transport:
        transport.new_connection().close()


def cli_depth(hook):
    from airflow_provider_sqlqueue.cli import main

    said = io.StringIO()
    with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
        code = main(["depth", "--conn-id", hook.sqlqueue_conn_id, "orders"])
    if code != 0:
        raise RuntimeError(said.getvalue())



job = json.load(sys.stdin)
GET_URI_PROBE = job["get_uri_probe"]
PATHS = {
    "sqlalchemy_url, get_sqlalchemy_engine().connect()": engine_connect,
    "inspector": lambda hook: hook.inspector.get_table_names(),
    "get_conn()": lambda hook: hook.get_conn().close(),
    "get_records()": lambda hook: hook.get_records("SELECT 1"),
    "run()": lambda hook: hook.run("SELECT 1"),
    "get_df() (pandas)": lambda hook: hook.get_df("SELECT 1", df_type="pandas"),
    "get_pandas_df()": lambda hook: hook.get_pandas_df("SELECT 1"),
    "get_df_by_chunks() (pandas)": lambda hook: list(hook.get_df_by_chunks("SELECT 1", chunksize=1)),
    "test_connection()": tested_connection,
    "create_engine(get_uri())": lambda hook: create_engine(hook.get_uri()).connect().close(),
    "create_engine(sqlalchemy_url)": lambda hook: create_engine(hook.sqlalchemy_url).connect().close(),
    "PendingMessagesTrigger.run()": trigger_run,
    "queue_environment() for Spark, then open_transport()": spark_environment,
    "sqlqueue depth (CLI)": cli_depth,
    GET_URI_PROBE: lambda hook: odbc_string_sqlalchemy_hands_over(make_url(hook.get_uri())),
}
# The paths that make their own hook (the trigger, the CLI) take the deployment's default driver.
SqlQueueHook.default_odbc_driver = job["driver"]
if job["listen"]:  # a real driver: a server that hangs up at once, so that each login fails at once
    import socket, threading

    server = socket.create_server(("127.0.0.1", 0))

    def hang_up():
        while True:
            server.accept()[0].close()

    threading.Thread(target=hang_up, daemon=True).start()
    for attempt in job["attempts"]:
        if attempt["connection"].get("port") == 1:
            attempt["connection"]["port"] = server.getsockname()[1]
results = []
for number, attempt in enumerate(job["attempts"]):
    conn_id = f"rogue_{number}"
    os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(attempt["connection"])
    os.environ["SQLQUEUE_TEST_DRIVER_MARKER"] = attempt["marker"]
    if attempt["allow"]:
        os.environ["AIRFLOW__PROVIDERS_ODBC__ALLOW_DRIVER_IN_EXTRA"] = "True"
    else:
        os.environ.pop("AIRFLOW__PROVIDERS_ODBC__ALLOW_DRIVER_IN_EXTRA", None)
    hook = SqlQueueHook(sqlqueue_conn_id=conn_id, driver=job["driver"])
    try:
        returned = PATHS[attempt["path"]](hook)
        outcome = f"returned: {returned}" if isinstance(returned, str) else "connected"
    except Exception as error:
        outcome = f"{type(error).__name__}: {error}"
    finally:
        hook.close()
    results.append({"outcome": outcome, "loaded": os.path.exists(attempt["marker"])})
with open(job["results"], "w") as file:
    json.dump(
        {
            "sqlalchemy": sqlalchemy.__version__,
            "imported_from": sqlalchemy.__file__,
            "decodes_odbc_connect": sqlalchemy_decodes_odbc_connect(),
            "results": results,
        },
        file,
    )
"""

SQLALCHEMIES = ["venv", "floor"]
CASES = list(attacks("x"))
READING_CASES = list(reading_attacks("x"))
PERCENT_PASSWORD = "P%3Bw;d}{+%41 %zz"
PERCENT_CONNECTION = {"conn_type": "mssql", **SERVER, "password": PERCENT_PASSWORD}


# With the setting on, each attack goes through the hook's own engine and through SQLAlchemy's parsing.
ALLOWED_ATTACK_PATHS = [PATHS[0], "create_engine(get_uri())", "create_engine(sqlalchemy_url)"]


# The driver the code chooses: none that exists (every case), or a registered one, FreeTDS or Microsoft's
# Driver 18 (the driver manager then looks its library up in odbcinst.ini; only the cases that must load
# no library run there, since a real driver and the test library in one process crashed it).
DRIVERS = {"no driver": NO_DRIVER, "FreeTDS": "FreeTDS", "Driver 18": MSODBC_NAME}


def reading_paths(driver: str, case: str) -> list[str]:
    """The paths a reading attack runs through with ``driver``. Driver 18 waits out its login timeout
    (10 s) for a Host it cannot resolve, so the Host case runs through get_conn() alone there."""
    return ["get_conn()"] if driver == "Driver 18" and case.startswith("host") else PATHS


READING_MATRIX = [
    pytest.param(sqlalchemy, driver, case, path, id=f"{sqlalchemy}-{driver}-{case}-{path}")
    for sqlalchemy in SQLALCHEMIES
    for driver in DRIVERS
    for case in READING_CASES
    for path in reading_paths(driver, case)
]


def planned_attempts(driver: str = "no driver") -> list[tuple[str, bool, str]]:
    """(case, allowed, path) of every attempt: each attack through each path with the setting off and
    through ALLOWED_ATTACK_PATHS with it on, the direct form through each path with it on (the control),
    and get_uri() of a legitimate password; with a registered driver, the reading attacks alone."""
    if driver != "no driver":
        return [(case, False, path) for case in READING_CASES for path in reading_paths(driver, case)]
    attempts = [(case, False, path) for case in CASES for path in PATHS]
    attempts += [(case, True, path) for case in CASES for path in ALLOWED_ATTACK_PATHS]
    attempts += [("direct", True, path) for path in PATHS]
    attempts += [(case, False, path) for case in READING_CASES for path in PATHS]
    return [*attempts, ("percent password", False, GET_URI_PROBE)]


class Runs:
    """Every attempt in one child process per SQLAlchemy (the venv's and the floor's), run once for the
    module, each with a marker file of its own (see ``_connection`` for the libraries)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        compiler = shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            pytest.fail("needs a C compiler to build the library that must not be loaded (.ci/setup.sh: gcc)")
        source = folder / "rogue.c"
        source.write_text(LIBRARY_SOURCE)
        self.library = folder / "librogue.so"
        subprocess.run([compiler, "-shared", "-fPIC", "-o", str(self.library), str(source)], check=True)
        self._runs: dict[str, dict[str, Any]] = {}

    def result(
        self, sqlalchemy: str, case: str, allow: bool, path: str, driver: str = "no driver"
    ) -> tuple[dict[str, Any], dict]:
        """The child's run (its SQLAlchemy) and the outcome of one attempt: what it raised or returned,
        and whether the library was loaded."""
        key = f"{sqlalchemy}-{driver}"
        if key not in self._runs:
            self._runs[key] = self._run(sqlalchemy, driver)
        run = self._runs[key]
        return run, run["results"][planned_attempts(driver).index((case, allow, path))]

    def _connection(self, tag: str, case: str) -> dict[str, Any]:
        """The attempt's connection, naming a copy of the library of its own where the library may be
        loaded (a constructor runs once per process and library). The refusals of one attack share a copy:
        each connection's password is one more secret for Airflow's masker to match, every later one
        slower."""
        if case == "percent password":
            return PERCENT_CONNECTION
        library = self.folder / f"librogue-{tag}.so"
        if not library.exists():
            shutil.copyfile(self.library, library)
        if case in READING_CASES:
            return reading_attacks(str(library))[case][0]
        return direct(str(library)) if case == "direct" else attacks(str(library))[case]

    def _run(self, sqlalchemy: str, driver: str) -> dict[str, Any]:
        results = self.folder / f"results-{sqlalchemy}-{driver.replace(' ', '-')}.json"
        attempts = []
        for number, (case, allow, path) in enumerate(planned_attempts(driver)):
            tag = f"{sqlalchemy}-{driver.replace(' ', '-')}-{number}"
            shared = tag
            if not allow and case in CASES:
                shared = f"{sqlalchemy}-refused-{CASES.index(case)}"
            elif case in READING_CASES:
                shared = f"{sqlalchemy}-{driver.replace(' ', '-')}-reading-{READING_CASES.index(case)}"
            attempts.append(
                {
                    "path": path,
                    "allow": allow,
                    "connection": self._connection(shared, case),
                    "marker": str(self.folder / f"{tag}.marker"),
                }
            )
        env = {key: value for key, value in os.environ.items() if key not in (ALLOW_ENV, MARKER_ENV)}
        if sqlalchemy == "floor":
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(floor_folder()), env.get("PYTHONPATH")]))
        job = {
            "driver": DRIVERS[driver],
            "listen": driver != "no driver",
            "results": str(results),
            "get_uri_probe": GET_URI_PROBE,
            "attempts": attempts,
        }
        child = subprocess.run(
            [sys.executable, "-c", _ATTEMPTS_IN_A_CHILD],
            input=json.dumps(job),
            text=True,
            env=env,
            timeout=300,
            capture_output=True,
        )
        assert child.returncode == 0 and results.exists(), f"the child failed:\n{child.stderr[-4000:]}"
        run = json.loads(results.read_text())
        expected = floor_version() if sqlalchemy == "floor" else installed_version("sqlalchemy")
        assert run["sqlalchemy"] == expected, run["imported_from"]
        if sqlalchemy == "floor":
            assert run["imported_from"].startswith(str(floor_folder())), run["imported_from"]
        # SQLAlchemy 2.0 decodes odbc_connect and 2.1 does not: say which this run had, so that the
        # assertions below are about the release that was actually imported
        assert run["decodes_odbc_connect"] == (tuple(map(int, expected.split(".")[:2])) < (2, 1))
        return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(tmp_path_factory.mktemp("rogue"))


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("sqlalchemy", SQLALCHEMIES)
def test_each_path_loads_a_library_the_connection_names_when_the_deployment_allows_it(
    sqlalchemy: str, path: str, runs: Runs
) -> None:
    run, result = runs.result(sqlalchemy, "direct", True, path)
    assert result["loaded"], f"SQLAlchemy {run['sqlalchemy']}: {path} loaded nothing ({result['outcome']})"


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("sqlalchemy", SQLALCHEMIES)
def test_sqlalchemy_2_0_decodes_each_attack_into_a_driver_it_loads_when_the_deployment_allows_it(
    sqlalchemy: str, case: str, runs: Runs
) -> None:
    """The reviewer's finding, kept as the control of the refusals: an engine SQLAlchemy 2.0 makes of the
    hook's URL loads the library; 2.1's does not. The hook's own paths never do (they hand pyodbc the
    string as the hook built it), and get_uri() refuses a string SQLAlchemy would decode, setting or not."""
    for path in ALLOWED_ATTACK_PATHS:
        run, result = runs.result(sqlalchemy, case, True, path)
        expected = path == "create_engine(sqlalchemy_url)" and run["decodes_odbc_connect"]
        assert result["loaded"] == expected, f"SQLAlchemy {run['sqlalchemy']}, {path}: {result['outcome']}"
        if path == "create_engine(get_uri())" and run["decodes_odbc_connect"]:
            assert "would decode in odbc_connect" in result["outcome"], result


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("sqlalchemy", SQLALCHEMIES)
def test_a_percent_encoded_driver_is_refused_on_every_path_and_nothing_is_loaded(
    sqlalchemy: str, case: str, path: str, runs: Runs
) -> None:
    run, result = runs.result(sqlalchemy, case, False, path)
    assert not result["loaded"], f"SQLAlchemy {run['sqlalchemy']}: {path} loaded the library"
    assert "allow_driver_in_extra" in result["outcome"] and "percent-decoded" in result["outcome"], result


@pytest.mark.slow
@pytest.mark.parametrize(("sqlalchemy", "driver", "case", "path"), READING_MATRIX)
def test_a_value_the_driver_manager_reads_as_a_driver_loads_nothing_on_every_path(
    sqlalchemy: str, driver: str, case: str, path: str, runs: Runs
) -> None:
    """Written cases reach the driver manager braced, so it loads the hook's driver (which does not
    exist here: its error names it); refused ones stop before anything connects, naming the field or the
    setting. test_odbc_driver_manager.py proves that each string the hook used to write loads the library."""
    run, result = runs.result(sqlalchemy, case, False, path, driver)
    assert not result["loaded"], f"SQLAlchemy {run['sqlalchemy']}: {path} loaded the library"
    if reading_attacks("x")[case][1] == "written" and driver == "no driver":
        assert "libsqlqueue-no-driver" in result["outcome"], result
    elif reading_attacks("x")[case][1] == "written":  # the registered driver itself tried port 1
        assert "Can't open lib" not in result["outcome"], result
        assert ("[FreeTDS]" if driver == "FreeTDS" else "[Microsoft]") in result["outcome"], result
    else:
        said = result["outcome"]
        assert "unixODBC 2.3.11" in said or "allow_driver_in_extra" in said, result
        assert "libsqlqueue-no-driver" not in result["outcome"], result


@pytest.mark.slow
@pytest.mark.parametrize("sqlalchemy", SQLALCHEMIES)
def test_get_uri_is_refused_only_where_sqlalchemy_would_decode_a_password(
    sqlalchemy: str, runs: Runs
) -> None:
    """Under 2.0 an engine made of ``get_uri()`` would log in with ``P;w...A...`` instead of the password;
    under 2.1 it gets the ODBC string the hook built."""
    run, result = runs.result(sqlalchemy, "percent password", False, GET_URI_PROBE)
    if run["decodes_odbc_connect"]:
        assert result["outcome"].startswith("ConfigurationError"), result
        assert "get_sqlalchemy_engine()" in result["outcome"]
    else:
        handed = result["outcome"].removeprefix("returned: ")
        assert parse_odbc_string(handed)["PWD"] == PERCENT_PASSWORD, result


# ---- legitimate percent signs still work ----------------------------------------------------------------


def test_a_password_with_percent_escapes_reaches_pyodbc_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_PERCENT", json.dumps(PERCENT_CONNECTION))
    hook = SqlQueueHook(sqlqueue_conn_id="percent", driver="FreeTDS")
    odbc = hook.sqlalchemy_url.query["odbc_connect"]
    assert parse_odbc_string(odbc)["PWD"] == PERCENT_PASSWORD
    port = ["PORT"] if reads_port_keyword("FreeTDS") else []  # where odbcinst.ini names FreeTDS's library
    assert [key for key, _ in odbc_pairs(odbc)] == ["DRIVER", "SERVER", *port, "DATABASE", "UID", "PWD"]


# PERCENT_PASSWORD without its "}": FreeTDS does not read "}}" in a braced value as "}" (Microsoft's driver
# and psqlODBC do), so no password holding "}" logs in through FreeTDS.
LOGIN_PASSWORD = PERCENT_PASSWORD.replace("}", "")


@pytest.fixture
def percent_login(
    request: pytest.FixtureRequest, target: EngineTarget
) -> Iterator[tuple[dict[str, Any], str | None]]:
    """An Airflow connection (and the driver the code chooses) of a login whose password holds ``%``
    escapes, ``+``, ``;`` and braces, which may use the queue ``orders``; SQLite, which has no password,
    as it is."""
    password = f"{LOGIN_PASSWORD}-{secrets.token_hex(4)}"
    name = f"pct_{uuid.uuid4().hex[:8]}"
    escaped = password.replace("'", "''")
    with target.open() as admin:
        admin.queue("orders").create()
    if target.engine == "sqlite":
        yield target.airflow_connection(), None
        return
    if target.engine == "postgresql":
        server = request.getfixturevalue("postgres_server")
        server.execute(f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{escaped}'")
        server.execute(f'GRANT USAGE ON SCHEMA "{target.schema}" TO "{name}"')
        server.execute(f'GRANT SELECT, INSERT, DELETE ON ALL TABLES IN SCHEMA "{target.schema}" TO "{name}"')
        try:
            yield {**target.airflow_connection(), "login": name, "password": password}, None
        finally:
            server.execute(f'DROP OWNED BY "{name}"')
            server.execute(f'DROP ROLE "{name}"')
        return
    import pyodbc
    from conftest import _mssql_execute

    _mssql_execute(target.url, f"CREATE LOGIN [{name}] WITH PASSWORD = '{escaped}'")
    _mssql_execute(target.url, f"CREATE USER [{name}] FOR LOGIN [{name}]")
    _mssql_execute(target.url, f"GRANT SELECT, INSERT, DELETE ON SCHEMA::[{target.schema}] TO [{name}]")
    parts = parse_odbc_string(target.url)
    options = ";".join(
        f"{key}={value}"
        for key, value in parts.items()
        if key not in ("DRIVER", "SERVER", "UID", "PWD", "DATABASE")
    )
    connection = {
        "conn_type": "mssql",
        "host": parts["SERVER"],
        "schema": parts.get("DATABASE"),
        "login": name,
        "password": password,
        "extra": {"connect_options": options},
    }
    try:
        yield connection, parts["DRIVER"]
    finally:
        for statement in (f"DROP USER [{name}]", f"DROP LOGIN [{name}]"):
            with contextlib.suppress(pyodbc.Error):
                _mssql_execute(target.url, statement)


def test_every_engine_path_works_with_a_password_holding_percent_escapes(
    target: EngineTarget,
    percent_login: tuple[dict[str, Any], str | None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the real engines: the transport, the hook's SQLAlchemy engine, its inspector, the pandas helper
    and an engine of ``get_uri()`` (the venv's SQLAlchemy 2.1 does not decode) all log in with the password
    as it is, and see the same queue table."""
    from sqlalchemy import create_engine, text

    connection, driver = percent_login
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_PCT", json.dumps(connection))
    hook = SqlQueueHook(sqlqueue_conn_id="pct", driver=driver, default_schema=target.schema)
    engines = []
    try:
        if target.engine != "sqlite":
            assert "%3B" in (hook.connection.password or "")
        queue = hook.get_queue("orders")
        hook.send("orders", b"through the percent password")
        table = hook.get_transport().dialect.qualified_name(queue.address)
        count = f"SELECT COUNT(*) FROM {table}"
        assert [tuple(row) for row in hook.get_records(count)] == [(1,)]
        engines = [hook.get_sqlalchemy_engine(), create_engine(hook.get_uri())]
        for engine in engines:
            with engine.connect() as session:
                assert session.execute(text(count)).scalar() == 1
        assert queue.address.table in hook.inspector.get_table_names(schema=queue.address.schema)
        engines.append(hook.inspector.bind)
        assert int(hook.get_df(count, df_type="pandas").iloc[0, 0]) == 1
    finally:
        for engine in engines:
            engine.dispose()
        hook.close()
