"""A caller's connection for sends in the caller's transaction: recognise it, refuse what cannot hold the
transaction, and find the DB-API connection to write on.

Accepted: a SQLAlchemy ``Connection``, a DB-API connection of the dialect's driver (``sqlite3``,
``psycopg``, ``pyodbc``), the transport's own pooled connection, or a connection lent to a handler. The
send then runs on it without committing; the caller commits or rolls back.

Refused, before any statement runs: a connection of another driver (its parameter style or engine would
not match the dialect's statements, e.g. a psycopg connection for a SQLite queue), a pyodbc connection
to another engine, and a connection in autocommit mode outside a transaction, on which the send would
commit at once instead of with the caller's work.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Connection

from ..dialects.base import Dialect
from ..model.address import QueueAddress
from ..model.errors import ConfigurationError
from .lent import LentConnection
from .pool import PooledConnection

__all__ = ["callers_connection", "write_in_callers_transaction"]


def write_in_callers_transaction(
    dialect: Dialect, connection: Any, address: QueueAddress, write: Callable[[Any], None]
) -> None:
    """Run ``write(cursor)`` on a cursor of the caller's connection, committing nothing; driver errors come
    out as the transport's (QueueNotFound, ...), as from its own connections."""
    cursor = callers_connection(dialect, connection).cursor()
    try:
        write(cursor)
    except Exception as error:
        translated = dialect.classify(error, address)
        if translated is None:
            raise
        raise translated from error
    finally:
        cursor.close()


def callers_connection(dialect: Dialect, connection: Any) -> Any:
    """The DB-API connection (or the transport's loan of one) on which a send joins the caller's
    transaction; ConfigurationError, with nothing run, where it cannot."""
    if isinstance(connection, LentConnection):
        return connection.pooled
    if isinstance(connection, Connection):
        if connection.closed or connection.invalidated:
            raise ConfigurationError("the SQLAlchemy connection given for the send is closed")
        if not connection.in_transaction():
            connection.begin()  # as its first statement would: the caller's commit() then commits the send
        driver = connection.connection.dbapi_connection
        _check(dialect, driver)
        return driver
    driver = connection.dbapi_connection if isinstance(connection, PooledConnection) else connection
    _check(dialect, driver)
    return connection


def _check(dialect: Dialect, driver: Any) -> None:
    expected = dialect.driver_connection_class
    module_name, _, class_name = expected.rpartition(".")
    module = sys.modules.get(module_name)
    connection_class = getattr(module, class_name, None) if module is not None else None
    given = f"{type(driver).__module__}.{type(driver).__qualname__}"
    if connection_class is None or not isinstance(driver, connection_class):
        raise ConfigurationError(
            f"this transport's queues are on {dialect.display_name} through a {expected}; the connection "
            f"given for the send is a {given}. Give a connection of the same driver to the same database "
            "(or a SQLAlchemy Connection over one)"
        )
    if dialect.odbc_dbms_name is not None:
        import pyodbc

        dbms = str(driver.getinfo(pyodbc.SQL_DBMS_NAME))
        if dbms != dialect.odbc_dbms_name:
            raise ConfigurationError(
                f"this transport's queues are on {dialect.display_name}; the pyodbc connection given for "
                f"the send reaches {dbms}"
            )
    if _autocommits(module_name, driver):
        raise ConfigurationError(
            f"the {given} given for the send is in autocommit mode outside a transaction, so the send "
            "would commit at once instead of with your work: begin a transaction on it first (or turn "
            "autocommit off)"
        )


def _autocommits(driver_module: str, driver: Any) -> bool:
    """Whether a statement run on ``driver`` now would commit by itself."""
    if driver_module == "sqlite3":
        if getattr(driver, "autocommit", None) is True:  # Python 3.12's PEP 249 mode
            return True
        return driver.isolation_level is None and not driver.in_transaction
    if driver_module == "psycopg":
        from psycopg.pq import TransactionStatus

        return bool(driver.autocommit) and driver.info.transaction_status == TransactionStatus.IDLE
    return bool(getattr(driver, "autocommit", False))
