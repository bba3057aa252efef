"""spark-submit application: drain a queue into a table, a queue or files through a DataFrame transform.

    SQLQUEUE_URL=postgresql://app@db:5432/sales SQLQUEUE_PASSWORD=... \\
    spark-submit --master 'local[2]' .../airflow_provider_sqlqueue/spark/drain_job.py \\
        --queue orders --sink table:order_totals --run-id nightly-2026-11-21 \\
        --transform airflow_provider_sqlqueue.spark.transforms.orders_by_customer

The database URL comes from ``SQLQUEUE_URL`` and its password from ``SQLQUEUE_PASSWORD``; nothing secret is
taken from the command line. The summary is printed as one ``SQLQUEUE_SPARK_SUMMARY {...}`` line, stored in
the runs table and, with ``--summary-path``, written as JSON. Exit status 0 means the run is committed
(or was before), 1 that it failed and its messages are back in the queue (or staged, as logged).
See docs/spark.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="drain_job.py", description=__doc__.splitlines()[0])
    parser.add_argument("--queue", required=True, help="input queue address")
    parser.add_argument(
        "--sink", required=True, help="table:<name>, queue:<address>, parquet:<path> or json:<path>"
    )
    parser.add_argument("--run-id", required=True, help="idempotency key: a re-run finishes or skips")
    parser.add_argument("--transform", help="dotted path of a DataFrame -> DataFrame function")
    parser.add_argument("--batch-size", type=int, default=1000, help="messages per receive (default 1000)")
    parser.add_argument("--max-messages", type=int, help="receive at most this many (default: until empty)")
    parser.add_argument("--partitions", type=int, default=2, help="competing receivers (default 2)")
    parser.add_argument("--default-schema", help="schema of names given without one")
    parser.add_argument("--error-queue", default="error", help="where unreadable rows go (default error)")
    parser.add_argument("--prefix", default="sqlqueue_spark", help="name prefix of the bridge's tables")
    parser.add_argument(
        "--create-tables",
        action="store_true",
        help="create the bridge's tables and a missing sink table (needs DDL rights)",
    )
    parser.add_argument("--orphan-timeout", type=float, default=900.0, help="seconds (default 900)")
    parser.add_argument("--heartbeat-interval", type=float, default=30.0, help="seconds (default 30)")
    parser.add_argument(
        "--read-slice-rows", type=int, default=20_000, help="phase 2: rows per read statement [20000]"
    )
    parser.add_argument(
        "--read-partition-rows",
        type=int,
        default=250_000,
        help="phase 2: rows per read task, read in slices of --read-slice-rows [250000]",
    )
    parser.add_argument("--run-id-column", help="add the run id as this column to table/queue results")
    parser.add_argument("--message-type", help="NServiceBus.EnclosedMessageTypes of queue-sink messages")
    phase_one = parser.add_mutually_exclusive_group()
    phase_one.add_argument(
        "--read-in-place",
        action="store_true",
        help="PostgreSQL: hold the messages in the queue (an uncommitted delete) instead of staging them "
        "(default on PostgreSQL unless a reason to stage is found, see docs/spark.md)",
    )
    phase_one.add_argument(
        "--stage", action="store_true", help="always stage the messages (the default on other engines)"
    )
    parser.add_argument("--summary-path", type=Path, help="also write the summary here as JSON")
    parser.add_argument("--fail-receive-batch", type=int, help=argparse.SUPPRESS)  # failure drills
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    from pyspark.sql import SparkSession

    from airflow_provider_sqlqueue.spark.config import url_from_environment
    from airflow_provider_sqlqueue.spark.drain import DrainConfig, run_drain, summary_json

    def echo(text: str) -> None:
        print(f"[sqlqueue] {text}", flush=True)

    config = DrainConfig(
        url=url_from_environment(),
        input_queue=args.queue,
        sink=args.sink,
        run_id=args.run_id,
        transform=args.transform,
        batch_size=args.batch_size,
        max_messages=args.max_messages,
        partitions=args.partitions,
        default_schema=args.default_schema,
        error_queue=args.error_queue or None,
        prefix=args.prefix,
        create_tables=args.create_tables,
        orphan_timeout=args.orphan_timeout,
        heartbeat_interval=args.heartbeat_interval,
        read_slice_rows=args.read_slice_rows,
        read_partition_rows=args.read_partition_rows,
        run_id_column=args.run_id_column,
        message_type=args.message_type,
        read_in_place=True if args.read_in_place else False if args.stage else None,
        fail_receive_batch=args.fail_receive_batch,
    )
    spark = SparkSession.builder.appName(f"sqlqueue-drain {args.queue}").getOrCreate()
    try:
        summary = run_drain(spark, config, echo=echo)
    finally:
        spark.stop()
    text = summary_json(summary)
    if args.summary_path:
        args.summary_path.write_text(json.dumps(summary, default=str, indent=2), encoding="utf-8")
    print(f"SQLQUEUE_SPARK_SUMMARY {text}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
