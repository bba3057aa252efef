"""Running the bridge's statements on the driver: each alone in its own transaction, or inside the caller's,
reading how many rows a state change touched (the run state's compare-and-set)."""

from __future__ import annotations

from typing import Any

from ...transport import ConfigurationError, Transport

__all__ = [
    "begin_write",
    "execute",
    "execute_counted",
    "require_bridge_layout",
    "rows_changed",
    "table_exists",
]


def execute(transport: Transport, statement: str, params: tuple = (), *, write: bool = True) -> Any:
    """Run one statement in its own transaction; return its rows (if any)."""
    with transport.connection() as connection:
        cursor = connection.cursor()
        begin = transport.dialect.begin_write() if write else None
        if begin:
            cursor.execute(begin, ())
        cursor.execute(statement, params)
        rows = transport.dialect.fetch_rows(cursor)
        connection.commit()
    return rows


def rows_changed(transport: Transport, cursor: Any, counted_statement: str, params: tuple) -> int:
    """Run a :meth:`BridgeSql.counted` statement and return how many rows it changed."""
    cursor.execute(counted_statement, params)
    if transport.dialect.name == "sqlserver":
        rows = transport.dialect.fetch_rows(cursor)
        return int(rows[0][0]) if rows else 0
    return cursor.rowcount


def execute_counted(transport: Transport, counted_statement: str, params: tuple) -> int:
    """Run a :meth:`BridgeSql.counted` statement in its own transaction; return the rows it changed."""
    with transport.connection() as connection:
        cursor = connection.cursor()
        begin_write(transport, cursor)
        changed = rows_changed(transport, cursor, counted_statement, params)
        connection.commit()
    return changed


def begin_write(transport: Transport, cursor: Any) -> None:
    """Start the caller's transaction as a write transaction where the driver does not (SQLite)."""
    begin = transport.dialect.begin_write()
    if begin:
        cursor.execute(begin, ())


def require_bridge_layout(queue: Any, role: str) -> None:
    """Refuse, before anything is received, a queue the bridge's statements cannot read: one of
    NServiceBus.Transport.PostgreSql's layout (``Seq``, no ``RowVersion``), whose rows the bridge's moves into
    staging and holds in place do not know. ``role`` names the queue in the error (``"queue"``, ``"input
    queue"``). Writes need no check: the writer and the drain's queue sink send through the queue, which
    writes its own table's layout."""
    found = queue.resolved_dialect().layout
    expected = queue.transport.dialect.layout
    if found != expected:
        raise ConfigurationError(
            f"{role} {queue.name} has the {found} layout (NServiceBus.Transport.PostgreSql's columns), which "
            f"the Spark bridge does not read yet; nothing was received. Read a queue of this package's "
            f"layout ({expected}) with Spark; writes into this one work"
        )


def table_exists(transport: Transport, address: Any) -> bool:
    rows = execute(transport, *transport.dialect.table_exists(address), write=False)
    return bool(rows) and rows[0][0] is not None
