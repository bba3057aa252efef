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
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
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
from .base import Dialect, Finding, IndexSpec, TableOptions
from .bridge import BridgeColumnTypes
from .statements import BRIDGE, PORTABLE, PORTABLE_FRAGMENTS, StatementTable
from .transaction_state import SqliteTransactionState

_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"
# A random (version 4) UUID's text, lower case as str(uuid.uuid4()): SQLite has no UUID function.
_NEW_UUID = (
    "lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-' "
    "|| substr('89AB', 1 + (abs(random()) % 4), 1) || substr(hex(randomblob(2)), 2) || '-' "
    "|| hex(randomblob(6)))"
)
_RETURNING = (
    "RETURNING Id, CorrelationId, ReplyToAddress, "
    f"(Expires IS NOT NULL AND Expires <= {_NOW}) AS Expired, Headers, Body, RowVersion, Expires"
)

FRAGMENTS = {
    **PORTABLE_FRAGMENTS,
    "send_row": "(?, ?, ?, 1, strftime('%Y-%m-%d %H:%M:%f', 'now', ?), ?, ?)",
    "send_row_without_recoverable": "(?, ?, ?, strftime('%Y-%m-%d %H:%M:%f', 'now', ?), ?, ?)",
    "raw_row": "(?, ?, ?, 1, NULL, ?, ?)",
    "raw_row_without_recoverable": "(?, ?, ?, NULL, ?, ?)",
    "true": "1",
    "archived_recoverable": "Recoverable",
    "archived_recoverable_without_recoverable": "NULL",
    "restored_recoverable": "COALESCE(Recoverable, 1)",
    # a Body stored as text counts its bytes too
    "body_size": "length(CAST(Body AS BLOB))",
    "after": "RowVersion > ?",
    "bridge_now": _NOW,
    "bridge_id_column": "Id",
}

