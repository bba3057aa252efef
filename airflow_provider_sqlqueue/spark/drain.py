"""Drain a queue into a sink with Spark, losing nothing and receiving nothing twice.

Phase 1 (executors): N tasks, each a competing consumer with its own connection, receive batches and, in the
same transaction as each receive's DELETE, insert the messages into the staging table under the run id. A
task that fails rolls back its open batch (those messages are back in the queue); what it committed is
staged. The action returns only counts, so a re-evaluation could only receive *more* messages into staging,
and the run state stops even that once phase 2 has begun.

Phase 2 (driver): the run moves to ``processing`` (receivers that still run see it and stop), the staged
rows of the run become a DataFrame (read in RowVersion slices; the rows of a run no longer change, so any
re-read returns the same data), the user transform runs, and the result is committed once per run id:

- table and queue sinks: one transaction writes the results, marks the run ``committed`` and deletes the
  run's staged rows (exactly once);
- file sinks: Spark writes ``<path>/run_id=<run id>/`` (overwriting an earlier attempt of the same run),
  then one transaction marks the run committed and deletes its staged rows (at least once: every output
  row carries message ids).

If anything fails before the commit, the run is marked ``aborted`` and its staged messages go back to the
input queue in one transaction. A driver killed outright leaves them staged: a re-run of the same run id
finishes the run, and any later job on the queue puts them back once the run's heartbeat is older than
``orphan_timeout``.

Only the transport core, the database driver and PySpark are imported here: no Airflow.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from typing import TYPE_CHECKING, Any

from ..transport import (
    ConfigurationError,
    HeaderFormatError,
    OutgoingMessage,
    PermissionDenied,
    SqlQueueError,
    Transport,
    open_transport,
)
from ..transport.headers import (
    CONTENT_TYPE,
    ENCLOSED_MESSAGE_TYPES,
    TIME_SENT,
    decode_headers,
    parse_timestamp,
)
from ..transport.queue import as_utc
from .config import Sink, safe_path_part
from .tables import (
    ABORTED,
    COMMITTED,
    DEFAULT_PREFIX,
    PROCESSING,
    RECEIVING,
    BridgeSql,
    bridge_tables,
    check_run_id,
    create_bridge_tables,
    sink_table_ddl,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger("airflow_provider_sqlqueue.spark.drain")

__all__ = [
    "DrainConfig",
    "DrainError",
    "InjectedFault",
    "load_transform",
    "messages_schema",
    "run_drain",
]

RUN_ID_HEADER = "SqlQueue.Spark.RunId"
TEXT_TYPES_PATTERN = "text/|json|xml|csv|yaml"


class DrainError(SqlQueueError):
    """The drain could not finish; its messages are back in the input queue (or staged, if said so)."""


class InjectedFault(RuntimeError):
    """Raised by ``fail_receive_batch`` drills, inside a receive, before its commit."""


@dataclass(frozen=True)
class DrainConfig:
    """Everything a drain needs; ``url`` holds the credentials and stays out of ``repr``."""

    url: str = field(repr=False)
    input_queue: str
    sink: str
    run_id: str
    transform: str | None = None
    batch_size: int = 1000
    max_messages: int | None = None
    partitions: int = 2
    default_schema: str | None = None
    error_queue: str | None = "error"
    prefix: str = DEFAULT_PREFIX
    create_tables: bool = False
    orphan_timeout: float = 900.0
    heartbeat_interval: float = 30.0
    read_slice_rows: int = 20_000
    run_id_column: str | None = None
    message_type: str | None = None
    fail_receive_batch: int | None = None
    """Drill: the first attempt of every receive task raises inside its N-th receive, before the commit."""

    def __post_init__(self) -> None:
        check_run_id(self.run_id)
        Sink.parse(self.sink)
        for name in ("batch_size", "partitions", "read_slice_rows"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"{name} must be a positive int, not {value!r}")
        if self.max_messages is not None and (
            isinstance(self.max_messages, bool)
            or not isinstance(self.max_messages, int)
            or self.max_messages < 1
        ):
            raise ConfigurationError(
                f"max_messages must be a positive int or None, not {self.max_messages!r}"
            )
        if self.heartbeat_interval <= 0 or self.orphan_timeout < 3 * self.heartbeat_interval:
            raise ConfigurationError(
                "orphan_timeout must be at least three heartbeat intervals "
                f"({self.orphan_timeout} < 3 x {self.heartbeat_interval})"
            )

    @property
    def parsed_sink(self) -> Sink:
        return Sink.parse(self.sink)

    def open(self, **options: Any) -> Transport:
        return open_transport(
            self.url, default_schema=self.default_schema, error_queue=self.error_queue, **options
        )


# ---- the messages DataFrame ---------------------------------------------------------------------
def messages_schema() -> StructType:
    """The columns of the messages DataFrame a transform receives (``body_json`` is added after)."""
    from pyspark.sql.types import (
        BinaryType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            StructField("message_id", StringType(), False),
            StructField("native_id", StringType(), False),
            StructField("row_version", LongType(), False),
            StructField("headers", MapType(StringType(), StringType(), True), False),
            StructField("body", BinaryType(), True),
            StructField("content_type", StringType(), True),
            StructField("message_type", StringType(), True),
            StructField("body_text", StringType(), True),
            StructField("time_sent", TimestampType(), True),
            StructField("expires", TimestampType(), True),
        ]
    )


def read_schema() -> StructType:
    """What the executors read from staging: the messages' columns but ``body_text``."""
    from pyspark.sql.types import StructType

    return StructType([f for f in messages_schema().fields if f.name != "body_text"])


