"""Golden files and T-SQL checks for every statement of the SQL Server dialect.

SQL Server cannot run where this suite is developed, so its SQL is held in three ways.

1. **Golden files.** ``tests/golden/sqlserver/<case>.sql`` holds every statement the dialect renders for one
   queue address: a ``-- <name>`` comment line, then (where the dialect binds the values itself) a
   ``-- params: <JSON>`` line, then the statement exactly as it is executed. The rendered text must equal the
   file. Every subclass of ``SqlServerDialect`` (a variant such as Babelfish's, found through
   ``__subclasses__()`` by ``tests/tsql_checks.py``) has ``tests/golden/<variant>/<case>.sql`` with the
   statements it renders differently; the Spark bridge's T-SQL is in ``tests/golden/spark_bridge/``
   (``tests/test_tsql_static.py``). A case a variant refuses (``InvalidQueueName``: Babelfish takes no
   ``]`` and no non-ASCII name, ``expected_refusal``) has no file of that variant; a test holds the refusal.

   The files are snapshots of the code's output, so they catch changes, not mistakes. **How a golden
   change is reviewed:** rewrite the files, then read the diff against the reference's statements in
   ``../shared/design/reference-transport.md`` (section 1 for the DDL, 2 the receive, 3 the send, 4 the
   peek, 5 the purge, 7 the quoting of names, 8 the delayed table and its mover), never against the code
   that produced it: a changed hint list, clock, order, ``TOP``, ``OUTPUT`` or lock owner must be one the
   reference has, or the commit says why it departs. A variant's file says where it departs from SQL
   Server's statements and why that form is valid T-SQL too::

       SQLQUEUE_UPDATE_GOLDEN=1 .venv/bin/pytest tests/test_sqlserver_golden.py tests/test_tsql_static.py
       git diff tests/golden/

   With ``SQLQUEUE_UPDATE_GOLDEN=1`` the golden tests write the files instead of comparing (and delete the
   files of cases that no longer exist); every other check still runs.
2. **Parsing.** Each statement is parsed with sqlglot's T-SQL reader at ``ErrorLevel.RAISE``. Any
   ``exp.Command`` node counts as a failure (sqlglot falls back to that opaque node for some typos, e.g.
   ``CREATE CLUSTERD INDEX``, instead of raising), and the top-level statement types must be the expected
   ones. sqlglot only reads here; it never generates SQL.
3. **Semantics**, on the text and on the parse tree: the receive's hints, ``TOP(?)``, order and ``OUTPUT``;
   the peek's ``max - min + 1`` under ``READPAST, READCOMMITTEDLOCK``; database time (``GETUTCDATE()``) only;
   the purge's ``READPAST``; the creation's two batches, as ``begin_creation`` executes them: first
   ``open_transaction`` (a transaction opened only when ``@@TRANCOUNT = 0``, its extra implicit-mode level
   closed only when the batch opened it; no parameters at all, executed as ``cursor.execute(sql)``, so drivers
   send a plain batch: a parameterised call that changes ``@@TRANCOUNT`` is error 266), then
   ``lock_for_create`` (a transaction-owned exclusive ``sp_getapplock`` waiting up to 60 s on
   ``[catalog].[schema].[table]_lock``, the catalog the connection's where the address has none, hashed beyond
   255 characters, its result selected); the delayed table's columns, its store (``Due`` from
   ``GETUTCDATE()``), its pick (the receive's hints, ``Due <= GETUTCDATE()`` in Due order, RowVersion and
   Headers only), its move (``DELETE ... OUTPUT NEWID(), ..., deleted.[Headers], deleted.[Body] INTO`` the
   destination, by RowVersion) and the mover election (a session-owned ``sp_getapplock`` that never waits);
   every identifier from the address bracket-quoted with ``]`` doubled and never bare; every value a ``?``
   parameter (the only string literals are fixed ones such as ``'Exclusive'``). These checkers describe the
   reference's statements and run on SqlServerDialect's; a variant's statement of its own needs its own
   (``VARIANT_SEMANTICS``: Babelfish's receive by ``RowVersion IN (SELECT TOP(?) ...)``, its ``sys.tables``
   lookup and its index-name prefix), or test_variant_statement_means_what_the_reference_does fails.

A negative self-test feeds deliberately broken statements to the same helpers and expects them to fail.
A second grammar (sqlfluff's T-SQL) and allow-lists of hints, types, dateparts and functions run on every
statement of every variant in ``tests/test_tsql_static.py``.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import tsql_checks
from sqlglot import exp
from tsql_checks import (
    GOLDEN_ROOT,
    compare_golden,
    parse_sqlfluff,
    split_batch,
    split_if,
    sqlglot_batch,
    sqlglot_system_variables,
    stale_golden_files,
    tsql_dialect_classes,
    variant_name,
)

from airflow_provider_sqlqueue.dialects.babelfish import BabelfishDialect
from airflow_provider_sqlqueue.dialects.base import Row, TableOptions
from airflow_provider_sqlqueue.dialects.sqlserver import SqlServerDialect
from airflow_provider_sqlqueue.model.address import QueueAddress
from airflow_provider_sqlqueue.model.errors import InvalidQueueName
from airflow_provider_sqlqueue.transport.queue.provisioning import begin_creation

GOLDEN_DIR = Path(__file__).parent / "golden" / "sqlserver"
UPDATE_GOLDEN = os.environ.get("SQLQUEUE_UPDATE_GOLDEN") == "1"
DIALECT = SqlServerDialect()
# Where the delayed mover's statements move rows to: another table, a dot inside its name.
MOVE_DESTINATION = QueueAddress("Billing.Input", "dbo")
# Where an error queue's deleted messages go (transport/archive.py): rendered as the case address's archive.
ARCHIVE_DESTINATION = QueueAddress("error_archive", "dbo")
# Where a restore from an archive puts its rows back (the case address then rendered as the archive).
RESTORE_DESTINATION = QueueAddress("error", "dbo")

# A depth sample as the golden files bind it: the queue's table, its minute (since the Unix epoch), messages,
# exact, failed.
DEPTH_SAMPLE = ("orders", 29_666_666, 1_250, False, 3)

# A subscription as the golden files bind it: endpoint, topic (a .NET FullName) and queue address.
SUBSCRIPTION = ("Sales", "Sales.Events.OrderPlaced", "Sales@[dbo]@[sqlqueue]")

# One golden file per address case. Strings go through QueueAddress.parse (the canonical address form);
# every address is then resolved by the dialect (default schema dbo, length limits).
CASES: dict[str, str | QueueAddress] = {
    "plain": "orders",
    # The reference's CI database and schema names.
    "ci_special_characters": QueueAddress("my]table", "db@", "n service.bus&#"),
    "table_open_bracket": "my[table",
    "table_doubled_close_bracket": "my]]table",
    "table_spaces_and_dots": "order queue. v2",
    "table_quote_and_comment": "o'rders;-- DROP TABLE x",
    "schema_at_and_bracket": "orders@[s@]]x]",
    "everything_at_once": "x [y]] 'z';--@[s@]]x]@[c]]@[]",
    # 128-character parts: the longest identifiers SQL Server takes; the lock resource gets hashed.
    "longest_names": QueueAddress("q" * 128, "s" * 128, "c" * 128),
}

# Everything a statement may contain as a literal: fixed words and numbers, never a value from a caller.
FIXED_STRINGS = {"Exclusive", "Transaction", "U", "Headers"}
# 5: the columns queue_tables looks for; 200: the subscription table's column width (the reference's)
# 128: the depth history's QueueName, a table name (SQL Server's longest identifier)
FIXED_NUMBERS = {"0", "1", "5", "128", "200", "255", "60000"}
FORBIDDEN_CLOCKS = {"GETDATE", "SYSDATETIME", "SYSUTCDATETIME", "SYSDATETIMEOFFSET", "CURRENT_TIMESTAMP"}
FORBIDDEN_HINTS = {"NOLOCK", "READUNCOMMITTED"}
APPLOCK_RESOURCE_MAX = 255  # sp_getapplock @Resource is nvarchar(255)
# Where a statement reads a system variable: the creation's open_transaction the transaction level (the lock
# reads none), the purge its count.
SYSTEM_VARIABLES_BY_KIND = {
    "open_transaction": ["@@TRANCOUNT", "@@TRANCOUNT"],
    "purge_expired_batch": ["@@ROWCOUNT"],
    "archive_failed_row": ["@@ROWCOUNT"],
    "restore_archived": ["@@ROWCOUNT"],
    "purge_archive_batch": ["@@ROWCOUNT"],
    "unsubscribe": ["@@ROWCOUNT"],
    "record_depth_sample": ["@@ROWCOUNT"],
    "purge_depth_samples": ["@@ROWCOUNT"],
}
# table_exists binds the quoted name (OBJECT_ID) on SQL Server; Babelfish's reads sys.tables by schema, name.
TABLE_EXISTS_PARAMETERS: dict[type[SqlServerDialect], int] = {BabelfishDialect: 2}
# The database a connection is in, where an address names no catalog (what SELECT DB_NAME() would answer).
CURRENT_CATALOG = "sqlqueue"
# The creation's first batch as sqlglot reads it (each IF as its condition, then the statements it runs):
# DECLARE @opened; IF @@TRANCOUNT = 0 BEGIN BEGIN TRANSACTION; SET @opened = 1 END;
# IF @opened = 1 AND @@TRANCOUNT > 1 COMMIT TRANSACTION.
OPEN_TRANSACTION_TYPES = (
    exp.Declare,
    exp.Select,
    exp.Transaction,
    exp.Set,
    exp.Select,
    exp.Commit,
)
# Its second: DECLARE @result int; EXEC @result = sp_getapplock ...; SELECT @result.
LOCK_TYPES = (exp.Declare, exp.Execute, exp.Select)

# A bracket-quoted identifier: '[', then characters other than ']' or a doubled ']]', then ']'.
BRACKETED = re.compile(r"\[(?:[^\]]|\]\])*\]")


class SqlCheckFailure(AssertionError):
    """A statement failed one of the checks below."""


def fail_unless(condition: object, message: str) -> None:
    if not condition:
        raise SqlCheckFailure(message)


# ---- rendering -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Statement:
    """One rendered statement and what the checks expect of it."""

    kind: str  # which dialect method (selects the semantic checker)
    name: str  # the kind plus arguments; the '-- name' line of the golden file
    sql: str
    types: tuple[type[exp.Expression], ...]  # expected top-level statement types, in order
    placeholders: int  # number of '?' parameters
    params: tuple[Any, ...] | None = None  # values the dialect (or its inspect) binds itself
    embeds_table: bool = True  # the quoted table name is in the text (else it is bound as a parameter)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


def bracket(part: str) -> str:
    """The test's own quoting, independent of the dialect's."""
    return "[" + part.replace("]", "]]") + "]"


def expected_qualified_name(address: QueueAddress) -> str:
    return ".".join(bracket(part) for part in (address.catalog, address.schema, address.table) if part)


def resolve(case: str | QueueAddress) -> QueueAddress:
    return DIALECT.resolve(QueueAddress.parse(case))


class _RecordingCursor:
    """Stands in for a pyodbc cursor in ``inspect``: no indexes found, Headers stored as varchar."""

    def __init__(self, index_rows: list[Any] | None = None) -> None:
        self.executed: list[tuple[str, tuple[Any, ...]]] = []
        self.index_rows = index_rows or []

    def execute(self, sql: str, params: Any = ()) -> None:
        self.executed.append((sql, tuple(params)))

    def fetchall(self) -> list[Any]:
        return self.index_rows

    def fetchone(self) -> Any:
        return ("varchar",)

    description = None  # no result set: fetch_rows reads none

    def nextset(self) -> bool:
        return False

    def close(self) -> None:
        pass


class _CreationCursor:
    """Stands in for a pyodbc cursor in ``begin_creation``: records each ``execute`` call's arguments as
    given (``()`` for ``cursor.execute(sql)``), answers the current-database query with CURRENT_CATALOG
    and the lock with 0 (granted)."""

    def __init__(self, dialect: SqlServerDialect) -> None:
        self.dialect = dialect
        self.executed: list[tuple[str, tuple[Any, ...]]] = []
        self.description: Any = None
        self.rows: list[Any] = []

    def execute(self, sql: str, *args: Any) -> None:
        self.executed.append((sql, args))
        if sql == self.dialect.optional_sql("current_catalog"):
            self.rows = [(CURRENT_CATALOG,)]
        elif "sp_getapplock" in sql:
            self.rows = [(0,)]
        else:
            self.rows = []
        self.description = [("",)] if self.rows else None

    def fetchall(self) -> list[Any]:
        return self.rows

    def nextset(self) -> bool:
        return False


def record_creation(dialect: SqlServerDialect, address: QueueAddress) -> list[tuple[str, tuple[Any, ...]]]:
    """What ``begin_creation`` (transport/queue.py) executes for ``address``: (statement, the arguments
    after it)."""
    cursor = _CreationCursor(dialect)
    begin_creation(cursor, dialect, address)
    return cursor.executed


class _RecordingConnection:
    def __init__(self) -> None:
        self.autocommit = True
        self.cursors: list[_RecordingCursor] = []

    def cursor(self) -> _RecordingCursor:
        self.cursors.append(_RecordingCursor())
        return self.cursors[-1]

    def commit(self) -> None:
        pass

    def rollback(self) -> None:
        pass


def render(case_name: str, address: QueueAddress, dialect: SqlServerDialect = DIALECT) -> list[Statement]:
    d = dialect
    out: list[Statement] = []
    for unicode_headers in (True, False):
        for body_string in (False, True):
            options = TableOptions("heap", unicode_headers, body_string)
            # The layout changes only the indexes; test_create_table_ignores_layout holds that.
            out.append(
                Statement(
                    "create_table",
                    f"create_table unicode_headers={unicode_headers} body_string={body_string}",
                    d.create_table(address, options),
                    (exp.Create,),
                    0,
                    extra={"options": options},
                )
            )
    for layout in ("clustered", "heap"):
        for index in d.indexes(address, TableOptions(layout)):
            out.append(
                Statement(
                    "index",
                    f"index {index.name} layout={layout}",
                    index.create,
                    (exp.Create,),
                    0,
                    extra={"layout": layout, "index": index.name},
                )
            )
    out.append(
        Statement("add_body_string", "add_body_string", d.sql("add_body_string", address), (exp.Alter,), 0)
    )
    out.append(Statement("drop_table", "drop_table", d.sql("drop_table", address), (exp.Drop,), 0))

    # The creation's batches as begin_creation executes them: the transaction (a plain batch), then the lock,
    # named with the catalog: the address's, else the connection's database (current_catalog).
    executed = record_creation(d, address)
    opening = d.optional_sql("open_transaction")
    sql, params = d.lock_for_create(address, CURRENT_CATALOG)
    out.append(
        Statement(
            "open_transaction",
            "open_transaction",
            opening,
            OPEN_TRANSACTION_TYPES,
            0,
            embeds_table=False,
            extra={"execute_args": next((a for s, a in executed if s == opening), None)},
        )
    )
    out.append(
        Statement(
            "lock_for_create",
            "lock_for_create",
            sql,
            LOCK_TYPES,
            1,
            tuple(params),
            embeds_table=False,
            extra={"execute_args": next((a for s, a in executed if s == sql), None)},
        )
    )
    sql, params = d.table_exists(address)
    lookups = TABLE_EXISTS_PARAMETERS.get(type(d), 1)
    out.append(Statement("table_exists", "table_exists", sql, (exp.Select,), lookups, tuple(params), False))
    for index_name in ("Index_RowVersion", "Index_Expires"):
        sql, params = d.index_exists(address, index_name)
        out.append(
            Statement(
                "index_exists",
                f"index_exists {index_name}",
                sql,
                (exp.Select,),
                2,
                tuple(params),
                False,
                extra={"index": index_name},
            )
        )
    sql, params = d.column_exists(address, "BodyString")
    out.append(
        Statement(
            "column_exists",
            "column_exists BodyString",
            sql,
            (exp.Select,),
            2,
            tuple(params),
            False,
            extra={"column": "BodyString"},
        )
    )

    per_row = len(d.send_params(uuid.UUID(int=0), None, None, None, "{}", b""))
    raw = len(d.raw_params(Row(uuid.UUID(int=0), None, None, False, "{}", b"", 1, None)))
    out.append(Statement("send", "send", d.send(address), (exp.Insert,), per_row, extra={"rows": 1}))
    out.append(
        Statement(
            "send",
            "send_batch rows=3",
            d.send_batch(address, 3),
            (exp.Insert,),
            3 * per_row,
            extra={"rows": 3},
        )
    )
    out.append(Statement("insert_raw", "insert_raw", d.insert_raw(address), (exp.Insert,), raw))
    # Tables of later NServiceBus versions have no Recoverable column (detected once per queue).
    legacy = {"rows": 1, "recoverable": False}
    out.append(
        Statement(
            "send", "send without Recoverable", d.send(address, False), (exp.Insert,), per_row, extra=legacy
        )
    )
    out.append(
        Statement(
            "send",
            "send_batch rows=3 without Recoverable",
            d.send_batch(address, 3, False),
            (exp.Insert,),
            3 * per_row,
            extra={"rows": 3, "recoverable": False},
        )
    )
    out.append(
        Statement(
            "insert_raw",
            "insert_raw without Recoverable",
            d.insert_raw(address, False),
            (exp.Insert,),
            raw,
            extra={"recoverable": False},
        )
    )
    out.append(Statement("receive_batch", "receive_batch", d.sql("receive_batch", address), (exp.Delete,), 1))
    out.append(Statement("peek_estimate", "peek_estimate", d.sql("peek_estimate", address), (exp.Select,), 0))
    out.append(Statement("peek_bounds", "peek_bounds", d.sql("peek_bounds", address), (exp.Select,), 0))
    out.append(Statement("count_exact", "count_exact", d.sql("count_exact", address), (exp.Select,), 0))
    out.append(Statement("browse", "browse", d.sql("browse", address), (exp.Select,), 1))
    out.append(
        Statement("oldest_headers", "oldest_headers", d.sql("oldest_headers", address), (exp.Select,), 0)
    )
    out.append(Statement("failed_newest", "failed_newest", d.sql("failed_newest", address), (exp.Select,), 1))
    out.append(Statement("failed_page", "failed_page", d.sql("failed_page", address), (exp.Select,), 2))
    out.append(
        Statement("failed_messages", "failed_messages", d.sql("failed_messages", address), (exp.Select,), 1)
    )
    out.append(
        Statement("take_failed_row", "take_failed_row", d.sql("take_failed_row", address), (exp.Delete,), 1)
    )
    out.append(Statement("count_expired", "count_expired", d.sql("count_expired", address), (exp.Select,), 0))
    out.append(
        Statement(
            "purge_expired_batch",
            "purge_expired_batch",
            d.sql("purge_expired_batch", address),
            (exp.Delete, exp.Select),
            1,
        )
    )

    # Delayed delivery, rendered for the same address as if it were an endpoint's delayed table.
    out.append(
        Statement(
            "create_delayed_table",
            "create_delayed_table",
            d.sql("create_delayed_table", address),
            (exp.Create,),
            0,
        )
    )
    for index in d.delayed_indexes(address):
        out.append(Statement("delayed_index", f"delayed_index {index.name}", index.create, (exp.Create,), 0))
    stored = len(d.store_delayed_params("{}", b"", None, timedelta(seconds=1)))
    out.append(
        Statement("store_delayed", "store_delayed", d.sql("store_delayed", address), (exp.Insert,), stored)
    )
    out.append(
        Statement(
            "select_due_delayed", "select_due_delayed", d.sql("select_due_delayed", address), (exp.Select,), 1
        )
    )
    for recoverable in (True, False):
        [move] = d.move_delayed_rows(address, MOVE_DESTINATION, 3, recoverable)
        out.append(
            Statement(
                "move_delayed_rows",
                f"move_delayed_rows 3 rows{'' if recoverable else ' without Recoverable'}",
                move,
                (exp.Delete,),
                3,
                extra={"recoverable": recoverable},
            )
        )
    out.append(
        Statement(
            "select_delayed_rows",
            "select_delayed_rows 3",
            d.sql("select_delayed_rows", address, 3),
            (exp.Select,),
            3,
        )
    )
    out.append(
        Statement(
            "delete_delayed_rows",
            "delete_delayed_rows 3",
            d.sql("delete_delayed_rows", address, 3),
            (exp.Delete,),
            3,
        )
    )
    out.append(
        Statement(
            "next_due_delayed", "next_due_delayed", d.sql("next_due_delayed", address), (exp.Select,), 0
        )
    )
    out.append(Statement("count_delayed", "count_delayed", d.sql("count_delayed", address), (exp.Select,), 0))
    sql, params = d.try_lock_delayed_mover(address)
    out.append(
        Statement(
            "try_lock_delayed_mover",
            "try_lock_delayed_mover",
            sql,
            (exp.Declare, exp.Execute, exp.Select),
            1,
            tuple(params),
            embeds_table=False,
            extra={"literals": {"Session"}},
        )
    )
    sql, params = d.unlock_delayed_mover(address)
    out.append(
        Statement(
            "unlock_delayed_mover",
            "unlock_delayed_mover",
            sql,
            (exp.Execute,),
            1,
            tuple(params),
            embeds_table=False,
            extra={"literals": {"Session"}},
        )
    )

    # The archive of an error queue (transport/archive.py): its table, index, purge and count rendered for the
    # same address as if it were the archive table; the move from the address into ARCHIVE_DESTINATION, and
    # the restore from the address (as the archive) into RESTORE_DESTINATION.
    out.append(
        Statement(
            "create_archive_table",
            "create_archive_table",
            d.sql("create_archive_table", address),
            (exp.Create,),
            0,
        )
    )
    for index in d.archive_indexes(address):
        out.append(Statement("archive_index", f"archive_index {index.name}", index.create, (exp.Create,), 0))
    for recoverable in (True, False):
        [archive_move] = d.archive_failed_row(address, ARCHIVE_DESTINATION, recoverable)
        out.append(
            Statement(
                "archive_failed_row",
                f"archive_failed_row{'' if recoverable else ' without Recoverable'}",
                archive_move,
                (exp.Delete, exp.Select),
                1,
                extra={"recoverable": recoverable},
            )
        )
    for recoverable in (True, False):
        [restore] = d.restore_archived(RESTORE_DESTINATION, address, recoverable)
        out.append(
            Statement(
                "restore_archived",
                f"restore_archived{'' if recoverable else ' without Recoverable'}",
                restore,
                (exp.Delete, exp.Select),
                1,
                extra={"recoverable": recoverable},
            )
        )
    out.append(
        Statement(
            "browse_archive",
            "browse_archive",
            d.sql("browse_archive", address),
            (exp.Select,),
            2,
            d.browse_archive_params(100, 51),
        )
    )
    out.append(
        Statement(
            "purge_archive_batch",
            "purge_archive_batch",
            d.sql("purge_archive_batch", address),
            (exp.Delete, exp.Select),
            3,
            d.purge_archive_params(30 * 86400, 10_000),
        )
    )
    out.append(Statement("count_archive", "count_archive", d.sql("count_archive", address), (exp.Select,), 0))

    # The depth history (transport/depth_samples.py): its statements rendered for the same address as if it
    # were sqlqueue_depth_samples, with DEPTH_SAMPLE bound.
    out.append(
        Statement(
            "create_depth_samples_table",
            "create_depth_samples_table",
            d.sql("create_depth_samples_table", address),
            (exp.Create,),
            0,
        )
    )
    out.append(
        Statement(
            "record_depth_sample",
            "record_depth_sample",
            d.sql("record_depth_sample", address),
            (exp.Insert, exp.Select),
            7,
            d.depth_sample_params(*DEPTH_SAMPLE),
        )
    )
    out.append(
        Statement(
            "purge_depth_samples",
            "purge_depth_samples",
            d.sql("purge_depth_samples", address),
            (exp.Delete, exp.Select),
            1,
            (DEPTH_SAMPLE[1] - 1440,),
        )
    )
    out.append(
        Statement(
            "read_depth_samples",
            "read_depth_samples",
            d.sql("read_depth_samples", address),
            (exp.Select,),
            1,
            (DEPTH_SAMPLE[1] - 180,),
        )
    )

    # Native publish/subscribe (transport/subscriptions.py): the subscription table's statements rendered
    # for the same address as if it were SubscriptionRouting.
    out.append(
        Statement(
            "create_subscription_table",
            "create_subscription_table",
            d.create_subscription_table(address),
            (exp.Create,),
            0,
        )
    )
    subscribe_params = d.subscribe_params(*SUBSCRIPTION)
    out.append(
        Statement(
            "subscribe",
            "subscribe",
            d.sql("subscribe", address),
            (exp.Update, exp.Insert) if d.variant == "babelfish" else (exp.Merge,),
            len(subscribe_params),
            subscribe_params,
        )
    )
    out.append(
        Statement(
            "unsubscribe",
            "unsubscribe",
            d.sql("unsubscribe", address),
            (exp.Delete, exp.Select),
            2,
            SUBSCRIPTION[:2],
        )
    )
    for topics in (1, 3):
        out.append(
            Statement(
                "select_subscribers",
                f"select_subscribers {topics} topic{'s' if topics > 1 else ''}",
                d.sql("select_subscribers", address, topics),
                (exp.Select,),
                topics,
                extra={"topics": topics},
            )
        )
    for by_topic, by_endpoint in ((False, False), (True, False), (False, True), (True, True)):
        by = [name for name, wanted in (("Topic", by_topic), ("Endpoint", by_endpoint)) if wanted]
        filters = tuple(
            value
            for value, wanted in zip(SUBSCRIPTION[1::-1], (by_topic, by_endpoint), strict=True)
            if wanted
        )
        for limit in (None, 50):
            out.append(
                Statement(
                    "select_subscriptions",
                    f"select_subscriptions by_topic={by_topic} by_endpoint={by_endpoint}"
                    + ("" if limit is None else " limited"),
                    d.select_subscriptions(address, by_topic, by_endpoint, limit is not None),
                    (exp.Select,),
                    len(filters) + (limit is not None),
                    d.select_subscriptions_params(filters, limit),
                    extra={"by": by, "limited": limit is not None},
                )
            )

    # The schema inspection, with the parameters inspect() binds, and the fix it proposes for varchar Headers.
    cursor = _RecordingCursor()
    findings = d.inspect(cursor, address, TableOptions("heap"))
    executed = dict(zip(("index_first_columns", "headers_column_type"), cursor.executed, strict=True))
    assert executed["index_first_columns"][0] == d.index_first_columns(address)
    assert executed["headers_column_type"][0] == d.headers_column_type(address)
    for kind, (sql, params) in executed.items():
        out.append(Statement(kind, kind, sql, (exp.Select,), 1, params, False))
    fixes = {finding.code: finding.fix for finding in findings}
    heap_indexes = {index.name: index.create for index in d.indexes(address, TableOptions("heap"))}
    assert fixes.pop("missing_rowversion_index") == heap_indexes["Index_RowVersion"]
    assert fixes.pop("missing_expires_index") == heap_indexes["Index_Expires"]
    out.append(
        Statement(
            "fix_varchar_headers",
            "inspect fix varchar_headers",
            fixes.pop("varchar_headers"),
            (exp.Alter,),
            0,
        )
    )
    assert not fixes, f"inspect proposed fixes this test does not know: {sorted(fixes)}"

    # A table that still has the seeds' clustered RowVersion index, inspected for the heap layout.
    clustered = _RecordingCursor(index_rows=[("RowVersion", 1), ("Expires", 2)])
    [migration] = [
        f for f in d.inspect(clustered, address, TableOptions("heap")) if f.code.startswith("clustered")
    ]
    out.append(
        Statement(
            "fix_clustered_rowversion",
            "inspect fix clustered_rowversion_index",
            migration.fix,
            (exp.Drop, exp.Create, exp.Drop, exp.Create),
            0,
        )
    )

    if case_name == "plain":  # the listing of queue tables (sqlqueue stats) takes a schema, not an address
        sql, params = d.queue_tables(address.schema)
        columns = {"Id", "Headers", "Body", "RowVersion", "Expires"}
        out.append(
            Statement(
                "queue_tables",
                "queue_tables",
                sql,
                (exp.Select,),
                1,
                tuple(params),
                embeds_table=False,
                extra={"literals": columns},
            )
        )
    if case_name == "plain":  # session settings: the same for every address, so rendered once
        connection = _RecordingConnection()
        d.prepare_connection(connection)
        for sql, _params in connection.cursors[0].executed:
            out.append(Statement("prepare_connection", "prepare_connection", sql, (exp.Set,), 0, None, False))
        # The catalog that names the creation lock where the address has none.
        out.append(
            Statement(
                "current_catalog",
                "current_catalog",
                d.optional_sql("current_catalog"),
                (exp.Select,),
                0,
                None,
                False,
            )
        )
        # The one statement that tells Babelfish from SQL Server (SqlServerDialect.server_variant).
        connection = _RecordingConnection()
        d.server_variant(connection)
        for sql, params in [executed for cursor in connection.cursors for executed in cursor.executed]:
            out.append(
                Statement(
                    "server_variant",
                    "server_variant",
                    sql,
                    (exp.Select,),
                    0,
                    params,
                    False,
                    extra={"literals": {"Babelfish"}},
                )
            )

    names = [statement.name for statement in out]
    assert len(names) == len(set(names)), "statement names must be unique within a golden file"
    return out


def golden_text(case_name: str, address: QueueAddress, statements: list[Statement]) -> str:
    parts = json.dumps(
        {"table": address.table, "schema": address.schema, "catalog": address.catalog}, ensure_ascii=False
    )
    lines = [
        f"-- SQL Server statements for the queue address {address}",
        f"-- resolved parts: {parts}",
        "-- Golden file: tests/test_sqlserver_golden.py; SQLQUEUE_UPDATE_GOLDEN=1 rewrites it.",
    ]
    for statement in statements:
        lines += ["", f"-- {statement.name}"]
        if statement.params is not None:
            lines.append(f"-- params: {json.dumps(list(statement.params), ensure_ascii=False)}")
        elif statement.extra.get("execute_args") == ():
            lines.append("-- params: none, executed as cursor.execute(sql): a plain batch")
        lines.append(statement.sql)
    return "\n".join(lines) + "\n"


def differing(case_name: str, statements: list[Statement]) -> list[Statement]:
    """The statements a subclass renders differently from SqlServerDialect (text or bound values)."""
    reference = {statement.name: (statement.sql, statement.params) for statement in RENDERED[case_name]}
    return [s for s in statements if reference.get(s.name) != (s.sql, s.params)]


def variant_golden_text(variant: str, case_name: str, statements: list[Statement]) -> str:
    """A subclass's golden file: the statements it renders differently from SqlServerDialect."""
    header = [
        f"-- {variant}: the statements that differ from golden/sqlserver/{case_name}.sql",
        "-- (every other statement is the SQL Server one). Review against the reference's statements.",
    ]
    return (
        "\n".join(header)
        + "\n"
        + golden_text(case_name, ADDRESSES[case_name], differing(case_name, statements))
    )


