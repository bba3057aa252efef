"""The showcase: order messages flow through a SQL queue into Spark and come out as per-customer totals.

provision queues and bridge tables -> send orders (one order in ten is only worth two seconds; with
``feed_share`` above 0, another system sends that share of them while the sensor waits: the demo
(``airflow_provider_sqlqueue.demo.pipeline``) runs an order feed for it) -> a deferrable QueueSensor
waits in the triggerer until every order that lasts is queued -> the Spark bridge drains up to
``max_messages`` orders and aggregates them into the ``order_totals`` table, exactly once per run ->
expired orders still queued are purged -> a summary with counts and throughput.

Connections: ``sqlqueue_default`` (the queue database: SQLite, PostgreSQL or SQL Server; nothing else
changes) and ``spark_default`` (the Spark master, e.g. ``{"conn_type": "spark", "host": "local[2]"}``).
``bash .ci/demo`` runs this DAG end to end on SQLite and local Spark.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, Param, task

from airflow_provider_sqlqueue.demo.orders import make_orders
from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator
from airflow_provider_sqlqueue.operators.purge import PurgeExpiredMessagesOperator
from airflow_provider_sqlqueue.operators.spark_submit import (
    ProvisionSparkBridgeOperator,
    SqlQueueSparkSubmitOperator,
)
from airflow_provider_sqlqueue.sensors.queue import QueueSensor

QUEUE = "orders"
RESULTS = "order_totals"
RESULT_COLUMNS = [
    ("run_id", "string", False),
    ("customer", "string", False),
    ("currency", "string", True),
    ("orders", "long", False),
    ("items", "long", True),
    ("amount", "double", True),
    ("first_sent", "timestamp", True),
    ("last_sent", "timestamp", True),
]

with DAG(
    dag_id="sqlqueue_spark_pipeline",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["sqlqueue", "spark", "example"],
    params={
        "orders": Param(20_000, type="integer", minimum=10, description="orders to send"),
        "feed_share": Param(
            0.0,
            type="number",
            minimum=0,
            maximum=0.9,
            description="share of the orders another system sends while the sensor waits (the demo's feed)",
        ),
        "max_messages": Param(15_000, type="integer", minimum=1, description="drain at most this many"),
        "summary_path": Param("", type="string", description="also write the summary here as JSON"),
    },
):
    provision_queues = ProvisionQueuesOperator(
        task_id="provision_queues", endpoint=QUEUE, instance_specific_queue=False, audit_queue=None
    )
    provision_bridge = ProvisionSparkBridgeOperator(
        task_id="provision_bridge", queue_name=QUEUE, sink_table=RESULTS, sink_columns=RESULT_COLUMNS
    )

    @task
    def send_orders(params: dict) -> dict:
        """Send this DAG's share of the orders; the rest (``feed_share``) comes from another system."""
        total = int(params["orders"])
        later = int(total * float(params["feed_share"]))
        now = total - later
        hook = SqlQueueHook()
        try:
            hook.send_batch(QUEUE, make_orders(now))
        finally:
            hook.close()
        print(f"sent {now} orders; {later} more are expected from the order feed")
        return {"orders": total, "sent_by_task": now, "expected_from_feed": later}

    sent = send_orders()

    wait = QueueSensor(
        task_id="wait_for_orders",
        queue_name=QUEUE,
        # Every order that does not expire: the sensor confirms with an exact count, which leaves expired
        # messages out, and every tenth order lives 2 s (make_orders).
        min_messages="{{ params.orders - params.orders // 10 }}",
        deferrable=True,
        poke_interval=2,
        timeout=600,
    )

    drain = SqlQueueSparkSubmitOperator(
        task_id="spark_drain",
        input_queue=QUEUE,
        sink=f"table:{RESULTS}",
        transform="airflow_provider_sqlqueue.spark.transforms.orders_by_customer",
        max_messages="{{ params.max_messages }}",
        partitions=2,
        batch_size=1000,
        run_id_column="run_id",
        conn_id="spark_default",
        conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"},
    )

    purge = PurgeExpiredMessagesOperator(task_id="purge_expired", queues=[QUEUE, "error"])

    @task
    def summary(sent: dict, depth: int, drained: dict, purged: dict, params: dict) -> dict:
        hook = SqlQueueHook()
        try:
            left = hook.depth(QUEUE, "exact")
            transport = hook.get_transport()
            results = transport.dialect.qualified_name(transport.resolve(RESULTS))  # schema-qualified
            top = hook.get_records(
                f"SELECT customer, currency, orders, amount FROM {results} WHERE run_id = "
                f"{hook.placeholder} ORDER BY amount DESC",
                parameters=(drained["run_id"],),
            )[:5]
        finally:
            hook.close()
        result = {
            "orders_sent": sent["orders"],
            "sent_by_feed_while_sensor_deferred": sent["expected_from_feed"],
            "queue_depth_seen_by_sensor": depth,
            "drained_into_spark": drained["processed"],
            "expired_dropped_while_draining": drained["expired"],
            "result_rows_written": drained["written"],
            "spark_seconds": drained["seconds"],
            "drain_messages_per_second": drained["messages_per_second"],
            "expired_purged_after": sum(purged.values()),
            "left_in_queue_for_next_run": left,
            "run_id": drained["run_id"],
            "top_customers": [
                {"customer": c, "currency": cur, "orders": int(n), "amount": float(a)} for c, cur, n, a in top
            ],
        }
        accounted = (
            result["drained_into_spark"]
            + result["expired_dropped_while_draining"]
            + result["expired_purged_after"]
            + result["left_in_queue_for_next_run"]
        )
        result["every_order_accounted_for"] = accounted == sent["orders"]
        print("pipeline summary: " + json.dumps(result, indent=2))
        if params.get("summary_path"):
            Path(params["summary_path"]).write_text(json.dumps(result, indent=2), encoding="utf-8")
        return result

    provision_queues >> provision_bridge >> sent >> wait >> drain >> purge
    summary(sent, wait.output, drain.output, purge.output)
