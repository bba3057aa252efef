"""SQL Server error classification, on pyodbc's own exception types carrying SQL Server's messages.

The messages are the ones Microsoft's ODBC driver raises (SQLSTATE, then the text with the native error
number in parentheses); the live suite (SQLQUEUE_TEST_MSSQL) meets the real ones.
"""

from __future__ import annotations

import pytest

pyodbc = pytest.importorskip("pyodbc", reason="pyodbc (the mssql extra) is not installed")

from airflow_provider_sqlqueue.dialects.sqlserver import SqlServerDialect, native_errors  # noqa: E402
from airflow_provider_sqlqueue.transport import (  # noqa: E402
    ConfigurationError,
    PermissionDenied,
    QueueAddress,
    QueueNotFound,
    TransientDatabaseError,
)

DIALECT = SqlServerDialect()
ADDRESS = QueueAddress("orders", "dbo")
PREFIX = "[Microsoft][ODBC Driver 18 for SQL Server][SQL Server]"


def odbc_error(kind: type, sqlstate: str, text: str, number: int) -> Exception:
    return kind(sqlstate, f"[{sqlstate}] {PREFIX}{text} ({number}) (SQLExecDirectW)")


@pytest.mark.parametrize(
    ("error", "expected", "says"),
    [
        (
            odbc_error(
                pyodbc.Error,
                "40001",
                "Transaction (Process ID 57) was deadlocked on lock resources with another process and has "
                "been chosen as the deadlock victim. Rerun the transaction.",
                1205,
            ),
            TransientDatabaseError,
            "deadlock",
        ),
        (
            odbc_error(pyodbc.ProgrammingError, "42S02", "Invalid object name 'dbo.orders'.", 208),
            QueueNotFound,
            "create the queue",
        ),
        (
            odbc_error(
                pyodbc.ProgrammingError, "42000", 'The specified schema name "x" either does not exist', 2760
            ),
            QueueNotFound,
            "create the queue",
        ),
        (
            odbc_error(
                pyodbc.ProgrammingError,
                "42000",
                "The SELECT permission was denied on the object 'orders'",
                229,
            ),
            PermissionDenied,
            "db_datareader",
        ),
        (
            odbc_error(
                pyodbc.ProgrammingError, "42000", "CREATE TABLE permission denied in database 'q'.", 262
            ),
            PermissionDenied,
            "CREATE TABLE",
        ),
        (
            odbc_error(pyodbc.Error, "HYT00", "Lock request time out period exceeded.", 1222),
            TransientDatabaseError,
            "lock request timeout",
        ),
        (
            odbc_error(
                pyodbc.ProgrammingError,
                "42000",
                "You can only specify the READPAST lock in the READ COMMITTED or REPEATABLE READ "
                "isolation levels.",
                650,
            ),
            ConfigurationError,
            "READ COMMITTED",
        ),
        (
            pyodbc.OperationalError(
                "08S01",
                "[08S01] [Microsoft][ODBC Driver 18 for SQL Server]TCP Provider: Error code 0x68 (104) "
                "(SQLExecDirectW)",
            ),
            TransientDatabaseError,
            "connection",
        ),
    ],
    ids=["1205", "208", "2760", "229", "262", "1222", "650", "08S01"],
)
def test_sql_server_errors_are_classified(error: Exception, expected: type, says: str) -> None:
    translated = DIALECT.classify(error, ADDRESS)
    assert isinstance(translated, expected)
    assert says in str(translated)
    assert "orders" in str(translated)


def test_already_exists_errors_are_recognised_for_concurrent_creators() -> None:
    table = odbc_error(pyodbc.ProgrammingError, "42S01", "There is already an object named 'orders'", 2714)
    index = odbc_error(
        pyodbc.ProgrammingError, "42S11", "The operation failed because an index already exists", 1913
    )
    other = odbc_error(pyodbc.ProgrammingError, "42000", "Incorrect syntax near 'x'.", 102)
    assert DIALECT.is_already_exists(table) and DIALECT.is_already_exists(index)
    assert not DIALECT.is_already_exists(other)
    assert DIALECT.classify(other, ADDRESS) is None


def test_native_error_numbers_are_read_from_the_message() -> None:
    assert native_errors(odbc_error(pyodbc.Error, "23000", "Cannot insert the value NULL", 515)) == {515}
    assert DIALECT.classify(ValueError("not a driver error")) is None
