"""ConsumeMessagesOperator: run a handler over a queue with the message pump, then report the counts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from ..hooks.sqlqueue import SqlQueueHook
from ..metrics import PumpReporter, emit_queue_gauges
from ..transport import MessagePump, load_handler
from ..transport.overview import queue_gauges


class ConsumeMessagesOperator(BaseOperator):
    """Handle messages of ``queue_name`` until ``max_messages`` are handled or the queue is empty.

    Each message is received in its own transaction (``batch_size`` 1, the default) or with up to
    ``batch_size`` others; a handler exception means another attempt, and after ``immediate_retries`` the
    message goes to the error queue with failure headers.

    :param queue_name: queue address (templated). ``queue`` stays Airflow's executor queue.
    :param handler: ``handler(message)`` or ``handler(message, context)``, as a callable or a dotted path
        ``"package.module:function"``.
    :param max_messages: stop after this many messages (None: until the queue is empty).
    :param max_concurrency: receives in flight at once (handlers running at once).
    :param batch_size: messages per receive transaction (default 1). Above 1 the handler runs on each in
        turn, a failing one is retried in place, and the batch commits once; a killed task returns the
        whole batch to the queue (see "Batch size" in the concurrency guide).
    :param strategy: ``monitor`` (default), ``adaptive`` or ``fixed``.
    :param transaction_mode: ``sends_atomic_with_receive`` (default), ``receive_only`` or ``none``.
    :param timeout: stop after this many seconds in any case.
    :param pump_options: further :class:`MessagePump` keywords (``immediate_retries``, ``audit_queue``,
        ``idle_delay``, ...).
    :param on_kill_timeout: when the task is killed, seconds that the handlers in flight get to finish and
        commit. Airflow's supervisor sends SIGKILL 5 seconds after SIGTERM, so the default stays under
        that; a handler still running then is rolled back and its message received again.
    :return: the pump's counts (``processed``, ``failed``, ``retried``, ``rate``, ...).
    """

    template_fields: Sequence[str] = ("queue_name",)
    ui_color = "#d3e5f5"

    def __init__(
        self,
        *,
        queue_name: str,
        handler: Callable[..., Any] | str,
        max_messages: int | None = None,
        max_concurrency: int = 1,
        batch_size: int = 1,
        strategy: str = "monitor",
        transaction_mode: str | None = None,
        timeout: float | None = None,
        pump_options: dict[str, Any] | None = None,
        sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
        on_kill_timeout: float = 4.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(handler, str):
            load_handler(handler)  # a wrong path fails when the DAG is parsed, not when it runs
        self.queue_name = queue_name
        self.handler = handler
        self.max_messages = max_messages
        self.max_concurrency = max_concurrency
        self.batch_size = batch_size
        self.strategy = strategy
        self.transaction_mode = transaction_mode
        self.timeout = timeout
        self.pump_options = dict(pump_options or {})
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.on_kill_timeout = on_kill_timeout
        self._pump: MessagePump | None = None
        self._killed = False

    def execute(self, context: Any) -> dict[str, Any]:
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        try:
            pump = MessagePump(
                hook.get_queue(self.queue_name),
                self.handler,
                max_concurrency=self.max_concurrency,
                batch_size=self.batch_size,
                strategy=self.strategy,
                transaction_mode=self.transaction_mode,
                **self.pump_options,
            )
            self._pump = pump
            if self._killed:  # on_kill came before the pump existed
                pump.stop(0)
            reporter = PumpReporter(self.sqlqueue_conn_id, str(pump.queue.address), pump.stats)
            reporter.start()
            try:
                stats = pump.run(max_messages=self.max_messages, until_empty=True, timeout=self.timeout)
            finally:
                reporter.finish(pump.stats())
            self._emit_gauges(pump.queue)
        finally:
            self._pump = None
            hook.close()
        counts = stats.as_dict()
        self.log.info(
            "%s: processed %d, failed %d, retried %d (%.1f/s)",
            self.queue_name,
            stats.processed,
            stats.failed,
            stats.retried,
            stats.rate,
        )
        if self._killed:
            raise AirflowException(
                f"{self.queue_name}: consuming stopped by on_kill after {stats.processed} message(s); "
                f"{stats.abandoned} handler(s) were still running and roll back, the rest stay in the queue"
            )
        return counts

    def _emit_gauges(self, queue: Any) -> None:
        """The queue's gauges as the pump left it, for Airflow's metrics; never fails the task."""
        try:
            emit_queue_gauges(self.sqlqueue_conn_id, queue_gauges(queue))
        except Exception as error:
            self.log.warning("metrics of %s not sent: %s", self.queue_name, error)

    def on_kill(self) -> None:
        """Stop the pump: no new receive; the handlers in flight get ``on_kill_timeout`` seconds to finish
        and commit, and any still running then roll back, so every message is handled or still queued."""
        self._killed = True
        pump = self._pump
        if pump is not None:
            pump.stop(self.on_kill_timeout)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the queue consumed as input; the error queue (and the audit queue, if any) that
        the pump writes to as outputs. Where a handler sends messages is the handler's business."""
        from ._lineage import operator_lineage

        error_queue = self.pump_options.get("error_queue")
        if error_queue is None:
            hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
            try:
                error_queue = hook.get_queue(str(self.queue_name)).error_queue
            finally:
                hook.close()
        outputs = [str(error_queue)]
        if self.pump_options.get("audit_queue"):
            outputs.append(str(self.pump_options["audit_queue"]))
        return operator_lineage(self.sqlqueue_conn_id, inputs=[str(self.queue_name)], outputs=outputs)
