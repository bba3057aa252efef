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
from .base import Finding, IndexSpec, TableOptions, short_hash
from .sqlserver_archive import SqlServerArchive
from .sqlserver_bridge import SqlServerBridge
from .sqlserver_session import RESET_SESSION
from .sqlserver_subscriptions import SqlServerSubscriptions
from .transaction_state import SqlServerTransactionState

_COLUMNS = "[Id], [CorrelationId], [ReplyToAddress], [Recoverable], [Expires], [Headers], [Body]"
_VALUES_ROW = "(?, ?, ?, 1, DATEADD(millisecond, ?, DATEADD(second, ?, GETUTCDATE())), ?, ?)"
_COLUMNS_WITHOUT_RECOVERABLE = "[Id], [CorrelationId], [ReplyToAddress], [Expires], [Headers], [Body]"
_VALUES_ROW_WITHOUT_RECOVERABLE = "(?, ?, ?, DATEADD(millisecond, ?, DATEADD(second, ?, GETUTCDATE())), ?, ?)"
_OUTPUT = (
    "OUTPUT deleted.[Id], deleted.[CorrelationId], deleted.[ReplyToAddress], "
    "CASE WHEN deleted.[Expires] IS NULL OR deleted.[Expires] > GETUTCDATE() THEN 0 ELSE 1 END AS [Expired], "
    "deleted.[Headers], deleted.[Body], deleted.[RowVersion], deleted.[Expires]"
)
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


def _insert_shape(with_recoverable: bool) -> tuple[str, str]:
    """Column list and one VALUES row of a send; tables from newer NServiceBus versions lack Recoverable."""
    if with_recoverable:
        return _COLUMNS, _VALUES_ROW
    return _COLUMNS_WITHOUT_RECOVERABLE, _VALUES_ROW_WITHOUT_RECOVERABLE