ADDRESSES = {name: resolve(case) for name, case in CASES.items()}
RENDERED = {name: render(name, address) for name, address in ADDRESSES.items()}
# Every class that renders T-SQL: SqlServerDialect and its subclasses (found by tsql_checks).
VARIANTS = {variant_name(cls): cls for cls in tsql_dialect_classes()}


def expected_refusal(variant: str, address: QueueAddress) -> str | None:
    """What the variant's InvalidQueueName names for ``address``, or None where it renders it. Babelfish
    4.3 cannot parse ``]]`` inside a bracketed name and does not keep non-ASCII names intact
    (dialects/babelfish.py); SQL Server takes both. The parts in the order the
    dialect checks them: table, schema, catalog."""
    if variant != "babelfish":
        return None
    for part in (address.table, address.schema, address.catalog):
        if part is not None and "]" in part:
            return "contains ']'"
        if part is not None and not part.isascii():
            return "is not ASCII"
    return None


# The cases each variant refuses (with the reason) and the ones it renders, golden files and checks included.
REFUSED_BY_VARIANT = {
    variant: {
        name: reason for name, address in ADDRESSES.items() if (reason := expected_refusal(variant, address))
    }
    for variant in VARIANTS
}
CASES_BY_VARIANT = {
    variant: [name for name in CASES if name not in REFUSED_BY_VARIANT[variant]] for variant in VARIANTS
}
RENDERED_BY_VARIANT = {
    variant: RENDERED
    if cls is SqlServerDialect
    else {name: render(name, ADDRESSES[name], cls()) for name in CASES_BY_VARIANT[variant]}
    for variant, cls in VARIANTS.items()
}
ALL_STATEMENTS = [
    pytest.param(name, statement, id=f"{name}:{statement.name}")
    for name, statements in RENDERED.items()
    for statement in statements
]


# ---- checking helpers ----------------------------------------------------------------------------------
def parse_tsql(sql: str) -> list[exp.Expression]:
    """Parse with sqlglot's T-SQL reader; a parse error, an empty statement or any Command node fails.

    sqlglot reads the text of ``tsql_checks.sqlglot_batch``: an IF of a batch as its condition
    (``SELECT 1 WHERE ...``) followed by its statements, and ``DELETE FROM t OUTPUT ... WHERE`` as the
    equivalent ``DELETE t OUTPUT ... FROM t WHERE``; every other statement as written."""
    try:
        return tsql_checks.parse_sqlglot(sql)
    except tsql_checks.StaticCheckFailure as failure:
        raise SqlCheckFailure(str(failure)) from failure


def check_types(trees: list[exp.Expression], expected: tuple[type[exp.Expression], ...]) -> None:
    found = tuple(type(tree) for tree in trees)
    fail_unless(
        found == expected,
        f"statement types {[t.__name__ for t in found]} != expected {[t.__name__ for t in expected]}",
    )


def all_nodes(trees: list[exp.Expression], kind: type[exp.Expression]) -> list[Any]:
    return [node for tree in trees for node in tree.find_all(kind)]


def check_values_are_parameters(
    trees: list[exp.Expression], sql: str, placeholders: int, literals: frozenset[str] = frozenset()
) -> None:
    """Values are '?' parameters; the only literals are fixed words (plus the statement's own fixed
    ``literals``, e.g. the mover lock's 'Session') and numbers."""
    allowed = FIXED_STRINGS | literals
    strings = {lit.this for lit in all_nodes(trees, exp.Literal) if lit.is_string}
    fail_unless(strings <= allowed, f"string literals {sorted(strings - allowed)} in:\n{sql}")
    numbers = {str(lit.this) for lit in all_nodes(trees, exp.Literal) if not lit.is_string}
    fail_unless(numbers <= FIXED_NUMBERS, f"number literals {sorted(numbers - FIXED_NUMBERS)} in:\n{sql}")
    national = all_nodes(trees, exp.National)
    fail_unless(not national, f"N'...' literals {[n.this for n in national]} in:\n{sql}")
    found = len(all_nodes(trees, exp.Placeholder))
    fail_unless(found == placeholders, f"{found} '?' parameters in the tree, expected {placeholders}:\n{sql}")
    in_text = BRACKETED.sub(" ", sql).count("?")
    fail_unless(in_text == placeholders, f"{in_text} '?' in the text, expected {placeholders}:\n{sql}")


def function_names(trees: list[exp.Expression]) -> set[str]:
    return {node.name.upper() for node in all_nodes(trees, exp.Anonymous)}


