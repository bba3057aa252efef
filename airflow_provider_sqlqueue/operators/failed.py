"""RetryFailedMessagesOperator: move failed messages from an error queue back to the queues they failed in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.providers.common.compat.sdk import AirflowException
from airflow.sdk import BaseOperator

from ..hooks.sqlqueue import SqlQueueHook
from ..transport.failed import MAX_BATCH, FailureFilter, retry_failed
from ._rendered import as_names


class RetryFailedMessagesOperator(BaseOperator):
    """Retry the failed messages of an error queue once their handler is fixed: each goes back to the queue
    named by its ``NServiceBus.FailedQ`` header with the same Id, without the failure headers, one
    transaction per batch (see docs/operating.md).

    Say which messages: any of ``failed_queue``, ``exception_type``, ``exception_message``, ``group`` and
    ``message_ids`` (all given must match), or ``retry_all=True``. A message whose source queue is missing
    (or whose ``FailedQ`` is missing or unreadable) stays in the error queue; the rest are retried, then
    the task fails naming them unless ``fail_on_refused=False``.

    :param error_queue_name: the error queue (templated; default ``error``).
    :param failed_queue: only messages that failed in this queue (templated).
    :param exception_type: only this ``NServiceBus.ExceptionInfo.ExceptionType`` (templated).
    :param exception_message: only this ``NServiceBus.ExceptionInfo.Message`` (templated).
    :param group: a group key from ``sqlqueue failed list`` (templated).
    :param message_ids: only these message Ids (templated; a list or one Id).
    :param retry_all: retry every message of the error queue when no filter is given.
    :param batch_size: messages per transaction (default 100).
    :param fail_on_refused: fail the task when a message was refused (default True).
    :return: ``{"error_queue", "count", "first_id", "last_id", "batches", "queues", "refused"}``: how many
        were retried with the first and last Id (not every Id: an XCom stays small whatever the error
        queue holds), the number retried into each queue, and how many were refused (each is in the log).
    """

    template_fields: Sequence[str] = (
        "error_queue_name",
        "failed_queue",
        "exception_type",
        "exception_message",
        "group",
        "message_ids",
    )
    ui_color = "#f5d3d3"

    def __init__(
        self,
        *,
        error_queue_name: str = "error",
        failed_queue: str | None = None,
        exception_type: str | None = None,
        exception_message: str | None = None,
        group: str | None = None,
        message_ids: str | Sequence[str] | None = None,
        retry_all: bool = False,
        sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
        batch_size: int = 100,
        fail_on_refused: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, int)
            or not 1 <= batch_size <= MAX_BATCH
        ):
            raise ValueError(f"batch_size must be an int between 1 and {MAX_BATCH:,}, not {batch_size!r}")
        filters = (failed_queue, exception_type, exception_message, group, message_ids)
        if not retry_all and all(value is None for value in filters):
            raise ValueError(
                "say which failed messages to retry: failed_queue, exception_type, exception_message, "
                "group or message_ids, or retry_all=True for every message of the error queue"
            )
        self.error_queue_name = error_queue_name
        self.failed_queue = failed_queue
        self.exception_type = exception_type
        self.exception_message = exception_message
        self.group = group
        self.message_ids = message_ids
        self.retry_all = retry_all
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.batch_size = batch_size
        self.fail_on_refused = fail_on_refused

    def execute(self, context: Any) -> dict[str, Any]:
        error_queue_name = self.error_queue_name
        if not isinstance(error_queue_name, str) or not error_queue_name:
            raise ValueError(f"error_queue_name must be a queue name, not {error_queue_name!r}")
        ids = as_names("message_ids", self.message_ids) if self.message_ids is not None else None
        selection = FailureFilter(
            failed_queue=self.failed_queue or None,
            exception_type=self.exception_type or None,
            exception_message=self.exception_message or None,
            group=self.group or None,
            ids=ids,
        )
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        try:
            transport = hook.get_transport()
            error_queue = transport.queue(error_queue_name, error_queue=None)
            outcome = retry_failed(error_queue, selection, self.batch_size)
        finally:
            hook.close()
        self.retried_into = sorted(outcome.queues)
        self.log.info(
            "retried %d failed message(s) from %s in %d batch(es)",
            len(outcome.done),
            error_queue_name,
            outcome.batches,
        )
        for refusal in outcome.refused:
            self.log.error("refused: %s", refusal.reason)
        if outcome.refused and self.fail_on_refused:
            raise AirflowException(
                f"{len(outcome.refused)} failed message(s) were left in {error_queue_name} "
                f"({len(outcome.done)} retried): {outcome.refused[0].reason}"
                + (" (and more in the log)" if len(outcome.refused) > 1 else "")
            )
        return {
            "error_queue": str(error_queue.address),
            "count": len(outcome.done),
            "first_id": outcome.done[0] if outcome.done else None,
            "last_id": outcome.done[-1] if outcome.done else None,
            "batches": outcome.batches,
            "queues": dict(sorted(outcome.queues.items())),
            "refused": len(outcome.refused),
        }

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the error queue read; written, every queue the run retried messages into (for any
        selection, ``retry_all`` too), or where it retried none, the ``failed_queue`` it was given."""
        from ._lineage import operator_lineage

        names = [self.error_queue_name] if isinstance(self.error_queue_name, str) else []
        outputs = getattr(self, "retried_into", None) or (
            [self.failed_queue] if isinstance(self.failed_queue, str) and self.failed_queue else []
        )
        return operator_lineage(self.sqlqueue_conn_id, inputs=names, outputs=outputs)
