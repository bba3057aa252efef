"""Test DAG: a sensor and a consumer of a templated queue; each leaves its "Queues page" link in the XCom
that Airflow's UI reads the button from (tests/test_queues_page_links.py reads it)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_sqlqueue.operators.consume import ConsumeMessagesOperator
from airflow_provider_sqlqueue.sensors.queue import QueueSensor

with DAG(
    dag_id="sqlqueue_test_queues_link",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"queue": "orders"},
):
    wait = QueueSensor(
        task_id="wait",
        queue_name="{{ params.queue }}",
        sqlqueue_conn_id="sqlqueue_page",
        min_messages=1,
        poke_interval=1,
        timeout=60,
    )
    consume = ConsumeMessagesOperator(
        task_id="consume",
        queue_name="{{ params.queue }}",
        sqlqueue_conn_id="sqlqueue_page",
        handler="consume_handlers:record",
        pump_options={"idle_delay": 0.1},
    )
    wait >> consume
