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

The SQL text is the dialect's (its ``bridge_*`` statements); :class:`BridgeSql` renders it for one set of
control tables, and the jobs run it. Nothing here imports Airflow or Spark: the
executors run it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
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

    The text is the dialect's: its ``bridge_<name>`` statements (``dialects/statements.py`` and each engine's
    table), here with the tables filled in (quoted once, now) and ``{queue}`` the input queue. A statement
    that needs only those is asked for by its name, ``sql.get_run()`` for ``bridge_get_run``; the methods
    below take what one needs besides, and bind a received message's values for staging."""

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

    def statement(self, name: str, **values: str) -> str:
        """The dialect's statement ``bridge_<name>`` for these tables."""
        if self.queue is not None:
            values.setdefault("queue", self.dialect.qualified_name(self.queue))
        try:
            return self.dialect.sql(
                f"bridge_{name}", runs=self.runs, staging=self.staging, fill=self.fill, **values
            )
        except KeyError as missing:
            raise ConfigurationError(
                f"the bridge's {name} statement needs {missing} (the input queue's address)"
            ) from None

    def __getattr__(self, name: str) -> Callable[[], str]:
        if name.startswith("_") or name in ("transport", "dialect", "queue") or name not in self.statements():
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return lambda: self.statement(name)

    def statements(self) -> set[str]:
        """The names this engine's bridge statements are asked for by (``get_run``, ``held_bounds`` ...)."""
        return {
            name.removeprefix("bridge_") for name in self.dialect.statements if name.startswith("bridge_")
        }

    # ---- clock ---------------------------------------------------------------------------------
    @property
    def now(self) -> str:
        return self.dialect.fragment("bridge_now")

    def older_than(self, column: str) -> tuple[str, SecondsBinding]:
        """A condition "column is older than N seconds ago" and how to bind N."""
        return self.statement("older_than", column=column), self.dialect.bridge_bind_seconds

    def seconds_since(self, column: str) -> str:
        """An expression: seconds from ``column`` (a timestamp this module wrote) to now, as a number."""
        return self.statement("seconds_since", column=column)

    # ---- what a statement needs besides the tables ---------------------------------------------
    def create_statements(self) -> list[str]:
        """Idempotent DDL for the three control tables."""
        return self.dialect.bridge_create_statements(self.tables.runs, self.tables.staging, self.tables.fill)

    def counted(self, statement: str) -> str:
        """An UPDATE that also returns how many rows it changed, as a row on SQL Server: connections run
        with NOCOUNT ON there, so drivers report no row count (see :func:`rows_changed`)."""
        return self.statement("counted", statement=statement)

    def set_state(self, from_states: Sequence[str]) -> str:
        return self.statement("set_state", states=_listed(from_states))

    def set_state_if_stale(self, from_states: Sequence[str]) -> tuple[str, SecondsBinding]:
        """:meth:`set_state`, only while the run's heartbeat is older than N seconds; and how to bind N."""
        condition, bind = self.older_than("HeartbeatAt")
        return f"{self.set_state(from_states)} AND {condition}", bind

    def touch_run(self, states: Sequence[str]) -> str:
        """Lock a run's row for the transaction (its heartbeat set to now) while it is in one of ``states``:
        a stream stages only under that row's lock, so its staged rows stand still until the commit."""
        return self.statement("touch_run", states=_listed(states))

    def run_state_shared(self, column: str = "State") -> str:
        """Read a run's state (or ``Summary``: a stream's owner) and hold a shared lock on its row to the end
        of the transaction.

        Receivers take it in each batch; changing the state (an UPDATE) waits for those batches to end, and
        batches after the change see the new state. SQLite serialises writers anyway. On PostgreSQL a
        stream's reads take ``FOR KEY SHARE``: the owner's own receives (UPDATEs of the Summary) go on beside
        them, and a takeover (``takeover``: ``FOR UPDATE`` first) waits for them to end.
        """
        return self.statement(
            {"State": "run_state_shared", "Summary": "run_owner_shared"}.get(column, "run_takeover")
        )

    def orphans(self) -> tuple[str, SecondsBinding]:
        condition, bind = self.older_than("HeartbeatAt")
        return self.statement("orphans", older=condition), bind

    def stage_rows(self, rows: int) -> str:
        row = "(" + ", ".join([self.p] * 10) + ")"
        return self.statement("stage_rows", values=", ".join([row] * rows))

    @property
    def stage_rows_per_statement(self) -> int:
        return self.dialect.rows_per_statement(self.stage_rows, self.dialect.bridge_stage_rows_limit)

    def restore(self, queue: QueueAddress) -> str:
        """Put a run's staged messages back at the end of ``queue``, in their order, Expires kept."""
        return self.statement("restore", queue=self.dialect.qualified_name(queue))

    def table_columns(self, table: QueueAddress) -> str:
        """No rows, only the column names of ``table`` (from the cursor's description)."""
        return self.statement("table_columns", table=self.dialect.qualified_name(table))

    def insert_rows(self, table: QueueAddress, columns: Sequence[str], rows: int) -> str:
        row = "(" + ", ".join([self.p] * len(columns)) + ")"
        return self.statement(
            "insert_rows",
            table=self.dialect.qualified_name(table),
            columns=self._names(columns),
            values=", ".join([row] * rows),
        )

    def rows_per_insert(self, columns: int) -> int:
        """Rows one :meth:`insert_rows` carries: at most 1,000, within the parameters the engine allows."""
        return max(1, min(1000, self.dialect.bridge_insert_parameters // max(columns, 1)))

    def _names(self, columns: Sequence[str]) -> str:
        return ", ".join(self.dialect.quote(column) for column in columns)

    # ---- PostgreSQL's paths (asked for only where the dialect has them) --------------------------
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
        """The receive statement as a CTE whose unexpired rows go into staging, in one statement."""
        return self.statement("move_to_staging", receive=receive_batch)

    def move_to_stream_staging(self, receive_batch: str) -> str:
        """:meth:`move_to_staging` for a stream, keyed by the stream's next positions."""
        return self.statement("move_to_stream_staging", receive=receive_batch)

    def insert_unreadable(self, error_queue: QueueAddress) -> str:
        """One row of ``unreadable_held`` into the error queue, unchanged, as a recoverable message."""
        return self.statement("insert_unreadable", error_queue=self.dialect.qualified_name(error_queue))

    def move_poison(self, error_queue: QueueAddress) -> str:
        """Move staged rows (run id, RowVersions as an array) unchanged to the error queue."""
        return self.statement("move_poison", error_queue=self.dialect.qualified_name(error_queue))

    def copy_rows(self, table: QueueAddress, columns: Sequence[str]) -> str:
        # COPY runs without parameters, so the '%%' that quoting writes for psycopg goes back to '%'
        statement = self.statement(
            "copy_rows", table=self.dialect.qualified_name(table), columns=self._names(columns)
        )
        return self.dialect.display_sql(statement)

    # ---- values --------------------------------------------------------------------------------
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


def _listed(states: Sequence[str]) -> str:
    return ", ".join(f"'{state}'" for state in states)


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
