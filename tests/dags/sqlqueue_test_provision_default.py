"""Test DAG: ProvisionQueuesOperator with its defaults, as a DAG author would first write it. Whichever
worker runs it, it must create the same tables: no ``<endpoint>.<host name>`` queue."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator

with DAG(
    dag_id="sqlqueue_test_provision_default", schedule=None, start_date=datetime(2026, 1, 1), catchup=False
):
    ProvisionQueuesOperator(task_id="provision", endpoint="Sales")
