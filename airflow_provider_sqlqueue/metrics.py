"""This provider's metrics, sent through the metrics backend the Airflow deployment configured (StatsD,
Datadog's DogStatsD or OpenTelemetry: ``[metrics] statsd_on`` / ``statsd_datadog_enabled`` / ``otel_on``,
with their host, port, prefix, allow and block lists), and nowhere when none is.

Each process builds that backend once, from Airflow's own factory, instead of using Airflow's module-level
``Stats``: the triggerer sets up a different copy of that singleton than the one the Task SDK exposes, so
gauges sent through ``airflow.sdk`` from a trigger would silently go nowhere.

Names (after Airflow's ``[metrics] statsd_prefix``, ``airflow`` by default) carry the connection id and the
queue, as plain StatsD has no tags; the same values go along as tags for backends that take them
(DogStatsD, InfluxDB-style StatsD, OpenTelemetry). A name part is the value with every character but
letters, digits, ``_`` and ``-`` replaced by ``_``: ``orders@[sales]`` becomes ``orders__sales_``.

======================================================  =======  =========================================
name                                                    type     value
======================================================  =======  =========================================
``sqlqueue.queue.<conn_id>.<queue>.depth``              gauge    messages in the queue
``sqlqueue.queue.<conn_id>.<queue>.oldest_age_seconds``  gauge    age of its oldest message (0 when empty)
``sqlqueue.queue.<conn_id>.<queue>.failed``             gauge    messages in its error queue
``sqlqueue.pump.<conn_id>.<queue>.processed``           counter  messages handled and committed
``sqlqueue.pump.<conn_id>.<queue>.failed``              counter  messages moved to the error queue
``sqlqueue.pump.<conn_id>.<queue>.retried``             counter  failed attempts rolled back for a retry
``sqlqueue.pump.<conn_id>.<queue>.rate``                gauge    messages per second since the pump began
======================================================  =======  =========================================
"""

from __future__ import annotations

import logging
import os
import re
import threading
from typing import Any

from .transport.overview import QueueGauges
from .transport.pump import PumpStats

__all__ = ["PumpReporter", "emit_pump_stats", "emit_queue_gauges", "metric_part"]

log = logging.getLogger(__name__)

_lock = threading.Lock()
_backend: Any = None
_backend_pid: int | None = None
_INVALID = re.compile(r"[^A-Za-z0-9_-]")
PUMP_COUNTERS = ("processed", "failed", "retried")


def metric_part(value: str) -> str:
    """A connection id or queue name as one part of a metric name."""
    return _INVALID.sub("_", value) or "_"


class Silent:
    """Where metrics go when Airflow's backend failed to start: nowhere (every call is accepted)."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def _stats_factory() -> Any:
    """Airflow's metrics backend factory: the Task SDK's from Airflow 3.2 on, ``airflow.stats``'s before."""
    try:
        from airflow.sdk.observability.metrics.stats_utils import get_stats_factory
    except ImportError:
        from airflow.stats import Stats

        return type(Stats).factory
    return get_stats_factory()


def backend() -> Any:
    """The deployment's metrics backend, built once per process from Airflow's configuration."""
    global _backend, _backend_pid
    with _lock:
        if _backend is None or _backend_pid != os.getpid():
            try:
                _backend = _stats_factory()()
            except Exception as error:  # a misconfigured backend must not fail a task or a trigger
                log.warning("sqlqueue metrics are off: Airflow's metrics backend failed to start: %s", error)
                _backend = Silent()
            _backend_pid = os.getpid()
        return _backend


def reset() -> None:
    """Forget the backend, so the next metric reads Airflow's configuration again."""
    global _backend
    with _lock:
        _backend = None


def _send(kind: str, name: str, value: float, tags: dict[str, str]) -> None:
    try:
        sender = getattr(backend(), kind)
        if kind == "gauge":
            sender(name, value, tags=tags)
        else:
            sender(name, count=int(value), tags=tags)
    except Exception as error:  # metrics are best effort: a full socket buffer must not fail a task
        log.debug("sqlqueue metric %s not sent: %s", name, error)


def emit_queue_gauges(conn_id: str, gauges: QueueGauges) -> None:
    """Send a queue's depth, oldest-message age and failed-message count as gauges."""
    base = f"sqlqueue.queue.{metric_part(conn_id)}.{metric_part(gauges.queue)}"
    tags = {"conn_id": conn_id, "queue": gauges.queue}
    _send("gauge", f"{base}.depth", gauges.depth, tags)
    _send("gauge", f"{base}.oldest_age_seconds", gauges.oldest_age_seconds or 0.0, tags)
    if gauges.failed is not None:
        _send("gauge", f"{base}.failed", gauges.failed, {**tags, "error_queue": gauges.error_queue or ""})


def emit_pump_stats(conn_id: str, queue: str, stats: PumpStats, since: PumpStats | None = None) -> None:
    """Send what a pump counted since ``since`` (its previous report) as counters, and its rate."""
    base = f"sqlqueue.pump.{metric_part(conn_id)}.{metric_part(queue)}"
    tags = {"conn_id": conn_id, "queue": queue}
    for counter in PUMP_COUNTERS:
        delta = getattr(stats, counter) - (getattr(since, counter) if since is not None else 0)
        if delta > 0:
            _send("incr", f"{base}.{counter}", delta, tags)
    _send("gauge", f"{base}.rate", round(stats.rate, 3), tags)


class PumpReporter(threading.Thread):
    """Sends a running pump's counters every ``interval`` seconds and once more at :meth:`finish`."""

    def __init__(self, conn_id: str, queue: str, read: Any, interval: float = 15.0) -> None:
        super().__init__(name=f"sqlqueue-metrics {queue}", daemon=True)
        self.conn_id = conn_id
        self.queue = queue
        self.read = read
        self.interval = interval
        self.sent: PumpStats | None = None
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.interval):
            self._report(self.read())

    def _report(self, stats: PumpStats) -> None:
        emit_pump_stats(self.conn_id, self.queue, stats, self.sent)
        self.sent = stats

    def finish(self, final: PumpStats) -> None:
        self._done.set()
        if self.is_alive():
            self.join(self.interval + 5)
        self._report(final)
