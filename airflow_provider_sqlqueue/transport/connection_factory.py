"""A caller's connection factory: what ``open_transport(url, connect=...)`` calls for each new connection.

A credential that rotates or expires (an IAM token for Amazon RDS, a password a vault renews) cannot be
written into the URL once: the pool asks the factory each time it opens a driver connection, so every new
connection logs in with what is current then. Connections already open are not touched; those the pool
discards (after a lost connection, a ``Transport.close()``) are replaced by new ones that ask again.

The factory takes no arguments and returns either

- a mapping of **connect arguments** merged over the URL's: libpq keywords for psycopg (``{"password":
  token}``), ODBC connection-string keywords for pyodbc (``{"PWD": secret}``), or ``timeout`` for sqlite3.
  The transport still opens the connection with its own driver and settings. Keywords that would say where
  or through which driver (host, port, dbname, service; DRIVER, DSN, SERVER, DATABASE ...) are refused:
  the URL says that; or
- a ready **DB-API connection** of the URL's driver (a ``psycopg.Connection``, ``pyodbc.Connection`` or
  ``sqlite3.Connection``), for what connect arguments cannot carry (pyodbc's ``attrs_before`` with an
  Entra ID access token, say). It must be to the URL's database; a SQLite connection is checked to be on
  the URL's file and must be opened with ``check_same_thread=False``, since the pool lends it to any thread.

Either way the transport then sets the connection up as its own (autocommit off, the dialect's session
settings, SQLite's WAL mode). A factory that raises fails that connection with
:class:`TransientDatabaseError` (the token service may be back on the next try), except the transport's
own errors, which pass through as they are; anything else returned is a :class:`ConfigurationError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

from ..model.errors import ConfigurationError, SqlQueueError, TransientDatabaseError

__all__ = ["ConnectionFactory", "ask_factory"]

ConnectionFactory: TypeAlias = Callable[[], Any]
"""Takes nothing; returns connect arguments (a mapping) or a ready DB-API connection of the URL's driver."""

# Connect arguments that would choose another server, database or driver than the URL's.
WHERE_KEYS = {
    "psycopg": {"host", "hostaddr", "port", "dbname", "service", "servicefile"},
    "pyodbc": {
        "DRIVER",
        "DSN",
        "FILEDSN",
        "SAVEFILE",
        "SERVER",
        "ADDRESS",
        "ADDR",
        "NETWORK ADDRESS",
        "DATABASE",
        "INITIAL CATALOG",
    },
}
SQLITE_KEYS = {"timeout"}


def _name(factory: ConnectionFactory) -> str:
    return str(getattr(factory, "__qualname__", None) or type(factory).__name__)


def ask_factory(
    factory: ConnectionFactory, driver: str, connection_type: type
) -> tuple[dict[str, Any] | None, Any]:
    """Call ``factory`` once and check its answer for a transport on ``driver`` (``psycopg``, ``pyodbc``
    or ``sqlite3``): ``(connect arguments, None)`` or ``(None, a connection of connection_type)``."""
    try:
        answer = factory()
    except SqlQueueError:
        raise
    except Exception as error:
        raise TransientDatabaseError(
            f"the transport's connection factory {_name(factory)} raised {type(error).__name__}: {error}"
        ) from error
    if isinstance(answer, connection_type):
        return None, answer
    if isinstance(answer, Mapping):
        arguments = {str(key): value for key, value in answer.items()}
        if driver == "sqlite3":
            refused = sorted(key for key in arguments if key not in SQLITE_KEYS)
        elif driver == "pyodbc":
            arguments = {key.strip().upper(): value for key, value in arguments.items()}
            refused = sorted(key for key in arguments if key in WHERE_KEYS["pyodbc"])
        else:
            refused = sorted(key for key in arguments if key.lower() in WHERE_KEYS["psycopg"])
        if refused:
            raise ConfigurationError(
                f"the transport's connection factory {_name(factory)} returned {', '.join(refused)}, which "
                f"a factory may not set: the URL says where and through which driver ({driver}) to connect"
            )
        return arguments, None
    _close_quietly(answer)
    kind = f"{type(answer).__module__}.{type(answer).__qualname__}"
    raise ConfigurationError(
        f"the transport's connection factory {_name(factory)} returned a {kind}; this transport connects "
        f"through {driver}, so it takes a mapping of connect arguments or a "
        f"{connection_type.__module__}.{connection_type.__qualname__}"
    )


def _close_quietly(answer: Any) -> None:
    """Close a refused answer if it can be closed: nobody else holds it, and it may be a connection."""
    close = getattr(answer, "close", None)
    if callable(close):
        with contextlib.suppress(Exception):
            close()
