"""Opening transports: URL forms, ODBC strings, clear configuration errors, and no password in repr."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from sqlalchemy.engine import make_url

from airflow_provider_sqlqueue.transport import ConfigurationError, open_transport
from airflow_provider_sqlqueue.transport.connection import odbc_connection_string, parse_odbc_string


def test_sqlite_file_url(tmp_path) -> None:
    with open_transport(f"sqlite:///{tmp_path}/q.db") as transport:
        assert transport.dialect.name == "sqlite"
        queue = transport.queue("orders")
        queue.create()
        queue.send(b"x")
        assert queue.count() == 1
    assert (tmp_path / "q.db").exists()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite://", "in-memory"),
        ("sqlite:///:memory:", "in-memory"),
        ("sqlite:////no/such/folder/q.db", "does not exist"),
        ("oracle://u:p@h/db", "unsupported database"),
        ("postgresql+asyncpg://u@h/db", "psycopg"),
        ("mssql+pymssql://u@h/db", "pyodbc"),
        ("", "needs a database URL"),
        ("::not a url::", "cannot parse"),
    ],
)
def test_bad_urls_are_refused_clearly(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        open_transport(url)


def test_postgres_password_with_special_characters_and_no_leak(postgres_server) -> None:
    password = "p@ss:w/rd%?#&'"
    postgres_server.execute("DROP ROLE IF EXISTS quirky")
    postgres_server.execute(
        f"CREATE ROLE quirky LOGIN SUPERUSER PASSWORD '{password.replace(chr(39), chr(39) * 2)}'"
    )
    base = make_url(postgres_server.base_url)
    url = f"postgresql://quirky:{quote(password, safe='')}@{base.host}:{base.port}/{base.database}"
    with open_transport(url) as transport:
        assert password not in repr(transport)
        assert "***" in repr(transport)
        queue = transport.queue("quirky_q@[public]")
        queue.create()
        queue.send(b"ok")
        assert queue.count() == 1
        queue.drop()


def test_wrong_postgres_password_is_a_clear_transient_error(postgres_server) -> None:
    from airflow_provider_sqlqueue.transport import TransientDatabaseError

    base = make_url(postgres_server.base_url)
    url = f"postgresql://postgres:wrong@{base.host}:{base.port}/{base.database}"
    with open_transport(url) as transport, pytest.raises(TransientDatabaseError, match="password") as caught:
        transport.queue("x").count()
    assert "wrong" not in str(caught.value).replace("wrong@", "")


def test_odbc_string_from_url() -> None:
    url = make_url(
        "mssql+pyodbc://sa:S3cret%3B%7D@db.example:1433/erp?driver=ODBC+Driver+18+for+SQL+Server"
        "&TrustServerCertificate=yes"
    )
    text = odbc_connection_string(url)
    assert text == (
        "DRIVER=ODBC Driver 18 for SQL Server;SERVER=db.example,1433;DATABASE=erp;UID=sa;"
        "PWD={S3cret;}}};TrustServerCertificate=yes"
    )
    assert parse_odbc_string(text)["PWD"] == "S3cret;}"


def test_odbc_connect_passthrough_and_dsn() -> None:
    raw = "DRIVER={FreeTDS};SERVER=h;PORT=1433;DATABASE=q;UID=u;PWD=p"
    assert odbc_connection_string(make_url(f"mssql+pyodbc:///?odbc_connect={quote(raw)}")) == raw
    assert odbc_connection_string(make_url("mssql+pyodbc://u:p@mydsn")) == "DSN=mydsn;UID=u;PWD=p"


def test_bare_odbc_string_opens_a_sql_server_transport_without_connecting() -> None:
    transport = open_transport("DRIVER={FreeTDS};SERVER=127.0.0.1;PORT=1;DATABASE=erp;UID=u;PWD=secret")
    assert transport.dialect.name == "sqlserver"
    assert transport.database == "erp"
    assert "secret" not in repr(transport)
    assert str(transport.queue("orders@[sales]").address) == "orders@[sales]"
    assert transport.resolve("orders").schema == "dbo"


def test_odbc_passwords_stay_out_of_the_description() -> None:
    raw = "DRIVER={FreeTDS};SERVER=db.example;DATABASE=erp;UID=u;PWD={Pa55;word}"
    for url in (
        f"mssql+pyodbc:///?odbc_connect={quote(raw)}",
        raw,
        f"postgresql+pyodbc:///?odbc_connect={quote(raw)}",
    ):
        transport = open_transport(url)
        assert "Pa55" not in repr(transport) and "db.example/erp" in repr(transport)
