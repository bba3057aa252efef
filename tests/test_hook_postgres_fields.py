"""What a PostgreSQL connection's fields may make SqlQueueHook connect to: only the server, database and
login they name, with no libpq option the hook's checks did not see, and an RDS IAM token only to the
Host, Port and Login it is signed for.

Two findings, each first reproduced (the positive controls, the hook's guard taken out), then refused:

- Fields that re-parse. SQLAlchemy 2.0 renders a database name as it is and neither 2.0 nor 2.1 escapes a
  host, so Schema ``postgres?passfile=<file>`` or Host ``127.0.0.1/postgres?port=..&passfile=<file>`` came
  back from ``hook.get_uri()`` as the libpq option ``passfile``: ``create_engine(hook.get_uri())`` and the
  Spark jobs (``queue_environment`` -> ``url_from_environment`` -> ``open_transport``) logged in with a
  password read from that file. Shown here against the session's real PostgreSQL with a connection that
  has no password and a passfile holding the right one: the login succeeds only if libpq read the file.
  Each SQLAlchemy runs in a child process (the floor release, as tests/test_hook_sqlalchemy_paths.py runs
  it, and the venv's).
- IAM tokens sent elsewhere. With ``iam`` and ``connect_options`` ``hostaddr=..;port=..`` the token signed
  for the connection's Host went to the address the options named: a fake server on 127.0.0.1 that asks
  for a clear-text password received it. The token comes from the hook's public seam (``get_iam_token``
  overridden), so no AWS is needed.

A database name holding ``=`` or a ``postgresql://`` URI is not a connection string to psycopg 3: libpq
expands a dbname only when asked to (``PQconnectdbParams`` with ``expand_dbname``), and psycopg does not
ask. That too is tested as it is: the name reaches the server as a name and nothing reaches the address
it mentions.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy_floor import floor_version

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")
pytest.importorskip("psycopg", reason="the postgres extra is not installed")

from conftest import EngineTarget
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

import airflow_provider_sqlqueue.hooks.sqlqueue as hook_module
from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_provider_sqlqueue.operators.spark_submit import queue_environment
from airflow_provider_sqlqueue.spark.config import url_from_environment
from airflow_provider_sqlqueue.transport import ConfigurationError, open_transport

REPO = Path(__file__).resolve().parent.parent
# libpq's own defaults on this machine must not log in for the attacks: no ~/.pgpass, no environment.
LIBPQ_ENVIRONMENT = (
    "PGPASSWORD",
    "PGPASSFILE",
    "PGSERVICE",
    "PGSERVICEFILE",
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
)


def set_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, connection: dict[str, Any]) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))


# ---- fields that re-parse: one child process per SQLAlchemy -----------------------------------------


def floor_folder() -> Path:
    """Where .ci/setup.sh installs the floor SQLAlchemy; a failure, not a skip, when it is missing."""
    folder = Path(sys.prefix) / "sqlalchemy-floor" / floor_version()
    if not (folder / "sqlalchemy" / "__init__.py").is_file():
        pytest.fail(f"SQLAlchemy {floor_version()} is not installed in {folder}: run bash .ci/setup.sh")
    return folder


_PATHS_IN_A_CHILD = r"""
import json, os, sys
import sqlalchemy
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url
import airflow_provider_sqlqueue.hooks.sqlqueue as hook_module
from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_provider_sqlqueue.operators.spark_submit import queue_environment
from airflow_provider_sqlqueue.spark.config import url_from_environment
from airflow_provider_sqlqueue.transport import open_transport

guard = (hook_module.reparse_refusal, hook_module.reparsed)


def through_get_uri(hook):
    with create_engine(hook.get_uri()).connect() as connection:
        return "logged in as " + connection.exec_driver_sql("SELECT current_user").scalar()


def through_the_spark_environment(hook):
    with open_transport(url_from_environment(queue_environment(hook))) as transport:
        connection = transport.new_connection()
        try:
            return "logged in as " + connection.execute("SELECT current_user").fetchone()[0]
        finally:
            connection.close()


