"""PostgreSQL: what each new connection of the transport sets for its session.

A deep drain (or a large send) dirties more pages than ``shared_buffers`` holds. Its own backend writes the
evicted ones to the kernel's page cache, and by default nothing writes them to disk until a checkpoint's
fsync flushes hundreds of MiB at once while every commit's WAL flush waits behind it
(docs/history/deep-queues.md measures the stall). ``backend_flush_after`` makes the backend ask the kernel to
write them as it goes: PostgreSQL's own remedy, a user setting that needs no privilege. A value anyone else
chose (postgresql.conf, a role's or a database's ``SET``, the URL's ``options``) is kept, servers that cannot
(``max_val`` 0) are left alone, and one that refuses the statement keeps its own value with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

BACKEND_FLUSH_AFTER = "256kB"
WRITE_BACK_OWN_EVICTIONS = (
    f"SELECT set_config('backend_flush_after', '{BACKEND_FLUSH_AFTER}', false) FROM pg_settings "
    "WHERE name = 'backend_flush_after' AND source = 'default' AND max_val::int > 0"
)

# The session's limits that would end a transaction held open for a long time (no parameters):
# idle_in_transaction_session_timeout, and transaction_timeout (NULL before PostgreSQL 17). '0' is none.
LONG_TRANSACTION_LIMITS = ("idle_in_transaction_session_timeout", "transaction_timeout")
READ_LONG_TRANSACTION_LIMITS = (
    "SELECT current_setting('idle_in_transaction_session_timeout'), "
    "current_setting('transaction_timeout', true)"
)


def write_back_own_evictions(connection: Any, is_connection_lost: Callable[[BaseException], bool]) -> None:
    """Set ``backend_flush_after`` for the session where nobody chose it (psycopg or pyodbc alike: the
    statement binds nothing), and commit: a setting made in a transaction that rolls back is undone.

    It is an optimisation, so a server that refuses the statement (a PostgreSQL-compatible one without
    ``pg_settings``, a role denied it) leaves the session as it was and the connection is used anyway;
    only a lost connection is an error here, as it would be at the first statement after."""
    global _refusal_logged
    cursor = connection.cursor()
    try:
        cursor.execute(WRITE_BACK_OWN_EVICTIONS)
    except Exception as error:
        if is_connection_lost(error):
            raise
        connection.rollback()
        if not _refusal_logged:
            _refusal_logged = True
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            log.warning("backend_flush_after not set for this process's sessions: %s", reason)
        return
    finally:
        cursor.close()
    connection.commit()


_refusal_logged = False
