"""The Spark bridge's own tables and the SQL that runs on them, per engine.

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

All statements use the driver's parameter style of the engine. Nothing here imports Airflow or Spark: the
executors run it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

from ..dialects import Dialect
from ..dialects.postgres_picks import AFTER_ROW_VERSION, delete_taken
from ..transport import ConfigurationError, QueueAddress, Transport
from .sink_tables import create_sink_table, sink_table_ddl

__all__ = [
    "DEFAULT_PREFIX",
    "BridgeSql",
    "BridgeTables",
    "bridge_tables",
    "create_bridge_tables",
    "create_sink_table",
    "sink_table_ddl",
]

DEFAULT_PREFIX = "sqlqueue_spark"
RUN_ID_MAX = 200

# run states
RECEIVING = "receiving"
PROCESSING = "processing"
COMMITTED = "committed"
ABORTED = "aborted"
ACTIVE_STATES = (RECEIVING, PROCESSING)
# states of the data source's runs (spark/source/): a batch read whose messages Spark was handed and that
# waits for its ack or release, and a stream (never orphaned: its staged rows wait for the query)
READ = "read"
STREAMING = "streaming"


_HELD_RETURNING = "RETURNING RowVersion, (Expires IS NOT NULL AND Expires <= statement_timestamp())"


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
    """Every statement of the bridge on one engine, rendered for one set of control tables."""

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
        if self.engine == "postgresql":
            return "clock_timestamp()"
        if self.engine == "sqlserver":
            return "SYSUTCDATETIME()"
        return "strftime('%Y-%m-%d %H:%M:%f', 'now')"

    def older_than(self, column: str) -> tuple[str, Any]:
        """A condition "column is older than N seconds ago" and how to bind N."""
        if self.engine == "postgresql":
            return f"{column} < clock_timestamp() - make_interval(secs => %s)", float
        if self.engine == "sqlserver":
            return f"{column} < DATEADD(second, -?, SYSUTCDATETIME())", int
        return f"{column} < strftime('%Y-%m-%d %H:%M:%f', 'now', ?)", lambda s: f"-{float(s):.3f} seconds"

    # ---- DDL -----------------------------------------------------------------------------------
    def create_statements(self) -> list[str]:
        """Idempotent DDL for the three control tables."""
        engine = self.engine
        if engine == "postgresql":
            text, ts, uid, blob, integer = "text", "timestamptz", "uuid", "bytea", "integer"
        elif engine == "sqlserver":
            text, ts, uid, blob, integer = (
                "nvarchar(max)",
                "datetime2",
                "uniqueidentifier",
                "varbinary(max)",
                "int",
            )
        else:
            text, ts, uid, blob, integer = "TEXT", "TEXT", "TEXT", "BLOB", "INTEGER"
        key = "nvarchar(200)" if engine == "sqlserver" else "varchar(200)"
        name = "nvarchar(450)" if engine == "sqlserver" else "varchar(450)"
        expires = "datetime" if engine == "sqlserver" else ts
        tables = {
            self.tables.runs: (
                f"RunId {key} NOT NULL PRIMARY KEY, InputQueue {name} NOT NULL, Sink {text} NOT NULL, "
                f"State varchar(20) NOT NULL, JobAttempt {integer} NOT NULL, StartedAt {ts} NOT NULL, "
                f"HeartbeatAt {ts} NOT NULL, FinishedAt {ts} NULL, Summary {text} NULL"
            ),
            self.tables.staging: (
                f"RunId {key} NOT NULL, RowVersion bigint NOT NULL, Id {uid} NOT NULL, "
                "CorrelationId varchar(255) NULL, ReplyToAddress varchar(255) NULL, "
                f"Expires {expires} NULL, Headers {text} NOT NULL, Body {blob} NULL, "
                f"JobAttempt {integer} NOT NULL, Part {integer} NOT NULL, PRIMARY KEY (RunId, RowVersion)"
            ),
            self.tables.fill: (
                f"RunId {key} NOT NULL, Part {integer} NOT NULL, Batch {integer} NOT NULL, "
                f"Messages {integer} NOT NULL, PRIMARY KEY (RunId, Part, Batch)"
            ),
        }
        statements = []
        for address, columns in tables.items():
            qualified = self.dialect.qualified_name(address)
            if engine == "sqlserver":
                literal = qualified.replace("'", "''")
                statements.append(
                    f"IF OBJECT_ID(N'{literal}', N'U') IS NULL CREATE TABLE {qualified} ({columns})"
                )
            else:
                statements.append(f"CREATE TABLE IF NOT EXISTS {qualified} ({columns})")
        return statements

    # ---- runs ----------------------------------------------------------------------------------
    def get_run(self) -> str:
        p = self.p
        return f"SELECT State, JobAttempt, InputQueue, Summary FROM {self.runs} WHERE RunId = {p}"

    def run_sink(self) -> str:
        return f"SELECT Sink FROM {self.runs} WHERE RunId = {self.p}"

    def insert_run(self) -> str:
        p = self.p
        return (
            f"INSERT INTO {self.runs} (RunId, InputQueue, Sink, State, JobAttempt, StartedAt, HeartbeatAt) "
            f"VALUES ({p}, {p}, {p}, '{RECEIVING}', 1, {self.now}, {self.now})"
        )

    def insert_stream(self) -> str:
        """A stream's row: run id, queue, sink, Summary (its last position, as JSON)."""
        p = self.p
        return (
            f"INSERT INTO {self.runs} (RunId, InputQueue, Sink, State, JobAttempt, StartedAt, HeartbeatAt, "
            f"Summary) VALUES ({p}, {p}, {p}, '{STREAMING}', 1, {self.now}, {self.now}, {p})"
        )

    def restart_run(self) -> str:
        """A new job attempt on a run id: back to ``receiving`` after an abort, else keep the state."""
        p = self.p
        return (
            f"UPDATE {self.runs} SET JobAttempt = JobAttempt + 1, HeartbeatAt = {self.now}, Sink = {p}, "
            f"State = CASE WHEN State = '{ABORTED}' THEN '{RECEIVING}' ELSE State END, "
            f"FinishedAt = NULL, Summary = NULL WHERE RunId = {p} AND State <> '{COMMITTED}'"
        )

    def counted(self, statement: str) -> str:
        """An UPDATE that also returns how many rows it changed, as a row on SQL Server: connections run
        with NOCOUNT ON there, so drivers report no row count (see :func:`rows_changed`)."""
        return f"{statement}; SELECT @@ROWCOUNT" if self.engine == "sqlserver" else statement

    def set_state(self, from_states: Sequence[str]) -> str:
        p = self.p
        states = ", ".join(f"'{state}'" for state in from_states)
        return (
            f"UPDATE {self.runs} SET State = {p}, HeartbeatAt = {self.now} "
            f"WHERE RunId = {p} AND State IN ({states})"
        )

    def set_state_if_stale(self, from_states: Sequence[str]) -> tuple[str, Any]:
        """:meth:`set_state`, only while the run's heartbeat is older than N seconds; and how to bind N."""
        condition, bind = self.older_than("HeartbeatAt")
        return f"{self.set_state(from_states)} AND {condition}", bind

    def heartbeat(self) -> str:
        states = ", ".join(f"'{state}'" for state in ACTIVE_STATES)
        return (
            f"UPDATE {self.runs} SET HeartbeatAt = {self.now} WHERE RunId = {self.p} AND State IN ({states})"
        )

    def finish_run(self) -> str:
        p = self.p
        return (
            f"UPDATE {self.runs} SET State = '{COMMITTED}', FinishedAt = {self.now}, Summary = {p} "
            f"WHERE RunId = {p} AND State = '{PROCESSING}'"
        )

    def set_summary(self) -> str:
        p = self.p
        return f"UPDATE {self.runs} SET FinishedAt = {self.now}, Summary = {p} WHERE RunId = {p}"

    def run_state_shared(self, column: str = "State") -> str:
        """Read a run's state (or ``Summary``: a stream's owner) and hold a shared lock on its row to the end
        of the transaction.

        Receivers take it in each batch; changing the state (an UPDATE) waits for those batches to end, and
        batches after the change see the new state. SQLite serialises writers anyway. On PostgreSQL a
        stream's reads take ``FOR KEY SHARE``: the owner's own receives (UPDATEs of the Summary) go on
        beside them, and a takeover (``takeover``: ``FOR UPDATE`` first) waits for them to end.
        """
        p, lock = self.p, {"State": "SHARE", "Summary": "KEY SHARE", "takeover": "UPDATE"}[column]
        column = "State" if column == "State" else "Summary"
        if self.engine == "postgresql":
            return f"SELECT {column} FROM {self.runs} WHERE RunId = {p} FOR {lock}"
        if self.engine == "sqlserver":
            hints = "UPDLOCK, HOLDLOCK, ROWLOCK" if lock == "UPDATE" else "HOLDLOCK, ROWLOCK"
            return f"SELECT {column} FROM {self.runs} WITH ({hints}) WHERE RunId = {p}"
        return f"SELECT {column} FROM {self.runs} WHERE RunId = {p}"

    def orphans(self) -> tuple[str, Any]:
        p = self.p
        condition, bind = self.older_than("HeartbeatAt")
        states = ", ".join(f"'{state}'" for state in ACTIVE_STATES)
        return (
            f"SELECT RunId FROM {self.runs} WHERE InputQueue = {p} AND RunId <> {p} "
            f"AND State IN ({states}) AND {condition}",
            bind,
        )

    # ---- staging -------------------------------------------------------------------------------
    def stage_rows(self, rows: int) -> str:
        p = self.p
        row = f"({p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p})"
        return (
            f"INSERT INTO {self.staging} (RunId, RowVersion, Id, CorrelationId, ReplyToAddress, Expires, "
            f"Headers, Body, JobAttempt, Part) VALUES " + ", ".join([row] * rows)
        )

    @property
    def can_copy(self) -> bool:
        """PostgreSQL loads rows faster with COPY (psycopg's ``cursor.copy``), inside the transaction."""
        return self.engine == "postgresql"

    @property
    def reads_binary(self) -> bool:
        """PostgreSQL (psycopg) sends staged rows in binary: bodies skip bytea's hex text both ways."""
        return self.engine == "postgresql"

    @property
    def can_move_server_side(self) -> bool:
        """PostgreSQL feeds the receive's ``DELETE ... RETURNING`` straight into the staging INSERT."""
        return self.engine == "postgresql"

    def move_to_staging(self, receive_batch: str) -> str:
        """The receive statement as a CTE whose unexpired rows go into staging, in one statement.

        Parameters: the receive's batch size, then run id, job attempt, partition. Returns one row per
        deleted row: (RowVersion, Headers or NULL, expired).
        """
        return self._move(receive_batch, "RowVersion", "%s, %s")

    def move_to_stream_staging(self, receive_batch: str) -> str:
        """:meth:`move_to_staging` for a stream: the unexpired rows are keyed by the stream's next positions
        (the position before them plus their rank in RowVersion order), as attempt 1 of partition 0.

        Parameters: the receive's batch size, stream id, the position before the batch. Returns one row per
        deleted row: (position or the expired row's RowVersion, Headers or NULL, expired).
        """
        return self._move(receive_batch, "%s + row_number() OVER (ORDER BY RowVersion)", "1, 0")

    def _move(self, receive_batch: str, key: str, attempt_and_part: str) -> str:
        return (
            f"WITH m AS ({receive_batch}), "
            f"s AS (INSERT INTO {self.staging} (RunId, RowVersion, Id, CorrelationId, ReplyToAddress, "
            "Expires, Headers, Body, JobAttempt, Part) "
            f"SELECT %s, {key}, Id, CorrelationId, ReplyToAddress, Expires, Headers, Body, "
            f"{attempt_and_part} FROM m WHERE NOT Expired RETURNING RowVersion, Headers) "
            "SELECT RowVersion, Headers, false FROM s "
            "UNION ALL SELECT RowVersion, NULL, true FROM m WHERE Expired"
        )

    # ---- held rows (PostgreSQL, ``read_in_place``) -------------------------------------------------
    def _input_queue(self) -> str:
        if self.queue is None:
            raise ConfigurationError("these statements need the input queue's address")
        return self.dialect.qualified_name(self.queue)

    def held_bounds(self) -> str:
        """The input queue's lowest and highest RowVersion (no parameters), each read from the index's end."""
        table = self._input_queue()
        return (
            f"SELECT (SELECT RowVersion FROM {table} ORDER BY RowVersion LIMIT 1), "
            f"(SELECT RowVersion FROM {table} ORDER BY RowVersion DESC LIMIT 1)"
        )

    def take_held_window(self) -> str:
        """Delete, in the caller's transaction and without committing, every row of a RowVersion window
        (parameters: after, up to inclusive). Returns (RowVersion, expired), in no particular order: the
        headers are read once, by phase 2's executors.

        A plain DELETE writes each row once; it waits for a row another transaction holds. The window
        bounds what any plan reads: the planner's estimate of ``RowVersion > after`` comes from statistics
        that lag a queue whose keys only grow, and an estimate of a few rows where half the queue lies makes
        it sort every row after the mark, once per batch."""
        return (
            f"DELETE FROM {self._input_queue()} WHERE RowVersion > %s AND RowVersion <= %s {_HELD_RETURNING}"
        )

    def take_held_batch(self) -> str:
        """As :meth:`take_held_window`, but only the oldest rows no other transaction holds (parameters:
        after, up to inclusive, how many): they are locked first, so each row is written twice."""
        table = self._input_queue()
        return delete_taken(
            table,
            f"SELECT RowVersion FROM {table} WHERE RowVersion > %s AND RowVersion <= %s "
            "ORDER BY RowVersion LIMIT %s FOR UPDATE SKIP LOCKED",
            _HELD_RETURNING,
        )

    def next_row_version(self) -> str:
        """The input queue's lowest RowVersion after one (parameter), or NULL: where the next window starts
        after an empty one."""
        return f"SELECT min(RowVersion) FROM {self._input_queue()} WHERE {AFTER_ROW_VERSION}"

    def lock_timeout(self) -> str:
        """Set the transaction's lock_timeout (parameter: the setting as text) and return the one before."""
        return "SELECT current_setting('lock_timeout'), set_config('lock_timeout', %s, true)"

    def held_slice(self) -> str:
        """Read held rows of the input queue in a RowVersion range (parameters: from, to exclusive), in the
        staged slice's columns."""
        return (
            f"SELECT RowVersion, Id::text, Headers, Body, Expires FROM {self._input_queue()} "
            "WHERE RowVersion >= %s AND RowVersion < %s ORDER BY RowVersion"
        )

    def held_headers(self) -> str:
        """The headers of the held rows in a RowVersion range (parameters: from, to exclusive), read through
        another connection than the hold's: for the slices a transform left unread."""
        return (
            f"SELECT RowVersion, Headers FROM {self._input_queue()} "
            "WHERE RowVersion >= %s AND RowVersion < %s ORDER BY RowVersion"
        )

    def unreadable_held(self) -> str:
        """Held rows as the error queue keeps them (parameter: an array of RowVersions), read through
        another connection than the hold's, which still sees them until the hold commits."""
        return (
            f"SELECT Id, CorrelationId, ReplyToAddress, Headers, Body FROM {self._input_queue()} "
            "WHERE RowVersion = ANY(%s) ORDER BY RowVersion"
        )

    def insert_unreadable(self, error_queue: QueueAddress) -> str:
        """One row of :meth:`unreadable_held` into the error queue, unchanged, as a recoverable message."""
        columns = "Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body"
        return (
            f"INSERT INTO {self.dialect.qualified_name(error_queue)} ({columns}) "
            "VALUES (%s, %s, %s, true, NULL, %s, %s)"
        )

    def move_poison(self, error_queue: QueueAddress) -> str:
        """Move staged rows (run id, RowVersions as an array) unchanged to the error queue (PostgreSQL)."""
        columns = "Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body"
        return (
            f"WITH p AS (DELETE FROM {self.staging} WHERE RunId = %s AND RowVersion = ANY(%s) "
            "RETURNING Id, CorrelationId, ReplyToAddress, Headers, Body) "
            f"INSERT INTO {self.dialect.qualified_name(error_queue)} ({columns}) "
            "SELECT Id, CorrelationId, ReplyToAddress, true, NULL, Headers, Body FROM p"
        )

    def copy_rows(self, table: QueueAddress, columns: Sequence[str]) -> str:
        names = ", ".join(self.dialect.quote(column) for column in columns)
        # COPY runs without parameters, so the '%%' that quoting writes for psycopg goes back to '%'
        return self.dialect.display_sql(f"COPY {self.dialect.qualified_name(table)} ({names}) FROM STDIN")

    @property
    def stage_rows_per_statement(self) -> int:
        rows = {"sqlserver": 200, "sqlite": 3000, "postgresql": 1000}[self.engine]
        return self.dialect.rows_per_statement(self.stage_rows, rows)

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
        if expires is None:
            return None
        utc = expires.astimezone(timezone.utc)
        if self.engine == "sqlite":
            return utc.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        if self.engine == "sqlserver":
            return utc.replace(tzinfo=None)
        return utc

    def count_part(self) -> str:
        p = self.p
        return f"SELECT count(*) FROM {self.staging} WHERE RunId = {p} AND JobAttempt = {p} AND Part = {p}"

    def staged_stats(self) -> str:
        p = self.p
        return f"SELECT count(*), min(RowVersion), max(RowVersion) FROM {self.staging} WHERE RunId = {p}"

    def staged_slice(self) -> str:
        p = self.p
        # PostgreSQL's uuid text comes from the server far cheaper than str() of a UUID on the executors
        native_id = "Id::text" if self.engine == "postgresql" else "Id"
        return (
            f"SELECT RowVersion, {native_id}, Headers, Body, Expires FROM {self.staging} "
            f"WHERE RunId = {p} AND RowVersion >= {p} AND RowVersion < {p} ORDER BY RowVersion"
        )

    def delete_staging(self) -> str:
        return f"DELETE FROM {self.staging} WHERE RunId = {self.p}"

    def delete_staged_through(self) -> str:
        """Drop a stream's staged rows up to a position (its ``commit(end)``)."""
        p = self.p
        return f"DELETE FROM {self.staging} WHERE RunId = {p} AND RowVersion <= {p}"

    def set_summary_if(self) -> str:
        """Compare-and-set of a run's Summary (a stream keeps its last position there)."""
        p = self.p
        return (
            f"UPDATE {self.runs} SET Summary = {p}, HeartbeatAt = {self.now} "
            f"WHERE RunId = {p} AND Summary = {p}"
        )

    def restore(self, queue: QueueAddress) -> str:
        """Put a run's staged messages back at the end of ``queue``, in their order, Expires kept."""
        true = "true" if self.engine == "postgresql" else "1"
        columns = "Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body"
        return (
            f"INSERT INTO {self.dialect.qualified_name(queue)} ({columns}) "
            f"SELECT Id, CorrelationId, ReplyToAddress, {true}, Expires, Headers, Body FROM {self.staging} "
            f"WHERE RunId = {self.p} ORDER BY RowVersion"
        )

    def seconds_since(self, column: str) -> str:
        """An expression: seconds from ``column`` (a timestamp this module wrote) to now, as a number."""
        if self.engine == "postgresql":
            return f"EXTRACT(EPOCH FROM (clock_timestamp() - {column}))"
        if self.engine == "sqlserver":
            return f"DATEDIFF(second, {column}, SYSUTCDATETIME())"
        return f"(julianday('now') - julianday({column})) * 86400.0"

    def touch_run(self, states: Sequence[str]) -> str:
        """Lock a run's row for the transaction (its heartbeat set to now) while it is in one of ``states``:
        a stream stages only under that row's lock, so its staged rows stand still until the commit."""
        listed = ", ".join(f"'{state}'" for state in states)
        return (
            f"UPDATE {self.runs} SET HeartbeatAt = {self.now} WHERE RunId = {self.p} AND State IN ({listed})"
        )

    def table_columns(self, table: QueueAddress) -> str:
        """No rows, only the column names of ``table`` (from the cursor's description)."""
        return f"SELECT * FROM {self.dialect.qualified_name(table)} WHERE 1 = 0"

    # ---- fill markers --------------------------------------------------------------------------
    def fill_batches_done(self) -> str:
        p = self.p
        return f"SELECT Batch FROM {self.fill} WHERE RunId = {p} AND Part = {p}"

    def insert_fill_marker(self) -> str:
        p = self.p
        return f"INSERT INTO {self.fill} (RunId, Part, Batch, Messages) VALUES ({p}, {p}, {p}, {p})"

    def fill_totals(self) -> str:
        return f"SELECT count(*), COALESCE(sum(Messages), 0) FROM {self.fill} WHERE RunId = {self.p}"

    # ---- sink tables ---------------------------------------------------------------------------
    def insert_rows(self, table: QueueAddress, columns: Sequence[str], rows: int) -> str:
        names = ", ".join(self.dialect.quote(column) for column in columns)
        row = "(" + ", ".join([self.p] * len(columns)) + ")"
        return f"INSERT INTO {self.dialect.qualified_name(table)} ({names}) VALUES " + ", ".join([row] * rows)

    def rows_per_insert(self, columns: int) -> int:
        limit = {"sqlserver": 2000, "sqlite": 30000, "postgresql": 30000}[self.engine]
        return max(1, min(1000, limit // max(columns, 1)))

    def sink_value(self, value: Any) -> Any:
        """A Spark row value as this engine's driver binds it."""
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
        if self.engine == "sqlite":
            if isinstance(value, datetime):
                moment = value.astimezone(timezone.utc) if value.tzinfo else value
                return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
            if isinstance(value, date):
                return value.isoformat()
            if isinstance(value, Decimal):
                return str(value)
            if isinstance(value, bool):
                return int(value)
        if self.engine == "sqlserver" and isinstance(value, datetime) and value.tzinfo is not None:
            return value.astimezone(timezone.utc).replace(tzinfo=None)
        if isinstance(value, uuid.UUID):
            return self.dialect.row_id(value)
        return value


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