STATEMENTS: StatementTable = {
    **PORTABLE,
    **BRIDGE,
    # strftime takes the age as a modifier: '-90.000 seconds'
    "bridge_older_than": "{column} < strftime('%Y-%m-%d %H:%M:%f', 'now', ?)",
    "bridge_seconds_since": "(julianday('now') - julianday({column})) * 86400.0",
    "create_table": (
        "CREATE TABLE {table} (\n"
        "    Id TEXT NOT NULL,\n"
        "    CorrelationId TEXT NULL,\n"
        "    ReplyToAddress TEXT NULL,\n"
        "    Recoverable INTEGER NOT NULL,\n"
        "    Expires TEXT NULL,\n"
        "    Headers TEXT NOT NULL,\n"
        "    Body BLOB NULL,\n"
        "    RowVersion INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL{body_string}\n)"
    ),
    "body_string_column": "BodyString TEXT GENERATED ALWAYS AS (CAST(Body AS TEXT)) VIRTUAL",
    "add_body_string": (
        "ALTER TABLE {table} ADD COLUMN BodyString TEXT GENERATED ALWAYS AS (CAST(Body AS TEXT)) VIRTUAL"
    ),
    "table_exists": "SELECT 1 FROM {schema}sqlite_master WHERE type = 'table' AND name = ?",
    "index_exists": "SELECT 1 FROM {schema}sqlite_master WHERE type = 'index' AND name = ?",
    "column_exists": "SELECT 1 FROM pragma_table_xinfo(?, ?) WHERE lower(name) = lower(?)",
    "queue_tables": (
        "SELECT ?, m.name FROM {schema}sqlite_master m WHERE m.type = 'table' AND ("
        "SELECT count(*) FROM pragma_table_info(m.name, ?) p WHERE lower(p.name) IN "
        "('id', 'headers', 'body', 'rowversion', 'expires')) = 5 ORDER BY m.name"
    ),
    "inspect_rowversion": (
        "SELECT lower(type), pk FROM pragma_table_info(?, ?) WHERE lower(name) = 'rowversion'"
    ),
    "inspect_expires_index": (
        "SELECT il.name FROM pragma_index_list(?, ?) il "
        "JOIN pragma_index_info(il.name, ?) ii ON ii.seqno = 0 WHERE lower(ii.name) = 'expires'"
    ),
    "insert": "INSERT INTO {table} ({columns}) VALUES {values}",
    "receive_batch": (
        "DELETE FROM {table} WHERE RowVersion IN (SELECT RowVersion FROM {table} ORDER BY RowVersion LIMIT "
        "?) " + _RETURNING
    ),
    # SQLite reads min() or max() of the rowid from the b-tree's edge only when it is the query's single
    # aggregate; both in one SELECT scan the whole table (300 ms at 1,000,000 rows). Two scalar subqueries
    # keep each one a single seek.
    "peek_estimate": (
        "SELECT COALESCE((SELECT max(RowVersion) FROM {table}) - (SELECT min(RowVersion) FROM {table}) + "
        "1, 0)"
    ),
    "peek_bounds": "SELECT (SELECT min(RowVersion) FROM {table}), (SELECT max(RowVersion) FROM {table})",
    "purge_expired_batch": (
        "DELETE FROM {table} WHERE RowVersion IN (SELECT RowVersion FROM {table} WHERE Expires < {now} "
        "LIMIT ?)"
    ),
    # Over ODBC, where the driver loses what DELETE ... RETURNING returns (see odbc.py)
    "select_oldest": (
        "SELECT Id, CorrelationId, ReplyToAddress, "
        "(Expires IS NOT NULL AND Expires <= {now}) AS Expired, Headers, Body, RowVersion, Expires "
        "FROM {table} ORDER BY RowVersion LIMIT ?"
    ),
    "delete_row_versions": "DELETE FROM {table} WHERE RowVersion IN ({marks})",
    # ---- the delayed table
    "create_delayed_table": (
        "CREATE TABLE {table} (\n"
        "    Headers TEXT NOT NULL,\n"
        "    Body BLOB NULL,\n"
        "    Due TEXT NOT NULL,\n"
        "    RowVersion INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL\n)"
    ),
    "store_delayed": (
        "INSERT INTO {table} (Headers, Body, Due) VALUES (?, ?, COALESCE(?, strftime('%Y-%m-%d %H:%M:%f', "
        "'now', ?)))"
    ),
    # SQLite cannot insert what a DELETE returns: the copy and the DELETE run under the move's write lock
    # (BEGIN IMMEDIATE), so no other writer comes between them.
    "move_delayed_rows": (
        "INSERT INTO {destination} ({columns}) "
        f"SELECT {_NEW_UUID}, NULL, NULL, {{recoverable}}NULL, Headers, Body FROM {{table}} "
        "WHERE RowVersion IN ({marks}) ORDER BY Due, RowVersion",
        "DELETE FROM {table} WHERE RowVersion IN ({marks})",
    ),
    # ---- the archive beside an error queue
    "create_archive_table": (
        "CREATE TABLE {table} (\n"
        "    Id TEXT NOT NULL,\n"
        "    CorrelationId TEXT NULL,\n"
        "    ReplyToAddress TEXT NULL,\n"
        "    Recoverable INTEGER NULL,\n"
        "    Expires TEXT NULL,\n"
        "    Headers TEXT NOT NULL,\n"
        "    Body BLOB NULL,\n"
        "    ErrorRowVersion INTEGER NOT NULL,\n"
        "    ArchivedAt TEXT NOT NULL DEFAULT ({now})\n)"
    ),
    # As the delayed move, under the caller's write lock. The last statement answers with a row when the
    # DELETE took one (changes()), not through RETURNING, which the SQLite ODBC driver loses
    # (tests/test_pyodbc_layer.py); it takes the RowVersion as every statement here does.
    "archive_failed_row": (
        "INSERT INTO {archive} (Id, CorrelationId, ReplyToAddress, Recoverable, "
        "Expires, Headers, Body, ErrorRowVersion) "
        "SELECT Id, CorrelationId, ReplyToAddress, {recoverable}, Expires, Headers, Body, RowVersion "
        "FROM {table} WHERE RowVersion = ?",
        "DELETE FROM {table} WHERE RowVersion = ?",
        "SELECT 1 WHERE changes() > 0 AND ? IS NOT NULL",
    ),
    # The way back, as the move there: copy, delete, then the count (changes()) of the DELETE, which under
    # the write lock equals the copy's.
    "restore_archived": (
        "INSERT INTO {table} ({columns}) "
        "SELECT Id, CorrelationId, ReplyToAddress, {recoverable}Expires, Headers, Body FROM {archive} "
        "WHERE Id = ? ORDER BY ErrorRowVersion",
        "DELETE FROM {archive} WHERE Id = ?",
        "SELECT changes() WHERE ? IS NOT NULL",
    ),
    "purge_archive_batch": (
        "DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} "
        "WHERE ArchivedAt < strftime('%Y-%m-%d %H:%M:%f', 'now', ?) LIMIT ?)"
    ),
    # ---- the depth history of the schema's queues
    "create_depth_samples_table": (
        "CREATE TABLE {table} (\n"
        "    QueueName TEXT NOT NULL,\n"
        "    SampledMinute INTEGER NOT NULL,\n"
        "    Messages INTEGER NOT NULL,\n"
        "    MessagesExact INTEGER NOT NULL,\n"
        "    Failed INTEGER NULL,\n"
        "    PRIMARY KEY (QueueName, SampledMinute)\n)"
    ),
    # ---- the subscription table (the reference's columns and key); one writer at a time, so no upsert races
    "create_subscription_table": (
        "CREATE TABLE {table} (\n"
        "    QueueAddress VARCHAR({width}) NOT NULL,\n"
        "    Endpoint VARCHAR({width}) NOT NULL,\n"
        "    Topic VARCHAR({width}) NOT NULL,\n"
        "    PRIMARY KEY (Endpoint, Topic)\n)"
    ),
}

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


