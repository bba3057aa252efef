"""Test DAG: a PySpark batch read of format("sqlqueue") through SqlQueueSparkApplicationOperator whose first
try fails after it staged the messages; the retry reads the same messages under the same run id (derived
from the task instance), and EndStagedSparkRunOperator acknowledges that run by the reading task's id."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, task

from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator
from airflow_provider_sqlqueue.operators.send import SendMessageOperator
from airflow_provider_sqlqueue.operators.spark_application import SqlQueueSparkApplicationOperator
from airflow_provider_sqlqueue.operators.spark_runs import EndStagedSparkRunOperator
from airflow_provider_sqlqueue.operators.spark_submit import ProvisionSparkBridgeOperator

APP = str(Path(__file__).resolve().parent.parent / "spark_read_retry_app.py")

with DAG(
    dag_id="sqlqueue_test_spark_read_retry", schedule=None, start_date=datetime(2026, 1, 1), catchup=False
):
    provision = ProvisionQueuesOperator(task_id="provision", endpoint="orders", audit_queue=None)
    bridge = ProvisionSparkBridgeOperator(task_id="bridge", queue_name="orders")
    send = SendMessageOperator(task_id="send", queue_name="orders", messages=[{"n": n} for n in range(20)])
    read = SqlQueueSparkApplicationOperator(
        task_id="read",
        application=APP,
        application_args=["{{ dag_run.conf['out'] }}", "{{ ti.try_number }}"],
        retries=1,
        retry_delay=timedelta(seconds=0),
    )
    ack = EndStagedSparkRunOperator(task_id="ack", queue_name="orders", action="ack", spark_task_id="read")

    @task
    def report(read_result: str, ack_result: dict[str, Any]) -> None:
        print(f"read returned {json.dumps(read_result)}")
        print(f"ack returned {json.dumps(ack_result)}")

    provision >> bridge >> send >> read >> ack
    report(read.output, ack.output)