def parsed_back(hook):
    url = make_url(hook.get_uri())
    return {"database": url.database, "query": sorted(url.query)}


PATHS = {"get_uri": through_get_uri, "spark": through_the_spark_environment, "parsed": parsed_back}
job = json.load(sys.stdin)
results = []
for number, attempt in enumerate(job["attempts"]):
    if attempt["guarded"]:
        hook_module.reparse_refusal, hook_module.reparsed = guard
    else:  # the positive control: the hook as it was before the guard
        hook_module.reparse_refusal, hook_module.reparsed = (lambda url: None), (lambda url: url)
    conn_id = f"fields_{number}"
    os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(attempt["connection"])
    hook = SqlQueueHook(sqlqueue_conn_id=conn_id)
    try:
        outcome = PATHS[attempt["path"]](hook)
    except Exception as error:
        outcome = f"{type(error).__name__}: {error}"
    finally:
        hook.close()
    results.append(outcome)
json.dump({"sqlalchemy": sqlalchemy.__version__, "results": results}, sys.stdout)
"""

SQLALCHEMIES = ["venv", "floor"]
CASES = ["Schema", "Host", "plain"]
CHILD_PATHS = ["get_uri", "spark", "parsed"]


def planned() -> list[tuple[str, bool, str]]:
    """(case, guarded, path) of every attempt of one child."""
    return [(case, guarded, path) for case in CASES for guarded in (False, True) for path in CHILD_PATHS]


class FieldRuns:
    """The attempts of each SQLAlchemy, run once per module in a child process against the session's
    PostgreSQL, with a passfile that holds the superuser's real password."""

    def __init__(self, folder: Path, server_url: str) -> None:
        self.server = make_url(server_url)
        self.passfile = folder / "other.pgpass"
        self.passfile.write_text(f"*:*:*:*:{self.server.password}\n")
        self.passfile.chmod(0o600)
        self._runs: dict[str, dict[str, Any]] = {}

    def connection(self, case: str) -> dict[str, Any]:
        """The Airflow connection of a case: the attacks have no password, only the passfile has it."""
        server = self.server
        plain = {
            "conn_type": "postgres",
            "host": server.host,
            "port": server.port,
            "login": server.username,
            "schema": server.database,
        }
        if case == "plain":
            return {**plain, "password": server.password}
        if case == "Schema":
            return {**plain, "schema": f"{server.database}?passfile={self.passfile}"}
        host = f"{server.host}/{server.database}?port={server.port}&passfile={self.passfile}"
        return {**plain, "host": host, "port": None, "schema": None}

    def result(self, sqlalchemy: str, case: str, guarded: bool, path: str) -> tuple[str, Any]:
        if sqlalchemy not in self._runs:
            self._runs[sqlalchemy] = self._run(sqlalchemy)
        run = self._runs[sqlalchemy]
        return run["sqlalchemy"], run["results"][planned().index((case, guarded, path))]

    def _run(self, sqlalchemy: str) -> dict[str, Any]:
        env = {key: value for key, value in os.environ.items() if key not in LIBPQ_ENVIRONMENT}
        env["PGPASSFILE"] = str(self.passfile.parent / "no-such.pgpass")  # not ~/.pgpass either
        if sqlalchemy == "floor":
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(floor_folder()), env.get("PYTHONPATH")]))
        attempts = [
            {"connection": self.connection(case), "guarded": guarded, "path": path}
            for case, guarded, path in planned()
        ]
        child = subprocess.run(
            [sys.executable, "-c", _PATHS_IN_A_CHILD],
            input=json.dumps({"attempts": attempts}),
            text=True,
            env=env,
            timeout=300,
            capture_output=True,
        )
        assert child.returncode == 0, f"the child failed:\n{child.stderr[-4000:]}"
        run = json.loads(child.stdout.strip().splitlines()[-1])
        expected = floor_version() if sqlalchemy == "floor" else installed_version("sqlalchemy")
        assert run["sqlalchemy"] == expected
        return run


