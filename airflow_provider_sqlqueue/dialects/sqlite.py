"""SQLite (the standard library's ``sqlite3``): every statement of the engine.

SQLite has one writer at a time, so receivers compete by taking the write lock (``BEGIN IMMEDIATE``) and
deleting the oldest rows with ``DELETE ... RETURNING``; the database runs in WAL mode so readers (peek,
count) never wait for a writer. ``RowVersion`` is the table's ``INTEGER PRIMARY KEY AUTOINCREMENT``, the
rowid itself, so FIFO order is the table's own order and ids are never reused. Times are stored as UTC
text ``YYYY-MM-DD HH:MM:SS.SSS``, computed by SQLite's clock, which compares correctly as text.
"""

from __future__ import annotations

import math
import sqlite3
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from ..model.address import QueueAddress
from ..model.errors import (
    InvalidQueueName,
    MessageTooLarge,
    PermissionDenied,
    QueueNotFound,
    SqlQueueError,
    TransientDatabaseError,
)
from .base import Finding, IndexSpec, TableOptions
from .sqlite_bridge import SqliteBridge
from .sqlite_subscriptions import SqliteSubscriptions
from .transaction_state import SqliteTransactionState

_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"
# A random (version 4) UUID's text, lower case as str(uuid.uuid4()): SQLite has no UUID function.
_NEW_UUID = (
    "lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-' "
    "|| substr('89AB', 1 + (abs(random()) % 4), 1) || substr(hex(randomblob(2)), 2) || '-' "
    "|| hex(randomblob(6)))"
)
_COLUMNS = "Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body"
_VALUES_ROW = "(?, ?, ?, 1, strftime('%Y-%m-%d %H:%M:%f', 'now', ?), ?, ?)"
_COLUMNS_WITHOUT_RECOVERABLE = "Id, CorrelationId, ReplyToAddress, Expires, Headers, Body"
_VALUES_ROW_WITHOUT_RECOVERABLE = "(?, ?, ?, strftime('%Y-%m-%d %H:%M:%f', 'now', ?), ?, ?)"
_RETURNING = (
    "RETURNING Id, CorrelationId, ReplyToAddress, "
    f"(Expires IS NOT NULL AND Expires <= {_NOW}) AS Expired, Headers, Body, RowVersion, Expires"
)

# The per-connection PRAGMAs a returned connection gets back (Dialect.reset_session), each as the new
# connection had it: what the transport's connector set (synchronous, busy_timeout from the URL's timeout)
# and what it relies on staying at SQLite's default (query_only off, or every write fails; foreign_keys,
# recursive_triggers and read_uncommitted as the queue tables were written under; the page cache and where
# temporary tables live). Each holds an integer, read with "PRAGMA name" and set with "PRAGMA name=value".
SESSION_PRAGMAS = (
    "query_only",
    "foreign_keys",
    "busy_timeout",
    "synchronous",
    "recursive_triggers",
    "read_uncommitted",
    "cache_size",
    "temp_store",
)


def _insert_shape(with_recoverable: bool) -> tuple[str, str]:
    """Column list and one VALUES row of a send; tables from newer NServiceBus versions lack Recoverable."""
    if with_recoverable:
        return _COLUMNS, _VALUES_ROW
    return _COLUMNS_WITHOUT_RECOVERABLE, _VALUES_ROW_WITHOUT_RECOVERABLE


