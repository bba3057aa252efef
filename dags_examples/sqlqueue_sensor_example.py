"""Producer -> deferrable QueueSensor -> consumer.

A producer sends ten orders, the sensor waits in the triggerer until the queue holds ``min_messages``
(a run parameter, default 10, so other producers may have to add more), and the consumer receives
everything and returns a summary. Connection ``sqlqueue_default`` names the database.
"""

from __future__ import annotations

import json
from datetime import datetime

from airflow.sdk import DAG, Param, task

from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator
from airflow_provider_sqlqueue.operators.send import SendMessageOperator
from airflow_provider_sqlqueue.sensors.queue import QueueSensor

QUEUE = "orders"

with DAG(
    dag_id="sqlqueue_sensor_example",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["sqlqueue", "example"],
    params={"min_messages": Param(10, type="integer", minimum=1)},
):
    provision = ProvisionQueuesOperator(
        task_id="provision", endpoint=QUEUE, instance_specific_queue=False, audit_queue=None
    )
    produce = SendMessageOperator(
        task_id="produce",
        queue_name=QUEUE,
        messages=[{"order_id": n, "amount": 10.0 * n} for n in range(1, 11)],
        headers={"NServiceBus.EnclosedMessageTypes": "Sales.OrderPlaced"},
    )
    wait = QueueSensor(
        task_id="wait_for_orders",
        queue_name=QUEUE,
        min_messages="{{ params.min_messages }}",
        deferrable=True,
        poke_interval=2,
        timeout=600,
    )

    @task
    def consume(depth: int) -> dict:
        hook = SqlQueueHook()
        received, amount = 0, 0.0
        try:
            while True:
                with hook.receive(QUEUE, max_messages=100) as batch:
                    for message in batch:
                        amount += json.loads(message.body)["amount"]
                    received += len(batch)
                    if not batch:
                        break
        finally:
            hook.close()
        summary = {"depth_seen_by_sensor": depth, "received": received, "amount": amount}
        print(f"consumed: {summary}")
        return summary

    provision >> produce >> wait >> consume(wait.output)
