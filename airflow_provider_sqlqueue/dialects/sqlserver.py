"""SQL Server (pyodbc): every statement of the engine, held to the reference transport.

Receivers compete with ``TOP(n) ... WITH (UPDLOCK, READPAST, ROWLOCK)`` and ``DELETE ... OUTPUT``; the peek
is ``max - min + 1`` of RowVersion ``WITH (READPAST, READCOMMITTEDLOCK)``; time comes from ``GETUTCDATE()``.
READPAST is invalid under SNAPSHOT isolation (error 650): run receivers under READ COMMITTED, which stays
correct on databases with READ_COMMITTED_SNAPSHOT on, because the hints ask for locks explicitly.
Connections run with ``SET NOCOUNT ON`` so that every statement's first result set is its data.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from ..model.address import QueueAddress
from ..model.errors import (
    ConfigurationError,
    PermissionDenied,
    QueueNotFound,
    SqlQueueError,
    TransientDatabaseError,
)
from .base import Dialect, Finding, IndexSpec, TableOptions, fetch_over_odbc, short_hash
from .bridge import BridgeColumnTypes
from .statements import BRIDGE, StatementTable
from .transaction_state import SqlServerTransactionState

_OUTPUT = (
    "OUTPUT deleted.[Id], deleted.[CorrelationId], deleted.[ReplyToAddress], "
    "CASE WHEN deleted.[Expires] IS NULL OR deleted.[Expires] > GETUTCDATE() THEN 0 ELSE 1 END AS [Expired], "
    "deleted.[Headers], deleted.[Body], deleted.[RowVersion], deleted.[Expires]"
)
# READPAST skips the rows receivers hold (their messages are in flight) and uncommitted sends instead of
# waiting for them; READCOMMITTEDLOCK keeps that true on READ_COMMITTED_SNAPSHOT databases. The shared locks
# last for the read of each row only. NOLOCK is not used: it would show uncommitted sends that may roll back
# and can skip or repeat rows while pages split.
_BROWSING = "WITH (READPAST, READCOMMITTEDLOCK)"
_UNEXPIRED = "WHERE [Expires] IS NULL OR [Expires] > GETUTCDATE()"
_ROW_LOCKS = "WITH (ALLOW_ROW_LOCKS = ON, ALLOW_PAGE_LOCKS = ON)"
_APPLOCK = (
    "DECLARE @result int; "
    "EXEC @result = sp_getapplock @Resource = ?, @LockMode = 'Exclusive', "
    "@LockOwner = '{owner}', @LockTimeout = {timeout}; "
    "SELECT @result"
)

FRAGMENTS = {
    "columns": "[Id], [CorrelationId], [ReplyToAddress], [Recoverable], [Expires], [Headers], [Body]",
    "columns_without_recoverable": "[Id], [CorrelationId], [ReplyToAddress], [Expires], [Headers], [Body]",
    "send_row": "(?, ?, ?, 1, DATEADD(millisecond, ?, DATEADD(second, ?, GETUTCDATE())), ?, ?)",
    "send_row_without_recoverable": (
        "(?, ?, ?, DATEADD(millisecond, ?, DATEADD(second, ?, GETUTCDATE())), ?, ?)"
    ),
    "raw_row": "(?, ?, ?, 1, NULL, ?, ?)",
    "raw_row_without_recoverable": "(?, ?, ?, NULL, ?, ?)",
    "true": "1",
    "archived_recoverable": "deleted.[Recoverable]",
    "archived_recoverable_without_recoverable": "NULL",
    # OUTPUT copies columns as they are (Babelfish takes no expression over deleted columns)
    "restored_recoverable": "deleted.[Recoverable]",
    "by_topic": "[Topic] = ?",
    "by_endpoint": "[Endpoint] = ?",
    "limit": "TOP (?) ",
    # The reference's index names, the same on every table.
    "RowVersion_index": "Index_RowVersion",
    "Expires_index": "Index_Expires",
    "Due_index": "Index_Due",
    "ArchivedAt_index": "Index_ArchivedAt",
    "bridge_now": "SYSUTCDATETIME()",
    "bridge_id_column": "Id",
}

STATEMENTS: StatementTable = {
    **BRIDGE,
    "create_table": (
        "CREATE TABLE {table} (\n"
        "    [Id] uniqueidentifier NOT NULL,\n"
        "    [CorrelationId] varchar(255) NULL,\n"
        "    [ReplyToAddress] varchar(255) NULL,\n"
        "    [Recoverable] bit NOT NULL,\n"
        "    [Expires] datetime NULL,\n"
        "    [Headers] {headers_type} NOT NULL,\n"
        "    [Body] varbinary(max) NULL,\n"
        "    [RowVersion] bigint IDENTITY(1,1) NOT NULL{body_string}\n)"
    ),
    "body_string_column": "[BodyString] AS CAST([Body] AS nvarchar(max))",
    "add_body_string": "ALTER TABLE {table} ADD [BodyString] AS CAST([Body] AS nvarchar(max))",
    "drop_table": "DROP TABLE IF EXISTS {table}",
    # The seeds' clustered layout, and the reference's later heap with a filtered Expires index.
    "create_rowversion_index": "CREATE CLUSTERED INDEX {index} ON {on} ([RowVersion] ASC) " + _ROW_LOCKS,
    "create_expires_index": (
        "CREATE NONCLUSTERED INDEX {index} ON {on} ([Expires] ASC) INCLUDE ([Id], [RowVersion]) " + _ROW_LOCKS
    ),
    "create_rowversion_index_heap": "CREATE NONCLUSTERED INDEX {index} ON {on} ([RowVersion] ASC)",
    "create_expires_index_heap": (
        "CREATE NONCLUSTERED INDEX {index} ON {on} ([Expires] ASC) "
        "INCLUDE ([Id], [RowVersion]) WHERE [Expires] IS NOT NULL"
    ),
    # The reference names the lock '[catalog].[schema].[table]_lock', so that this package and .NET
    # installers creating the same table wait for each other. It is owned by the transaction that
    # open_transaction made sure of.
    "lock_for_create": _APPLOCK.format(owner="Transaction", timeout=60000),
    # A transaction-owned app-lock needs an open transaction, and drivers differ: FreeTDS opens one at once;
    # Microsoft's driver in manual-commit mode switches on implicit transactions, where DECLARE and EXEC
    # open none (sp_getapplock would answer -999). In implicit-transaction mode BEGIN opens two nested
    # levels, so the batch closes the inner one at once, leaving exactly one for the caller's COMMIT or
    # ROLLBACK. It takes no parameters, so drivers send it as a plain batch: inside a parameterised call
    # (an RPC), ending with another @@TRANCOUNT than it started with is error 266.
    "open_transaction": (
        "DECLARE @opened bit = 0; "
        "IF @@TRANCOUNT = 0 BEGIN BEGIN TRANSACTION; SET @opened = 1; END; "
        "IF @opened = 1 AND @@TRANCOUNT > 1 COMMIT TRANSACTION"
    ),
    "current_catalog": "SELECT DB_NAME()",
    # A batching pump's message savepoint; T-SQL has no RELEASE (the savepoint ends with the transaction).
    # Babelfish ends the whole transaction on some statement errors (a missing table, a failed conversion)
    # and opens a new one: the savepoint is then gone and the rollback fails, as it should.
    "savepoint": "SAVE TRANSACTION {name}",
    "rollback_to_savepoint": "ROLLBACK TRANSACTION {name}",
    "table_exists": "SELECT OBJECT_ID(?, 'U')",
    "index_exists": "SELECT index_id FROM {catalog}sys.indexes WHERE object_id = OBJECT_ID(?) AND name = ?",
    "column_exists": "SELECT COL_LENGTH(?, ?)",
    "insert": "INSERT INTO {table} ({columns}) VALUES {values}",
    "receive_batch": (
        "WITH message AS (SELECT TOP(?) * FROM {table} WITH (UPDLOCK, READPAST, ROWLOCK) "
        "ORDER BY [RowVersion]) DELETE FROM message " + _OUTPUT
    ),
    "peek_estimate": (
        "SELECT isnull(cast(max([RowVersion]) - min([RowVersion]) + 1 AS bigint), 0) FROM {table} "
        + _BROWSING
    ),
    "peek_bounds": "SELECT min([RowVersion]), max([RowVersion]) FROM {table} " + _BROWSING,
    "count_exact": "SELECT count_big(*) FROM {table} WITH (READPAST) " + _UNEXPIRED,
    "browse": (
        "SELECT TOP (?) [Id], [CorrelationId], [ReplyToAddress], [Headers], [Body], [RowVersion], [Expires] "
        f"FROM {{table}} {_BROWSING} {_UNEXPIRED} ORDER BY [RowVersion]"
    ),
    "oldest_headers": (
        f"SELECT TOP (1) [RowVersion], [Headers] FROM {{table}} {_BROWSING} {_UNEXPIRED} "
        "ORDER BY [RowVersion]"
    ),
    "failed_newest": (
        f"SELECT TOP (?) [RowVersion], [Id], [Headers] FROM {{table}} {_BROWSING} ORDER BY [RowVersion] DESC"
    ),
    "failed_page": (
        "SELECT TOP (?) [RowVersion], [Id], [Headers] "
        f"FROM {{table}} {_BROWSING} WHERE [RowVersion] > ? ORDER BY [RowVersion]"
    ),
    "failed_messages": (
        "SELECT [Id], [CorrelationId], [ReplyToAddress], [Headers], [Body], [RowVersion], [Expires] "
        f"FROM {{table}} {_BROWSING} WHERE [Id] = ? ORDER BY [RowVersion]"
    ),
    "take_failed_row": (
        "DELETE FROM {table} WITH (ROWLOCK) "
        "OUTPUT deleted.[Id], deleted.[CorrelationId], deleted.[ReplyToAddress], deleted.[Headers], "
        "deleted.[Body] WHERE [RowVersion] = ?"
    ),
    "count_expired": "SELECT count_big(*) FROM {table} WITH (READPAST) WHERE [Expires] <= GETUTCDATE()",
    "queue_tables": (
        "SELECT s.name, t.name FROM sys.tables t JOIN sys.schemas s ON s.schema_id = t.schema_id "
        "WHERE s.name = ? AND (SELECT count(*) FROM sys.columns c WHERE c.object_id = t.object_id "
        "AND c.name IN ('Id', 'Headers', 'Body', 'RowVersion', 'Expires')) = 5 ORDER BY t.name"
    ),
    "purge_expired_batch": (
        "DELETE FROM {table} WHERE [RowVersion] IN ("
        "SELECT TOP (?) [RowVersion] FROM {table} WITH (READPAST) WHERE [Expires] < GETUTCDATE()); "
        "SELECT @@ROWCOUNT"
    ),
    "index_first_columns": (
        "SELECT c.name, i.type FROM {catalog}sys.indexes i "
        "JOIN {catalog}sys.index_columns ic ON ic.object_id = i.object_id "
        "AND ic.index_id = i.index_id AND ic.key_ordinal = 1 "
        "JOIN {catalog}sys.columns c ON c.object_id = ic.object_id AND c.column_id = ic.column_id "
        "WHERE i.object_id = OBJECT_ID(?)"
    ),
    "headers_column_type": (
        "SELECT t.name FROM {catalog}sys.columns c "
        "JOIN {catalog}sys.types t ON t.user_type_id = c.user_type_id "
        "WHERE c.object_id = OBJECT_ID(?) AND c.name = 'Headers'"
    ),
    # ---- the delayed table
    "create_delayed_table": (
        "CREATE TABLE {table} (\n"
        "    [Headers] nvarchar(max) NOT NULL,\n"
        "    [Body] varbinary(max) NULL,\n"
        "    [Due] datetime NOT NULL,\n"
        "    [RowVersion] bigint IDENTITY(1,1) NOT NULL\n)"
    ),
    "create_delayed_index": "CREATE NONCLUSTERED INDEX {index} ON {on} ([Due] ASC)",
    "store_delayed": (
        "INSERT INTO {table} ([Headers], [Body], [Due]) VALUES (?, ?, "
        "COALESCE(CAST(? AS datetime2), DATEADD(millisecond, ?, DATEADD(second, ?, GETUTCDATE()))))"
    ),
    "select_due_delayed": (
        "SELECT TOP(?) [RowVersion], [Headers] FROM {table} "
        "WITH (UPDLOCK, READPAST, ROWLOCK) WHERE [Due] <= GETUTCDATE() ORDER BY [Due]"
    ),
    # The reference's move (DELETE ... OUTPUT NEWID(), NULL, NULL, 1, NULL, deleted.Headers, deleted.Body
    # INTO the queue), aimed at the row's destination instead of the endpoint's input queue.
    "move_delayed_rows": (
        "DELETE FROM {table} "
        "OUTPUT NEWID(), NULL, NULL, {recoverable}NULL, deleted.[Headers], deleted.[Body] "
        "INTO {destination} ({columns}) WHERE [RowVersion] IN ({marks})"
    ),
    "select_delayed_rows": (
        "SELECT [Headers], [Body], [RowVersion] FROM {table} WHERE [RowVersion] IN ({marks})"
    ),
    "delete_delayed_rows": "DELETE FROM {table} WHERE [RowVersion] IN ({marks})",
    "next_due_delayed": "SELECT GETUTCDATE(), min([Due]) FROM {table} WITH (READPAST)",
    "count_delayed": "SELECT count_big(*) FROM {table} WITH (READPAST)",
    "try_lock_delayed_mover": _APPLOCK.format(owner="Session", timeout=0),
    "unlock_delayed_mover": "EXEC sp_releaseapplock @Resource = ?, @LockOwner = 'Session'",
    # ---- the archive beside an error queue (GETUTCDATE() the only clock, as the reference's); the move is
    # the delayed mover's form (DELETE ... OUTPUT deleted.* INTO), ArchivedAt from its default
    "create_archive_table": (
        "CREATE TABLE {table} (\n"
        "    [Id] uniqueidentifier NOT NULL,\n"
        "    [CorrelationId] varchar(255) NULL,\n"
        "    [ReplyToAddress] varchar(255) NULL,\n"
        "    [Recoverable] bit NULL,\n"
        "    [Expires] datetime NULL,\n"
        "    [Headers] nvarchar(max) NOT NULL,\n"
        "    [Body] varbinary(max) NULL,\n"
        "    [ErrorRowVersion] bigint NOT NULL,\n"
        "    [ArchivedAt] datetime NOT NULL DEFAULT GETUTCDATE()\n)"
    ),
    "create_archive_index": "CREATE NONCLUSTERED INDEX {index} ON {on} ([ArchivedAt] ASC)",
    "archive_failed_row": (
        "DELETE FROM {table} "
        "OUTPUT deleted.[Id], deleted.[CorrelationId], deleted.[ReplyToAddress], "
        "{recoverable}, deleted.[Expires], deleted.[Headers], deleted.[Body], deleted.[RowVersion] "
        "INTO {archive} ([Id], [CorrelationId], [ReplyToAddress], [Recoverable], "
        "[Expires], [Headers], [Body], [ErrorRowVersion]) "
        "WHERE [RowVersion] = ?; SELECT @@ROWCOUNT"
    ),
    # The way back: the archived rows of one Id into the error queue ({table}) by the same DELETE ... OUTPUT
    # ... INTO, then the count; each row gets a new RowVersion there.
    "restore_archived": (
        "DELETE FROM {archive} "
        "OUTPUT deleted.[Id], deleted.[CorrelationId], deleted.[ReplyToAddress], {recoverable}"
        "deleted.[Expires], deleted.[Headers], deleted.[Body] "
        "INTO {table} ({columns}) WHERE [Id] = ?; SELECT @@ROWCOUNT"
    ),
    # A page of the archive, newest archived first, past rows a restore or purge holds; the Body's size,
    # not the Body.
    "browse_archive": (
        "SELECT [Id], [CorrelationId], [ReplyToAddress], [Headers], DATALENGTH([Body]), [ErrorRowVersion], "
        f"[ArchivedAt], [Expires] FROM {{table}} {_BROWSING} "
        "ORDER BY [ArchivedAt] DESC, [ErrorRowVersion] DESC, [Id] DESC OFFSET ? ROWS FETCH NEXT ? ROWS ONLY"
    ),
    # The archive has no key of its own: the oldest N by ErrorRowVersion, and only rows old enough (an error
    # queue made again restarts its RowVersions, so a number may stand for an old and a new row).
    "purge_archive_batch": (
        "DELETE FROM {table} WHERE [ArchivedAt] < DATEADD(second, ?, GETUTCDATE()) AND [ErrorRowVersion] IN ("
        "SELECT TOP (?) [ErrorRowVersion] FROM {table} WHERE [ArchivedAt] < DATEADD(second, ?, GETUTCDATE()) "
        "ORDER BY [ArchivedAt]); SELECT @@ROWCOUNT"
    ),
    "count_archive": "SELECT count_big(*) FROM {table}",
    # ---- the depth history of the schema's queues. A sample is inserted unless its key holds one; the key
    # range locked (UPDLOCK, HOLDLOCK) to the end of the statement serialises writers of the same key. Where
    # an engine ignores the hints (Babelfish), the loser fails on the key and the writer takes that as done.
    "create_depth_samples_table": (
        "CREATE TABLE {table} (\n"
        "    [QueueName] nvarchar(128) NOT NULL,\n"
        "    [SampledMinute] bigint NOT NULL,\n"
        "    [Messages] bigint NOT NULL,\n"
        "    [MessagesExact] bit NOT NULL,\n"
        "    [Failed] bigint NULL,\n"
        "    PRIMARY KEY ([QueueName], [SampledMinute])\n)"
    ),
    "record_depth_sample": (
        "INSERT INTO {table} ([QueueName], [SampledMinute], [Messages], [MessagesExact], [Failed]) "
        "SELECT ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM {table} WITH (UPDLOCK, HOLDLOCK) "
        "WHERE [QueueName] = ? AND [SampledMinute] = ?); SELECT @@ROWCOUNT"
    ),
    "purge_depth_samples": "DELETE FROM {table} WHERE [SampledMinute] < ?; SELECT @@ROWCOUNT",
    "read_depth_samples": (
        "SELECT [QueueName], [SampledMinute], [Messages], [MessagesExact], [Failed] FROM {table} "
        "WHERE [SampledMinute] >= ? ORDER BY [QueueName], [SampledMinute]"
    ),
    # ---- the subscription table, as the reference creates it. The reference writes PRIMARY KEY CLUSTERED; a
    # primary key is clustered by default on a table without a clustered index, so this is the same table,
    # in a form both test grammars read.
    "create_subscription_table": (
        "CREATE TABLE {table} (\n"
        "    [QueueAddress] nvarchar({width}) NOT NULL,\n"
        "    [Endpoint] nvarchar({width}) NOT NULL,\n"
        "    [Topic] nvarchar({width}) NOT NULL,\n"
        "    PRIMARY KEY ([Endpoint], [Topic])\n)"
    ),
    # The reference's upsert: the table lock held to the end of the statement serialises subscribers.
    "subscribe": (
        "MERGE {table} WITH (HOLDLOCK, TABLOCK) AS target "
        "USING (SELECT ? AS [Endpoint], ? AS [Topic], ? AS [QueueAddress]) AS source "
        "ON target.[Endpoint] = source.[Endpoint] AND target.[Topic] = source.[Topic] "
        "WHEN MATCHED AND target.[QueueAddress] <> source.[QueueAddress] THEN "
        "UPDATE SET [QueueAddress] = source.[QueueAddress] "
        "WHEN NOT MATCHED THEN INSERT ([QueueAddress], [Topic], [Endpoint]) "
        "VALUES (source.[QueueAddress], source.[Topic], source.[Endpoint]);"
    ),
    "unsubscribe": "DELETE FROM {table} WHERE [Endpoint] = ? AND [Topic] = ?; SELECT @@ROWCOUNT",
    "select_subscribers": "SELECT DISTINCT [QueueAddress] FROM {table} WHERE [Topic] IN ({marks})",
    "select_subscriptions": (
        "SELECT {limit}[QueueAddress], [Endpoint], [Topic] FROM {table}{where} ORDER BY [Topic], [Endpoint]"
    ),
    # ---- sessions
    "prepare_connection": "SET NOCOUNT ON",
    # What a returned connection's session is brought back to (Dialect.reset_session): there is no
    # sp_reset_connection over ODBC (a flag of the TDS protocol the drivers set for their own pooling, which
    # pyodbc has no call for), so one batch restores each SET the transport relies on: READ COMMITTED
    # (receivers' READPAST is refused under SNAPSHOT and READ UNCOMMITTED, and Babelfish runs SNAPSHOT as
    # repeatable read), waiting for locks without limit (LOCK_TIMEOUT -1, the server's default: Babelfish's
    # receivers wait for each other), a failed statement that leaves its transaction for the transport to
    # end (XACT_ABORT OFF, the drivers' default), no row counts (NOCOUNT ON, as prepare_connection sets),
    # the normal deadlock priority, and the options SQL Server requires for writing a table with a filtered
    # index, as the queue tables' Expires index is. The isolation level comes first: Babelfish refuses to
    # change it after a statement of the transaction has run. IMPLICIT_TRANSACTIONS is left alone: FreeTDS
    # runs pyodbc's manual commit with it (SET IMPLICIT_TRANSACTIONS ON), Driver 18 does not. Babelfish
    # accepts every one of them.
    "reset_session": (
        "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; SET LOCK_TIMEOUT -1; SET XACT_ABORT OFF; "
        "SET NOCOUNT ON; SET DEADLOCK_PRIORITY NORMAL; SET ANSI_NULLS ON; SET ANSI_PADDING ON; "
        "SET ANSI_WARNINGS ON; SET CONCAT_NULL_YIELDS_NULL ON; SET QUOTED_IDENTIFIER ON; "
        "SET NUMERIC_ROUNDABORT OFF"
    ),
    # SERVERPROPERTY('Babelfish') is 1 there and NULL on SQL Server (an unknown property), so one statement
    # that both run decides it. The cast spares drivers the sql_variant type.
    "server_variant": "SELECT CAST(SERVERPROPERTY('Babelfish') AS int)",
    # ---- the Spark bridge's own (see statements.BRIDGE); Babelfish runs them as they are
    "bridge_create_table": "IF OBJECT_ID(N'{literal}', N'U') IS NULL CREATE TABLE {table} ({columns})",
    # Connections run with NOCOUNT ON, so drivers report no row count: the statement returns it as a row.
    "bridge_counted": "{statement}; SELECT @@ROWCOUNT",
    "bridge_older_than": "{column} < DATEADD(second, -?, SYSUTCDATETIME())",
    "bridge_seconds_since": "DATEDIFF(second, {column}, SYSUTCDATETIME())",
    "bridge_run_state_shared": "SELECT State FROM {runs} WITH (HOLDLOCK, ROWLOCK) WHERE RunId = ?",
    "bridge_run_owner_shared": "SELECT Summary FROM {runs} WITH (HOLDLOCK, ROWLOCK) WHERE RunId = ?",
    "bridge_run_takeover": "SELECT Summary FROM {runs} WITH (UPDLOCK, HOLDLOCK, ROWLOCK) WHERE RunId = ?",
}

_NATIVE_ERROR = re.compile(r"\((\d{3,6})\)")
_TRANSIENT_ERRORS = {
    1205: "deadlock victim",
    1222: "lock request timeout",
    40197: "service error",
    40501: "service busy",
    40613: "database unavailable",
    49918: "not enough resources",
}
_PERMISSION_ERRORS = {229, 230, 262, 297, 300, 916, 1088}
_ALREADY_EXISTS_ERRORS = {2714, 1913}
_CONNECTION_SQLSTATES = {"08S01", "08001", "08003", "08004", "08007", "HYT00", "HYT01"}


def native_errors(error: BaseException) -> set[int]:
    """SQL Server error numbers found in a pyodbc error's message, e.g. ``... (1205) (SQLExecDirectW)``."""
    text = " ".join(str(arg) for arg in getattr(error, "args", ()))
    return {int(number) for number in _NATIVE_ERROR.findall(text)}


