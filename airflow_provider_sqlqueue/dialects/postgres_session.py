"""PostgreSQL: what each new connection of the transport sets for its session.

A deep drain (or a large send) dirties more pages than ``shared_buffers`` holds. Its own backend writes the
evicted ones to the kernel's page cache, and by default nothing writes them to disk until a checkpoint's
fsync flushes hundreds of MiB at once while every commit's WAL flush waits behind it (docs/dba.md measures
the stall). ``backend_flush_after`` makes the backend ask the kernel to write them as it goes: PostgreSQL's
own remedy, a user setting that needs no privilege. A value anyone else chose (postgresql.conf, a role's or
a database's ``SET``, the URL's ``options``) is kept, and servers that cannot (``max_val`` 0) are left alone.
"""

from __future__ import annotations

from typing import Any

BACKEND_FLUSH_AFTER = "256kB"
WRITE_BACK_OWN_EVICTIONS = (
    f"SELECT set_config('backend_flush_after', '{BACKEND_FLUSH_AFTER}', false) FROM pg_settings "
    "WHERE name = 'backend_flush_after' AND source = 'default' AND max_val::int > 0"
)


def write_back_own_evictions(connection: Any) -> None:
    """Set ``backend_flush_after`` for the session where nobody chose it (psycopg or pyodbc alike: the
    statement binds nothing), and commit: a setting made in a transaction that rolls back is undone."""
    cursor = connection.cursor()
    try:
        cursor.execute(WRITE_BACK_OWN_EVICTIONS)
    finally:
        cursor.close()
    connection.commit()
