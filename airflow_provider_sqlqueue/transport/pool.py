"""The transport's pool of driver connections: each operation borrows one and gives it back.

Every send and receive pays one loan. SQLAlchemy's ``QueuePool`` took 4-5 µs of client CPU per loan
(a connection fairy, weak-reference bookkeeping, a queue built on ``threading.Condition``), and about
twice that on a real disk, where every commit waits for a flush and the process returns to cold caches;
on SQLite, where a one-message receive costs the raw driver 130-140 µs, that was a tenth of the
transport's share (docs/history/performance-tuning.md, change 21). A loan here is one lock around a list.

What the pool promises:

- at most ``size + overflow`` driver connections exist at once (lent, idle or being opened); a caller
  that finds none free waits up to ``timeout`` seconds and then gets :class:`PoolExhausted`;
- the cursors a loan opened with ``cursor()`` are closed when it ends, in the borrower's thread, before the
  connection can be lent again: a driver may otherwise reach the connection when the cursor object dies,
  after another thread has borrowed it (pyodbc frees a dead cursor's statement without holding the GIL; on
  FreeTDS that crashed the process, Microsoft's driver failed the other thread's statement with
  "Connection is busy with results for another command");
- a connection is reset (``reset``, the dialect's rollback) when it comes back, and kept only while fewer
  than ``size`` are idle; one whose reset fails, or that was invalidated, is closed instead;
- a connection whose loan was marked :meth:`PooledConnection.lend_to_user` (code the package does not own,
  such as a message handler, ran statements on it) also has its session restored (``reset_session``:
  isolation level, ``search_path``, role, timeouts, ``SET`` options, PRAGMAs) before it is lent again, since
  what such code changed in its session would otherwise stay with the connection into every later
  operation; with ``reset_every_session`` every returned connection is, whoever used it;
- :meth:`ConnectionPool.dispose` closes the idle connections; those lent before it are closed when they
  come back, so a disposed pool holds nothing once its loans end (it stays usable).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["ConnectionPool", "PoolExhausted", "PooledConnection"]

log = logging.getLogger(__name__)


class PoolExhausted(Exception):
    """No connection came free within the pool's timeout."""


class _Entry:
    """A driver connection the pool owns, with what stays with it from loan to loan."""

    __slots__ = ("driver", "generation", "info", "lent_to_user", "session_defaults")

    def __init__(self, driver: Any, generation: int) -> None:
        self.driver = driver
        self.generation = generation
        self.info: dict[str, Any] = {}
        # Code the package does not own ran on this connection since it was last reset (lend_to_user).
        self.lent_to_user = False
        self.session_defaults: Any = None  # what remember_session said the session's reset restores


def _close_quietly(closable: Any) -> None:
    try:
        closable.close()
    except Exception as error:  # it is being dropped anyway
        log.debug("closing %s failed: %s", type(closable).__name__, error)


class PooledConnection:
    """One loan of a driver connection: the DB-API methods reach the driver's; :meth:`close` gives it back.

    ``info`` is a dict that stays with the driver connection from loan to loan. :meth:`invalidate` closes
    the driver connection and keeps it out of the pool (after an error that may have broken it). Cursors
    from :meth:`cursor` belong to the loan and are closed with it.
    """

    __slots__ = ("_cursors", "_entry", "_pool", "dbapi_connection", "info")

    def __init__(self, pool: ConnectionPool, entry: _Entry) -> None:
        self._pool: ConnectionPool | None = pool
        self._entry = entry
        self._cursors: list[Any] | None = None
        self.dbapi_connection: Any = entry.driver
        self.info = entry.info

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        """A new driver cursor, closed when the loan ends."""
        cursor = self._driver().cursor(*args, **kwargs)
        if self._cursors is None:
            self._cursors = [cursor]
        else:
            self._cursors.append(cursor)
        return cursor

    def lend_to_user(self) -> None:
        """Say that code the package does not own (a handler given the receive's connection) may run
        statements on this loan: when it comes back, its session is restored to what the transport set up
        (``reset_session``) before it is lent again. Call it before handing the connection over."""
        self._entry.lent_to_user = True

    @property
    def lent_to_user(self) -> bool:
        """Whether this connection's session will be restored when it comes back (see
        :meth:`lend_to_user`)."""
        return self._entry.lent_to_user

    def commit(self) -> None:
        self._driver().commit()

    def rollback(self) -> None:
        self._driver().rollback()

    @property
    def is_valid(self) -> bool:
        return self.dbapi_connection is not None

    def invalidate(self) -> None:
        """Close the driver connection now; it is not lent again."""
        driver = self.dbapi_connection
        if driver is None:
            return
        self.dbapi_connection = None
        self._close_cursors()
        _close_quietly(driver)

    def close(self) -> None:
        """Give the connection back to the pool (once; later calls do nothing)."""
        pool = self._pool
        if pool is None:
            return
        self._pool = None
        self._close_cursors()
        pool._give_back(self._entry, self.dbapi_connection is not None)
        self.dbapi_connection = None

    def _close_cursors(self) -> None:
        cursors, self._cursors = self._cursors, None
        for cursor in cursors or ():
            _close_quietly(cursor)

    def _driver(self) -> Any:
        driver = self.dbapi_connection
        if driver is None:
            raise RuntimeError("this pooled connection was given back or invalidated; borrow another")
        return driver

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver(), name)

    def __repr__(self) -> str:
        state = "lent" if self._pool is not None else "returned"
        return f"<PooledConnection {state} {type(self._entry.driver).__module__}>"


