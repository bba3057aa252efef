"""ConsumeMessagesOperator: run a handler over a queue with the message pump, then report the counts."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow.providers.common.compat.sdk import AirflowException
from airflow.sdk import BaseOperator

from ..hooks.queues_page_link import QueuesPageLink
from ..hooks.sqlqueue import SqlQueueHook, depth_history_retention
from ..metrics import PumpReporter, emit_queue_gauges
from ..transport import MessagePump, PumpSettings, load_handler
from ..transport.depth_samples import DepthSampler
from ..transport.overview import queue_gauges

# What pump_options may hold besides the settings: the pump's error and audit queues.
PUMP_WIRING = ("error_queue", "audit_queue")


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
    :param batch_size: messages per receive transaction; above 1 the handler runs on each message of a
        receive in turn and the batch commits once; a killed task returns the whole batch to the queue (see
        "Batch size" in the concurrency guide).
    :param strategy: ``monitor``, ``adaptive`` or ``fixed``.
    :param transaction_mode: ``sends_atomic_with_receive``, ``receive_only`` or ``none``.
        These four are the pump settings most tasks set, as arguments of their own: unset, they take
        ``pump_options``' value or the default of
        :class:`~airflow_provider_sqlqueue.transport.PumpSettings`, which documents them.
    :param timeout: stop after this many seconds in any case.
    :param pump_options: the pump's other settings, as a ``PumpSettings`` or a dict of its names
        (``immediate_retries``, ``idle_delay``, ...), plus ``audit_queue`` / ``error_queue``. Checked when
        the DAG is parsed: an unknown name or a wrong value fails there, naming the settings.
    :param on_kill_timeout: when the task is killed, seconds that the handlers in flight get to finish and
        commit. Airflow's supervisor sends SIGKILL 5 seconds after SIGTERM, so the default stays under
        that; a handler still running then is rolled back and its message received again.
    :return: the pump's counts (``processed``, ``failed``, ``retried``, ``rate``, ...).
    """

    template_fields: Sequence[str] = ("queue_name",)
    operator_extra_links = (QueuesPageLink(),)
    ui_color = "#d3e5f5"

    def __init__(
        self,
        *,
        queue_name: str,
        handler: Callable[..., Any] | str,
        max_messages: int | None = None,
        max_concurrency: int | None = None,
        batch_size: int | None = None,
        strategy: str | None = None,
        transaction_mode: str | None = None,
        timeout: float | None = None,
        pump_options: PumpSettings | Mapping[str, Any] | None = None,
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
        self.timeout = timeout
        options = dict(pump_options) if isinstance(pump_options, Mapping) else {}
        self.pump_wiring = {name: options.pop(name) for name in PUMP_WIRING if name in options}
        given = {
            "max_concurrency": max_concurrency,
            "batch_size": batch_size,
            "strategy": strategy,
            "transaction_mode": transaction_mode,
        }
        base = pump_options if isinstance(pump_options, PumpSettings) else options
        self.pump_settings = PumpSettings.of(base, **{k: v for k, v in given.items() if v is not None})
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.on_kill_timeout = on_kill_timeout
        self._pump: MessagePump | None = None
        self._killed = False

    def execute(self, context: Any) -> dict[str, Any]:
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        try:
            queue = hook.get_queue(self.queue_name)
            sampler = DepthSampler(queue.transport, depth_history_retention())
            pump = MessagePump(
                queue, self.handler, self.pump_settings, depth_sampler=sampler, **self.pump_wiring
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

        error_queue = self.pump_wiring.get("error_queue")
        if error_queue is None:
            hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
            try:
                error_queue = hook.get_queue(str(self.queue_name)).error_queue
            finally:
                hook.close()
        outputs = [str(error_queue)]
        if self.pump_wiring.get("audit_queue"):
            outputs.append(str(self.pump_wiring["audit_queue"]))
        return operator_lineage(self.sqlqueue_conn_id, inputs=[str(self.queue_name)], outputs=outputs)
