"""One module per SQL engine, each holding all of that engine's SQL text.

This package builds on :mod:`airflow_provider_sqlqueue.model` only. A variant of an engine (Babelfish for
SQL Server) extends that engine's module; choosing between them happens here, above both, so the engine
module never imports its variants.
"""

from __future__ import annotations

from typing import Any

from .babelfish import BabelfishDialect
from .base import Dialect, Finding, IndexSpec, Row, TableOptions
from .postgres import PostgresDialect
from .sqlite import SqliteDialect
from .sqlserver import SqlServerDialect

__all__ = ["Dialect", "Finding", "IndexSpec", "Row", "TableOptions", "dialect_for_server", "get_dialect"]


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