def _time_sent(text: str | None) -> datetime | None:
    """``NServiceBus.TimeSent`` (``yyyy-MM-dd HH:mm:ss:ffffff Z``), parsed without strptime's cost."""
    if not text:
        return None
    try:
        if len(text) == 28 and text[4] == "-" and text[19] == ":" and text.endswith(" Z"):
            return datetime(
                int(text[0:4]),
                int(text[5:7]),
                int(text[8:10]),
                int(text[11:13]),
                int(text[14:16]),
                int(text[17:19]),
                int(text[20:26]),
                tzinfo=timezone.utc,
            )
        return parse_timestamp(text)
    except ValueError:
        return None


def message_row(row_version: Any, native_id: Any, headers_text: Any, body: Any, expires: Any) -> tuple:
    """One staged row as the columns of :func:`read_schema` (``body_text`` is derived in Spark)."""
    if isinstance(headers_text, bytes | bytearray | memoryview):
        headers_text = bytes(headers_text).decode("utf-8")
    headers = decode_headers(headers_text)
    body_bytes = None if body is None else bytes(body)
    content_type = headers.get(CONTENT_TYPE)
    time_sent = _time_sent(headers.get(TIME_SENT))
    native = str(native_id)
    return (
        headers.get("NServiceBus.MessageId") or native,
        native,
        int(row_version),
        headers,
        body_bytes,
        content_type,
        headers.get(ENCLOSED_MESSAGE_TYPES),
        time_sent,
        as_utc(expires),
    )


def load_transform(path: str | None) -> Callable[[DataFrame], DataFrame]:
    """Import ``package.module.function`` (or ``package.module:function``); None is the identity."""
    if not path:
        return lambda frame: frame
    module_name, separator, name = path.partition(":")
    if not separator:
        module_name, _, name = path.rpartition(".")
    if not module_name or not name:
        raise ConfigurationError(f"transform {path!r} is not a dotted path like package.module.function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigurationError(
            f"transform {path!r}: cannot import {module_name!r} ({error}); ship it with --py-files"
        ) from error
    function = getattr(module, name, None)
    if not callable(function):
        raise ConfigurationError(f"transform {path!r}: {module_name} has no function {name!r}")
    return function


# ---- phase 1: receive into staging (runs on executors) ------------------------------------------
class _RunNotReceiving(Exception):
    def __init__(self, state: str | None) -> None:
        super().__init__(state)
        self.state = state


def receive_partition(
    config: DrainConfig, job_attempt: int, quotas: list[int | None], index: int, _: Iterable[Any]
) -> Iterator[dict[str, Any]]:
    """Executor side of phase 1: receive batches into staging until empty, the quota, or a state change."""
    from pyspark import TaskContext

    context = TaskContext.get()
    attempt = context.attemptNumber() if context is not None else 0
    started = time.monotonic()
    stats = {"partition": index, "attempt": attempt, "received": 0, "expired": 0, "poisoned": 0, "batches": 0}
    stop_reason = "empty"
    with config.open(pool_size=1, max_overflow=0) as transport:
        queue = transport.queue(config.input_queue)
        sql = BridgeSql(transport, bridge_tables(transport, config.input_queue, config.prefix))
        remaining = quotas[index]
        if remaining is not None:
            with transport.connection() as connection:
                cursor = connection.cursor()
                cursor.execute(sql.count_part(), (config.run_id, job_attempt, index))
                remaining -= int(transport.dialect.fetch_rows(cursor)[0][0])
                connection.commit()
        step = _move_into_staging if sql.can_move_server_side else _receive_into_staging
        while remaining is None or remaining > 0:
            size = config.batch_size if remaining is None else min(config.batch_size, remaining)
            try:
                received, expired, poisoned = step(
                    transport, queue, sql, config, job_attempt, index, size, attempt, stats["batches"]
                )
            except _RunNotReceiving as stop:
                stop_reason = f"run is {stop.state}"
                break
            stats["received"] += received
            stats["expired"] += expired
            stats["poisoned"] += poisoned
            stats["batches"] += 1 if (received or expired or poisoned) else 0
            if remaining is not None:
                remaining -= received
            if not received and not expired and not poisoned:
                break
        else:
            stop_reason = "limit"
    stats["stopped"] = stop_reason
    stats["seconds"] = round(time.monotonic() - started, 3)
    yield stats


