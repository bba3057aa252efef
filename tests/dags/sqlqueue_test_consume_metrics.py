"""Test DAG: consume ``orders`` with a handler that rejects ``bad*`` bodies (one immediate retry each), so the
pump counts processed, retried and failed messages; the test reads the metrics a StatsD listener got."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_sqlqueue.operators.consume import ConsumeMessagesOperator

with DAG(
    dag_id="sqlqueue_test_consume_metrics", schedule=None, start_date=datetime(2026, 1, 1), catchup=False
):
    ConsumeMessagesOperator(
        task_id="consume",
        queue_name="orders",
        handler="consume_handlers:reject_bad",
        pump_options={"immediate_retries": 1, "idle_delay": 0.1},
    )