class SqliteDialect(SqliteSubscriptions, SqliteBridge, SqliteTransactionState):
    name = "sqlite"
    display_name = "SQLite"
    default_schema = None
    max_identifier_length = 128  # SQLite has no limit; this keeps names portable to SQL Server
    max_body_bytes = 1_000_000_000  # SQLITE_MAX_LENGTH as compiled by default
    send_batch_rows = 500  # 6 parameters a row, well under SQLITE_MAX_VARIABLE_NUMBER
    placeholder = "?"
    single_writer = True
    driver_connection_class = "sqlite3.Connection"
    sqlalchemy_dialect = "sqlite+pysqlite"
    storage_note = (
        "not applicable on SQLite: a deleted row's pages go to the file's freelist and later sends reuse "
        "them, so the file does not grow; only a VACUUM of the whole file (which holds the write lock "
        "throughout) would shrink it, and the package does not run one"
    )

    def prepare_handed_out_connection(self, connection: Any) -> None:
        """sqlite3 begins a transaction before the first INSERT, UPDATE or DELETE (``IMMEDIATE``: the write
        lock at once, not upgraded from a read, which could fail at once with "database is locked"); the
        transport's own connections are in autocommit mode, beginning theirs explicitly. Over ODBC,
        prepare_connection already turned autocommit off."""
        if isinstance(connection, sqlite3.Connection):
            connection.isolation_level = "IMMEDIATE"

    def session_defaults(self, connection: Any) -> tuple[Any, tuple[tuple[str, int], ...]]:
        """sqlite3's ``isolation_level`` (None for the transport's own connections) and each of
        :data:`SESSION_PRAGMAS` as this new connection has it: local reads, once per connection."""
        cursor = connection.cursor()
        try:
            values = []
            for pragma in SESSION_PRAGMAS:
                cursor.execute(f"PRAGMA {pragma}")
                values.append((pragma, int(cursor.fetchall()[0][0])))
        finally:
            cursor.close()
        return getattr(connection, "isolation_level", None), tuple(values)

    def reset_session(self, connection: Any, defaults: Any) -> None:
        """PRAGMAs last as long as the connection: each of :data:`SESSION_PRAGMAS` that differs is set back
        to what it was when the connection was new (no round trip: about 2 µs a PRAGMA). Only those that
        differ: setting a flag PRAGMA expires every prepared statement of the connection, and setting
        ``temp_store`` drops the temporary schema, so the next statements would be compiled anew. sqlite3's
        ``isolation_level`` back to the transport's (over ODBC, autocommit back off)."""
        isolation_level, pragmas = defaults
        native = isinstance(connection, sqlite3.Connection)
        if native:
            if connection.isolation_level != isolation_level:
                connection.isolation_level = isolation_level
        else:  # outside a transaction, where PRAGMA foreign_keys takes effect
            connection.autocommit = True
        try:
            cursor = connection.cursor()
            try:
                for pragma, value in pragmas:
                    cursor.execute(f"PRAGMA {pragma}")
                    if int(cursor.fetchall()[0][0]) != value:
                        cursor.execute(f"PRAGMA {pragma}={int(value)}")
            finally:
                cursor.close()
        finally:
            if not native:
                connection.autocommit = False

    def quote(self, identifier: str) -> str:
        return '"' + identifier.replace('"', '""') + '"'

    def resolve(
        self,
        address: QueueAddress,
        default_schema: str | None = None,
        current_catalog: str | None = None,
    ) -> QueueAddress:
        if address.catalog is not None:
            raise InvalidQueueName(
                f"queue {address} names a catalog, but SQLite has none; a schema part names an attached "
                "database (for example 'main')"
            )
        return super().resolve(address, default_schema, current_catalog)

    def _schema_prefix(self, address: QueueAddress) -> str:
        return f"{self.quote(address.schema)}." if address.schema else ""

    def qualified_name(self, address: QueueAddress) -> str:
        return self._schema_prefix(address) + self.quote(address.table)

    # ---- provisioning --------------------------------------------------------------------------
    def create_table(self, address: QueueAddress, options: TableOptions) -> str:
        body_string = (
            ",\n    BodyString TEXT GENERATED ALWAYS AS (CAST(Body AS TEXT)) VIRTUAL"
            if options.body_string
            else ""
        )
        return (
            f"CREATE TABLE {self.qualified_name(address)} (\n"
            "    Id TEXT NOT NULL,\n"
            "    CorrelationId TEXT NULL,\n"
            "    ReplyToAddress TEXT NULL,\n"
            "    Recoverable INTEGER NOT NULL,\n"
            "    Expires TEXT NULL,\n"
            "    Headers TEXT NOT NULL,\n"
            "    Body BLOB NULL,\n"
            "    RowVersion INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL"
            f"{body_string}\n)"
        )

    def indexes(self, address: QueueAddress, options: TableOptions) -> list[IndexSpec]:
        expires = self.object_name(address, "Expires")
        return [
            IndexSpec(
                expires,
                f"CREATE INDEX {self._schema_prefix(address)}{self.quote(expires)} "
                f"ON {self.quote(address.table)} (Expires) WHERE Expires IS NOT NULL",
            )
        ]

    def add_body_string(self, address: QueueAddress) -> str:
        return (
            f"ALTER TABLE {self.qualified_name(address)} "
            "ADD COLUMN BodyString TEXT GENERATED ALWAYS AS (CAST(Body AS TEXT)) VIRTUAL"
        )

    def drop_table(self, address: QueueAddress) -> str:
        return f"DROP TABLE IF EXISTS {self.qualified_name(address)}"

    def current_catalog(self) -> None:
        """SQLite has no catalog (a schema part names an attached database): nothing to look up."""
        return None

    def lock_for_create(self, address: QueueAddress, current_catalog: str | None = None) -> None:
        return None  # BEGIN IMMEDIATE already holds the database's single write lock

    def begin_write(self) -> str:
        return "BEGIN IMMEDIATE"

    def begin_read(self) -> str:
        return "BEGIN"  # deferred: the first read takes the snapshot the transaction's reads share

    def table_exists(self, address: QueueAddress) -> tuple[str, Sequence[Any]]:
        return (
            f"SELECT 1 FROM {self._schema_prefix(address)}sqlite_master WHERE type = 'table' AND name = ?",
            (address.table,),
        )

    def index_exists(self, address: QueueAddress, index_name: str) -> tuple[str, Sequence[Any]]:
        return (
            f"SELECT 1 FROM {self._schema_prefix(address)}sqlite_master WHERE type = 'index' AND name = ?",
            (index_name,),
        )

    def column_exists(self, address: QueueAddress, column: str) -> tuple[str, Sequence[Any]]:
        schema = address.schema or "main"
        return (
            "SELECT 1 FROM pragma_table_xinfo(?, ?) WHERE lower(name) = lower(?)",
            (address.table, schema, column),
        )

    # ---- runtime -------------------------------------------------------------------------------
    def send(self, address: QueueAddress, with_recoverable: bool = True) -> str:
        columns, row = _insert_shape(with_recoverable)
        return f"INSERT INTO {self.qualified_name(address)} ({columns}) VALUES {row}"

    def send_batch(self, address: QueueAddress, rows: int, with_recoverable: bool = True) -> str:
        columns, row = _insert_shape(with_recoverable)
        return f"INSERT INTO {self.qualified_name(address)} ({columns}) VALUES {', '.join([row] * rows)}"

    def send_params(
        self,
        message_id: Any,
        correlation_id: str | None,
        reply_to_address: str | None,
        time_to_be_received: timedelta | None,
        headers: str,
        body: bytes,
    ) -> tuple[Any, ...]:
        modifier = None
        if time_to_be_received is not None:
            modifier = f"{time_to_be_received.total_seconds():+.3f} seconds"
        return (message_id, correlation_id, reply_to_address, modifier, headers, body)

    def insert_raw(self, address: QueueAddress, with_recoverable: bool = True) -> str:
        columns = _COLUMNS if with_recoverable else _COLUMNS_WITHOUT_RECOVERABLE
        values = "(?, ?, ?, 1, NULL, ?, ?)" if with_recoverable else "(?, ?, ?, NULL, ?, ?)"
        return f"INSERT INTO {self.qualified_name(address)} ({columns}) VALUES {values}"

    def receive_batch(self, address: QueueAddress) -> str:
        table = self.qualified_name(address)
        return (
            f"DELETE FROM {table} WHERE RowVersion IN ("
            f"SELECT RowVersion FROM {table} ORDER BY RowVersion LIMIT ?) {_RETURNING}"
        )

    # SQLite reads min() or max() of the rowid from the b-tree's edge only when it is the query's single
    # aggregate; both in one SELECT scan the whole table (300 ms at 1,000,000 rows). Two scalar subqueries
    # keep each one a single seek.
    def peek_estimate(self, address: QueueAddress) -> str:
        table = self.qualified_name(address)
        return (
            f"SELECT COALESCE((SELECT max(RowVersion) FROM {table}) - (SELECT min(RowVersion) FROM {table})"
            " + 1, 0)"
        )

    def peek_bounds(self, address: QueueAddress) -> str:
        table = self.qualified_name(address)
        return f"SELECT (SELECT min(RowVersion) FROM {table}), (SELECT max(RowVersion) FROM {table})"

    def count_exact(self, address: QueueAddress) -> str:
        return (
            f"SELECT count(*) FROM {self.qualified_name(address)} WHERE Expires IS NULL OR Expires > {_NOW}"
        )

    def browse(self, address: QueueAddress) -> str:
        # A WAL reader: it sees the last committed state and neither waits for nor blocks a writer, so
        # messages a receiver has deleted but not yet committed still show.
        return (
            "SELECT Id, CorrelationId, ReplyToAddress, Headers, Body, RowVersion, Expires "
            f"FROM {self.qualified_name(address)} WHERE Expires IS NULL OR Expires > {_NOW} "
            "ORDER BY RowVersion LIMIT ?"
        )

    def oldest_headers(self, address: QueueAddress) -> str:
        return (
            f"SELECT RowVersion, Headers FROM {self.qualified_name(address)} "
            f"WHERE Expires IS NULL OR Expires > {_NOW} ORDER BY RowVersion LIMIT 1"
        )

    def count_expired(self, address: QueueAddress) -> str:
        return f"SELECT count(*) FROM {self.qualified_name(address)} WHERE Expires <= {_NOW}"

    def queue_tables(self, schema: str | None) -> tuple[str, Sequence[Any]]:
        prefix = f"{self.quote(schema)}." if schema else ""
        return (
            f"SELECT ?, m.name FROM {prefix}sqlite_master m WHERE m.type = 'table' AND ("
            "SELECT count(*) FROM pragma_table_info(m.name, ?) p WHERE lower(p.name) IN "
            "('id', 'headers', 'body', 'rowversion', 'expires')) = 5 ORDER BY m.name",
            (schema, schema or "main"),
        )

    def failed_page(self, address: QueueAddress) -> str:
        return (
            f"SELECT RowVersion, Id, Headers FROM {self.qualified_name(address)} "
            "WHERE RowVersion > ? ORDER BY RowVersion LIMIT ?"
        )

    def failed_newest(self, address: QueueAddress) -> str:
        return (
            f"SELECT RowVersion, Id, Headers FROM {self.qualified_name(address)} "
            "ORDER BY RowVersion DESC LIMIT ?"
        )

    def failed_messages(self, address: QueueAddress) -> str:
        return (
            "SELECT Id, CorrelationId, ReplyToAddress, Headers, Body, RowVersion, Expires "
            f"FROM {self.qualified_name(address)} WHERE Id = ? ORDER BY RowVersion"
        )

    def take_failed_row(self, address: QueueAddress) -> str:
        return (
            f"DELETE FROM {self.qualified_name(address)} WHERE RowVersion = ? "
            "RETURNING Id, CorrelationId, ReplyToAddress, Headers, Body"
        )

    def purge_expired_batch(self, address: QueueAddress) -> str:
        table = self.qualified_name(address)
        return (
            f"DELETE FROM {table} WHERE RowVersion IN ("
            f"SELECT RowVersion FROM {table} WHERE Expires < {_NOW} LIMIT ?)"
        )

    # ---- the archive beside an error queue -----------------------------------------------------
    def create_archive_table(self, address: QueueAddress) -> str:
        return (
            f"CREATE TABLE {self.qualified_name(address)} (\n"
            "    Id TEXT NOT NULL,\n"
            "    CorrelationId TEXT NULL,\n"
            "    ReplyToAddress TEXT NULL,\n"
            "    Recoverable INTEGER NULL,\n"
            "    Expires TEXT NULL,\n"
            "    Headers TEXT NOT NULL,\n"
            "    Body BLOB NULL,\n"
            "    ErrorRowVersion INTEGER NOT NULL,\n"
            f"    ArchivedAt TEXT NOT NULL DEFAULT ({_NOW})\n)"
        )

    def archive_indexes(self, address: QueueAddress) -> list[IndexSpec]:
        archived_at = self.object_name(address, "ArchivedAt")
        return [
            IndexSpec(
                archived_at,
                f"CREATE INDEX {self._schema_prefix(address)}{self.quote(archived_at)} "
                f"ON {self.quote(address.table)} (ArchivedAt)",
            )
        ]

    def archive_failed_row(
        self, address: QueueAddress, archive: QueueAddress, with_recoverable: bool = True
    ) -> list[str]:
        # SQLite cannot insert what a DELETE returns: the copy and the DELETE run under the caller's write
        # lock (BEGIN IMMEDIATE), so no other writer comes between them. The last statement answers with
        # a row when the DELETE took one (changes()), not through RETURNING, which the SQLite ODBC driver
        # loses (tests/test_pyodbc_layer.py); it takes the RowVersion as every statement here does.
        recoverable = "Recoverable" if with_recoverable else "NULL"
        table = self.qualified_name(address)
        return [
            f"INSERT INTO {self.qualified_name(archive)} (Id, CorrelationId, ReplyToAddress, Recoverable, "
            "Expires, Headers, Body, ErrorRowVersion) "
            f"SELECT Id, CorrelationId, ReplyToAddress, {recoverable}, Expires, Headers, Body, RowVersion "
            f"FROM {table} WHERE RowVersion = ?",
            f"DELETE FROM {table} WHERE RowVersion = ?",
            "SELECT 1 WHERE changes() > 0 AND ? IS NOT NULL",
        ]

    def purge_archive_batch(self, archive: QueueAddress) -> str:
        table = self.qualified_name(archive)
        return (
            f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} "
            "WHERE ArchivedAt < strftime('%Y-%m-%d %H:%M:%f', 'now', ?) LIMIT ?)"
        )

    def purge_archive_params(self, older_than_seconds: int, size: int) -> tuple[Any, ...]:
        return (f"-{older_than_seconds} seconds", size)

    def count_archive(self, archive: QueueAddress) -> str:
        return f"SELECT count(*) FROM {self.qualified_name(archive)}"

    def inspect(self, cursor: Any, address: QueueAddress, options: TableOptions) -> list[Finding]:
        schema = address.schema or "main"
        findings = []
        cursor.execute(
            "SELECT lower(type), pk FROM pragma_table_info(?, ?) WHERE lower(name) = 'rowversion'",
            (address.table, schema),
        )
        row = cursor.fetchone()
        if row is None or row[0] != "integer" or row[1] != 1:
            name = self.object_name(address, "RowVersion")
            findings.append(
                Finding(
                    "missing_rowversion_index",
                    f"Queue table {address} does not have RowVersion as its INTEGER PRIMARY KEY, so "
                    "receives scan for the oldest rows.",
                    f"CREATE UNIQUE INDEX {self._schema_prefix(address)}{self.quote(name)} "
                    f"ON {self.quote(address.table)} (RowVersion)",
                )
            )
        cursor.execute(
            "SELECT il.name FROM pragma_index_list(?, ?) il "
            "JOIN pragma_index_info(il.name, ?) ii ON ii.seqno = 0 WHERE lower(ii.name) = 'expires'",
            (address.table, schema, schema),
        )
        if cursor.fetchone() is None:
            spec = self.indexes(address, options)[0]
            findings.append(
                Finding(
                    "missing_expires_index",
                    f"Queue table {address} has no index on Expires (purging expired messages finds "
                    "them through it).",
                    spec.create,
                )
            )
        return findings

    # ---- delayed delivery ----------------------------------------------------------------------
    def create_delayed_table(self, address: QueueAddress) -> str:
        return (
            f"CREATE TABLE {self.qualified_name(address)} (\n"
            "    Headers TEXT NOT NULL,\n"
            "    Body BLOB NULL,\n"
            "    Due TEXT NOT NULL,\n"
            "    RowVersion INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL\n)"
        )

    def delayed_indexes(self, address: QueueAddress) -> list[IndexSpec]:
        due = self.object_name(address, "Due")
        return [
            IndexSpec(
                due,
                f"CREATE INDEX {self._schema_prefix(address)}{self.quote(due)} "
                f"ON {self.quote(address.table)} (Due)",
            )
        ]

    def store_delayed(self, address: QueueAddress) -> str:
        return (
            f"INSERT INTO {self.qualified_name(address)} (Headers, Body, Due) "
            "VALUES (?, ?, COALESCE(?, strftime('%Y-%m-%d %H:%M:%f', 'now', ?)))"
        )

    def store_delayed_params(
        self, headers: str, body: bytes, deliver_at: datetime | None, delay: timedelta | None
    ) -> tuple[Any, ...]:
        # Due is text with milliseconds; both forms round up to the next millisecond, never down.
        at = modifier = None
        if deliver_at is not None:
            utc = deliver_at.astimezone(timezone.utc)
            if utc.microsecond % 1000:
                utc += timedelta(microseconds=1000 - utc.microsecond % 1000)
            at = utc.strftime("%Y-%m-%d %H:%M:%S.") + f"{utc.microsecond // 1000:03d}"
        elif delay is not None:
            modifier = f"{math.ceil(delay.total_seconds() * 1000) / 1000:+.3f} seconds"
        return (headers, body, at, modifier)

    def select_due_delayed(self, address: QueueAddress) -> str:
        return (
            f"SELECT RowVersion, Headers FROM {self.qualified_name(address)} "
            f"WHERE Due <= {_NOW} ORDER BY Due LIMIT ?"
        )

    def move_delayed_rows(
        self, address: QueueAddress, destination: QueueAddress, rows: int, with_recoverable: bool
    ) -> list[str]:
        # SQLite cannot insert what a DELETE returns: the copy and the DELETE run under the move's write
        # lock (BEGIN IMMEDIATE), so no other writer comes between them.
        columns = _COLUMNS if with_recoverable else _COLUMNS_WITHOUT_RECOVERABLE
        recoverable = "1, " if with_recoverable else ""
        marks = ", ".join(["?"] * rows)
        table = self.qualified_name(address)
        return [
            f"INSERT INTO {self.qualified_name(destination)} ({columns}) "
            f"SELECT {_NEW_UUID}, NULL, NULL, {recoverable}NULL, Headers, Body FROM {table} "
            f"WHERE RowVersion IN ({marks}) ORDER BY Due, RowVersion",
            f"DELETE FROM {table} WHERE RowVersion IN ({marks})",
        ]

    def select_delayed_rows(self, address: QueueAddress, rows: int) -> str:
        return (
            f"SELECT Headers, Body, RowVersion FROM {self.qualified_name(address)} "
            f"WHERE RowVersion IN ({', '.join(['?'] * rows)})"
        )

    def delete_delayed_rows(self, address: QueueAddress, rows: int) -> str:
        return f"DELETE FROM {self.qualified_name(address)} WHERE RowVersion IN ({', '.join(['?'] * rows)})"

    def next_due_delayed(self, address: QueueAddress) -> str:
        return f"SELECT {_NOW}, min(Due) FROM {self.qualified_name(address)}"

    def count_delayed(self, address: QueueAddress) -> str:
        return f"SELECT count(*) FROM {self.qualified_name(address)}"

    def try_lock_delayed_mover(self, address: QueueAddress) -> None:
        return None  # each move holds the database's single write lock (BEGIN IMMEDIATE)

    def unlock_delayed_mover(self, address: QueueAddress) -> None:
        return None

    # ---- driver glue ---------------------------------------------------------------------------
    def row_id(self, value: Any) -> Any:
        return str(value) if isinstance(value, uuid.UUID) else value

    def classify(self, error: BaseException, address: QueueAddress | None = None) -> SqlQueueError | None:
        if not isinstance(error, sqlite3.Error):
            return None
        text = str(error)
        lowered = text.lower()
        where = f" (queue {address})" if address is not None else ""
        if "no such table" in lowered or "unknown database" in lowered:
            return QueueNotFound(f"{text}{where}: create the queue first")
        if "locked" in lowered or "busy" in lowered:
            return TransientDatabaseError(f"SQLite database is busy: {text}{where}")
        if "readonly" in lowered or "read-only" in lowered:
            return PermissionDenied(f"SQLite database is read-only: {text}{where}")
        if "too big" in lowered:
            return MessageTooLarge(f"SQLite refused the message: {text}{where}")
        if "disk i/o" in lowered:
            return TransientDatabaseError(f"SQLite I/O error: {text}{where}")
        return None

    def is_connection_lost(self, error: BaseException) -> bool:
        return isinstance(error, sqlite3.ProgrammingError) and "closed" in str(error).lower()
