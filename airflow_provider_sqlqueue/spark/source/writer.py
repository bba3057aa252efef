"""The write side of the ``sqlqueue`` data source: every row of a DataFrame becomes a message in a queue.

    df.write.format("sqlqueue").option("queue", "orders").option("runId", "load-1").mode("append").save()

Rows become messages as the fill job maps them (:mod:`..row_messages`): a ``body`` column or the row as JSON,
optional ``headers``, ``message_id`` and ``time_to_be_received_seconds``.

Each batch of a partition (the whole partition unless ``batchSize`` is set) is one transaction: its
messages and a marker row (run id, partition, batch) in the bridge's ``<prefix>_fill`` table commit
together. A task that fails rolled back only its open batch; a retried or speculative attempt skips the
batches an earlier attempt committed; and a re-run with the same ``runId`` sends only what did not commit.
That needs every attempt to see the same rows in the same order: a frame of a non-deterministic source is
checkpointed first (the fill job does, ``fill.py``). Without ``runId`` each write gets a fresh one, so the
guarantee holds across task attempts of that write. Ids not given in a ``message_id`` column are derived
from (run id, partition, position), the same in every attempt.

The writer is built where the write is planned (on the driver): the options are checked, the password is
taken from the ``password`` option or ``SQLQUEUE_PASSWORD`` there, and the queue and the marker table must
exist, all before any task starts. Only then is it shipped to the executors, where each task opens its
own connection.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage

from ...transport import ConfigurationError, PermissionDenied, Transport, open_transport
from ..config import NO_NEW_FILE, url_from_option
from ..row_messages import check_message_columns, row_message
from ..tables import DEFAULT_PREFIX, BridgeSql, bridge_tables, check_run_id, create_bridge_tables
from .errors import InjectedFault
from .transactions import table_exists

if TYPE_CHECKING:
    from pyspark.sql import Row
    from pyspark.sql.types import StructType

__all__ = ["WRITE_OPTIONS", "InjectedFault", "PartitionSent", "SqlQueueDataSourceWriter"]

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
    "batchSize": "messages per transaction, each committed with its marker (default: the whole partition)",
}
DRILL_OPTION = "failafterbatch"  # the failure drills: a task's first attempt fails after its N-th batch
_KEYS = {name.lower(): name for name in WRITE_OPTIONS}
SEND_CHUNK = 1000


def _option_key(key: str) -> str:
    """Spark lower-cases option names; ``run_id`` and ``runId`` are taken as the same option too."""
    return key.replace("_", "").lower()


def _flag(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ConfigurationError(f"option {name} must be true or false, not {text!r}")
    return value == "true"


def _positive(name: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigurationError(f"option {name} must be a positive integer, not {text!r}")
    return value


@dataclass(frozen=True)
class PartitionSent(WriterCommitMessage):
    """What one task did: sent its partition's rows, or found them sent by an earlier attempt or run."""

    partition: int
    attempt: int
    sent: int
    skipped: int
    batches: int
    batches_skipped: int
    seconds: float

    @property
    def already_sent(self) -> bool:
        """Every batch of the partition was committed before (by an earlier attempt or run)."""
        return self.batches == 0 and self.batches_skipped > 0


