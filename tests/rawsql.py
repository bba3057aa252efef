"""Raw SQL the tests use to look behind the transport's back, written by hand per engine."""

from __future__ import annotations

import uuid
from typing import Any

from airflow_provider_sqlqueue.transport import TableQueue, Transport


def execute(transport: Transport, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on a pooled connection, commit, and return its rows (if any)."""
    with transport.connection() as connection:
        cursor = connection.cursor()
        cursor.execute(sql, params)
        rows = transport.dialect.fetch_rows(cursor) if cursor.description is not None else []
        connection.commit()
        return [tuple(row) for row in rows]


def param(transport: Transport) -> str:
    return transport.dialect.placeholder


def table_of(queue: TableQueue) -> str:
    return queue.dialect.qualified_name(queue.address)


def insert_foreign_row(queue: TableQueue, headers: str, body: bytes = b"payload") -> uuid.UUID:
    """A row written by another system, with whatever headers text it likes."""
    p = param(queue.transport)
    row_id = uuid.uuid4()
    value: Any = str(row_id) if queue.dialect.name != "postgresql" else row_id
    recoverable = "true" if queue.dialect.name == "postgresql" else "1"
    sql = (
        f"INSERT INTO {table_of(queue)} (Id, Recoverable, Headers, Body) "
        f"VALUES ({p}, {recoverable}, {p}, {p})"
    )
    execute(queue.transport, sql, (value, headers, body))
    return row_id


def all_rows(queue: TableQueue) -> list[tuple[Any, ...]]:
    """(Id as str, Headers, Body) of every row, in RowVersion order."""
    rows = execute(queue.transport, f"SELECT Id, Headers, Body FROM {table_of(queue)} ORDER BY RowVersion")
    return [(str(r[0]).lower(), r[1], bytes(r[2]) if r[2] is not None else None) for r in rows]


def column_values(queue: TableQueue, column: str) -> list[Any]:
    rows = execute(queue.transport, f"SELECT {column} FROM {table_of(queue)} ORDER BY RowVersion")
    return [row[0] for row in rows]


def drop_index(queue: TableQueue, index_name: str) -> None:
    dialect = queue.dialect
    if dialect.name == "sqlserver":
        execute(queue.transport, f"DROP INDEX {dialect.quote(index_name)} ON {table_of(queue)}")
    elif dialect.name == "postgresql":
        execute(
            queue.transport, f"DROP INDEX {dialect.quote(queue.address.schema)}.{dialect.quote(index_name)}"
        )
    else:
        execute(queue.transport, f"DROP INDEX {dialect.quote(index_name)}")


def user_tables(transport: Transport, schema: str | None) -> set[str]:
    name = transport.dialect.name
    if name == "sqlite":
        rows = execute(
            transport, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    elif name == "postgresql":
        rows = execute(transport, "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))
    else:
        rows = execute(
            transport,
            "SELECT t.name FROM sys.tables t JOIN sys.schemas s ON s.schema_id = t.schema_id "
            "WHERE s.name = ?",
            (schema,),
        )
    return {row[0] for row in rows}
