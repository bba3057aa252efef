"""What an operator sees of a connection's queues at a glance: each queue's depth and oldest message, and
the failed-message groups of an error queue.

Read-only through and through, and bounded: what a page load or a trigger poll costs does not grow with
the queues' length. A depth is the peek estimate (newest RowVersion - oldest + 1, two index edges), made
exact by a ``count`` only when asked and the estimate is below a threshold; the oldest message's age comes
from that one row's headers (never its body); failed-message groups from the newest ``failed_limit`` rows
of the error queue, with a flag when older rows were left unread. All plain ``SELECT``s, so a monitoring
role with SELECT alone can build it and receivers are never slowed by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from ..model.address import QueueAddress
from .browse import estimated_depth, oldest_time_sent, queue_tables
from .failed import FailedGroup, failed_sample

if TYPE_CHECKING:
    from .connection import Transport
    from .queue import TableQueue

__all__ = [
    "EXACT_BELOW",
    "FAILED_LIMIT",
    "QueueGauges",
    "QueueState",
    "QueuesOverview",
    "human_age",
    "queue_depth",
    "queue_gauges",
    "queues_overview",
]

# Below this estimate an exact count, when asked for, is cheap enough for a page load (a count reads every
# row: about 0.1 s per 1,000,000 rows on PostgreSQL, more on a busy server).
EXACT_BELOW = 100_000
# How many of the newest error-queue rows a page load groups.
FAILED_LIMIT = 1000


@dataclass(frozen=True)
class QueueState:
    """One queue table: how many messages wait (``exact``: counted, else the peek estimate, an upper
    bound) and since when the oldest of them was sent."""

    address: QueueAddress
    messages: int
    oldest_time_sent: datetime | None
    oldest_age_seconds: float | None
    exact: bool = False

    @property
    def name(self) -> str:
        return str(self.address)


@dataclass(frozen=True)
class QueuesOverview:
    """The queues of one schema and the failed-message groups of its error queue (None when that queue
    does not exist), as of ``checked_at``. The groups are those of the newest ``failed_read`` rows of the
    error queue; ``failed_more`` says it holds older rows that were not read."""

    queues: list[QueueState]
    error_queue: str
    failed: list[FailedGroup] | None
    checked_at: datetime
    failed_read: int = 0
    failed_limit: int = FAILED_LIMIT
    failed_more: bool = False


def _oldest(queue: TableQueue, checked_at: datetime) -> tuple[datetime | None, float | None]:
    sent = oldest_time_sent(queue)
    return sent, round((checked_at - sent).total_seconds(), 3) if sent else None


def queue_depth(queue: TableQueue, exact_below: int | None = 0) -> tuple[int, bool]:
    """(depth, exact) of ``queue``: the peek estimate, whose cost does not grow with the queue, replaced
    by an exact count when that estimate is below ``exact_below`` (0: never; None: always, no estimate)."""
    if exact_below is None:
        return queue.count(), True
    estimate = estimated_depth(queue)
    if estimate < exact_below:
        return queue.count(), True
    return estimate, False


def queue_state(queue: TableQueue, checked_at: datetime, exact_below: int | None = None) -> QueueState:
    """A queue's state; its depth as :func:`queue_depth` reads it (by default an exact count, as
    ``sqlqueue stats`` shows it; the Queues page passes its threshold)."""
    sent, age = _oldest(queue, checked_at)
    depth, exact = queue_depth(queue, exact_below)
    return QueueState(queue.address, depth, sent, age, exact)


@dataclass(frozen=True)
class QueueGauges:
    """What a dashboard plots for one queue: its depth, its oldest message's age and how many messages wait
    in its error queue (None when that queue does not exist); ``failed`` is the error queue's peek estimate,
    ``depth`` what the caller counted or else the estimate too."""

    queue: str
    depth: int
    oldest_age_seconds: float | None
    error_queue: str | None
    failed: int | None


def queue_gauges(queue: TableQueue, depth: int | None = None) -> QueueGauges:
    """``queue``'s gauges by plain ``SELECT``s of a cost independent of the queues' length: the peek
    estimate (unless the caller has just counted, and passes ``depth``), the oldest row's headers, and the
    peek estimate of its error queue."""
    _, age = _oldest(queue, datetime.now(timezone.utc))
    failed = None
    error_name = None
    if queue.error_queue is not None:
        errors = queue.transport.queue(queue.error_queue, error_queue=None)
        error_name = str(errors.address)
        failed = estimated_depth(errors) if errors.exists() else None
    return QueueGauges(
        str(queue.address), estimated_depth(queue) if depth is None else depth, age, error_name, failed
    )


def queues_overview(
    transport: Transport,
    error_queue: str = "error",
    schema: str | None = None,
    *,
    exact_below: int = 0,
    failed_limit: int = FAILED_LIMIT,
    error_exact_below: int = 0,
) -> QueuesOverview:
    """Every queue table of ``schema`` (default: the transport's) with its state, and the failed-message
    groups of the newest ``failed_limit`` rows of ``error_queue``, largest first. Depths are estimates,
    counted exactly where the estimate is below ``exact_below`` (0, the default: nowhere); the error
    queue's also where it is below ``error_exact_below``, since a failed message is what an operator
    counts."""
    checked_at = datetime.now(timezone.utc)
    errors = transport.queue(error_queue, error_queue=None)
    queues = [transport.queue(address, error_queue=None) for address in queue_tables(transport, schema)]
    states = [
        queue_state(
            queue,
            checked_at,
            max(exact_below, error_exact_below) if queue.address == errors.address else exact_below,
        )
        for queue in queues
    ]
    if not errors.exists():
        return QueuesOverview(states, str(errors.address), None, checked_at, 0, failed_limit, False)
    sample = failed_sample(errors, failed_limit)
    return QueuesOverview(
        states, str(errors.address), sample.groups, checked_at, sample.read, failed_limit, sample.more
    )


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