class SqlQueueDataSourceWriter(DataSourceWriter):
    """Sends each partition's rows as messages in one transaction with the partition's marker row."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool = False) -> None:
        if overwrite:
            raise ConfigurationError("a queue is only appended to: use mode('append'), not 'overwrite'")
        given: dict[str, str] = {}
        for key, value in options.items():
            name = _option_key(key)
            if name not in ("path", DRILL_OPTION) and name not in _KEYS:
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
        self.batch_size = _positive("batchSize", given["batchsize"]) if given.get("batchsize") else None
        drill = given.get(DRILL_OPTION)
        self.fail_after_batch = _positive("failAfterBatch", drill) if drill else None
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
        """Send the partition's rows batch by batch, skipping the batches whose marker is there already."""
        from pyspark import TaskContext

        context = TaskContext.get()
        part = context.partitionId() if context is not None else 0
        attempt = context.attemptNumber() if context is not None else 0
        started = time.monotonic()
        counts = {"sent": 0, "skipped": 0, "batches": 0, "batches_skipped": 0}
        with self._open(pool_size=1, max_overflow=0) as transport:
            sql = BridgeSql(transport, bridge_tables(transport, self.queue, self.prefix))
            target = transport.queue(self.queue)
            done = self._done(transport, sql, part)
            rows = enumerate(iterator)
            for number in itertools.count():
                batch = itertools.islice(rows, self.batch_size)
                first = next(batch, None)
                if first is None and number > 0:
                    break
                items = _Counted(itertools.chain([first], batch) if first is not None else iter(()))
                if number not in done:
                    try:
                        self._send_batch(transport, target, sql, part, number, items)
                    except Exception:
                        # a concurrent (speculative) attempt may have committed this batch first: its
                        # marker made ours fail, and our sends rolled back with it
                        if number not in self._done(transport, sql, part):
                            raise
                        done.add(number)
                if number in done:
                    counts["skipped"] += items.drain()
                    counts["batches_skipped"] += 1
                else:
                    counts["sent"] += items.count
                    counts["batches"] += 1
                    if attempt == 0 and self.fail_after_batch == counts["batches"]:
                        raise InjectedFault(
                            f"drill: the first attempt of partition {part} fails after committing "
                            f"{counts['batches']} batch(es)"
                        )
                if first is None:
                    break
        return PartitionSent(part, attempt, **counts, seconds=round(time.monotonic() - started, 3))

    def _done(self, transport: Transport, sql: BridgeSql, part: int) -> set[int]:
        """The batches of this partition whose marker was committed, by this run id."""
        with transport.connection() as connection:
            cursor = connection.cursor()
            cursor.execute(sql.fill_batches_done(), (self.run_id, part))
            done = {int(row[0]) for row in transport.dialect.fetch_rows(cursor)}
            connection.commit()
        return done

    def _send_batch(
        self, transport: Transport, target: Any, sql: BridgeSql, part: int, number: int, rows: _Counted
    ) -> None:
        """The batch's messages and its marker in one transaction."""
        with transport.connection(target.address) as connection:
            cursor = connection.cursor()
            begin = transport.dialect.begin_write()
            if begin:
                cursor.execute(begin, ())
            chunk = []
            for position, row in rows:
                message = row_message(
                    self.run_id, part, position, row.asDict(recursive=True), message_type=self.message_type
                )
                chunk.append(message)
                if len(chunk) == SEND_CHUNK:
                    target.send_on(connection, chunk, commit=False)
                    chunk = []
            if chunk:
                target.send_on(connection, chunk, commit=False)
            cursor.execute(sql.insert_fill_marker(), (self.run_id, part, number, rows.count))
            connection.commit()

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
        """Batches that committed stay sent (a queue's consumers may already have them): say so, and how a
        re-run sends only the rest."""
        parts = [m for m in messages if isinstance(m, PartitionSent)]
        log.warning(
            "the write to %s failed: %d partition(s) finished with %d message(s) sent, and every batch "
            "committed stays sent; re-running the same frame with option('runId', %r) sends only the "
            "batches that did not commit",
            self.queue,
            len(parts),
            sum(m.sent for m in parts),
            self.run_id,
        )


class _Counted:
    """An iterator of (position, row) that counts what was taken from it."""

    def __init__(self, items: Iterator[tuple[int, Any]]) -> None:
        self.items, self.count = items, 0

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        for item in self.items:
            self.count += 1
            yield item

    def drain(self) -> int:
        """Take the rest (a batch sent before: its positions still count); return how many in all."""
        for _ in self:
            pass
        return self.count
