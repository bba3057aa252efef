"""PostgreSQL: the Spark bridge's control tables and its statements that only PostgreSQL runs: the receive
moving its rows into staging in one statement (a data-modifying CTE), COPY into sink tables, and the rows a
drain holds in place in the input queue (``read_in_place``), deleted in a transaction that stays open."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from ..model.address import QueueAddress
from .base import Dialect
from .bridge import BridgeColumnTypes, SecondsBinding
from .postgres_picks import AFTER_ROW_VERSION, delete_taken

_NOW = "clock_timestamp()"
_HELD_RETURNING = "RETURNING RowVersion, (Expires IS NOT NULL AND Expires <= statement_timestamp())"
_ERROR_QUEUE_COLUMNS = "Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body"


class PostgresBridge(Dialect):
    """PostgresDialect's bridge statements."""

    bridge_column_types = BridgeColumnTypes(
        text="text",
        timestamp="timestamptz",
        uuid="uuid",
        blob="bytea",
        integer="integer",
        key="varchar(200)",
        queue_name="varchar(450)",
        expires="timestamptz",
    )
    bridge_stage_rows_limit = 1000
    bridge_insert_parameters = 30000
    bridge_true = "true"
    # the uuid's text comes from the server far cheaper than str() of a UUID on the executors
    bridge_id_column = "Id::text"
    bridge_copies_rows = True  # psycopg's cursor.copy, inside the transaction
    bridge_reads_binary = True  # bodies skip bytea's hex text both ways
    bridge_moves_server_side = True  # the receive's DELETE ... RETURNING feeds the staging INSERT

    def bridge_now(self) -> str:
        return _NOW

    def bridge_older_than(self, column: str) -> tuple[str, SecondsBinding]:
        return f"{column} < {_NOW} - make_interval(secs => %s)", float

    def bridge_seconds_since(self, column: str) -> str:
        return f"EXTRACT(EPOCH FROM ({_NOW} - {column}))"

    def bridge_read_locked(self, runs: str, column: str, lock: str) -> str:
        # A stream's reads take KEY SHARE: the owner's own receives (UPDATEs of the Summary) go on beside
        # them, and a takeover (FOR UPDATE first) waits for them to end.
        return f"SELECT {column} FROM {runs} WHERE RunId = {self.placeholder} FOR {lock}"

    def bridge_expires_value(self, expires: datetime | None) -> Any:
        if expires is None:
            return None
        return expires.astimezone(timezone.utc)

    # ---- moves on the server ---------------------------------------------------------------------
    def bridge_move_to_staging(self, receive_batch: str, staging: str) -> str:
        return self._bridge_move(receive_batch, staging, "RowVersion", "%s, %s")

    def bridge_move_to_stream_staging(self, receive_batch: str, staging: str) -> str:
        position = "%s + row_number() OVER (ORDER BY RowVersion)"
        return self._bridge_move(receive_batch, staging, position, "1, 0")

    def _bridge_move(self, receive_batch: str, staging: str, key: str, attempt_and_part: str) -> str:
        return (
            f"WITH m AS ({receive_batch}), "
            f"s AS (INSERT INTO {staging} (RunId, RowVersion, Id, CorrelationId, ReplyToAddress, "
            "Expires, Headers, Body, JobAttempt, Part) "
            f"SELECT %s, {key}, Id, CorrelationId, ReplyToAddress, Expires, Headers, Body, "
            f"{attempt_and_part} FROM m WHERE NOT Expired RETURNING RowVersion, Headers) "
            "SELECT RowVersion, Headers, false FROM s "
            "UNION ALL SELECT RowVersion, NULL, true FROM m WHERE Expired"
        )

    def bridge_move_poison(self, staging: str, error_queue: QueueAddress) -> str:
        return (
            f"WITH p AS (DELETE FROM {staging} WHERE RunId = %s AND RowVersion = ANY(%s) "
            "RETURNING Id, CorrelationId, ReplyToAddress, Headers, Body) "
            f"INSERT INTO {self.qualified_name(error_queue)} ({_ERROR_QUEUE_COLUMNS}) "
            "SELECT Id, CorrelationId, ReplyToAddress, true, NULL, Headers, Body FROM p"
        )

    def bridge_copy_rows(self, table: QueueAddress, columns: Sequence[str]) -> str:
        names = ", ".join(self.quote(column) for column in columns)
        # COPY runs without parameters, so the '%%' that quoting writes for psycopg goes back to '%'
        return self.display_sql(f"COPY {self.qualified_name(table)} ({names}) FROM STDIN")

    # ---- rows held in place (``read_in_place``) --------------------------------------------------
    def bridge_held_bounds(self, queue: QueueAddress) -> str:
        # each read from the index's end
        table = self.qualified_name(queue)
        return (
            f"SELECT (SELECT RowVersion FROM {table} ORDER BY RowVersion LIMIT 1), "
            f"(SELECT RowVersion FROM {table} ORDER BY RowVersion DESC LIMIT 1)"
        )

    def bridge_take_held_window(self, queue: QueueAddress) -> str:
        # A plain DELETE writes each row once; it waits for a row another transaction holds. The window
        # bounds what any plan reads: the planner's estimate of ``RowVersion > after`` comes from statistics
        # that lag a queue whose keys only grow, and an estimate of a few rows where half the queue lies
        # makes it sort every row after the mark, once per batch. The headers are read once, by phase 2's
        # executors.
        return (
            f"DELETE FROM {self.qualified_name(queue)} WHERE RowVersion > %s AND RowVersion <= %s "
            f"{_HELD_RETURNING}"
        )

    def bridge_take_held_batch(self, queue: QueueAddress) -> str:
        # the rows are locked first, so each row is written twice
        table = self.qualified_name(queue)
        return delete_taken(
            table,
            f"SELECT RowVersion FROM {table} WHERE RowVersion > %s AND RowVersion <= %s "
            "ORDER BY RowVersion LIMIT %s FOR UPDATE SKIP LOCKED",
            _HELD_RETURNING,
        )

    def bridge_next_row_version(self, queue: QueueAddress) -> str:
        # where the next window starts after an empty one
        return f"SELECT min(RowVersion) FROM {self.qualified_name(queue)} WHERE {AFTER_ROW_VERSION}"

    def bridge_newest_after(self, queue: QueueAddress) -> str:
        # read from the index's end down to the mark only: below it lie the rows the hold deleted, which its
        # own transaction no longer sees and an unbounded max() would step through one by one
        return f"SELECT max(RowVersion) FROM {self.qualified_name(queue)} WHERE {AFTER_ROW_VERSION}"

    def bridge_lock_timeout(self) -> str:
        return "SELECT current_setting('lock_timeout'), set_config('lock_timeout', %s, true)"

    def bridge_held_slice(self, queue: QueueAddress) -> str:
        return (
            f"SELECT RowVersion, Id::text, Headers, Body, Expires FROM {self.qualified_name(queue)} "
            "WHERE RowVersion >= %s AND RowVersion < %s ORDER BY RowVersion"
        )

    def bridge_held_reads_by_index(self) -> str:
        # A slice's rows are consecutive RowVersions, so the index walk is the plan, whatever the estimate.
        # From statistics taken when the queue held other RowVersions, PostgreSQL estimated a few thousand
        # rows for a slice of 50,000 and planned a bitmap heap scan and a sort, which spilled every slice to
        # disk (work_mem); a larger estimate can plan a scan of the whole table. Local to the transaction.
        return (
            "SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true)"
        )

    def bridge_held_headers(self, queue: QueueAddress) -> str:
        # read through another connection than the hold's: for the slices a transform left unread
        return (
            f"SELECT RowVersion, Headers FROM {self.qualified_name(queue)} "
            "WHERE RowVersion >= %s AND RowVersion < %s ORDER BY RowVersion"
        )

    def bridge_unreadable_held(self, queue: QueueAddress) -> str:
        # read through another connection than the hold's, which still sees them until the hold commits
        return (
            f"SELECT Id, CorrelationId, ReplyToAddress, Headers, Body FROM {self.qualified_name(queue)} "
            "WHERE RowVersion = ANY(%s) ORDER BY RowVersion"
        )

    def bridge_insert_unreadable(self, error_queue: QueueAddress) -> str:
        # unchanged, as a recoverable message
        return (
            f"INSERT INTO {self.qualified_name(error_queue)} ({_ERROR_QUEUE_COLUMNS}) "
            "VALUES (%s, %s, %s, true, NULL, %s, %s)"
        )
