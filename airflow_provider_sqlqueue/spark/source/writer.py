"""The write side of the ``sqlqueue`` data source: every row of a DataFrame becomes a message in a queue.

    df.write.format("sqlqueue").option("queue", "orders").option("runId", "load-1").mode("append").save()

Rows become messages as the fill job maps them (:mod:`..row_messages`): a ``body`` column or the row as JSON,
optional ``headers``, ``message_id`` and ``time_to_be_received_seconds``.

Each partition is one transaction: its messages and a marker row (run id, partition) in the bridge's
``<prefix>_fill`` table commit together. A task that fails sent nothing; a retried or speculative attempt
of a partition that already committed finds the marker and sends nothing; and a re-run with the same
``runId`` sends only the partitions that did not commit (when the frame is partitioned the same way, as a
re-run of the same job is). Without ``runId`` each write gets a fresh one, so the guarantee holds across
task attempts of that write. Ids not given in a ``message_id`` column are derived from (run id, partition,
position), the same in every attempt.

The writer is built where the write is planned (on the driver): the options are checked, the password is
taken from the ``password`` option or ``SQLQUEUE_PASSWORD`` there, and the queue and the marker table must
exist, all before any task starts. Only then is it shipped to the executors, where each task opens its
own connection.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage

from ...transport import ConfigurationError, PermissionDenied, Transport, open_transport
from ..config import NO_NEW_FILE, url_from_option
from ..reading.transactions import table_exists
from ..row_messages import check_message_columns, row_message
from ..tables import DEFAULT_PREFIX, BridgeSql, bridge_tables, check_run_id, create_bridge_tables

if TYPE_CHECKING:
    from pyspark.sql import Row
    from pyspark.sql.types import StructType

__all__ = ["WRITE_OPTIONS", "PartitionSent", "SqlQueueDataSourceWriter"]

log = logging.getLogger("airflow_provider_sqlqueue.spark.source.writer")

WRITE_OPTIONS = {
    "url": "the queue database's URL without its password (else SQLQUEUE_URL)",
    "password": "the database password (else SQLQUEUE_PASSWORD); never inside url: Spark shows it in plans",
    "queue": "the destination queue's address (or save(<address>))",
    "runId": "names the write: a re-run with the same runId sends only the partitions that did not commit",
    "defaultSchema": "the schema of names given without one",
    "messageType": "NServiceBus.EnclosedMessageTypes of every message",
    "prefix": f"name prefix of the bridge's tables (default {DEFAULT_PREFIX})",
    "createTables": "true: create the bridge's tables if missing (needs DDL rights)",
}
_KEYS = {name.lower(): name for name in WRITE_OPTIONS}
SEND_CHUNK = 1000
MARKER_BATCH = 0  # the writer's marker is batch 0 of its partition in the fill table


def _option_key(key: str) -> str:
    """Spark lower-cases option names; ``run_id`` and ``runId`` are taken as the same option too."""
    return key.replace("_", "").lower()


def _flag(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ConfigurationError(f"option {name} must be true or false, not {text!r}")
    return value == "true"


@dataclass(frozen=True)
class PartitionSent(WriterCommitMessage):
    """What one task did: sent its partition's rows, or found them sent by an earlier attempt or run."""

    partition: int
    attempt: int
    sent: int
    already_sent: bool
    seconds: float


