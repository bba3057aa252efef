"""The ``sqlqueue`` data source as a cluster application (run by spark-submit against a standalone master).

Two modes, both writing what they read into a table keyed so that a re-run cannot duplicate it:

- ``batch``: ``spark.read.format("sqlqueue")`` with a run id, the message ids written to the table from the
  driver, then ``ack_read``; the reads themselves run in the executors' Python workers;
- ``stream``: ``spark.readStream.format("sqlqueue")`` with ``Trigger.AvailableNow`` and
  ``maxMessagesPerTrigger`` into the table through ``foreachBatch`` (one transaction per batch id).

``--slow SECONDS`` makes the stream reader sleep that long per row and note its pid in
``SQLQUEUE_SPARK_FAULT_LOG`` at the start of each partition, so a test can kill the worker running it.
Credentials come from SQLQUEUE_URL / SQLQUEUE_PASSWORD, as for every shipped job.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import InputPartition

from airflow_provider_sqlqueue.spark import SqlQueueDataSource
from airflow_provider_sqlqueue.spark.config import url_from_environment
from airflow_provider_sqlqueue.spark.source import SourceOptions, ack_read
from airflow_provider_sqlqueue.spark.source.stream import SqlQueueStreamReader
from airflow_provider_sqlqueue.transport import Transport, open_transport

SINK_COLUMNS = "batch_id, message_id"


class SlowStreamReader(SqlQueueStreamReader):
    """The source's stream reader, slowed down per row and noting which process reads each partition."""

    def __init__(self, options: SourceOptions, seconds: float) -> None:
        super().__init__(options)
        self.seconds = seconds

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from spark_faults import note_fault  # shipped beside this application with --py-files

        note_fault("slow stream partition")
        for batch in super().read(partition):
            for row in range(batch.num_rows):  # one row per record batch, each after the pause
                time.sleep(self.seconds)
                yield batch.slice(row, 1)


def write_rows(transport: Transport, table: str, batch_id: int, message_ids: list[str]) -> None:
    """Replace the rows of ``batch_id`` with ``message_ids`` in one transaction (idempotent per batch)."""
    p = transport.dialect.placeholder
    with transport.connection() as connection:
        cursor = connection.cursor()
        begin = transport.dialect.begin_write()
        if begin:
            cursor.execute(begin, ())
        cursor.execute(f"DELETE FROM {table} WHERE batch_id = {p}", (batch_id,))
        if message_ids:
            rows = [(batch_id, message_id) for message_id in message_ids]
            cursor.executemany(f"INSERT INTO {table} ({SINK_COLUMNS}) VALUES ({p}, {p})", rows)
        connection.commit()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("batch", "stream"))
    parser.add_argument("--queue", required=True)
    parser.add_argument("--sink-table", required=True)
    parser.add_argument("--run-id", help="batch: the read's run id")
    parser.add_argument("--checkpoint", help="stream: the query's checkpoint location")
    parser.add_argument("--limit", type=int, default=100, help="stream: maxMessagesPerTrigger")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--slow", type=float, default=0.0)
    parser.add_argument("--default-schema")
    args = parser.parse_args()
    seconds = args.slow

    class ClusterSource(SqlQueueDataSource):
        def streamReader(self, schema):
            if seconds <= 0:
                return super().streamReader(schema)
            return SlowStreamReader(SourceOptions.parse(self.options), seconds)

    spark = SparkSession.builder.appName(f"sqlqueue-source-cluster-{args.mode}").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(ClusterSource)
    transport = open_transport(url_from_environment(), default_schema=args.default_schema)
    table = transport.dialect.qualified_name(transport.resolve(args.sink_table))
    options = {"queue": args.queue, "partitions": str(args.partitions), "batch_size": "50"}
    if args.default_schema:
        options["default_schema"] = args.default_schema

    if args.mode == "batch":
        options |= {"run_id": args.run_id or "cluster-batch", "receivers": "2"}
        frame = spark.read.format("sqlqueue").options(**options).load()
        message_ids = [row.message_id for row in frame.select("message_id").collect()]
        write_rows(transport, table, 0, message_ids)
        acknowledged = ack_read(options)
        summary = {"read": len(message_ids), "acknowledged": acknowledged}
    else:
        options |= {"maxMessagesPerTrigger": str(args.limit)}
        batches: list[int] = []

        def write_batch(batch, batch_id: int) -> None:
            write_rows(transport, table, batch_id, [row.message_id for row in batch.collect()])
            batches.append(batch_id)

        query = (
            spark.readStream.format("sqlqueue")
            .options(**options)
            .load()
            .writeStream.foreachBatch(write_batch)
            .option("checkpointLocation", args.checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        summary = {"batches": batches}
    print("SQLQUEUE_SOURCE_SUMMARY " + json.dumps(summary), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