class SqlServerDialect(SqlServerArchive, SqlServerSubscriptions, SqlServerBridge, SqlServerTransactionState):
    name = "sqlserver"
    display_name = "SQL Server"
    default_schema = "dbo"
    addresses_carry_catalog = True
    max_identifier_length = 128
    max_body_bytes = 2**31 - 1  # varbinary(max)
    send_batch_rows = 250  # 7 parameters a row, under the 2,100-parameter limit of one statement
    placeholder = "?"
    driver_connection_class = "pyodbc.Connection"
    odbc_dbms_name = "Microsoft SQL Server"  # Babelfish reports the same
    sqlalchemy_dialect = "mssql+pyodbc"
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
        body_string = ",\n    [BodyString] AS CAST([Body] AS nvarchar(max))" if options.body_string else ""
        return (
            f"CREATE TABLE {self.qualified_name(address)} (\n"
            "    [Id] uniqueidentifier NOT NULL,\n"
            "    [CorrelationId] varchar(255) NULL,\n"
            "    [ReplyToAddress] varchar(255) NULL,\n"
            "    [Recoverable] bit NOT NULL,\n"
            "    [Expires] datetime NULL,\n"
            f"    [Headers] {headers_type} NOT NULL,\n"
            "    [Body] varbinary(max) NULL,\n"
            "    [RowVersion] bigint IDENTITY(1,1) NOT NULL"
            f"{body_string}\n)"
        )

    def indexes(self, address: QueueAddress, options: TableOptions) -> list[IndexSpec]:
        table = self.qualified_name(address)
        if options.layout == "heap":
            return [
                IndexSpec(
                    "Index_RowVersion",
                    f"CREATE NONCLUSTERED INDEX [Index_RowVersion] ON {table} ([RowVersion] ASC)",
                ),
                IndexSpec(
                    "Index_Expires",
                    f"CREATE NONCLUSTERED INDEX [Index_Expires] ON {table} ([Expires] ASC) "
                    "INCLUDE ([Id], [RowVersion]) WHERE [Expires] IS NOT NULL",
                ),
            ]
        return [
            IndexSpec(
                "Index_RowVersion",
                f"CREATE CLUSTERED INDEX [Index_RowVersion] ON {table} ([RowVersion] ASC) "
                "WITH (ALLOW_ROW_LOCKS = ON, ALLOW_PAGE_LOCKS = ON)",
            ),
            IndexSpec(
                "Index_Expires",
                f"CREATE NONCLUSTERED INDEX [Index_Expires] ON {table} ([Expires] ASC) "
                "INCLUDE ([Id], [RowVersion]) WITH (ALLOW_ROW_LOCKS = ON, ALLOW_PAGE_LOCKS = ON)",
            ),
        ]

    def add_body_string(self, address: QueueAddress) -> str:
        return f"ALTER TABLE {self.qualified_name(address)} ADD [BodyString] AS CAST([Body] AS nvarchar(max))"

    def drop_table(self, address: QueueAddress) -> str:
        return f"DROP TABLE IF EXISTS {self.qualified_name(address)}"

    def lock_for_create(
        self, address: QueueAddress, current_catalog: str | None = None
    ) -> tuple[str, Sequence[Any]]:
        # The reference names the lock '[catalog].[schema].[table]_lock', so that this package and .NET
        # installers creating the same table wait for each other. It is owned by the transaction that
        # open_transaction() made sure of.
        named = address if address.catalog else QueueAddress(address.table, address.schema, current_catalog)
        resource = f"{self.qualified_name(named)}_lock"
        if len(resource) > 255:
            resource = f"sqlqueue_{short_hash(resource)}_lock"
        return (
            "DECLARE @result int; "
            "EXEC @result = sp_getapplock @Resource = ?, @LockMode = 'Exclusive', "
            "@LockOwner = 'Transaction', @LockTimeout = 60000; "
            "SELECT @result",
            (resource,),
        )

    def open_transaction(self) -> str:
        # A transaction-owned app-lock needs an open transaction, and drivers differ: FreeTDS opens one at
        # once; Microsoft's driver in manual-commit mode switches on implicit transactions, where DECLARE
        # and EXEC open none (sp_getapplock would answer -999). In implicit-transaction mode BEGIN opens two
        # nested levels, so the batch closes the inner one at once, leaving exactly one for the caller's
        # COMMIT or ROLLBACK. It takes no parameters, so drivers send it as a plain batch: inside a
        # parameterised call (an RPC), ending with another @@TRANCOUNT than it started with is error 266.
        return (
            "DECLARE @opened bit = 0; "
            "IF @@TRANCOUNT = 0 BEGIN BEGIN TRANSACTION; SET @opened = 1; END; "
            "IF @opened = 1 AND @@TRANCOUNT > 1 COMMIT TRANSACTION"
        )

    def savepoint(self, name: str) -> str:
        return f"SAVE TRANSACTION {self.quote(name)}"

    def rollback_to_savepoint(self, name: str) -> str:
        # Babelfish ends the whole transaction on some statement errors (a missing table, a failed
        # conversion) and opens a new one: the savepoint is then gone and this fails, as it should.
        return f"ROLLBACK TRANSACTION {self.quote(name)}"

    def release_savepoint(self, name: str) -> None:
        return None  # T-SQL has no RELEASE: the savepoint ends with the transaction

    def current_catalog(self) -> str:
        return "SELECT DB_NAME()"

    def table_exists(self, address: QueueAddress) -> tuple[str, Sequence[Any]]:
        return "SELECT OBJECT_ID(?, 'U')", (self.qualified_name(address),)

    def index_exists(self, address: QueueAddress, index_name: str) -> tuple[str, Sequence[Any]]:
        return (
            f"SELECT index_id FROM {self._catalog_prefix(address)}sys.indexes "
            "WHERE object_id = OBJECT_ID(?) AND name = ?",
            (self.qualified_name(address), index_name),
        )

    def column_exists(self, address: QueueAddress, column: str) -> tuple[str, Sequence[Any]]:
        return "SELECT COL_LENGTH(?, ?)", (self.qualified_name(address), column)

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
        milliseconds = seconds = None
        if time_to_be_received is not None:
            whole_seconds, rest = divmod(time_to_be_received, timedelta(seconds=1))
            seconds = int(whole_seconds)
            milliseconds = rest // timedelta(milliseconds=1)
        return (message_id, correlation_id, reply_to_address, milliseconds, seconds, headers, body)

    def insert_raw(self, address: QueueAddress, with_recoverable: bool = True) -> str:
        columns = _COLUMNS if with_recoverable else _COLUMNS_WITHOUT_RECOVERABLE
        values = "(?, ?, ?, 1, NULL, ?, ?)" if with_recoverable else "(?, ?, ?, NULL, ?, ?)"
        return f"INSERT INTO {self.qualified_name(address)} ({columns}) VALUES {values}"

    def receive_batch(self, address: QueueAddress) -> str:
        return (
            "WITH message AS ("
            f"SELECT TOP(?) * FROM {self.qualified_name(address)} WITH (UPDLOCK, READPAST, ROWLOCK) "
            f"ORDER BY [RowVersion]) DELETE FROM message {_OUTPUT}"
        )

    def peek_estimate(self, address: QueueAddress) -> str:
        return (
            "SELECT isnull(cast(max([RowVersion]) - min([RowVersion]) + 1 AS bigint), 0) "
            f"FROM {self.qualified_name(address)} WITH (READPAST, READCOMMITTEDLOCK)"
        )

    def peek_bounds(self, address: QueueAddress) -> str:
        return (
            "SELECT min([RowVersion]), max([RowVersion]) "
            f"FROM {self.qualified_name(address)} WITH (READPAST, READCOMMITTEDLOCK)"
        )

    def count_exact(self, address: QueueAddress) -> str:
        return (
            f"SELECT count_big(*) FROM {self.qualified_name(address)} WITH (READPAST) "
            "WHERE [Expires] IS NULL OR [Expires] > GETUTCDATE()"
        )

    def browse(self, address: QueueAddress) -> str:
        # READPAST skips the rows receivers hold (their messages are in flight) and uncommitted sends
        # instead of waiting for them; READCOMMITTEDLOCK keeps that true on READ_COMMITTED_SNAPSHOT
        # databases. The shared locks last for the read of each row only. NOLOCK is not used: it would
        # show uncommitted sends that may roll back and can skip or repeat rows while pages split.
        return (
            "SELECT TOP (?) [Id], [CorrelationId], [ReplyToAddress], [Headers], [Body], [RowVersion], "
            "[Expires] "
            f"FROM {self.qualified_name(address)} WITH (READPAST, READCOMMITTEDLOCK) "
            "WHERE [Expires] IS NULL OR [Expires] > GETUTCDATE() ORDER BY [RowVersion]"
        )

    def oldest_headers(self, address: QueueAddress) -> str:
        # As browse (READPAST: rows in flight are skipped), one row and no Body.
        return (
            "SELECT TOP (1) [RowVersion], [Headers] "
            f"FROM {self.qualified_name(address)} WITH (READPAST, READCOMMITTEDLOCK) "
            "WHERE [Expires] IS NULL OR [Expires] > GETUTCDATE() ORDER BY [RowVersion]"
        )

    def failed_newest(self, address: QueueAddress) -> str:
        return (
            "SELECT TOP (?) [RowVersion], [Id], [Headers] "
            f"FROM {self.qualified_name(address)} WITH (READPAST, READCOMMITTEDLOCK) "
            "ORDER BY [RowVersion] DESC"
        )

    def failed_page(self, address: QueueAddress) -> str:
        # As browse: READPAST skips rows another session holds (a retry in flight) instead of waiting.
        return (
            "SELECT TOP (?) [RowVersion], [Id], [Headers] "
            f"FROM {self.qualified_name(address)} WITH (READPAST, READCOMMITTEDLOCK) "
            "WHERE [RowVersion] > ? ORDER BY [RowVersion]"
        )

    def failed_page_params(self, after: int, size: int) -> tuple[Any, ...]:
        return (size, after)

    def failed_messages(self, address: QueueAddress) -> str:
        return (
            "SELECT [Id], [CorrelationId], [ReplyToAddress], [Headers], [Body], [RowVersion], [Expires] "
            f"FROM {self.qualified_name(address)} WITH (READPAST, READCOMMITTEDLOCK) "
            "WHERE [Id] = ? ORDER BY [RowVersion]"
        )

    def take_failed_row(self, address: QueueAddress) -> str:
        return (
            f"DELETE FROM {self.qualified_name(address)} WITH (ROWLOCK) "
            "OUTPUT deleted.[Id], deleted.[CorrelationId], deleted.[ReplyToAddress], deleted.[Headers], "
            "deleted.[Body] WHERE [RowVersion] = ?"
        )

    def count_expired(self, address: QueueAddress) -> str:
        return (
            f"SELECT count_big(*) FROM {self.qualified_name(address)} WITH (READPAST) "
            "WHERE [Expires] <= GETUTCDATE()"
        )

    def queue_tables(self, schema: str | None) -> tuple[str, Sequence[Any]]:
        return (
            "SELECT s.name, t.name FROM sys.tables t JOIN sys.schemas s ON s.schema_id = t.schema_id "
            "WHERE s.name = ? AND (SELECT count(*) FROM sys.columns c WHERE c.object_id = t.object_id "
            "AND c.name IN ('Id', 'Headers', 'Body', 'RowVersion', 'Expires')) = 5 ORDER BY t.name",
            (schema or self.default_schema,),
        )

    def purge_expired_batch(self, address: QueueAddress) -> str:
        table = self.qualified_name(address)
        return (
            f"DELETE FROM {table} WHERE [RowVersion] IN ("
            f"SELECT TOP (?) [RowVersion] FROM {table} WITH (READPAST) WHERE [Expires] < GETUTCDATE()); "
            "SELECT @@ROWCOUNT"
        )

    def purge_returns_count(self) -> bool:
        return True

    def index_first_columns(self, address: QueueAddress) -> str:
        prefix = self._catalog_prefix(address)
        return (
            f"SELECT c.name, i.type FROM {prefix}sys.indexes i "
            f"JOIN {prefix}sys.index_columns ic ON ic.object_id = i.object_id "
            "AND ic.index_id = i.index_id AND ic.key_ordinal = 1 "
            f"JOIN {prefix}sys.columns c ON c.object_id = ic.object_id AND c.column_id = ic.column_id "
            "WHERE i.object_id = OBJECT_ID(?)"
        )

    def headers_column_type(self, address: QueueAddress) -> str:
        prefix = self._catalog_prefix(address)
        return (
            f"SELECT t.name FROM {prefix}sys.columns c "
            f"JOIN {prefix}sys.types t ON t.user_type_id = c.user_type_id "
            "WHERE c.object_id = OBJECT_ID(?) AND c.name = 'Headers'"
        )

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
        for spec in self.indexes(address, options):
            column = "rowversion" if spec.name == "Index_RowVersion" else "expires"
            if column not in first_columns:
                purpose = (
                    "receiving and peeking read the oldest rows through it"
                    if column == "rowversion"
                    else "purging expired messages finds them through it"
                )
                findings.append(
                    Finding(
                        f"missing_{column}_index",
                        f"Queue table {address} has no index on {column} ({purpose}).",
                        spec.create,
                    )
                )
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
    def create_delayed_table(self, address: QueueAddress) -> str:
        return (
            f"CREATE TABLE {self.qualified_name(address)} (\n"
            "    [Headers] nvarchar(max) NOT NULL,\n"
            "    [Body] varbinary(max) NULL,\n"
            "    [Due] datetime NOT NULL,\n"
            "    [RowVersion] bigint IDENTITY(1,1) NOT NULL\n)"
        )

    def delayed_indexes(self, address: QueueAddress) -> list[IndexSpec]:
        return [
            IndexSpec(
                "Index_Due",
                f"CREATE NONCLUSTERED INDEX [Index_Due] ON {self.qualified_name(address)} ([Due] ASC)",
            )
        ]

    def store_delayed(self, address: QueueAddress) -> str:
        return (
            f"INSERT INTO {self.qualified_name(address)} ([Headers], [Body], [Due]) VALUES (?, ?, "
            "COALESCE(CAST(? AS datetime2), DATEADD(millisecond, ?, DATEADD(second, ?, GETUTCDATE()))))"
        )

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

    def select_due_delayed(self, address: QueueAddress) -> str:
        return (
            f"SELECT TOP(?) [RowVersion], [Headers] FROM {self.qualified_name(address)} "
            "WITH (UPDLOCK, READPAST, ROWLOCK) WHERE [Due] <= GETUTCDATE() ORDER BY [Due]"
        )

    def move_delayed_rows(
        self, address: QueueAddress, destination: QueueAddress, rows: int, with_recoverable: bool
    ) -> list[str]:
        # The reference's move (DELETE ... OUTPUT NEWID(), NULL, NULL, 1, NULL, deleted.Headers,
        # deleted.Body INTO the queue), aimed at the row's destination instead of the endpoint's input queue.
        columns = _COLUMNS if with_recoverable else _COLUMNS_WITHOUT_RECOVERABLE
        recoverable = "1, " if with_recoverable else ""
        return [
            f"DELETE FROM {self.qualified_name(address)} "
            f"OUTPUT NEWID(), NULL, NULL, {recoverable}NULL, deleted.[Headers], deleted.[Body] "
            f"INTO {self.qualified_name(destination)} ({columns}) "
            f"WHERE [RowVersion] IN ({', '.join(['?'] * rows)})"
        ]

    def select_delayed_rows(self, address: QueueAddress, rows: int) -> str:
        return (
            f"SELECT [Headers], [Body], [RowVersion] FROM {self.qualified_name(address)} "
            f"WHERE [RowVersion] IN ({', '.join(['?'] * rows)})"
        )

    def delete_delayed_rows(self, address: QueueAddress, rows: int) -> str:
        return f"DELETE FROM {self.qualified_name(address)} WHERE [RowVersion] IN ({', '.join(['?'] * rows)})"

    def next_due_delayed(self, address: QueueAddress) -> str:
        return f"SELECT GETUTCDATE(), min([Due]) FROM {self.qualified_name(address)} WITH (READPAST)"

    def count_delayed(self, address: QueueAddress) -> str:
        return f"SELECT count_big(*) FROM {self.qualified_name(address)} WITH (READPAST)"

    def _mover_lock_resource(self, address: QueueAddress) -> str:
        resource = f"{self.qualified_name(address)}_mover"
        return resource if len(resource) <= 255 else f"sqlqueue_{short_hash(resource)}_mover"

    def try_lock_delayed_mover(self, address: QueueAddress) -> tuple[str, Sequence[Any]]:
        return (
            "DECLARE @result int; "
            "EXEC @result = sp_getapplock @Resource = ?, @LockMode = 'Exclusive', "
            "@LockOwner = 'Session', @LockTimeout = 0; "
            "SELECT @result",
            (self._mover_lock_resource(address),),
        )

    def unlock_delayed_mover(self, address: QueueAddress) -> tuple[str, Sequence[Any]]:
        return (
            "EXEC sp_releaseapplock @Resource = ?, @LockOwner = 'Session'",
            (self._mover_lock_resource(address),),
        )

    # ---- driver glue ---------------------------------------------------------------------------
    def row_id(self, value: Any) -> Any:
        return str(value)

    def prepare_connection(self, connection: Any) -> None:
        connection.autocommit = False
        cursor = connection.cursor()
        cursor.execute("SET NOCOUNT ON")
        cursor.close()
        connection.commit()

    def reset_session(self, connection: Any, defaults: Any) -> None:
        """There is no ``sp_reset_connection`` over ODBC: :data:`RESET_SESSION` restores, in one batch,
        each option the transport relies on, then commits (Babelfish keeps a ``SET`` made in a transaction
        only if that commits)."""
        connection.autocommit = False
        cursor = connection.cursor()
        try:
            cursor.execute(RESET_SESSION)
            while cursor.nextset():
                pass
        finally:
            cursor.close()
        connection.commit()

    def server_variant(self, connection: Any) -> str | None:
        """``"babelfish"`` when the server is Babelfish for PostgreSQL, else None (SQL Server itself).

        ``SERVERPROPERTY('Babelfish')`` is 1 there and NULL on SQL Server (an unknown property), so one
        statement that both run decides it. The cast spares drivers the sql_variant type.
        """
        cursor = connection.cursor()
        try:
            cursor.execute("SELECT CAST(SERVERPROPERTY('Babelfish') AS int)")
            rows = self.fetch_rows(cursor)
        finally:
            cursor.close()
        connection.rollback()
        if rows and rows[0][0] == 1:
            return "babelfish"
        return None

    def fetch_rows(self, cursor: Any) -> list[Any]:
        while cursor.description is None:
            if not cursor.nextset():
                return []
        rows = cursor.fetchall()
        while cursor.nextset():
            pass
        return rows

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
