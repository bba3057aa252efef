"""SqlQueueHook's token logins: Microsoft Entra ID through ODBC Driver 18's ``Authentication`` keyword (an
allow-list of values, refused otherwise wherever the connection puts it) and RDS IAM tokens for PostgreSQL
(extra ``iam``), fetched for each new connection through the transport's connection factory.

Nothing here reaches Azure or AWS. What runs: the ``Authentication`` keyword handed to Microsoft's ODBC
Driver 18 against Babelfish (``SqlPassword``, the one value a non-Azure server answers), and the IAM path's
mechanics against a real PostgreSQL role whose password changes, with the token source replaced through
the hook's public seam (``get_iam_token`` overridden in a subclass), not a database mock.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import uuid
from pathlib import Path

import pytest

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")

from airflow_provider_sqlqueue.get_provider_info import get_provider_info
from airflow_provider_sqlqueue.hooks.cloud_logins import ENTRA_AUTHENTICATION
from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_provider_sqlqueue.transport import ConfigurationError, TransientDatabaseError


def set_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, connection: dict) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))


def sqlserver_connection(**extra: object) -> dict:
    return {
        "conn_type": "sqlqueue",
        "host": "sql.example",
        "port": 1433,
        "schema": "sales",
        "login": "11111111-2222-3333-4444-555555555555",
        "extra": {"engine": "sqlserver", **extra},
    }


# ---- Microsoft Entra ID: the Authentication keyword ---------------------------------------------------
def test_an_allowed_authentication_is_written_as_the_driver_spells_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_connection(monkeypatch, "entra", sqlserver_connection(authentication="activedirectorymsi"))
    odbc = str(SqlQueueHook(sqlqueue_conn_id="entra").sqlalchemy_url.query["odbc_connect"])
    assert "AUTHENTICATION=ActiveDirectoryMsi" in odbc.split(";")
    assert "PWD=" not in odbc  # a managed identity needs no password


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("ActiveDirectoryInteractive", "sign-in window"),
        ("ActiveDirectoryDefault", "Microsoft.Data.SqlClient"),
        ("ActiveDirectoryManagedIdentity", "ActiveDirectoryMsi"),
        ("/opt/lib/libauth.so", "not one of the values"),
    ],
)
@pytest.mark.parametrize(
    "where", ["extra", "connect_options", "odbc_connect", "odbc_connect encoded", "odbc connection's extra"]
)
def test_an_authentication_outside_the_allow_list_is_refused_wherever_it_is(
    monkeypatch: pytest.MonkeyPatch, value: str, why: str, where: str
) -> None:
    if where == "extra":
        connection = sqlserver_connection(authentication=value)
    elif where == "connect_options":
        connection = sqlserver_connection(connect_options=f"Encrypt=yes;Authentication={value}")
    elif where == "odbc connection's extra":  # OdbcHook writes its extras into the ODBC string
        connection = {**sqlserver_connection(), "conn_type": "odbc", "extra": {"Authentication": value}}
    else:
        pair = f"Authentication={value}" if where == "odbc_connect" else f"x=1%3BAuthentication%3D{value}"
        connection = sqlserver_connection(odbc_connect=f"SERVER=sql.example;DATABASE=sales;{pair}")
    set_connection(monkeypatch, "entra_refused", connection)
    hook = SqlQueueHook(sqlqueue_conn_id="entra_refused")
    with pytest.raises(ConfigurationError, match=f"Authentication=.*{why}"):
        hook.get_transport()


def test_the_connection_form_offers_the_allowed_values() -> None:
    fields = get_provider_info()["connection-types"][0]["conn-fields"]
    offered = [value for value in fields["authentication"]["schema"]["enum"] if value is not None]
    assert offered == list(ENTRA_AUTHENTICATION.values())


@pytest.mark.parametrize("target", ["sqlserver-msodbc"], indirect=True)
def test_the_authentication_keyword_reaches_odbc_driver_18(target, monkeypatch: pytest.MonkeyPatch) -> None:
    """Executed on Babelfish: Microsoft's driver takes ``Authentication=SqlPassword`` and logs in; a value
    the driver would reject never gets that far (the refusals above)."""
    connection = target.airflow_connection()
    connection["extra"]["odbc_connect"] = f"{target.url};Authentication=sqlpassword"
    set_connection(monkeypatch, "entra_babelfish", connection)
    monkeypatch.setenv("AIRFLOW__PROVIDERS_ODBC__ALLOW_DRIVER_IN_EXTRA", "True")
    hook = SqlQueueHook(sqlqueue_conn_id="entra_babelfish")
    try:
        hook.get_transport().queue("entra").create()
        hook.send("entra", b"logged in with Authentication=SqlPassword")
        assert hook.depth("entra", "exact") == 1
    finally:
        hook.close()


# ---- RDS IAM tokens ----------------------------------------------------------------------------------
class TokenFromFile(SqlQueueHook):
    """The hook with its token source replaced (the public seam): the token is whatever the file says now."""

    token_file: Path
    tokens_fetched = 0

    def get_iam_token(self) -> str:
        type(self).tokens_fetched += 1
        return self.token_file.read_text()


@pytest.fixture
def iam_role(postgres_server, target):
    role = f"qiam_{uuid.uuid4().hex[:8]}"
    postgres_server.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD 'token-one-{role}'")
    postgres_server.execute(f'GRANT USAGE, CREATE ON SCHEMA "{target.schema}" TO "{role}"')
    try:
        yield role
    finally:
        postgres_server.execute(f'DROP OWNED BY "{role}"')
        postgres_server.execute(f'DROP ROLE "{role}"')


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_an_iam_connection_fetches_a_token_for_each_new_connection(
    target, postgres_server, iam_role: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connection = {**target.airflow_connection(iam=True), "login": iam_role, "password": "not-the-token"}
    set_connection(monkeypatch, "rds_iam", connection)
    token_file = tmp_path / "token"
    token_file.write_text(f"token-one-{iam_role}")
    hook_class = type("Hook", (TokenFromFile,), {"token_file": token_file, "tokens_fetched": 0})
    hook = hook_class(sqlqueue_conn_id="rds_iam")
    try:
        assert hook.sqlalchemy_url.password is None  # the connection's Password is not the login
        hook.get_transport().queue("orders").create()
        hook.send("orders", b"with the first token")
        fetched = hook_class.tokens_fetched
        assert fetched >= 1

        postgres_server.execute(f"ALTER ROLE \"{iam_role}\" PASSWORD 'token-two-{iam_role}'")
        token_file.write_text(f"token-two-{iam_role}")
        postgres_server.execute(
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{iam_role}'"
        )
        with contextlib.suppress(TransientDatabaseError):  # the first use may meet a dead pooled connection
            hook.depth("orders", "exact")
        hook.send("orders", b"with the second token")
        assert hook.depth("orders", "exact") == 2
        assert hook_class.tokens_fetched > fetched

        with contextlib.closing(hook.get_conn()) as own:  # get_conn's connections log in with a token too
            assert own.execute("SELECT current_user").fetchone()[0] == iam_role
        with hook.get_sqlalchemy_engine().connect() as engine_connection:
            assert engine_connection.exec_driver_sql("SELECT current_user").scalar() == iam_role
    finally:
        hook.close()


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_an_iam_connection_without_the_amazon_provider_says_what_to_install(
    target, monkeypatch: pytest.MonkeyPatch
) -> None:
    if importlib.util.find_spec("airflow.providers.amazon") is not None:
        pytest.skip("the Amazon provider is installed here: the token would be asked of AWS")
    set_connection(monkeypatch, "rds_iam_bare", {**target.airflow_connection(iam=True), "login": "app"})
    hook = SqlQueueHook(sqlqueue_conn_id="rds_iam_bare")
    try:
        with pytest.raises(ConfigurationError, match=r"airflow-provider-sqlqueue\[aws\]"):
            hook.depth("orders")
    finally:
        hook.close()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"extra": {"redshift": True}}, "Redshift"),
        ({"extra": {"azure_conn_id": "azure_default"}}, "Azure Database for PostgreSQL"),
        ({"login": None}, "needs the database user in Login"),
    ],
)
def test_iam_settings_this_hook_cannot_honour_are_refused(
    monkeypatch: pytest.MonkeyPatch, changes: dict, message: str
) -> None:
    connection = {
        "conn_type": "postgres",
        "host": "db.abc.eu-west-1.rds.amazonaws.com",
        "login": "app",
        "schema": "orders",
    }
    connection["extra"] = {"iam": "true", **changes.pop("extra", {})}
    set_connection(monkeypatch, "rds_iam_refused", {**connection, **changes})
    with pytest.raises(ConfigurationError, match=message):
        SqlQueueHook(sqlqueue_conn_id="rds_iam_refused").get_transport()