def _check_state(transport: Transport, cursor: Any, sql: BridgeSql, run_id: str) -> None:
    cursor.execute(sql.run_state_shared(), (run_id,))
    rows = transport.dialect.fetch_rows(cursor)
    state = rows[0][0] if rows else None
    if state != RECEIVING:
        raise _RunNotReceiving(state)


def _drill(config: DrainConfig, attempt: int, batches: int, index: int) -> None:
    if config.fail_receive_batch is not None and attempt == 0 and batches + 1 == config.fail_receive_batch:
        raise InjectedFault(
            f"drill: the first attempt of partition {index} fails inside its receive "
            f"{config.fail_receive_batch}, before the commit"
        )


def _receive_into_staging(
    transport: Transport,
    queue: Any,
    sql: BridgeSql,
    config: DrainConfig,
    job_attempt: int,
    index: int,
    size: int,
    attempt: int,
    batches: int,
) -> tuple[int, int, int]:
    """One batch through the transport's receive: the messages pass through Python (every engine)."""
    with queue.receive(size) as batch:
        cursor = batch.connection.cursor()
        _check_state(transport, cursor, sql, config.run_id)
        params = [sql.stage_params(config.run_id, job_attempt, index, m) for m in batch]
        chunk = sql.stage_rows_per_statement
        for start in range(0, len(params), chunk):
            part = params[start : start + chunk]
            cursor.execute(sql.stage_rows(len(part)), [value for row in part for value in row])
        _drill(config, attempt, batches, index)
    return len(batch), batch.expired, batch.poisoned


def _move_into_staging(
    transport: Transport,
    queue: Any,
    sql: BridgeSql,
    config: DrainConfig,
    job_attempt: int,
    index: int,
    size: int,
    attempt: int,
    batches: int,
) -> tuple[int, int, int]:
    """One batch moved by the server: the receive's DELETE feeds the staging INSERT in one statement.

    Only the headers come back, to check them as a receive does: rows whose headers are not a header map
    move on to the error queue in the same transaction. Same semantics as :func:`_receive_into_staging`,
    without the bodies' round trip through Python.
    """
    with transport.connection(queue.address) as connection:
        cursor = connection.cursor()
        _check_state(transport, cursor, sql, config.run_id)
        cursor.execute(
            sql.move_to_staging(queue.receive_statement(cursor)),
            (size, config.run_id, job_attempt, index),
        )
        rows = transport.dialect.fetch_rows(cursor)
        expired = sum(1 for row in rows if row[2])
        poison: list[int] = []
        for row_version, headers, is_expired in rows:
            if is_expired:
                continue
            try:
                decode_headers(headers)
            except HeaderFormatError as error:
                poison.append(int(row_version))
                log.error(
                    "Error receiving message at RowVersion %s from %s: probable message metadata corruption "
                    "(%s). Moving it to error queue %s.",
                    row_version,
                    queue.address,
                    error,
                    queue.error_queue,
                )
        if poison:
            if queue.error_queue is None:
                raise HeaderFormatError(
                    f"{len(poison)} message(s) in {queue.address} cannot be read and no error queue is "
                    "configured; they stay in the queue"
                )
            cursor.execute(sql.move_poison(queue.error_queue), (config.run_id, poison))
        _drill(config, attempt, batches, index)
        connection.commit()
    return len(rows) - expired - len(poison), expired, len(poison)


# ---- phase 2: staged rows as a DataFrame (executors read slices) ---------------------------------
def read_slice(config: DrainConfig, bounds: tuple[int, int]) -> Iterator[tuple]:
    start, end = bounds
    with config.open(pool_size=1, max_overflow=0) as transport:
        sql = BridgeSql(transport, bridge_tables(transport, config.input_queue, config.prefix))
        with transport.connection() as connection:
            cursor = connection.cursor()
            cursor.execute(sql.staged_slice(), (config.run_id, start, end))
            while True:
                rows = cursor.fetchmany(2000)
                if not rows:
                    break
                for row in rows:
                    yield message_row(*row)
            connection.commit()


def _arrow_schema() -> Any:
    import pyarrow as pa

    moment = pa.timestamp("us", tz="UTC")
    return pa.schema(
        [
            ("message_id", pa.string()),
            ("native_id", pa.string()),
            ("row_version", pa.int64()),
            ("headers", pa.map_(pa.string(), pa.string())),
            ("body", pa.binary()),
            ("content_type", pa.string()),
            ("message_type", pa.string()),
            ("time_sent", moment),
            ("expires", moment),
        ]
    )


