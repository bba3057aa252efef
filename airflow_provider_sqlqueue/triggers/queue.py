"""Triggers that watch a queue's depth from the triggerer, one query per poll.

- :class:`PendingMessagesTrigger` (deferred tasks): fires once when the depth reaches ``min_messages``.
- :class:`QueueMessagesEventTrigger` (``AssetWatcher`` / ``MessageQueueTrigger``): re-arms after each event
  and fires again only when new messages have arrived since the last one, so a queue that is not consumed
  yet does not start a DAG run per poll. Its watermark (the newest RowVersion seen) lives in memory: after
  a triggerer restart the messages still waiting cause one more event.

Transient database failures (a restart, a lost connection) are logged and polled through. Any other
failure (a missing queue or connection, an unexpected driver error) ends the task trigger with an
``error`` event that names the cause; the event trigger logs it and keeps watching, backing off to 30 s,
since an event trigger must stay armed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from ..hooks.sqlqueue import SqlQueueHook
from ..transport import ConfigurationError, TransientDatabaseError

COUNT_MODES = ("estimate", "exact")


def _check(queue_name: str, min_messages: int, count_mode: str, poll_interval: float) -> None:
    if not isinstance(queue_name, str) or not queue_name:
        raise ConfigurationError("queue_name must be a non-empty queue address")
    if isinstance(min_messages, bool) or not isinstance(min_messages, int) or min_messages < 1:
        raise ConfigurationError(f"min_messages must be a positive int, not {min_messages!r}")
    if count_mode not in COUNT_MODES:
        raise ConfigurationError(f"count_mode must be 'estimate' or 'exact', not {count_mode!r}")
    if not poll_interval > 0:
        raise ConfigurationError(f"poll_interval must be positive, not {poll_interval!r}")


class PendingMessagesTrigger(BaseTrigger):
    """Fire when ``queue_name`` holds at least ``min_messages`` messages (an estimate that reaches the
    threshold is confirmed by an exact count first).

    :param queue_name: queue address, ``table@[schema]@[catalog]``.
    :param sqlqueue_conn_id: Airflow connection of the queue database.
    :param min_messages: the threshold.
    :param count_mode: ``estimate`` (cheap at any length) or ``exact`` (a count of unexpired rows).
    :param poll_interval: seconds between polls.
    """

    def __init__(
        self,
        queue_name: str,
        sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
        min_messages: int = 1,
        count_mode: str = "estimate",
        poll_interval: float = 5.0,
    ) -> None:
        super().__init__()
        _check(queue_name, min_messages, count_mode, poll_interval)
        self.queue_name = queue_name
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.min_messages = min_messages
        self.count_mode = count_mode
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "queue_name": self.queue_name,
                "sqlqueue_conn_id": self.sqlqueue_conn_id,
                "min_messages": self.min_messages,
                "count_mode": self.count_mode,
                "poll_interval": self.poll_interval,
            },
        )

    def _event(self, status: str, **payload: Any) -> TriggerEvent:
        return TriggerEvent({"status": status, "queue": self.queue_name, **payload})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        try:
            while True:
                try:
                    depth = await hook.adepth(self.queue_name, self.count_mode)  # type: ignore[arg-type]
                    if self.count_mode == "estimate" and depth >= self.min_messages:
                        depth = await hook.adepth(self.queue_name, "exact")  # the estimate may overcount
                except TransientDatabaseError as error:
                    self.log.warning("polling %s failed, will retry: %s", self.queue_name, error)
                else:
                    self.log.debug("%s holds %d message(s) (%s)", self.queue_name, depth, self.count_mode)
                    if depth >= self.min_messages:
                        yield self._event("success", depth=depth, count_mode=self.count_mode)
                        return
                await asyncio.sleep(self.poll_interval)
        except Exception as error:  # a missing connection, an unclassified driver error: say so, end
            yield self._event("error", message=f"{type(error).__name__}: {error}")
        finally:
            await hook.aclose()


class QueueMessagesEventTrigger(BaseEventTrigger):
    """Fire each time new messages have arrived and the queue holds at least ``min_messages`` (estimate).

    For ``AssetWatcher`` or ``MessageQueueTrigger(scheme="sqlqueue", queue_name=..., ...)``. The event
    carries the depth and the newest RowVersion seen.
    """

    def __init__(
        self,
        queue_name: str,
        sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
        min_messages: int = 1,
        poll_interval: float = 5.0,
    ) -> None:
        super().__init__()
        _check(queue_name, min_messages, "estimate", poll_interval)
        self.queue_name = queue_name
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.min_messages = min_messages
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "queue_name": self.queue_name,
                "sqlqueue_conn_id": self.sqlqueue_conn_id,
                "min_messages": self.min_messages,
                "poll_interval": self.poll_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        watermark: int | None = None
        try:
            while True:
                delay = self.poll_interval
                try:
                    transport = await hook.aget_transport()
                    queue = transport.queue(self.queue_name)
                    oldest, newest = await asyncio.to_thread(queue.peek_bounds)
                except TransientDatabaseError as error:
                    self.log.warning("polling %s failed, will retry: %s", self.queue_name, error)
                except Exception as error:
                    # An event trigger must stay armed: report, back off, and look again.
                    self.log.error("cannot watch %s: %s: %s", self.queue_name, type(error).__name__, error)
                    delay = max(self.poll_interval, 30.0)
                else:
                    depth = 0 if oldest is None or newest is None else newest - oldest + 1
                    fresh = newest is not None and (watermark is None or newest > watermark)
                    if depth >= self.min_messages and fresh:
                        watermark = newest
                        yield TriggerEvent(
                            {"status": "success", "queue": self.queue_name, "depth": depth, "newest": newest}
                        )
                await asyncio.sleep(delay)
        finally:
            await hook.aclose()
