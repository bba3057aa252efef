"""Events between DAGs, the consumers: two DAGs, each with its own queue, subscribed to the producer's
events (``sqlqueue_publish_example.py``).

- ``sqlqueue_billing_example`` subscribes its queue ``billing`` to ``Shop.Events.OrderPlaced``;
- ``sqlqueue_shipping_example`` subscribes ``shipping`` to ``Shop.Events``, the base topic, so it gets
  every shop event the producers announce with that ancestor.

Each DAG first provisions its queue and its subscription (``ProvisionQueuesOperator(subscribe_to=...)``:
creates the queue and, once, the shared subscription table, then upserts the subscription; idempotent),
then handles what arrived with ``ConsumeMessagesOperator``: retries and the error queue are its own, so a
failing consumer never holds the producer or the other consumer back. Connection ``sqlqueue_default``
names the database.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from airflow.sdk import DAG

from airflow_provider_sqlqueue.operators.consume import ConsumeMessagesOperator
from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator

SUBSCRIBERS = {
    "billing": ["Shop.Events.OrderPlaced"],
    "shipping": ["Shop.Events"],
}


def handle_event(message: Any, context: Any) -> None:
    """One event: here, print it; a real consumer bills or ships the order."""
    event = json.loads(message.body)
    topics = message.headers.get("NServiceBus.EnclosedMessageTypes")
    print(f"{context.queue.address.table} got order {event['order_id']} ({topics}) id {message.id}")


CONSUMER_DAGS: dict[str, DAG] = {}
for queue, topics in SUBSCRIBERS.items():
    with DAG(
        dag_id=f"sqlqueue_{queue}_example",
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        tags=["sqlqueue", "example"],
    ) as CONSUMER_DAGS[queue]:
        provision = ProvisionQueuesOperator(
            task_id="provision",
            endpoint=queue,
            instance_specific_queue=False,
            audit_queue=None,
            subscribe_to=topics,
        )
        handle = ConsumeMessagesOperator(
            task_id="handle_events",
            queue_name=queue,
            handler=handle_event,
            pump_options={"immediate_retries": 1, "idle_delay": 0.2},
        )
        provision >> handle
