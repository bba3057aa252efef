"""Triggers that watch a queue's depth from the triggerer, through one shared poller per database.

- :class:`PendingMessagesTrigger` (deferred tasks): fires once when the depth reaches ``min_messages``.
- :class:`QueueMessagesEventTrigger` (``AssetWatcher`` / ``MessageQueueTrigger``): re-arms after each event
  and fires again only when new messages have arrived since the last one, so a queue that is not consumed
  yet does not start a DAG run per poll. Its watermark (the newest RowVersion an event fired for) is kept in
  the watched asset's state store, which Airflow 3.3's triggerer hands to event triggers, so a triggerer
  restart or a handover to another triggerer does not fire again for the messages still waiting. Without a
  state store (an older Airflow, a trigger run outside a triggerer) the watermark lives in memory.

The triggers of one connection id in one triggerer share one poller (``transport/shared_poll.py``): one
connection for its reads and, on PostgreSQL, one ``LISTEN`` connection that makes a send to a watched queue
wake its triggers at once; one statement per poll reads every watched queue's RowVersion bounds, its oldest
message's headers and its error queue's estimate (``transport/depth_reads.py``), plus one exact count for
the queues whose estimate reached a threshold. Each trigger checks its own condition on what it is handed,
and sends the queue's gauges (docs/operating.md, "Metrics"): the depth it saw, the oldest message's age
and the error queue's estimate. The poller also samples what it read into the depth history
(``transport/depth_samples.py``), at most once a minute a queue, kept ``[sqlqueue]
depth_history_retention_hours``.

Transient database failures (a restart, a lost connection) are logged and polled through. Any other
failure (a missing queue or connection, an unexpected driver error) ends the task trigger with an
``error`` event that names the cause; the event trigger logs it and keeps watching, served again after
30 s, since an event trigger must stay armed. One queue's failure reaches only its own triggers.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from ..hooks.sqlqueue import SqlQueueHook, depth_history_retention
from ..metrics import emit_queue_gauges
from ..transport import ConfigurationError, TransientDatabaseError
from ..transport.overview import QueueGauges
from ..transport.shared_poll import SHARED_POLLERS, SharedDatabase, Watch

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from ..transport.depth_reads import QueueLook

COUNT_MODES = ("estimate", "exact")


def shared_database_key(conn_id: str) -> str:
    """The key under which the triggers of connection ``conn_id`` share a poller."""
    return f"airflow-connection:{conn_id}"


def shared_watch(
    conn_id: str, queue_name: str, poll_interval: float, exact_from: int | None
) -> AbstractAsyncContextManager[Watch]:
    """A watch on ``queue_name`` through the triggerer's shared poller of connection ``conn_id``."""
    hook = SqlQueueHook(sqlqueue_conn_id=conn_id)

    async def close(_transport: Any) -> None:
        await hook.aclose()

    database = SharedDatabase(
        shared_database_key(conn_id), hook.aget_transport, close, depth_history_retention()
    )
    return SHARED_POLLERS.watch(database, queue_name, interval=poll_interval, exact_from=exact_from)


def emit_gauges(conn_id: str, look: QueueLook, depth: int, log: logging.Logger) -> None:
    """The queue's gauges for Airflow's metrics from the shared poll's look, with the depth the trigger
    counted. Never fails the trigger."""
    try:
        age = None
        if look.oldest_time_sent is not None:
            age = round((datetime.now(timezone.utc) - look.oldest_time_sent).total_seconds(), 3)
        error_queue = None if look.error_queue is None else str(look.error_queue)
        emit_queue_gauges(conn_id, QueueGauges(str(look.address), depth, age, error_queue, look.failed))
    except Exception as error:
        log.debug("metrics of %s not sent: %s", look.address, error)


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
        yield await self._wait()  # the watch is left before the event goes out

    async def _wait(self) -> TriggerEvent:
        # An estimate that reaches the threshold is confirmed by an exact count (it may overcount).
        exact_from = 0 if self.count_mode == "exact" else self.min_messages
        try:
            async with shared_watch(
                self.sqlqueue_conn_id, self.queue_name, self.poll_interval, exact_from
            ) as watch:
                while True:
                    try:
                        look = await watch.next()
                    except TransientDatabaseError as error:
                        self.log.warning("polling %s failed, will retry: %s", self.queue_name, error)
                        continue
                    depth = look.estimate if look.exact is None else look.exact
                    self.log.debug("%s holds %d message(s) (%s)", self.queue_name, depth, self.count_mode)
                    emit_gauges(self.sqlqueue_conn_id, look, depth, self.log)
                    if depth >= self.min_messages:
                        return self._event("success", depth=depth, count_mode=self.count_mode)
        except Exception as error:  # a missing queue or connection, an unclassified driver error: say so, end
            return self._event("error", message=f"{type(error).__name__}: {error}")


# The Task SDK releases (Airflow 3.3.x) whose AssetStateStoreAccessors keeps one accessor per asset in
# ``_by_name`` and ``_by_uri``: tests/test_trigger_gauges.py holds that on the pinned release.
TESTED_TASK_SDK = ("1.3",)