class ConnectionPool:
    """Up to ``size + overflow`` connections from ``create``; ``size`` of them kept open between loans.

    ``remember_session(driver)`` runs once on each new connection and says what ``reset_session(driver,
    remembered)`` will restore; ``reset_session`` runs, after ``reset``, on a returned connection that was
    lent to user code (or on every one with :attr:`reset_every_session`).
    """

    def __init__(
        self,
        create: Callable[[], Any],
        reset: Callable[[Any], None],
        *,
        size: int,
        overflow: int,
        timeout: float,
        reset_session: Callable[[Any, Any], None] | None = None,
        remember_session: Callable[[Any], Any] | None = None,
    ) -> None:
        if size < 1 or overflow < 0:
            raise ValueError(f"a pool needs size >= 1 and overflow >= 0, not {size} and {overflow}")
        self._create = create
        self._reset = reset
        self._reset_session = reset_session
        self._remember_session = remember_session
        # Restore the session of every returned connection, not only of those lent to user code: for
        # callers that run their own statements through Transport.connection() (and for measuring it).
        self.reset_every_session = False
        self.session_resets = 0  # sessions restored so far
        self._size = size
        self._limit = size + overflow
        self._timeout = timeout
        self._idle: list[_Entry] = []
        self._open = 0  # driver connections lent, idle or being opened
        self._generation = 0
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)

    @property
    def open_connections(self) -> int:
        return self._open

    @property
    def idle_connections(self) -> int:
        return len(self._idle)

    def connect(self) -> PooledConnection:
        """Lend an idle connection, else open one if the limit allows, else wait for one to come back."""
        with self._lock:
            deadline: float | None = None
            while not self._idle and self._open >= self._limit:
                if deadline is None:
                    deadline = time.monotonic() + self._timeout
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PoolExhausted(
                        f"no connection came free within {self._timeout:g} s ({self._limit} in use)"
                    )
                self._freed.wait(left)
            if self._idle:
                return PooledConnection(self, self._idle.pop())
            self._open += 1
            generation = self._generation
        try:
            driver = self._create()
        except BaseException:
            with self._lock:
                self._open -= 1
                self._freed.notify()
            raise
        entry = _Entry(driver, generation)
        if self._remember_session is not None:
            try:
                entry.session_defaults = self._remember_session(driver)
            except BaseException:
                _close_quietly(driver)
                with self._lock:
                    self._open -= 1
                    self._freed.notify()
                raise
        return PooledConnection(self, entry)

    def _give_back(self, entry: _Entry, valid: bool) -> None:
        restored = False
        if valid:
            try:
                self._reset(entry.driver)
                if self._reset_session is not None and (entry.lent_to_user or self.reset_every_session):
                    self._reset_session(entry.driver, entry.session_defaults)
                    entry.lent_to_user = False
                    restored = True
            except Exception as error:
                log.warning("resetting a returned connection failed (%s); it is closed instead", error)
                _close_quietly(entry.driver)
                valid = False
            except BaseException:  # interrupted mid-rollback: the connection's state is unknown
                _close_quietly(entry.driver)
                with self._lock:
                    self._open -= 1
                    self._freed.notify()
                raise
        with self._lock:
            self.session_resets += restored
            if valid and entry.generation == self._generation and len(self._idle) < self._size:
                self._idle.append(entry)
                self._freed.notify()
                return
            self._open -= 1
            self._freed.notify()
        if valid:
            _close_quietly(entry.driver)

    def dispose(self) -> None:
        """Close the idle connections now and the lent ones when they come back."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._open -= len(idle)
            self._generation += 1
            self._freed.notify_all()
        for entry in idle:
            _close_quietly(entry.driver)
