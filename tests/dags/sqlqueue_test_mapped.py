"""Test DAG: every queue task of the package mapped with ``.partial(queue_name=...).expand(...)``.

The executor queue (``queue``) is left to Airflow in every task, so each task instance must run on
``[operators] default_queue``; the message queue is ``queue_name``.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_sqlqueue.operators.consume import ConsumeMessagesOperator
from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator
from airflow_provider_sqlqueue.operators.send import SendMessageOperator
from airflow_provider_sqlqueue.sensors.queue import QueueSensor

QUEUE = "orders"
HANDLER = "airflow_provider_sqlqueue.handlers:log_message"

with DAG(dag_id="sqlqueue_test_mapped", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    provision = ProvisionQueuesOperator(task_id="provision", endpoint=QUEUE, audit_queue=None)
    send = SendMessageOperator.partial(task_id="send", queue_name=QUEUE).expand(body=["one", "two", "three"])
    plain_send = SendMessageOperator(task_id="plain_send", queue_name=QUEUE, body="four")
    wait = QueueSensor.partial(task_id="wait", queue_name=QUEUE, poke_interval=1, timeout=60).expand(
        min_messages=[4]
    )
    consume = ConsumeMessagesOperator.partial(task_id="consume", queue_name=QUEUE, handler=HANDLER).expand(
        max_messages=[4]
    )
    provision >> [send, plain_send] >> wait >> consume
