"""One module per SQL engine, each holding all of that engine's SQL text."""

from __future__ import annotations

from .base import Dialect, Finding, IndexSpec, Row, TableOptions

__all__ = ["Dialect", "Finding", "IndexSpec", "Row", "TableOptions", "get_dialect"]


def get_dialect(name: str) -> Dialect:
    """The dialect for ``sqlserver``, ``postgresql`` or ``sqlite``."""
    if name == "postgresql":
        from .postgres import PostgresDialect

        return PostgresDialect()
    if name == "sqlite":
        from .sqlite import SqliteDialect

        return SqliteDialect()
    if name == "sqlserver":
        from .sqlserver import SqlServerDialect

        return SqlServerDialect()
    raise ValueError(f"unknown SQL dialect {name!r}; expected sqlserver, postgresql or sqlite")
