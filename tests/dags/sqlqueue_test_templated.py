"""Test DAG: every templated field of the queue operators given as an XComArg and as a Jinja string.

The ``x_`` tasks take their values from the ``names`` task's output (XComArgs) and work on ``orders``;
the ``j_`` tasks take them from Jinja templates (``params`` and ``ti.xcom_pull``, which render to text)
and work on ``invoices``. ``script_dir`` (a run parameter) is where the dry-run scripts are written.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, Param, get_current_context, task

from airflow_provider_sqlqueue.operators.consume import ConsumeMessagesOperator
from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator
from airflow_provider_sqlqueue.operators.purge import PurgeExpiredMessagesOperator
from airflow_provider_sqlqueue.operators.send import SendMessageOperator
from airflow_provider_sqlqueue.operators.spark_submit import ProvisionSparkBridgeOperator
from airflow_provider_sqlqueue.sensors.queue import QueueSensor

HANDLER = "airflow_provider_sqlqueue.handlers:log_message"
SINK_COLUMNS = [("message_id", "string", False), ("order_id", "long", True)]
TYPE = "NServiceBus.EnclosedMessageTypes"

with DAG(
    dag_id="sqlqueue_test_templated",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={
        "script_dir": Param("/tmp", type="string"),
        "queue": "invoices",
        "suffix": "j1",
        "extra": ["j_extra"],
        "sink": "rows_j",
        "body": "hello from jinja",
        "min": 3,
        "queues": ["invoices", "j_extra"],
    },
):

    @task(multiple_outputs=True)
    def names() -> dict[str, Any]:
        script_dir = get_current_context()["params"]["script_dir"]
        return {
            "queue": "orders",
            "suffix": "x1",
            "extra": ["x_extra"],
            "script": f"{script_dir}/x_script.sql",
            "sink": "rows_x",
            "body": {"order": 1},
            "headers": {TYPE: "Sales.FromXCom"},
            "jinja_headers": {TYPE: "Sales.FromJinja"},
            "messages": [{"order": 2}, {"body": {"order": 3}, "headers": {"Kind": "wrapped"}}],
            "min": 3,
            "queues": ["orders", "x_extra"],
        }

    n = names()
    headers = "{{ ti.xcom_pull(task_ids='names', key='jinja_headers') }}"
    provision = [
        ProvisionQueuesOperator(
            task_id="x_provision",
            endpoint=n["queue"],
            instance_specific_queue=True,
            instance_suffix=n["suffix"],
            extra_queues=n["extra"],
        ),
        ProvisionQueuesOperator(
            task_id="j_provision",
            endpoint="{{ params.queue }}",
            instance_specific_queue=True,
            instance_suffix="{{ params.suffix }}",
            extra_queues="{{ params.extra }}",
        ),
        ProvisionQueuesOperator(
            task_id="x_script",
            endpoint=n["queue"],
            extra_queues=n["extra"],
            script_path=n["script"],
            dry_run=True,
        ),
        ProvisionQueuesOperator(
            task_id="j_script",
            endpoint="{{ params.queue }}",
            extra_queues="{{ params.extra }}",
            script_path="{{ params.script_dir }}/j_script.sql",
            dry_run=True,
        ),
    ]
    bridges = [
        ProvisionSparkBridgeOperator(
            task_id="x_bridge", queue_name=n["queue"], sink_table=n["sink"], sink_columns=SINK_COLUMNS
        ),
        ProvisionSparkBridgeOperator(
            task_id="j_bridge",
            queue_name="{{ params.queue }}",
            sink_table="{{ params.sink }}",
            sink_columns=SINK_COLUMNS,
        ),
    ]
    sends = [
        SendMessageOperator(task_id="x_send", queue_name=n["queue"], body=n["body"], headers=n["headers"]),
        SendMessageOperator(
            task_id="x_batch", queue_name=n["queue"], messages=n["messages"], headers=n["headers"]
        ),
        SendMessageOperator(
            task_id="j_send", queue_name="{{ params.queue }}", body="{{ params.body }}", headers=headers
        ),
        SendMessageOperator(
            task_id="j_batch",
            queue_name="{{ params.queue }}",
            messages="{{ ti.xcom_pull(task_ids='names', key='messages') }}",
            headers=headers,
        ),
    ]
    waits = [
        QueueSensor(
            task_id="x_wait", queue_name=n["queue"], min_messages=n["min"], poke_interval=1, timeout=60
        ),
        QueueSensor(
            task_id="j_wait",
            queue_name="{{ params.queue }}",
            min_messages="{{ params.min }}",
            poke_interval=1,
            timeout=60,
        ),
    ]
    consumes = [
        ConsumeMessagesOperator(task_id="x_consume", queue_name=n["queue"], handler=HANDLER),
        ConsumeMessagesOperator(
            task_id="j_consume", queue_name="{{ params.queue }}", handler=HANDLER, batch_size=10
        ),
    ]
    purges = [
        PurgeExpiredMessagesOperator(task_id="x_purge", queues=n["queues"]),
        PurgeExpiredMessagesOperator(task_id="j_purge", queues="{{ params.queues }}"),
    ]
    n >> provision[0]
    for upstream, downstream in zip(
        [provision[:2], bridges, sends, waits, consumes],
        [bridges, sends, waits, consumes, purges],
        strict=True,
    ):
        for before in upstream:
            before >> downstream
    provision[0] >> provision[1:]
