"""PostgreSQL (psycopg 3): every statement of the engine.

Receivers compete with ``FOR UPDATE SKIP LOCKED``. PostgreSQL asks for the UPDATE privilege on at least
one column before it takes row locks. A role with only SELECT, INSERT and DELETE therefore competes with
transaction-scoped advisory locks instead, one per row, keyed by the table's oid and the row's RowVersion
and taken on the oldest rows in order until the batch is full (the ``*_without_row_locks`` statements).
Either way the DELETE runs in the receive's transaction, and a row another receiver deleted and committed
in the meantime is re-checked by the DELETE and skipped, so no message reaches two receivers.
The table has the seeds' columns, as on the other engines; a table in the layout of the reference's own
PostgreSQL transport is read and written through postgres_reference.py's statements. Column names are written
unquoted and fold to lower case. Times come from ``statement_timestamp()``, so a send inside a long
receive transaction still computes Expires from the moment it runs.

Every statement of a PostgreSQL queue is in :data:`STATEMENTS` (with the archive's, the delayed table's and
the subscription table's); the rest of the module is code.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from ..model.address import QueueAddress
from ..model.errors import (
    InvalidQueueName,
    PermissionDenied,
    QueueNotFound,
    SqlQueueError,
    TransientDatabaseError,
)
from .base import Finding, IndexSpec, StorageParameters, TableOptions
from .bridge import BridgeColumnTypes
from .postgres_session import write_back_own_evictions
from .postgres_storage import PostgresStorage
from .statements import BRIDGE, PORTABLE, PORTABLE_FRAGMENTS, StatementTable
from .transaction_state import PostgresTransactionState

# "after a RowVersion" as the planner cannot see the RowVersion (an InitPlan's value): it then estimates a
# third of the table after it and walks the index in order up to LIMIT. Seeing the value, it estimates from
# statistics that lag a queue whose RowVersions only grow, may expect a few hundred rows where half the queue
# lies, and then reads and sorts every one of them for each receive.
AFTER_ROW_VERSION = "RowVersion > (SELECT %s::bigint)"
# "up to a RowVersion", hidden from the planner for the same reason.
THROUGH_ROW_VERSION = "RowVersion <= (SELECT %s::bigint)"


def delete_taken(taken: str, returning: str = "", key: str = "RowVersion") -> str:
    """``DELETE`` the rows a ``SELECT ... LIMIT`` picks, with the pick made exactly once.

    Written as ``WHERE RowVersion IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)`` the pick may run again
    for every row the planner tries (a nested-loop semi join rescans it); each run skips the rows the
    statement already deleted and picks the next ones, so one receive of 1 can delete the whole queue. A
    ``MATERIALIZED`` CTE is evaluated once and rescanned from its stored rows.
    """
    suffix = f" {returning}" if returning else ""
    return (
        f"WITH taken AS MATERIALIZED ({taken}) "
        f"DELETE FROM {{table}} WHERE {key} IN (SELECT {key} FROM taken){suffix}"
    )


def _move_to_staging(key: str, attempt_and_part: str) -> str:
    """The receive ({receive}) as a CTE whose unexpired rows go into staging in the same statement; returns
    one row per deleted row: (the staging key or the expired row's RowVersion, Headers or NULL, expired)."""
    return (
        "WITH m AS ({receive}), "
        "s AS (INSERT INTO {staging} (RunId, RowVersion, Id, CorrelationId, ReplyToAddress, "
        "Expires, Headers, Body, JobAttempt, Part) "
        f"SELECT %s, {key}, Id, CorrelationId, ReplyToAddress, Expires, Headers, Body, "
        f"{attempt_and_part} FROM m WHERE NOT Expired RETURNING RowVersion, Headers) "
        "SELECT RowVersion, Headers, false FROM s "
        "UNION ALL SELECT RowVersion, NULL, true FROM m WHERE Expired"
    )


_HELD_RETURNING = "RETURNING RowVersion, (Expires IS NOT NULL AND Expires <= statement_timestamp())"
_RETURNING = (
    "RETURNING Id, CorrelationId, ReplyToAddress, "
    "(Expires IS NOT NULL AND Expires <= statement_timestamp()) AS Expired, "
    "Headers, Body, RowVersion, Expires"
)
_COPY_COLUMNS = "Id, CorrelationId, ReplyToAddress, Recoverable, Headers, Body"
_COPY_COLUMNS_WITHOUT_RECOVERABLE = "Id, CorrelationId, ReplyToAddress, Headers, Body"
_COPY_TYPES = ["uuid", "varchar", "varchar", "bool", "text", "bytea"]
_COPY_TYPES_WITHOUT_RECOVERABLE = ["uuid", "varchar", "varchar", "text", "bytea"]
# One advisory lock per row for the transaction: table oid in the high 32 bits, RowVersion in the low ones.
# ``OFFSET 0`` keeps the lock out of the inner scan, so only rows taken in RowVersion order are tried and a
# batch holds at most its own size in locks, whatever plan the inner ORDER BY gets.
_ADVISORY_ROW_LOCK = "pg_try_advisory_xact_lock((tableoid::int8 << 32) | (RowVersion & 4294967295))"
_OLDEST_UNHELD = "SELECT RowVersion FROM {table} ORDER BY RowVersion LIMIT 1 FOR KEY SHARE SKIP LOCKED"
_NEWEST_UNHELD = "SELECT RowVersion FROM {table} ORDER BY RowVersion DESC LIMIT 1 FOR KEY SHARE SKIP LOCKED"
_SKIP_LOCKED = "ORDER BY RowVersion LIMIT %s FOR UPDATE SKIP LOCKED"
_BY_ADVISORY_LOCK = "ORDER BY RowVersion OFFSET 0) AS oldest WHERE " + _ADVISORY_ROW_LOCK + " LIMIT %s"
_PG_CATALOG_TABLE = (
    "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = %s AND c.relname = %s"
)

FRAGMENTS = {
    **PORTABLE_FRAGMENTS,
    "send_row": "(%s, %s, %s, true, statement_timestamp() + %s::interval, %s, %s)",
    "send_row_without_recoverable": "(%s, %s, %s, statement_timestamp() + %s::interval, %s, %s)",
    "raw_row": "(%s, %s, %s, true, NULL, %s, %s)",
    "raw_row_without_recoverable": "(%s, %s, %s, NULL, %s, %s)",
    "true": "true",
    "archived_recoverable": "Recoverable",
    "archived_recoverable_without_recoverable": "NULL::boolean",
    # what a restore from the archive writes in Recoverable (NULL where the row came from a table without it)
    "restored_recoverable": "COALESCE(Recoverable, true)",
    "body_size": "octet_length(Body)",
    "after": AFTER_ROW_VERSION,
    "bridge_now": "clock_timestamp()",
    # the uuid's text comes from the server far cheaper than str() of a UUID on the executors
    "bridge_id_column": "Id::text",
}

STATEMENTS: StatementTable = {
    **PORTABLE,
    **BRIDGE,
    "create_table": (
        "CREATE TABLE {table} (\n"
        "    Id uuid NOT NULL,\n"
        "    CorrelationId varchar(255) NULL,\n"
        "    ReplyToAddress varchar(255) NULL,\n"
        "    Recoverable boolean NOT NULL DEFAULT true,\n"
        "    Expires timestamptz NULL,\n"
        "    Headers text NOT NULL,\n"
        "    Body bytea NULL,\n"
        "    RowVersion bigint GENERATED ALWAYS AS IDENTITY NOT NULL{body_string}\n){storage}"
    ),
    "body_string_column": "BodyString text GENERATED ALWAYS AS (encode(Body, 'escape')) STORED",
    "add_body_string": (
        "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS "
        "BodyString text GENERATED ALWAYS AS (encode(Body, 'escape')) STORED"
    ),
    # A send queues one NOTIFY on the table's channel when it inserted a row: delivered when the
    # transaction commits, and never for one that rolls back.
    "insert": (
        "WITH sent AS (INSERT INTO {table} ({columns}) VALUES {values} RETURNING 1) "
        "SELECT pg_notify('{channel}', '') FROM (SELECT 1 FROM sent LIMIT 1) AS any_sent"
    ),
    "receive_batch": delete_taken(f"SELECT RowVersion FROM {{table}} {_SKIP_LOCKED}", _RETURNING),
    "receive_batch_after": delete_taken(
        f"SELECT RowVersion FROM {{table}} WHERE {AFTER_ROW_VERSION} {_SKIP_LOCKED}", _RETURNING
    ),
    "receive_batch_through": delete_taken(
        f"SELECT RowVersion FROM {{table}} WHERE {THROUGH_ROW_VERSION} {_SKIP_LOCKED}", _RETURNING
    ),
    "peek_estimate": f"SELECT COALESCE(({_NEWEST_UNHELD}) - ({_OLDEST_UNHELD}) + 1, 0)",
    "peek_bounds": f"SELECT ({_OLDEST_UNHELD}), ({_NEWEST_UNHELD})",
    "purge_expired_batch": delete_taken(
        "SELECT RowVersion FROM {table} WHERE Expires < statement_timestamp() LIMIT %s FOR UPDATE SKIP "
        "LOCKED",
    ),
    # For roles without the UPDATE privilege: advisory locks instead of row locks.
    "receive_batch_without_row_locks": delete_taken(
        f"SELECT RowVersion FROM (SELECT RowVersion, tableoid FROM {{table}} {_BY_ADVISORY_LOCK}",
        _RETURNING,
    ),
    "receive_batch_through_without_row_locks": delete_taken(
        f"SELECT RowVersion FROM (SELECT RowVersion, tableoid FROM {{table}} WHERE {THROUGH_ROW_VERSION} "
        + _BY_ADVISORY_LOCK,
        _RETURNING,
    ),
    "peek_estimate_without_row_locks": (
        "SELECT COALESCE(max(RowVersion) - min(RowVersion) + 1, 0) FROM {table}"
    ),
    "peek_bounds_without_row_locks": "SELECT min(RowVersion), max(RowVersion) FROM {table}",
    "purge_expired_batch_without_row_locks": delete_taken(
        "SELECT RowVersion FROM (SELECT RowVersion, tableoid FROM {table} "
        f"WHERE Expires < statement_timestamp() OFFSET 0) AS expired WHERE {_ADVISORY_ROW_LOCK} LIMIT %s",
    ),
    "row_lock_probe": (
        "SELECT CASE WHEN to_regclass(%s) IS NULL THEN NULL "
        "ELSE has_any_column_privilege(to_regclass(%s), 'UPDATE') END"
    ),
    "lock_for_create": "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
    "current_catalog": "SELECT current_database()",
    # The reference's PostgreSQL INSERT writes no Recoverable: a table made before the column had its
    # default gets it (a change to the catalog only; nothing is rewritten). The ALTER needs the table's
    # ACCESS EXCLUSIVE lock for a moment, so it waits at most 5 s for open receive transactions (receivers
    # queue behind a waiting ALTER) and is then left for the next create().
    # Which layout a table has: NServiceBus.Transport.PostgreSql's have no RowVersion, and its queues order
    # by Seq, its delayed table by Due; this package's queues and delayed tables have a RowVersion.
    # No row's counts when the table is missing (to_regclass is NULL).
    "table_layout": (
        "SELECT count(*) FILTER (WHERE a.attname IN ('seq', 'due')), "
        "count(*) FILTER (WHERE a.attname = 'rowversion'), count(*) FROM pg_attribute a "
        "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped"
    ),
    "recoverable_default_missing": (
        "SELECT 1 FROM pg_attribute a WHERE a.attrelid = to_regclass(%s) AND a.attname = 'recoverable' "
        "AND NOT a.attisdropped AND NOT a.atthasdef"
    ),
    "set_recoverable_default": (
        "SAVEPOINT set_recoverable_default",
        "SELECT set_config('lock_timeout', '5s', true)",
        "ALTER TABLE {table} ALTER COLUMN Recoverable SET DEFAULT true",
        "RELEASE SAVEPOINT set_recoverable_default",
    ),
    "set_recoverable_default_failed": "ROLLBACK TO SAVEPOINT set_recoverable_default",
    "table_exists": _PG_CATALOG_TABLE + " AND c.relkind IN ('r', 'p')",
    "index_exists": _PG_CATALOG_TABLE + " AND c.relkind = 'i'",
    "column_exists": (
        "SELECT a.attnum FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND a.attname = %s AND NOT a.attisdropped"
    ),
    # The binary COPY of bulk_send sends each value in its column type's wire format, so the table must
    # have the types this dialect creates (a table made elsewhere may not).
    "bulk_send_check": (
        "SELECT count(*) FILTER (WHERE (lower(a.attname), format_type(a.atttypid, NULL)) IN ("
        "('id', 'uuid'), ('correlationid', 'character varying'), "
        "('replytoaddress', 'character varying'), ('headers', 'text'), ('body', 'bytea'))) = 5 "
        "AND count(*) FILTER (WHERE lower(a.attname) = "
        "'recoverable' AND format_type(a.atttypid, NULL) <> 'boolean') = 0 "
        "FROM pg_attribute a WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped"
    ),
    # RowVersion, or Seq in NServiceBus.Transport.PostgreSql's layout
    "queue_tables": (
        "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND ("
        "SELECT count(*) FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 "
        "AND NOT a.attisdropped "
        "AND lower(a.attname) IN ('id', 'headers', 'body', 'rowversion', 'seq', 'expires')) = 5 "
        "ORDER BY c.relname"
    ),
    "inspect_indexes": (
        "SELECT a.attname, i.indpred IS NOT NULL FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = i.indkey[0] "
        "WHERE n.nspname = %s AND c.relname = %s"
    ),
    # ---- the delayed table
    "create_delayed_table": (
        "CREATE TABLE {table} (\n"
        "    Headers text NOT NULL,\n"
        "    Body bytea NULL,\n"
        "    Due timestamptz NOT NULL,\n"
        "    RowVersion bigint GENERATED ALWAYS AS IDENTITY NOT NULL\n)"
    ),
    "store_delayed": (
        "INSERT INTO {table} (Headers, Body, Due) "
        "VALUES (%s, %s, COALESCE(%s::timestamptz, statement_timestamp() + %s::interval))"
    ),
    # select_due_delayed takes no FOR UPDATE SKIP LOCKED: the election leaves one mover, and row locks would
    # ask the runtime role for UPDATE on the delayed table. The move's DELETE inserts only the rows it
    # deleted, so a second mover's statement would find them gone and move nothing twice.
    "move_delayed_rows": (
        "WITH moved AS (DELETE FROM {table} "
        "WHERE RowVersion IN ({marks}) RETURNING Headers, Body, Due, RowVersion) "
        "INSERT INTO {destination} ({columns}) "
        "SELECT gen_random_uuid(), NULL, NULL, {recoverable}NULL, Headers, Body FROM moved "
        "ORDER BY Due, RowVersion"
    ),
    # The same move from a delayed table of NServiceBus.Transport.PostgreSql's layout (see
    # postgres_reference.py), whose rows are named by Id: the moved message keeps that Id, as the reference's
    # MoveDueDelayedMessageText keeps it.
    "move_reference_delayed_rows": (
        "WITH moved AS (DELETE FROM {table} WHERE Id IN ({marks}) RETURNING Id, Headers, Body, Due) "
        "INSERT INTO {destination} ({columns}) "
        "SELECT Id, NULL, NULL, {recoverable}NULL, Headers, Body FROM moved ORDER BY Due, Id"
    ),
    "try_lock_delayed_mover": (
        "SELECT CASE WHEN pg_try_advisory_lock(hashtextextended(%s, 0)) THEN 0 ELSE -1 END"
    ),
    "unlock_delayed_mover": "SELECT pg_advisory_unlock(hashtextextended(%s, 0))",
    # ---- the archive beside an error queue: the move is one statement, a DELETE whose returned row the
    # INSERT takes
    "create_archive_table": (
        "CREATE TABLE {table} (\n"
        "    Id uuid NOT NULL,\n"
        "    CorrelationId varchar(255) NULL,\n"
        "    ReplyToAddress varchar(255) NULL,\n"
        "    Recoverable boolean NULL,\n"
        "    Expires timestamptz NULL,\n"
        "    Headers text NOT NULL,\n"
        "    Body bytea NULL,\n"
        "    ErrorRowVersion bigint NOT NULL,\n"
        "    ArchivedAt timestamptz NOT NULL DEFAULT statement_timestamp()\n)"
    ),
    "archive_failed_row": (
        "WITH taken AS (DELETE FROM {table} WHERE RowVersion = %s "
        "RETURNING Id, CorrelationId, ReplyToAddress, {recoverable} AS Recoverable, Expires, Headers, "
        "Body, RowVersion) INSERT INTO {archive} (Id, CorrelationId, "
        "ReplyToAddress, Recoverable, Expires, Headers, Body, ErrorRowVersion) "
        "SELECT Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body, RowVersion "
        "FROM taken RETURNING ErrorRowVersion"
    ),
    # The way back: the archived rows of one Id into the error queue ({table}), in the order they left it.
    "restore_archived": (
        "WITH taken AS (DELETE FROM {archive} WHERE Id = %s RETURNING Id, CorrelationId, ReplyToAddress, "
        "Recoverable, Expires, Headers, Body, ErrorRowVersion), restored AS (INSERT INTO {table} ({columns}) "
        "SELECT Id, CorrelationId, ReplyToAddress, {recoverable}Expires, Headers, Body FROM taken "
        "ORDER BY ErrorRowVersion RETURNING 1) SELECT count(*) FROM restored"
    ),
    # The archive has no key of its own (nothing updates its rows, so a ctid stays the row's).
    "purge_archive_batch": (
        "DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {table} "
        "WHERE ArchivedAt < statement_timestamp() - %s * interval '1 second' LIMIT %s))"
    ),
    # ---- the depth history of the schema's queues
    "create_depth_samples_table": (
        "CREATE TABLE {table} (\n"
        "    QueueName varchar(128) NOT NULL,\n"
        "    SampledMinute bigint NOT NULL,\n"
        "    Messages bigint NOT NULL,\n"
        "    MessagesExact boolean NOT NULL,\n"
        "    Failed bigint NULL,\n"
        "    PRIMARY KEY (QueueName, SampledMinute)\n)"
    ),
    # ---- the subscription table, as the reference's PostgreSQL transport creates it ("SubscriptionRouting"
    # quoted, its columns unquoted and so folded to lower case, fillfactor=100)
    "create_subscription_table": (
        "CREATE TABLE {table} (\n"
        "    QueueAddress varchar({width}) NOT NULL,\n"
        "    Endpoint varchar({width}) NOT NULL,\n"
        "    Topic varchar({width}) NOT NULL,\n"
        "    PRIMARY KEY (Endpoint, Topic)\n) WITH (fillfactor=100)"
    ),
    # ---- storage: what deleted rows leave behind
    # INDEX_CLEANUP ON: with few dead rows on a large table a vacuum would otherwise skip the indexes and
    # leave the rows' line pointers behind, and pages holding them cannot be given back.
    "vacuum_table": "VACUUM (INDEX_CLEANUP ON) {table}",
    # May this role vacuum the table (schema, table), and its size in bytes with indexes: VACUUM skips, with
    # only a warning, a table the role does not own (PostgreSQL 17: or lacks MAINTAIN on); asking first
    # turns that into a clear refusal.
    "vacuum_check": (
        "SELECT pg_has_role(c.relowner, 'USAGE') "
        "OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) "
        "OR (CASE WHEN current_setting('server_version_num')::int >= 170000 "
        "THEN has_table_privilege(c.oid, 'MAINTAIN') ELSE false END), "
        "pg_total_relation_size(c.oid) "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')"
    ),
    "set_storage_parameters": "ALTER TABLE {table} SET ({settings})",
    # A table's (schema, table) oid, storage parameters, sizes in bytes, whether this role may read
    # pg_stat_user_tables, and its heap pages. The reloptions as text, one per line: drivers differ in what
    # they make of a text[] (psqlODBC: '{...}').
    "table_storage": (
        "SELECT c.oid, array_to_string(c.reloptions, chr(10)), pg_table_size(c.oid), pg_indexes_size(c.oid), "
        "has_table_privilege('pg_catalog.pg_stat_user_tables', 'SELECT'), "
        "pg_relation_size(c.oid) / current_setting('block_size')::int "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')"
    ),
    # the live and dead rows and last vacuums of a table (its oid)
    "table_statistics": (
        "SELECT n_live_tup, n_dead_tup, last_vacuum, last_autovacuum FROM pg_stat_user_tables "
        "WHERE relid = %s"
    ),
    # ---- the Spark bridge's own (see statements.BRIDGE)
    "bridge_older_than": "{column} < clock_timestamp() - make_interval(secs => %s)",
    "bridge_seconds_since": "EXTRACT(EPOCH FROM (clock_timestamp() - {column}))",
    # A stream's reads take KEY SHARE: the owner's own receives (UPDATEs of the Summary) go on beside them,
    # and a takeover (FOR UPDATE first) waits for them to end.
    "bridge_run_state_shared": "SELECT State FROM {runs} WHERE RunId = {p} FOR SHARE",
    "bridge_run_owner_shared": "SELECT Summary FROM {runs} WHERE RunId = {p} FOR KEY SHARE",
    "bridge_run_takeover": "SELECT Summary FROM {runs} WHERE RunId = {p} FOR UPDATE",
    # The receive's DELETE ... RETURNING feeds the staging INSERT. Parameters: the receive's batch size, then
    # run id, job attempt, partition; for a stream: the batch size, stream id, the position before the batch
    # (its rows keyed by that plus their rank in RowVersion order, as attempt 1 of partition 0).
    "bridge_move_to_staging": _move_to_staging("RowVersion", "%s, %s"),
    "bridge_move_to_stream_staging": _move_to_staging("%s + row_number() OVER (ORDER BY RowVersion)", "1, 0"),
    # Staged rows (run id, RowVersions as an array) unchanged to the error queue.
    "bridge_move_poison": (
        "WITH p AS (DELETE FROM {staging} WHERE RunId = %s AND RowVersion = ANY(%s) "
        "RETURNING Id, CorrelationId, ReplyToAddress, Headers, Body) "
        "INSERT INTO {error_queue} (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body) "
        "SELECT Id, CorrelationId, ReplyToAddress, true, NULL, Headers, Body FROM p"
    ),
    # psycopg's cursor.copy, inside the transaction; runs without parameters, so the name is written plain
    "bridge_copy_rows": "COPY {table} ({columns}) FROM STDIN",
    # ---- rows a drain holds in place in the input queue ({queue}: read_in_place), deleted in a transaction
    # that stays open. The lowest and highest RowVersion, each read from the index's end:
    "bridge_held_bounds": (
        "SELECT (SELECT RowVersion FROM {queue} ORDER BY RowVersion LIMIT 1), "
        "(SELECT RowVersion FROM {queue} ORDER BY RowVersion DESC LIMIT 1)"
    ),
    # Every row of a RowVersion window (after, up to inclusive), deleted without committing; returns
    # (RowVersion, expired). A plain DELETE writes each row once; it waits for a row another transaction
    # holds. The window bounds what any plan reads: the planner's estimate of "RowVersion > after" comes from
    # statistics that lag a queue whose keys only grow, and an estimate of a few rows where half the queue
    # lies makes it sort every row after the mark, once per batch. The headers are read once, by phase 2's
    # executors.
    "bridge_take_held_window": (
        "DELETE FROM {queue} WHERE RowVersion > %s AND RowVersion <= %s " + _HELD_RETURNING
    ),
    # As the window, but only the oldest rows no other transaction holds (after, up to, how many): the rows
    # are locked first, so each row is written twice.
    "bridge_take_held_batch": delete_taken(
        "SELECT RowVersion FROM {table} WHERE RowVersion > %s AND RowVersion <= %s "
        "ORDER BY RowVersion LIMIT %s FOR UPDATE SKIP LOCKED",
        _HELD_RETURNING,
    ).replace("{table}", "{queue}"),
    # where the next window starts after an empty one
    "bridge_next_row_version": f"SELECT min(RowVersion) FROM {{queue}} WHERE {AFTER_ROW_VERSION}",
    # Read from the index's end down to the mark only: below it lie the rows the hold deleted, which its own
    # transaction no longer sees and an unbounded max() would step through one by one.
    "bridge_newest_after": f"SELECT max(RowVersion) FROM {{queue}} WHERE {AFTER_ROW_VERSION}",
    # Set the transaction's lock timeout (parameter: the setting as text) and return the one before.
    "bridge_lock_timeout": "SELECT current_setting('lock_timeout'), set_config('lock_timeout', %s, true)",
    "bridge_held_slice": (
        "SELECT RowVersion, Id::text, Headers, Body, Expires FROM {queue} "
        "WHERE RowVersion >= %s AND RowVersion < %s ORDER BY RowVersion"
    ),
    # A slice's rows are consecutive RowVersions, so the index walk is the plan, whatever the estimate. From
    # statistics taken when the queue held other RowVersions, PostgreSQL estimated a few thousand rows for a
    # slice of 50,000 and planned a bitmap heap scan and a sort, which spilled every slice to disk
    # (work_mem); a larger estimate can plan a scan of the whole table. Local to the transaction.
    "bridge_held_reads_by_index": (
        "SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true)"
    ),
    # Read through another connection than the hold's: for the slices a transform left unread.
    "bridge_held_headers": (
        "SELECT RowVersion, Headers FROM {queue} WHERE RowVersion >= %s AND RowVersion < %s ORDER BY "
        "RowVersion"
    ),
    # Read through another connection than the hold's, which still sees them until the hold commits.
    "bridge_unreadable_held": (
        "SELECT Id, CorrelationId, ReplyToAddress, Headers, Body FROM {queue} "
        "WHERE RowVersion = ANY(%s) ORDER BY RowVersion"
    ),
    # One of them into the error queue, unchanged, as a recoverable message.
    "bridge_insert_unreadable": (
        "INSERT INTO {error_queue} (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body) "
        "VALUES (%s, %s, %s, true, NULL, %s, %s)"
    ),
}

# What a returned connection's session is brought back to (Dialect.reset_session): the session user and
# role it logged in with, then every parameter at its session default (what the server, database, role and
# the connect string's options chose: default_transaction_isolation, search_path, statement_timeout,
# lock_timeout...). ``role`` and ``session_authorization`` are outside RESET ALL. Not DISCARD ALL: it cannot
# run in a transaction block, and it would also drop psycopg's prepared statements (prepare_threshold is
# psycopg's default, 5), the session's advisory locks and its LISTENs.
RESET_SESSION = "RESET SESSION AUTHORIZATION; RESET ROLE; RESET ALL"
# What prepare_connection left backend_flush_after at, read once per new connection (NULL where the server
# has no such parameter). Reading pg_settings again at each reset, as prepare_connection does, would cost
# ten times the reset itself (about 0.45 ms against 0.05 ms on a local server).
READ_BACKEND_FLUSH_AFTER = "SELECT current_setting('backend_flush_after', true)"
_SETTING_VALUE = re.compile(r"[0-9]+[A-Za-z]*")
# psycopg's per-connection transaction characteristics, None until someone sets them.
_PSYCOPG_TRANSACTION_CHARACTERISTICS = ("isolation_level", "read_only", "deferrable")

_TUPLES_OK = 2  # psycopg.pq.ExecStatus.TUPLES_OK: the statement returned rows
_NO_RESULT = object()

_TRANSIENT_SQLSTATES = {
    "40001": "serialization failure",
    "40P01": "deadlock",
    "55P03": "lock not available",
    "57014": "statement cancelled",
    "57P01": "server shutting down",
    "57P02": "server crashed",
    "57P03": "server not accepting connections yet",
    "53300": "too many connections",
}


class PostgresDialect(PostgresStorage, PostgresTransactionState):
    name = "postgresql"
    display_name = "PostgreSQL"
    default_schema = "public"
    addresses_quoted = True
    max_identifier_length = 63
    identifier_length_in_bytes = True
    max_body_bytes = 1024**3 - 1024**2  # bytea is capped at 1 GiB; leave room for the protocol message
    send_batch_rows = 1000
    placeholder = "%s"
    clock = "statement_timestamp()"
    statements = STATEMENTS
    fragments = FRAGMENTS
    driver_connection_class = "psycopg.Connection"
    sqlalchemy_dialect = "postgresql+psycopg"
    bridge_column_types = BridgeColumnTypes(
        "text", "timestamptz", "uuid", "bytea", "integer", "varchar(200)", "varchar(450)", "timestamptz"
    )
    bridge_stage_rows_limit = 1000
    bridge_insert_parameters = 30000
    bridge_bind_seconds = staticmethod(float)
    bridge_copies_rows = True  # psycopg's cursor.copy, inside the transaction
    bridge_reads_binary = True  # bodies skip bytea's hex text both ways
    bridge_moves_server_side = True  # the receive's DELETE ... RETURNING feeds the staging INSERT
    releases_message_savepoints = False  # a batch's message savepoints nest (see Dialect)
    # Autovacuum looks at a queue table after every 1,000 dead rows instead of after a fifth of the table,
    # and sleeps 0.5 ms per cost limit of pages instead of the server's 2: a drained table's pages are all
    # empty, and the vacuum that follows gives them back to the file system by itself. Unthrottled (0), its
    # I/O slowed the end of a 10,000,000-row drain below 0.8x of its start (docs/history/deep-queues.md,
    # "The vacuum's cost delay", has the figures).
    # Index cleanup always: a vacuum that finds few dead rows on a large table otherwise skips the indexes
    # and leaves the rows' line pointers in the pages, which are then not empty and never given back.
    default_storage_parameters = (
        ("autovacuum_vacuum_scale_factor", "0"),
        ("autovacuum_vacuum_threshold", "1000"),
        ("autovacuum_vacuum_cost_delay", "0.5"),
        ("vacuum_index_cleanup", "on"),
    )

    def quote(self, identifier: str) -> str:
        # psycopg reads '%' in statement text as a placeholder; every statement runs with a parameter
        # sequence (empty if it has none), so a literal '%' in a name is written '%%'.
        return '"' + identifier.replace('"', '""').replace("%", "%%") + '"'

    def display_sql(self, sql: str) -> str:
        return sql.replace("%%", "%")

    def check_names(self, resolved: QueueAddress, current_catalog: str | None) -> None:
        if resolved.catalog is not None and resolved.catalog != current_catalog:
            raise InvalidQueueName(
                f"queue {resolved} names the database {resolved.catalog!r}, but PostgreSQL cannot reach "
                f"another database than the connected one ({current_catalog!r}); open a transport on it"
            )

    def qualified_name(self, address: QueueAddress) -> str:
        parts = [address.catalog, address.schema, address.table]
        return ".".join(self.quote(part) for part in parts if part is not None)

    # ---- provisioning --------------------------------------------------------------------------
    def create_table(self, address: QueueAddress, options: TableOptions) -> str:
        body_string = ",\n    " + self.sql("body_string_column") if options.body_string else ""
        return self.sql("create_table", address, body_string=body_string, storage=self._with_storage(options))

    def storage_parameters_of(self, options: TableOptions) -> StorageParameters:
        """The storage parameters a new table gets: the options' own, else this engine's defaults."""
        if options.storage_parameters is None:
            return self.default_storage_parameters
        return options.storage_parameters  # type: ignore[return-value]  # normalised by TableOptions

    def _with_storage(self, options: TableOptions) -> str:
        parameters = self.storage_parameters_of(options)
        if not parameters:
            return ""
        return " WITH (\n" + ",\n".join(f"    {name} = {value}" for name, value in parameters) + "\n)"

    def indexes(self, address: QueueAddress, options: TableOptions) -> list[IndexSpec]:
        return [
            self.index_spec(address, "RowVersion", "create_rowversion_index"),
            self.index_spec(address, "Expires", "create_expires_index"),
        ]

    def lock_for_create(
        self, address: QueueAddress, current_catalog: str | None = None
    ) -> tuple[str, Sequence[Any]]:
        # Advisory locks belong to one database, so the catalog needs no place in the key.
        return self.sql("lock_for_create"), (f"sqlqueue:{self.qualified_name(address)}",)

    def table_exists(self, address: QueueAddress) -> tuple[str, Sequence[Any]]:
        return self.sql("table_exists"), (address.schema, address.table)

    def index_exists(self, address: QueueAddress, index_name: str) -> tuple[str, Sequence[Any]]:
        return self.sql("index_exists"), (address.schema, index_name)

    def column_exists(self, address: QueueAddress, column: str) -> tuple[str, Sequence[Any]]:
        return self.sql("column_exists"), (address.schema, address.table, column.lower())

    def table_layout(self, cursor: Any, address: QueueAddress) -> str | None:
        cursor.execute(self.sql("table_layout"), (self.display_sql(self.qualified_name(address)),))
        rows = self.fetch_rows(cursor)
        seq_or_due, row_version, columns = rows[0] if rows else (0, 0, 0)
        if not columns:
            return None
        return "postgresql-transport" if seq_or_due and not row_version else "sqlserver-transport"

    def recoverable_default_missing(self, address: QueueAddress) -> tuple[str, Sequence[Any]]:
        return self.sql("recoverable_default_missing"), (self.display_sql(self.qualified_name(address)),)

    # ---- runtime -------------------------------------------------------------------------------
    def wake_up_channel(self, address: QueueAddress) -> str:
        # A hash of the qualified table name: at most 63 bytes for any name, and only [a-z0-9_], so it is
        # safe as a literal and as an identifier.
        digest = hashlib.sha256(self.qualified_name(address).encode("utf-8")).hexdigest()[:24]
        return f"sqlqueue_{digest}"

    def notify_statement(self, address: QueueAddress) -> str:
        return f"SELECT pg_notify('{self.wake_up_channel(address)}', '')"

    def listen_statement(self, address: QueueAddress) -> str:
        return f'LISTEN "{self.wake_up_channel(address)}"'

    def wait_for_notification(self, connection: Any, timeout: float) -> bool:
        for _ in connection.notifies(timeout=timeout, stop_after=1):
            return True
        return False

    def bulk_send_check(self, address: QueueAddress) -> tuple[str, Sequence[Any]]:
        return self.sql("bulk_send_check"), (self.display_sql(self.qualified_name(address)),)

    def bulk_send(
        self, cursor: Any, address: QueueAddress, rows: Sequence[Sequence[Any]], with_recoverable: bool
    ) -> bool:
        # Binary COPY writes a batch of 1 KB messages about twice as fast as a multi-row INSERT: no 7
        # parameters per row to bind and plan. COPY cannot compute Expires from the database clock, so a
        # batch with any time to be received takes the INSERT; Expires is left to its default (NULL).
        if not type(cursor).__module__.startswith("psycopg") or any(row[3] is not None for row in rows):
            return False
        columns = _COPY_COLUMNS if with_recoverable else _COPY_COLUMNS_WITHOUT_RECOVERABLE
        # COPY runs without parameters, so psycopg leaves '%%' as it is: the name is written plain.
        with cursor.copy(
            f"COPY {self.display_sql(self.qualified_name(address))} ({columns}) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            if with_recoverable:
                copy.set_types(_COPY_TYPES)
                for message_id, correlation_id, reply_to_address, _, headers, body in rows:
                    copy.write_row((message_id, correlation_id, reply_to_address, True, headers, body))
            else:
                copy.set_types(_COPY_TYPES_WITHOUT_RECOVERABLE)
                for message_id, correlation_id, reply_to_address, _, headers, body in rows:
                    copy.write_row((message_id, correlation_id, reply_to_address, headers, body))
        cursor.execute(self.notify_statement(address))
        return True

    def queue_tables(self, schema: str | None) -> tuple[str, Sequence[Any]]:
        return self.sql("queue_tables"), (schema or self.default_schema,)

    def row_lock_probe(self, address: QueueAddress) -> tuple[str, Sequence[Any]]:
        return self.sql("row_lock_probe"), (self.display_sql(self.qualified_name(address)),) * 2

    def inspect(self, cursor: Any, address: QueueAddress, options: TableOptions) -> list[Finding]:
        cursor.execute(self.sql("inspect_indexes"), (address.schema, address.table))
        first_columns = {name for name, _partial in cursor.fetchall()}
        return self.missing_indexes(address, options, first_columns)

    # ---- delayed delivery ----------------------------------------------------------------------
    def store_delayed_params(
        self, headers: str, body: bytes, deliver_at: datetime | None, delay: timedelta | None
    ) -> tuple[Any, ...]:
        return (headers, body, deliver_at, delay)

    def _mover_lock_key(self, address: QueueAddress) -> str:
        return f"sqlqueue-mover:{self.qualified_name(address)}"

    def try_lock_delayed_mover(self, address: QueueAddress) -> tuple[str, Sequence[Any]]:
        return self.sql("try_lock_delayed_mover"), (self._mover_lock_key(address),)

    def unlock_delayed_mover(self, address: QueueAddress) -> tuple[str, Sequence[Any]]:
        return self.sql("unlock_delayed_mover"), (self._mover_lock_key(address),)

    def bridge_expires_value(self, expires: datetime | None) -> Any:
        return None if expires is None else expires.astimezone(timezone.utc)

    # ---- driver glue ---------------------------------------------------------------------------
    def receive_rows(
        self,
        cursor: Any,
        address: QueueAddress,
        statement: str,
        max_messages: int,
        after: int | None = None,
    ) -> list[Any]:
        if not type(cursor).__module__.startswith("psycopg"):  # psqlODBC, or a wrapper around a cursor
            return super().receive_rows(cursor, address, statement, max_messages, after)
        # Binary results: bodies come as their bytes instead of hex text twice their size, which the
        # server would encode and the client decode (about 1.5 µs of client CPU per 1 KB message).
        params = (max_messages,) if after is None else (after, max_messages)
        cursor.execute(statement, params, binary=True)
        return self.fetch_rows(cursor)

    def fetch_rows(self, cursor: Any) -> list[Any]:
        # psycopg builds cursor.description's column objects anew on each access (a tenth of a one-message
        # receive's client time); the result's status says the same
        result = getattr(cursor, "pgresult", _NO_RESULT)
        if result is _NO_RESULT:
            return super().fetch_rows(cursor)
        if result is None or result.status != _TUPLES_OK:
            return []
        return cursor.fetchall()  # type: ignore[no-any-return]

    def prepare_connection(self, connection: Any) -> None:
        connection.autocommit = False
        write_back_own_evictions(connection, self.is_connection_lost)

    def session_defaults(self, connection: Any) -> str | None:
        """The ``RESET`` statements plus the ``SET`` of what prepare_connection left ``backend_flush_after``
        at (its own 256kB, or what the server, role or connect string chose), read in one autocommit round
        trip; a value that is not a plain size is not repeated."""
        connection.autocommit = True
        try:
            cursor = connection.cursor()
            try:
                cursor.execute(READ_BACKEND_FLUSH_AFTER)
                rows = self.fetch_rows(cursor)
            finally:
                cursor.close()
        finally:
            connection.autocommit = False
        value = rows[0][0] if rows else None
        if value is None or not _SETTING_VALUE.fullmatch(str(value)):
            return RESET_SESSION
        return f"{RESET_SESSION}; SET backend_flush_after = '{value}'"

    def reset_session(self, connection: Any, defaults: Any) -> None:
        """One round trip, in autocommit (so no BEGIN or COMMIT of its own, and its statements undo each
        other if one fails): ``defaults``, the statements :meth:`session_defaults` made (only
        :data:`RESET_SESSION` if the ``SET`` is refused). psycopg's own transaction characteristics
        (``isolation_level``, ``read_only``, ``deferrable``, sent with each BEGIN) go back to None and
        autocommit back off."""
        for characteristic in _PSYCOPG_TRANSACTION_CHARACTERISTICS:
            if getattr(connection, characteristic, None) is not None:
                setattr(connection, characteristic, None)
        connection.autocommit = True
        try:
            cursor = connection.cursor()
            try:
                cursor.execute(defaults or RESET_SESSION)
            except Exception as error:
                if self.is_connection_lost(error) or not defaults or defaults == RESET_SESSION:
                    raise
                cursor.execute(RESET_SESSION)
            finally:
                cursor.close()
        finally:
            connection.autocommit = False

    def classify(self, error: BaseException, address: QueueAddress | None = None) -> SqlQueueError | None:
        import psycopg

        if not isinstance(error, psycopg.Error):
            return None
        sqlstate = getattr(error, "sqlstate", None) or ""
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        where = f" (queue {address})" if address is not None else ""
        if sqlstate in ("42P01", "3F000"):
            return QueueNotFound(f"{detail}{where}: create the queue first (provisioning needs DDL rights)")
        if sqlstate == "42501":
            return PermissionDenied(
                f"{detail}{where}. Runtime roles need SELECT, INSERT and DELETE on the queue tables (and "
                "UPDATE on one column with lock_mode='row'); creating queues needs CREATE on the schema"
            )
        if sqlstate in _TRANSIENT_SQLSTATES:
            return TransientDatabaseError(f"{_TRANSIENT_SQLSTATES[sqlstate]}: {detail}{where}")
        if isinstance(error, psycopg.OperationalError | psycopg.InterfaceError) or sqlstate.startswith("08"):
            return TransientDatabaseError(f"connection to PostgreSQL lost or refused: {detail}{where}")
        return None

    def is_deadlock(self, error: BaseException) -> bool:
        return getattr(error, "sqlstate", None) == "40P01"

    def is_connection_lost(self, error: BaseException) -> bool:
        import psycopg

        if isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
            return True
        sqlstate = getattr(error, "sqlstate", None) or ""
        return sqlstate.startswith("08") or sqlstate in ("57P01", "57P02", "57P03")
