"""The Spark bridge's own tables: their names, and the statements on them as the engine renders them.

Three control tables live beside the input queue (same database and schema), named from a prefix
(default ``sqlqueue_spark``):

- ``<prefix>_runs``: one row per run id: its input queue, sink, state (``receiving`` -> ``processing`` ->
  ``committed``; or ``aborted`` when its messages went back to the queue), the job attempt, a heartbeat and
  the summary. The ``committed`` state is the commit marker of table and queue sinks: it is written in the
  same transaction as the results.
- ``<prefix>_staging``: received messages that belong to a run and are not in its output yet, keyed by
  (run id, RowVersion of the input row). A receive's DELETE and the INSERT here commit together.
- ``<prefix>_fill``: one row per batch that the fill job sent, keyed by (run id, partition, batch), written
  with the batch, so that a retried task skips what an earlier attempt committed; the ``sqlqueue`` data
  source's writer marks each partition it sent there as batch 0.

The SQL text is the dialect's (``dialects/bridge.py`` and its per-engine modules); :class:`BridgeSql`
renders it for one set of control tables, and the jobs run it. Nothing here imports Airflow or Spark: the
executors run it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from ..dialects import Dialect
from ..dialects.bridge import (
    ABORTED,
    ACTIVE_STATES,
    COMMITTED,
    PROCESSING,
    READ,
    RECEIVING,
    STREAMING,
    SecondsBinding,
)
from ..transport import ConfigurationError, QueueAddress, Transport
from .sink_tables import create_sink_table, sink_table_ddl

__all__ = [
    "ABORTED",
    "ACTIVE_STATES",
    "COMMITTED",
    "DEFAULT_PREFIX",
    "PROCESSING",
    "READ",
    "RECEIVING",
    "STREAMING",
    "BridgeSql",
    "BridgeTables",
    "bridge_tables",
    "create_bridge_tables",
    "create_sink_table",
    "sink_table_ddl",
]

DEFAULT_PREFIX = "sqlqueue_spark"
RUN_ID_MAX = 200


@dataclass(frozen=True)
class BridgeTables:
    """The resolved addresses of the bridge's control tables for one input queue."""

    runs: QueueAddress
    staging: QueueAddress
    fill: QueueAddress


def bridge_tables(
    transport: Transport, near: str | QueueAddress, prefix: str = DEFAULT_PREFIX
) -> BridgeTables:
    """The control tables in the schema (and catalog) of the queue ``near``."""
    address = transport.resolve(near)
    return BridgeTables(
        transport.resolve(address.with_table(f"{prefix}_runs")),
        transport.resolve(address.with_table(f"{prefix}_staging")),
        transport.resolve(address.with_table(f"{prefix}_fill")),
    )


def check_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not run_id.strip():
        raise ConfigurationError("a run id must be a non-empty string")
    if len(run_id) > RUN_ID_MAX:
        raise ConfigurationError(f"a run id is at most {RUN_ID_MAX} characters, not {len(run_id)}")
    return run_id


