"""Ending a staged run of the Spark data source from a DAG: release its messages (back to the end of the
queue) or acknowledge them (delete), when the application that staged them did not, through the hook."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from ..hooks.sqlqueue import SqlQueueHook
from .spark_submit import default_run_id

__all__ = ["EndStagedSparkRunOperator"]

ACTIONS = ("release", "ack")


class EndStagedSparkRunOperator(BaseOperator):
    """Release or acknowledge the staged messages of a batch read (or a stream) of ``format("sqlqueue")``.

    Give the run id, or the task id of the ``SqlQueueSparkApplicationOperator`` that read them: its default
    run id in this DAG run (and this task's map index). A batch read becomes ``aborted`` or ``committed``;
    ending it the same way again returns 0 messages; a drain job's run is refused.

    :param queue_name: the queue the run read (templated).
    :param action: ``release`` (back to the end of the queue, in order) or ``ack`` (delete: the sink has
        them).
    :param run_id: the run id (templated).
    :param spark_task_id: instead of ``run_id``: the task that read with its default run id.
    :param prefix: the bridge tables' prefix (default ``sqlqueue_spark``).
    :return: ``{"queue", "run_id", "action", "messages"}``.
    """

    template_fields: Sequence[str] = ("queue_name", "run_id")
    ui_color = "#f4d9c6"

    def __init__(
        self,
        *,
        queue_name: str,
        action: str,
        run_id: str | None = None,
        spark_task_id: str | None = None,
        sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
        prefix: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if action not in ACTIONS:
            raise ValueError(f"action must be 'release' or 'ack', not {action!r}")
        if (run_id is None) == (spark_task_id is None):
            raise ValueError(
                "give either run_id or spark_task_id (the task that read with its default run id)"
            )
        self.queue_name = queue_name
        self.action = action
        self.run_id = run_id
        self.spark_task_id = spark_task_id
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.prefix = prefix

    def staged_run_id(self, context: Any) -> str:
        if self.run_id:
            return str(self.run_id)
        ti = context["ti"]
        return default_run_id(ti.dag_id, str(self.spark_task_id), ti.run_id, getattr(ti, "map_index", -1))

    def execute(self, context: Any) -> dict[str, Any]:
        run_id = self.staged_run_id(context)
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        try:
            count = hook.end_staged_run(str(self.queue_name), run_id, self.action, self.prefix)  # type: ignore[arg-type]
        finally:
            hook.close()
        done = "released to the end of the queue" if self.action == "release" else "acknowledged (deleted)"
        self.log.info("run %s on %s: %d staged message(s) %s", run_id, self.queue_name, count, done)
        return {"queue": str(self.queue_name), "run_id": run_id, "action": self.action, "messages": count}