class SqliteDialect(SqliteTransactionState, Dialect):
    name = "sqlite"
    display_name = "SQLite"
    default_schema = None
    max_identifier_length = 128  # SQLite has no limit; this keeps names portable to SQL Server
    max_body_bytes = 1_000_000_000  # SQLITE_MAX_LENGTH as compiled by default
    send_batch_rows = 500  # 6 parameters a row, well under SQLITE_MAX_VARIABLE_NUMBER
    placeholder = "?"
    clock = _NOW
    statements = STATEMENTS
    fragments = FRAGMENTS
    single_writer = True
    names_derived_columns = False
    driver_connection_class = "sqlite3.Connection"
    sqlalchemy_dialect = "sqlite+pysqlite"
    # The Spark bridge's control tables keep text timestamps, as the queue table keeps Expires.
    bridge_column_types = BridgeColumnTypes(
        "TEXT", "TEXT", "TEXT", "BLOB", "INTEGER", "varchar(200)", "varchar(450)", "TEXT"
    )
    bridge_stage_rows_limit = 3000
    bridge_insert_parameters = 30000
    bridge_bind_seconds = staticmethod(lambda seconds: f"-{float(seconds):.3f} seconds")
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

    def check_names(self, resolved: QueueAddress, current_catalog: str | None) -> None:
        if resolved.catalog is not None:
            raise InvalidQueueName(
                f"queue {resolved} names a catalog, but SQLite has none; a schema part names an attached "
                "database (for example 'main')"
            )

    def _schema_prefix(self, address: QueueAddress) -> str:
        return f"{self.quote(address.schema)}." if address.schema else ""

    def qualified_name(self, address: QueueAddress) -> str:
        return self._schema_prefix(address) + self.quote(address.table)

    def index_names(self, address: QueueAddress, name: str) -> tuple[str, str]:
        return self._schema_prefix(address) + self.quote(name), self.quote(address.table)

    # ---- provisioning --------------------------------------------------------------------------
    def create_table(self, address: QueueAddress, options: TableOptions) -> str:
        body_string = ",\n    " + self.sql("body_string_column") if options.body_string else ""
        return self.sql("create_table", address, body_string=body_string)

    def indexes(self, address: QueueAddress, options: TableOptions) -> list[IndexSpec]:
        return [self.index_spec(address, "Expires", "create_expires_index")]

    def lock_for_create(self, address: QueueAddress, current_catalog: str | None = None) -> None:
        return None  # BEGIN IMMEDIATE already holds the database's single write lock

    def begin_write(self) -> str:
        return "BEGIN IMMEDIATE"

    def begin_read(self) -> str:
        return "BEGIN"  # deferred: the first read takes the snapshot the transaction's reads share

    def table_exists(self, address: QueueAddress) -> tuple[str, Sequence[Any]]:
        return self.sql("table_exists", schema=self._schema_prefix(address)), (address.table,)

    def index_exists(self, address: QueueAddress, index_name: str) -> tuple[str, Sequence[Any]]:
        return self.sql("index_exists", schema=self._schema_prefix(address)), (index_name,)

    def column_exists(self, address: QueueAddress, column: str) -> tuple[str, Sequence[Any]]:
        return self.sql("column_exists"), (address.table, address.schema or "main", column)

    # ---- runtime -------------------------------------------------------------------------------
    def expires_params(self, time_to_be_received: timedelta | None) -> tuple[Any, ...]:
        if time_to_be_received is None:
            return (None,)
        return (f"{time_to_be_received.total_seconds():+.3f} seconds",)

    def queue_tables(self, schema: str | None) -> tuple[str, Sequence[Any]]:
        prefix = f"{self.quote(schema)}." if schema else ""
        return self.sql("queue_tables", schema=prefix), (schema, schema or "main")

    def purge_archive_params(self, older_than_seconds: int, size: int) -> tuple[Any, ...]:
        return (f"-{older_than_seconds} seconds", size)

    def inspect(self, cursor: Any, address: QueueAddress, options: TableOptions) -> list[Finding]:
        schema = address.schema or "main"
        findings = []
        cursor.execute(self.sql("inspect_rowversion"), (address.table, schema))
        row = cursor.fetchone()
        if row is None or row[0] != "integer" or row[1] != 1:
            findings.append(
                Finding(
                    "missing_rowversion_index",
                    f"Queue table {address} does not have RowVersion as its INTEGER PRIMARY KEY, so "
                    "receives scan for the oldest rows.",
                    self.index_spec(address, "RowVersion", "create_rowversion_index").create,
                )
            )
        cursor.execute(self.sql("inspect_expires_index"), (address.table, schema, schema))
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

    def try_lock_delayed_mover(self, address: QueueAddress) -> None:
        return None  # each move holds the database's single write lock (BEGIN IMMEDIATE)

    def unlock_delayed_mover(self, address: QueueAddress) -> None:
        return None

    def bridge_expires_value(self, expires: datetime | None) -> Any:
        if expires is None:
            return None
        return expires.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]

    def bridge_sink_value(self, value: Any) -> Any:
        # sqlite3 binds no dates, decimals or booleans of its own: text (UTC, milliseconds) and integers
        if isinstance(value, datetime):
            moment = value.astimezone(timezone.utc) if value.tzinfo else value
            return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        if isinstance(value, date):
            return value.isoformat()
        if isinstance(value, Decimal):
            return str(value)
        if isinstance(value, bool):
            return int(value)
        return super().bridge_sink_value(value)

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
