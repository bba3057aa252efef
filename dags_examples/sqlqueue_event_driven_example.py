"""Event-driven: a DAG scheduled on an Asset whose watcher fires when messages arrive in ``orders``.

The triggerer runs ``MessageQueueTrigger(scheme="sqlqueue", ...)``, which this provider answers with its
``QueueMessagesEventTrigger``: one query per poll, an event each time new messages have arrived.
"""

from __future__ import annotations

from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger
from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook

QUEUE = "orders"

trigger = MessageQueueTrigger(
    scheme="sqlqueue", queue_name=QUEUE, sqlqueue_conn_id="sqlqueue_default", min_messages=1, poll_interval=5
)
orders_arrived = Asset(
    "sqlqueue_orders", watchers=[AssetWatcher(name="sqlqueue_orders_watcher", trigger=trigger)]
)

with DAG(dag_id="sqlqueue_event_driven_example", schedule=[orders_arrived], tags=["sqlqueue", "example"]):

    @task
    def drain() -> int:
        hook = SqlQueueHook()
        received = 0
        try:
            while True:
                with hook.receive(QUEUE, max_messages=100) as batch:
                    received += len(batch)
                    if not batch:
                        break
        finally:
            hook.close()
        print(f"drained {received} message(s) from {QUEUE}")
        return received

    drain()
