"""A streaming application for the ``sqlqueue`` data source's kill tests (run by spark-submit).

It streams a queue with ``Trigger.AvailableNow`` and ``maxMessagesPerTrigger`` into a table through
``foreachBatch``, idempotent per batch id (one transaction deletes the batch id's rows and inserts the
batch's). With ``--kill <point>`` the whole application (driver, JVM, Python workers: its process group)
dies by SIGKILL at that point of the second micro-batch:

- ``after_receive``: ``latestOffset`` has received the batch into staging, before Spark writes its offset;
- ``mid_batch``: an executor is reading the batch's staged rows;
- ``after_sink``: the sink's transaction committed, before Spark's commit log;
- ``before_commit``: Spark calls the source's ``commit``, before the staged rows are deleted.

Credentials come from SQLQUEUE_URL / SQLQUEUE_PASSWORD, as for every shipped job.
"""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Iterator
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import InputPartition

from airflow_provider_sqlqueue.spark import SqlQueueDataSource
from airflow_provider_sqlqueue.spark.config import url_from_environment
from airflow_provider_sqlqueue.spark.source.batch import ReadTask
from airflow_provider_sqlqueue.spark.source.options import SourceOptions
from airflow_provider_sqlqueue.spark.source.stream import PositionRange, SqlQueueStreamReader
from airflow_provider_sqlqueue.transport import open_transport

KILL_POINTS = ("after_receive", "mid_batch", "after_sink", "before_commit")
SINK_COLUMNS = "batch_id, message_id, native_id"


def die(point: str, note: str | None, group: int) -> None:
    """SIGKILL the application's process group (spark-submit, the JVM, the Python driver) and then this
    process's own group (PySpark's worker daemon puts its workers in a group of their own)."""
    if note:
        with open(note, "a", encoding="utf-8") as log:
            log.write(f"killed {point} pid={os.getpid()}\n")
    os.killpg(group, signal.SIGKILL)
    os.killpg(os.getpgrp(), signal.SIGKILL)


class KillingStreamReader(SqlQueueStreamReader):
    """The source's stream reader, killing the application at one point of the second micro-batch."""

    def __init__(
        self,
        options: SourceOptions,
        point: str | None,
        limit: int,
        note: str | None,
        group: int,
        first_row_version: int,
    ) -> None:
        super().__init__(options)
        self.point, self.limit, self.note, self.group = point, limit, note, group
        self.first_row_version = first_row_version
        self.batches = 0
        self.commits = 0

    def latestOffset(self, start: dict, limit) -> dict:
        end = super().latestOffset(start, limit)
        if end["position"] > start["position"]:
            self.batches += 1
            if self.point == "after_receive" and self.batches == 2:
                die(self.point, self.note, self.group)
        return end

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if isinstance(partition, ReadTask):  # read in place: RowVersions, the first one queued first
            low = partition.bounds[0][0] - self.first_row_version
        else:
            assert isinstance(partition, PositionRange)
            low = partition.low
        index = 0
        for batch in super().read(partition):
            for row in range(batch.num_rows):  # one row per record batch, so the kill lands mid-partition
                if self.point == "mid_batch" and low >= self.limit and index == 3:
                    die(self.point, self.note, self.group)
                index += 1
                yield batch.slice(row, 1)

    def commit(self, end: dict) -> None:
        self.commits += 1
        if self.point == "before_commit" and self.commits == 2:
            die(self.point, self.note, self.group)
        super().commit(end)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queue", required=True)
    parser.add_argument("--sink-table", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--limit", type=int, required=True)
    parser.add_argument("--default-schema")
    parser.add_argument("--kill", choices=KILL_POINTS)
    parser.add_argument("--note")
    parser.add_argument("--read-in-place", choices=("true", "false"), default="false")
    args = parser.parse_args()
    point, limit, note, group = args.kill, args.limit, args.note, os.getpgrp()
    transport = open_transport(url_from_environment(), default_schema=args.default_schema)
    table = transport.dialect.qualified_name(transport.resolve(args.sink_table))
    p = transport.dialect.placeholder
    queue_table = transport.dialect.qualified_name(transport.resolve(args.queue))
    with transport.connection() as connection:
        cursor = connection.cursor()
        cursor.execute(f"SELECT min(RowVersion) FROM {queue_table}", ())
        first = int(cursor.fetchone()[0] or 0)
        connection.commit()

    class KillingSource(SqlQueueDataSource):
        def streamReader(self, schema):
            options = SourceOptions.parse(self.options)
            return KillingStreamReader(options, point, limit, note, group, first)

    spark = SparkSession.builder.appName("sqlqueue-source-kill").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KillingSource)

    def write_batch(frame, batch_id: int) -> None:
        rows = [(batch_id, row.message_id, row.native_id) for row in frame.collect()]
        with transport.connection() as connection:
            cursor = connection.cursor()
            begin = transport.dialect.begin_write()
            if begin:
                cursor.execute(begin, ())
            cursor.execute(f"DELETE FROM {table} WHERE batch_id = {p}", (batch_id,))
            if rows:
                cursor.executemany(f"INSERT INTO {table} ({SINK_COLUMNS}) VALUES ({p}, {p}, {p})", rows)
            connection.commit()
        print(f"SQLQUEUE_BATCH {batch_id} {len(rows)}", flush=True)
        if point == "after_sink" and batch_id == 1:
            die(point, note, group)

    reader = spark.readStream.format("sqlqueue").option("queue", args.queue)
    reader = reader.option("maxMessagesPerTrigger", str(limit)).option("batch_size", "25")
    reader = reader.option("readInPlace", args.read_in_place)
    if args.default_schema:
        reader = reader.option("default_schema", args.default_schema)
    query = (
        reader.load()
        .writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
