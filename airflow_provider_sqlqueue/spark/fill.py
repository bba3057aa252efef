"""Fill a queue from a DataFrame with Spark: batched sends, each batch exactly once per run id.

Every partition sends its rows in batches of ``batch_size``. A batch's INSERTs and a marker row
(run id, partition, batch) commit in one transaction, so a retried or speculative task skips the batches an
earlier attempt committed, and a re-run of the same run id sends only what is missing. That needs every
attempt to see the same rows in the same order: the source is checkpointed first (``checkpoint=True``),
unless it is known to be deterministic (files, tables read without a shuffle).

Rows become messages as :mod:`.row_messages` maps them (shared with the ``sqlqueue`` data source's writer): a
``body`` column or the row as JSON, optional ``headers``, ``message_id`` and ``time_to_be_received_seconds``;
without a ``message_id`` the Id is derived from (run id, partition, position).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from ..transport import ConfigurationError, Transport, open_transport
from .config import NO_NEW_FILE
from .row_messages import check_message_columns, row_message
from .tables import DEFAULT_PREFIX, BridgeSql, bridge_tables, check_run_id, create_bridge_tables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("airflow_provider_sqlqueue.spark.fill")

__all__ = ["FillConfig", "InjectedFault", "fill_queue", "read_source"]


class InjectedFault(RuntimeError):
    """Raised by ``fail_after_batch`` drills."""


@dataclass(frozen=True)
class FillConfig:
    url: str = field(repr=False)
    queue: str
    run_id: str
    batch_size: int = 1000
    partitions: int | None = None
    default_schema: str | None = None
    prefix: str = DEFAULT_PREFIX
    message_type: str | None = None
    checkpoint: bool = True
    create_tables: bool = False
    fail_after_batch: int | None = None
    """Drill: the first attempt of every task raises right after committing its N-th batch (1-based)."""

    def __post_init__(self) -> None:
        check_run_id(self.run_id)
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigurationError(f"batch_size must be a positive int, not {self.batch_size!r}")

    def open(self, **options: Any) -> Transport:
        return open_transport(self.url, default_schema=self.default_schema, **{**NO_NEW_FILE, **options})


def fill_partition(config: FillConfig, index: int, rows: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """Executor side: send this partition's rows in batches, skipping batches already marked sent."""
    from pyspark import TaskContext

    context = TaskContext.get()
    attempt = context.attemptNumber() if context is not None else 0
    started = time.monotonic()
    stats = {"partition": index, "attempt": attempt, "sent": 0, "skipped": 0, "batches": 0}
    with config.open(pool_size=1, max_overflow=0) as transport:
        target = transport.queue(config.queue)
        sql = BridgeSql(transport, bridge_tables(transport, config.queue, config.prefix))
        with transport.connection() as connection:
            cursor = connection.cursor()
            cursor.execute(sql.fill_batches_done(), (config.run_id, index))
            done = {int(row[0]) for row in transport.dialect.fetch_rows(cursor)}
            connection.commit()

        def send(batch_number: int, items: list[tuple[int, Any]]) -> None:
            if batch_number in done:
                stats["skipped"] += len(items)
                return
            messages = [
                row_message(
                    config.run_id, index, pos, row.asDict(recursive=True), message_type=config.message_type
                )
                for pos, row in items
            ]
            try:
                with transport.connection(target.address) as connection:
                    cursor = connection.cursor()
                    begin = transport.dialect.begin_write()
                    if begin:
                        cursor.execute(begin, ())
                    target.send_on(connection, messages, commit=False)
                    cursor.execute(sql.insert_fill_marker(), (config.run_id, index, batch_number, len(items)))
                    connection.commit()
            except Exception:
                # a concurrent (speculative) attempt may have committed this batch first: its marker
                # made ours fail and our sends rolled back with it
                with transport.connection() as connection:
                    cursor = connection.cursor()
                    cursor.execute(sql.fill_batches_done(), (config.run_id, index))
                    now_done = {int(row[0]) for row in transport.dialect.fetch_rows(cursor)}
                    connection.commit()
                if batch_number not in now_done:
                    raise
                stats["skipped"] += len(items)
                return
            stats["sent"] += len(items)
            stats["batches"] += 1
            if attempt == 0 and config.fail_after_batch == stats["batches"]:
                raise InjectedFault(
                    f"drill: the first attempt of partition {index} fails after committing "
                    f"{stats['batches']} batch(es)"
                )

        pending: list[tuple[int, Any]] = []
        batch_number = 0
        for position, row in enumerate(rows):
            pending.append((position, row))
            if len(pending) == config.batch_size:
                send(batch_number, pending)
                pending = []
                batch_number += 1
        if pending:
            send(batch_number, pending)
    stats["seconds"] = round(time.monotonic() - started, 3)
    yield stats


def read_source(spark: SparkSession, source: str) -> DataFrame:
    """``parquet:<path>``, ``json:<path>``, ``csv:<path>`` (with a header) or ``table:<catalog table>``."""
    kind, separator, target = source.partition(":")
    kind = kind.strip().lower()
    if not separator or not target:
        raise ConfigurationError(f"source {source!r} is not kind:target")
    if kind == "table":
        return spark.table(target)
    if kind == "csv":
        return spark.read.option("header", True).option("inferSchema", True).csv(target)
    if kind in ("parquet", "json", "orc"):
        return spark.read.format(kind).load(target)
    raise ConfigurationError(f"source {source!r}: kind must be parquet, json, csv, orc or table")


def fill_queue(
    spark: SparkSession,
    frame: DataFrame,
    config: FillConfig,
    *,
    echo: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Send every row of ``frame`` to the queue, each batch exactly once per run id; return a summary."""
    say = echo or (lambda text: log.info("%s", text))
    started = time.monotonic()
    check_message_columns(frame.schema)
    with config.open(pool_size=1, max_overflow=1) as transport:
        target = transport.queue(config.queue)
        if not target.exists():
            raise ConfigurationError(f"queue {target.name} does not exist; provision it first")
        tables = (
            create_bridge_tables(transport, config.queue, config.prefix)
            if config.create_tables
            else bridge_tables(transport, config.queue, config.prefix)
        )
        sql = BridgeSql(transport, tables)
        source = frame.repartition(config.partitions) if config.partitions else frame
        if config.checkpoint:
            source = source.localCheckpoint(eager=True)
        say(f"filling {target.name} from {source.rdd.getNumPartitions()} partition(s), run {config.run_id}")
        tasks = source.rdd.mapPartitionsWithIndex(partial(fill_partition, config)).collect()
        with transport.connection() as connection:
            cursor = connection.cursor()
            cursor.execute(sql.fill_totals(), (config.run_id,))
            batches, messages = transport.dialect.fetch_rows(cursor)[0]
            connection.commit()
        seconds = time.monotonic() - started
        summary = {
            "run_id": config.run_id,
            "queue": target.name,
            "sent": sum(t["sent"] for t in tasks),
            "skipped_already_sent": sum(t["skipped"] for t in tasks),
            "run_batches": int(batches or 0),
            "run_messages": int(messages or 0),
            "tasks": tasks,
            "seconds": round(seconds, 3),
        }
        say(
            f"sent {summary['sent']} message(s) to {target.name}; {summary['skipped_already_sent']} were "
            f"sent by an earlier attempt; the run holds {summary['run_messages']} in "
            f"{summary['run_batches']} batches"
        )
        return summary
