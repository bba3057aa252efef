"""What SqlQueueHook makes of an Airflow connection, where whoever edits the connection is not trusted with
the workers: no ODBC driver (a shared library) chosen by the connection unless the deployment allows it.

The driver check uses a real shared library whose constructor writes a marker file when the ODBC driver
manager loads it: each case first proves, with ``[providers.odbc] allow_driver_in_extra`` on, that the
library does get loaded, then that without the setting the hook refuses before anything connects.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")
pytest.importorskip("pyodbc", reason="the mssql extra is not installed")

from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_provider_sqlqueue.transport import ConfigurationError

ALLOW_ENV = "AIRFLOW__PROVIDERS_ODBC__ALLOW_DRIVER_IN_EXTRA"
MARKER_ENV = "SQLQUEUE_TEST_DRIVER_MARKER"
LIBRARY_SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void loaded(void) {
    const char *marker = getenv("SQLQUEUE_TEST_DRIVER_MARKER");
    if (marker) { FILE *file = fopen(marker, "w"); if (file) { fputs("loaded\n", file); fclose(file); } }
}
"""


@pytest.fixture
def rogue_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """A shared library that leaves a marker file when loaded (a fresh path per test: a library's
    constructor runs once per process and path)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("needs a C compiler to build the library that must not be loaded")
    source = tmp_path / "rogue.c"
    source.write_text(LIBRARY_SOURCE)
    library = tmp_path / "librogue.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    marker = tmp_path / "loaded.marker"
    monkeypatch.setenv(MARKER_ENV, str(marker))
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    return str(library), marker


def set_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, connection: dict) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))


_CONNECT_IN_A_CHILD = """
import json, sys
from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook
hook = SqlQueueHook(**json.load(sys.stdin))
try:
    hook.get_conn().close()
except Exception:
    pass  # the test library is no ODBC driver; what matters is whether it was loaded
finally:
    hook.close()