@pytest.fixture(scope="module")
def field_runs(tmp_path_factory: pytest.TempPathFactory, postgres_server) -> FieldRuns:
    return FieldRuns(tmp_path_factory.mktemp("fields"), postgres_server.base_url)


def escapes_database_names(version: str) -> bool:
    """SQLAlchemy 2.1 percent-encodes a database name when it renders a URL; 2.0 writes it as it is."""
    return tuple(map(int, version.split(".")[:2])) >= (2, 1)


@pytest.mark.parametrize("path", ["get_uri", "spark"])
@pytest.mark.parametrize("case", ["Schema", "Host"])
@pytest.mark.parametrize("sqlalchemy", SQLALCHEMIES)
def test_without_the_guard_a_field_that_re_parses_makes_libpq_read_a_passfile(
    sqlalchemy: str, case: str, path: str, field_runs: FieldRuns
) -> None:
    """The finding, kept as the control: the connection has no password, so the login succeeds only with
    the one libpq read from the passfile the field named. SQLAlchemy 2.1 escapes a database name, so
    there the Schema attack reaches the server as a (missing) database's name and no password is read."""
    version, outcome = field_runs.result(sqlalchemy, case, False, path)
    _, parsed = field_runs.result(sqlalchemy, case, False, "parsed")
    if case == "Schema" and escapes_database_names(version):
        assert "no password supplied" in outcome, (version, outcome)
        assert parsed["query"] == [] and parsed["database"].endswith(f"?passfile={field_runs.passfile}")
    else:
        assert outcome == f"logged in as {field_runs.server.username}", (version, outcome)
        assert "passfile" in parsed["query"], parsed


@pytest.mark.parametrize("path", ["get_uri", "spark", "parsed"])
@pytest.mark.parametrize("case", ["Schema", "Host"])
@pytest.mark.parametrize("sqlalchemy", SQLALCHEMIES)
def test_a_field_that_would_re_parse_is_refused_and_no_passfile_is_read(
    sqlalchemy: str, case: str, path: str, field_runs: FieldRuns
) -> None:
    version, outcome = field_runs.result(sqlalchemy, case, True, path)
    if case == "Schema" and escapes_database_names(version):  # escaped: the name stays a name
        if path == "parsed":
            assert outcome == {"database": f"postgres?passfile={field_runs.passfile}", "query": []}
        else:
            assert "no password supplied" in outcome, (version, outcome)
        return
    assert outcome.startswith("ConfigurationError: connection 'fields_"), (version, outcome)
    assert f"its {case} field would not come back as written" in outcome
    assert "passfile= (which reads passwords from that file)" in outcome
    assert f"SQLAlchemy {version}" in outcome
    assert str(field_runs.passfile) not in outcome


@pytest.mark.parametrize("path", ["get_uri", "spark"])
@pytest.mark.parametrize("sqlalchemy", SQLALCHEMIES)
def test_an_ordinary_connection_logs_in_through_both_paths(
    sqlalchemy: str, path: str, field_runs: FieldRuns
) -> None:
    version, outcome = field_runs.result(sqlalchemy, "plain", True, path)
    assert outcome == f"logged in as {field_runs.server.username}", (version, outcome)


def test_the_refusal_names_the_field_but_never_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "s3cret?passfile=/x@y:z"  # escaped in the URL, so it comes back as it is
    connection = {
        "conn_type": "postgres",
        "host": "db.example/postgres?passfile=/tmp/other.pgpass",
        "login": "app",
        "password": secret,
    }
    set_connection(monkeypatch, "fields_secret", connection)
    with pytest.raises(ConfigurationError) as refused:
        SqlQueueHook(sqlqueue_conn_id="fields_secret").get_uri()
    message = str(refused.value)
    assert "connection 'fields_secret': its Host field would not come back" in message
    assert "Password" not in message and "s3cret" not in message


# ---- a database name is not a connection string to psycopg ------------------------------------------


