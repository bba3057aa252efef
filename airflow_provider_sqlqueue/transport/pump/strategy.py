"""The pump's strategies by name, and the ramp-up controller that sizes the adaptive one.

What each strategy does is described in :mod:`airflow_provider_sqlqueue.transport.pump` and
docs/concurrency.md; the loops that carry them out are the pump's own.
"""

from __future__ import annotations

import threading
from enum import Enum

from ...model.errors import ConfigurationError

__all__ = ["RampUpController", "Strategy"]


class Strategy(str, Enum):
    """How a pump runs its receives."""

    MONITOR = "monitor"
    ADAPTIVE = "adaptive"
    FIXED = "fixed"


class RampUpController:
    """The 2.1 ramp-up controller: decides when to add or retire a polling worker.

    A receive that found a message increments the consecutive-successes counter and resets the failures
    counter; an empty receive does the opposite. When successes go over ``success_threshold`` and there are
    fewer workers than ``max_workers``, it answers ``"add"`` (and resets successes); when failures go over
    ``failure_threshold`` and there is more than one worker, ``"retire"`` (and resets failures). It keeps
    the worker count itself, so its decisions are deterministic for a given sequence.
    """

    ADD = "add"
    RETIRE = "retire"

    def __init__(
        self, max_workers: int, *, success_threshold: int = 5, failure_threshold: int = 5, workers: int = 1
    ) -> None:
        for name, value in (
            ("max_workers", max_workers),
            ("success_threshold", success_threshold),
            ("failure_threshold", failure_threshold),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"{name} must be a positive int, not {value!r}")
        self.max_workers = max_workers
        self.success_threshold = success_threshold
        self.failure_threshold = failure_threshold
        self.workers = workers
        self.consecutive_successes = 0
        self.consecutive_failures = 0
        self._lock = threading.Lock()

    def record(self, received: bool) -> str | None:
        """Count one receive; return ``"add"``, ``"retire"`` or None."""
        with self._lock:
            if received:
                self.consecutive_successes += 1
                self.consecutive_failures = 0
                if self.consecutive_successes > self.success_threshold and self.workers < self.max_workers:
                    self.consecutive_successes = 0
                    self.workers += 1
                    return self.ADD
            else:
                self.consecutive_failures += 1
                self.consecutive_successes = 0
                if self.consecutive_failures > self.failure_threshold and self.workers > 1:
                    self.consecutive_failures = 0
                    self.workers -= 1
                    return self.RETIRE
            return None