"""


def try_to_connect(hook: SqlQueueHook) -> None:
    """Open a DB-API connection; the server does not exist, the driver manager loads the driver first.

    Refusals come from building the connection's URL, here. The connect itself, which loads the driver,
    runs in a child process with this one's environment: a library that is no ODBC driver may crash the
    process that loads it (it did, after other drivers had been loaded in the same process).
    """
    try:
        _ = hook.sqlalchemy_url
    finally:
        hook.close()
    arguments = {"sqlqueue_conn_id": hook.sqlqueue_conn_id, "driver": hook._driver}
    subprocess.run(
        [sys.executable, "-c", _CONNECT_IN_A_CHILD],
        input=json.dumps(arguments),
        text=True,
        check=False,
        timeout=120,
        capture_output=True,
    )


SERVER = {"host": "127.0.0.1", "port": 1, "login": "sa", "password": "not-used-1", "schema": "erp"}


def injection_cases(library: str) -> dict[str, dict]:
    return {
        "odbc_driver extra": {
            "conn_type": "sqlqueue",
            **SERVER,
            "extra": {"engine": "sqlserver", "odbc_driver": library},
        },
        "driver extra on mssql": {"conn_type": "mssql", **SERVER, "extra": {"driver": library}},
        "Driver= in connect_options": {
            "conn_type": "sqlqueue",
            **SERVER,
            "extra": {"engine": "sqlserver", "connect_options": f"Encrypt=yes;Driver={{{library}}}"},
        },
        "DRIVER after a valueless fragment in connect_options": {
            "conn_type": "mssql",
            **SERVER,
            "extra": {"connect_options": f"Encrypt=yes;x;DRIVER={library}"},
        },
        "DRIVER in odbc_connect": {
            "conn_type": "sqlqueue",
            "extra": {"engine": "sqlserver", "odbc_connect": f"DRIVER={{{library}}};SERVER=127.0.0.1,1"},
        },
        "Driver extra on odbc": {"conn_type": "odbc", **SERVER, "extra": {"Driver": library}},
    }


CASES = list(injection_cases("x"))


@pytest.mark.parametrize("case", CASES)
def test_the_library_is_loaded_when_the_deployment_allows_drivers_in_connections(
    case: str, rogue_driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    library, marker = rogue_driver
    set_connection(monkeypatch, "rogue", injection_cases(library)[case])
    monkeypatch.setenv(ALLOW_ENV, "True")
    try_to_connect(SqlQueueHook(sqlqueue_conn_id="rogue"))
    assert marker.exists(), "the test library was not loaded: the refusal test below would prove nothing"


@pytest.mark.parametrize("case", CASES)
def test_a_driver_chosen_by_the_connection_is_refused_before_anything_is_loaded(
    case: str, rogue_driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    library, marker = rogue_driver
    set_connection(monkeypatch, "rogue", injection_cases(library)[case])
    hook = SqlQueueHook(sqlqueue_conn_id="rogue")
    with pytest.raises(ConfigurationError, match=r"\[providers\.odbc\] allow_driver_in_extra") as refused:
        try_to_connect(hook)
    assert "driver=" in str(refused.value) and "hook_params" in str(refused.value)
    assert not marker.exists(), "the library named by the connection was loaded"


@pytest.mark.parametrize(
    "connection",
    [
        {"conn_type": "sqlqueue", **SERVER, "extra": {"engine": "sqlserver", "connect_options": "DSN=erp"}},
        {"conn_type": "mssql", **SERVER, "extra": {"connect_options": "FileDSN=/tmp/erp.dsn"}},
        {"conn_type": "mssql", **SERVER, "extra": {"connect_options": "SAVEFILE=/tmp/erp.dsn"}},
        {"conn_type": "sqlqueue", "extra": {"engine": "sqlserver", "odbc_connect": "DSN=erp;UID=sa"}},
        {"conn_type": "odbc", **SERVER, "extra": {"dsn": "erp"}},
        {"conn_type": "odbc", **SERVER, "extra": {"Encrypt": "yes;FILEDSN=/tmp/erp.dsn"}},
        {"conn_type": "mssql", **SERVER, "password": "x%3BFILEDSN%3D/tmp/erp.dsn"},
        {
            "conn_type": "sqlqueue",
            "extra": {"engine": "sqlserver", "odbc_connect": "SERVER=h;APP=x%3bSAVEFILE%3d/tmp/erp.dsn"},
        },
        {"conn_type": "mssql", **SERVER, "extra": {"connect_options": "APP=x%253BDSN%253Derp"}},
    ],
    ids=[
        "DSN",
        "FILEDSN",
        "SAVEFILE",
        "odbc_connect DSN",
        "odbc dsn extra",
        "odbc extra value",
        "FILEDSN percent-encoded in the password",
        "SAVEFILE percent-encoded in odbc_connect",
        "DSN encoded twice in connect_options",
    ],
)
def test_data_sources_named_by_the_connection_are_refused(
    connection: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    set_connection(monkeypatch, "dsn", connection)
    with pytest.raises(ConfigurationError, match=r"allow_driver_in_extra"):
        _ = SqlQueueHook(sqlqueue_conn_id="dsn").sqlalchemy_url
    monkeypatch.setenv(ALLOW_ENV, "true")
    assert SqlQueueHook(sqlqueue_conn_id="dsn").sqlalchemy_url.query["odbc_connect"]


def test_the_driver_comes_from_the_hook_and_hook_params(
    rogue_driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    library, marker = rogue_driver
    set_connection(
        monkeypatch, "plain", {"conn_type": "sqlqueue", **SERVER, "extra": {"engine": "sqlserver"}}
    )
    assert SqlQueueHook(sqlqueue_conn_id="plain").odbc_driver == "ODBC Driver 18 for SQL Server"
    from airflow.sdk import BaseHook

    by_params = BaseHook.get_connection("plain").get_hook(hook_params={"driver": "{FreeTDS}"})
    assert isinstance(by_params, SqlQueueHook) and by_params.odbc_driver == "FreeTDS"
    chosen = SqlQueueHook(sqlqueue_conn_id="plain", driver=library)
    assert chosen.sqlalchemy_url.query["odbc_connect"].startswith(f"DRIVER={library};")
    try_to_connect(chosen)
    assert marker.exists(), "the driver the code chose was not used"


def test_a_driver_extra_naming_the_driver_in_use_anyway_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    extra = {"engine": "sqlserver", "odbc_driver": "{ODBC Driver 18 for SQL Server}"}
    set_connection(monkeypatch, "same", {"conn_type": "sqlqueue", **SERVER, "extra": extra})
    odbc = SqlQueueHook(sqlqueue_conn_id="same").sqlalchemy_url.query["odbc_connect"]
    assert odbc.startswith("DRIVER=ODBC Driver 18 for SQL Server;SERVER=127.0.0.1,1;")
    set_connection(
        monkeypatch, "other", {"conn_type": "mssql", **SERVER, "extra": {"odbc_driver": "FreeTDS"}}
    )
    assert SqlQueueHook(sqlqueue_conn_id="other", driver="FreeTDS").odbc_driver == "FreeTDS"
    with pytest.raises(ConfigurationError, match="names the ODBC driver 'FreeTDS'"):
        _ = SqlQueueHook(sqlqueue_conn_id="other").odbc_driver


def test_an_odbc_connect_without_a_driver_gets_the_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    set_connection(
        monkeypatch,
        "raw",
        {"conn_type": "sqlqueue", "extra": {"engine": "sqlserver", "odbc_connect": "SERVER=h,1433;UID=u"}},
    )
    odbc = SqlQueueHook(sqlqueue_conn_id="raw", driver="FreeTDS").sqlalchemy_url.query["odbc_connect"]
    assert odbc == "DRIVER=FreeTDS;SERVER=h,1433;UID=u"


# ---- SQLite only where the connection is a local file (point 3) ------------------------------------------
SERVER_ON_SQLITE = [
    ({"conn_type": "sqlqueue", "host": "sql.example.com", "port": 1433, "login": "app"}, "Port, Login"),
    ({"conn_type": "sqlqueue", "host": "sql.example.com", "password": "pw-12345"}, "Password"),
    ({"conn_type": "sqlqueue", "host": "sql.example.com"}, "relative path 'sql.example.com'"),
    ({"conn_type": "sqlqueue", "host": "queues.db"}, "relative path 'queues.db'"),
    ({"conn_type": "sqlite", "host": "queues.db"}, "relative path"),
    ({"conn_type": "sqlite", "host": "/tmp/queues.db", "login": "app"}, "Login"),
]


@pytest.mark.parametrize(("connection", "named"), SERVER_ON_SQLITE)
def test_sqlite_is_refused_for_a_connection_that_names_a_server(
    connection: dict, named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    if connection["conn_type"] == "sqlqueue":
        connection = {**connection, "extra": {"engine": "sqlite"}}
    set_connection(monkeypatch, "vague", connection)
    hook = SqlQueueHook(sqlqueue_conn_id="vague")
    try:
        with pytest.raises(ConfigurationError, match="choose the engine sqlserver or postgresql") as refused:
            hook.send("orders", b"must not land in a local file")
    finally:
        hook.close()
    assert named in str(refused.value)
    assert list(tmp_path.iterdir()) == [], "a file was created in the working directory"


def test_an_absolute_sqlite_file_still_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "queues.db"
    set_connection(
        monkeypatch, "file", {"conn_type": "sqlqueue", "host": str(path), "extra": {"engine": "sqlite"}}
    )
    hook = SqlQueueHook(sqlqueue_conn_id="file")
    try:
        hook.provision(["orders"])  # provisioning alone creates the file (tests/test_sqlite_file_creation.py)
        hook.send("orders", b"kept")
        assert hook.depth("orders", "exact") == 1
    finally:
        hook.close()
    assert path.exists()


def test_the_connection_form_has_no_engine_default_that_turns_a_server_into_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a new user gets who fills in the server fields of the form and leaves the rest as it is."""
    from airflow.providers_manager import ProvidersManager

    monkeypatch.chdir(tmp_path)
    widgets = ProvidersManager().connection_form_widgets
    prefix = "extra__sqlqueue__"
    fields = {
        name.removeprefix(prefix): widget for name, widget in widgets.items() if name.startswith(prefix)
    }
    assert "engine" in fields
    assert fields["engine"].field["value"] is None
    behaviour = ProvidersManager().field_behaviours["sqlqueue"]
    assert "absolute" in behaviour["relabeling"]["host"]
    saved_extra = {name: widget.field["value"] for name, widget in fields.items() if widget.field["value"]}
    connection = {"conn_type": "sqlqueue", "host": "sql.example.com", "port": 1433, "login": "app"}
    set_connection(monkeypatch, "from_form", {**connection, "extra": saved_extra})
    hook = SqlQueueHook(sqlqueue_conn_id="from_form")
    with pytest.raises(
        ConfigurationError, match="choose sqlserver, postgresql or sqlite in its Engine field"
    ):
        hook.send("orders", b"x")
    assert list(tmp_path.iterdir()) == []


