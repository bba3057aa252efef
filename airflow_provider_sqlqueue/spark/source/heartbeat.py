"""A run's heartbeat: while its driver lives, no other job takes the run's staged messages back."""

from __future__ import annotations

import logging
import threading

from ...transport import Transport
from ..tables import BridgeSql
from .transactions import execute

log = logging.getLogger("airflow_provider_sqlqueue.spark.drain")

__all__ = ["Heartbeat"]


class Heartbeat(threading.Thread):
    """Keeps the run's heartbeat fresh while the driver lives, so no other job takes its messages back."""

    def __init__(self, transport: Transport, sql: BridgeSql, run_id: str, interval: float) -> None:
        super().__init__(name="sqlqueue-heartbeat", daemon=True)
        self.transport, self.sql, self.run_id, self.interval = transport, sql, run_id, interval
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                execute(self.transport, self.sql.heartbeat(), (self.run_id,))
            except Exception as error:  # the commit holds the row; a missed beat is harmless
                log.warning("heartbeat of run %s failed: %s", self.run_id, error)
