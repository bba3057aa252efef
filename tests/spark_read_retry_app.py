"""A batch read for SqlQueueSparkApplicationOperator's retry test (run by spark-submit): reads the orders
queue with no runId, url or password option (the operator's SQLQUEUE_RUN_ID, SQLQUEUE_URL and
SQLQUEUE_PASSWORD give them), writes the message ids it got to ``<out>/try-<n>.json``, and fails on the
first try after reading, as a job whose sink step failed would: its messages stay staged."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from airflow_provider_sqlqueue.spark import SqlQueueDataSource


def main(out: str, try_number: str) -> int:
    spark = SparkSession.builder.appName("sqlqueue-read-retry").getOrCreate()
    spark.dataSource.register(SqlQueueDataSource)
    rows = spark.read.format("sqlqueue").option("queue", "orders").load().collect()
    ids = sorted(row.message_id for row in rows)
    record = {"run_id": os.environ.get("SQLQUEUE_RUN_ID"), "ids": ids}
    (Path(out) / f"try-{try_number}.json").write_text(json.dumps(record))
    spark.stop()
    return 1 if try_number == "1" else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
