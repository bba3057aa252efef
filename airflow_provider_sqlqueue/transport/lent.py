"""A receive's connection lent to its handler: as a DB-API connection and as a SQLAlchemy ``Connection``,
both over the same driver connection and transaction.

What a handler writes through either commits with the receive's DELETE and its sends, or rolls back with
them, so processing a message and changing a table of the same database happen exactly once together.
The transaction stays the pump's: ``commit``, ``rollback`` and ``close`` of the DB-API connection are
refused, and so are ``commit``, ``rollback`` and ``begin`` of the SQLAlchemy one (``begin_nested`` gives a
savepoint inside it). SQLAlchemy never ends the transaction itself: its ``Connection`` is built over a
proxy whose ``commit`` and ``rollback`` refuse, opened already in a transaction (so an ORM ``Session``
bound to it joins instead of committing), and its ``close`` leaves the driver connection alone.

Once the handler's attempt ends the lent connection is withdrawn: a handler that kept it gets an error
instead of a connection another operation may be using. ``dbapi_connection`` is guarded the same way: a
stand-in for the driver's connection that passes ``isinstance`` checks for the driver's class and refuses
``commit``, ``rollback`` and ``close``. What no wrapper can stop (SQL text ``COMMIT``, the driver object
reached through a cursor's ``connection``) the pump catches afterwards by asking the driver
(``transaction_guard.TransactionWatch``).
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

try:
    from sqlalchemy.pool import PoolProxiedConnection
except ImportError:  # SQLAlchemy 1.4 (Airflow 3.0 requires it): no lent SQLAlchemy connection, see below
    PoolProxiedConnection = object  # type: ignore[assignment,misc]

from ..model.errors import ConfigurationError

if TYPE_CHECKING:
    from .roles import EngineTransport

__all__ = [
    "LendWatcher",
    "LentConnection",
    "LentDriverConnection",
    "Prelude",
    "ReceiveConnection",
    "sqlalchemy_engine",
]

_REFUSED = (
    "{what} is refused: this connection holds the receive's transaction, which the pump commits with the "
    "message's receive and sends. Raise from the handler to roll it all back (the message is received "
    "again); use a savepoint (SAVEPOINT, or begin_nested() in SQLAlchemy) to undo part of it"
)
_ON_CONNECT = "sqlqueue.sqlalchemy_on_connect"
_NEEDS_SQLALCHEMY_2 = (
    "a handler's SQLAlchemy connection (context.sqlalchemy_connection) needs SQLAlchemy 2.0 or later; this "
    "process has SQLAlchemy {version} (Airflow 3.0 requires 1.4): use context.connection, the DB-API "
    "connection in the same transaction, or Airflow 3.1 or later"
)


class LentConnection:
    """The receive's DB-API connection as lent to a handler: the driver connection's own methods, except
    that ``commit``, ``rollback`` and ``close`` are refused and nothing works once the attempt ended.

    ``dbapi_connection`` stands for the driver's connection object (``sqlite3.Connection``,
    ``psycopg.Connection``, ``pyodbc.Connection``) for libraries that insist on its type: it passes their
    ``isinstance`` checks and forwards everything, except that ``commit``, ``rollback`` and ``close`` are
    refused there too and it is withdrawn with this connection.
    """

    __slots__ = ("_driver", "_ended", "_pooled", "_prelude", "_watcher")

    def __init__(
        self, pooled: Any, prelude: Prelude | None = None, watcher: LendWatcher | None = None
    ) -> None:
        self._pooled = pooled
        self._ended = False
        self._driver: LentDriverConnection | None = None
        self._prelude = prelude  # what must run before the handler's first statement (a savepoint)
        self._watcher = watcher  # told of each statement after the first, and of the driver handed out

    def __repr__(self) -> str:
        state = "ended" if self._ended else "lent"
        return f"<LentConnection {state} in the receive's transaction>"

    def _live(self) -> Any:
        if self._ended:
            raise ConfigurationError(
                "the receive this connection was lent for has ended; use the connection only inside the "
                "handler call it was given to"
            )
        return self._pooled

    def _bare(self) -> Any:
        """The loan, for a use the prelude cannot ride along with (nor the watcher see past): the prelude
        runs first, at once."""
        pooled = self._live()
        prelude, self._prelude = self._prelude, None
        if prelude is not None:
            prelude.mark_now()
        if self._watcher is not None:
            self._watcher.reached()
        return pooled

    def _run(self, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run ``method(*args, **kwargs)`` (a statement on a cursor of the loan), with the prelude before it
        if it has not run; the watcher hears of each statement before it runs (after the first) and after
        it returned."""
        if self._ended:
            self._live()
        prelude = self._prelude
        watcher = self._watcher
        if prelude is not None:
            self._prelude = None
            result = prelude.run_first(functools.partial(method, *args, **kwargs))
        else:
            if watcher is not None:
                watcher.statement()
            result = method(*args, **kwargs)
        if watcher is not None:
            watcher.ran()
        return result

    @property
    def is_open(self) -> bool:
        return not self._ended and getattr(self._pooled, "is_valid", True)

    @property
    def pooled(self) -> Any:
        """The transport's loan of the connection (cursors from it close when the receive ends)."""
        return self._bare()

    @property
    def dbapi_connection(self) -> Any:
        """The driver's connection as lent (see the class): guarded, withdrawn when the attempt ends."""
        self._bare()
        driver = self._driver
        if driver is None:
            driver = self._driver = LentDriverConnection(self)
        return driver

    def driver_connection(self) -> Any:
        """The driver's connection object itself, unguarded: for the transport's own SQLAlchemy wiring,
        which calls the driver's methods by type; never handed to a handler as such."""
        pooled = self._bare()
        return getattr(pooled, "dbapi_connection", pooled)

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        """A cursor of the loan; while the prelude waits, one whose first statement carries it (a cursor
        with arguments, e.g. a server-side one, gets the prelude run at once)."""
        if (self._prelude is None and self._watcher is None) or args or kwargs:
            return self._bare().cursor(*args, **kwargs)
        return _PreludeCursor(self._live().cursor(), self)

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        """The drivers' shortcut (a new cursor that runs one statement), with a cursor of the loan."""
        return self._on_new_cursor("execute", args, kwargs)

    def executemany(self, *args: Any, **kwargs: Any) -> Any:
        return self._on_new_cursor("executemany", args, kwargs)

    def _on_new_cursor(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        cursor = self._live().cursor()
        if self._prelude is None and self._watcher is None:
            getattr(cursor, method)(*args, **kwargs)
            return cursor
        self._run(getattr(cursor, method), args, kwargs)
        return _PreludeCursor(cursor, self)

    def commit(self) -> None:
        raise ConfigurationError(_REFUSED.format(what="commit()"))

    def rollback(self) -> None:
        raise ConfigurationError(_REFUSED.format(what="rollback()"))

    def close(self) -> None:
        raise ConfigurationError(_REFUSED.format(what="close()"))

    def invalidate(self) -> None:
        """Close the driver connection (after an error that broke it): the receive then fails and its
        messages stay queued."""
        pooled = self._live()
        if hasattr(pooled, "invalidate"):
            pooled.invalidate()

    def end(self) -> None:
        """Withdraw the connection from the handler (the pump calls it when the attempt ends). The prelude
        and the watcher are let go, as nothing runs past :meth:`_live` any more: the watcher (the
        attempt's context) holds this connection, and the cycle would leave both to the garbage collector."""
        self._ended = True
        self._prelude = None
        self._watcher = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.driver_connection(), name)


