"""Your own PySpark application from a DAG, with the queue database and a run id that holds across tries.

A batch read of ``format("sqlqueue")`` keeps what it received staged under its run id until the application
acknowledges or releases it; a try that fails in between leaves them there, and only a read with the same
run id gets them back. This operator gives the application ``SQLQUEUE_RUN_ID``, derived from the task
instance (DAG, task, DAG run, map index) unless set, so every try of the task reads what the first one
staged, with the database in ``SQLQUEUE_URL`` and ``SQLQUEUE_PASSWORD`` (set at execution time, never
rendered), which the data source reads when its options give no ``runId``, ``url`` or ``password``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from ..hooks.sqlqueue import SqlQueueHook
from ..spark.config import RUN_ID_ENV
from ..spark.tables import check_run_id
from .spark_submit import queue_environment, task_run_id

__all__ = ["SqlQueueSparkApplicationOperator"]


class SqlQueueSparkApplicationOperator(SparkSubmitOperator):
    """``SparkSubmitOperator`` for an application that reads or writes ``format("sqlqueue")``.

    :param application: your PySpark application (as for ``SparkSubmitOperator``; every other argument of it
        works too).
    :param sqlqueue_conn_id: the queue database's Airflow connection.
    :param run_id: the batch read's run id, given to the application as ``SQLQUEUE_RUN_ID`` (templated);
        default ``<dag>.<task>.<dag run>[.<map index>]``, the same on every try, so a retry reads the
        messages a failed try staged. A read's ``runId`` option overrides it.
    :return: the run id.
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "run_id")
    ui_color = "#f4d9c6"

    def __init__(
        self,
        *,
        application: str,
        sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
        run_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(application=application, **kwargs)
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.run_id = run_id

    def execute(self, context: Any) -> str:
        run_id = check_run_id(str(self.run_id) if self.run_id else task_run_id(context))
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        user_env = self.env_vars
        try:
            env = {**(user_env or {}), **queue_environment(hook), RUN_ID_ENV: run_id}
            self.env_vars = env
            self._hook = self._get_hook()
            if (
                str(self._hook._connection.get("master", "")).startswith("local")
                and "PYSPARK_PYTHON" not in env
            ):
                env["PYSPARK_PYTHON"] = sys.executable  # local Python workers run this environment's Python
                self._hook = self._get_hook()
            self.log.info("running %s with run id %s", self.application, run_id)
            super().execute(context)
        finally:
            self.env_vars = user_env
            hook.close()
        return run_id
