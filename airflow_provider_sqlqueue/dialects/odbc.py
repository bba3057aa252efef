"""PostgreSQL and SQLite reached through ODBC (pyodbc + unixODBC), each with its engine's own SQL.

They exist so that the pyodbc code path — ``?`` parameters, Unicode and binary binding, reading rows that a
DELETE returns, draining result sets, classifying errors by SQLSTATE — runs for real on machines where SQL
Server cannot (psqlODBC and the SQLite3 ODBC driver are Debian packages), and for users whose only way
into a database is ODBC. URLs: ``postgresql+pyodbc:///?odbc_connect=...`` and
``sqlite+pyodbc:///?odbc_connect=...``.

The SQLite ODBC driver runs ``DELETE ... RETURNING`` but then reports "No results": the rows would be gone
and never handed out. So over ODBC, SQLite receives by selecting the oldest rows and deleting exactly
those in the same transaction, and refuses the batch unless the DELETE removed every row it selected.
"""

from __future__ import annotations

import re
import sqlite3
from datetime import datetime, timedelta
from typing import Any

from ..model.address import QueueAddress
from ..model.errors import (
    PermissionDenied,
    QueueNotFound,
    SqlQueueError,
    TransientDatabaseError,
)
from .base import fetch_over_odbc
from .postgres import _TRANSIENT_SQLSTATES, PostgresDialect
from .postgres_reference import PostgresReferenceLayout
from .sqlite import SqliteDialect
from .transaction_state import TransactionState

_PLACEHOLDER = re.compile(r"%(%|s)")
_CONNECTION_SQLSTATES = {"08S01", "08001", "08003", "08004", "08007", "HYT00", "HYT01"}


def _sqlstate(error: BaseException) -> str:
    args = getattr(error, "args", ())
    return str(args[0]) if args else ""


def _detail(error: BaseException) -> str:
    args = getattr(error, "args", ())
    return str(args[1] if len(args) > 1 else error).strip()


class _Pyodbc:
    """What every dialect spoken through pyodbc shares."""

    driver_connection_class = "pyodbc.Connection"
    sqlalchemy_dialect = None  # SQLAlchemy has no dialect for PostgreSQL or SQLite over pyodbc

    def row_id(self, value: Any) -> Any:
        return str(value)

    def prepare_connection(self, connection: Any) -> None:
        connection.autocommit = False

    def transaction_state(self, connection: Any) -> TransactionState:
        """UNKNOWN: pyodbc does not expose the driver's transaction status, and neither psqlODBC nor the
        SQLite3 driver lets a query tell whether the transaction the statements began in is still open."""
        return TransactionState.UNKNOWN

    def fetch_rows(self, cursor: Any) -> list[Any]:
        return fetch_over_odbc(cursor)

    def is_connection_lost(self, error: BaseException) -> bool:
        import pyodbc

        return isinstance(error, pyodbc.OperationalError) or _sqlstate(error) in _CONNECTION_SQLSTATES


class PostgresOverOdbc(_Pyodbc, PostgresDialect):
    """PostgreSQL's statements with ``?`` parameters, for psqlODBC.

    Its sends notify like psycopg's, but ODBC has no way to wait for a notification: receivers poll.
    """

    placeholder = "?"
    odbc_dbms_name = "PostgreSQL"

    def listen_statement(self, address: QueueAddress) -> None:
        return None

    def prepare_connection(self, connection: Any) -> None:
        PostgresDialect.prepare_connection(self, connection)

    def sql_list(
        self, name: str, address: QueueAddress | None = None, /, rows: int | None = None, **values: str
    ) -> list[str]:
        """PostgreSQL's statement in pyodbc's parameter style: every statement is rendered here."""
        return [_to_qmark(text) for text in super().sql_list(name, address, rows, **values)]

    def display_sql(self, sql: str) -> str:
        return sql

    def bulk_send_check(self, address: QueueAddress) -> None:
        return None  # binary COPY is psycopg's; over ODBC batches take the multi-row INSERT

    def expires_params(self, time_to_be_received: timedelta | None) -> tuple[Any, ...]:
        return (None if time_to_be_received is None else f"{time_to_be_received.total_seconds()} seconds",)

    def store_delayed_params(
        self, headers: str, body: bytes, deliver_at: datetime | None, delay: timedelta | None
    ) -> tuple[Any, ...]:
        at = None if deliver_at is None else deliver_at.isoformat()  # with its offset: no session zone
        interval = None if delay is None else f"{delay.total_seconds()} seconds"
        return (headers, body, at, interval)

    def classify(self, error: BaseException, address: QueueAddress | None = None) -> SqlQueueError | None:
        import pyodbc

        if not isinstance(error, pyodbc.Error):
            return None
        sqlstate, detail = _sqlstate(error), _detail(error)
        where = f" (queue {address})" if address is not None else ""
        if sqlstate in ("42P01", "3F000"):
            return QueueNotFound(f"{detail}{where}: create the queue first")
        if sqlstate == "42501":
            return PermissionDenied(f"{detail}{where}")
        if sqlstate in _TRANSIENT_SQLSTATES:
            return TransientDatabaseError(f"{_TRANSIENT_SQLSTATES[sqlstate]}: {detail}{where}")
        if self.is_connection_lost(error):
            return TransientDatabaseError(f"connection lost or refused: {detail}{where}")
        return None


class PostgresReferenceLayoutOverOdbc(PostgresOverOdbc, PostgresReferenceLayout):
    """NServiceBus.Transport.PostgreSql's queue-table layout (postgres_reference.py) over psqlODBC."""


class SqliteOverOdbc(_Pyodbc, SqliteDialect):
    """SQLite's statements for the SQLite3 ODBC driver, receiving without ``RETURNING``."""

    odbc_dbms_name = "SQLite"

    def begin_write(self) -> None:
        return None  # the driver opens a transaction before the first statement itself

    def receive_rows(
        self, cursor: Any, address: QueueAddress, statement: str, max_messages: int
    ) -> list[Any]:
        cursor.execute(self.sql("select_oldest", address), (max_messages,))
        rows = cursor.fetchall()
        if not rows:
            return []
        cursor.execute(self.sql("delete_row_versions", address, len(rows)), [row[6] for row in rows])
        if cursor.rowcount != len(rows):
            raise TransientDatabaseError(
                f"another receiver took some of the {len(rows)} rows selected from {address}; "
                "the receive was rolled back, try again"
            )
        return rows

    def classify(self, error: BaseException, address: QueueAddress | None = None) -> SqlQueueError | None:
        import pyodbc

        if not isinstance(error, pyodbc.Error):
            return None
        detail = _detail(error)
        translated = super().classify(_SqliteText(detail), address)
        if translated is not None:
            return translated
        if self.is_connection_lost(error):
            return TransientDatabaseError(f"connection lost: {detail}")
        return None


class _SqliteText(sqlite3.Error):
    """Lets the SQLite dialect classify an ODBC error by its message, as it does sqlite3's."""


def _to_qmark(statement: str) -> str:
    """Rewrite psycopg's ``%s`` / ``%%`` into pyodbc's ``?`` / ``%``."""
    return _PLACEHOLDER.sub(lambda m: "%" if m.group(1) == "%" else "?", statement)
