"""Maintenance: provision an endpoint's queues, then every hour purge expired messages and vacuum them.

``ProvisionQueuesOperator`` creates ``Sales``, ``Sales.<host>``, ``error`` and ``audit`` if missing and logs
any inspection finding with the statement that fixes it. Run it with a connection that has DDL rights;
the purge needs only SELECT and DELETE (plus, on PostgreSQL, UPDATE on the Recoverable column).
``VacuumQueuesOperator`` then runs a plain ``VACUUM`` of each PostgreSQL queue table, so the space of the
hour's deleted messages comes back even on tables made without the autovacuum settings new queue tables
get; it needs the tables' owner (the provisioning connection). On SQLite and SQL Server it runs nothing.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator, endpoint_queues
from airflow_provider_sqlqueue.operators.purge import PurgeExpiredMessagesOperator
from airflow_provider_sqlqueue.operators.vacuum import VacuumQueuesOperator

ENDPOINT = "Sales"
SUFFIX = "example-host"

with DAG(
    dag_id="sqlqueue_maintenance_example",
    schedule="@hourly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["sqlqueue", "example"],
):
    provision = ProvisionQueuesOperator(task_id="provision", endpoint=ENDPOINT, instance_suffix=SUFFIX)
    purge = PurgeExpiredMessagesOperator(
        task_id="purge_expired",
        queues=endpoint_queues(ENDPOINT, instance_suffix=SUFFIX),
        batch_size=10_000,
        max_seconds=300,
    )
    vacuum = VacuumQueuesOperator(task_id="vacuum", queues=endpoint_queues(ENDPOINT, instance_suffix=SUFFIX))
    provision >> purge >> vacuum
