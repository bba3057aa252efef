"""What a pump counts while it runs, and the snapshot of those counts it reports."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Counters", "PumpStats"]


@dataclass(frozen=True)
class PumpStats:
    """A snapshot of a pump's counters."""

    processed: int = 0  # handler succeeded, receive committed
    failed: int = 0  # moved to the error queue
    retried: int = 0  # handler failures rolled back for another attempt
    forwarded: int = 0  # moved on to their ForwardDestination without the handler
    audited: int = 0
    expired: int = 0
    poisoned: int = 0
    receives: int = 0  # receive statements executed
    empty_receives: int = 0
    peeks: int = 0
    idle_rounds: int = 0  # peeks or empty receives followed by a wait (idle delay; adaptive: back-off)
    in_flight: int = 0
    workers: int = 0
    max_workers: int = 0
    abandoned: int = 0  # handlers still running when the stop timeout passed (rolled back)
    elapsed: float = 0.0

    @property
    def rate(self) -> float:
        """Messages handled per second since the start."""
        return (self.processed + self.failed) / self.elapsed if self.elapsed > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rate": round(self.rate, 3)}


class Counters:
    """Named counters that receive threads add to at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.values: dict[str, int] = {}

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self.values[name] = self.values.get(name, 0) + amount

    def merge(self, other: Counters) -> None:
        """Add ``other``'s counts (a batch's, once its transaction committed)."""
        with self._lock:
            for name, amount in other.values.items():
                self.values[name] = self.values.get(name, 0) + amount

    def get(self, name: str) -> int:
        return self.values.get(name, 0)