# ---- the password in every form stays out of reprs and logs (point 11) ----------------------------------
PASSWORD = "Tok3n/{se;cr=et}@p#ss w+rd"


def password_forms(password: str) -> set[str]:
    """Raw, as an ODBC value (braced, ``}`` doubled), and each URL-encoded, as tests/test_secrets.py
    checks: the forms an ODBC string inside a URL can carry."""
    braced = "{" + password.replace("}", "}}") + "}"
    forms: set[str] = set()
    for text in (password, braced):
        forms |= {text, quote(text, safe=""), quote(text), quote(text, safe=" +"), quote_plus(text)}
    return forms


def shown_forms(text: str, password: str) -> list[str]:
    return sorted(form for form in password_forms(password) if form in text)


SQL_SERVER_CONNECTIONS = {
    "mssql": {"conn_type": "mssql", "host": "db.example", "port": 1433, "login": "sa", "password": PASSWORD},
    "sqlqueue": {
        "conn_type": "sqlqueue",
        "host": "db.example",
        "login": "sa",
        "password": PASSWORD,
        "extra": {"engine": "sqlserver", "connect_options": "Encrypt=yes"},
    },
    "odbc_connect": {
        "conn_type": "sqlqueue",
        "extra": {
            "engine": "sqlserver",
            "odbc_connect": "SERVER=db.example;UID=sa;PWD=" + "{" + PASSWORD.replace("}", "}}") + "}",
        },
    },
}


