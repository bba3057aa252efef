"""Ask a service for a price through a queue, wait for its answer in the triggerer, use it downstream.

``ask_price`` sends a ``GetPrice`` request to the ``Pricing`` endpoint's queue (a .NET endpoint answering
with ``context.Reply(...)``, or a Python one answering with ``context.reply(...)``) and defers: the
triggerer waits for the reply without holding a worker slot. The reply's JSON body comes back as the
task's XCom, and ``order_total`` multiplies its price by the quantity. Connection ``sqlqueue_default``
names the database; the connection needs the right to create and drop tables in the reply queues'
schema (each request has a reply queue of its own, ``airflow.replies.<request id>``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param, task

from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator
from airflow_provider_sqlqueue.operators.request_reply import RequestReplyOperator

SERVICE = "Pricing"

with DAG(
    dag_id="sqlqueue_request_reply_example",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["sqlqueue", "example"],
    params={"item": Param("widget", type="string"), "quantity": Param(3, type="integer", minimum=1)},
):
    provision = ProvisionQueuesOperator(
        task_id="provision", endpoint=SERVICE, instance_specific_queue=False, audit_queue=None
    )
    ask_price = RequestReplyOperator(
        task_id="ask_price",
        destination=SERVICE,
        body={"item": "{{ params.item }}"},
        headers={"NServiceBus.EnclosedMessageTypes": "Pricing.Messages.GetPrice, Pricing.Messages"},
        reply_timeout=timedelta(minutes=5),
        poll_interval=1,
        retries=1,
        retry_delay=timedelta(seconds=1),
    )

    @task
    def order_total(quote: dict, params: dict | None = None) -> float:
        price = float(quote["body"]["price"])
        total = price * int((params or {})["quantity"])
        print(f"order total: {total}")
        return total

    provision >> ask_price
    order_total(ask_price.output)
