"""ReplyTrigger: wait in the triggerer for the reply to one durable request (transport/reply_queue.py).

Each poll reads the oldest few messages of the request's own reply queue (two, normally: the marker and,
once it came, the reply) and leaves them there, so a reply that came before the trigger started, or
while a triggerer restarted, is found on the next poll, and the task that resumes takes it from the queue
itself: the event carries only the reply's Id, not its body.

Transient database failures are logged and polled through; any other failure ends the trigger with an
``error`` event naming it. At ``deadline`` (an absolute UTC time, so a restarted trigger keeps it) the
trigger ends with a ``timeout`` event.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ..hooks.sqlqueue import SqlQueueHook
from ..transport import ConfigurationError, TransientDatabaseError
from ..transport.reply_queue import ReplyQueue


class ReplyTrigger(BaseTrigger):
    """Fire when the reply to request ``request_id`` is in its reply queue, or at ``deadline``.

    :param reply_queue_prefix: the prefix of the request's reply queue (see :class:`ReplyQueue`).
    :param request_id: the request's id (its ``NServiceBus.MessageId``).
    :param deadline: ISO 8601 UTC time after which the trigger gives up (``timeout`` event).
    :param sqlqueue_conn_id: Airflow connection of the queue database.
    :param poll_interval: seconds between reads of the reply queue.
    """

    def __init__(
        self,
        reply_queue_prefix: str,
        request_id: str,
        deadline: str,
        sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
        poll_interval: float = 5.0,
    ) -> None:
        super().__init__()
        if not isinstance(reply_queue_prefix, str) or not reply_queue_prefix:
            raise ConfigurationError("reply_queue_prefix must be a non-empty queue address")
        try:
            uuid.UUID(str(request_id))
            moment = datetime.fromisoformat(deadline)
        except (TypeError, ValueError) as error:
            raise ConfigurationError(
                f"a reply trigger needs a UUID request_id and an ISO deadline: {error}"
            ) from None
        if moment.tzinfo is None:
            raise ConfigurationError(f"deadline must carry its time zone, not {deadline!r}")
        if isinstance(poll_interval, bool) or not poll_interval > 0:
            raise ConfigurationError(f"poll_interval must be positive, not {poll_interval!r}")
        self.reply_queue_prefix = reply_queue_prefix
        self.request_id = str(uuid.UUID(str(request_id)))
        self.deadline = deadline
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "reply_queue_prefix": self.reply_queue_prefix,
                "request_id": self.request_id,
                "deadline": self.deadline,
                "sqlqueue_conn_id": self.sqlqueue_conn_id,
                "poll_interval": self.poll_interval,
            },
        )

    def _event(self, status: str, **payload: Any) -> TriggerEvent:
        return TriggerEvent({"status": status, "request_id": self.request_id, **payload})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        deadline = datetime.fromisoformat(self.deadline)
        try:
            transport = await hook.aget_transport()
            replies = ReplyQueue(transport, self.reply_queue_prefix, uuid.UUID(self.request_id))
            while True:
                try:
                    reply = await asyncio.to_thread(replies.find_reply)
                except TransientDatabaseError as error:
                    self.log.warning("reading %s failed, will retry: %s", replies.address, error)
                else:
                    if reply is not None:
                        yield self._event("success", reply_id=reply.id, reply_queue=str(replies.address))
                        return
                if datetime.now(timezone.utc) >= deadline:
                    yield self._event("timeout", reply_queue=str(replies.address), deadline=self.deadline)
                    return
                await asyncio.sleep(self.poll_interval)
        except Exception as error:  # a missing queue or connection, an unclassified driver error: say so
            yield self._event("error", message=f"{type(error).__name__}: {error}")
        finally:
            await hook.aclose()