class BridgeSql:
    """Every statement of the bridge on one engine, rendered for one set of control tables.

    The text comes from the transport's dialect (``dialects/bridge.py``); here are the tables it is rendered
    for (quoted once, now) and the binding of a received message's values for staging."""

    def __init__(self, transport: Transport, tables: BridgeTables, queue: QueueAddress | None = None) -> None:
        self.transport = transport
        self.engine = transport.dialect.name
        self.tables = tables
        self.queue = queue
        self.p = transport.dialect.placeholder
        self.runs = self.dialect.qualified_name(tables.runs)
        self.staging = self.dialect.qualified_name(tables.staging)
        self.fill = self.dialect.qualified_name(tables.fill)

    @property
    def dialect(self) -> Dialect:
        """The transport's dialect, read at use: a variant is chosen when the first connection opens."""
        return self.transport.dialect

    # ---- clock ---------------------------------------------------------------------------------
    @property
    def now(self) -> str:
        return self.dialect.bridge_now()

    def older_than(self, column: str) -> tuple[str, SecondsBinding]:
        """A condition "column is older than N seconds ago" and how to bind N."""
        return self.dialect.bridge_older_than(column)

    def seconds_since(self, column: str) -> str:
        """An expression: seconds from ``column`` (a timestamp this module wrote) to now, as a number."""
        return self.dialect.bridge_seconds_since(column)

    # ---- DDL -----------------------------------------------------------------------------------
    def create_statements(self) -> list[str]:
        """Idempotent DDL for the three control tables."""
        return self.dialect.bridge_create_statements(self.tables.runs, self.tables.staging, self.tables.fill)

    # ---- runs ----------------------------------------------------------------------------------
    def get_run(self) -> str:
        return self.dialect.bridge_get_run(self.runs)

    def run_sink(self) -> str:
        return self.dialect.bridge_run_sink(self.runs)

    def insert_run(self) -> str:
        return self.dialect.bridge_insert_run(self.runs)

    def insert_stream(self) -> str:
        """A stream's row: run id, queue, sink, Summary (its last position, as JSON)."""
        return self.dialect.bridge_insert_stream(self.runs)

    def restart_run(self) -> str:
        """A new job attempt on a run id: back to ``receiving`` after an abort, else keep the state."""
        return self.dialect.bridge_restart_run(self.runs)

    def counted(self, statement: str) -> str:
        """An UPDATE that also returns how many rows it changed, as a row on SQL Server: connections run
        with NOCOUNT ON there, so drivers report no row count (see :func:`rows_changed`)."""
        return self.dialect.bridge_counted(statement)

    def set_state(self, from_states: Sequence[str]) -> str:
        return self.dialect.bridge_set_state(self.runs, from_states)

    def set_state_if_stale(self, from_states: Sequence[str]) -> tuple[str, SecondsBinding]:
        """:meth:`set_state`, only while the run's heartbeat is older than N seconds; and how to bind N."""
        condition, bind = self.older_than("HeartbeatAt")
        return f"{self.set_state(from_states)} AND {condition}", bind

    def heartbeat(self) -> str:
        return self.dialect.bridge_heartbeat(self.runs)

    def finish_run(self) -> str:
        return self.dialect.bridge_finish_run(self.runs)

    def set_summary(self) -> str:
        return self.dialect.bridge_set_summary(self.runs)

    def run_state_shared(self, column: str = "State") -> str:
        """Read a run's state (or ``Summary``: a stream's owner) and hold a shared lock on its row to the end
        of the transaction.

        Receivers take it in each batch; changing the state (an UPDATE) waits for those batches to end, and
        batches after the change see the new state. SQLite serialises writers anyway. On PostgreSQL a
        stream's reads take ``FOR KEY SHARE``: the owner's own receives (UPDATEs of the Summary) go on beside
        them, and a takeover (``takeover``: ``FOR UPDATE`` first) waits for them to end.
        """
        return self.dialect.bridge_run_state_shared(self.runs, column)

    def orphans(self) -> tuple[str, SecondsBinding]:
        return self.dialect.bridge_orphans(self.runs)

    # ---- staging -------------------------------------------------------------------------------
    def stage_rows(self, rows: int) -> str:
        return self.dialect.bridge_stage_rows(self.staging, rows)

    @property
    def can_copy(self) -> bool:
        """PostgreSQL loads rows faster with COPY (psycopg's ``cursor.copy``), inside the transaction."""
        return self.dialect.bridge_copies_rows

    @property
    def reads_binary(self) -> bool:
        """PostgreSQL (psycopg) sends staged rows in binary: bodies skip bytea's hex text both ways."""
        return self.dialect.bridge_reads_binary

    @property
    def can_move_server_side(self) -> bool:
        """PostgreSQL feeds the receive's ``DELETE ... RETURNING`` straight into the staging INSERT."""
        return self.dialect.bridge_moves_server_side

    def move_to_staging(self, receive_batch: str) -> str:
        """The receive statement as a CTE whose unexpired rows go into staging, in one statement.

        Parameters: the receive's batch size, then run id, job attempt, partition. Returns one row per
        deleted row: (RowVersion, Headers or NULL, expired).
        """
        return self.dialect.bridge_move_to_staging(receive_batch, self.staging)

    def move_to_stream_staging(self, receive_batch: str) -> str:
        """:meth:`move_to_staging` for a stream: the unexpired rows are keyed by the stream's next positions
        (the position before them plus their rank in RowVersion order), as attempt 1 of partition 0.

        Parameters: the receive's batch size, stream id, the position before the batch. Returns one row per
        deleted row: (position or the expired row's RowVersion, Headers or NULL, expired).
        """
        return self.dialect.bridge_move_to_stream_staging(receive_batch, self.staging)

    # ---- held rows (PostgreSQL, ``read_in_place``) -------------------------------------------------
    def _input_queue(self) -> QueueAddress:
        if self.queue is None:
            raise ConfigurationError("these statements need the input queue's address")
        return self.queue

    def held_bounds(self) -> str:
        """The input queue's lowest and highest RowVersion (no parameters), each read from the index's end."""
        return self.dialect.bridge_held_bounds(self._input_queue())

    def take_held_window(self) -> str:
        """Delete, in the caller's transaction and without committing, every row of a RowVersion window
        (parameters: after, up to inclusive). Returns (RowVersion, expired), in no particular order: the
        headers are read once, by phase 2's executors."""
        return self.dialect.bridge_take_held_window(self._input_queue())

    def take_held_batch(self) -> str:
        """As :meth:`take_held_window`, but only the oldest rows no other transaction holds (parameters:
        after, up to inclusive, how many): they are locked first, so each row is written twice."""
        return self.dialect.bridge_take_held_batch(self._input_queue())

    def next_row_version(self) -> str:
        """The input queue's lowest RowVersion after one (parameter), or NULL: where the next window starts
        after an empty one."""
        return self.dialect.bridge_next_row_version(self._input_queue())

    def newest_after(self) -> str:
        """The input queue's highest RowVersion if it is above one (parameter), else NULL: rows sent while
        a hold took the queue up to that one."""
        return self.dialect.bridge_newest_after(self._input_queue())

    def lock_timeout(self) -> str:
        """Set the transaction's lock_timeout (parameter: the setting as text) and return the one before."""
        return self.dialect.bridge_lock_timeout()

    def held_slice(self) -> str:
        """Read held rows of the input queue in a RowVersion range (parameters: from, to exclusive), in the
        staged slice's columns."""
        return self.dialect.bridge_held_slice(self._input_queue())

    def held_reads_by_index(self) -> str:
        """Make the rest of the caller's transaction read held slices along the RowVersion index, whatever
        the planner estimates (no parameters): run before :meth:`held_slice` reads."""
        return self.dialect.bridge_held_reads_by_index()

    def held_headers(self) -> str:
        """The headers of the held rows in a RowVersion range (parameters: from, to exclusive), read through
        another connection than the hold's: for the slices a transform left unread."""
        return self.dialect.bridge_held_headers(self._input_queue())

    def unreadable_held(self) -> str:
        """Held rows as the error queue keeps them (parameter: an array of RowVersions), read through
        another connection than the hold's, which still sees them until the hold commits."""
        return self.dialect.bridge_unreadable_held(self._input_queue())

    def insert_unreadable(self, error_queue: QueueAddress) -> str:
        """One row of :meth:`unreadable_held` into the error queue, unchanged, as a recoverable message."""
        return self.dialect.bridge_insert_unreadable(error_queue)

    def move_poison(self, error_queue: QueueAddress) -> str:
        """Move staged rows (run id, RowVersions as an array) unchanged to the error queue (PostgreSQL)."""
        return self.dialect.bridge_move_poison(self.staging, error_queue)

    def copy_rows(self, table: QueueAddress, columns: Sequence[str]) -> str:
        return self.dialect.bridge_copy_rows(table, columns)

    @property
    def stage_rows_per_statement(self) -> int:
        return self.dialect.bridge_stage_rows_per_statement(self.staging)

    def stage_params(self, run_id: str, attempt: int, part: int, message: Any) -> tuple[Any, ...]:
        from ..transport.headers import encode_headers

        return (
            run_id,
            message.row_version,
            self.dialect.row_id(message.id),
            _mirror(message.correlation_id),
            _mirror(message.reply_to_address),
            self.expires_value(message.expires),
            encode_headers(message.headers),
            message.body,
            attempt,
            part,
        )

    def expires_value(self, expires: datetime | None) -> Any:
        """A received message's Expires as the queue table stores it (restores copy it back unchanged)."""
        return self.dialect.bridge_expires_value(expires)

    def count_part(self) -> str:
        return self.dialect.bridge_count_part(self.staging)

    def staged_stats(self) -> str:
        return self.dialect.bridge_staged_stats(self.staging)

    def staged_slice(self) -> str:
        return self.dialect.bridge_staged_slice(self.staging)

    def delete_staging(self) -> str:
        return self.dialect.bridge_delete_staging(self.staging)

    def delete_staged_through(self) -> str:
        """Drop a stream's staged rows up to a position (its ``commit(end)``)."""
        return self.dialect.bridge_delete_staged_through(self.staging)

    def set_summary_if(self) -> str:
        """Compare-and-set of a run's Summary (a stream keeps its last position there)."""
        return self.dialect.bridge_set_summary_if(self.runs)

    def restore(self, queue: QueueAddress) -> str:
        """Put a run's staged messages back at the end of ``queue``, in their order, Expires kept."""
        return self.dialect.bridge_restore(queue, self.staging)

    def touch_run(self, states: Sequence[str]) -> str:
        """Lock a run's row for the transaction (its heartbeat set to now) while it is in one of ``states``:
        a stream stages only under that row's lock, so its staged rows stand still until the commit."""
        return self.dialect.bridge_touch_run(self.runs, states)

    def table_columns(self, table: QueueAddress) -> str:
        """No rows, only the column names of ``table`` (from the cursor's description)."""
        return self.dialect.bridge_table_columns(table)

    # ---- fill markers --------------------------------------------------------------------------
    def fill_batches_done(self) -> str:
        return self.dialect.bridge_fill_batches_done(self.fill)

    def insert_fill_marker(self) -> str:
        return self.dialect.bridge_insert_fill_marker(self.fill)

    def fill_totals(self) -> str:
        return self.dialect.bridge_fill_totals(self.fill)

    # ---- sink tables ---------------------------------------------------------------------------
    def insert_rows(self, table: QueueAddress, columns: Sequence[str], rows: int) -> str:
        return self.dialect.bridge_insert_rows(table, columns, rows)

    def rows_per_insert(self, columns: int) -> int:
        return self.dialect.bridge_rows_per_insert(columns)

    def sink_value(self, value: Any) -> Any:
        """A Spark row value as this engine's driver binds it: nested values and rows as JSON text, bytes as
        bytes, the rest as the dialect binds it."""
        if value is None:
            return None
        if isinstance(value, dict | list | tuple):
            return json.dumps(_jsonable(value), ensure_ascii=False, separators=(",", ":"))
        if hasattr(value, "asDict"):
            return json.dumps(_jsonable(value.asDict(recursive=True)), ensure_ascii=False)
        if hasattr(value, "toJson"):  # a VARIANT value
            return value.toJson()
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        return self.dialect.bridge_sink_value(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if hasattr(value, "asDict"):
        return _jsonable(value.asDict(recursive=True))
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="replace")
    if hasattr(value, "toJson"):
        return json.loads(value.toJson())
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


def _mirror(value: str | None) -> str | None:
    if value is None or len(value) > 255 or not value.isascii():
        return None
    return value


def create_bridge_tables(
    transport: Transport, near: str | QueueAddress, prefix: str = DEFAULT_PREFIX
) -> BridgeTables:
    """Create the control tables beside the queue ``near`` if missing. Needs DDL rights (provisioning)."""
    tables = bridge_tables(transport, near, prefix)
    sql = BridgeSql(transport, tables)
    with transport.connection() as connection:
        cursor = connection.cursor()
        begin = transport.dialect.begin_write()
        if begin:
            cursor.execute(begin, ())
        for statement in sql.create_statements():
            cursor.execute(statement, ())
        connection.commit()
    return tables
