"""Test DAG: provision the bridge, then drain ``orders`` into ``order_rows`` with SqlQueueSparkSubmitOperator
on the Spark connection ``spark_cluster`` (a standalone master, client deploy mode), shipping the provider to
the executors as a ``--py-files`` zip. The test sets the cluster's Python, path and zip in the environment."""

from __future__ import annotations

import os
import sys
from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_sqlqueue.operators.spark_submit import (
    ProvisionSparkBridgeOperator,
    SqlQueueSparkSubmitOperator,
)
from airflow_provider_sqlqueue.spark.transforms import ORDER_ROW_COLUMNS

with DAG(dag_id="sqlqueue_test_spark_cluster", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    provision = ProvisionSparkBridgeOperator(
        task_id="provision", queue_name="orders", sink_table="order_rows", sink_columns=ORDER_ROW_COLUMNS
    )
    drain = SqlQueueSparkSubmitOperator(
        task_id="drain",
        conn_id="spark_cluster",
        input_queue="orders",
        sink="table:order_rows",
        transform="airflow_provider_sqlqueue.spark.transforms.order_rows",
        batch_size=200,
        py_files=os.environ.get("SQLQUEUE_TEST_PY_FILES", ""),
        conf={
            "spark.ui.enabled": "false",
            "spark.pyspark.driver.python": sys.executable,
            "spark.pyspark.python": os.environ.get("SQLQUEUE_TEST_EXECUTOR_PYTHON", ""),
            "spark.executorEnv.PYTHONPATH": os.environ.get("SQLQUEUE_TEST_EXECUTOR_PATH", ""),
        },
    )
    provision >> drain