def asset_accessors(store: Any) -> list[Any] | None:
    """The per-asset accessors of an ``AssetStateStoreAccessors`` watching several assets, or None where
    the Task SDK is not a release whose layout was tested (a version-gated fallback: Airflow has no public
    listing of them)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("apache-airflow-task-sdk")
    except PackageNotFoundError:
        return None
    if ".".join(release.split(".")[:2]) not in TESTED_TASK_SDK:
        return None
    by_name = getattr(store, "_by_name", None)
    by_uri = getattr(store, "_by_uri", None)
    if not isinstance(by_name, dict) or not isinstance(by_uri, dict):
        return None
    return [*by_name.values(), *by_uri.values()]


class DurableWatermark:
    """The newest RowVersion an event trigger fired for, kept where a restarted triggerer finds it.

    The triggerer injects ``asset_state_store`` (one accessor per asset the trigger watches) into event
    triggers. The watermark is written to every watched asset and read back as the highest of them, under a
    key naming the connection and queue, so several queues may watch one asset. A state store that cannot
    be reached is logged and the watermark is kept in memory: at worst one duplicate event, never a missed
    one.

    With one watched asset the store's own public ``aget``/``aset`` are used. With several, Airflow offers
    no public way to list the store's assets: :func:`asset_accessors` finds them on the Task SDK releases
    this was tested on, and elsewhere the watermark is kept in memory.
    """

    KEY_PREFIX = "sqlqueue.watermark"
    KEY_LIMIT = 512

    def __init__(self, store: Any, sqlqueue_conn_id: str, queue_name: str, log: logging.Logger) -> None:
        self.store = store
        self.log = log
        key = f"{self.KEY_PREFIX}:{sqlqueue_conn_id}:{queue_name}"
        if len(key) > self.KEY_LIMIT:
            key = f"{self.KEY_PREFIX}:sha256:{hashlib.sha256(key.encode()).hexdigest()}"
        self.key = key
        self.value: int | None = None

    @property
    def durable(self) -> bool:
        return self.store is not None

    async def _read_all(self) -> list[Any]:
        try:
            return [await self.store.aget(self.key, None)]
        except ValueError:  # several assets watch this trigger: the watermark is kept on each of them
            return [await accessor.aget(self.key, None) for accessor in self._several()]

    async def _write_all(self, value: int) -> None:
        try:
            await self.store.aset(self.key, value)
        except ValueError:
            for accessor in self._several():
                await accessor.aset(self.key, value)

    def _several(self) -> list[Any]:
        accessors = asset_accessors(self.store)
        if accessors is None:
            raise RuntimeError(
                "several assets watch this trigger and this Task SDK's state store cannot list them "
                f"(tested on {', '.join(TESTED_TASK_SDK)}.x)"
            )
        return accessors

    async def load(self) -> int | None:
        if self.store is None:
            return self.value
        try:
            stored = await self._read_all()
        except Exception as error:
            self.log.warning(
                "cannot read the watermark %s from the asset state store (%s); keeping it in memory",
                self.key,
                error,
            )
            self.store = None
            return self.value
        values = [int(value) for value in stored if isinstance(value, int) and not isinstance(value, bool)]
        self.value = max(values) if values else None
        return self.value

    async def save(self, value: int) -> None:
        self.value = value
        if self.store is None:
            return
        try:
            await self._write_all(value)
        except Exception as error:
            self.log.warning(
                "cannot write the watermark %s to the asset state store (%s); keeping it in memory",
                self.key,
                error,
            )
            self.store = None


class QueueMessagesEventTrigger(BaseEventTrigger):
    """Fire each time new messages have arrived and the queue holds at least ``min_messages`` (estimate).

    For ``AssetWatcher`` or ``MessageQueueTrigger(scheme="sqlqueue", queue_name=..., ...)``. The event
    carries the depth and the newest RowVersion seen. The watermark is a :class:`DurableWatermark`; a newest
    RowVersion below it means the queue table was dropped and created again, and counts as new messages.
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
        watermark = DurableWatermark(
            getattr(self, "asset_state_store", None), self.sqlqueue_conn_id, self.queue_name, self.log
        )
        seen = await watermark.load()
        self.log.info(
            "watching %s; watermark %s (%s)",
            self.queue_name,
            seen,
            "asset state store" if watermark.durable else "in memory: no asset state store was given",
        )
        async with shared_watch(self.sqlqueue_conn_id, self.queue_name, self.poll_interval, None) as watch:
            while True:
                try:
                    look = await watch.next()
                except TransientDatabaseError as error:
                    self.log.warning("polling %s failed, will retry: %s", self.queue_name, error)
                    continue
                except Exception as error:
                    # An event trigger must stay armed: report, and look again (the poller waits 30 s).
                    self.log.error("cannot watch %s: %s: %s", self.queue_name, type(error).__name__, error)
                    continue
                depth, newest = look.estimate, look.newest
                emit_gauges(self.sqlqueue_conn_id, look, depth, self.log)
                fresh = newest is not None and (seen is None or newest != seen)
                if depth >= self.min_messages and fresh:
                    yield TriggerEvent(
                        {"status": "success", "queue": self.queue_name, "depth": depth, "newest": newest}
                    )
                    seen = newest
                    await watermark.save(newest)