class SqlQueueDataSourceWriter(DataSourceWriter):
    """Sends each partition's rows as messages in one transaction with the partition's marker row."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool = False) -> None:
        if overwrite:
            raise ConfigurationError("a queue is only appended to: use mode('append'), not 'overwrite'")
        given: dict[str, str] = {}
        for key, value in options.items():
            name = _option_key(key)
            if name != "path" and name not in _KEYS:
                raise ConfigurationError(
                    f"unknown option {key!r} for format('sqlqueue') writes; known: {', '.join(WRITE_OPTIONS)}"
                )
            given[name] = value
        queue = (given.get("queue") or given.get("path") or "").strip()
        if not queue:
            raise ConfigurationError("format('sqlqueue') writes need option('queue', <address>)")
        self.queue = queue
        self.run_id_given = bool(given.get("runid"))
        self.run_id = check_run_id(given["runid"]) if self.run_id_given else f"write-{uuid.uuid4()}"
        self.default_schema = given.get("defaultschema") or None
        self.message_type = given.get("messagetype") or None
        self.prefix = given.get("prefix") or DEFAULT_PREFIX
        self._url = url_from_option(given.get("url"), given.get("password"))
        check_message_columns(schema)
        self._prepare(create_tables=_flag("createTables", given.get("createtables", "false")))

    def __repr__(self) -> str:
        return f"SqlQueueDataSourceWriter(queue={self.queue!r}, run_id={self.run_id!r})"

    def _open(self, **options: Any) -> Transport:
        return open_transport(self._url, default_schema=self.default_schema, **{**NO_NEW_FILE, **options})

    def _prepare(self, *, create_tables: bool) -> None:
        """On the driver, before any task: the queue exists and so does the table of partition markers."""
        with self._open(pool_size=1, max_overflow=0) as transport:
            target = transport.queue(self.queue)
            if not target.exists():
                raise ConfigurationError(f"queue {target.name} does not exist; provision it first")
            tables = bridge_tables(transport, self.queue, self.prefix)
            if table_exists(transport, tables.fill):
                return
            if not create_tables:
                raise ConfigurationError(
                    f"the Spark bridge's table {tables.fill} does not exist: create the bridge's tables in "
                    "the provisioning step (ProvisionSparkBridgeOperator, create_bridge_tables) or write "
                    "with option('createTables', 'true') (needs DDL rights)"
                )
            try:
                create_bridge_tables(transport, self.queue, self.prefix)
            except PermissionDenied as error:
                raise PermissionDenied(
                    f"creating the Spark bridge's tables was refused; nothing was sent. Create them in the "
                    f"provisioning step (ProvisionSparkBridgeOperator) or give this role CREATE ({error})"
                ) from error

    # ---- executors ---------------------------------------------------------------------------------
    def write(self, iterator: Iterator[Row]) -> PartitionSent:
        from pyspark import TaskContext

        context = TaskContext.get()
        part = context.partitionId() if context is not None else 0
        attempt = context.attemptNumber() if context is not None else 0
        started = time.monotonic()
        with self._open(pool_size=1, max_overflow=0) as transport:
            sql = BridgeSql(transport, bridge_tables(transport, self.queue, self.prefix))
            if self._committed(transport, sql, part):
                return PartitionSent(part, attempt, 0, True, round(time.monotonic() - started, 3))
            try:
                sent = self._send_partition(transport, sql, part, iterator)
            except Exception:
                # a concurrent (speculative) attempt may have committed this partition first: its marker
                # made ours fail, and our sends rolled back with it
                if not self._committed(transport, sql, part):
                    raise
                return PartitionSent(part, attempt, 0, True, round(time.monotonic() - started, 3))
        return PartitionSent(part, attempt, sent, False, round(time.monotonic() - started, 3))

    def _committed(self, transport: Transport, sql: BridgeSql, part: int) -> bool:
        with transport.connection() as connection:
            cursor = connection.cursor()
            cursor.execute(sql.fill_batches_done(), (self.run_id, part))
            done = bool(transport.dialect.fetch_rows(cursor))
            connection.commit()
        return done

    def _send_partition(self, transport: Transport, sql: BridgeSql, part: int, rows: Iterator[Row]) -> int:
        """All of the partition's messages and its marker in one transaction; return how many were sent."""
        target = transport.queue(self.queue)
        sent = 0
        with transport.connection(target.address) as connection:
            cursor = connection.cursor()
            begin = transport.dialect.begin_write()
            if begin:
                cursor.execute(begin, ())
            chunk = []
            for position, row in enumerate(rows):
                message = row_message(
                    self.run_id, part, position, row.asDict(recursive=True), message_type=self.message_type
                )
                chunk.append(message)
                if len(chunk) == SEND_CHUNK:
                    target.send_on(connection, chunk, commit=False)
                    sent += len(chunk)
                    chunk = []
            if chunk:
                target.send_on(connection, chunk, commit=False)
                sent += len(chunk)
            cursor.execute(sql.insert_fill_marker(), (self.run_id, part, MARKER_BATCH, sent))
            connection.commit()
        return sent

    # ---- driver ------------------------------------------------------------------------------------
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        parts = [m for m in messages if isinstance(m, PartitionSent)]
        log.info(
            "sent %d message(s) to %s from %d partition(s), run id %s; %d partition(s) were sent before",
            sum(m.sent for m in parts),
            self.queue,
            len(parts),
            self.run_id,
            sum(m.already_sent for m in parts),
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Partitions that committed stay sent (a queue's consumers may already have them): say which,
        and how a re-run sends only the rest."""
        parts = [m for m in messages if isinstance(m, PartitionSent)]
        log.warning(
            "the write to %s failed: %d partition(s) committed %d message(s), which stay sent; re-running "
            "the same frame with option('runId', %r) sends only the partitions that did not commit",
            self.queue,
            len(parts),
            sum(m.sent for m in parts),
            self.run_id,
        )
