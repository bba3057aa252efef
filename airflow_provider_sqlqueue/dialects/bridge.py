"""What every dialect renders for the Spark bridge's control tables (``spark/tables.py``): the
``<prefix>_runs``, ``<prefix>_staging`` and ``<prefix>_fill`` tables beside an input queue, the statements on
them, and how the bridge binds values on the engine. Declared here, a mixin of :class:`~.base.Dialect`; what
differs by engine is in its module (``sqlite_bridge.py``, ``postgres_bridge.py``, ``sqlserver_bridge.py``).

Most statements read the same on every engine apart from the parameter marker and the clock, so they are
written once here on top of a few hooks (:meth:`BridgeStatements.bridge_now`, the column types, ...) that
each engine sets. The control tables come in as qualified names, quoted once when the bridge names them for
a job; the queues and sink tables come in as addresses, quoted when a statement is rendered.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from ..model.address import QueueAddress

__all__ = [
    "ABORTED",
    "ACTIVE_STATES",
    "COMMITTED",
    "PROCESSING",
    "READ",
    "RECEIVING",
    "STREAMING",
    "BridgeColumnTypes",
    "BridgeStatements",
]

# The values of a run row's State column, written into the statements as literals: ``receiving`` ->
# ``processing`` -> ``committed``; or ``aborted`` when its messages went back to the queue.
RECEIVING = "receiving"
PROCESSING = "processing"
COMMITTED = "committed"
ABORTED = "aborted"
ACTIVE_STATES = (RECEIVING, PROCESSING)
# The states of the data source's runs (spark/source/): a batch read whose messages Spark was handed and
# that waits for its ack or release, and a stream (never orphaned: its staged rows wait for the query).
READ = "read"
STREAMING = "streaming"

# A converter of a number of seconds to the parameter an "older than" condition binds.
SecondsBinding = Callable[[float], Any]


@dataclass(frozen=True)
class BridgeColumnTypes:
    """The engine's column types of the control tables, one per kind of column they hold."""

    text: str  # Sink, Headers, Summary: unbounded text
    timestamp: str  # StartedAt, HeartbeatAt, FinishedAt: the bridge's own clock
    uuid: str  # a staged message's Id
    blob: str  # a staged message's Body
    integer: str  # attempts, partitions, batches, counts
    key: str  # RunId (at most 200 characters: spark/tables.py's RUN_ID_MAX)
    queue_name: str  # InputQueue: a queue's printed address
    expires: str  # a staged message's Expires, as the queue table stores it (restores copy it back)


