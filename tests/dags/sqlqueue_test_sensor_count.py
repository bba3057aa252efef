"""Test DAG: the sensor with its default count mode on a queue whose estimate
overcounts (the test leaves expired rows in it). It may not succeed before the queue really holds
``min_messages``; with ``soft_fail`` a timeout skips it. (The
deferred path is tested on the trigger itself: ``dag.test()`` runs a trigger inline without its timeout.)"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_sqlqueue.sensors.queue import QueueSensor

with DAG(dag_id="sqlqueue_test_sensor_count", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    QueueSensor(
        task_id="poke", queue_name="orders", min_messages=3, poke_interval=1, timeout=4, soft_fail=True
    )
