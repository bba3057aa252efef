"""Test DAG: rows and messages in one transaction of the queue database, through the hook and the operator.

The run's conf names the ``ledger`` table (qualified for the engine) and the driver's placeholder
(``mark``); the test creates the table and the ``out`` queue. Each task writes ledger entries and sends
messages named after itself:

- ``hook_rolled_back`` writes and sends on ``hook.get_conn()``, then fails before its commit;
- ``hook_committed`` does the same and commits;
- ``sql_fails``: the operator's second statement fails (a duplicate of ``hook_committed``'s entry);
- ``sql_retried``: the operator's second statement fails on the first try only; the task is retried;
- ``sql_committed``: the operator with bound parameters and two messages; ``report`` prints its XCom.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, get_current_context, task

from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_provider_sqlqueue.operators.execute_and_send import ExecuteSqlAndSendOperator

LEDGER = "{{ dag_run.conf['ledger'] }}"


def write_and_send(entry: str, *, commit: bool) -> None:
    conf = get_current_context()["dag_run"].conf
    hook = SqlQueueHook()
    connection = hook.get_conn()
    try:
        cursor = connection.cursor()
        cursor.execute(f"INSERT INTO {conf['ledger']} (entry) VALUES ({conf['mark']})", (entry,))
        hook.send("out", entry.encode(), connection=connection)
        if not commit:
            raise RuntimeError(f"{entry}: failed before the commit")
        connection.commit()
    finally:
        connection.close()
        hook.close()


with DAG(
    dag_id="sqlqueue_test_own_transaction", schedule=None, start_date=datetime(2026, 1, 1), catchup=False
):

    @task(retries=0)
    def hook_rolled_back() -> None:
        write_and_send("hook-rolled-back", commit=False)

    @task(trigger_rule="all_done")
    def hook_committed() -> None:
        write_and_send("hook-committed", commit=True)

    sql_fails = ExecuteSqlAndSendOperator(
        task_id="sql_fails",
        sql=[
            f"INSERT INTO {LEDGER} (entry) VALUES ('sql-fails')",
            f"INSERT INTO {LEDGER} (entry) VALUES ('hook-committed')",
        ],
        queue_name="out",
        body="sql-fails",
        trigger_rule="all_done",
    )
    sql_retried = ExecuteSqlAndSendOperator(
        task_id="sql_retried",
        sql=[
            f"INSERT INTO {LEDGER} (entry) VALUES ('sql-retried')",
            "{% if ti.try_number == 1 %}SELECT missing_column FROM "
            + LEDGER
            + "{% else %}SELECT entry FROM "
            + LEDGER
            + "{% endif %}",
        ],
        queue_name="out",
        messages=["retried-1", "retried-2"],
        retries=1,
        retry_delay=timedelta(seconds=0),
        trigger_rule="all_done",
    )
    sql_committed = ExecuteSqlAndSendOperator(
        task_id="sql_committed",
        sql=f"INSERT INTO {LEDGER} (entry) VALUES ({{{{ dag_run.conf['mark'] }}}})",
        parameters=["{{ task.task_id | replace('_', '-') }}"],
        queue_name="out",
        messages=[{"order": 1}, "two"],
        headers={"NServiceBus.EnclosedMessageTypes": "Ledger.Posted"},
        trigger_rule="all_done",
    )

    @task(trigger_rule="all_done")
    def report(result: dict[str, Any]) -> None:
        print(f"sql_committed returned {json.dumps(result)}")

    hook_rolled_back() >> hook_committed() >> sql_fails >> sql_retried >> sql_committed
    report(sql_committed.output)
