"""What an operator sees of a connection's queues at a glance: each queue's depth and oldest message, and
the failed-message groups of an error queue.

Read-only through and through: exact counts and the oldest row by plain ``SELECT`` (the statements
``sqlqueue stats`` and ``sqlqueue failed list`` use), so a monitoring role with SELECT alone can build it
and receivers are never slowed by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from ..model.address import QueueAddress
from .browse import browse, queue_tables
from .failed import FailedGroup, failed_groups

if TYPE_CHECKING:
    from .connection import Transport
    from .queue import TableQueue

__all__ = ["QueueGauges", "QueueState", "QueuesOverview", "human_age", "queue_gauges", "queues_overview"]


@dataclass(frozen=True)
class QueueState:
    """One queue table: how many messages wait and since when the oldest of them was sent."""

    address: QueueAddress
    messages: int
    oldest_time_sent: datetime | None
    oldest_age_seconds: float | None

    @property
    def name(self) -> str:
        return str(self.address)


@dataclass(frozen=True)
class QueuesOverview:
    """The queues of one schema and the failed-message groups of its error queue (None when that queue
    does not exist), as of ``checked_at``."""

    queues: list[QueueState]
    error_queue: str
    failed: list[FailedGroup] | None
    checked_at: datetime


def _oldest(queue: TableQueue, checked_at: datetime) -> tuple[datetime | None, float | None]:
    oldest = browse(queue, 1)
    sent = oldest[0].time_sent if oldest else None
    return sent, round((checked_at - sent).total_seconds(), 3) if sent else None


def queue_state(transport: Transport, address: QueueAddress | str, checked_at: datetime) -> QueueState:
    queue = transport.queue(address, error_queue=None)
    sent, age = _oldest(queue, checked_at)
    return QueueState(queue.address, queue.count(), sent, age)


@dataclass(frozen=True)
class QueueGauges:
    """What a dashboard plots for one queue: its depth, its oldest message's age and how many messages wait
    in its error queue (None when that queue does not exist)."""

    queue: str
    depth: int
    oldest_age_seconds: float | None
    error_queue: str | None
    failed: int | None


def queue_gauges(queue: TableQueue, depth: int | None = None) -> QueueGauges:
    """``queue``'s gauges by plain ``SELECT``s: an exact count (unless the caller has just counted, and
    passes ``depth``), the oldest row by RowVersion, and a count of its error queue."""
    _, age = _oldest(queue, datetime.now(timezone.utc))
    failed = None
    error_name = None
    if queue.error_queue is not None:
        errors = queue.transport.queue(queue.error_queue, error_queue=None)
        error_name = str(errors.address)
        failed = errors.count() if errors.exists() else None
    return QueueGauges(str(queue.address), queue.count() if depth is None else depth, age, error_name, failed)


def queues_overview(
    transport: Transport, error_queue: str = "error", schema: str | None = None
) -> QueuesOverview:
    """Every queue table of ``schema`` (default: the transport's) with its state, and ``error_queue``'s
    failed-message groups, largest first."""
    checked_at = datetime.now(timezone.utc)
    states = [queue_state(transport, address, checked_at) for address in queue_tables(transport, schema)]
    errors = transport.queue(error_queue, error_queue=None)
    groups = None
    if errors.exists():
        groups = sorted(failed_groups(errors), key=lambda group: (-group.count, group.key))
    return QueuesOverview(states, str(errors.address), groups, checked_at)


def human_age(seconds: float | None) -> str:
    """An age for people: ``42s``, ``3m 05s``, ``5h 02m``, ``3d 04h``; ``—`` for none."""
    if seconds is None:
        return "—"
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours:02d}h"
