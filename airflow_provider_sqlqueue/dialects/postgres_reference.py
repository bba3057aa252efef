"""PostgreSQL queue tables in the layout of NServiceBus.Transport.PostgreSql, the reference's own PostgreSQL
transport: ``Id uuid PRIMARY KEY, Expires timestamp, Headers text, Body bytea, Seq serial UNIQUE``.

Such a table has no CorrelationId, ReplyToAddress or Recoverable column (their values travel in the headers
only, as the reference reads them), orders its rows by ``Seq`` instead of ``RowVersion``, and keeps Expires
as the UTC wall-clock time without a zone (the reference writes ``now() AT TIME ZONE 'UTC'``). A queue finds
its table's layout from the catalog (:func:`~airflow_provider_sqlqueue.dialects.dialect_for_table`), so an
endpoint uses a table the reference created without any option.

The statements here take the parameters the package's own PostgreSQL statements take and return the rows
in the same column order: a send binds Id, CorrelationId, ReplyToAddress, time to be received, Headers and
Body and this table keeps what it has columns for; a receive returns NULL CorrelationId and ReplyToAddress,
Seq as the RowVersion and Expires as UTC. Everything above the dialect works unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from ..model.address import QueueAddress
from .base import IndexSpec, TableOptions
from .postgres import FRAGMENTS as PACKAGE_FRAGMENTS
from .postgres import STATEMENTS as PACKAGE_STATEMENTS
from .postgres import PostgresDialect, delete_taken
from .statements import StatementTable

__all__ = ["REFERENCE_LAYOUT", "PostgresReferenceLayout"]

REFERENCE_LAYOUT = "postgresql-transport"

# The reference's clock: the UTC wall-clock time, as its timestamp (without time zone) Expires holds it.
UTC_NOW = "(statement_timestamp() AT TIME ZONE 'UTC')"
_EXPIRED = f"(Expires IS NOT NULL AND Expires <= {UTC_NOW})"
_RETURNING = (
    "RETURNING Id, NULL::varchar AS CorrelationId, NULL::varchar AS ReplyToAddress, "
    f"{_EXPIRED} AS Expired, Headers, Body, Seq::bigint AS RowVersion, Expires AT TIME ZONE 'UTC' AS Expires"
)
_ROW = "Id, NULL::varchar, NULL::varchar, Headers, Body, Seq::bigint, Expires AT TIME ZONE 'UTC'"
_UNEXPIRED = f"WHERE Expires IS NULL OR Expires > {UTC_NOW}"
_AFTER = "Seq > (SELECT %s::bigint)"
_THROUGH = "Seq <= (SELECT %s::bigint)"
_SKIP_LOCKED = "ORDER BY Seq LIMIT %s FOR UPDATE SKIP LOCKED"
_ADVISORY_ROW_LOCK = "pg_try_advisory_xact_lock((tableoid::int8 << 32) | (Seq & 4294967295))"
_BY_ADVISORY_LOCK = "ORDER BY Seq OFFSET 0) AS oldest WHERE " + _ADVISORY_ROW_LOCK + " LIMIT %s"
_OLDEST_UNHELD = "SELECT Seq FROM {table} ORDER BY Seq LIMIT 1 FOR KEY SHARE SKIP LOCKED"
_NEWEST_UNHELD = "SELECT Seq FROM {table} ORDER BY Seq DESC LIMIT 1 FOR KEY SHARE SKIP LOCKED"
# A send's values, in the order the package's PostgreSQL statements bind them; the table keeps Id, Headers
# and Body, and the Expires the time to be received gives (NULL when it is NULL).
_SENT_ROW = "(%s::uuid, %s::varchar, %s::varchar, %s::interval, %s::text, %s::bytea)"
_RAW_ROW = "(%s::uuid, %s::varchar, %s::varchar, NULL::interval, %s::text, %s::bytea)"
_COLUMNS = "Id, Expires, Headers, Body"
_COPY_COLUMNS = "Id, Headers, Body"
_COPY_TYPES = ["uuid", "text", "bytea"]

FRAGMENTS = {
    **PACKAGE_FRAGMENTS,
    "columns": _COLUMNS,
    "columns_without_recoverable": _COLUMNS,
    "send_row": _SENT_ROW,
    "send_row_without_recoverable": _SENT_ROW,
    "raw_row": _RAW_ROW,
    "raw_row_without_recoverable": _RAW_ROW,
    "after": _AFTER,
}

STATEMENTS: StatementTable = {
    **PACKAGE_STATEMENTS,
    # The reference's CreateQueueText (Particular/NServiceBus.SqlServer 214c4e8f, PostgreSqlConstants.cs),
    # with this package's storage parameters and optional BodyString.
    "create_table": (
        "CREATE TABLE {table} (\n"
        "    Id uuid NOT NULL PRIMARY KEY,\n"
        "    Expires timestamp NULL,\n"
        "    Headers text NOT NULL,\n"
        "    Body bytea NULL,\n"
        "    Seq serial NOT NULL UNIQUE{body_string}\n){storage}"
    ),
    "insert": (
        "WITH sent AS (INSERT INTO {table} ({columns}) "
        f"SELECT Id, {UTC_NOW} + TimeToBeReceived, Headers, Body FROM (VALUES {{values}}) "
        "AS sent_rows (Id, CorrelationId, ReplyToAddress, TimeToBeReceived, Headers, Body) RETURNING 1) "
        "SELECT pg_notify('{channel}', '') FROM (SELECT 1 FROM sent LIMIT 1) AS any_sent"
    ),
    "receive_batch": delete_taken(f"SELECT Seq FROM {{table}} {_SKIP_LOCKED}", _RETURNING, "Seq"),
    "receive_batch_after": delete_taken(
        f"SELECT Seq FROM {{table}} WHERE {_AFTER} {_SKIP_LOCKED}", _RETURNING, "Seq"
    ),
    "receive_batch_through": delete_taken(
        f"SELECT Seq FROM {{table}} WHERE {_THROUGH} {_SKIP_LOCKED}", _RETURNING, "Seq"
    ),
    "peek_estimate": f"SELECT COALESCE(({_NEWEST_UNHELD}) - ({_OLDEST_UNHELD}) + 1, 0)",
    "peek_bounds": f"SELECT ({_OLDEST_UNHELD})::bigint, ({_NEWEST_UNHELD})::bigint",
    "purge_expired_batch": delete_taken(
        f"SELECT Seq FROM {{table}} WHERE Expires < {UTC_NOW} LIMIT %s FOR UPDATE SKIP LOCKED", key="Seq"
    ),
    "receive_batch_without_row_locks": delete_taken(
        f"SELECT Seq FROM (SELECT Seq, tableoid FROM {{table}} {_BY_ADVISORY_LOCK}", _RETURNING, "Seq"
    ),
    "receive_batch_through_without_row_locks": delete_taken(
        f"SELECT Seq FROM (SELECT Seq, tableoid FROM {{table}} WHERE {_THROUGH} " + _BY_ADVISORY_LOCK,
        _RETURNING,
        "Seq",
    ),
    "peek_estimate_without_row_locks": "SELECT COALESCE(max(Seq) - min(Seq) + 1, 0) FROM {table}",
    "peek_bounds_without_row_locks": "SELECT min(Seq)::bigint, max(Seq)::bigint FROM {table}",
    "purge_expired_batch_without_row_locks": delete_taken(
        "SELECT Seq FROM (SELECT Seq, tableoid FROM {table} "
        f"WHERE Expires < {UTC_NOW} OFFSET 0) AS expired WHERE {_ADVISORY_ROW_LOCK} LIMIT %s",
        key="Seq",
    ),
    # The delayed mover's move from this package's delayed table (RowVersion, Due) into a queue of this
    # layout: a new Id, Headers and Body as stored, no Expires, in Due order (Seq follows the insert).
    "move_delayed_rows": (
        "WITH moved AS (DELETE FROM {table} "
        "WHERE RowVersion IN ({marks}) RETURNING Headers, Body, Due, RowVersion) "
        "INSERT INTO {destination} (Id, Headers, Body) "
        "SELECT gen_random_uuid(), Headers, Body FROM moved ORDER BY Due, RowVersion"
    ),
    # The same move from a delayed table of this layout (named by Id): the message keeps the row's Id, as
    # the reference's MoveDueDelayedMessageText keeps it.
    "move_reference_delayed_rows": (
        "WITH moved AS (DELETE FROM {table} WHERE Id IN ({marks}) RETURNING Id, Headers, Body, Due) "
        "INSERT INTO {destination} (Id, Headers, Body) SELECT Id, Headers, Body FROM moved ORDER BY Due, Id"
    ),
    # ---- the reference's delayed table (CreateDelayedMessageStoreText): Id uuid, Headers, Body and Due
    # timestamptz, no RowVersion, so the mover names its rows by Id. Due is compared with the database clock
    # as a timestamptz, never with the UTC wall-clock time this layout's queues keep, which a session's time
    # zone would shift. A store is the package's INSERT of Headers, Body and Due; Id takes its default.
    "create_delayed_table": (
        "CREATE TABLE {table} (\n"
        "    Id uuid NOT NULL DEFAULT gen_random_uuid() PRIMARY KEY,\n"
        "    Headers text NOT NULL,\n"
        "    Body bytea NULL,\n"
        "    Due timestamptz NOT NULL\n) WITH (fillfactor=100)"
    ),
    "select_due_delayed": (
        "SELECT Id, Headers FROM {table} WHERE Due <= statement_timestamp() ORDER BY Due, Id LIMIT %s"
    ),
    "select_delayed_rows": "SELECT Headers, Body, Id FROM {table} WHERE Id IN ({marks})",
    "delete_delayed_rows": "DELETE FROM {table} WHERE Id IN ({marks})",
    "next_due_delayed": "SELECT statement_timestamp(), min(Due) FROM {table}",
    # A failed message deleted from an error queue of this layout into its archive (this package's archive
    # table: no CorrelationId, ReplyToAddress or Recoverable to keep; Expires from UTC wall-clock time).
    "archive_failed_row": (
        "WITH taken AS (DELETE FROM {table} WHERE Seq = %s "
        "RETURNING Id, Expires AT TIME ZONE 'UTC' AS Expires, Headers, Body, Seq) INSERT INTO {archive} (Id, "
        "CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body, ErrorRowVersion) "
        "SELECT Id, NULL, NULL, NULL, Expires, Headers, Body, Seq FROM taken RETURNING ErrorRowVersion"
    ),
    # The way back into an error queue of this layout: Id, Expires (as UTC wall-clock time), Headers and Body.
    "restore_archived": (
        "WITH taken AS (DELETE FROM {archive} WHERE Id = %s RETURNING Id, Expires, Headers, Body, "
        "ErrorRowVersion), restored AS (INSERT INTO {table} (Id, Expires, Headers, Body) "
        "SELECT Id, Expires AT TIME ZONE 'UTC', Headers, Body FROM taken ORDER BY ErrorRowVersion "
        "RETURNING 1) SELECT count(*) FROM restored"
    ),
    # The binary COPY of bulk_send sends each value in its column type's wire format.
    "bulk_send_check": (
        "SELECT count(*) FILTER (WHERE (lower(a.attname), format_type(a.atttypid, NULL)) IN ("
        "('id', 'uuid'), ('headers', 'text'), ('body', 'bytea'))) = 3 "
        "FROM pg_attribute a WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped"
    ),
    # ---- reads of tools (browse, gauges, the error queue's pages), as the package's, in Seq order
    "browse": f"SELECT {_ROW} FROM {{table}} {_UNEXPIRED} ORDER BY Seq LIMIT %s",
    "oldest_headers": f"SELECT Seq::bigint, Headers FROM {{table}} {_UNEXPIRED} ORDER BY Seq LIMIT 1",
    "failed_page": f"SELECT Seq::bigint, Id, Headers FROM {{table}} WHERE {_AFTER} ORDER BY Seq LIMIT %s",
    "failed_newest": "SELECT Seq::bigint, Id, Headers FROM {table} ORDER BY Seq DESC LIMIT %s",
    "failed_messages": f"SELECT {_ROW} FROM {{table}} WHERE Id = %s ORDER BY Seq",
    "take_failed_row": (
        "DELETE FROM {table} WHERE Seq = %s RETURNING Id, NULL::varchar, NULL::varchar, Headers, Body"
    ),
}


class PostgresReferenceLayout(PostgresDialect):
    """PostgreSQL, on a queue table of NServiceBus.Transport.PostgreSql's layout."""

    layout: ClassVar[str] = REFERENCE_LAYOUT
    clock = UTC_NOW
    statements = STATEMENTS
    fragments = FRAGMENTS

    def indexes(self, address: QueueAddress, options: TableOptions) -> list[IndexSpec]:
        # Seq's UNIQUE constraint is its index; the Expires index is this package's, for the purge.
        return [self.index_spec(address, "Expires", "create_expires_index")]

    def bulk_send(
        self, cursor: Any, address: QueueAddress, rows: Sequence[Sequence[Any]], with_recoverable: bool
    ) -> bool:
        # The binary COPY of the package's layout, of the three columns this one has that a send without a
        # time to be received fills (Expires stays NULL).
        if not type(cursor).__module__.startswith("psycopg") or any(row[3] is not None for row in rows):
            return False
        table = self.display_sql(self.qualified_name(address))
        with cursor.copy(f"COPY {table} ({_COPY_COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(_COPY_TYPES)
            for message_id, _, _, _, headers, body in rows:
                copy.write_row((message_id, headers, body))
        cursor.execute(self.notify_statement(address))
        return True
