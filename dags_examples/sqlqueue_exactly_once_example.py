"""Exactly once into your own table: orders are added to per-customer totals by a handler that writes in
the receive's transaction.

``ConsumeMessagesOperator`` runs ``add_to_totals`` for each order. The handler updates ``order_totals`` on
``context.sqlalchemy_connection``, the connection and transaction that received the message, so the
update commits together with the message's removal from the queue, or neither happens: a message is
never counted twice (a crash after the update and before the delete is impossible) and never lost. An
order with a negative amount makes the handler raise after its update: the update rolls back with the
receive and, after its retry fails the same way, the order goes to the error queue, counted nowhere.

The totals table lives beside the queue, in its database and schema (a different database would need an
outbox; see "Exactly once with your own tables" in the docs). Connection ``sqlqueue_default`` names the
database.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import cache
from typing import Any

from airflow.sdk import DAG, task
from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table, select, update

from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_provider_sqlqueue.operators.consume import ConsumeMessagesOperator
from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator
from airflow_provider_sqlqueue.operators.send import SendMessageOperator

QUEUE = "orders"
ORDERS = [
    {"order_id": 1, "customer": "C001", "amount_cents": 1250},
    {"order_id": 2, "customer": "C002", "amount_cents": 4000},
    {"order_id": 3, "customer": "C001", "amount_cents": 799},
    {"order_id": 4, "customer": "C003", "amount_cents": -100},  # refused by the handler: the error queue
    {"order_id": 5, "customer": "C002", "amount_cents": 1},
    {"order_id": 6, "customer": "C001", "amount_cents": 10000},
]


@cache
def order_totals(schema: str | None) -> Table:
    """The totals table in ``schema`` (the queue's; None on SQLite)."""
    return Table(
        "order_totals",
        MetaData(schema=schema),
        Column("customer", String(40), primary_key=True),
        Column("orders", Integer, nullable=False),
        Column("amount_cents", BigInteger, nullable=False),
    )


def add_to_totals(message: Any, context: Any) -> None:
    """Add one order to its customer's totals, in the receive's transaction (never commit it here)."""
    order = json.loads(message.body)
    totals = order_totals(context.queue.address.schema)
    connection = context.sqlalchemy_connection  # the receive's transaction; commit and rollback are refused
    mine = totals.c.customer == order["customer"]
    if connection.execute(select(totals.c.customer).where(mine)).first() is None:
        connection.execute(totals.insert().values(customer=order["customer"], orders=0, amount_cents=0))
    connection.execute(
        update(totals)
        .where(mine)
        .values(orders=totals.c.orders + 1, amount_cents=totals.c.amount_cents + order["amount_cents"])
    )
    if order["amount_cents"] < 0:
        raise ValueError(f"order {order['order_id']} has a negative amount")  # rolls the update back


with DAG(
    dag_id="sqlqueue_exactly_once_example",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["sqlqueue", "example"],
):
    provision = ProvisionQueuesOperator(
        task_id="provision", endpoint=QUEUE, instance_specific_queue=False, audit_queue=None
    )

    @task
    def create_totals() -> None:
        hook = SqlQueueHook()
        try:
            schema = hook.get_queue(QUEUE).address.schema
            engine = hook.get_sqlalchemy_engine()
            order_totals(schema).create(engine, checkfirst=True)
            engine.dispose()
        finally:
            hook.close()

    produce = SendMessageOperator(task_id="produce", queue_name=QUEUE, messages=ORDERS)
    consume = ConsumeMessagesOperator(
        task_id="consume",
        queue_name=QUEUE,
        handler=add_to_totals,
        pump_options={"immediate_retries": 1, "idle_delay": 0.2},
    )

    @task
    def report() -> dict[str, list[int]]:
        hook = SqlQueueHook()
        try:
            totals = order_totals(hook.get_queue(QUEUE).address.schema)
            engine = hook.get_sqlalchemy_engine()
            with engine.connect() as connection:
                rows = connection.execute(select(totals).order_by(totals.c.customer)).all()
            engine.dispose()
        finally:
            hook.close()
        found = {customer: [orders, amount] for customer, orders, amount in rows}
        print(f"order totals: {found}")
        return found

    provision >> create_totals() >> produce >> consume >> report()
