"""QueueSensor: wait until a queue holds enough messages, poking or deferred to the triggerer."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.providers.common.compat.sdk import AirflowException, conf
from airflow.sdk import BaseSensorOperator, PokeReturnValue

from ..hooks.queues_page_link import QueuesPageLink
from ..hooks.sqlqueue import SqlQueueHook
from ..metrics import emit_queue_gauges
from ..transport.overview import queue_gauges
from ..triggers.queue import COUNT_MODES, PendingMessagesTrigger


def _threshold(value: object) -> int:
    try:
        number = int(value) if isinstance(value, str) else value
    except ValueError:
        number = None
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ValueError(f"min_messages must be a positive int, not {value!r}")
    return number


class QueueSensor(BaseSensorOperator):
    """Succeed when ``queue_name`` holds at least ``min_messages`` messages; the depth becomes the XCom value.

    With ``deferrable=True`` it pokes once and, if the queue is not deep enough yet, hands the waiting to
    :class:`~airflow_provider_sqlqueue.triggers.queue.PendingMessagesTrigger` and frees its worker slot;
    in the triggerer the sensors of one connection share one poller (one statement per ``poke_interval``
    for all their queues, see docs/triggers.md, "Shared polling").

    :param queue_name: queue address, ``table@[schema]@[catalog]`` (templated). ``queue`` stays Airflow's
        executor queue.
    :param sqlqueue_conn_id: Airflow connection of the queue database.
    :param min_messages: threshold, at least 1 (templated: ``"{{ params.min_messages }}"`` works).
    :param count_mode: ``estimate`` (max - min + 1 of RowVersion; cheap at any length, may overcount gaps
        and expired rows, so a poke that reaches the threshold confirms it with an exact count before
        succeeding) or ``exact`` (counts unexpired rows on every poke; scans the table).
    :param deferrable: defer to the triggerer; defaults to ``[operators] default_deferrable``.

    Each poke, like each of the trigger's polls, sends the queue's gauges (depth as this poke counted it,
    oldest message's age, its error queue's estimate) to Airflow's metrics backend (see metrics.py), and
    offers the depth to the queue's depth history where its table exists (:meth:`SqlQueueHook.sample_depth`),
    so the Queues page's chart covers a queue that only poking sensors watch.
    """

    template_fields: Sequence[str] = ("queue_name", "min_messages")
    operator_extra_links = (QueuesPageLink(),)
    ui_color = "#d3e8f5"

    def __init__(
        self,
        *,
        queue_name: str,
        sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
        min_messages: int | str = 1,
        count_mode: str = "estimate",
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(min_messages, int):  # a template or an XComArg is checked when the sensor runs
            _threshold(min_messages)
        if count_mode not in COUNT_MODES:
            raise ValueError(f"count_mode must be 'estimate' or 'exact', not {count_mode!r}")
        self.queue_name = queue_name
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.min_messages = min_messages
        self.count_mode = count_mode
        self.deferrable = deferrable

    def poke(self, context: Any) -> PokeReturnValue:
        threshold = _threshold(self.min_messages)
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        try:
            depth = hook.depth(self.queue_name, self.count_mode)  # type: ignore[arg-type]
            if self.count_mode == "estimate" and depth >= threshold:
                # The estimate counts gaps and expired rows: confirm before succeeding.
                depth = hook.depth(self.queue_name, "exact")
            self._emit_gauges(hook, depth)
            hook.sample_depth(self.queue_name, depth, exact=self.count_mode == "exact" or depth >= threshold)
        finally:
            hook.close()
        self.log.info(
            "queue %s holds %d message(s) (%s); waiting for %d",
            self.queue_name,
            depth,
            self.count_mode,
            threshold,
        )
        return PokeReturnValue(is_done=depth >= threshold, xcom_value=depth)

    def _emit_gauges(self, hook: SqlQueueHook, depth: int) -> None:
        """The queue's gauges with the depth this poke saw, as the trigger sends them; never fails it."""
        try:
            emit_queue_gauges(self.sqlqueue_conn_id, queue_gauges(hook.get_queue(self.queue_name), depth))
        except Exception as error:
            self.log.debug("metrics of %s not sent: %s", self.queue_name, error)

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)
        if first.is_done:
            return first.xcom_value
        self.defer(
            trigger=PendingMessagesTrigger(
                queue_name=self.queue_name,
                sqlqueue_conn_id=self.sqlqueue_conn_id,
                min_messages=_threshold(self.min_messages),
                count_mode=self.count_mode,
                poll_interval=self.poke_interval,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )
        return None

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> int:
        """Check the trigger's event and return the depth it saw."""
        if not isinstance(event, dict) or "status" not in event:
            raise AirflowException(f"QueueSensor on {self.queue_name}: unexpected trigger event {event!r}")
        if event["status"] != "success":
            raise AirflowException(
                f"QueueSensor on {self.queue_name} failed: {event.get('message', 'no reason given')}"
            )
        if event.get("queue") != self.queue_name:
            raise AirflowException(
                f"QueueSensor on {self.queue_name} got an event for another queue: {event.get('queue')!r}"
            )
        depth = event.get("depth")
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < _threshold(self.min_messages):
            raise AirflowException(f"QueueSensor on {self.queue_name}: event depth {depth!r} is not valid")
        self.log.info("queue %s reached %d message(s)", self.queue_name, depth)
        return depth
