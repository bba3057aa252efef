"""ReplyTrigger: wait in the triggerer for the reply to one durable request (transport/reply_queue.py).

The request's own reply queue holds its marker until the reply comes. The trigger watches that queue's
depth through the triggerer's shared poller of its connection (``transport/shared_poll.py``, as the
queue sensors do: one statement per poll for every watched queue, on one connection, however many
requests wait). When the queue holds more than the marker, one read of its oldest few messages confirms
that the reply is there, and leaves it there (a few such reads at a time per connection, so replies that
arrive together do not open a connection each): a reply that came before the trigger started, or while a
triggerer restarted, is found on the next poll, and the task that resumes takes it from the queue itself
(the event carries only the reply's Id, not its body).

Transient database failures are logged and polled through; any other failure ends the trigger with an
``error`` event naming it. At ``deadline`` (an absolute UTC time, so a restarted trigger keeps it) the
trigger ends with a ``timeout`` event.
"""

from __future__ import annotations

import asyncio
import uuid
import weakref
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ..hooks.sqlqueue import SqlQueueHook
from ..transport import ConfigurationError, TransientDatabaseError
from ..transport.reply_queue import ReplyQueue, reply_queue_name
from .queue import shared_watch

WITH_REPLY = 2  # the marker and the reply
CONFIRMING_AT_ONCE = 4  # confirming reads of one connection running at once on a triggerer's loop


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
        yield await self._wait()  # the shared watch is left before the event goes out

    async def _wait(self) -> TriggerEvent:
        deadline = datetime.fromisoformat(self.deadline)
        request_id = uuid.UUID(self.request_id)
        name = reply_queue_name(self.reply_queue_prefix, request_id)
        try:
            async with shared_watch(self.sqlqueue_conn_id, name, self.poll_interval, WITH_REPLY) as watch:
                while True:
                    left = (deadline - datetime.now(timezone.utc)).total_seconds()
                    if left <= 0:
                        return self._event("timeout", reply_queue=name, deadline=self.deadline)
                    try:
                        look = await asyncio.wait_for(watch.next(), left)
                    except asyncio.TimeoutError:
                        continue  # the deadline passed: said above
                    except TransientDatabaseError as error:
                        self.log.warning("polling %s failed, will retry: %s", name, error)
                        continue
                    depth = look.estimate if look.exact is None else look.exact
                    if depth >= WITH_REPLY:
                        try:
                            reply_id = await self._reply_id(request_id)
                        except TransientDatabaseError as error:
                            self.log.warning("reading %s failed, will retry: %s", name, error)
                            continue
                        if reply_id is not None:
                            return self._event("success", reply_id=reply_id, reply_queue=name)
        except Exception as error:  # a missing queue or connection, an unclassified driver error: say so
            return self._event("error", message=f"{type(error).__name__}: {error}")

    async def _reply_id(self, request_id: uuid.UUID) -> str | None:
        """The reply's Id when it is in the reply queue (one read of its oldest messages), else None. At
        most :data:`CONFIRMING_AT_ONCE` such reads of one connection run at once on the loop, so hundreds
        of replies arriving together do not open a connection each."""
        async with _confirming_slots(self.sqlqueue_conn_id):
            hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
            try:
                replies = ReplyQueue(await hook.aget_transport(), self.reply_queue_prefix, request_id)
                reply = await asyncio.to_thread(replies.find_reply)
            finally:
                await hook.aclose()
        return None if reply is None else reply.id


_CONFIRMING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


def _confirming_slots(conn_id: str) -> asyncio.Semaphore:
    """The running loop's slots for confirming reads of connection ``conn_id``."""
    slots = _CONFIRMING.setdefault(asyncio.get_running_loop(), {})
    return slots.setdefault(conn_id, asyncio.Semaphore(CONFIRMING_AT_ONCE))
