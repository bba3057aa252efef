"""SendMessageOperator: send one templated message, or a batch, to a queue."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator

from ..hooks.sqlqueue import SqlQueueHook
from ..transport import OutgoingMessage
from ..transport.headers import CONTENT_TYPE
from ._rendered import as_list, as_mapping

WRAPPER_KEYS = {"body", "headers", "time_to_be_received"}
MESSAGE_ID_NAMESPACE = uuid.UUID("5d0f3c2e-6b1a-5e4f-9c7d-2a8b4e6f1c30")  # this provider's uuid5 namespace


def _seconds(value: timedelta | float | int | None) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    return timedelta(seconds=float(value))


def to_message(
    body: Any,
    headers: Mapping[str, str | None] | None = None,
    time_to_be_received: timedelta | float | None = None,
    message_id: uuid.UUID | None = None,
) -> OutgoingMessage:
    """Bytes and text go as they are; anything else is sent as JSON with that content type."""
    merged = dict(headers or {})
    if not isinstance(body, bytes | bytearray | str):
        body = json.dumps(body)
        merged.setdefault(CONTENT_TYPE, "application/json")
    if message_id is None:
        return OutgoingMessage(body, merged, _seconds(time_to_be_received))
    return OutgoingMessage(body, merged, _seconds(time_to_be_received), id=message_id)


def task_message_id(dag_id: str, task_id: str, run_id: str, map_index: int, position: int) -> uuid.UUID:
    """The Id of the message at ``position`` of a task instance's send: the same on every try, so a
    receiver that remembers Ids (an outbox, a unique key) drops what a retried send queues again."""
    return uuid.uuid5(MESSAGE_ID_NAMESPACE, f"{dag_id}\x1f{task_id}\x1f{run_id}\x1f{map_index}\x1f{position}")


class SendMessageOperator(BaseOperator):
    """Send a message (``body``) or a batch (``messages``) to ``queue_name``; return a count and two Ids.

    :param queue_name: queue address (templated). ``queue`` stays Airflow's executor queue.
    :param body: bytes, text, or a JSON-able value sent as JSON (templated).
    :param headers: message headers (templated).
    :param time_to_be_received: a timedelta or seconds; the message expires that long after sending.
    :param messages: instead of ``body``, a list of bodies, or of dicts with a ``body`` key and optionally
        ``headers`` and ``time_to_be_received`` (and no other key; any other dict is itself the JSON body),
        sent atomically in one transaction (templated).
    :param deterministic_ids: derive each message's Id (and ``NServiceBus.MessageId``) from the DAG id,
        task id, run id, map index and the message's position, so a retry of the task sends the same Ids
        and a receiver can drop the duplicates; False gives random Ids.
    :return: ``{"queue", "count", "first_id", "last_id"}``; not every Id, which would make the XCom as
        large as the batch.
    """

    template_fields: Sequence[str] = ("queue_name", "body", "headers", "messages")
    template_fields_renderers = {"body": "json", "headers": "json", "messages": "json"}
    ui_color = "#d3f5e0"

    def __init__(
        self,
        *,
        queue_name: str,
        body: Any = None,
        headers: Mapping[str, str | None] | None = None,
        time_to_be_received: timedelta | float | None = None,
        messages: Sequence[Any] | None = None,
        sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
        deterministic_ids: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (body is None) == (messages is None):
            raise ValueError("give either body (one message) or messages (a batch)")
        self.queue_name = queue_name
        self.body = body
        self.headers = headers
        self.time_to_be_received = time_to_be_received
        self.messages = messages
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.deterministic_ids = deterministic_ids

    def _message_ids(self, context: Any) -> Callable[[int], uuid.UUID | None]:
        ti = context.get("ti") if isinstance(context, Mapping) else None
        if not self.deterministic_ids or ti is None:
            return lambda position: None
        key = (ti.dag_id, ti.task_id, ti.run_id, getattr(ti, "map_index", -1))
        return lambda position: task_message_id(*key, position)

    def _outgoing(self, message_id: Callable[[int], uuid.UUID | None]) -> list[OutgoingMessage]:
        common = as_mapping("headers", self.headers)
        if self.messages is None:
            return [to_message(self.body, common, self.time_to_be_received, message_id(0))]
        batch = []
        for position, item in enumerate(as_list("messages", self.messages)):
            if isinstance(item, Mapping) and "body" in item and set(item) <= WRAPPER_KEYS:
                headers = {**common, **as_mapping("a message's headers", item.get("headers"))}
                ttbr = item.get("time_to_be_received", self.time_to_be_received)
                batch.append(to_message(item["body"], headers, ttbr, message_id(position)))
            else:
                batch.append(to_message(item, common, self.time_to_be_received, message_id(position)))
        return batch

    def outgoing_messages(self, context: Any) -> list[OutgoingMessage]:
        """The messages this task instance sends, built from the rendered arguments, with their Ids."""
        return self._outgoing(self._message_ids(context))

    def execute(self, context: Any) -> dict[str, Any]:
        outgoing = self.outgoing_messages(context)
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        try:
            ids = hook.send_batch(self.queue_name, outgoing)
        finally:
            hook.close()
        self.log.info("sent %d message(s) to %s", len(ids), self.queue_name)
        return {
            "queue": self.queue_name,
            "count": len(ids),
            "first_id": ids[0] if ids else None,
            "last_id": ids[-1] if ids else None,
        }

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the queue written to, as an output dataset."""
        from ._lineage import operator_lineage

        return operator_lineage(self.sqlqueue_conn_id, outputs=[str(self.queue_name)])
