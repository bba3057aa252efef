"""Test DAG: retry every failed message of the error queue (retry_all), whatever queue it failed in."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from airflow.sdk import DAG, task

from airflow_provider_sqlqueue.operators.failed import RetryFailedMessagesOperator

with DAG(
    dag_id="sqlqueue_test_failed_retry_all", schedule=None, start_date=datetime(2026, 1, 1), catchup=False
):
    retry = RetryFailedMessagesOperator(task_id="retry_all", retry_all=True, batch_size=2)

    @task
    def report(result: dict[str, Any]) -> None:
        print(f"retry returned {json.dumps(result)}")

    report(retry.output)
