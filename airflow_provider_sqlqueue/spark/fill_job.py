"""spark-submit application: fill a queue from files or a catalog table, each batch exactly once per run id.

    SQLQUEUE_URL=sqlite:////data/queues.db \\
    spark-submit --master 'local[2]' .../airflow_provider_sqlqueue/spark/fill_job.py \\
        --queue orders --source parquet:/data/orders --run-id load-2026-11-21

The database URL comes from ``SQLQUEUE_URL`` and its password from ``SQLQUEUE_PASSWORD``. The summary is
printed as one ``SQLQUEUE_SPARK_SUMMARY {...}`` line and, with ``--summary-path``, written as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fill_job.py", description=__doc__.splitlines()[0])
    parser.add_argument("--queue", required=True, help="destination queue address")
    parser.add_argument(
        "--source", required=True, help="parquet:<path>, json:<path>, csv:<path>, orc:<path> or table:<name>"
    )
    parser.add_argument("--run-id", required=True, help="idempotency key: re-runs send what is missing")
    parser.add_argument("--batch-size", type=int, default=1000, help="messages per transaction")
    parser.add_argument("--partitions", type=int, help="repartition the source to this many senders")
    parser.add_argument("--default-schema", help="schema of names given without one")
    parser.add_argument("--prefix", default="sqlqueue_spark", help="name prefix of the bridge's tables")
    parser.add_argument("--message-type", help="NServiceBus.EnclosedMessageTypes of the messages")
    parser.add_argument(
        "--no-checkpoint",
        action="store_true",
        help="do not checkpoint the source (only for sources that read the same rows in every attempt)",
    )
    parser.add_argument("--create-tables", action="store_true", help="create the bridge's tables if missing")
    parser.add_argument("--summary-path", type=Path, help="also write the summary here as JSON")
    parser.add_argument("--fail-after-batch", type=int, help=argparse.SUPPRESS)  # failure drills
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    from pyspark.sql import SparkSession

    from airflow_provider_sqlqueue.spark.config import url_from_environment
    from airflow_provider_sqlqueue.spark.fill import FillConfig, fill_queue, read_source

    config = FillConfig(
        url=url_from_environment(),
        queue=args.queue,
        run_id=args.run_id,
        batch_size=args.batch_size,
        partitions=args.partitions,
        default_schema=args.default_schema,
        prefix=args.prefix,
        message_type=args.message_type,
        checkpoint=not args.no_checkpoint,
        create_tables=args.create_tables,
        fail_after_batch=args.fail_after_batch,
    )
    spark = SparkSession.builder.appName(f"sqlqueue-fill {args.queue}").getOrCreate()
    try:
        summary = fill_queue(
            spark,
            read_source(spark, args.source),
            config,
            echo=lambda text: print(f"[sqlqueue] {text}", flush=True),
        )
    finally:
        spark.stop()
    if args.summary_path:
        args.summary_path.write_text(json.dumps(summary, default=str, indent=2), encoding="utf-8")
    print(f"SQLQUEUE_SPARK_SUMMARY {json.dumps(summary, default=str, sort_keys=True)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
