"""Test DAG: a request whose first try fails after its request committed (a worker lost at that moment),
so its retry must wait for the reply to that request instead of sending another."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG

from airflow_provider_sqlqueue.operators.request_reply import RequestReplyOperator


class SendThenFailOnce(RequestReplyOperator):
    """Sends its request, then fails on its first try; the retry resumes the same request."""

    def execute(self, context: Any) -> None:
        if context["ti"].try_number == 1:
            self.send_request(context)
            raise RuntimeError("worker lost after the request committed")
        super().execute(context)


with DAG(dag_id="sqlqueue_test_request_retry", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    SendThenFailOnce(
        task_id="ask",
        destination="Pricing",
        body={"item": "retried"},
        reply_timeout=120,
        poll_interval=0.5,
        retries=1,
        retry_delay=timedelta(seconds=0),
    )
