"""Sink tables the bridge creates for a drain or a stream: their ``CREATE TABLE`` per engine, from logical
column types (the provisioning step and ``--create-tables`` use it; ``spark/tables.py`` re-exports it)."""

from __future__ import annotations

from collections.abc import Iterable

from ..transport import ConfigurationError, QueueAddress, Transport

__all__ = ["create_sink_table", "sink_table_ddl"]

# logical column types -> engine types, for sink tables the bridge creates
_TYPES = {
    "postgresql": {
        "string": "text",
        "long": "bigint",
        "int": "integer",
        "short": "smallint",
        "double": "double precision",
        "float": "real",
        "boolean": "boolean",
        "timestamp": "timestamptz",
        "date": "date",
        "binary": "bytea",
        "json": "text",
    },
    "sqlite": {
        "string": "TEXT",
        "long": "INTEGER",
        "int": "INTEGER",
        "short": "INTEGER",
        "double": "REAL",
        "float": "REAL",
        "boolean": "INTEGER",
        "timestamp": "TEXT",
        "date": "TEXT",
        "binary": "BLOB",
        "json": "TEXT",
    },
    "sqlserver": {
        "string": "nvarchar(max)",
        "long": "bigint",
        "int": "int",
        "short": "smallint",
        "double": "float",
        "float": "real",
        "boolean": "bit",
        "timestamp": "datetime2",
        "date": "date",
        "binary": "varbinary(max)",
        "json": "nvarchar(max)",
    },
}


def sink_table_ddl(
    transport: Transport, table: str | QueueAddress, columns: Iterable[tuple[str, str, bool]]
) -> str:
    """``CREATE TABLE`` for a sink table from (name, logical type, nullable) columns; idempotent.

    Logical types: string, long, int, short, double, float, boolean, timestamp, date, binary, json,
    decimal(p,s).
    """
    dialect = transport.dialect
    address = transport.resolve(table)
    qualified = dialect.qualified_name(address)
    types = _TYPES[dialect.name]
    parts = []
    for name, logical, nullable in columns:
        logical = logical.strip().lower()
        if logical.startswith("decimal"):
            engine_type = "NUMERIC" if dialect.name == "sqlite" else logical.replace("decimal", "numeric")
        elif logical in types:
            engine_type = types[logical]
        else:
            raise ConfigurationError(f"column {name!r}: unknown logical type {logical!r}")
        parts.append(f"{dialect.quote(name)} {engine_type} {'NULL' if nullable else 'NOT NULL'}")
    body = ", ".join(parts)
    if dialect.name == "sqlserver":
        literal = qualified.replace("'", "''")
        return f"IF OBJECT_ID(N'{literal}', N'U') IS NULL CREATE TABLE {qualified} ({body})"
    return f"CREATE TABLE IF NOT EXISTS {qualified} ({body})"


def create_sink_table(
    transport: Transport, table: str | QueueAddress, columns: Iterable[tuple[str, str, bool]]
) -> None:
    """Create a sink table if missing (see :func:`sink_table_ddl`). Needs DDL rights."""
    statement = sink_table_ddl(transport, table, columns)
    with transport.connection() as connection:
        cursor = connection.cursor()
        begin = transport.dialect.begin_write()
        if begin:
            cursor.execute(begin, ())
        cursor.execute(statement, ())
        connection.commit()
