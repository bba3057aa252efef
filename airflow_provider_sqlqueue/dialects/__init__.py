"""One module per SQL engine, each holding all of that engine's SQL text.

This package builds on :mod:`airflow_provider_sqlqueue.model` only. A variant of an engine (Babelfish for
SQL Server) extends that engine's module; choosing between them happens here, above both, so the engine
module never imports its variants.
"""

from __future__ import annotations

from typing import Any

from .babelfish import BabelfishDialect
from .base import Dialect, Finding, IndexSpec, Row, TableOptions
from .odbc import PostgresOverOdbc, PostgresReferenceLayoutOverOdbc
from .postgres import PostgresDialect
from .postgres_reference import PostgresReferenceLayout
from .sqlite import SqliteDialect
from .sqlserver import SqlServerDialect

__all__ = [
    "Dialect",
    "Finding",
    "IndexSpec",
    "Row",
    "TableOptions",
    "dialect_for_layout",
    "dialect_for_server",
    "dialect_for_table",
    "get_dialect",
]

# The dialects of queue-table layouts an engine has beside the one its own dialect reads and writes.
_LAYOUT_DIALECTS: dict[tuple[type[Dialect], str], Dialect] = {
    (PostgresDialect, "postgresql-transport"): PostgresReferenceLayout(),
    (PostgresOverOdbc, "postgresql-transport"): PostgresReferenceLayoutOverOdbc(),
}


def get_dialect(name: str, variant: str | None = None) -> Dialect:
    """The dialect for ``sqlserver``, ``postgresql`` or ``sqlite``; ``variant="babelfish"`` for SQL Server's
    Babelfish variant."""
    if name == "sqlserver" and variant == "babelfish":
        return BabelfishDialect()
    if variant is not None:
        raise ValueError(
            f"unknown variant {variant!r} of the SQL dialect {name!r}; the one variant is babelfish"
        )
    if name == "postgresql":
        return PostgresDialect()
    if name == "sqlite":
        return SqliteDialect()
    if name == "sqlserver":
        return SqlServerDialect()
    raise ValueError(f"unknown SQL dialect {name!r}; expected sqlserver, postgresql or sqlite")


def dialect_for_server(dialect: Dialect, connection: Any) -> Dialect:
    """The dialect to use for the server behind ``connection``: ``dialect`` itself, or the variant of it
    that the server asks for (:meth:`Dialect.server_variant`). Asked once per transport."""
    variant = dialect.server_variant(connection)
    return dialect if variant is None else get_dialect(dialect.name, variant)


def dialect_for_layout(dialect: Dialect, layout: str) -> Dialect:
    """``dialect``, or the dialect of the same engine for queue tables of another ``layout``; a
    ValueError names the layouts the engine has when it has no such one."""
    if layout == dialect.layout:
        return dialect
    found = _LAYOUT_DIALECTS.get((type(dialect), layout))
    if found is None:
        known = [dialect.layout] + [name for kind, name in _LAYOUT_DIALECTS if kind is type(dialect)]
        raise ValueError(
            f"{dialect.display_name} queue tables have the layout {' or '.join(map(repr, known))}, "
            f"not {layout!r}"
        )
    return found


def dialect_for_table(dialect: Dialect, cursor: Any, address: Any) -> Dialect | None:
    """The dialect for the existing queue table at ``address``: ``dialect``, or the one its columns ask
    for (:meth:`Dialect.table_layout`); None when the table does not exist. One catalog query on engines
    that meet more than one layout, none elsewhere."""
    layout = dialect.table_layout(cursor, address)
    return None if layout is None else dialect_for_layout(dialect, layout)
