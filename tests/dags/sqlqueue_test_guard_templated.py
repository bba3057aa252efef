"""Test DAG: a value rendered into ExecuteSqlAndSendOperator's SQL that ends the transaction.

The run's conf names the ``ledger`` table and a ``note``; the test passes ``\\'; END; --``, which turns the
second statement into ``SELECT '\\'; END; --'``: on PostgreSQL (standard_conforming_strings on) a string,
then END, then a comment. The task must fail at that statement, with ``first`` committed by the END, the
third statement never run and no message sent.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_sqlqueue.operators.execute_and_send import ExecuteSqlAndSendOperator

LEDGER = "{{ dag_run.conf['ledger'] }}"

with DAG(
    dag_id="sqlqueue_test_guard_templated", schedule=None, start_date=datetime(2026, 1, 1), catchup=False
):
    ExecuteSqlAndSendOperator(
        task_id="noted",
        sql=[
            f"INSERT INTO {LEDGER} (entry) VALUES ('first')",
            "SELECT '{{ dag_run.conf['note'] }}'",
            f"INSERT INTO {LEDGER} (entry) VALUES ('after')",
        ],
        queue_name="out",
        body="noted",
        retries=0,
    )
