"""Each queue's depth over time for the Queues page's sparklines and charts: from the queue database's depth
history where it has one, else from what the page's own reads saw.

**The stored history** (:mod:`airflow_provider_sqlqueue.transport.depth_samples`): the triggers' shared polls
and the pumps' monitoring peeks write at most one sample a queue a minute into ``sqlqueue_depth_samples``
beside the queues (made by ``sqlqueue create --depth-history``), kept ``[sqlqueue]
depth_history_retention_hours``. The page reads the last :data:`STORED_WINDOW` of it with one SELECT per
schema (:func:`stored_series`); it never writes to the queue database, so a monitoring role that may only
read runs it. This history covers the times nobody looked, but only the queues something polls.

**The page's own samples**, where the table is absent or this role may not read it: the API server's memory,
bounded: at most :data:`SAMPLES` samples a queue (the oldest dropped first), of at most :data:`QUEUES` queues
a connection and :data:`CONNECTIONS` connections, one sample a queue per read of the page or of
``/api/queues`` (its auto-refresh reads it every :data:`REFRESH_SECONDS` while it is open), reads less than
:data:`MIN_GAP_SECONDS` apart kept as one. That history starts when the API server does and covers the
times someone looked, which the page says. The page records them in either case, so it has them should the
table go. The triggers' and pumps' gauges also go to the metrics backend
(:mod:`airflow_provider_sqlqueue.metrics`) where one is configured.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..get_provider_info import setting_default
from ..model.errors import SqlQueueError
from ..transport.depth_samples import (
    DepthSample,
    DepthSampleTable,
    depth_samples_address,
    history_points,
    minute_of,
)
from ..transport.roles import DepthHistoryTransport

__all__ = [
    "MIN_GAP_SECONDS",
    "REFRESH_SECONDS",
    "SAMPLES",
    "STORED_WINDOW",
    "DepthHistory",
    "sparkline",
    "stored_series",
]

log = logging.getLogger(__name__)

SAMPLES = 180  # per queue: an hour at the page's refresh of 20 s
QUEUES = 500  # per connection
CONNECTIONS = 50
MIN_GAP_SECONDS = 1.0
# the page's auto-refresh, which a user can switch off
REFRESH_SECONDS = int(setting_default("page_refresh_seconds"))
# how much of the stored history the page draws: at one sample a minute, as many points as SAMPLES
STORED_WINDOW = timedelta(minutes=SAMPLES)


@dataclass(frozen=True)
class Sample:
    at: datetime
    messages: int
    exact: bool


class DepthHistory:
    """The samples of every connection's queues, safe to share between the API server's threads."""

    def __init__(self, samples: int = SAMPLES, queues: int = QUEUES, connections: int = CONNECTIONS) -> None:
        self._samples, self._queues, self._connections = samples, queues, connections
        self._lock = threading.Lock()
        self._by_connection: OrderedDict[str, OrderedDict[str, deque[Sample]]] = OrderedDict()

    def record(self, conn_id: str, at: datetime, depths: dict[str, tuple[int, bool]]) -> None:
        """One read of ``conn_id``'s queues at ``at``: {queue: (messages, exact)}."""
        with self._lock:
            queues = self._by_connection.setdefault(conn_id, OrderedDict())
            self._by_connection.move_to_end(conn_id)
            while len(self._by_connection) > self._connections:
                self._by_connection.popitem(last=False)
            for name, (messages, exact) in depths.items():
                samples = queues.setdefault(name, deque(maxlen=self._samples))
                queues.move_to_end(name)
                if samples and (at - samples[-1].at).total_seconds() < MIN_GAP_SECONDS:
                    samples.pop()
                samples.append(Sample(at, messages, exact))
            while len(queues) > self._queues:
                queues.popitem(last=False)

    def series(self, conn_id: str) -> dict[str, list[dict[str, Any]]]:
        """{queue: [{at, messages, exact}, ...]} oldest first, as JSON."""
        with self._lock:
            queues = self._by_connection.get(conn_id, OrderedDict())
            return {
                name: [
                    {"at": s.at.isoformat().replace("+00:00", "Z"), "messages": s.messages, "exact": s.exact}
                    for s in samples
                ]
                for name, samples in queues.items()
            }


def stored_series(
    transport: DepthHistoryTransport,
    queues: dict[str, Any],
    now: datetime,
    error_queue: str | None = None,
) -> dict[str, list[dict[str, Any]]] | None:
    """The stored samples of the last :data:`STORED_WINDOW` of ``queues`` ({name the page shows: resolved
    address}), as :meth:`DepthHistory.series` gives them, read with one SELECT per history table; None when
    no table could be read (absent, or this role may not read it): the page then shows its own samples.

    The error queue (``error_queue``, one of ``queues``) is seldom polled itself, but every trigger's sample
    carries its estimate as Failed: where it has no samples of its own, its series is the highest Failed of
    each minute in its table, an estimate (the queues sampled there share the connection's error queue)."""
    since = minute_of((now - STORED_WINDOW).timestamp())
    tables: dict[Any, list[tuple[str, Any]]] = {}
    for name, address in queues.items():
        tables.setdefault(depth_samples_address(transport, address), []).append((name, address))
    series: dict[str, list[dict[str, Any]]] = {}
    read_any = False
    for table_address, named in tables.items():
        try:
            samples = DepthSampleTable(transport, table_address).read(since)
        except SqlQueueError as error:
            log.debug("Queues page: no stored depth history in %s: %s", table_address, error)
            continue
        read_any = True
        for name, address in named:
            own = samples.get(address.table, [])
            if name == error_queue and not own:
                own = failed_counts(samples)
            series[name] = history_points(own)
    return series if read_any else None


def failed_counts(samples: dict[str, list[DepthSample]]) -> list[DepthSample]:
    """The error queue's estimate over time as the samples of other queues carry it (Failed): the highest
    of each minute, oldest first, as samples of their own (not exact)."""
    by_minute: dict[int, int] = {}
    for queue_samples in samples.values():
        for sample in queue_samples:
            if sample.failed is not None:
                by_minute[sample.minute] = max(by_minute.get(sample.minute, 0), sample.failed)
    return [DepthSample("", minute, failed, False, None) for minute, failed in sorted(by_minute.items())]


def sparkline(points: list[dict[str, Any]], width: int = 120, height: int = 28) -> dict[str, Any]:
    """SVG polyline points of a series (time across, messages up, the axis from 0 to its highest), with its
    first, last and highest values; an empty ``points`` text for fewer than two samples."""
    if len(points) < 2:
        return {"points": "", "high": points[0]["messages"] if points else 0, "samples": len(points)}
    times = [datetime.fromisoformat(p["at"].replace("Z", "+00:00")).timestamp() for p in points]
    values = [p["messages"] for p in points]
    start, span = times[0], max(times[-1] - times[0], 1e-6)
    high = max(max(values), 1)
    pad = 2
    xy = [
        (pad + (t - start) / span * (width - 2 * pad), pad + (1 - v / high) * (height - 2 * pad))
        for t, v in zip(times, values, strict=True)
    ]
    return {
        "points": " ".join(f"{x:.1f},{y:.1f}" for x, y in xy),
        "high": max(values),
        "first": values[0],
        "last": values[-1],
        "samples": len(points),
        "seconds": times[-1] - times[0],
    }