def check_database_clock(trees: list[exp.Expression], sql: str, uses_time: bool) -> None:
    """Time comes from GETUTCDATE() on the server, never from the client or a local-time function."""
    local = all_nodes(trees, exp.CurrentTimestamp) + all_nodes(trees, exp.CurrentDate)
    fail_unless(not local, f"local-time function in:\n{sql}")
    forbidden = function_names(trees) & FORBIDDEN_CLOCKS
    fail_unless(not forbidden, f"clock functions {sorted(forbidden)} instead of GETUTCDATE() in:\n{sql}")
    if uses_time:
        fail_unless("GETUTCDATE" in function_names(trees), f"GETUTCDATE() missing from:\n{sql}")
        fail_unless("GETUTCDATE()" in sql, f"GETUTCDATE() missing from the text:\n{sql}")


def table_hints(table: exp.Table) -> list[str]:
    return [var.name.upper() for hint in table.args.get("hints") or [] for var in hint.expressions]


def check_hints(trees: list[exp.Expression], sql: str) -> None:
    for table in all_nodes(trees, exp.Table):
        bad = set(table_hints(table)) & FORBIDDEN_HINTS
        fail_unless(not bad, f"dirty-read hints {sorted(bad)} in:\n{sql}")


def _parts(table: exp.Table) -> tuple[exp.Identifier | None, exp.Identifier | None, exp.Identifier | None]:
    return table.args.get("this"), table.args.get("db"), table.args.get("catalog")


def check_identifiers(
    trees: list[exp.Expression], sql: str, address: QueueAddress, embeds_table: bool
) -> None:
    """Every name from the address is bracket-quoted with ']' doubled, and never appears bare."""
    expected = (address.table, address.schema, address.catalog)
    ctes = {cte.alias for cte in all_nodes(trees, exp.CTE)}
    queue_tables = 0
    for table in all_nodes(trees, exp.Table):
        this, db, catalog = _parts(table)
        names = tuple(part.name if part is not None else None for part in (this, db, catalog))
        if names == ("message", None, None) and not this.quoted and "message" in ctes:
            continue  # the receive's CTE
        if names in (("sp_getapplock", None, None), ("sp_releaseapplock", None, None)) and not this.quoted:
            continue
        if (
            names in (("Index_RowVersion", None, None), ("Index_Expires", None, None))
            and this.quoted
            and isinstance(table.parent, exp.Drop)
        ):
            continue  # DROP INDEX [name] ON <table>: the index, whose table is checked below
        if db is not None and db.name == "sys" and not db.quoted:
            fail_unless(names[2] == address.catalog, f"catalog views of the wrong catalog in:\n{sql}")
            fail_unless(catalog is None or catalog.quoted, f"unquoted catalog in:\n{sql}")
            continue
        fail_unless(names == expected, f"table {names} is not the address {expected} in:\n{sql}")
        unquoted = [p.name for p in (this, db, catalog) if p is not None and not p.quoted]
        fail_unless(not unquoted, f"unquoted address parts {unquoted} in:\n{sql}")
        queue_tables += 1
    if embeds_table:
        fail_unless(queue_tables, f"the queue table is missing from:\n{sql}")
        qualified = expected_qualified_name(address)
        fail_unless(qualified in sql, f"{qualified} (quoted, ']' doubled) missing from:\n{sql}")
    else:
        fail_unless(queue_tables == 0, f"the queue table should be bound as a parameter in:\n{sql}")
    outside = BRACKETED.sub(" ", sql)
    for part in expected:
        if part is not None:
            fail_unless(part not in outside, f"{part!r} appears outside brackets in:\n{sql}")


def check_statement(
    statement: Statement,
    address: QueueAddress,
    checker: Callable[[Statement, list[exp.Expression], QueueAddress], None] | None = None,
) -> list[exp.Expression]:
    """Every check that applies to any statement, then the statement's own semantic checker (``checker``,
    else SQL Server's for its kind)."""
    trees = parse_tsql(statement.sql)
    check_types(trees, statement.types)
    check_values_are_parameters(
        trees, statement.sql, statement.placeholders, frozenset(statement.extra.get("literals", ()))
    )
    check_database_clock(trees, statement.sql, statement.kind in USES_TIME)
    check_hints(trees, statement.sql)
    variables = sqlglot_system_variables(trees)
    wanted = SYSTEM_VARIABLES_BY_KIND.get(statement.kind, [])
    fail_unless(variables == wanted, f"system variables {variables}, expected {wanted} in:\n{statement.sql}")
    check_identifiers(trees, statement.sql, address, statement.embeds_table)
    if statement.params is not None:
        fail_unless(
            len(statement.params) == statement.placeholders,
            f"{len(statement.params)} bound values for {statement.placeholders} parameters",
        )
    (checker or SEMANTICS.get(statement.kind, lambda *_: None))(statement, trees, address)
    return trees


# ---- semantic checkers, one per kind of statement ------------------------------------------------------
def _column_names(nodes: list[Any]) -> list[str]:
    return [node.name for node in nodes]