class FakeServer:
    """A socket on 127.0.0.1 that answers as a PostgreSQL server asking for a clear-text password (no to
    TLS and GSS encryption, then AuthenticationCleartextPassword) and keeps every byte a client sends."""

    SSL_REQUEST, GSS_REQUEST = 80877103, 80877104

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(8)
        self.socket.settimeout(0.1)
        self.port = int(self.socket.getsockname()[1])
        self.connections = 0
        self.received = bytearray()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self.socket.accept()
            except TimeoutError:
                continue
            with self._lock:
                self.connections += 1
            with client, contextlib.suppress(OSError, struct.error):
                client.settimeout(5)
                self._ask_for_a_password(client)

    def _read(self, client: socket.socket, size: int) -> bytes:
        data = b""
        while len(data) < size and (chunk := client.recv(size - len(data))):
            data += chunk
        with self._lock:
            self.received += data
        return data

    def _ask_for_a_password(self, client: socket.socket) -> None:
        while True:  # an SSLRequest or GSSENCRequest first, then the StartupMessage
            length, code = struct.unpack("!ii", self._read(client, 8))
            self._read(client, length - 8)
            if code not in (self.SSL_REQUEST, self.GSS_REQUEST):
                break
            client.sendall(b"N")
        client.sendall(b"R" + struct.pack("!ii", 8, 3))  # AuthenticationCleartextPassword
        self._read(client, 1)  # 'p', the PasswordMessage
        (length,) = struct.unpack("!i", self._read(client, 4))
        self._read(client, length - 4)

    def stop(self) -> tuple[int, bytes]:
        """Stop listening; return how many connections came and every byte received."""
        self._stopping.set()
        self._thread.join(5)
        self.socket.close()
        with self._lock:
            return self.connections, bytes(self.received)


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    server = FakeServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("form", ["host=127.0.0.1 port={port}", "postgresql://127.0.0.1:{port}/postgres"])
@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_database_name_holding_a_connection_string_stays_a_name(
    target: EngineTarget, fake_server: FakeServer, form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If libpq expanded it, the connection would go to the fake server instead; it reaches the real one,
    which answers that no database has that name."""
    for variable in LIBPQ_ENVIRONMENT:
        monkeypatch.delenv(variable, raising=False)
    name = form.format(port=fake_server.port)
    set_connection(monkeypatch, "fields_dbname", {**target.airflow_connection(), "schema": name})
    hook = SqlQueueHook(sqlqueue_conn_id="fields_dbname")
    try:
        for attempt in (lambda: create_engine(hook.get_uri()).connect(), hook.get_conn):
            with pytest.raises(Exception, match=f'database "{re.escape(name)}" does not exist'):
                attempt()
    finally:
        hook.close()
    assert fake_server.stop() == (0, b"")


# ---- IAM tokens go only where they are signed for ----------------------------------------------------

TOKEN = "iam-token-marker-8c1f0e"


class MarkedToken(SqlQueueHook):
    """The hook with its token source replaced (the public seam): a marker to look for on the wire."""

    def get_iam_token(self) -> str:
        return TOKEN


def iam_connection(target: EngineTarget, options: str, port: int | None) -> dict[str, Any]:
    connection = target.airflow_connection(iam=True, connect_options=options)
    return {**connection, "port": port, "password": None}


REDIRECTS = {  # connect_options by what they redirect, "{port}" the fake server's
    "hostaddr and port": "hostaddr=127.0.0.1;port={port}",
    "host and port": "host=127.0.0.1;port={port}",
    "port": "port={port}",
    "service": "service=elsewhere",
}


@pytest.fixture
def redirect(
    request: pytest.FixtureRequest,
    target: EngineTarget,
    fake_server: FakeServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[str, int | None]:
    """The connect_options of one redirect and the Port field to go with it. A service file can set only
    what the URL leaves unset, so the service case sends hostaddr and port from the service file and
    leaves Port empty (the token is then signed for 5432)."""
    for variable in LIBPQ_ENVIRONMENT:
        monkeypatch.delenv(variable, raising=False)
    services = tmp_path / "pg_service.conf"
    services.write_text(f"[elsewhere]\nhostaddr=127.0.0.1\nport={fake_server.port}\n")
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    # service= reads a file, so it needs the deployment's consent; an iam connection is refused it anyway
    monkeypatch.setenv("AIRFLOW__SQLQUEUE__ALLOW_FILE_OPTIONS_IN_EXTRA", "True")
    options = REDIRECTS[request.param].format(port=fake_server.port)
    port = None if request.param == "service" else make_url(target.url).port
    return options, port


@pytest.mark.parametrize("redirect", list(REDIRECTS), indirect=True)
@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_without_the_guard_libpq_sends_the_token_where_the_options_point(
    target: EngineTarget,
    fake_server: FakeServer,
    redirect: tuple[str, int | None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The finding, kept as the control: the hook's own connection, its guard taken out, sends the token
    signed for Host (127.0.0.1) and the server's port to the fake server, in clear text."""
    options, port = redirect
    monkeypatch.setattr(hook_module, "check_iam_options", lambda options, conn_id: None)
    set_connection(monkeypatch, "iam_redirect", iam_connection(target, options, port))
    hook = MarkedToken(sqlqueue_conn_id="iam_redirect")
    try:
        with pytest.raises(Exception, match=r"server closed the connection|connection failed"):
            hook.get_conn()
    finally:
        hook.close()
    connections, received = fake_server.stop()
    assert connections >= 1 and TOKEN.encode() in received


@pytest.mark.parametrize("redirect", list(REDIRECTS), indirect=True)
@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_an_iam_connection_that_redirects_is_refused_and_nothing_reaches_the_listener(
    target: EngineTarget,
    fake_server: FakeServer,
    redirect: tuple[str, int | None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    options, port = redirect
    set_connection(monkeypatch, "iam_redirect", iam_connection(target, options, port))
    hook = MarkedToken(sqlqueue_conn_id="iam_redirect")
    key = options.split("=", 1)[0]
    attempts = {
        "get_conn": hook.get_conn,
        "get_transport": hook.get_transport,
        "depth": lambda: hook.depth("orders"),
        "get_uri": hook.get_uri,
        "get_sqlalchemy_engine": lambda: hook.get_sqlalchemy_engine().connect(),
        "queue_environment": lambda: open_transport(url_from_environment(queue_environment(hook))),
    }
    try:
        for attempt in attempts.values():
            with pytest.raises(ConfigurationError, match=f"'iam_redirect': iam with {key}= in its extras"):
                attempt()
        works, message = hook.test_connection()
        assert not works and "iam with" in message
    finally:
        hook.close()
    assert fake_server.stop() == (0, b"")


@pytest.mark.parametrize("options", ["user=someone_else", "HostAddr=127.0.0.1", "servicefile=/tmp/x"])
def test_iam_refuses_every_option_that_leaves_the_signed_host_port_and_login(
    options: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    connection = {
        "conn_type": "postgres",
        "host": "db.abc.eu-west-1.rds.amazonaws.com",
        "login": "app",
        "schema": "orders",
        "extra": {"iam": True, "connect_options": options},
    }
    set_connection(monkeypatch, "iam_options", connection)
    key = options.split("=", 1)[0].lower()
    with pytest.raises(ConfigurationError, match=f"'iam_options': iam with {key}= .*signed for the Host"):
        MarkedToken(sqlqueue_conn_id="iam_options").get_transport()


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_without_iam_the_same_options_are_the_connections_own_choice(
    target: EngineTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a token is signed for a place: a password connection may name its address in connect_options
    (here the real server's, so the login works)."""
    server = make_url(target.url)
    connection = {
        **target.airflow_connection(connect_options=f"hostaddr=127.0.0.1;port={server.port}"),
        "host": "localhost",
        "port": 1,
    }
    set_connection(monkeypatch, "no_iam", connection)
    hook = SqlQueueHook(sqlqueue_conn_id="no_iam")
    try:
        with contextlib.closing(hook.get_conn()) as own:
            assert own.execute("SELECT current_user").fetchone()[0] == server.username
    finally:
        hook.close()
