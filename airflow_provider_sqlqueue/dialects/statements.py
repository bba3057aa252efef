"""Statements as data: each engine's SQL is a table of named statements, read by one renderer.

A dialect's :attr:`~.base.Dialect.statements` maps a statement's name (what it does: ``receive_batch``,
``count_expired``) to its text, so that a DBA reads every statement of an engine in one place and a test can
walk them all. The text holds placeholders for what varies, filled by :meth:`~.base.Dialect.sql`:

- ``{table}``: the quoted, qualified name of the address the statement runs on (``{destination}`` and
  ``{archive}`` for a second table);
- ``{p}``: the parameter marker of the engine's driver (``%s`` for psycopg, ``?`` for pyodbc and sqlite3);
- ``{now}``: the engine's clock, as the queue table keeps time;
- ``{marks}``: as many parameter markers as the caller binds values (``IN`` lists);
- any fragment the engine declares in :attr:`~.base.Dialect.fragments` (a column list, a condition), so
  that statements which differ only there are written once.

:data:`PORTABLE` holds the statements PostgreSQL and SQLite write alike but for the parameter marker and the
clock; each engine's module adds or replaces its own. What stays Python is what is code: choosing a
statement by lock mode or layout, driver glue, error classification and inspection.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["PORTABLE", "PORTABLE_FRAGMENTS", "StatementTable", "marks"]

StatementTable = Mapping[str, "str | tuple[str, ...]"]


def marks(placeholder: str, count: int) -> str:
    """``count`` parameter markers, comma-separated (an ``IN`` list the caller binds)."""
    return ", ".join([placeholder] * count)


PORTABLE_FRAGMENTS = {
    # the columns a send writes; tables from newer NServiceBus versions lack Recoverable
    "columns": "Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body",
    "columns_without_recoverable": "Id, CorrelationId, ReplyToAddress, Expires, Headers, Body",
    # what a listing of subscriptions filters on, and how it stops after N rows
    "by_topic": "Topic = {p}",
    "by_endpoint": "Endpoint = {p}",
    "limit": " LIMIT {p}",
}

_ROW = "Id, CorrelationId, ReplyToAddress, Headers, Body, RowVersion, Expires"
_UNEXPIRED = "WHERE Expires IS NULL OR Expires > {now}"

PORTABLE: StatementTable = {
    "drop_table": "DROP TABLE IF EXISTS {table}",
    "count_exact": "SELECT count(*) FROM {table} " + _UNEXPIRED,
    # A plain read: no row locks, never waits for receivers; rows a receiver has deleted but not yet
    # committed still show until its transaction commits (PostgreSQL's MVCC, SQLite's WAL reader).
    "browse": f"SELECT {_ROW} FROM {{table}} {_UNEXPIRED} ORDER BY RowVersion LIMIT {{p}}",
    "oldest_headers": "SELECT RowVersion, Headers FROM {table} "
    + _UNEXPIRED
    + " ORDER BY RowVersion LIMIT 1",
    "count_expired": "SELECT count(*) FROM {table} WHERE Expires <= {now}",
    "failed_page": "SELECT RowVersion, Id, Headers FROM {table} WHERE {after} ORDER BY RowVersion LIMIT {p}",
    "failed_newest": "SELECT RowVersion, Id, Headers FROM {table} ORDER BY RowVersion DESC LIMIT {p}",
    "failed_messages": f"SELECT {_ROW} FROM {{table}} WHERE Id = {{p}} ORDER BY RowVersion",
    "take_failed_row": (
        "DELETE FROM {table} WHERE RowVersion = {p} RETURNING Id, CorrelationId, ReplyToAddress, Headers, "
        "Body"
    ),
    # ---- the delayed table
    "select_due_delayed": "SELECT RowVersion, Headers FROM {table} WHERE Due <= {now} ORDER BY Due LIMIT {p}",
    "select_delayed_rows": "SELECT Headers, Body, RowVersion FROM {table} WHERE RowVersion IN ({marks})",
    "delete_delayed_rows": "DELETE FROM {table} WHERE RowVersion IN ({marks})",
    "next_due_delayed": "SELECT {now}, min(Due) FROM {table}",
    "count_delayed": "SELECT count(*) FROM {table}",
    # ---- the archive beside an error queue
    "count_archive": "SELECT count(*) FROM {table}",
    # ---- the subscription table
    "subscribe": (
        "INSERT INTO {table} (Endpoint, Topic, QueueAddress) VALUES ({p}, {p}, {p}) "
        "ON CONFLICT (Endpoint, Topic) DO UPDATE SET QueueAddress = EXCLUDED.QueueAddress"
    ),
    "unsubscribe": "DELETE FROM {table} WHERE Endpoint = {p} AND Topic = {p}",
    "select_subscribers": "SELECT DISTINCT QueueAddress FROM {table} WHERE Topic IN ({marks})",
    "select_subscriptions": (
        "SELECT QueueAddress, Endpoint, Topic FROM {table}{where} ORDER BY Topic, Endpoint{limit}"
    ),
}