@pytest.mark.parametrize("case", list(SQL_SERVER_CONNECTIONS))
def test_no_form_of_a_sql_server_password_in_the_urls_repr_or_a_log_of_it(
    case: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from airflow.sdk._shared.secrets_masker import redact

    monkeypatch.delenv(ALLOW_ENV, raising=False)
    set_connection(monkeypatch, "secret_ms", SQL_SERVER_CONNECTIONS[case])
    hook = SqlQueueHook(sqlqueue_conn_id="secret_ms")
    url = hook.sqlalchemy_url
    uri = hook.get_uri()
    assert shown_forms(uri, PASSWORD), "the URL does not carry the password: nothing would be tested"
    assert "PWD%3D%7B" in uri  # the encoded form issue 15 found in the repr
    for text in (repr(url), str(url), f"{url!r}", repr(hook.get_transport())):
        assert shown_forms(text, PASSWORD) == [], text
    assert "db.example" in repr(url) and "PWD" in repr(url)
    # a log line of the full URI goes through Airflow's secrets masker
    assert shown_forms(redact(uri), PASSWORD) == []
    hook.close()


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_no_form_of_a_postgres_password_in_reprs_or_logs_while_the_hook_works(
    target, postgres_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uuid

    from airflow.sdk._shared.secrets_masker import redact

    role = f"qmask_{uuid.uuid4().hex[:8]}"
    escaped = PASSWORD.replace("'", "''")
    postgres_server.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{escaped}'")
    postgres_server.execute(f'GRANT USAGE, CREATE ON SCHEMA "{target.schema}" TO "{role}"')
    connection = {**target.airflow_connection(), "login": role, "password": PASSWORD}
    connection["extra"] = {**connection["extra"], "connect_options": "application_name=masked"}
    set_connection(monkeypatch, "secret_pg", connection)
    hook = SqlQueueHook(sqlqueue_conn_id="secret_pg")
    try:
        hook.get_transport().queue("orders").create()
        hook.send("orders", b"through the masked URL")
        assert hook.depth("orders", "exact") == 1
        uri = hook.get_uri()
        assert shown_forms(uri, PASSWORD), "the URI does not carry the password: nothing would be tested"
        for text in (repr(hook.sqlalchemy_url), str(hook.sqlalchemy_url), repr(hook.get_transport())):
            assert shown_forms(text, PASSWORD) == [], text
        assert shown_forms(redact(uri), PASSWORD) == []
        assert shown_forms(redact(f"connecting with password={PASSWORD}"), PASSWORD) == []
    finally:
        hook.close()
        postgres_server.execute(f'DROP OWNED BY "{role}"')
        postgres_server.execute(f'DROP ROLE "{role}"')


# ---- an mssql connection reused through pyodbc, as docs/connections.md says (point 8) --------------------
def test_a_reused_mssql_connection_becomes_the_odbc_string_the_docs_show(
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    page = (Path(__file__).resolve().parent.parent / "docs" / "connections.md").read_text()
    documented = re.search(r"<!-- mssql-reuse-odbc -->`([^`]+)`", page)
    assert documented, "docs/connections.md does not show what a reused mssql connection becomes"
    assert "TrustServerCertificate=yes" in page and "ODBC Driver 18 encrypts by default" in page
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    connection = {
        "conn_type": "mssql",
        "host": "sql.example.com",
        "port": 1433,
        "login": "sqlqueue_app",
        "password": "change-me",
        "schema": "erp",
    }
    set_connection(monkeypatch, "reused", connection)
    assert SqlQueueHook(sqlqueue_conn_id="reused").sqlalchemy_url.query["odbc_connect"] == documented.group(1)
    set_connection(monkeypatch, "reused", {**connection, "extra": {"sqlalchemy_scheme": "mssql+pymssql"}})
    assert SqlQueueHook(sqlqueue_conn_id="reused").sqlalchemy_url.query["odbc_connect"] == documented.group(1)


# ---- PostgreSQL: no file or library chosen through libpq options ------------------------------------------
FILE_OPTIONS_ENV = "AIRFLOW__SQLQUEUE__ALLOW_FILE_OPTIONS_IN_EXTRA"


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"connect_options": "sslkeylogfile={folder}/keys.log"}, "sslkeylogfile"),
        ({"connect_options": "application_name=x;SSLKeyLogFile={folder}/keys.log"}, "sslkeylogfile"),
        ({"connect_options": "service=erp"}, "service"),
        ({"connect_options": "passfile={folder}/pgpass"}, "passfile"),
        ({"sslkey": "rogue_engine:key-1"}, "sslkey"),
        ({"connect_options": "sslkey={folder}/a:b"}, "sslkey"),
    ],
    ids=["sslkeylogfile", "key case", "service", "passfile", "sslkey engine extra", "sslkey engine option"],
)
@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_libpq_options_naming_files_or_engines_are_refused_before_connecting(
    target, extra: dict, named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(FILE_OPTIONS_ENV, raising=False)
    extra = {key: value.format(folder=tmp_path) for key, value in extra.items()}
    connection = target.airflow_connection()
    set_connection(monkeypatch, "pg_files", {**connection, "extra": {**connection["extra"], **extra}})
    hook = SqlQueueHook(sqlqueue_conn_id="pg_files")
    try:
        with pytest.raises(ConfigurationError, match=r"allow_file_options_in_extra") as refused:
            hook.send("orders", b"must not connect")
    finally:
        hook.close()
    assert f"{named}=" in str(refused.value).lower()
    assert list(tmp_path.iterdir()) == [], "a file was written"


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_passfile_in_the_extras_is_read_only_where_the_deployment_allows_it(
    target, postgres_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The positive control for the refusals above: libpq does read the file the connection names."""
    import uuid

    role = f"qpass_{uuid.uuid4().hex[:8]}"
    secret = uuid.uuid4().hex
    postgres_server.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{secret}'")
    postgres_server.execute(f'GRANT USAGE, CREATE ON SCHEMA "{target.schema}" TO "{role}"')
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"*:*:*:{role}:{secret}\n")
    passfile.chmod(0o600)
    connection = {**target.airflow_connection(), "login": role, "password": None}
    connection["extra"] = {**connection["extra"], "connect_options": f"passfile={passfile}"}
    set_connection(monkeypatch, "pg_passfile", connection)
    try:
        monkeypatch.setenv(FILE_OPTIONS_ENV, "True")
        allowed = SqlQueueHook(sqlqueue_conn_id="pg_passfile")
        try:
            allowed.get_transport().queue("orders").create()
            allowed.send("orders", b"logged in with the passfile's password")
            assert allowed.depth("orders", "exact") == 1
        finally:
            allowed.close()
        monkeypatch.delenv(FILE_OPTIONS_ENV)
        refused = SqlQueueHook(sqlqueue_conn_id="pg_passfile")
        try:
            with pytest.raises(ConfigurationError, match="passfile="):
                refused.depth("orders", "exact")
        finally:
            refused.close()
    finally:
        postgres_server.execute(f'DROP OWNED BY "{role}"')
        postgres_server.execute(f'DROP ROLE "{role}"')


# ---- an mssql connection made in the mssql provider's form, used for send and receive on Babelfish ---------
# Airflow's connection form: its standard fields, by their default labels; a provider hides or relabels them.
STANDARD_FORM_FIELDS = {"host": "Host", "schema": "Schema", "login": "Login", "password": "Password"}
STANDARD_FORM_FIELDS |= {"port": "Port", "extra": "Extra"}


def mssql_form() -> dict[str, str]:
    """The fields the mssql connection form shows, label -> connection field, as the mssql provider
    declares them to Airflow (its hidden fields, its relabelling and its own widgets). Provider 4.7
    declares the form in its provider info, which Airflow 3.3 reads into ``field_behaviours``; Airflow 3.0
    reads only a hook class's ``get_ui_field_behaviour``, so there the declaration is read directly."""
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    provider = manager.providers["apache-airflow-providers-microsoft-mssql"]
    (declared,) = [kind for kind in provider.data["connection-types"] if kind["connection-type"] == "mssql"]
    behaviour = manager.field_behaviours.get("mssql") or declared.get("ui-field-behaviour", {})
    hidden = set(behaviour.get("hidden_fields", []))
    labels = {
        field: behaviour.get("relabeling", {}).get(field, label)
        for field, label in STANDARD_FORM_FIELDS.items()
    }
    form = {label: field for field, label in labels.items() if field not in hidden}
    widgets = [name for name in manager.connection_form_widgets if name.startswith("extra__mssql__")]
    form.update({manager.connection_form_widgets[name].field.label.text: name for name in widgets})
    return form


@pytest.mark.parametrize("target", ["sqlserver-freetds", "sqlserver-msodbc"], indirect=True)
def test_an_mssql_connection_made_in_the_mssql_providers_form_sends_and_receives(
    target, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlserver_bed import FREETDS_LIBRARY, MSODBC_NAME

    bed = request.getfixturevalue("sqlserver_bed")
    form = mssql_form()
    assert {"Host", "Port", "Login", "Password", "Database", "Extra"} <= set(form), form
    # The Port field: the hook writes it as FreeTDS reads it (PORT=) and as Microsoft's driver does
    # (SERVER=host,port), told apart by the driver's library.
    through_freetds = target.driver == "freetds"
    driver = str(FREETDS_LIBRARY) if through_freetds else MSODBC_NAME
    connect_options = (
        "TDS_Version=7.4;ClientCharset=UTF-8"
        if through_freetds
        else f"Encrypt={bed.encrypt};TrustServerCertificate=yes"
    )
    typed = {
        "Host": bed.host,
        "Port": bed.port,
        "Login": bed.user,
        "Password": bed.password,
        "Database": bed.database,
        "Extra": json.dumps({"default_schema": target.schema, "connect_options": connect_options}),
    }
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    set_connection(
        monkeypatch, "mssql_form", {"conn_type": "mssql", **{form[k]: v for k, v in typed.items()}}
    )
    hook = SqlQueueHook(sqlqueue_conn_id="mssql_form", driver=driver)
    try:
        assert hook.engine == "sqlserver"
        created = hook.provision(["orders", "error"])["created"]
        assert sorted(address.partition("@")[0] for address in created) == ["error", "orders"]
        sent = hook.send(
            "orders", "placed through an mssql connection", {"NServiceBus.ContentType": "text/plain"}
        )
        with hook.receive("orders", max_messages=5) as batch:
            received = [
                (str(message.id), message.body, message.headers["NServiceBus.ContentType"])
                for message in batch
            ]
        assert received == [(sent, b"placed through an mssql connection", "text/plain")]
        assert hook.depth("orders", count_mode="exact") == 0
    finally:
        hook.close()


def test_the_port_field_is_written_as_each_driver_reads_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """FreeTDS reads the port from PORT, not from SERVER=host,port as Microsoft's drivers do: the hook asks
    unixODBC which library the driver is (a path as given, or its odbcinst.ini section's Driver entry, under
    whatever name the section has)."""
    from sqlserver_bed import FREETDS_LIBRARY

    from airflow_provider_sqlqueue.transport.odbc_drivers import driver_library, reads_port_keyword

    # unixODBC reads ODBCSYSINI once per process: a section under a name of its own, in a process of its own
    (tmp_path / "odbcinst.ini").write_text(f"[Company TDS]\nDriver={FREETDS_LIBRARY}\n")
    probe = (
        "from airflow_provider_sqlqueue.transport.odbc_drivers import driver_library, reads_port_keyword\n"
        "print(driver_library('Company TDS'), reads_port_keyword('{Company TDS}'),"
        " driver_library('ODBC Driver 18 for SQL Server'))"
    )
    read = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "ODBCSYSINI": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert read.stdout.split() == [str(FREETDS_LIBRARY), "True", "None"], read
    assert reads_port_keyword(str(FREETDS_LIBRARY))
    assert not reads_port_keyword("/opt/microsoft/msodbcsql18/lib64/libmsodbcsql-18.so")
    assert driver_library("no such driver here") is None and not reads_port_keyword("no such driver here")
    monkeypatch.setenv(ALLOW_ENV, "true")
    connection = {"conn_type": "mssql", "host": "sql.example.com", "port": 14330, "login": "app"}
    expected = {
        str(FREETDS_LIBRARY): "SERVER=sql.example.com;PORT=14330;",
        "ODBC Driver 18 for SQL Server": "SERVER=sql.example.com,14330;",
    }
    for driver, server in expected.items():
        set_connection(monkeypatch, "ported", {**connection, "extra": {"odbc_driver": driver}})
        built = SqlQueueHook(sqlqueue_conn_id="ported").sqlalchemy_url.query["odbc_connect"]
        assert server in built, (driver, built)
