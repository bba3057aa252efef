"""The common-messaging queue provider: ``MessageQueueTrigger(scheme="sqlqueue", queue_name=..., ...)``.

Keyword arguments go to :class:`~airflow_provider_sqlqueue.triggers.queue.QueueMessagesEventTrigger`.
The legacy URI form ``sqlqueue://<conn_id>/<queue address>`` is understood too. (The trigger's queue
argument is ``queue_name``: ``MessageQueueTrigger`` keeps ``queue`` for its deprecated URI form.)
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

from airflow.providers.common.messaging.providers.base_provider import BaseMessageQueueProvider

from ..triggers.queue import QueueMessagesEventTrigger

SCHEME = "sqlqueue"


class SqlQueueMessageQueueProvider(BaseMessageQueueProvider):
    """Queues in SQL tables, watched by :class:`QueueMessagesEventTrigger`."""

    scheme = SCHEME

    def trigger_class(self) -> type[QueueMessagesEventTrigger]:
        return QueueMessagesEventTrigger

    def queue_matches(self, queue: str) -> bool:
        return isinstance(queue, str) and queue.startswith(f"{SCHEME}://")

    def trigger_kwargs(self, queue: str, **kwargs: Any) -> dict[str, Any]:
        parts = urlsplit(queue)
        name = unquote(parts.path.lstrip("/"))
        if not parts.netloc or not name:
            raise ValueError(f"expected {SCHEME}://<conn_id>/<queue address>, got {queue!r}")
        return {"sqlqueue_conn_id": unquote(parts.netloc), "queue_name": name}
