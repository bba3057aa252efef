"""SendMessageOperator: send one templated message, or a batch, to a queue."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator

from ..hooks.sqlqueue import SqlQueueHook
from ..transport import OutgoingMessage
from ..transport.headers import CONTENT_TYPE
from ._rendered import as_list, as_mapping

WRAPPER_KEYS = {"body", "headers", "time_to_be_received"}


def _seconds(value: timedelta | float | int | None) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    return timedelta(seconds=float(value))


def to_message(
    body: Any,
    headers: Mapping[str, str | None] | None = None,
    time_to_be_received: timedelta | float | None = None,
) -> OutgoingMessage:
    """Bytes and text go as they are; anything else is sent as JSON with that content type."""
    merged = dict(headers or {})
    if not isinstance(body, bytes | bytearray | str):
        body = json.dumps(body)
        merged.setdefault(CONTENT_TYPE, "application/json")
    return OutgoingMessage(body, merged, _seconds(time_to_be_received))


class SendMessageOperator(BaseOperator):
    """Send a message (``body``) or a batch (``messages``) to ``queue_name``; return the message Ids.

    :param queue_name: queue address (templated). ``queue`` stays Airflow's executor queue.
    :param body: bytes, text, or a JSON-able value sent as JSON (templated).
    :param headers: message headers (templated).
    :param time_to_be_received: a timedelta or seconds; the message expires that long after sending.
    :param messages: instead of ``body``, a list of bodies, or of dicts with a ``body`` key and optionally
        ``headers`` and ``time_to_be_received`` (and no other key; any other dict is itself the JSON body),
        sent atomically in one transaction (templated).
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

    def _outgoing(self) -> list[OutgoingMessage]:
        common = as_mapping("headers", self.headers)
        if self.messages is None:
            return [to_message(self.body, common, self.time_to_be_received)]
        batch = []
        for item in as_list("messages", self.messages):
            if isinstance(item, Mapping) and "body" in item and set(item) <= WRAPPER_KEYS:
                headers = {**common, **as_mapping("a message's headers", item.get("headers"))}
                ttbr = item.get("time_to_be_received", self.time_to_be_received)
                batch.append(to_message(item["body"], headers, ttbr))
            else:
                batch.append(to_message(item, common, self.time_to_be_received))
        return batch

    def execute(self, context: Any) -> list[str]:
        outgoing = self._outgoing()
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        try:
            ids = hook.send_batch(self.queue_name, outgoing)
        finally:
            hook.close()
        self.log.info("sent %d message(s) to %s", len(ids), self.queue_name)
        return ids
