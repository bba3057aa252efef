"""Test DAG: retry the failed messages of one source queue (templated from the run's conf) to it."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from airflow.sdk import DAG, task

from airflow_provider_sqlqueue.operators.failed import RetryFailedMessagesOperator

with DAG(dag_id="sqlqueue_test_failed_retry", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    retry = RetryFailedMessagesOperator(
        task_id="retry",
        failed_queue="{{ dag_run.conf['failed_queue'] }}",
        exception_type="ValueError",
        batch_size=2,
    )

    @task
    def report(result: dict[str, Any]) -> None:
        print(f"retry returned {json.dumps(result)}")

    report(retry.output)
