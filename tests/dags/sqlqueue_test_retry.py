"""Test DAG: a send whose first try fails after its transaction committed (a worker lost at that moment),
so its retry sends the batch again; and a mapped send. Message Ids are derived from the task instance."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, task

from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator
from airflow_provider_sqlqueue.operators.send import SendMessageOperator


class SendThenFailOnce(SendMessageOperator):
    """Sends, then fails on its first try: the batch is committed, the task is retried."""

    def execute(self, context: Any) -> dict[str, Any]:
        result = super().execute(context)
        if context["ti"].try_number == 1:
            raise RuntimeError("worker lost after the send committed")
        return result


with DAG(dag_id="sqlqueue_test_retry", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    provision = ProvisionQueuesOperator(task_id="provision", endpoint="orders", audit_queue=None)
    send = SendThenFailOnce(
        task_id="send",
        queue_name="orders",
        messages=[{"n": n} for n in range(3)],
        retries=1,
        retry_delay=timedelta(seconds=0),
    )
    mapped = SendMessageOperator.partial(task_id="mapped", queue_name="orders").expand(body=["a", "b"])

    @task
    def report(send_result: dict[str, Any], mapped_results: list[dict[str, Any]]) -> None:
        print(f"send returned {json.dumps(send_result)}")
        print(f"mapped returned {json.dumps(list(mapped_results))}")

    provision >> [send, mapped]
    report(send.output, mapped.output)