def read_slices_arrow(
    config: DrainConfig, bounds: Iterable[Any], rows_per_batch: int = 2000
) -> Iterator[Any]:
    """``mapInArrow`` side: read the slices named in ``bounds`` (batches of lo, hi) as Arrow record batches.

    Arrow carries the rows to the JVM column by column, much cheaper than pickled rows.
    """
    import pyarrow as pa

    schema = _arrow_schema()
    width = len(schema)

    def batch(rows: list[tuple]) -> Any:
        columns = list(zip(*rows, strict=True))
        arrays = []
        for index in range(width):
            values = columns[index]
            if index == 3:  # headers: a map
                values = [list(headers.items()) for headers in values]
            arrays.append(pa.array(values, type=schema.field(index).type))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    for record_batch in bounds:
        for start, end in zip(
            record_batch.column(0).to_pylist(), record_batch.column(1).to_pylist(), strict=True
        ):
            pending: list[tuple] = []
            for row in read_slice(config, (start, end)):
                pending.append(row)
                if len(pending) == rows_per_batch:
                    yield batch(pending)
                    pending = []
            if pending:
                yield batch(pending)


def staged_messages(spark: SparkSession, config: DrainConfig, count: int, low: int | None, high: int | None):
    """The run's staged messages as a DataFrame, read in RowVersion slices by the executors."""
    from pyspark.sql import functions as F

    schema = read_schema()
    if count == 0 or low is None or high is None:
        frame = spark.createDataFrame([], schema)
    else:
        slices = max(config.partitions, math.ceil(count / config.read_slice_rows))
        span = high - low + 1
        slices = min(slices, span)
        edges = [low + (span * i) // slices for i in range(slices)] + [high + 1]
        bounds = [(edges[i], edges[i + 1]) for i in range(slices)]
        slices_frame = spark.sparkContext.parallelize(bounds, len(bounds)).toDF("lo long, hi long")
        frame = slices_frame.mapInArrow(partial(read_slices_arrow, config), schema)
    content_type = F.lower(F.coalesce(F.col("content_type"), F.lit("")))
    # decoded in the JVM (invalid UTF-8 becomes U+FFFD): half the data through Python and Arrow
    body_text = F.when(content_type.rlike(TEXT_TYPES_PATTERN), F.col("body").cast("string"))
    frame = frame.withColumn("body_text", body_text).select(*messages_schema().fieldNames())
    return frame.withColumn(
        "body_json", F.when(content_type.contains("json"), F.try_parse_json(F.col("body_text")))
    )


# ---- driver --------------------------------------------------------------------------------------
class _Heartbeat(threading.Thread):
    def __init__(self, transport: Transport, sql: BridgeSql, run_id: str, interval: float) -> None:
        super().__init__(name="sqlqueue-heartbeat", daemon=True)
        self.transport, self.sql, self.run_id, self.interval = transport, sql, run_id, interval
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                _execute(self.transport, self.sql.heartbeat(), (self.run_id,))
            except Exception as error:  # the commit holds the row; a missed beat is harmless
                log.warning("heartbeat of run %s failed: %s", self.run_id, error)


def _execute(transport: Transport, statement: str, params: tuple = (), *, write: bool = True) -> Any:
    """Run one statement in its own transaction; return its rows (if any)."""
    with transport.connection() as connection:
        cursor = connection.cursor()
        begin = transport.dialect.begin_write() if write else None
        if begin:
            cursor.execute(begin, ())
        cursor.execute(statement, params)
        rows = transport.dialect.fetch_rows(cursor)
        connection.commit()
    return rows


def rows_changed(transport: Transport, cursor: Any, counted_statement: str, params: tuple) -> int:
    """Run a :meth:`BridgeSql.counted` statement and return how many rows it changed."""
    cursor.execute(counted_statement, params)
    if transport.dialect.name == "sqlserver":
        rows = transport.dialect.fetch_rows(cursor)
        return int(rows[0][0]) if rows else 0
    return cursor.rowcount


def _execute_counted(transport: Transport, counted_statement: str, params: tuple) -> int:
    """Run a :meth:`BridgeSql.counted` statement in its own transaction; return the rows it changed."""
    with transport.connection() as connection:
        cursor = connection.cursor()
        _begin(transport, cursor)
        changed = rows_changed(transport, cursor, counted_statement, params)
        connection.commit()
    return changed


def _begin(transport: Transport, cursor: Any) -> None:
    begin = transport.dialect.begin_write()
    if begin:
        cursor.execute(begin, ())


class Drain:
    """One drain run on the driver: bookkeeping around the two phases."""

    def __init__(
        self, spark: SparkSession, config: DrainConfig, *, echo: Callable[[str], None] | None = None
    ):
        self.spark = spark
        self.config = config
        self.sink = config.parsed_sink
        self.echo = echo or (lambda text: log.info("%s", text))
        self.transport = config.open(pool_size=2, max_overflow=2)
        self.input = self.transport.queue(config.input_queue)
        self.tables = bridge_tables(self.transport, config.input_queue, config.prefix)
        self.sql = BridgeSql(self.transport, self.tables, self.input.address)
        self.summary: dict[str, Any] = {
            "run_id": config.run_id,
            "input_queue": self.input.name,
            "sink": str(self.sink),
            "partitions": config.partitions,
            "batch_size": config.batch_size,
            "max_messages": config.max_messages,
        }

    # -- helpers --
    def close(self) -> None:
        self.transport.close()

    def _run_row(self) -> tuple | None:
        rows = _execute(self.transport, self.sql.get_run(), (self.config.run_id,), write=False)
        return tuple(rows[0]) if rows else None

    def _staged_stats(self) -> tuple[int, int | None, int | None]:
        rows = _execute(self.transport, self.sql.staged_stats(), (self.config.run_id,), write=False)
        count, low, high = rows[0]
        return int(count or 0), None if low is None else int(low), None if high is None else int(high)

    # -- set-up --
    def prepare(self, transform: Callable[[DataFrame], DataFrame]) -> StructType:
        """Check tables and the transform's output before anything is received; create tables if allowed."""
        if not self.input.exists():
            raise ConfigurationError(f"input queue {self.input.name} does not exist; provision it first")
        missing = [str(t) for t in (self.tables.runs, self.tables.staging) if not self._table_exists(t)]
        if missing and self.config.create_tables:
            try:
                create_bridge_tables(self.transport, self.config.input_queue, self.config.prefix)
            except PermissionDenied as error:
                raise PermissionDenied(
                    f"creating the Spark bridge's tables {', '.join(missing)} was refused; nothing was "
                    f"received. Create them in the provisioning step (ProvisionSparkBridgeOperator) or give "
                    f"this role CREATE on the schema ({error})"
                ) from error
        elif missing:
            raise ConfigurationError(
                f"the Spark bridge's tables {', '.join(missing)} do not exist: create them in the "
                "provisioning step (ProvisionSparkBridgeOperator, create_bridge_tables) or let the job "
                "create them with --create-tables (needs DDL rights)"
            )
        probe = self._result(transform, staged_messages(self.spark, self.config, 0, None, None))
        schema = probe.schema
        names = [f.name for f in schema.fields]
        if self.sink.is_file and not {"message_id", "message_ids"} & set(names):
            raise ConfigurationError(
                f"file sink {self.sink}: the transform's output needs a message_id (or message_ids) "
                "column so that readers can deduplicate; its columns are " + ", ".join(names)
            )
        if self.sink.kind == "table":
            self._prepare_table(schema)
        if self.sink.kind == "queue":
            target = self.transport.queue(self.sink.target)
            if not target.exists():
                raise ConfigurationError(f"sink queue {target.name} does not exist; provision it first")
        return schema

    def _table_exists(self, address: Any) -> bool:
        rows = _execute(self.transport, *self.transport.dialect.table_exists(address), write=False)
        return bool(rows) and rows[0][0] is not None

    def _table_columns(self, address: Any) -> list[str]:
        statement = self.sql.table_columns(address)
        with self.transport.connection() as connection:
            cursor = connection.cursor()
            cursor.execute(statement, ())
            names = [column[0] for column in cursor.description]
            cursor.fetchall()
            connection.commit()
        return names

    def _prepare_table(self, schema: StructType) -> None:
        address = self.transport.resolve(self.sink.target)
        if not self._table_exists(address):
            if not self.config.create_tables:
                raise ConfigurationError(
                    f"sink table {address} does not exist: create it in the provisioning step or run with "
                    "--create-tables"
                )
            columns = [(f.name, _logical_type(f.dataType), f.nullable) for f in schema.fields]
            try:
                _execute(self.transport, sink_table_ddl(self.transport, address, columns))
            except PermissionDenied as error:
                raise PermissionDenied(
                    f"creating the sink table {address} was refused; nothing was received. Create it in the "
                    f"provisioning step, or give this role CREATE on the schema ({error})"
                ) from error
            self.echo(f"created sink table {address}")
        existing = {name.lower() for name in self._table_columns(address)}
        missing = [f.name for f in schema.fields if f.name.lower() not in existing]
        if missing:
            raise ConfigurationError(
                f"sink table {address} has no column(s) {', '.join(missing)} that the transform produces"
            )

    def _result(self, transform: Callable[[DataFrame], DataFrame], messages: DataFrame) -> DataFrame:
        from pyspark.sql import DataFrame
        from pyspark.sql import functions as F

        result = transform(messages)
        if not isinstance(result, DataFrame):
            raise ConfigurationError(
                f"transform {self.config.transform} returned {type(result).__name__}, not a DataFrame"
            )
        if self.config.run_id_column and self.sink.kind in ("table", "queue"):
            result = result.withColumn(self.config.run_id_column, F.lit(self.config.run_id))
        return result

    def start_run(self) -> tuple[str, int]:
        """Register or resume the run; return (state, job attempt)."""
        run_id = self.config.run_id
        existing = self._run_row()
        if existing is None:
            try:
                _execute(self.transport, self.sql.insert_run(), (run_id, self.input.name, str(self.sink)))
                return RECEIVING, 1
            except SqlQueueError:
                raise
            except Exception:
                existing = self._run_row()  # a concurrent start of the same run id won the insert
                if existing is None:
                    raise
        state, attempt, queue_name, _summary = existing
        if queue_name != self.input.name:
            raise ConfigurationError(f"run {run_id} drains {queue_name}, not {self.input.name}")
        if state == COMMITTED:
            return COMMITTED, int(attempt)
        _execute(self.transport, self.sql.restart_run(), (str(self.sink), run_id))
        state, attempt, _queue, _summary = self._run_row()  # type: ignore[misc]
        return state, int(attempt)

    def restore_orphans(self) -> list[str]:
        """Put back the staged messages of other runs on this queue whose heartbeat stopped."""
        statement, bind = self.sql.orphans()
        params = (self.input.name, self.config.run_id, bind(self.config.orphan_timeout))
        rows = _execute(self.transport, statement, params, write=False)
        restored = []
        for (orphan,) in rows:
            moved = self.abort(
                orphan, f"orphaned: no heartbeat for {self.config.orphan_timeout:.0f} s", stale=True
            )
            if moved is not None:
                restored.append(orphan)
                self.echo(f"restored {moved} message(s) of orphaned run {orphan} to {self.input.name}")
        return restored

    def abort(self, run_id: str, reason: str, *, stale: bool = False) -> int | None:
        """Mark a run aborted and move its staged messages back to the input queue, in one transaction.

        Returns how many moved, or None when the run was not active (or, with ``stale``, not stale).
        """
        statement = self.sql.set_state((RECEIVING, PROCESSING))
        params: tuple = (ABORTED, run_id)
        if stale:
            statement, bind = self.sql.set_state_if_stale((RECEIVING, PROCESSING))
            params += (bind(self.config.orphan_timeout),)
        with self.transport.connection() as connection:
            cursor = connection.cursor()
            _begin(self.transport, cursor)
            if rows_changed(self.transport, cursor, self.sql.counted(statement), params) != 1:
                connection.rollback()
                return None
            cursor.execute(self.sql.staged_stats(), (run_id,))
            moved = int(self.transport.dialect.fetch_rows(cursor)[0][0] or 0)
            cursor.execute(self.sql.restore(self.input.address), (run_id,))
            cursor.execute(self.sql.delete_staging(), (run_id,))
            note = json.dumps(
                {"run_id": run_id, "state": ABORTED, "reason": reason[:2000], "restored": moved}
            )
            cursor.execute(self.sql.set_summary(), (note, run_id))
            connection.commit()
        return moved

    # -- phases --
    def receive(self, job_attempt: int) -> list[dict[str, Any]]:
        config = self.config
        quotas: list[int | None] = [None] * config.partitions
        if config.max_messages is not None:
            already, _, _ = self._staged_stats()
            remaining = max(config.max_messages - already, 0)
            quotas = [
                remaining // config.partitions + (1 if i < remaining % config.partitions else 0)
                for i in range(config.partitions)
            ]
        function = partial(receive_partition, config, job_attempt, quotas)
        rdd = self.spark.sparkContext.parallelize(range(config.partitions), config.partitions)
        # the one action on this RDD; it returns counts only, so nothing received is ever re-derived
        return rdd.mapPartitionsWithIndex(function).collect()

    def commit(self, result: DataFrame, staged: int) -> int:
        """Write the result and end the run in one transaction (tables, queues) or after the files."""
        if self.sink.is_file:
            return self._commit_files(result, staged)
        from pyspark import StorageLevel

        # compute the result on every core first (toLocalIterator alone runs one partition at a time);
        # if cached blocks are lost Spark recomputes them from the run's staged rows, which do not change
        started = time.monotonic()
        result = result.persist(StorageLevel.MEMORY_AND_DISK)
        computed = result.count()
        self.summary["compute_seconds"] = round(time.monotonic() - started, 3)
        self.echo(f"phase 2: {computed} result row(s) computed; committing them with the run")
        started = time.monotonic()
        run_id = self.config.run_id
        written = 0
        with self.transport.connection() as connection:
            cursor = connection.cursor()
            _begin(self.transport, cursor)
            statement = self.sql.counted(self.sql.set_state((PROCESSING,)))
            if rows_changed(self.transport, cursor, statement, (PROCESSING, run_id)) != 1:
                raise DrainError(f"run {run_id} is no longer processing (another job took its messages back)")
            rows = result.toLocalIterator(prefetchPartitions=True)  # computed and persisted already
            if self.sink.kind == "table":
                written = self._write_table(cursor, result.columns, rows)
            else:
                written = self._write_queue(connection, result.columns, rows)
            self.summary["write_seconds"] = round(time.monotonic() - started, 3)
            self._end_run(cursor, staged, written)
            connection.commit()
        result.unpersist()
        self.summary["commit_seconds"] = round(time.monotonic() - started, 3)
        return written

    def _end_run(self, cursor: Any, staged: int, written: int) -> None:
        run_id = self.config.run_id
        cursor.execute(self.sql.staged_stats(), (run_id,))
        now_staged = int(self.transport.dialect.fetch_rows(cursor)[0][0] or 0)
        if now_staged != staged:
            raise DrainError(f"run {run_id}: {now_staged} staged messages, but {staged} were processed")
        cursor.execute(self.sql.delete_staging(), (run_id,))
        self.summary.update(written=written, state=COMMITTED)
        summary = json.dumps(self.summary, default=str)
        if (
            rows_changed(self.transport, cursor, self.sql.counted(self.sql.finish_run()), (summary, run_id))
            != 1
        ):
            raise DrainError(f"run {run_id} could not be marked committed")

    def _write_table(self, cursor: Any, columns: list[str], rows: Iterator[Any]) -> int:
        address = self.transport.resolve(self.sink.target)
        value = self.sql.sink_value
        if self.sql.can_copy:
            written = 0
            with cursor.copy(self.sql.copy_rows(address, columns)) as copy:
                for row in rows:
                    copy.write_row([value(item) for item in row])
                    written += 1
            return written
        per_statement = self.sql.rows_per_insert(len(columns))
        statement_full = self.sql.insert_rows(address, columns, per_statement)
        written = 0
        pending: list[Any] = []

        def flush() -> None:
            statement = statement_full if len(pending) == per_statement else None
            statement = statement or self.sql.insert_rows(address, columns, len(pending))
            cursor.execute(statement, pending_values())
            pending.clear()

        def pending_values() -> list[Any]:
            return [value(item) for row in pending for item in row]

        for row in rows:
            pending.append(row)
            written += 1
            if len(pending) == per_statement:
                flush()
        if pending:
            flush()
        return written

    def _write_queue(self, connection: Any, columns: list[str], rows: Iterator[Any]) -> int:
        target = self.transport.queue(self.sink.target)
        written = 0
        batch: list[OutgoingMessage] = []
        for row in rows:
            batch.append(self._as_message(row.asDict(recursive=True), columns))
            if len(batch) == 1000:
                target._send_on(connection, batch, commit=False)
                written += len(batch)
                batch = []
        if batch:
            target._send_on(connection, batch, commit=False)
            written += len(batch)
        return written

    def _as_message(self, row: dict[str, Any], columns: list[str]) -> OutgoingMessage:
        headers = {RUN_ID_HEADER: self.config.run_id}
        if self.config.message_type:
            headers[ENCLOSED_MESSAGE_TYPES] = self.config.message_type
        if "body" in row and row["body"] is not None:
            body = row["body"]
            if isinstance(row.get("headers"), dict):
                headers.update({str(k): None if v is None else str(v) for k, v in row["headers"].items()})
            body = bytes(body) if isinstance(body, bytearray | memoryview) else body
        else:
            headers[CONTENT_TYPE] = "application/json"
            body = self.sql.sink_value(row)  # JSON text of the row
        return OutgoingMessage(body, headers)

    def _commit_files(self, result: DataFrame, staged: int) -> int:
        base = self.sink.target.rstrip("/")
        path = f"{base}/run_id={safe_path_part(self.config.run_id)}"
        (result.write.mode("overwrite").format(self.sink.kind).save(path))
        written = self.spark.read.format(self.sink.kind).load(path).count() if staged else 0
        self.summary["output_path"] = path
        with self.transport.connection() as connection:
            cursor = connection.cursor()
            _begin(self.transport, cursor)
            statement = self.sql.counted(self.sql.set_state((PROCESSING,)))
            if rows_changed(self.transport, cursor, statement, (PROCESSING, self.config.run_id)) != 1:
                raise DrainError(
                    f"run {self.config.run_id} is no longer processing; {path} may hold rows of messages "
                    "that went back to the queue (readers deduplicate by message id)"
                )
            self._end_run(cursor, staged, written)
            connection.commit()
        return written

    def run(self) -> dict[str, Any]:
        config = self.config
        started = time.monotonic()
        transform = load_transform(config.transform)
        self.prepare(transform)
        state, job_attempt = self.start_run()
        self.summary["job_attempt"] = job_attempt
        if state == COMMITTED:
            row = self._run_row()
            previous = json.loads(row[3]) if row and row[3] else {}
            self.echo(f"run {config.run_id} was committed before: nothing to do")
            return {**previous, "skipped": True, "job_attempt": job_attempt}
        heartbeat = _Heartbeat(self.transport, self.sql, config.run_id, config.heartbeat_interval)
        heartbeat.start()
        try:
            self.summary["restored_orphans"] = self.restore_orphans()
            tasks: list[dict[str, Any]] = []
            phase1 = time.monotonic()
            if state == RECEIVING:
                self.echo(f"phase 1: {config.partitions} receiver(s) drain {self.input.name} into staging")
                tasks = self.receive(job_attempt)
                changed = _execute_counted(
                    self.transport,
                    self.sql.counted(self.sql.set_state((RECEIVING,))),
                    (PROCESSING, config.run_id),
                )
                if changed != 1 and (self._run_row() or (None,))[0] != PROCESSING:
                    # another driver of this run id moving it on is fine (one of the two commits)
                    raise DrainError(f"run {config.run_id} left the receiving state while receiving")
            else:
                self.echo(f"run {config.run_id} was already processing: finishing it without receiving more")
            receive_seconds = time.monotonic() - phase1
            staged, low, high = self._staged_stats()
            self.summary.update(
                received=sum(t["received"] for t in tasks),
                expired=sum(t["expired"] for t in tasks),
                poisoned=sum(t["poisoned"] for t in tasks),
                batches=sum(t["batches"] for t in tasks),
                tasks=tasks,
                processed=staged,
                receive_seconds=round(receive_seconds, 3),
            )
            self.echo(
                f"phase 1 done: {self.summary['received']} received ({self.summary['expired']} expired, "
                f"{self.summary['poisoned']} unreadable moved to the error queue); "
                f"{staged} staged for the run"
            )
            phase2 = time.monotonic()
            messages = staged_messages(self.spark, config, staged, low, high)
            result = self._result(transform, messages)
            self.echo(f"phase 2: transform and commit {staged} message(s) to {self.sink}")
            self.summary["process_seconds"] = None
            written = self.commit(result, staged)
            process_seconds = time.monotonic() - phase2
            total = time.monotonic() - started
            self.summary.update(
                written=written,
                state=COMMITTED,
                process_seconds=round(process_seconds, 3),
                seconds=round(total, 3),
                messages_per_second=round(staged / total, 1) if total > 0 else None,
                skipped=False,
            )
            _execute(
                self.transport,
                self.sql.set_summary(),
                (json.dumps(self.summary, default=str), config.run_id),
            )
            return self.summary
        except BaseException as error:
            moved = None
            try:
                moved = self.abort(config.run_id, f"{type(error).__name__}: {error}")
            except Exception as abort_error:
                log.error(
                    "run %s failed (%s) and its staged messages could not be put back (%s); they stay staged "
                    "until the run id is re-run or another job restores them",
                    config.run_id,
                    error,
                    abort_error,
                )
            if moved is not None:
                self.echo(
                    f"run {config.run_id} aborted: {moved} staged message(s) went back to {self.input.name}"
                )
            raise
        finally:
            heartbeat.stopped.set()


def _logical_type(data_type: Any) -> str:
    from pyspark.sql import types as T

    mapping = [
        (T.StringType, "string"),
        (T.LongType, "long"),
        (T.IntegerType, "int"),
        (T.ShortType, "short"),
        (T.ByteType, "short"),
        (T.DoubleType, "double"),
        (T.FloatType, "float"),
        (T.BooleanType, "boolean"),
        (T.TimestampType, "timestamp"),
        (T.TimestampNTZType, "timestamp"),
        (T.DateType, "date"),
        (T.BinaryType, "binary"),
    ]
    for kind, name in mapping:
        if isinstance(data_type, kind):
            return name
    if isinstance(data_type, T.DecimalType):
        return f"decimal({data_type.precision},{data_type.scale})"
    return "json"


def run_drain(spark: SparkSession, config: DrainConfig, *, echo: Callable[[str], None] | None = None) -> dict:
    """Run one drain on ``spark``; return its summary (also stored in the runs table)."""
    drain = Drain(spark, config, echo=echo)
    try:
        return drain.run()
    finally:
        drain.close()


def summary_json(summary: dict[str, Any]) -> str:
    return json.dumps(summary, default=str, sort_keys=True)