class BridgeStatements:
    """The bridge's statements and bindings. The shared statements are written here on the hooks an engine
    sets; the statements of PostgreSQL's own paths (server-side moves, COPY, rows held in place) raise
    NotImplementedError on an engine without them, which the bridge never takes there (it asks
    :attr:`bridge_moves_server_side` and :attr:`bridge_copies_rows` first)."""

    display_name: ClassVar[str]
    placeholder: ClassVar[str]
    # The engine's column types of the control tables (see BridgeColumnTypes).
    bridge_column_types: ClassVar[BridgeColumnTypes]
    # Rows one staging INSERT carries at most, before :meth:`rows_per_statement` has its say.
    bridge_stage_rows_limit: ClassVar[int]
    # Parameters one sink-table INSERT binds at most (the engine's or its driver's limit, with room).
    bridge_insert_parameters: ClassVar[int]
    # The literal of a true boolean in a SELECT list (restores set Recoverable).
    bridge_true: ClassVar[str] = "1"
    # A staged message's Id as a staged slice selects it (PostgreSQL sends its uuid as text, cheaply).
    bridge_id_column: ClassVar[str] = "Id"
    # PostgreSQL's paths: COPY into sink tables, staged rows read in binary, the receive moving its rows
    # into staging without leaving the server.
    bridge_copies_rows: ClassVar[bool] = False
    bridge_reads_binary: ClassVar[bool] = False
    bridge_moves_server_side: ClassVar[bool] = False

    if TYPE_CHECKING:
        # Provided by Dialect, which this class is a mixin of.
        def quote(self, identifier: str) -> str: ...

        def qualified_name(self, address: QueueAddress) -> str: ...

        def rows_per_statement(self, statement: Callable[[int], str], rows: int) -> int: ...

        def row_id(self, value: Any) -> Any: ...

    # ---- the engine's clock ----------------------------------------------------------------------
    def bridge_now(self) -> str:
        """The database clock in UTC, as the control tables' timestamps are written."""
        raise NotImplementedError(f"{self.display_name} has no Spark bridge")

    def bridge_older_than(self, column: str) -> tuple[str, SecondsBinding]:
        """A condition "column is older than N seconds ago" and how to bind N."""
        raise NotImplementedError(f"{self.display_name} has no Spark bridge")

    def bridge_seconds_since(self, column: str) -> str:
        """An expression: seconds from ``column`` (a timestamp the bridge wrote) to now, as a number."""
        raise NotImplementedError(f"{self.display_name} has no Spark bridge")

    # ---- DDL -------------------------------------------------------------------------------------
    def bridge_create_statements(
        self, runs: QueueAddress, staging: QueueAddress, fill: QueueAddress
    ) -> list[str]:
        """Idempotent DDL for the three control tables."""
        types = self.bridge_column_types
        text, ts, integer, key = types.text, types.timestamp, types.integer, types.key
        tables = {
            runs: (
                f"RunId {key} NOT NULL PRIMARY KEY, InputQueue {types.queue_name} NOT NULL, "
                f"Sink {text} NOT NULL, State varchar(20) NOT NULL, JobAttempt {integer} NOT NULL, "
                f"StartedAt {ts} NOT NULL, HeartbeatAt {ts} NOT NULL, FinishedAt {ts} NULL, "
                f"Summary {text} NULL"
            ),
            staging: (
                f"RunId {key} NOT NULL, RowVersion bigint NOT NULL, Id {types.uuid} NOT NULL, "
                "CorrelationId varchar(255) NULL, ReplyToAddress varchar(255) NULL, "
                f"Expires {types.expires} NULL, Headers {text} NOT NULL, Body {types.blob} NULL, "
                f"JobAttempt {integer} NOT NULL, Part {integer} NOT NULL, PRIMARY KEY (RunId, RowVersion)"
            ),
            fill: (
                f"RunId {key} NOT NULL, Part {integer} NOT NULL, Batch {integer} NOT NULL, "
                f"Messages {integer} NOT NULL, PRIMARY KEY (RunId, Part, Batch)"
            ),
        }
        return [self.bridge_create_table(address, columns) for address, columns in tables.items()]

    def bridge_create_table(self, address: QueueAddress, columns: str) -> str:
        """CREATE TABLE of ``columns`` unless the table exists."""
        return f"CREATE TABLE IF NOT EXISTS {self.qualified_name(address)} ({columns})"

    # ---- runs ------------------------------------------------------------------------------------
    def bridge_get_run(self, runs: str) -> str:
        return f"SELECT State, JobAttempt, InputQueue, Summary FROM {runs} WHERE RunId = {self.placeholder}"

    def bridge_run_sink(self, runs: str) -> str:
        return f"SELECT Sink FROM {runs} WHERE RunId = {self.placeholder}"

    def bridge_insert_run(self, runs: str) -> str:
        p, now = self.placeholder, self.bridge_now()
        return (
            f"INSERT INTO {runs} (RunId, InputQueue, Sink, State, JobAttempt, StartedAt, HeartbeatAt) "
            f"VALUES ({p}, {p}, {p}, '{RECEIVING}', 1, {now}, {now})"
        )

    def bridge_insert_stream(self, runs: str) -> str:
        """A stream's row: run id, queue, sink, Summary (its last position, as JSON)."""
        p, now = self.placeholder, self.bridge_now()
        return (
            f"INSERT INTO {runs} (RunId, InputQueue, Sink, State, JobAttempt, StartedAt, HeartbeatAt, "
            f"Summary) VALUES ({p}, {p}, {p}, '{STREAMING}', 1, {now}, {now}, {p})"
        )

    def bridge_restart_run(self, runs: str) -> str:
        """A new job attempt on a run id: back to ``receiving`` after an abort, else keep the state."""
        p = self.placeholder
        return (
            f"UPDATE {runs} SET JobAttempt = JobAttempt + 1, HeartbeatAt = {self.bridge_now()}, Sink = {p}, "
            f"State = CASE WHEN State = '{ABORTED}' THEN '{RECEIVING}' ELSE State END, "
            f"FinishedAt = NULL, Summary = NULL WHERE RunId = {p} AND State <> '{COMMITTED}'"
        )

    def bridge_counted(self, statement: str) -> str:
        """An UPDATE that also returns how many rows it changed, where the driver cannot tell (see
        SqlServerBridge); elsewhere the statement itself, its count in the cursor's rowcount."""
        return statement

    def bridge_set_state(self, runs: str, from_states: Sequence[str]) -> str:
        p = self.placeholder
        states = ", ".join(f"'{state}'" for state in from_states)
        return (
            f"UPDATE {runs} SET State = {p}, HeartbeatAt = {self.bridge_now()} "
            f"WHERE RunId = {p} AND State IN ({states})"
        )

    def bridge_heartbeat(self, runs: str) -> str:
        return self.bridge_touch_run(runs, ACTIVE_STATES)

    def bridge_finish_run(self, runs: str) -> str:
        p = self.placeholder
        return (
            f"UPDATE {runs} SET State = '{COMMITTED}', FinishedAt = {self.bridge_now()}, Summary = {p} "
            f"WHERE RunId = {p} AND State = '{PROCESSING}'"
        )

    def bridge_set_summary(self, runs: str) -> str:
        p = self.placeholder
        return f"UPDATE {runs} SET FinishedAt = {self.bridge_now()}, Summary = {p} WHERE RunId = {p}"

    def bridge_set_summary_if(self, runs: str) -> str:
        """Compare-and-set of a run's Summary (a stream keeps its last position there)."""
        p = self.placeholder
        return (
            f"UPDATE {runs} SET Summary = {p}, HeartbeatAt = {self.bridge_now()} "
            f"WHERE RunId = {p} AND Summary = {p}"
        )

    def bridge_touch_run(self, runs: str, states: Sequence[str]) -> str:
        """Set a run's heartbeat to now (and so lock its row for the transaction) while it is in one of
        ``states``."""
        listed = ", ".join(f"'{state}'" for state in states)
        return (
            f"UPDATE {runs} SET HeartbeatAt = {self.bridge_now()} "
            f"WHERE RunId = {self.placeholder} AND State IN ({listed})"
        )

    def bridge_run_state_shared(self, runs: str, column: str = "State") -> str:
        """Read a run's ``State`` (or ``Summary``: a stream's owner) and lock its row to the end of the
        transaction: shared for ``State``, for ``Summary`` only against a change of its key, and for
        ``takeover`` (which reads the Summary) as for an update."""
        lock = {"State": "SHARE", "Summary": "KEY SHARE", "takeover": "UPDATE"}[column]
        return self.bridge_read_locked(runs, "State" if column == "State" else "Summary", lock)

    def bridge_read_locked(self, runs: str, column: str, lock: str) -> str:
        """SELECT of a run's ``column`` holding ``lock`` (PostgreSQL's row-lock strengths: ``SHARE``, ``KEY
        SHARE``, ``UPDATE``) on its row to the end of the transaction, as near as the engine has it. SQLite
        serialises writers anyway, so here it is a plain read."""
        return f"SELECT {column} FROM {runs} WHERE RunId = {self.placeholder}"

    def bridge_orphans(self, runs: str) -> tuple[str, SecondsBinding]:
        """The other active runs of an input queue whose heartbeat is older than N seconds, and how to
        bind N."""
        p = self.placeholder
        condition, bind = self.bridge_older_than("HeartbeatAt")
        states = ", ".join(f"'{state}'" for state in ACTIVE_STATES)
        return (
            f"SELECT RunId FROM {runs} WHERE InputQueue = {p} AND RunId <> {p} "
            f"AND State IN ({states}) AND {condition}",
            bind,
        )

    # ---- staging ---------------------------------------------------------------------------------
    def bridge_stage_rows(self, staging: str, rows: int) -> str:
        p = self.placeholder
        row = f"({p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p})"
        return (
            f"INSERT INTO {staging} (RunId, RowVersion, Id, CorrelationId, ReplyToAddress, Expires, "
            f"Headers, Body, JobAttempt, Part) VALUES " + ", ".join([row] * rows)
        )

    def bridge_stage_rows_per_statement(self, staging: str) -> int:
        """How many rows one :meth:`bridge_stage_rows` statement carries on this engine."""
        return self.rows_per_statement(
            lambda rows: self.bridge_stage_rows(staging, rows), self.bridge_stage_rows_limit
        )

    def bridge_count_part(self, staging: str) -> str:
        p = self.placeholder
        return f"SELECT count(*) FROM {staging} WHERE RunId = {p} AND JobAttempt = {p} AND Part = {p}"

    def bridge_staged_stats(self, staging: str) -> str:
        p = self.placeholder
        return f"SELECT count(*), min(RowVersion), max(RowVersion) FROM {staging} WHERE RunId = {p}"

    def bridge_staged_slice(self, staging: str) -> str:
        p = self.placeholder
        return (
            f"SELECT RowVersion, {self.bridge_id_column}, Headers, Body, Expires FROM {staging} "
            f"WHERE RunId = {p} AND RowVersion >= {p} AND RowVersion < {p} ORDER BY RowVersion"
        )

    def bridge_delete_staging(self, staging: str) -> str:
        return f"DELETE FROM {staging} WHERE RunId = {self.placeholder}"

    def bridge_delete_staged_through(self, staging: str) -> str:
        """Drop a stream's staged rows up to a position (its ``commit(end)``)."""
        p = self.placeholder
        return f"DELETE FROM {staging} WHERE RunId = {p} AND RowVersion <= {p}"

    def bridge_restore(self, queue: QueueAddress, staging: str) -> str:
        """Put a run's staged messages back at the end of ``queue``, in their order, Expires kept."""
        columns = "Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body"
        return (
            f"INSERT INTO {self.qualified_name(queue)} ({columns}) "
            f"SELECT Id, CorrelationId, ReplyToAddress, {self.bridge_true}, Expires, Headers, Body "
            f"FROM {staging} WHERE RunId = {self.placeholder} ORDER BY RowVersion"
        )

    def bridge_expires_value(self, expires: datetime | None) -> Any:
        """A received message's Expires as the queue table stores it (restores copy it back unchanged)."""
        raise NotImplementedError(f"{self.display_name} has no Spark bridge")

    def bridge_staged_runs(self, runs: str, staging: str, *, of_queue: bool = True) -> str:
        """The runs that have staged messages, of one input queue (parameter) or (``of_queue`` False) of
        every queue beside these tables: run id, input queue, sink, state, staged messages, lowest and
        highest RowVersion, seconds since the run started and since its last heartbeat, oldest start first."""
        started, beat = self.bridge_seconds_since("r.StartedAt"), self.bridge_seconds_since("r.HeartbeatAt")
        where = f" WHERE r.InputQueue = {self.placeholder}" if of_queue else ""
        return (
            f"SELECT r.RunId, r.InputQueue, r.Sink, r.State, s.Staged, s.Low, s.High, {started}, {beat} "
            f"FROM {runs} r JOIN (SELECT RunId, count(*) AS Staged, min(RowVersion) AS Low, "
            f"max(RowVersion) AS High FROM {staging} GROUP BY RunId) s ON s.RunId = r.RunId{where} "
            "ORDER BY r.StartedAt, r.RunId"
        )

    # ---- fill markers ----------------------------------------------------------------------------
    def bridge_fill_batches_done(self, fill: str) -> str:
        p = self.placeholder
        return f"SELECT Batch FROM {fill} WHERE RunId = {p} AND Part = {p}"

    def bridge_insert_fill_marker(self, fill: str) -> str:
        p = self.placeholder
        return f"INSERT INTO {fill} (RunId, Part, Batch, Messages) VALUES ({p}, {p}, {p}, {p})"

    def bridge_fill_totals(self, fill: str) -> str:
        return f"SELECT count(*), COALESCE(sum(Messages), 0) FROM {fill} WHERE RunId = {self.placeholder}"

    # ---- sink tables -----------------------------------------------------------------------------
    def bridge_table_columns(self, table: QueueAddress) -> str:
        """No rows, only the column names of ``table`` (from the cursor's description)."""
        return f"SELECT * FROM {self.qualified_name(table)} WHERE 1 = 0"

    def bridge_insert_rows(self, table: QueueAddress, columns: Sequence[str], rows: int) -> str:
        names = ", ".join(self.quote(column) for column in columns)
        row = "(" + ", ".join([self.placeholder] * len(columns)) + ")"
        return f"INSERT INTO {self.qualified_name(table)} ({names}) VALUES " + ", ".join([row] * rows)

    def bridge_rows_per_insert(self, columns: int) -> int:
        """Rows one :meth:`bridge_insert_rows` carries: at most 1,000, within the parameters allowed."""
        return max(1, min(1000, self.bridge_insert_parameters // max(columns, 1)))

    def bridge_sink_value(self, value: Any) -> Any:
        """A sink value (already past the bridge's JSON and bytes conversions) as this engine's driver binds
        it."""
        if isinstance(value, uuid.UUID):
            return self.row_id(value)
        return value

    # ---- PostgreSQL's paths ----------------------------------------------------------------------
    def bridge_move_to_staging(self, receive_batch: str, staging: str) -> str:
        """The receive statement as a CTE whose unexpired rows go into staging, in one statement.

        Parameters: the receive's batch size, then run id, job attempt, partition. Returns one row per
        deleted row: (RowVersion, Headers or NULL, expired).
        """
        raise NotImplementedError(f"{self.display_name} cannot move received rows on the server")

    def bridge_move_to_stream_staging(self, receive_batch: str, staging: str) -> str:
        """:meth:`bridge_move_to_staging` for a stream: the unexpired rows are keyed by the stream's next
        positions (the position before them plus their rank in RowVersion order), as attempt 1 of
        partition 0.

        Parameters: the receive's batch size, stream id, the position before the batch. Returns one row per
        deleted row: (position or the expired row's RowVersion, Headers or NULL, expired).
        """
        raise NotImplementedError(f"{self.display_name} cannot move received rows on the server")

    def bridge_move_poison(self, staging: str, error_queue: QueueAddress) -> str:
        """Move staged rows (run id, RowVersions as an array) unchanged to the error queue."""
        raise NotImplementedError(f"{self.display_name} cannot move received rows on the server")

    def bridge_copy_rows(self, table: QueueAddress, columns: Sequence[str]) -> str:
        """COPY into a sink table's ``columns`` from the client."""
        raise NotImplementedError(f"{self.display_name} has no COPY")

    def bridge_held_bounds(self, queue: QueueAddress) -> str:
        """The input queue's lowest and highest RowVersion (no parameters)."""
        raise NotImplementedError(f"{self.display_name} cannot hold rows in place")

    def bridge_take_held_window(self, queue: QueueAddress) -> str:
        """Delete, in the caller's transaction and without committing, every row of a RowVersion window
        (parameters: after, up to inclusive). Returns (RowVersion, expired)."""
        raise NotImplementedError(f"{self.display_name} cannot hold rows in place")

    def bridge_take_held_batch(self, queue: QueueAddress) -> str:
        """As :meth:`bridge_take_held_window`, but only the oldest rows no other transaction holds
        (parameters: after, up to inclusive, how many)."""
        raise NotImplementedError(f"{self.display_name} cannot hold rows in place")

    def bridge_next_row_version(self, queue: QueueAddress) -> str:
        """The input queue's lowest RowVersion after one (parameter), or NULL."""
        raise NotImplementedError(f"{self.display_name} cannot hold rows in place")

    def bridge_newest_after(self, queue: QueueAddress) -> str:
        """The input queue's highest RowVersion if it is above one (parameter), else NULL."""
        raise NotImplementedError(f"{self.display_name} cannot hold rows in place")

    def bridge_lock_timeout(self) -> str:
        """Set the transaction's lock timeout (parameter: the setting as text) and return the one before."""
        raise NotImplementedError(f"{self.display_name} cannot hold rows in place")

    def bridge_held_slice(self, queue: QueueAddress) -> str:
        """Held rows of the input queue in a RowVersion range (parameters: from, to exclusive), in the
        staged slice's columns."""
        raise NotImplementedError(f"{self.display_name} cannot hold rows in place")

    def bridge_held_reads_by_index(self) -> str:
        """Make the rest of the transaction read held slices along the RowVersion index (no parameters)."""
        raise NotImplementedError(f"{self.display_name} cannot hold rows in place")

    def bridge_held_headers(self, queue: QueueAddress) -> str:
        """The headers of the held rows in a RowVersion range (parameters: from, to exclusive)."""
        raise NotImplementedError(f"{self.display_name} cannot hold rows in place")

    def bridge_unreadable_held(self, queue: QueueAddress) -> str:
        """Held rows as the error queue keeps them (parameter: an array of RowVersions)."""
        raise NotImplementedError(f"{self.display_name} cannot hold rows in place")

    def bridge_insert_unreadable(self, error_queue: QueueAddress) -> str:
        """One row of :meth:`bridge_unreadable_held` into the error queue, as a recoverable message."""
        raise NotImplementedError(f"{self.display_name} cannot hold rows in place")
