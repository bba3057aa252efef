"""Fill a queue from a DataFrame with Spark: an application of the ``sqlqueue`` data source's writer.

The writer (``source/writer.py``) sends every partition in batches of ``batch_size``, each batch's messages
and its marker row (run id, partition, batch) in one transaction, so a retried or speculative task skips
the batches an earlier attempt committed and a re-run of the same run id sends only what is missing. That
needs every attempt to see the same rows in the same order, which is the part this job adds: the source is
checkpointed first (``checkpoint=True``), unless it is known to be deterministic (files, tables read
without a shuffle). It also drives the writer's partitions itself, so that its summary can say what each
task sent and skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..transport import ConfigurationError, Transport, open_transport
from .config import NO_NEW_FILE, split_credentials
from .source.writer import DRILL_OPTION, InjectedFault, SqlQueueDataSourceWriter
from .tables import DEFAULT_PREFIX, BridgeSql, bridge_tables, check_run_id

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("airflow_provider_sqlqueue.spark.fill")

__all__ = ["FillConfig", "InjectedFault", "fill_queue", "read_source"]


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

    def write_options(self) -> dict[str, str]:
        """The same write as ``df.write.format("sqlqueue")`` options."""
        url, password = split_credentials(self.url)
        given = {
            "url": url,
            "password": password,
            "queue": self.queue,
            "runId": self.run_id,
            "defaultSchema": self.default_schema,
            "messageType": self.message_type,
            "prefix": self.prefix,
            "createTables": "true" if self.create_tables else "false",
            "batchSize": str(self.batch_size),
            DRILL_OPTION: None if self.fail_after_batch is None else str(self.fail_after_batch),
        }
        return {key: value for key, value in given.items() if value is not None}


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
    writer = SqlQueueDataSourceWriter(config.write_options(), frame.schema)  # checks all, sends nothing
    source = frame.repartition(config.partitions) if config.partitions else frame
    if config.checkpoint:
        source = source.localCheckpoint(eager=True)
    with config.open(pool_size=1, max_overflow=0) as transport:
        target = transport.queue(config.queue)
        sql = BridgeSql(transport, bridge_tables(transport, config.queue, config.prefix))
        say(f"filling {target.name} from {source.rdd.getNumPartitions()} partition(s), run {config.run_id}")
        tasks = source.rdd.mapPartitions(lambda rows: [asdict(writer.write(rows))]).collect()
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
