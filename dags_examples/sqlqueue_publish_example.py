"""Events between DAGs, the producer: announce an order to whoever subscribed, without knowing who.

``PublishMessageOperator`` looks up the queues subscribed to ``Shop.Events.OrderPlaced`` or to its base
topic ``Shop.Events`` in the subscription table and sends one copy to each, in one transaction. The
consumers are the two DAGs of ``sqlqueue_subscribe_example.py``, each with its own queue; adding a third
consumer changes nothing here. The event's Id is derived from the task instance, so a retry of the task
publishes the same Id and a consumer that remembers Ids drops the duplicate. Connection
``sqlqueue_default`` names the database.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param

from airflow_provider_sqlqueue.operators.publish import PublishMessageOperator

TOPIC = "Shop.Events.OrderPlaced"
BASE_TOPICS = ["Shop.Events"]  # the topic's ancestors: "every shop event" subscribers get it too

with DAG(
    dag_id="sqlqueue_publish_example",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["sqlqueue", "example"],
    params={"order_id": Param(42, type="integer"), "amount": Param(19.5, type="number")},
    render_template_as_native_obj=True,  # {{ params.order_id }} renders to the number, not its text
):
    PublishMessageOperator(
        task_id="announce_order",
        topic=TOPIC,
        base_topics=BASE_TOPICS,
        body={"order_id": "{{ params.order_id }}", "amount": "{{ params.amount }}", "run_id": "{{ run_id }}"},
        headers={"Shop.Source": "airflow"},
    )