def check_receive(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    sql = statement.sql
    # Text: the reference's hint list, TOP(?), FIFO order and DELETE ... OUTPUT.
    fail_unless(
        re.search(r"WITH \((?=[^)]*\bUPDLOCK\b)(?=[^)]*\bREADPAST\b)(?=[^)]*\bROWLOCK\b)[^)]*\)", sql),
        f"receive lacks READPAST together with UPDLOCK and ROWLOCK:\n{sql}",
    )
    fail_unless("TOP(?)" in sql, f"receive lacks TOP(?):\n{sql}")
    fail_unless("ORDER BY [RowVersion]" in sql, f"receive lacks ORDER BY [RowVersion]:\n{sql}")
    fail_unless(re.search(r"\bDELETE FROM message OUTPUT deleted\.", sql), f"no DELETE ... OUTPUT:\n{sql}")
    fail_unless(
        "CASE WHEN deleted.[Expires] IS NULL OR deleted.[Expires] > GETUTCDATE() THEN 0 ELSE 1 END" in sql,
        f"receive lacks the database-side expired flag:\n{sql}",
    )
    # Tree: DELETE from the CTE, whose SELECT reads the queue table with exactly those hints.
    delete = trees[0]
    fail_unless(isinstance(delete.this, exp.Table) and delete.this.name == "message", "DELETE target")
    ctes = delete.find_all(exp.CTE)
    cte = next(ctes, None)
    fail_unless(cte is not None and cte.alias == "message" and next(ctes, None) is None, "one CTE 'message'")
    select = cte.this
    fail_unless(isinstance(select, exp.Select), f"the CTE is not a SELECT:\n{sql}")
    limit = select.args.get("limit")
    fail_unless(limit is not None and isinstance(limit.expression, exp.Placeholder), f"TOP is not ?:\n{sql}")
    source = select.args["from_"].this
    fail_unless(sorted(table_hints(source)) == ["READPAST", "ROWLOCK", "UPDLOCK"], f"hints:\n{sql}")
    order = select.args.get("order")
    keys = [(o.this.name, bool(o.args.get("desc"))) for o in order.expressions] if order else []
    fail_unless(keys == [("RowVersion", False)], f"receive is not ordered by RowVersion ascending:\n{sql}")
    fail_unless(
        select.args.get("where") is None, f"receive filters rows (the reference has no WHERE):\n{sql}"
    )
    returning = delete.args.get("returning")
    fail_unless(returning is not None, f"DELETE has no OUTPUT:\n{sql}")
    outputs = [e.this if isinstance(e, exp.Alias) else e for e in returning.expressions]
    columns = [c for c in outputs if isinstance(c, exp.Column)]
    fail_unless(
        all(c.table == "deleted" for c in columns), f"OUTPUT of something other than deleted.*:\n{sql}"
    )
    for needed in ("Id", "Headers", "Body", "RowVersion"):
        fail_unless(needed in _column_names(columns), f"OUTPUT lacks deleted.[{needed}]:\n{sql}")
    flags = [c for c in outputs if isinstance(c, exp.Case)]
    fail_unless(
        len(flags) == 1 and "GETUTCDATE" in function_names([flags[0]]),
        f"expired flag not on GETUTCDATE:\n{sql}",
    )


def check_peek(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    sql = statement.sql
    fail_unless(
        "WITH (READPAST, READCOMMITTEDLOCK)" in sql, f"peek lacks READPAST, READCOMMITTEDLOCK:\n{sql}"
    )
    fail_unless("max([RowVersion]) - min([RowVersion]) + 1" in sql, f"peek is not max - min + 1:\n{sql}")
    select = trees[0]
    fail_unless(not all_nodes(trees, exp.Count), f"peek counts rows (timeouts on long queues):\n{sql}")
    source = select.args["from_"].this
    fail_unless(sorted(table_hints(source)) == ["READCOMMITTEDLOCK", "READPAST"], f"peek hints:\n{sql}")
    adds = [
        add
        for add in all_nodes(trees, exp.Add)
        if isinstance(add.this, exp.Sub)
        and isinstance(add.this.this, exp.Max)
        and isinstance(add.this.expression, exp.Min)
        and add.this.this.this.name == add.this.expression.this.name == "RowVersion"
        and add.expression.this == "1"
    ]
    fail_unless(len(adds) == 1, f"peek has no max(RowVersion) - min(RowVersion) + 1:\n{sql}")
    fail_unless(isinstance(select.expressions[0], exp.Coalesce), f"an empty queue would peek NULL:\n{sql}")


def check_purge(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    sql = statement.sql
    fail_unless("WITH (READPAST)" in sql, f"purge lacks READPAST:\n{sql}")
    fail_unless("[Expires] < GETUTCDATE()" in sql, f"purge does not compare Expires to GETUTCDATE():\n{sql}")
    delete, count = trees
    in_ = delete.args["where"].this
    fail_unless(
        isinstance(in_, exp.In) and in_.this.name == "RowVersion", f"purge is not by RowVersion:\n{sql}"
    )
    select = in_.args["query"].this
    limit = select.args.get("limit")
    fail_unless(limit is not None and isinstance(limit.expression, exp.Placeholder), f"no TOP (?):\n{sql}")
    fail_unless(table_hints(select.args["from_"].this) == ["READPAST"], f"purge subquery hints:\n{sql}")
    condition = select.args["where"].this
    fail_unless(
        isinstance(condition, exp.LT)
        and condition.this.name == "Expires"
        and isinstance(condition.expression, exp.Anonymous)
        and condition.expression.name.upper() == "GETUTCDATE",
        f"purge selects something other than Expires < GETUTCDATE():\n{sql}",
    )
    fail_unless("@@ROWCOUNT" in sql and isinstance(count, exp.Select), f"purge returns no count:\n{sql}")


def _is_variable(node: exp.Expression | None, name: str) -> bool:
    """``@name`` (a local variable) or, for a name starting with '@', ``@@name`` (a system variable)."""
    if name.startswith("@"):
        return (
            isinstance(node, exp.Parameter)
            and isinstance(node.this, exp.Parameter)
            and node.this.name.upper() == name[1:].upper()
        )
    return isinstance(node, exp.Parameter) and isinstance(node.this, exp.Var) and node.this.name == name


def _is_number(node: exp.Expression | None, value: str) -> bool:
    return isinstance(node, exp.Literal) and not node.is_string and str(node.this) == value


def _condition(select: exp.Expression) -> exp.Expression | None:
    """The condition of an IF, which sqlglot reads as ``SELECT 1 WHERE <condition>``."""
    where = select.args.get("where") if isinstance(select, exp.Select) else None
    return where.this if where is not None else None


def expected_lock_resource(address: QueueAddress, current_catalog: str) -> str:
    """The reference's '[catalog].[schema].[table]_lock' (catalog: the address's, else the connection's),
    or, beyond sp_getapplock's 255 characters, 'sqlqueue_<first 8 hex of its SHA-1>_lock'."""
    named = QueueAddress(address.table, address.schema, address.catalog or current_catalog)
    full = expected_qualified_name(named) + "_lock"
    if len(full) <= APPLOCK_RESOURCE_MAX:
        return full
    return f"sqlqueue_{hashlib.sha1(full.encode('utf-8')).hexdigest()[:8]}_lock"


def check_open_transaction(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    """The creation's first batch: a transaction the batch opens itself only when none is open, sent
    without parameters.

    A transaction-owned app-lock needs an open transaction; under ODBC's implicit transactions DECLARE and
    EXEC open none, and sp_getapplock would answer -999. So: ``IF @@TRANCOUNT = 0`` the batch begins one
    and notes it; in implicit-transaction mode that BEGIN opens two levels, and only then
    (``@opened = 1 AND @@TRANCOUNT > 1``) is the extra level committed, which closes nothing but the
    nesting. A transaction the caller already had is never touched. The batch changes ``@@TRANCOUNT``, so
    it takes no parameters and ``begin_creation`` executes it as ``cursor.execute(sql)``: drivers send a
    parameterised statement as a procedure call (RPC), and one that ends with another ``@@TRANCOUNT`` than
    it started with is error 266.
    """
    sql = statement.sql
    in_text = BRACKETED.sub(" ", sql).count("?")
    in_tree = len(all_nodes(trees, exp.Placeholder))
    fail_unless(
        statement.placeholders == in_text == in_tree == 0 and not statement.params,
        f"open_transaction takes parameters ({in_text} '?', bound {statement.params}): a parameterised "
        f"call that changes @@TRANCOUNT is error 266:\n{sql}",
    )
    fail_unless(
        statement.extra.get("execute_args") == (),
        f"begin_creation executes open_transaction with {statement.extra.get('execute_args')!r} after the "
        f"statement, not as cursor.execute(sql): a parameterised call that changes @@TRANCOUNT is error 266",
    )
    parts = split_batch(sql)
    fail_unless(len(parts) == 3, f"the batch is not DECLARE; IF; IF:\n{sql}")
    fail_unless(
        [split_if(part) is not None for part in parts] == [False, True, True],
        f"the IFs are not the second and third statements:\n{sql}",
    )
    fail_unless(sqlglot_batch(sql)[1] == [1, 3, 2], f"the IFs do not run 2 and 1 statements:\n{sql}")
    declare, opens_if, begin, flag, closes_if, commit = trees
    # DECLARE @opened bit = 0
    items = [(item.this[0].name if item.this else None, item) for item in declare.expressions]
    fail_unless(
        [name for name, _ in items] == ["opened"]
        and items[0][1].args["kind"].this == exp.DataType.Type.BIT
        and _is_number(items[0][1].args.get("default"), "0"),
        f"not DECLARE @opened bit = 0:\n{sql}",
    )
    # IF @@TRANCOUNT = 0 BEGIN BEGIN TRANSACTION; SET @opened = 1; END
    opens = _condition(opens_if)
    fail_unless(
        isinstance(opens, exp.EQ)
        and _is_variable(opens.this, "@TRANCOUNT")
        and _is_number(opens.expression, "0"),
        f"the batch opens a transaction on another condition than @@TRANCOUNT = 0:\n{sql}",
    )
    fail_unless(
        _is_number(opens_if.expressions[0], "1") and len(opens_if.expressions) == 1, f"IF condition:\n{sql}"
    )
    fail_unless(
        isinstance(begin, exp.Transaction) and not any(begin.args.values()), f"not BEGIN TRANSACTION:\n{sql}"
    )
    [item] = flag.expressions
    fail_unless(
        isinstance(item.this, exp.EQ)
        and _is_variable(item.this.this, "opened")
        and _is_number(item.this.expression, "1"),
        f"the opened transaction is not noted (SET @opened = 1):\n{sql}",
    )
    # IF @opened = 1 AND @@TRANCOUNT > 1 COMMIT TRANSACTION
    closes = _condition(closes_if)
    terms = [closes.this, closes.expression] if isinstance(closes, exp.And) else []
    fail_unless(
        len(terms) == 2
        and isinstance(terms[0], exp.EQ)
        and _is_variable(terms[0].this, "opened")
        and _is_number(terms[0].expression, "1")
        and isinstance(terms[1], exp.GT)
        and _is_variable(terms[1].this, "@TRANCOUNT")
        and _is_number(terms[1].expression, "1"),
        f"the extra level is closed on another condition than @opened = 1 AND @@TRANCOUNT > 1:\n{sql}",
    )
    fail_unless(
        isinstance(commit, exp.Commit) and not any(commit.args.values()), f"not COMMIT TRANSACTION:\n{sql}"
    )
    # sqlfluff, on the exact text: the bodies belong to their IFs.
    fluff = parse_sqlfluff(sql)
    bodies = []
    for if_statement in fluff.find("if_then_statement"):
        bodies.append(
            [
                inner.get_type()
                for inner in if_statement.recursive_crawl(
                    "transaction_statement", "set_local_variable_segment", "begin_end_block"
                )
            ]
        )
    fail_unless(
        bodies
        == [
            ["begin_end_block", "transaction_statement", "set_local_variable_segment"],
            ["transaction_statement"],
        ],
        f"sqlfluff reads no BEGIN TRANSACTION; SET in the first IF, or no COMMIT in the second:\n{sql}",
    )
    fail_unless(
        sqlglot_system_variables(trees) == ["@@TRANCOUNT", "@@TRANCOUNT"], f"system variables:\n{sql}"
    )


def check_lock(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    """The creation lock: a transaction-owned exclusive app-lock on the reference's catalog-qualified name,
    taken in the transaction ``open_transaction`` made sure of (this batch opens and closes none)."""
    sql = statement.sql
    parts = split_batch(sql)
    fail_unless(len(parts) == 3, f"the lock batch is not DECLARE; EXEC; SELECT:\n{sql}")
    fail_unless(
        all(split_if(part) is None for part in parts) and sqlglot_batch(sql)[1] is None,
        f"the lock batch has an IF:\n{sql}",
    )
    fail_unless(
        not all_nodes(trees, exp.Transaction) and not all_nodes(trees, exp.Commit),
        f"the lock batch opens or closes a transaction (open_transaction's work):\n{sql}",
    )
    declare, execute, result = trees
    # DECLARE @result int
    items = [(item.this[0].name if item.this else None, item) for item in declare.expressions]
    fail_unless(
        [name for name, _ in items] == ["result"]
        and items[0][1].args["kind"].this == exp.DataType.Type.INT
        and not items[0][1].args.get("default"),
        f"not DECLARE @result int:\n{sql}",
    )
    # EXEC @result = sp_getapplock ...; SELECT @result
    fail_unless(execute.this.name.lower() == "sp_getapplock", f"not sp_getapplock:\n{sql}")
    fail_unless(_is_variable(execute.args.get("return_status"), "result"), f"the result is not kept:\n{sql}")
    arguments = {eq.this.name: eq.expression for eq in execute.expressions}
    fail_unless(
        isinstance(arguments.get("Resource"), exp.Placeholder), f"@Resource is not a parameter:\n{sql}"
    )
    for name, value in (("LockMode", "Exclusive"), ("LockOwner", "Transaction")):
        literal = arguments.get(name)
        fail_unless(
            isinstance(literal, exp.Literal) and literal.is_string and literal.this == value,
            f"@{name} is not '{value}':\n{sql}",
        )
    fail_unless(_is_number(arguments.get("LockTimeout"), "60000"), f"@LockTimeout is not 60000:\n{sql}")
    fail_unless(
        len(result.expressions) == 1 and _is_variable(result.expressions[0], "result"),
        f"the batch does not end with SELECT @result:\n{sql}",
    )
    fail_unless(not sqlglot_system_variables(trees), f"system variables in the lock batch:\n{sql}")
    resource = statement.params[0]
    wanted = expected_lock_resource(address, CURRENT_CATALOG)
    fail_unless(resource == wanted, f"lock resource {resource!r} != {wanted!r}")
    executed = statement.extra.get("execute_args")
    fail_unless(
        executed == (statement.params,),
        f"begin_creation executes the lock with {executed!r}, not its resource {statement.params!r}",
    )


def check_bound_name(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    """Catalog queries take the quoted three-part name as their first parameter."""
    fail_unless(statement.params[0] == expected_qualified_name(address), f"bound name {statement.params}")
    if statement.kind == "table_exists":
        fail_unless("OBJECT_ID(?, 'U')" in statement.sql, f"not a user-table lookup:\n{statement.sql}")
    if statement.kind == "index_exists":
        fail_unless(statement.params[1] == statement.extra["index"], f"index name {statement.params}")
    if statement.kind == "column_exists":
        fail_unless(statement.params[1] == statement.extra["column"], f"column name {statement.params}")
    if statement.kind == "index_first_columns":
        fail_unless("ic.key_ordinal = 1" in statement.sql, f"not the first key column:\n{statement.sql}")


def check_send(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    sql = statement.sql
    fail_unless("DATEADD(second, ?, GETUTCDATE())" in sql, f"Expires not computed from GETUTCDATE():\n{sql}")
    insert = trees[0]
    columns = [identifier.name for identifier in insert.this.expressions]
    recoverable = statement.extra.get("recoverable", True)
    expected = ["Id", "CorrelationId", "ReplyToAddress", "Recoverable", "Expires", "Headers", "Body"]
    if not recoverable:
        expected.remove("Recoverable")
    fail_unless(columns == expected, f"send columns {columns}")
    expires_at = columns.index("Expires")
    rows = insert.expression.expressions
    fail_unless(len(rows) == statement.extra["rows"], f"{len(rows)} VALUES rows:\n{sql}")
    for row in rows:
        values = row.expressions
        fail_unless(len(values) == len(columns), f"row width:\n{sql}")
        parameters = [i for i, name in enumerate(columns) if name not in ("Recoverable", "Expires")]
        fail_unless(all(isinstance(values[i], exp.Placeholder) for i in parameters), f"values:\n{sql}")
        if recoverable:
            fail_unless(values[3].this == "1", f"Recoverable is not 1:\n{sql}")
        # Expires = DATEADD(millisecond, ?, DATEADD(second, ?, GETUTCDATE())): NULL parameters give NULL.
        outer = values[expires_at]
        inner = outer.this if isinstance(outer, exp.DateAdd) else None
        fail_unless(
            isinstance(outer, exp.DateAdd)
            and outer.unit.name.upper() == "MILLISECOND"
            and isinstance(outer.expression, exp.Placeholder)
            and isinstance(inner, exp.DateAdd)
            and inner.unit.name.upper() == "SECOND"
            and isinstance(inner.expression, exp.Placeholder)
            and isinstance(inner.this, exp.Anonymous)
            and inner.this.name.upper() == "GETUTCDATE",
            f"Expires is not DATEADD(millisecond, ?, DATEADD(second, ?, GETUTCDATE())):\n{sql}",
        )


def check_insert_raw(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    columns = [identifier.name for identifier in trees[0].this.expressions]
    values = trees[0].expression.expressions[0].expressions
    fail_unless(
        ("Recoverable" in columns) == statement.extra.get("recoverable", True),
        f"Recoverable column where it should not be, or missing:\n{statement.sql}",
    )
    expires = values[columns.index("Expires")]
    fail_unless(isinstance(expires, exp.Null), f"a raw copy must have Expires NULL:\n{statement.sql}")


_TYPE = exp.DataType.Type
# Column, type, type parameters, nullable: the reference's queue table (section 1).
QUEUE_COLUMNS = [
    ("Id", _TYPE.UUID, [], False),
    ("CorrelationId", _TYPE.VARCHAR, ["255"], True),
    ("ReplyToAddress", _TYPE.VARCHAR, ["255"], True),
    ("Recoverable", _TYPE.BIT, [], False),
    ("Expires", _TYPE.DATETIME, [], True),
    ("Headers", _TYPE.NVARCHAR, ["MAX"], False),
    ("Body", _TYPE.VARBINARY, ["MAX"], True),
    ("RowVersion", _TYPE.BIGINT, [], False),
]


def _is_body_string(definition: exp.ColumnDef) -> bool:
    computed = [c.kind for c in definition.constraints if isinstance(c.kind, exp.ComputedColumnConstraint)]
    if definition.name != "BodyString" or len(computed) != 1 or computed[0].args.get("persisted"):
        return False
    cast = computed[0].this
    return (
        isinstance(cast, exp.Cast)
        and cast.this.name == "Body"
        and cast.to.this == _TYPE.NVARCHAR
        and [p.this.name.upper() for p in cast.to.expressions] == ["MAX"]
    )


def check_create_table(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    options: TableOptions = statement.extra["options"]
    create = trees[0]
    fail_unless(create.args.get("kind") == "TABLE", f"not CREATE TABLE:\n{statement.sql}")
    definitions = create.this.expressions
    expected = list(QUEUE_COLUMNS)
    if not options.unicode_headers:
        expected[5] = ("Headers", _TYPE.VARCHAR, ["MAX"], False)
    found = []
    for definition in definitions[: len(expected)]:
        nullable = [c.kind for c in definition.constraints if isinstance(c.kind, exp.NotNullColumnConstraint)]
        fail_unless(len(nullable) == 1, f"{definition.name}: say NULL or NOT NULL explicitly")
        found.append(
            (
                definition.name,
                definition.kind.this,
                [p.this.name.upper() for p in definition.kind.expressions],
                bool(nullable[0].args.get("allow_null")),
            )
        )
    fail_unless(found == expected, f"queue columns {found} != {expected}")
    identity = [
        c.kind
        for c in definitions[7].constraints
        if isinstance(c.kind, exp.GeneratedAsIdentityColumnConstraint)
    ]
    fail_unless(
        len(identity) == 1 and identity[0].args["start"].this == identity[0].args["increment"].this == "1",
        f"RowVersion is not IDENTITY(1,1):\n{statement.sql}",
    )
    extra = definitions[len(expected) :]
    if options.body_string:
        fail_unless(len(extra) == 1 and _is_body_string(extra[0]), f"BodyString column:\n{statement.sql}")
    else:
        fail_unless(not extra, f"unexpected columns:\n{statement.sql}")


def check_add_body_string(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    actions = trees[0].args.get("actions") or []
    fail_unless(
        len(actions) == 1 and isinstance(actions[0], exp.ColumnDef) and _is_body_string(actions[0]),
        f"not ADD [BodyString] AS CAST([Body] AS nvarchar(max)):\n{statement.sql}",
    )


def check_index(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    create, layout, name = trees[0], statement.extra["layout"], statement.extra["index"]
    index = create.this
    params = index.args["params"]
    keys = [(o.this.name, bool(o.args.get("desc"))) for o in params.args.get("columns") or []]
    include = [identifier.name for identifier in params.args.get("include") or []]
    where = params.args.get("where")
    fail_unless(index.name == name, f"index name {index.name!r} != {name!r}")
    clustered = layout == "clustered" and name == "Index_RowVersion"
    kind = "CLUSTERED INDEX" if clustered else "NONCLUSTERED INDEX"
    fail_unless(create.args.get("kind") == kind, f"{create.args.get('kind')} != {kind}:\n{statement.sql}")
    if name == "Index_RowVersion":
        fail_unless(keys == [("RowVersion", False)] and not include and where is None, statement.sql)
    else:
        fail_unless(keys == [("Expires", False)] and include == ["Id", "RowVersion"], statement.sql)
        if layout == "heap":  # the reference's filtered index (6.0.1 and later)
            fail_unless(
                isinstance(where, exp.Where)
                and isinstance(where.this, exp.Not)
                and isinstance(where.this.this, exp.Is)
                and where.this.this.this.name == "Expires"
                and isinstance(where.this.this.expression, exp.Null),
                f"Index_Expires is not filtered on Expires IS NOT NULL:\n{statement.sql}",
            )
        else:  # the seeds' unfiltered index
            fail_unless(where is None, statement.sql)


def check_fix_varchar_headers(
    statement: Statement, trees: list[exp.Expression], address: QueueAddress
) -> None:
    actions = trees[0].args.get("actions") or []
    fail_unless(
        len(actions) == 1
        and isinstance(actions[0], exp.AlterColumn)
        and actions[0].name == "Headers"
        and actions[0].args["dtype"].this == _TYPE.NVARCHAR
        and "NOT NULL" in statement.sql,
        f"the fix does not turn Headers into nvarchar(max) NOT NULL:\n{statement.sql}",
    )


def check_drop(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    drop = trees[0]
    fail_unless(drop.args.get("kind") == "TABLE" and len(drop.args["tables"]) == 1, statement.sql)


def check_count(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    fail_unless("WITH (READPAST)" in statement.sql, f"count waits on locked rows:\n{statement.sql}")


def check_browse(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    """The read-only browse (sqlqueue peek): oldest first, past locked rows, never a dirty read."""
    sql = statement.sql
    fail_unless(
        "WITH (READPAST, READCOMMITTEDLOCK)" in sql
        and "SELECT TOP (?)" in sql
        and sql.endswith("ORDER BY [RowVersion]")
        and "[Expires] IS NULL OR [Expires] > GETUTCDATE()" in sql,
        f"the browse does not read the oldest unexpired rows past locked ones:\n{sql}",
    )
    fail_unless(not any(word in sql.upper() for word in ("DELETE", "UPDATE", "UPDLOCK")), sql)


def check_oldest_headers(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    """The gauges' read of the oldest message's age: the browse's oldest unexpired row, its headers only."""
    sql = statement.sql
    fail_unless(
        sql.startswith("SELECT TOP (1) [RowVersion], [Headers] FROM ")
        and "WITH (READPAST, READCOMMITTEDLOCK)" in sql
        and sql.endswith("ORDER BY [RowVersion]")
        and "[Expires] IS NULL OR [Expires] > GETUTCDATE()" in sql
        and "[Body]" not in sql,
        f"not the oldest unexpired row's headers past locked ones:\n{sql}",
    )


_FAILED_HEADERS = "SELECT TOP (?) [RowVersion], [Id], [Headers] FROM "
_FAILED_ROWS = (
    "SELECT [Id], [CorrelationId], [ReplyToAddress], [Headers], [Body], [RowVersion], [Expires] FROM "
)


def _failed_read(sql: str, start: str, end: str, what: str) -> None:
    """An error queue's read (the failed-message pages): ``start`` ... ``end``, past locked rows, writes
    nothing, and no bodies unless ``start`` names them."""
    fail_unless(
        sql.startswith(start)
        and "WITH (READPAST, READCOMMITTEDLOCK)" in sql
        and sql.endswith(end)
        and ("[Body]" in start or "[Body]" not in sql),
        f"not {what} past locked ones:\n{sql}",
    )
    fail_unless(not any(word in sql.upper() for word in ("DELETE", "UPDATE", "UPDLOCK")), sql)


def check_failed_newest(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    """The Queues page's bounded sample of an error queue: the newest N rows' headers, past locked ones."""
    _failed_read(statement.sql, _FAILED_HEADERS, "ORDER BY [RowVersion] DESC", "the newest rows' headers")


def check_failed_page(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    """A keyset page of an error queue: N rows' headers after a RowVersion, in order, past locked ones."""
    end = "WHERE [RowVersion] > ? ORDER BY [RowVersion]"
    _failed_read(statement.sql, _FAILED_HEADERS, end, "a page of headers after a RowVersion")


def check_failed_messages(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    """The rows of one Id in an error queue, whole, oldest first, past locked ones; reads only."""
    _failed_read(statement.sql, _FAILED_ROWS, "WHERE [Id] = ? ORDER BY [RowVersion]", "the rows of one Id")


def check_take_failed_row(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    """One error-queue row, by its RowVersion, deleted and returned (nothing when another session took it)."""
    sql = statement.sql
    fail_unless(
        sql.startswith("DELETE FROM ")
        and "WITH (ROWLOCK) OUTPUT deleted.[Id], deleted.[CorrelationId], deleted.[ReplyToAddress], "
        "deleted.[Headers], deleted.[Body] WHERE [RowVersion] = ?"
        in sql
        and "TOP" not in sql,
        f"not the delete of one row by its RowVersion returning it:\n{sql}",
    )


def check_count_expired(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    fail_unless(
        "count_big(*)" in statement.sql
        and "WITH (READPAST)" in statement.sql
        and "[Expires] <= GETUTCDATE()" in statement.sql,
        f"the expired count does not count expired rows past locked ones:\n{statement.sql}",
    )


def check_queue_tables(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    """Tables of one schema (a parameter) that have all five columns a queue table is read by."""
    sql = statement.sql
    fail_unless("WHERE s.name = ?" in sql and ") = 5" in sql and statement.params == ("dbo",), sql)


def check_peek_bounds(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    fail_unless(
        "WITH (READPAST, READCOMMITTEDLOCK)" in statement.sql
        and "min([RowVersion]), max([RowVersion])" in statement.sql
        and "count" not in statement.sql.lower(),
        f"the peek bounds do not read min and max RowVersion past locked rows:\n{statement.sql}",
    )


def check_fix_clustered_rowversion(
    statement: Statement, trees: list[exp.Expression], address: QueueAddress
) -> None:
    sql = statement.sql
    fail_unless(
        sql.count("DROP INDEX") == 2
        and "CREATE NONCLUSTERED INDEX [Index_RowVersion]" in sql
        and "WHERE [Expires] IS NOT NULL" in sql
        and "CLUSTERED INDEX [Index_RowVersion]" not in sql.replace("NONCLUSTERED", ""),
        f"the migration does not rebuild both indexes as the heap layout's:\n{sql}",
    )


def check_prepare_connection(
    statement: Statement, trees: list[exp.Expression], address: QueueAddress
) -> None:
    fail_unless(statement.sql == "SET NOCOUNT ON", statement.sql)


# Column, type, type parameters, nullable: the reference's delayed table (section 8).
DELAYED_COLUMNS = [
    ("Headers", _TYPE.NVARCHAR, ["MAX"], False),
    ("Body", _TYPE.VARBINARY, ["MAX"], True),
    ("Due", _TYPE.DATETIME, [], False),
    ("RowVersion", _TYPE.BIGINT, [], False),
]


def check_create_delayed_table(
    statement: Statement, trees: list[exp.Expression], address: QueueAddress
) -> None:
    create = trees[0]
    fail_unless(create.args.get("kind") == "TABLE", f"not CREATE TABLE:\n{statement.sql}")
    found = []
    for definition in create.this.expressions:
        nullable = [c.kind for c in definition.constraints if isinstance(c.kind, exp.NotNullColumnConstraint)]
        fail_unless(len(nullable) == 1, f"{definition.name}: say NULL or NOT NULL explicitly")
        found.append(
            (
                definition.name,
                definition.kind.this,
                [p.this.name.upper() for p in definition.kind.expressions],
                bool(nullable[0].args.get("allow_null")),
            )
        )
    fail_unless(found == DELAYED_COLUMNS, f"delayed columns {found} != {DELAYED_COLUMNS}")
    identity = [
        c.kind
        for c in create.this.expressions[3].constraints
        if isinstance(c.kind, exp.GeneratedAsIdentityColumnConstraint)
    ]
    fail_unless(len(identity) == 1, f"RowVersion is not IDENTITY(1,1):\n{statement.sql}")


def check_delayed_index(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    create = trees[0]
    params = create.this.args["params"]
    keys = [(o.this.name, bool(o.args.get("desc"))) for o in params.args.get("columns") or []]
    fail_unless(
        create.this.name == "Index_Due"
        and create.args.get("kind") == "NONCLUSTERED INDEX"
        and keys == [("Due", False)]
        and not params.args.get("include")
        and params.args.get("where") is None,
        f"not NONCLUSTERED INDEX [Index_Due] on ([Due] ASC):\n{statement.sql}",
    )


def check_store_delayed(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    sql = statement.sql
    insert = trees[0]
    columns = [identifier.name for identifier in insert.this.expressions]
    fail_unless(columns == ["Headers", "Body", "Due"], f"store columns {columns}:\n{sql}")
    [row] = insert.expression.expressions
    headers, body, due = row.expressions
    fail_unless(isinstance(headers, exp.Placeholder) and isinstance(body, exp.Placeholder), sql)
    # Due = COALESCE(CAST(? AS datetime2), DATEADD(millisecond, ?, DATEADD(second, ?, GETUTCDATE())))
    fail_unless(isinstance(due, exp.Coalesce) and len(due.expressions) == 1, f"Due is not COALESCE:\n{sql}")
    at, computed = due.this, due.expressions[0]
    inner = computed.this if isinstance(computed, exp.DateAdd) else None
    fail_unless(
        isinstance(at, exp.Cast)
        and isinstance(at.this, exp.Placeholder)
        and at.to.this == _TYPE.DATETIME2
        and isinstance(computed, exp.DateAdd)
        and computed.unit.name.upper() == "MILLISECOND"
        and isinstance(computed.expression, exp.Placeholder)
        and isinstance(inner, exp.DateAdd)
        and inner.unit.name.upper() == "SECOND"
        and isinstance(inner.expression, exp.Placeholder)
        and isinstance(inner.this, exp.Anonymous)
        and inner.this.name.upper() == "GETUTCDATE",
        f"Due is not the given time or GETUTCDATE() plus the delay:\n{sql}",
    )


def check_select_due_delayed(
    statement: Statement, trees: list[exp.Expression], address: QueueAddress
) -> None:
    """The reference mover's pick (section 8): TOP(?) rows with the receive's hints, Due <= GETUTCDATE(),
    oldest Due first; only RowVersion and Headers leave the server (the destination is in a header)."""
    sql = statement.sql
    select = trees[0]
    limit = select.args.get("limit")
    fail_unless(limit is not None and isinstance(limit.expression, exp.Placeholder), f"TOP is not ?:\n{sql}")
    source = select.args["from_"].this
    fail_unless(sorted(table_hints(source)) == ["READPAST", "ROWLOCK", "UPDLOCK"], f"hints:\n{sql}")
    where = select.args.get("where")
    condition = where.this if where is not None else None
    fail_unless(
        isinstance(condition, exp.LTE)
        and condition.this.name == "Due"
        and isinstance(condition.expression, exp.Anonymous)
        and condition.expression.name.upper() == "GETUTCDATE",
        f"the move takes rows other than Due <= GETUTCDATE():\n{sql}",
    )
    fail_unless(_order(select) == [("Due", False)], f"the move is not ordered by Due ascending:\n{sql}")
    columns = [(c.table, c.name) for c in select.expressions]
    fail_unless(columns == [("", "RowVersion"), ("", "Headers")], f"not RowVersion, Headers:\n{sql}")


def _row_versions_in(statement: Statement, where: exp.Expression | None) -> None:
    condition = where.this if where is not None else None
    fail_unless(
        isinstance(condition, exp.In)
        and condition.this.name == "RowVersion"
        and len(condition.expressions) == statement.placeholders
        and all(isinstance(value, exp.Placeholder) for value in condition.expressions),
        f"the rows are not picked by [RowVersion] IN (?, ...):\n{statement.sql}",
    )


def check_move_delayed_rows(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    """The reference's move (section 8): DELETE ... OUTPUT NEWID(), NULL, NULL, 1, NULL, deleted.Headers,
    deleted.Body INTO the queue, here the row's destination, by the RowVersions the pick returned."""
    sql = statement.sql
    delete = trees[0]
    fail_unless(
        isinstance(delete.this, exp.Table) and delete.this.name == address.table, f"DELETE target:\n{sql}"
    )
    _row_versions_in(statement, delete.args.get("where"))
    returning = delete.args.get("returning")
    outputs = [node.sql(dialect="tsql") for node in returning.expressions] if returning is not None else []
    recoverable = ["1"] if statement.extra["recoverable"] else []
    wanted = ["NEWID()", "NULL", "NULL", *recoverable, "NULL", "deleted.[Headers]", "deleted.[Body]"]
    fail_unless(outputs == wanted, f"OUTPUT {outputs} is not {wanted}:\n{sql}")
    columns = ["Id", "CorrelationId", "ReplyToAddress", *(["Recoverable"] if recoverable else []), "Expires"]
    into = f" INTO {expected_qualified_name(MOVE_DESTINATION)} ({', '.join(bracket(c) for c in columns)}, "
    fail_unless(into + "[Headers], [Body]) WHERE " in sql, f"not INTO the destination's columns:\n{sql}")


def check_select_delayed_rows(
    statement: Statement, trees: list[exp.Expression], address: QueueAddress
) -> None:
    select = trees[0]
    columns = [c.name for c in select.expressions]
    fail_unless(columns == ["Headers", "Body", "RowVersion"], f"columns {columns}:\n{statement.sql}")
    _row_versions_in(statement, select.args.get("where"))


def check_delete_delayed_rows(
    statement: Statement, trees: list[exp.Expression], address: QueueAddress
) -> None:
    fail_unless(trees[0].args.get("returning") is None, f"the DELETE returns rows:\n{statement.sql}")
    _row_versions_in(statement, trees[0].args.get("where"))


def check_next_due_delayed(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    select = trees[0]
    first, second = select.expressions
    fail_unless(
        isinstance(first, exp.Anonymous)
        and first.name.upper() == "GETUTCDATE"
        and isinstance(second, exp.Min)
        and second.this.name == "Due"
        and table_hints(select.args["from_"].this) == ["READPAST"],
        f"not SELECT GETUTCDATE(), min([Due]) past locked rows:\n{statement.sql}",
    )


def check_count_delayed(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    fail_unless(
        "count_big(*)" in statement.sql and "WITH (READPAST)" in statement.sql, f"count:\n{statement.sql}"
    )


# Column, type, type parameters, nullable: the queue's columns (Recoverable nullable: later NServiceBus
# tables have none), the row's RowVersion in the error queue, and when it was archived (GETUTCDATE()).
ARCHIVE_COLUMNS = [
    ("Id", _TYPE.UUID, [], False),
    ("CorrelationId", _TYPE.VARCHAR, ["255"], True),
    ("ReplyToAddress", _TYPE.VARCHAR, ["255"], True),
    ("Recoverable", _TYPE.BIT, [], True),
    ("Expires", _TYPE.DATETIME, [], True),
    ("Headers", _TYPE.NVARCHAR, ["MAX"], False),
    ("Body", _TYPE.VARBINARY, ["MAX"], True),
    ("ErrorRowVersion", _TYPE.BIGINT, [], False),
    ("ArchivedAt", _TYPE.DATETIME, [], False),
]
ARCHIVE_MOVED = ["Id", "CorrelationId", "ReplyToAddress", "Recoverable", "Expires", "Headers", "Body"]


def check_create_archive_table(
    statement: Statement, trees: list[exp.Expression], address: QueueAddress
) -> None:
    create = trees[0]
    fail_unless(create.args.get("kind") == "TABLE", f"not CREATE TABLE:\n{statement.sql}")
    found = []
    for definition in create.this.expressions:
        nullable = [c.kind for c in definition.constraints if isinstance(c.kind, exp.NotNullColumnConstraint)]
        fail_unless(len(nullable) == 1, f"{definition.name}: say NULL or NOT NULL explicitly")
        found.append(
            (
                definition.name,
                definition.kind.this,
                [
                    p.this.name.upper() if isinstance(p.this, exp.Var) else str(p.this.this)
                    for p in definition.kind.expressions
                ],
                bool(nullable[0].args.get("allow_null")),
            )
        )
    fail_unless(found == ARCHIVE_COLUMNS, f"archive columns {found} != {ARCHIVE_COLUMNS}")
    fail_unless(
        "[ArchivedAt] datetime NOT NULL DEFAULT GETUTCDATE()" in statement.sql
        and "IDENTITY" not in statement.sql,
        f"ArchivedAt is not stamped by GETUTCDATE(), or a column is an IDENTITY:\n{statement.sql}",
    )


def check_archive_index(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    create = trees[0]
    params = create.this.args["params"]
    keys = [(o.this.name, bool(o.args.get("desc"))) for o in params.args.get("columns") or []]
    fail_unless(
        create.this.name == "Index_ArchivedAt"
        and create.args.get("kind") == "NONCLUSTERED INDEX"
        and keys == [("ArchivedAt", False)],
        f"not NONCLUSTERED INDEX [Index_ArchivedAt] on ([ArchivedAt] ASC):\n{statement.sql}",
    )


def check_archive_failed_row(
    statement: Statement, trees: list[exp.Expression], address: QueueAddress
) -> None:
    """The delayed mover's form: DELETE ... OUTPUT deleted.<every column> INTO the archive, one row by its
    RowVersion, then its count; nothing computed on the way (Babelfish takes no expression over deleted)."""
    sql = statement.sql
    delete, count = trees
    fail_unless(
        isinstance(delete.this, exp.Table) and delete.this.name == address.table, f"DELETE target:\n{sql}"
    )
    condition = delete.args["where"].this
    fail_unless(
        isinstance(condition, exp.EQ)
        and condition.this.name == "RowVersion"
        and isinstance(condition.expression, exp.Placeholder),
        f"the row is not picked by [RowVersion] = ?:\n{sql}",
    )
    returning = delete.args.get("returning")
    outputs = [node.sql(dialect="tsql") for node in returning.expressions] if returning is not None else []
    wanted = [
        "NULL" if name == "Recoverable" and not statement.extra["recoverable"] else f"deleted.[{name}]"
        for name in [*ARCHIVE_MOVED, "RowVersion"]
    ]
    fail_unless(outputs == wanted, f"OUTPUT {outputs} is not {wanted}:\n{sql}")
    columns = ", ".join(bracket(c) for c in [*ARCHIVE_MOVED, "ErrorRowVersion"])
    into = f" INTO {expected_qualified_name(ARCHIVE_DESTINATION)} ({columns}) WHERE "
    fail_unless(into in sql, f"not INTO the archive's columns:\n{sql}")
    fail_unless(sql.endswith("; SELECT @@ROWCOUNT") and isinstance(count, exp.Select), f"no count:\n{sql}")


def check_restore_archived(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    """The archive's move reversed: DELETE from the archive by [Id] = ? OUTPUT deleted.<the queue's columns>
    INTO the error queue (Recoverable only where it has the column), then its count; nothing computed on the
    way, and no RowVersion written (the error queue's IDENTITY gives a new one)."""
    sql = statement.sql
    delete, count = trees
    fail_unless(
        isinstance(delete.this, exp.Table) and delete.this.name == address.table,
        f"DELETE target is not the archive:\n{sql}",
    )
    condition = delete.args["where"].this
    fail_unless(
        isinstance(condition, exp.EQ)
        and condition.this.name == "Id"
        and isinstance(condition.expression, exp.Placeholder),
        f"the rows are not picked by [Id] = ?:\n{sql}",
    )
    moved = [c for c in ARCHIVE_MOVED if statement.extra["recoverable"] or c != "Recoverable"]
    returning = delete.args.get("returning")
    outputs = [node.sql(dialect="tsql") for node in returning.expressions] if returning is not None else []
    fail_unless(outputs == [f"deleted.[{c}]" for c in moved], f"OUTPUT {outputs} is not {moved}:\n{sql}")
    columns = ", ".join(bracket(c) for c in moved)
    into = f" INTO {expected_qualified_name(RESTORE_DESTINATION)} ({columns}) WHERE "
    fail_unless(into in sql and "RowVersion" not in sql, f"not INTO the error queue's columns:\n{sql}")
    fail_unless(sql.endswith("; SELECT @@ROWCOUNT") and isinstance(count, exp.Select), f"no count:\n{sql}")


def check_browse_archive(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    """One page of the archive, newest archived first in a total order (so pages do not overlap), past rows a
    restore or purge holds, the Body's size instead of the Body; read-only."""
    sql = statement.sql
    fail_unless(
        "DATALENGTH([Body])" in sql
        and sql.count("[Body]") == 1
        and "WITH (READPAST, READCOMMITTEDLOCK)" in sql
        and sql.endswith(
            "ORDER BY [ArchivedAt] DESC, [ErrorRowVersion] DESC, [Id] DESC "
            "OFFSET ? ROWS FETCH NEXT ? ROWS ONLY"
        ),
        f"not a page of the archive newest first:\n{sql}",
    )
    fail_unless(not any(word in sql.upper() for word in ("DELETE", "UPDATE", "UPDLOCK")), sql)
    fail_unless(statement.params == (100, 51), f"parameters {statement.params} are not (offset, N)")


def check_purge_archive(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    """Rows archived before GETUTCDATE() minus ? seconds, at most TOP (?) of them oldest first (the
    subquery), and never a younger row (the outer condition), then the count."""
    sql = statement.sql
    older = "[ArchivedAt] < DATEADD(second, ?, GETUTCDATE())"
    fail_unless(sql.count(older) == 2, f"the age condition is not on both the DELETE and its pick:\n{sql}")
    delete, count = trees
    both = delete.args["where"].this
    fail_unless(isinstance(both, exp.And), f"the DELETE is not age AND pick:\n{sql}")
    in_ = both.expression
    fail_unless(
        isinstance(in_, exp.In) and in_.this.name == "ErrorRowVersion", f"not by ErrorRowVersion:\n{sql}"
    )
    select = in_.args["query"].this
    limit = select.args.get("limit")
    fail_unless(limit is not None and isinstance(limit.expression, exp.Placeholder), f"no TOP (?):\n{sql}")
    fail_unless(_order(select) == [("ArchivedAt", False)], f"the pick is not oldest first:\n{sql}")
    fail_unless("@@ROWCOUNT" in sql and isinstance(count, exp.Select), f"the purge returns no count:\n{sql}")
    fail_unless(
        statement.params == (-30 * 86400, 10_000, -30 * 86400),
        f"parameters {statement.params} are not (-seconds, N, -seconds)",
    )


def check_count_archive(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    fail_unless(
        statement.sql == f"SELECT count_big(*) FROM {expected_qualified_name(address)}",
        f"count:\n{statement.sql}",
    )


def check_mover_lock(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    """The mover election: a session-owned exclusive app lock, tried without waiting, and its release."""
    sql = statement.sql
    locking = statement.kind == "try_lock_delayed_mover"
    execute = trees[1] if locking else trees[0]
    procedure = "sp_getapplock" if locking else "sp_releaseapplock"
    fail_unless(execute.this.name.lower() == procedure, f"not {procedure}:\n{sql}")
    arguments = {eq.this.name: eq.expression for eq in execute.expressions}
    fail_unless(
        isinstance(arguments.get("Resource"), exp.Placeholder), f"@Resource is not a parameter:\n{sql}"
    )
    expected = {"LockOwner": "Session"}
    if locking:
        expected["LockMode"] = "Exclusive"
        fail_unless(execute.args.get("return_status") is not None, f"the result is not kept:\n{sql}")
        timeout = arguments.get("LockTimeout")
        fail_unless(
            isinstance(timeout, exp.Literal) and timeout.this == "0",
            f"the election waits for the lock:\n{sql}",
        )
    for name, value in expected.items():
        literal = arguments.get(name)
        fail_unless(
            isinstance(literal, exp.Literal) and literal.is_string and literal.this == value,
            f"@{name} is not '{value}':\n{sql}",
        )
    resource = statement.params[0]
    wanted = expected_qualified_name(address) + "_mover"
    if len(wanted) <= APPLOCK_RESOURCE_MAX:
        fail_unless(resource == wanted, f"mover lock resource {resource!r} != {wanted!r}")
    else:
        fail_unless(re.fullmatch(r"sqlqueue_[0-9a-f]{8}_mover", resource), f"long resource {resource!r}")


def check_current_catalog(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    fail_unless(statement.sql == "SELECT DB_NAME()", f"not the connection's database:\n{statement.sql}")


def check_server_variant(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    """SERVERPROPERTY('Babelfish') is 1 on Babelfish and NULL on SQL Server; cast for the drivers."""
    fail_unless(
        statement.sql == "SELECT CAST(SERVERPROPERTY('Babelfish') AS int)" and statement.params == (),
        f"not the Babelfish probe:\n{statement.sql}",
    )


# The depth history of a schema's queues: one sample a queue (its table name) a minute (since the epoch).
DEPTH_SAMPLE_COLUMNS = [
    ("QueueName", "NVARCHAR(128)", False),
    ("SampledMinute", "BIGINT", False),
    ("Messages", "BIGINT", False),
    ("MessagesExact", "BIT", False),
    ("Failed", "BIGINT", True),
]


def check_create_depth_samples_table(
    statement: Statement, trees: list[exp.Expression], address: QueueAddress
) -> None:
    """Five columns, each NULL or NOT NULL said, keyed by (QueueName, SampledMinute): the key is what keeps
    the history to one sample a queue a minute."""
    sql = statement.sql
    found = []
    for definition in all_nodes(trees, exp.ColumnDef):
        nullable = [c.kind for c in definition.constraints if isinstance(c.kind, exp.NotNullColumnConstraint)]
        fail_unless(len(nullable) == 1, f"{definition.name}: say NULL or NOT NULL explicitly")
        found.append(
            (
                definition.name,
                definition.args["kind"].sql(dialect="tsql").upper(),
                bool(nullable[0].args.get("allow_null")),
            )
        )
    fail_unless(found == DEPTH_SAMPLE_COLUMNS, f"depth sample columns {found} != {DEPTH_SAMPLE_COLUMNS}")
    fail_unless(
        sql.endswith("    PRIMARY KEY ([QueueName], [SampledMinute])\n)") and "IDENTITY" not in sql,
        f"not keyed by (QueueName, SampledMinute):\n{sql}",
    )


def check_record_depth_sample(
    statement: Statement, trees: list[exp.Expression], address: QueueAddress
) -> None:
    """INSERT of the bound sample unless its key holds a row, that key range read under (UPDLOCK, HOLDLOCK)
    so that concurrent writers of one key serialise instead of both inserting; then the count."""
    sql = statement.sql
    insert, _count = trees
    qualified = expected_qualified_name(address)
    fail_unless(
        sql.startswith(
            f"INSERT INTO {qualified} ([QueueName], [SampledMinute], [Messages], [MessagesExact], [Failed]) "
            "SELECT ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM "
        ),
        f"not an INSERT ... SELECT of the five bound values:\n{sql}",
    )
    [exists] = all_nodes([insert], exp.Exists)
    probe = exists.this
    source = probe.args["from_"].this
    fail_unless(_qualified(source) == qualified, f"NOT EXISTS reads another table:\n{sql}")
    fail_unless(table_hints(source) == ["UPDLOCK", "HOLDLOCK"], f"hints {table_hints(source)}:\n{sql}")
    fail_unless(
        _where_equals(probe.args.get("where")) == ["QueueName", "SampledMinute"], f"not by key:\n{sql}"
    )
    fail_unless(sql.endswith("; SELECT @@ROWCOUNT"), f"the count is not selected:\n{sql}")
    key = DEPTH_SAMPLE[:2]
    fail_unless(statement.params == (*DEPTH_SAMPLE, *key), f"bound values {statement.params}")


def check_purge_depth_samples(
    statement: Statement, trees: list[exp.Expression], address: QueueAddress
) -> None:
    """The samples before a bound minute, then the count."""
    fail_unless(
        statement.sql
        == f"DELETE FROM {expected_qualified_name(address)} WHERE [SampledMinute] < ?; SELECT @@ROWCOUNT",
        f"purge:\n{statement.sql}",
    )


def check_read_depth_samples(
    statement: Statement, trees: list[exp.Expression], address: QueueAddress
) -> None:
    """Every column of the samples from a bound minute on, by queue then minute: a SELECT alone."""
    sql = statement.sql
    [select] = trees
    fail_unless(
        [c.name for c in select.expressions]
        == ["QueueName", "SampledMinute", "Messages", "MessagesExact", "Failed"],
        f"columns:\n{sql}",
    )
    fail_unless(_qualified(select.args["from_"].this) == expected_qualified_name(address), f"table:\n{sql}")
    fail_unless(_order(select) == [("QueueName", False), ("SampledMinute", False)], f"order:\n{sql}")
    fail_unless("WHERE [SampledMinute] >= ?" in sql, f"not from a bound minute:\n{sql}")


# The subscription table (native publish/subscribe), as the reference's SQL Server transport creates it.
SUBSCRIPTION_COLUMNS = [
    ("QueueAddress", "NVARCHAR(200)"),
    ("Endpoint", "NVARCHAR(200)"),
    ("Topic", "NVARCHAR(200)"),
]


def check_create_subscription_table(
    statement: Statement, trees: list[exp.Expression], address: QueueAddress
) -> None:
    """The reference's three nvarchar(200) NOT NULL columns and its clustered primary key (Endpoint, Topic)
    (a primary key is clustered by default where the table has no clustered index)."""
    sql = statement.sql
    definitions = all_nodes(trees, exp.ColumnDef)
    found = [(d.name, d.args["kind"].sql(dialect="tsql").upper()) for d in definitions]
    fail_unless(found == SUBSCRIPTION_COLUMNS, f"subscription columns {found} != {SUBSCRIPTION_COLUMNS}")
    for definition in definitions:
        fail_unless(
            any(isinstance(c.kind, exp.NotNullColumnConstraint) for c in definition.constraints),
            f"{definition.name} is nullable:\n{sql}",
        )
    fail_unless(
        sql.endswith("    PRIMARY KEY ([Endpoint], [Topic])\n)") and "NONCLUSTERED" not in sql,
        f"not the clustered primary key (Endpoint, Topic):\n{sql}",
    )


def _where_equals(node: exp.Expression | None) -> list[str]:
    """The columns a WHERE compares with ``?``, in order (``a = ? AND b = ?``)."""
    if node is None:
        return []
    found = []
    for equals in node.find_all(exp.EQ):
        if isinstance(equals.this, exp.Column) and isinstance(equals.expression, exp.Placeholder):
            found.append(equals.this.name)
    return found


def check_subscribe(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    """The reference's upsert: MERGE WITH (HOLDLOCK, TABLOCK) on (Endpoint, Topic), the queue updated only
    where it changed, else inserted; the values bound as endpoint, topic, queue address."""
    sql = statement.sql
    [merge] = trees
    fail_unless(isinstance(merge, exp.Merge), f"not a MERGE:\n{sql}")
    fail_unless(
        table_hints(merge.this) == ["HOLDLOCK", "TABLOCK"], f"hints {table_hints(merge.this)}:\n{sql}"
    )
    qualified = expected_qualified_name(address)
    fail_unless(
        sql.startswith(
            f"MERGE {qualified} WITH (HOLDLOCK, TABLOCK) AS target USING (SELECT ? AS [Endpoint], "
            "? AS [Topic], ? AS [QueueAddress]) AS source ON target.[Endpoint] = source.[Endpoint] AND "
            "target.[Topic] = source.[Topic] "
        ),
        f"not the reference's MERGE on (Endpoint, Topic):\n{sql}",
    )
    fail_unless(
        "WHEN MATCHED AND target.[QueueAddress] <> source.[QueueAddress] THEN UPDATE SET [QueueAddress] = "
        "source.[QueueAddress] WHEN NOT MATCHED THEN INSERT ([QueueAddress], [Topic], [Endpoint]) VALUES "
        "(source.[QueueAddress], source.[Topic], source.[Endpoint]);" in sql,
        f"not the reference's update of a changed queue and insert:\n{sql}",
    )
    fail_unless(statement.params == SUBSCRIPTION, f"bound values {statement.params} != {SUBSCRIPTION}")


def check_unsubscribe(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    """DELETE of the (Endpoint, Topic) row, then its count."""
    sql = statement.sql
    delete, _count = trees
    fail_unless(_where_equals(delete.args.get("where")) == ["Endpoint", "Topic"], f"not by key:\n{sql}")
    fail_unless(sql.endswith("; SELECT @@ROWCOUNT"), f"the count is not selected:\n{sql}")
    fail_unless(statement.params == SUBSCRIPTION[:2], f"bound values {statement.params}")


def check_select_subscribers(
    statement: Statement, trees: list[exp.Expression], address: QueueAddress
) -> None:
    """The reference's lookup: SELECT DISTINCT QueueAddress WHERE Topic IN (one ? per topic)."""
    sql = statement.sql
    [select] = trees
    fail_unless(select.args.get("distinct") is not None, f"not DISTINCT:\n{sql}")
    fail_unless(
        [c.name for c in select.expressions] == ["QueueAddress"], f"selects more than the queue:\n{sql}"
    )
    [topics] = all_nodes(trees, exp.In)
    fail_unless(
        topics.this.name == "Topic"
        and len(topics.expressions) == statement.extra["topics"]
        and all(isinstance(value, exp.Placeholder) for value in topics.expressions),
        f"not Topic IN (?, ...):\n{sql}",
    )


def check_select_subscriptions(
    statement: Statement, trees: list[exp.Expression], address: QueueAddress
) -> None:
    """Every column of the rows (of a topic, an endpoint), ordered by Topic then Endpoint."""
    sql = statement.sql
    [select] = trees
    fail_unless(
        [c.name for c in select.expressions] == ["QueueAddress", "Endpoint", "Topic"], f"columns:\n{sql}"
    )
    fail_unless(_where_equals(select.args.get("where")) == statement.extra["by"], f"filter:\n{sql}")
    fail_unless(_order(select) == [("Topic", False), ("Endpoint", False)], f"order:\n{sql}")
    limit = select.args.get("limit")
    if statement.extra["limited"]:
        fail_unless(
            sql.startswith("SELECT TOP (?) ")
            and limit is not None
            and isinstance(limit.expression, exp.Placeholder),
            f"not the first TOP (?) rows:\n{sql}",
        )
        fail_unless(statement.params[0] == 50, f"the limit is not the first parameter: {statement.params}")
    else:
        fail_unless(limit is None, f"a limit where none was asked for:\n{sql}")


USES_TIME = {
    "send",
    "receive_batch",
    "count_exact",
    "browse",
    "oldest_headers",
    "count_expired",
    "purge_expired_batch",
    "store_delayed",
    "select_due_delayed",
    "next_due_delayed",
    "purge_archive_batch",
}
SEMANTICS: dict[str, Callable[[Statement, list[exp.Expression], QueueAddress], None]] = {
    "create_table": check_create_table,
    "index": check_index,
    "add_body_string": check_add_body_string,
    "drop_table": check_drop,
    "open_transaction": check_open_transaction,
    "lock_for_create": check_lock,
    "table_exists": check_bound_name,
    "index_exists": check_bound_name,
    "column_exists": check_bound_name,
    "index_first_columns": check_bound_name,
    "headers_column_type": check_bound_name,
    "send": check_send,
    "insert_raw": check_insert_raw,
    "receive_batch": check_receive,
    "peek_estimate": check_peek,
    "peek_bounds": check_peek_bounds,
    "count_exact": check_count,
    "browse": check_browse,
    "oldest_headers": check_oldest_headers,
    "failed_newest": check_failed_newest,
    "failed_page": check_failed_page,
    "failed_messages": check_failed_messages,
    "take_failed_row": check_take_failed_row,
    "count_expired": check_count_expired,
    "queue_tables": check_queue_tables,
    "purge_expired_batch": check_purge,
    "fix_varchar_headers": check_fix_varchar_headers,
    "fix_clustered_rowversion": check_fix_clustered_rowversion,
    "prepare_connection": check_prepare_connection,
    "current_catalog": check_current_catalog,
    "server_variant": check_server_variant,
    "create_delayed_table": check_create_delayed_table,
    "delayed_index": check_delayed_index,
    "store_delayed": check_store_delayed,
    "select_due_delayed": check_select_due_delayed,
    "move_delayed_rows": check_move_delayed_rows,
    "select_delayed_rows": check_select_delayed_rows,
    "delete_delayed_rows": check_delete_delayed_rows,
    "next_due_delayed": check_next_due_delayed,
    "count_delayed": check_count_delayed,
    "try_lock_delayed_mover": check_mover_lock,
    "unlock_delayed_mover": check_mover_lock,
    "create_archive_table": check_create_archive_table,
    "archive_index": check_archive_index,
    "archive_failed_row": check_archive_failed_row,
    "restore_archived": check_restore_archived,
    "browse_archive": check_browse_archive,
    "purge_archive_batch": check_purge_archive,
    "count_archive": check_count_archive,
    "create_depth_samples_table": check_create_depth_samples_table,
    "record_depth_sample": check_record_depth_sample,
    "purge_depth_samples": check_purge_depth_samples,
    "read_depth_samples": check_read_depth_samples,
    "create_subscription_table": check_create_subscription_table,
    "subscribe": check_subscribe,
    "unsubscribe": check_unsubscribe,
    "select_subscribers": check_select_subscribers,
    "select_subscriptions": check_select_subscriptions,
}


# ---- semantic checkers of a variant's own statements ---------------------------------------------------
# Babelfish (dialects/sqlserver.py, BabelfishDialect) refuses DML through a CTE and expressions over deleted
# columns in OUTPUT; it replaces those statements with forms that are valid T-SQL too. Reviewed against the
# reference's receive (section 2) and mover (section 8): the same hints, TOP(?), order and database clock.
BABELFISH_RECEIVE_OUTPUT = [
    ("deleted", "Id"),
    ("deleted", "CorrelationId"),
    ("deleted", "ReplyToAddress"),
    ("GETUTCDATE()", "Now"),  # position 4: the expired flag is Expires <= Now, both the server's values
    ("deleted", "Headers"),
    ("deleted", "Body"),
    ("deleted", "RowVersion"),
    ("deleted", "Expires"),
]


def _output(delete: exp.Delete) -> list[tuple[str, str]]:
    returning = delete.args.get("returning")
    found = []
    for node in returning.expressions if returning is not None else []:
        if isinstance(node, exp.Column):
            found.append((node.table, node.name))
        elif (
            isinstance(node, exp.Alias) and isinstance(node.this, exp.Anonymous) and not node.this.expressions
        ):
            found.append((f"{node.this.name.upper()}()", node.alias))
        else:
            found.append((type(node).__name__, node.sql(dialect="tsql")))
    return found


def _rows_picked_by_row_version(
    statement: Statement, trees: list[exp.Expression], address: QueueAddress
) -> exp.Select:
    """``DELETE FROM <queue> ... WHERE [RowVersion] IN (SELECT TOP(?) [RowVersion] FROM <queue>
    WITH (UPDLOCK, READPAST, ROWLOCK) ...)``: the subquery that picks the rows, checked up to its order."""
    sql = statement.sql
    [delete] = trees
    qualified = expected_qualified_name(address)
    fail_unless(
        sql.startswith(f"DELETE FROM {qualified} OUTPUT deleted."), f"not DELETE FROM <queue> OUTPUT:\n{sql}"
    )
    fail_unless(isinstance(delete, exp.Delete) and not delete.args.get("with_"), f"a CTE:\n{sql}")
    where = delete.args.get("where")
    picked = where.this if where is not None else None
    fail_unless(
        isinstance(picked, exp.In)
        and isinstance(picked.this, exp.Column)
        and picked.this.name == "RowVersion"
        and not picked.this.table
        and isinstance(picked.args.get("query"), exp.Subquery),
        f"the rows are not picked by [RowVersion] IN (SELECT ...):\n{sql}",
    )
    select = picked.args["query"].this
    fail_unless(isinstance(select, exp.Select), f"the pick is not a SELECT:\n{sql}")
    fail_unless(
        [c.name for c in select.expressions] == ["RowVersion"],
        f"the pick selects more than RowVersion:\n{sql}",
    )
    limit = select.args.get("limit")
    fail_unless(limit is not None and isinstance(limit.expression, exp.Placeholder), f"TOP is not ?:\n{sql}")
    fail_unless("TOP(?)" in sql, f"the pick lacks TOP(?):\n{sql}")
    source = select.args["from_"].this
    fail_unless(
        _qualified(source) == qualified and not select.args.get("joins"),
        f"the pick reads another table:\n{sql}",
    )
    fail_unless(table_hints(source) == ["UPDLOCK", "READPAST", "ROWLOCK"], f"hints:\n{sql}")
    fail_unless(table_hints(delete.this) == [], f"hints on the DELETE target:\n{sql}")
    return select


def _qualified(table: exp.Table) -> str:
    return ".".join(
        bracket(part.name) for part in (table.args.get(k) for k in ("catalog", "db", "this")) if part
    )


def _order(select: exp.Select) -> list[tuple[str, bool]]:
    order = select.args.get("order")
    return [(o.this.name, bool(o.args.get("desc"))) for o in order.expressions] if order else []


def check_babelfish_receive(statement: Statement, trees: list[exp.Expression], address: QueueAddress) -> None:
    sql = statement.sql
    select = _rows_picked_by_row_version(statement, trees, address)
    fail_unless(_order(select) == [("RowVersion", False)], f"receive is not ordered by RowVersion:\n{sql}")
    fail_unless(
        select.args.get("where") is None, f"receive filters rows (the reference has no WHERE):\n{sql}"
    )
    fail_unless(
        _output(trees[0]) == BABELFISH_RECEIVE_OUTPUT,
        f"OUTPUT {_output(trees[0])} != {BABELFISH_RECEIVE_OUTPUT}:\n{sql}",
    )


def check_babelfish_table_exists(
    statement: Statement, trees: list[exp.Expression], address: QueueAddress
) -> None:
    """A user table of that schema and name, read from the catalog views of the address's catalog."""
    sql = statement.sql
    prefix = f"{bracket(address.catalog)}." if address.catalog else ""
    fail_unless(
        sql == f"SELECT t.object_id FROM {prefix}sys.tables t JOIN {prefix}sys.schemas s "
        "ON s.schema_id = t.schema_id WHERE s.name = ? AND t.name = ?",
        f"not a lookup of sys.tables by schema and name:\n{sql}",
    )
    fail_unless(statement.params == (address.schema, address.table), f"bound names {statement.params}")


def like_prefix(name: str) -> str:
    """A LIKE pattern for names starting with ``name``: '[', '_' and '%' matched literally."""
    return "".join(f"[{char}]" if char in "[_%" else char for char in name) + "%"


def check_babelfish_index_exists(
    statement: Statement, trees: list[exp.Expression], address: QueueAddress
) -> None:
    """Babelfish stores index names rewritten (lower case, table name and hash appended): found by prefix."""
    sql = statement.sql
    prefix = f"{bracket(address.catalog)}." if address.catalog else ""
    fail_unless(
        sql == f"SELECT index_id FROM {prefix}sys.indexes WHERE object_id = OBJECT_ID(?) AND name LIKE ?",
        f"not a prefix lookup of the index name:\n{sql}",
    )
    pattern = like_prefix(statement.extra["index"])
    fail_unless(
        statement.params == (expected_qualified_name(address), pattern),
        f"bound values {statement.params} != {(expected_qualified_name(address), pattern)}",
    )


def check_babelfish_subscribe(
    statement: Statement, trees: list[exp.Expression], address: QueueAddress
) -> None:
    """Babelfish refuses MERGE: UPDATE of a changed queue, then INSERT where the (Endpoint, Topic) row is
    missing, both under (UPDLOCK, SERIALIZABLE) as SQL Server would honour them (Babelfish does not; the
    primary key then refuses the second of two racing inserts, which SubscriptionStore runs again)."""
    sql = statement.sql
    update, insert = trees
    qualified = expected_qualified_name(address)
    fail_unless(table_hints(update.this) == ["UPDLOCK", "SERIALIZABLE"], f"UPDATE hints:\n{sql}")
    fail_unless(
        sql.startswith(
            f"UPDATE {qualified} WITH (UPDLOCK, SERIALIZABLE) SET [QueueAddress] = ? WHERE "
            "[Endpoint] = ? AND [Topic] = ? AND [QueueAddress] <> ?; "
        ),
        f"not the update of a changed queue by key:\n{sql}",
    )
    fail_unless(
        sql.endswith(
            f"INSERT INTO {qualified} ([QueueAddress], [Topic], [Endpoint]) SELECT ?, ?, ? WHERE NOT "
            f"EXISTS (SELECT 1 FROM {qualified} WITH (UPDLOCK, SERIALIZABLE) "
            "WHERE [Endpoint] = ? AND [Topic] = ?)"
        ),
        f"not the insert of a missing row:\n{sql}",
    )
    fail_unless(isinstance(insert, exp.Insert), f"not an INSERT:\n{sql}")
    endpoint, topic, queue = SUBSCRIPTION
    wanted = (queue, endpoint, topic, queue, queue, topic, endpoint, endpoint, topic)
    fail_unless(statement.params == wanted, f"bound values {statement.params} != {wanted}")


VARIANT_SEMANTICS: dict[tuple[str, str], Callable[[Statement, list[exp.Expression], QueueAddress], None]] = {
    ("babelfish", "subscribe"): check_babelfish_subscribe,
    ("babelfish", "receive_batch"): check_babelfish_receive,
    ("babelfish", "table_exists"): check_babelfish_table_exists,
    ("babelfish", "index_exists"): check_babelfish_index_exists,
}


# ---- tests ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case_name", sorted(CASES))
def test_golden_file(case_name: str) -> None:
    address = ADDRESSES[case_name]
    rendered = golden_text(case_name, address, RENDERED[case_name])
    path = GOLDEN_DIR / f"{case_name}.sql"
    if UPDATE_GOLDEN:
        GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered, encoding="utf-8", newline="\n")
        return
    assert path.exists(), f"{path} is missing: run with SQLQUEUE_UPDATE_GOLDEN=1, then review it"
    golden = path.read_text(encoding="utf-8")
    if rendered != golden:
        diff = "".join(
            difflib.unified_diff(
                golden.splitlines(keepends=True),
                rendered.splitlines(keepends=True),
                f"golden/sqlserver/{case_name}.sql",
                "rendered",
            )
        )
        pytest.fail(f"SQL Server statements differ from the golden file (SQLQUEUE_UPDATE_GOLDEN=1):\n{diff}")


def test_no_stale_golden_files() -> None:
    stale = sorted({p.stem for p in GOLDEN_DIR.glob("*.sql")} - set(CASES))
    if UPDATE_GOLDEN:
        for name in stale:
            (GOLDEN_DIR / f"{name}.sql").unlink()
        return
    assert not stale, f"golden files without a case: {stale}"


@pytest.mark.parametrize(
    ("variant", "case_name"),
    [(variant, case) for variant in VARIANTS if variant != "sqlserver" for case in CASES_BY_VARIANT[variant]],
)
def test_variant_golden_file(variant: str, case_name: str) -> None:
    """Each subclass of SqlServerDialect has its golden files: what it renders differently."""
    text = variant_golden_text(variant, case_name, RENDERED_BY_VARIANT[variant][case_name])
    compare_golden(GOLDEN_ROOT / variant / f"{case_name}.sql", text)


def test_no_stale_golden_folders() -> None:
    """Every golden folder belongs to a dialect class (or to the Spark bridge, tests/test_tsql_static.py)."""
    folders = {path.name for path in GOLDEN_ROOT.iterdir() if path.is_dir()} - {"spark_bridge"}
    stale = sorted(folders - set(VARIANTS))
    assert not stale, f"golden folders without a dialect class: {stale}"
    for variant in VARIANTS:
        if variant != "sqlserver":
            stale_files = stale_golden_files(GOLDEN_ROOT / variant, set(CASES_BY_VARIANT[variant]))
            assert not stale_files, f"golden files of {variant} without a case: {stale_files}"


REFUSALS = [
    pytest.param(variant, case, reason, id=f"{variant}:{case}")
    for variant, refused in REFUSED_BY_VARIANT.items()
    for case, reason in refused.items()
]


def test_babelfish_refuses_some_cases_and_renders_the_rest() -> None:
    """The split is the rule's, not whatever the dialect happens to refuse: both kinds of case exist."""
    assert REFUSED_BY_VARIANT["sqlserver"] == {}
    assert {"plain", "longest_names", "table_open_bracket"} <= set(CASES_BY_VARIANT["babelfish"])
    assert {"ci_special_characters", "everything_at_once"} <= set(REFUSED_BY_VARIANT["babelfish"])


@pytest.mark.parametrize(("variant", "case_name", "reason"), REFUSALS)
def test_variant_refuses_the_names_it_cannot_hold(variant: str, case_name: str, reason: str) -> None:
    """A refused case: resolve and qualified_name raise InvalidQueueName naming why, and no statement is
    rendered for it; SQL Server still renders it (its golden file, test_golden_file)."""
    dialect = VARIANTS[variant]()
    with pytest.raises(InvalidQueueName, match=re.escape(reason)):
        dialect.resolve(QueueAddress.parse(CASES[case_name]))
    with pytest.raises(InvalidQueueName, match=re.escape(reason)):
        dialect.qualified_name(ADDRESSES[case_name])
    assert case_name not in RENDERED_BY_VARIANT[variant]
    assert not (GOLDEN_ROOT / variant / f"{case_name}.sql").exists()
    assert RENDERED[case_name] and (GOLDEN_DIR / f"{case_name}.sql").exists()
    assert DIALECT.qualified_name(ADDRESSES[case_name]) == expected_qualified_name(ADDRESSES[case_name])


@pytest.mark.parametrize(
    "address",
    [
        QueueAddress("ordres_é", "dbo"),
        QueueAddress("orders", "schéma"),
        QueueAddress("orders", "dbo", "bäse"),
    ],
    ids=["table", "schema", "catalog"],
)
def test_babelfish_refuses_non_ascii_names_sql_server_renders(address: QueueAddress) -> None:
    assert expected_refusal("babelfish", address) == "is not ASCII"
    with pytest.raises(InvalidQueueName, match="is not ASCII"):
        BabelfishDialect().resolve(address)
    with pytest.raises(InvalidQueueName, match="is not ASCII"):
        BabelfishDialect().qualified_name(address)
    assert DIALECT.qualified_name(DIALECT.resolve(address)) == expected_qualified_name(address)


@pytest.mark.parametrize(("case_name", "statement"), ALL_STATEMENTS)
def test_statement_parses_and_means_what_the_reference_does(case_name: str, statement: Statement) -> None:
    check_statement(statement, ADDRESSES[case_name])


VARIANT_STATEMENTS = [
    pytest.param(variant, case, statement, id=f"{variant}:{case}:{statement.name}")
    for variant, rendered in RENDERED_BY_VARIANT.items()
    if variant != "sqlserver"
    for case, statements in rendered.items()
    for statement in differing(case, statements)
]


@pytest.mark.parametrize(("variant", "case_name", "statement"), VARIANT_STATEMENTS)
def test_variant_statement_means_what_the_reference_does(
    variant: str, case_name: str, statement: Statement
) -> None:
    """A variant's own statement passes the checks every statement passes, and a checker of its own."""
    checker = VARIANT_SEMANTICS.get((variant, statement.kind))
    assert checker is not None, f"{variant}'s own {statement.kind} has no semantic checker: add one"
    check_statement(statement, ADDRESSES[case_name], checker)


def test_every_variant_checker_is_used() -> None:
    used = {(variant, statement.kind) for variant, _, statement in (p.values for p in VARIANT_STATEMENTS)}
    assert used == set(VARIANT_SEMANTICS), f"checkers without a statement: {set(VARIANT_SEMANTICS) - used}"


# The statements of the T-SQL tables the golden files render under another kind (an index's DDL as "index",
# the INSERT as "send" and "insert_raw"), and those they do not render, each with why.
_RENDERED_AS = {
    "insert": "send",
    "create_rowversion_index": "index",
    "create_rowversion_index_heap": "index",
    "create_expires_index": "index",
    "create_expires_index_heap": "index",
    "create_delayed_index": "delayed_index",
    "create_archive_index": "archive_index",
}
_NOT_RENDERED = {
    "body_string_column",  # a column of create_table with body_string (test_create_table_ignores_layout)
    "reset_session",  # a connection's session reset, run on a live server only (test_session_reset.py)
    "savepoint",  # a batching pump's message savepoint: SAVE/ROLLBACK TRANSACTION of a quoted name
    "rollback_to_savepoint",
}


@pytest.mark.parametrize("cls", list(VARIANTS.values()), ids=list(VARIANTS))
def test_every_statement_of_the_table_is_rendered(cls: type[SqlServerDialect]) -> None:
    """A statement added to a T-SQL table fails here until the golden files render (and so check) it."""
    kinds = {statement.kind for statements in RENDERED.values() for statement in statements}
    names = {name for name in cls.statements if not name.startswith("bridge_")} - _NOT_RENDERED
    assert {_RENDERED_AS.get(name, name) for name in names} <= kinds, names - kinds - set(_RENDERED_AS)


def test_every_statement_kind_is_covered() -> None:
    kinds = {statement.kind for statements in RENDERED.values() for statement in statements}
    assert kinds == set(SEMANTICS), f"kinds without a checker or never rendered: {kinds ^ set(SEMANTICS)}"


@pytest.mark.parametrize("case_name", sorted(CASES))
def test_create_table_ignores_layout(case_name: str) -> None:
    """The golden files render create_table for one layout only; the layout must change indexes alone."""
    address = ADDRESSES[case_name]
    for unicode_headers in (True, False):
        for body_string in (False, True):
            texts = {
                DIALECT.create_table(address, TableOptions(layout, unicode_headers, body_string))
                for layout in ("clustered", "heap")
            }
            assert len(texts) == 1


@pytest.mark.parametrize("case_name", sorted(CASES))
def test_addresses_round_trip(case_name: str) -> None:
    """The cases are what they claim: the canonical form parses back to the same address."""
    address = ADDRESSES[case_name]
    assert QueueAddress.parse(str(address)) == address
    assert DIALECT.qualified_name(address) == expected_qualified_name(address)


def test_special_addresses_resolve_as_intended() -> None:
    assert ADDRESSES["plain"] == QueueAddress("orders", "dbo")
    assert ADDRESSES["ci_special_characters"] == QueueAddress("my]table", "db@", "n service.bus&#")
    assert ADDRESSES["table_doubled_close_bracket"].table == "my]]table"
    assert ADDRESSES["schema_at_and_bracket"] == QueueAddress("orders", "s@]x")
    assert ADDRESSES["everything_at_once"] == QueueAddress("x [y]] 'z';--", "s@]x", "c]@[")
    lock = next(s for s in RENDERED["longest_names"] if s.kind == "lock_for_create")
    assert len(lock.params[0]) <= APPLOCK_RESOURCE_MAX


@pytest.mark.parametrize(
    ("index_rows", "clustered"),
    [([("RowVersion", 1), ("Expires", 2)], True), ([("RowVersion", 2), ("Expires", 2)], False), ([], False)],
    ids=["clustered", "heap", "no-index"],
)
def test_the_start_up_asks_whether_rowversion_is_clustered_with_the_inspection_statement(
    index_rows: list[Any], clustered: bool
) -> None:
    """The receivers' start-up check runs the golden ``index_first_columns`` query with the table's name,
    and only an index of type 1 (clustered) led by RowVersion counts."""
    d = SqlServerDialect()
    address = d.resolve(QueueAddress.parse("orders@[sales]@[erp]"))
    cursor = _RecordingCursor(index_rows)
    assert d.rowversion_index_is_clustered(cursor, address) is clustered
    assert cursor.executed == [(d.index_first_columns(address), (d.qualified_name(address),))]
    assert BabelfishDialect().rowversion_index_is_clustered(_RecordingCursor(index_rows), address) is None


def test_the_creation_lock_names_the_catalog() -> None:
    """The reference's '[catalog].[schema].[table]_lock': the address's catalog, else the connection's
    database; the hashed form of the longest names hashes the catalog too (SHA-1, recomputed here)."""
    plain = next(s for s in RENDERED["plain"] if s.kind == "lock_for_create")
    assert plain.params == (f"[{CURRENT_CATALOG}].[dbo].[orders]_lock",)
    special = next(s for s in RENDERED["ci_special_characters"] if s.kind == "lock_for_create")
    assert special.params == ("[n service.bus&#].[db@].[my]]table]_lock",)
    longest = ADDRESSES["longest_names"]
    full = f"[{'c' * 128}].[{'s' * 128}].[{'q' * 128}]_lock"
    hashed = f"sqlqueue_{hashlib.sha1(full.encode('utf-8')).hexdigest()[:8]}_lock"
    assert next(s for s in RENDERED["longest_names"] if s.kind == "lock_for_create").params == (hashed,)
    other_catalog = QueueAddress(longest.table, longest.schema, "d" * 128)
    assert DIALECT.lock_for_create(other_catalog)[1] != (hashed,)
    no_catalog = QueueAddress(longest.table, longest.schema)
    assert DIALECT.lock_for_create(no_catalog, "c" * 128)[1] == (hashed,)
    assert DIALECT.lock_for_create(no_catalog, "d" * 128)[1] != (hashed,)


@pytest.mark.parametrize(
    ("variant", "case_name"),
    [(variant, case) for variant in sorted(VARIANTS) for case in sorted(CASES_BY_VARIANT[variant])],
)
def test_the_creation_opens_its_transaction_in_a_plain_batch_before_the_lock(
    variant: str, case_name: str
) -> None:
    """What begin_creation executes, in order: open_transaction as ``cursor.execute(sql)`` (no parameters,
    so a plain batch: a parameterised call that changes @@TRANCOUNT is error 266), the connection's
    database where the address names no catalog, then the lock with its resource, in that transaction."""
    dialect = VARIANTS[variant]()
    address = ADDRESSES[case_name]
    lock, params = dialect.lock_for_create(address, CURRENT_CATALOG)
    expected: list[tuple[str, tuple[Any, ...]]] = [(dialect.optional_sql("open_transaction"), ())]
    if address.catalog is None:
        expected.append((dialect.optional_sql("current_catalog"), ((),)))
    expected.append((lock, (params,)))
    assert record_creation(dialect, address) == expected


# ---- negative self-test: the checks can fail -------------------------------------------------------------
_ORDERS = QueueAddress("orders", "dbo")
_GOOD_RECEIVE = DIALECT.sql("receive_batch", _ORDERS)
_GOOD_PEEK = DIALECT.sql("peek_estimate", _ORDERS)
_GOOD_PURGE = DIALECT.sql("purge_expired_batch", _ORDERS)
_GOOD_LOCK, _GOOD_LOCK_PARAMS = DIALECT.lock_for_create(_ORDERS)
_GOOD_OPEN = DIALECT.optional_sql("open_transaction")
# The creation's single batch before the transaction got a batch of its own (open_transaction): a
# parameterised call that changes @@TRANCOUNT, error 266.
_OLD_ONE_BATCH_LOCK = _GOOD_LOCK.replace(
    "DECLARE @result int; ",
    "DECLARE @result int, @opened bit = 0; IF @@TRANCOUNT = 0 BEGIN BEGIN TRANSACTION; SET @opened = 1; END; "
    "IF @opened = 1 AND @@TRANCOUNT > 1 COMMIT TRANSACTION; ",
)
_OLD_ONE_BATCH_TYPES = OPEN_TRANSACTION_TYPES + LOCK_TYPES[1:]
_GOOD_SEND = DIALECT.send(_ORDERS)
_GOOD_HEAP_INDEX = DIALECT.indexes(_ORDERS, TableOptions("heap"))[0].create
_GOOD_MOVE = DIALECT.sql("select_due_delayed", _ORDERS)
_GOOD_MOVE_ROWS = DIALECT.move_delayed_rows(_ORDERS, MOVE_DESTINATION, 3, True)[0]
_GOOD_STORE = DIALECT.sql("store_delayed", _ORDERS)
_GOOD_MOVER_LOCK, _GOOD_MOVER_LOCK_PARAMS = DIALECT.try_lock_delayed_mover(_ORDERS)
_SPECIAL = QueueAddress("my]table", "db@", "n service.bus&#")
_GOOD_SPECIAL_PEEK = DIALECT.sql("peek_estimate", _SPECIAL)


def _like(kind: str, sql: str, placeholders: int, **changes: Any) -> Statement:
    """A statement of the given kind as render() would describe it, with broken text."""
    model = next(s for s in RENDERED["plain"] if s.kind == kind)
    fields = {"sql": sql, "placeholders": placeholders, **changes}
    return Statement(
        kind=model.kind,
        name=model.name,
        sql=fields["sql"],
        types=fields.get("types", model.types),
        placeholders=fields["placeholders"],
        params=fields.get("params", model.params),
        embeds_table=model.embeds_table,
        extra=fields.get("extra", model.extra),
    )


BROKEN = [
    pytest.param(
        _like("index", "CREATE CLUSTERD INDEX [Index_RowVersion] ON [dbo].[orders] ([RowVersion] ASC)", 0),
        _ORDERS,
        "opaque Command",
        id="typo-falls-back-to-Command",
    ),
    pytest.param(
        _like("receive_batch", _GOOD_RECEIVE.replace("DELETE", "DELET"), 1),
        _ORDERS,
        "could not parse",
        id="DELET",
    ),
    pytest.param(
        _like("receive_batch", _GOOD_RECEIVE.replace("READPAST, ", ""), 1),
        _ORDERS,
        "READPAST together with UPDLOCK and ROWLOCK",
        id="receive-no-READPAST",
    ),
    pytest.param(
        _like("receive_batch", _GOOD_RECEIVE.replace("UPDLOCK", "UPDLOK"), 1),
        _ORDERS,
        "READPAST together with UPDLOCK and ROWLOCK",
        id="receive-hint-typo",
    ),
    pytest.param(
        _like("receive_batch", _GOOD_RECEIVE.replace("TOP(?)", "TOP(1)"), 0),
        _ORDERS,
        r"TOP\(\?\)",
        id="receive-TOP-literal",
    ),
    pytest.param(
        _like("receive_batch", _GOOD_RECEIVE.replace(" ORDER BY [RowVersion]", ""), 1),
        _ORDERS,
        "ORDER BY",
        id="receive-unordered",
    ),
    pytest.param(
        _like("receive_batch", _GOOD_RECEIVE.replace("GETUTCDATE()", "GETDATE()"), 1),
        _ORDERS,
        "local-time function",
        id="receive-local-clock",
    ),
    pytest.param(
        _like("peek_estimate", _GOOD_PEEK.replace("READPAST, READCOMMITTEDLOCK", "NOLOCK"), 0),
        _ORDERS,
        "dirty-read hints",
        id="peek-NOLOCK",
    ),
    pytest.param(
        _like("peek_estimate", _GOOD_PEEK.replace(" + 1", ""), 0),
        _ORDERS,
        "max - min",
        id="peek-without-plus-one",
    ),
    pytest.param(
        _like("peek_estimate", "SELECT count(*) FROM [dbo].[orders] WITH (READPAST, READCOMMITTEDLOCK)", 0),
        _ORDERS,
        "max - min",
        id="peek-count",
    ),
    pytest.param(
        _like("purge_expired_batch", _GOOD_PURGE.replace(" WITH (READPAST)", ""), 1),
        _ORDERS,
        "purge lacks READPAST",
        id="purge-no-READPAST",
    ),
    pytest.param(
        _like("purge_expired_batch", _GOOD_PURGE.replace("GETUTCDATE()", "'2024-01-01T00:00:00'"), 1),
        _ORDERS,
        "string literals",
        id="purge-python-time",
    ),
    pytest.param(
        _like("lock_for_create", _GOOD_LOCK.replace("'Transaction'", "'Session'"), 1),
        _ORDERS,
        "string literals",
        id="lock-session-owner",
    ),
    pytest.param(
        _like("lock_for_create", _GOOD_LOCK, 1, params=("[dbo].[other]_lock",)),
        _ORDERS,
        "lock resource",
        id="lock-wrong-resource",
    ),
    pytest.param(
        _like("lock_for_create", _GOOD_LOCK, 1, params=("[dbo].[orders]_lock",)),
        _ORDERS,
        "lock resource",
        id="lock-without-catalog",
    ),
    pytest.param(
        _like("lock_for_create", _GOOD_LOCK.replace("'Exclusive'", "'Shared'"), 1),
        _ORDERS,
        "string literals",
        id="lock-shared",
    ),
    pytest.param(
        _like(
            "lock_for_create",
            _GOOD_LOCK.replace("'Exclusive'", "'Transaction'").replace(
                "@LockOwner = 'Transaction'", "@LockOwner = 'Exclusive'"
            ),
            1,
        ),
        _ORDERS,
        "@LockMode is not 'Exclusive'",
        id="lock-mode-and-owner-swapped",
    ),
    pytest.param(
        _like("lock_for_create", _GOOD_LOCK.replace("@LockTimeout = 60000", "@LockTimeout = 0"), 1),
        _ORDERS,
        "@LockTimeout is not 60000",
        id="lock-does-not-wait",
    ),
    pytest.param(
        _like("lock_for_create", _GOOD_LOCK.replace("SELECT @result", "SELECT 1"), 1),
        _ORDERS,
        "SELECT @result",
        id="lock-result-not-selected",
    ),
    pytest.param(
        _like("lock_for_create", _GOOD_LOCK.replace("EXEC @result = ", "EXEC "), 1),
        _ORDERS,
        "the result is not kept",
        id="lock-result-not-kept",
    ),
    pytest.param(
        _like("lock_for_create", _GOOD_LOCK, 1, params=(f"sqlqueue_{'0' * 8}_lock",)),
        _ORDERS,
        "lock resource",
        id="lock-hashed-below-255",
    ),
    pytest.param(
        _like("lock_for_create", _GOOD_LOCK, 1, extra={"execute_args": ()}),
        _ORDERS,
        "executes the lock with",
        id="lock-executed-without-its-resource",
    ),
    pytest.param(
        _like("lock_for_create", _OLD_ONE_BATCH_LOCK, 1),
        _ORDERS,
        "statement types",
        id="lock-opens-its-own-transaction",
    ),
    pytest.param(
        _like("lock_for_create", _OLD_ONE_BATCH_LOCK, 1, types=_OLD_ONE_BATCH_TYPES),
        _ORDERS,
        "system variables",
        id="lock-opens-its-own-transaction-as-typed",
    ),
    pytest.param(
        _like(
            "open_transaction",
            _GOOD_OPEN.replace(
                "IF @@TRANCOUNT = 0 BEGIN BEGIN TRANSACTION; SET @opened = 1; END;", "BEGIN TRANSACTION;"
            ),
            0,
        ),
        _ORDERS,
        "statement types",
        id="open-unconditionally",
    ),
    pytest.param(
        _like("open_transaction", _GOOD_OPEN.replace("@@TRANCOUNT = 0", "@@TRANCOUNT >= 0"), 0),
        _ORDERS,
        "than @@TRANCOUNT = 0",
        id="open-inside-an-open-transaction",
    ),
    pytest.param(
        _like(
            "open_transaction",
            _GOOD_OPEN.replace("IF @opened = 1 AND @@TRANCOUNT > 1", "IF @@TRANCOUNT > 0"),
            0,
        ),
        _ORDERS,
        "than @opened = 1 AND @@TRANCOUNT > 1",
        id="open-commits-the-callers-transaction",
    ),
    pytest.param(
        _like("open_transaction", _GOOD_OPEN.replace("@@TRANCOUNT > 1", "@@TRANCOUNT > 0"), 0),
        _ORDERS,
        "than @opened = 1 AND @@TRANCOUNT > 1",
        id="open-commits-its-only-level",
    ),
    pytest.param(
        _like("open_transaction", _GOOD_OPEN.replace("SET @opened = 1", "SET @opened = 0"), 0),
        _ORDERS,
        "not noted",
        id="open-forgets-it-opened",
    ),
    pytest.param(
        _like(
            "open_transaction", _GOOD_OPEN.replace("DECLARE @opened bit = 0", "DECLARE @opened bit = 1"), 0
        ),
        _ORDERS,
        "not DECLARE @opened bit = 0",
        id="open-believes-it-opened",
    ),
    pytest.param(
        _like("open_transaction", _GOOD_OPEN.replace("COMMIT TRANSACTION", "ROLLBACK TRANSACTION"), 0),
        _ORDERS,
        "statement types",
        id="open-rolls-back",
    ),
    pytest.param(
        _like(
            "open_transaction",
            _GOOD_OPEN.replace("BEGIN BEGIN TRANSACTION; SET @opened = 1; END", "BEGIN TRANSACTION").replace(
                "TRANSACTION; IF @opened", "TRANSACTION; SET @opened = 1; IF @opened"
            ),
            0,
        ),
        _ORDERS,
        "is not DECLARE; IF; IF",
        id="open-flag-outside-the-IF",
    ),
    pytest.param(
        _like(
            "open_transaction",
            _GOOD_OPEN.replace("DECLARE @opened bit = 0", "DECLARE @opened bit = ?"),
            1,
            params=(0,),
        ),
        _ORDERS,
        "open_transaction takes parameters .*error 266",
        id="open-with-a-parameter",
    ),
    pytest.param(
        _like("open_transaction", _GOOD_OPEN, 0, extra={"execute_args": ((),)}),
        _ORDERS,
        r"executes open_transaction with \(\(\),\).*error 266",
        id="open-executed-with-an-empty-parameter-list",
    ),
    pytest.param(
        _like("open_transaction", _GOOD_OPEN, 0, extra={"execute_args": None}),
        _ORDERS,
        "executes open_transaction with None",
        id="open-never-executed",
    ),
    pytest.param(
        _like("send", _GOOD_SEND.replace("VALUES (?, ", "VALUES ('orders-1', ", 1), 6),
        _ORDERS,
        "string literals",
        id="send-string-literal",
    ),
    pytest.param(
        _like("send", _GOOD_SEND.replace("[dbo].[orders]", "[dbo].orders"), 7),
        _ORDERS,
        "unquoted address parts",
        id="unquoted-table",
    ),
    pytest.param(
        _like("send", _GOOD_SEND.replace("[dbo].[orders]", "[orders]"), 7),
        _ORDERS,
        "is not the address",
        id="schema-missing",
    ),
    pytest.param(
        _like("peek_estimate", _GOOD_SPECIAL_PEEK.replace("[my]]table]", "[my]table]"), 0),
        _SPECIAL,
        "could not parse",
        id="bracket-not-doubled",
    ),
    pytest.param(
        _like("peek_estimate", _GOOD_SPECIAL_PEEK.replace("[db@]", "db@"), 0),
        _SPECIAL,
        "unquoted address parts",
        id="bare-schema",
    ),
    pytest.param(
        _like(
            "index",
            _GOOD_HEAP_INDEX.replace("NONCLUSTERED", "CLUSTERED"),
            0,
            extra={
                "layout": "heap",
                "index": "Index_RowVersion",
            },
        ),
        _ORDERS,
        "CLUSTERED INDEX != NONCLUSTERED INDEX",
        id="heap-with-clustered-index",
    ),
    pytest.param(
        _like("table_exists", "SELECT OBJECT_ID('[dbo].[orders]', 'U')", 0, params=()),
        _ORDERS,
        "string literals",
        id="name-as-literal",
    ),
    pytest.param(
        _like("select_due_delayed", _GOOD_MOVE.replace("UPDLOCK, READPAST, ROWLOCK", "UPDLOCK, ROWLOCK"), 1),
        _ORDERS,
        "hints",
        id="move-no-READPAST",
    ),
    pytest.param(
        _like("select_due_delayed", _GOOD_MOVE.replace("[Due] <= GETUTCDATE()", "[Due] <= GETDATE()"), 1),
        _ORDERS,
        "local-time function",
        id="move-local-clock",
    ),
    pytest.param(
        _like("select_due_delayed", _GOOD_MOVE.replace(" ORDER BY [Due]", ""), 1),
        _ORDERS,
        "ordered by Due",
        id="move-unordered",
    ),
    pytest.param(
        _like(
            "select_due_delayed",
            _GOOD_MOVE.replace("[RowVersion], [Headers]", "[RowVersion], [Headers], [Body]"),
            1,
        ),
        _ORDERS,
        "not RowVersion, Headers",
        id="move-reads-bodies",
    ),
    pytest.param(
        _like("move_delayed_rows", _GOOD_MOVE_ROWS.replace("deleted.[Headers]", "?"), 4),
        _ORDERS,
        "OUTPUT",
        id="move-rewrites-headers",
    ),
    pytest.param(
        _like("move_delayed_rows", _GOOD_MOVE_ROWS.replace("NEWID()", "?"), 4),
        _ORDERS,
        "OUTPUT",
        id="move-client-id",
    ),
    pytest.param(
        _like(
            "move_delayed_rows",
            _GOOD_MOVE_ROWS.replace("INTO [dbo].[Billing.Input]", "INTO [dbo].[orders]"),
            3,
        ),
        _ORDERS,
        "INTO the destination",
        id="move-into-its-own-table",
    ),
    pytest.param(
        _like(
            "move_delayed_rows",
            _GOOD_MOVE_ROWS.replace("IN (?, ?, ?)", "IN (SELECT TOP(?) [RowVersion] FROM [dbo].[orders])"),
            1,
        ),
        _ORDERS,
        "RowVersion\\] IN",
        id="move-picks-again",
    ),
    pytest.param(
        _like("store_delayed", _GOOD_STORE.replace("GETUTCDATE()", "SYSUTCDATETIME()"), 5),
        _ORDERS,
        "clock functions",
        id="store-other-clock",
    ),
    pytest.param(
        _like(
            "try_lock_delayed_mover", _GOOD_MOVER_LOCK.replace("@LockTimeout = 0", "@LockTimeout = 60000"), 1
        ),
        _ORDERS,
        "waits for the lock",
        id="mover-lock-waits",
    ),
    pytest.param(
        _like("try_lock_delayed_mover", _GOOD_MOVER_LOCK.replace("'Session'", "'Transaction'"), 1),
        _ORDERS,
        "LockOwner is not 'Session'",
        id="mover-lock-transaction-owner",
    ),
    pytest.param(
        _like("drop_table", "DROP TABLE IF EXISTS [dbo].[orders]; DROP TABLE [dbo].[x]", 0),
        _ORDERS,
        "statement types",
        id="extra-statement",
    ),
]


@pytest.mark.parametrize(("statement", "address", "reason"), BROKEN)
def test_checks_reject_broken_statements(statement: Statement, address: QueueAddress, reason: str) -> None:
    with pytest.raises(SqlCheckFailure, match=reason):
        check_statement(statement, address)


def test_checks_accept_the_unbroken_originals() -> None:
    """The broken statements above fail because of what was broken, not because the models are wrong."""
    for sql in (
        _GOOD_RECEIVE,
        _GOOD_PEEK,
        _GOOD_PURGE,
        _GOOD_OPEN,
        _GOOD_LOCK,
        _GOOD_SEND,
        _GOOD_HEAP_INDEX,
        _GOOD_MOVE,
        _GOOD_MOVE_ROWS,
        _GOOD_STORE,
        _GOOD_MOVER_LOCK,
    ):
        statement = next(s for s in RENDERED["plain"] if s.sql == sql)
        check_statement(statement, _ORDERS)
    special = next(s for s in RENDERED["ci_special_characters"] if s.kind == "peek_estimate")
    assert special.sql == _GOOD_SPECIAL_PEEK
    check_statement(special, _SPECIAL)


_BABELFISH = BabelfishDialect()
_BF_RECEIVE = _BABELFISH.sql("receive_batch", _ORDERS)


def _babelfish_like(kind: str, sql: str, placeholders: int, **changes: Any) -> Statement:
    model = next(s for s in RENDERED_BY_VARIANT["babelfish"]["plain"] if s.kind == kind)
    return Statement(
        model.kind,
        model.name,
        sql,
        model.types,
        placeholders,
        changes.get("params", model.params),
        model.embeds_table,
        model.extra,
    )


BROKEN_BABELFISH = [
    pytest.param(
        _babelfish_like(
            "receive_batch",
            _BF_RECEIVE.replace("GETUTCDATE() AS [Now], ", "").replace(
                "deleted.[Expires]", "deleted.[Expires], GETUTCDATE() AS [Now]"
            ),
            1,
        ),
        "OUTPUT",
        id="receive-Now-moved",
    ),
    pytest.param(
        _babelfish_like(
            "receive_batch", _BF_RECEIVE.replace("UPDLOCK, READPAST, ROWLOCK", "UPDLOCK, ROWLOCK"), 1
        ),
        "hints",
        id="receive-no-READPAST",
    ),
    pytest.param(
        _babelfish_like("receive_batch", _BF_RECEIVE.replace("GETUTCDATE()", "SYSUTCDATETIME()"), 1),
        "clock functions",
        id="receive-other-clock",
    ),
    pytest.param(
        _babelfish_like("receive_batch", _BF_RECEIVE.replace("TOP(?)", "TOP(1)"), 0),
        "TOP",
        id="receive-TOP-literal",
    ),
    pytest.param(
        _babelfish_like("receive_batch", _BF_RECEIVE.replace(" ORDER BY [RowVersion]", ""), 1),
        "ordered by RowVersion",
        id="receive-unordered",
    ),
    pytest.param(
        _babelfish_like(
            "receive_batch",
            _BF_RECEIVE.replace("IN (SELECT TOP(?) [RowVersion]", "IN (SELECT TOP(?) [Id]"),
            1,
        ),
        "more than RowVersion",
        id="receive-picks-by-Id",
    ),
    pytest.param(
        _babelfish_like("table_exists", _BABELFISH.table_exists(_ORDERS)[0], 2, params=("orders", "dbo")),
        "bound names",
        id="table-exists-swapped",
    ),
    pytest.param(
        _babelfish_like(
            "index_exists",
            _BABELFISH.index_exists(_ORDERS, "Index_RowVersion")[0],
            2,
            params=("[dbo].[orders]", "Index_RowVersion%"),
        ),
        "bound values",
        id="index-pattern-unescaped",
    ),
]


@pytest.mark.parametrize(("statement", "reason"), BROKEN_BABELFISH)
def test_babelfish_checks_reject_broken_statements(statement: Statement, reason: str) -> None:
    checker = VARIANT_SEMANTICS[("babelfish", statement.kind)]
    with pytest.raises(SqlCheckFailure, match=reason):
        check_statement(statement, _ORDERS, checker)


def test_ci_refuses_to_rewrite_the_golden_files() -> None:
    """A CI run with SQLQUEUE_UPDATE_GOLDEN=1 stops before any test, and no golden file is written."""
    before = {p: p.read_bytes() for p in GOLDEN_ROOT.rglob("*.sql")}
    env = {**os.environ, "CI": "true", "SQLQUEUE_UPDATE_GOLDEN": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", __file__],
        cwd=Path(__file__).resolve().parent.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout[-2000:] + result.stderr[-2000:]
    assert "CI refuses it" in result.stderr
    assert {p: p.read_bytes() for p in GOLDEN_ROOT.rglob("*.sql")} == before