class Prelude(Protocol):
    """What must run on a lent connection before the handler's first statement (a batching pump's
    savepoint, ``pump/savepoints.py``): with that statement where the driver can send both at once."""

    def run_first(self, statement: Callable[[], Any]) -> Any: ...

    def mark_now(self) -> None: ...


class LendWatcher(Protocol):
    """Who follows what a handler does with its lent connection (the pump's check of the transaction)."""

    def statement(self) -> None:
        """A statement runs on a cursor of the loan, after the first."""

    def ran(self) -> None:
        """A statement on a cursor of the loan returned."""

    def reached(self) -> None:
        """The driver's own connection or cursor is handed out, or used beyond the statements' path."""


# What a cursor of a lent connection answers without its statements' path being left: results and their shape.
_RESULT_ATTRIBUTES = frozenset(
    {
        "arraysize", "close", "closed", "description", "fetchall", "fetchmany", "fetchone", "nextset",
        "pgresult", "rowcount", "rownumber", "scroll", "statusmessage",
    }
)  # fmt: skip


class _PreludeCursor:
    """A cursor of a lent connection: ``execute`` and ``executemany`` run the prelude (while it has not
    run) with the statement and tell the watcher of the statements after it; reading results answers as
    the driver's cursor; anything else of the cursor runs the prelude at once and tells the watcher the
    driver was reached, then answers as the driver's cursor (``isinstance`` included)."""

    __slots__ = ("_cursor", "_lent")

    def __init__(self, cursor: Any, lent: LentConnection) -> None:
        object.__setattr__(self, "_cursor", cursor)
        object.__setattr__(self, "_lent", lent)

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return type(self._cursor)

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        cursor = self._cursor
        result = self._lent._run(cursor.execute, args, kwargs)
        return self if result is cursor else result  # psycopg returns the cursor: this one stands for it

    def executemany(self, *args: Any, **kwargs: Any) -> Any:
        cursor = self._cursor
        result = self._lent._run(cursor.executemany, args, kwargs)
        return self if result is cursor else result

    def __iter__(self) -> Any:
        return iter(self._cursor)

    def __enter__(self) -> Any:
        self._cursor.__enter__()
        return self

    def __exit__(self, *exc: object) -> Any:
        return self._cursor.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        if name in _RESULT_ATTRIBUTES:
            return getattr(self._cursor, name)
        self._lent._bare()
        return getattr(self._cursor, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name != "arraysize":
            self._lent._bare()
        setattr(self._cursor, name, value)


class LentDriverConnection:
    """The driver's connection as a handler gets it (``context.connection.dbapi_connection``): every
    attribute of the driver's object, ``isinstance`` true for its class (``__class__`` answers with it, as
    ``unittest.mock`` specs do), but ``commit``, ``rollback`` and ``close`` refused and nothing usable once
    the lent connection is withdrawn. A C function that demands the exact type (``sqlite3.Cursor(con)``)
    still refuses it; call the connection's own methods instead."""

    __slots__ = ("_lent",)

    def __init__(self, lent: LentConnection) -> None:
        object.__setattr__(self, "_lent", lent)

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return type(self._lent.driver_connection())

    def __repr__(self) -> str:
        return f"<driver connection lent in the receive's transaction: {self._lent.driver_connection()!r}>"

    def commit(self) -> None:
        raise ConfigurationError(_REFUSED.format(what="commit() of the driver's connection"))

    def rollback(self) -> None:
        raise ConfigurationError(_REFUSED.format(what="rollback() of the driver's connection"))

    def close(self) -> None:
        raise ConfigurationError(_REFUSED.format(what="close() of the driver's connection"))

    def __enter__(self) -> LentDriverConnection:
        raise ConfigurationError(
            _REFUSED.format(what="a with block on the driver's connection (which commits or closes it)")
        )

    def __exit__(self, *exc: object) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lent.driver_connection(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("autocommit", "isolation_level"):  # would end the transaction or commit each statement
            raise ConfigurationError(_REFUSED.format(what=f"setting {name}"))
        setattr(self._lent.driver_connection(), name, value)


class _LentToSqlAlchemy(PoolProxiedConnection):
    """What a SQLAlchemy ``Connection`` drives: the lent connection, in the shape of a pool's connection.

    SQLAlchemy ends a transaction only through ``commit`` and ``rollback`` here (its dialects' ``do_commit``
    and ``do_rollback``), which the lent connection refuses; ``close`` gives nothing back, since the
    transport's pool owns the driver connection.
    """

    def __init__(self, lent: LentConnection) -> None:
        self._lent = lent
        self._info: dict[Any, Any] = {}

    @property
    def dbapi_connection(self) -> Any:  # type: ignore[override]
        return self._lent.driver_connection()

    @property
    def driver_connection(self) -> Any:  # type: ignore[override]
        return self._lent.driver_connection()

    @property
    def is_valid(self) -> bool:
        return self._lent.is_open

    @property
    def is_detached(self) -> bool:
        return False

    @property
    def info(self) -> dict[Any, Any]:  # type: ignore[override]
        return self._info

    @property
    def record_info(self) -> dict[Any, Any]:  # type: ignore[override]
        return self._info

    def invalidate(self, e: BaseException | None = None, soft: bool = False) -> None:
        if not soft and self._lent.is_open:
            self._lent.invalidate()

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        return self._lent.cursor(*args, **kwargs)

    def commit(self) -> None:
        self._lent.commit()

    def rollback(self) -> None:
        self._lent.rollback()

    def detach(self) -> None:
        raise ConfigurationError(_REFUSED.format(what="detach()"))

    def close(self) -> None:
        return None

    def __getattr__(self, key: str) -> Any:
        return getattr(self._lent.driver_connection(), key)


class ReceiveConnection(Connection):
    """A SQLAlchemy ``Connection`` in the receive's transaction (see the module's description).

    It starts inside a transaction that the pump owns: ``commit()``, ``rollback()`` and ``begin()`` are
    refused, ``begin_nested()`` opens a savepoint, ``close()`` (and leaving a ``with`` block) ends nothing.
    """

    def __init__(self, engine: Engine, lent: LentConnection) -> None:
        super().__init__(engine, connection=_LentToSqlAlchemy(lent))
        super().begin()  # no statement: SQLAlchemy's BEGIN is the driver's, already open

    def begin(self) -> Any:
        raise ConfigurationError(_REFUSED.format(what="begin()"))

    def commit(self) -> None:
        raise ConfigurationError(_REFUSED.format(what="commit()"))

    def rollback(self) -> None:
        raise ConfigurationError(_REFUSED.format(what="rollback()"))

    def close(self) -> None:
        return None  # the pump ends the transaction and the loan

    def detach(self) -> None:
        raise ConfigurationError(_REFUSED.format(what="detach()"))


_engines: weakref.WeakKeyDictionary[EngineTransport, Engine] = weakref.WeakKeyDictionary()
_engines_lock = threading.Lock()


def sqlalchemy_engine(transport: EngineTransport) -> Engine:
    """The SQLAlchemy ``Engine`` that wraps ``transport``'s connections, made once per transport.

    Its own pool lends nothing but the one new connection (closed again) on which SQLAlchemy reads the
    server's version and settings; that first connection is also where SQLAlchemy rolls back after
    reading them, which on a lent connection would undo the receive.
    """
    if PoolProxiedConnection is object:
        raise ConfigurationError(_NEEDS_SQLALCHEMY_2.format(version=sqlalchemy.__version__))
    with _engines_lock:
        engine = _engines.get(transport)
        if engine is not None:
            return engine
        name = transport.dialect.sqlalchemy_dialect
        if name is None:
            raise ConfigurationError(
                f"SQLAlchemy has no dialect for {transport.dialect.display_name} through this driver "
                f"({transport.dialect.driver_connection_class}); use the DB-API connection instead"
            )
        owner = weakref.ref(transport)  # the engine is the transport's: it must not keep it alive

        def connect() -> Any:
            opened = owner()
            if opened is None:
                raise ConfigurationError("the transport of this SQLAlchemy engine was discarded")
            return opened.new_connection()

        engine = create_engine(f"{name}://", creator=connect, poolclass=NullPool)
        with engine.connect():
            pass
        _engines[transport] = engine
        return engine


def receive_connection(transport: EngineTransport, lent: LentConnection) -> ReceiveConnection:
    """A SQLAlchemy ``Connection`` over ``lent``; the driver connection gets SQLAlchemy's per-connection
    setup once (what its pool does for a connection it opens: SQL Server's DATETIMEOFFSET reader, SQLite's
    REGEXP), remembered with the connection from loan to loan."""
    engine = sqlalchemy_engine(transport)
    pooled = lent.pooled
    driver = lent.driver_connection()
    info = getattr(pooled, "info", None)
    if info is None or info.get(_ON_CONNECT) is not driver:
        on_connect = engine.dialect.on_connect()
        if on_connect is not None:
            on_connect(driver)
        if info is not None:
            info[_ON_CONNECT] = driver
    return ReceiveConnection(engine, lent)