class SqlServerDialect(SqlServerTransactionState, Dialect):
    name = "sqlserver"
    display_name = "SQL Server"
    default_schema = "dbo"
    addresses_carry_catalog = True
    subscription_columns_count_utf16 = True
    max_identifier_length = 128
    max_body_bytes = 2**31 - 1  # varbinary(max)
    send_batch_rows = 250  # 7 parameters a row, under the 2,100-parameter limit of one statement
    placeholder = "?"
    clock = "GETUTCDATE()"
    statements = STATEMENTS
    fragments = FRAGMENTS
    driver_connection_class = "pyodbc.Connection"
    odbc_dbms_name = "Microsoft SQL Server"  # Babelfish reports the same
    sqlalchemy_dialect = "mssql+pyodbc"
    bridge_column_types = BridgeColumnTypes(
        "nvarchar(max)",
        "datetime2",
        "uniqueidentifier",
        "varbinary(max)",
        "int",
        "nvarchar(200)",
        "nvarchar(450)",
        "datetime",
    )
    bridge_stage_rows_limit = 200
    bridge_insert_parameters = 2000  # under the 2,100 parameters of one statement
    bridge_bind_seconds = staticmethod(int)
    storage_note = (
        "not applicable on SQL Server: the ghost cleanup task removes deleted rows and frees their pages by "
        "itself; nothing to schedule"
    )

    def quote(self, identifier: str) -> str:
        return "[" + identifier.replace("]", "]]") + "]"

    def qualified_name(self, address: QueueAddress) -> str:
        parts = [address.catalog, address.schema, address.table]
        return ".".join(self.quote(part) for part in parts if part is not None)

    def _catalog_prefix(self, address: QueueAddress) -> str:
        return f"{self.quote(address.catalog)}." if address.catalog else ""

    # ---- provisioning --------------------------------------------------------------------------
    def create_table(self, address: QueueAddress, options: TableOptions) -> str:
        headers_type = "nvarchar(max)" if options.unicode_headers else "varchar(max)"
        body_string = ",\n    " + self.sql("body_string_column") if options.body_string else ""
        return self.sql("create_table", address, headers_type=headers_type, body_string=body_string)

    def indexes(self, address: QueueAddress, options: TableOptions) -> list[IndexSpec]:
        layout = "_heap" if options.layout == "heap" else ""
        return [
            self.index_spec(address, "RowVersion", "create_rowversion_index" + layout),
            self.index_spec(address, "Expires", "create_expires_index" + layout),
        ]

    def lock_for_create(
        self, address: QueueAddress, current_catalog: str | None = None
    ) -> tuple[str, Sequence[Any]]:
        named = address if address.catalog else QueueAddress(address.table, address.schema, current_catalog)
        resource = f"{self.qualified_name(named)}_lock"
        if len(resource) > 255:
            resource = f"sqlqueue_{short_hash(resource)}_lock"
        return self.sql("lock_for_create"), (resource,)

    def table_exists(self, address: QueueAddress) -> tuple[str, Sequence[Any]]:
        return self.sql("table_exists"), (self.qualified_name(address),)

    def index_exists(self, address: QueueAddress, index_name: str) -> tuple[str, Sequence[Any]]:
        return self.sql("index_exists", catalog=self._catalog_prefix(address)), (
            self.qualified_name(address),
            index_name,
        )

    def column_exists(self, address: QueueAddress, column: str) -> tuple[str, Sequence[Any]]:
        return self.sql("column_exists"), (self.qualified_name(address), column)

    def depth_sample_params(
        self, queue_name: str, minute: int, messages: int, exact: bool, failed: int | None
    ) -> tuple[Any, ...]:
        """The sample, then its key again for the NOT EXISTS that keeps the insert to one per key."""
        return (queue_name, minute, messages, exact, failed, queue_name, minute)

    # ---- runtime -------------------------------------------------------------------------------
    def expires_params(self, time_to_be_received: timedelta | None) -> tuple[Any, ...]:
        if time_to_be_received is None:
            return (None, None)
        whole_seconds, rest = divmod(time_to_be_received, timedelta(seconds=1))
        return (rest // timedelta(milliseconds=1), int(whole_seconds))

    def failed_page_params(self, after: int, size: int) -> tuple[Any, ...]:
        return (size, after)

    def queue_tables(self, schema: str | None) -> tuple[str, Sequence[Any]]:
        return self.sql("queue_tables"), (schema or self.default_schema,)

    def purge_returns_count(self) -> bool:
        return True

    def purge_archive_params(self, older_than_seconds: int, size: int) -> tuple[Any, ...]:
        return (-older_than_seconds, size, -older_than_seconds)

    def browse_archive_params(self, offset: int, size: int) -> tuple[Any, ...]:
        return (offset, size)

    def select_subscriptions_params(self, filters: tuple[str, ...], limit: int | None) -> tuple[Any, ...]:
        return filters if limit is None else (limit, *filters)

    def index_first_columns(self, address: QueueAddress) -> str:
        return self.sql("index_first_columns", catalog=self._catalog_prefix(address))

    def headers_column_type(self, address: QueueAddress) -> str:
        return self.sql("headers_column_type", catalog=self._catalog_prefix(address))

    def inspect(self, cursor: Any, address: QueueAddress, options: TableOptions) -> list[Finding]:
        table = self.qualified_name(address)
        cursor.execute(self.index_first_columns(address), (table,))
        index_types: dict[str, set[int]] = {}
        for name, index_type in cursor.fetchall():
            index_types.setdefault(str(name).lower(), set()).add(int(index_type))
        first_columns = set(index_types)
        findings = []
        if options.layout == "heap" and index_types.get("rowversion") == {1}:
            heap = self.indexes(address, options)
            findings.append(
                Finding(
                    "clustered_rowversion_index",
                    f"Queue table {address} still has the seeds' clustered RowVersion index; the heap "
                    "layout avoids page-latch contention at its head under many receivers. Migrate in a "
                    "quiet window.",
                    f"DROP INDEX [Index_RowVersion] ON {table}; {heap[0].create}; "
                    f"DROP INDEX [Index_Expires] ON {table}; {heap[1].create}",
                )
            )
        findings += self.missing_indexes(address, options, first_columns)
        cursor.execute(self.headers_column_type(address), (table,))
        row = cursor.fetchone()
        if options.unicode_headers and row is not None and str(row[0]).lower() == "varchar":
            findings.append(
                Finding(
                    "varchar_headers",
                    f"Queue table {address} stores Headers as varchar, which is not Unicode-safe.",
                    f"ALTER TABLE {table} ALTER COLUMN [Headers] nvarchar(max) NOT NULL",
                )
            )
        return findings

    def rowversion_index_is_clustered(self, cursor: Any, address: QueueAddress) -> bool | None:
        cursor.execute(self.index_first_columns(address), (self.qualified_name(address),))
        return any(str(name).lower() == "rowversion" and int(kind) == 1 for name, kind in cursor.fetchall())

    # ---- delayed delivery ----------------------------------------------------------------------
    def store_delayed_params(
        self, headers: str, body: bytes, deliver_at: datetime | None, delay: timedelta | None
    ) -> tuple[Any, ...]:
        at = milliseconds = seconds = None
        if deliver_at is not None:
            at = deliver_at.astimezone(timezone.utc).replace(tzinfo=None)
        elif delay is not None:
            whole_seconds, rest = divmod(delay, timedelta(seconds=1))
            seconds = int(whole_seconds)
            milliseconds = -(-rest // timedelta(milliseconds=1))  # round up: never early
        return (headers, body, at, milliseconds, seconds)

    def _mover_lock_resource(self, address: QueueAddress) -> str:
        resource = f"{self.qualified_name(address)}_mover"
        return resource if len(resource) <= 255 else f"sqlqueue_{short_hash(resource)}_mover"

    def try_lock_delayed_mover(self, address: QueueAddress) -> tuple[str, Sequence[Any]]:
        return self.sql("try_lock_delayed_mover"), (self._mover_lock_resource(address),)

    def unlock_delayed_mover(self, address: QueueAddress) -> tuple[str, Sequence[Any]]:
        return self.sql("unlock_delayed_mover"), (self._mover_lock_resource(address),)

    def bridge_expires_value(self, expires: datetime | None) -> Any:
        return None if expires is None else expires.astimezone(timezone.utc).replace(tzinfo=None)

    def bridge_sink_value(self, value: Any) -> Any:
        # datetime2 and datetime columns hold no offset: an aware moment is stored as UTC
        if isinstance(value, datetime) and value.tzinfo is not None:
            return value.astimezone(timezone.utc).replace(tzinfo=None)
        return super().bridge_sink_value(value)

    # ---- driver glue ---------------------------------------------------------------------------
    def row_id(self, value: Any) -> Any:
        return str(value)

    def prepare_connection(self, connection: Any) -> None:
        connection.autocommit = False
        cursor = connection.cursor()
        cursor.execute(self.sql("prepare_connection"))
        cursor.close()
        connection.commit()

    def reset_session(self, connection: Any, defaults: Any) -> None:
        """There is no ``sp_reset_connection`` over ODBC: the ``reset_session`` statement restores, in one
        batch, each option the transport relies on, then commits (Babelfish keeps a ``SET`` made in a
        transaction only if that commits)."""
        connection.autocommit = False
        cursor = connection.cursor()
        try:
            cursor.execute(self.sql("reset_session"))
            while cursor.nextset():
                pass
        finally:
            cursor.close()
        connection.commit()

    def server_variant(self, connection: Any) -> str | None:
        """``"babelfish"`` when the server is Babelfish for PostgreSQL, else None (SQL Server itself)."""
        cursor = connection.cursor()
        try:
            cursor.execute(self.sql("server_variant"))
            rows = self.fetch_rows(cursor)
        finally:
            cursor.close()
        connection.rollback()
        if rows and rows[0][0] == 1:
            return "babelfish"
        return None

    def fetch_rows(self, cursor: Any) -> list[Any]:
        return fetch_over_odbc(cursor)

    def classify(self, error: BaseException, address: QueueAddress | None = None) -> SqlQueueError | None:
        try:
            import pyodbc
        except ImportError:  # pragma: no cover - the SQL Server extra is not installed
            return None
        if not isinstance(error, pyodbc.Error):
            return None
        numbers = native_errors(error)
        sqlstate = str(error.args[0]) if error.args else ""
        detail = str(error.args[1] if len(error.args) > 1 else error)
        where = f" (queue {address})" if address is not None else ""
        if numbers & {208, 2760}:
            return QueueNotFound(f"{detail}{where}: create the queue first (provisioning needs DDL rights)")
        if 650 in numbers:
            return ConfigurationError(
                f"{detail}{where}: receivers use READPAST, which SQL Server refuses under SNAPSHOT or "
                "READ UNCOMMITTED isolation; run them under READ COMMITTED"
            )
        if numbers & _PERMISSION_ERRORS:
            return PermissionDenied(
                f"{detail}{where}. Runtime logins need SELECT, INSERT and DELETE on the queue tables "
                "(db_datareader + db_datawriter); creating queues needs CREATE TABLE and VIEW DEFINITION"
            )
        for number, reason in _TRANSIENT_ERRORS.items():
            if number in numbers:
                return TransientDatabaseError(f"{reason}: {detail}{where}")
        if sqlstate in _CONNECTION_SQLSTATES or isinstance(error, pyodbc.OperationalError):
            return TransientDatabaseError(f"connection to SQL Server lost or refused: {detail}{where}")
        return None

    def is_already_exists(self, error: BaseException) -> bool:
        return bool(native_errors(error) & _ALREADY_EXISTS_ERRORS)

    def is_deadlock(self, error: BaseException) -> bool:
        return 1205 in native_errors(error)

    def is_duplicate_key(self, error: BaseException) -> bool:
        return bool(native_errors(error) & {2601, 2627})

    def is_connection_lost(self, error: BaseException) -> bool:
        try:
            import pyodbc
        except ImportError:  # pragma: no cover
            return False
        sqlstate = str(error.args[0]) if getattr(error, "args", None) else ""
        return sqlstate in _CONNECTION_SQLSTATES or isinstance(error, pyodbc.OperationalError)
