"""A loan of a pooled connection: ``with transport.connection() as connection:``, and the cursor that stays
with a driver connection from loan to loan.

Both the transport (which lends connections) and the queue operations (which run statements on them) use
these, so they live here, beneath both.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..model.address import QueueAddress
from ..model.errors import TransientDatabaseError
from .pool import ConnectionPool, PooledConnection, PoolExhausted

if TYPE_CHECKING:
    from .roles import LeaseTransport

__all__ = ["ConnectionLease", "shared_cursor"]

log = logging.getLogger(__name__)

_SHARED_CURSOR = "sqlqueue.shared_cursor"


def shared_cursor(connection: Any) -> Any:
    """A cursor that stays with a pooled driver connection from loan to loan, for the transport's own
    statements; a new cursor from anything else (so a wrapper around a connection sees every statement).

    psycopg sets up type adaptation per cursor: a new cursor for each one-message receive cost about 40 µs
    of client CPU. The cursor lives in the pool's per-connection ``info`` and is dropped after any error.
    """
    if not isinstance(connection, PooledConnection):
        return connection.cursor()
    driver = connection.dbapi_connection
    entry = connection.info.get(_SHARED_CURSOR)
    if entry is None or entry[0] is not driver:
        entry = connection.info[_SHARED_CURSOR] = (driver, driver.cursor())
    return entry[1]


def _forget_shared_cursor(connection: PooledConnection) -> None:
    entry = connection.info.pop(_SHARED_CURSOR, None)
    if entry is not None:
        try:
            entry[1].close()
        except Exception as error:  # it is being dropped anyway
            log.debug("closing a shared cursor failed: %s", error)


class ConnectionLease:
    """``with transport.connection() as connection:`` (a class, not a generator: every operation pays it).

    The transport hands over its ``pool`` to borrow from; the transport itself is read for its dialect (at
    each loan: the first connection may switch it to the server's variant) and the pool's size.
    """

    __slots__ = ("_address", "_pool", "_pooled", "_transport")

    def __init__(self, transport: LeaseTransport, pool: ConnectionPool, address: QueueAddress | None) -> None:
        self._transport = transport
        self._pool = pool
        self._address = address
        self._pooled: PooledConnection | None = None

    def __enter__(self) -> PooledConnection:
        transport = self._transport
        try:
            self._pooled = self._pool.connect()
        except PoolExhausted as error:
            raise TransientDatabaseError(
                f"no free database connection within the pool timeout ({transport.pool_size} in use); "
                "raise pool_size or lower concurrency"
            ) from error
        except Exception as error:
            translated = transport.dialect.classify(error, self._address)
            if translated is None:
                raise
            raise translated from error
        return self._pooled

    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> bool:
        pooled = self._pooled
        assert pooled is not None
        try:
            if error is None:
                return False
            _forget_shared_cursor(pooled)
            dialect = self._transport.dialect
            if dialect.is_connection_lost(error) and pooled.is_valid:  # not invalidated already
                pooled.invalidate()
            translated = dialect.classify(error, self._address)
            if translated is None:
                return False
            raise translated from error
        finally:
            pooled.close()
