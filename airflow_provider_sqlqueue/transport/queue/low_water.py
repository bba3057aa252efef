"""Where a queue's receives may start reading, so that a deep queue's drain does not walk its dead head.

On PostgreSQL a delete leaves the row's index entry behind until a vacuum removes it. A receive that reads
the RowVersion index from its start therefore walks every message the drain has already taken: at a
million queued rows the pick of 100 read 101 index pages when the drain began and 2,578 near its end
(docs/dba.md, "Deep queues on PostgreSQL"), and the drain's rate halved. Autovacuum does not help within a
drain: it looks at tables once a minute, and its vacuum of such a table takes longer still.

A receiver remembers the highest RowVersion its last full batch took and starts its next pick after it.
Rows can still appear behind that mark: another receiver's rolled-back batch, a sender whose transaction
took its RowVersion earlier and committed later, this receiver's own rolled-back batch. So the mark is
forgotten, and the next pick reads from the start again:

- when a pick returns fewer rows than it asked for (the queue after the mark looks drained);
- when this queue's receive rolls back (its messages are back, behind the mark);
- ``RESET_SECONDS`` after it was first set, whatever happens.

A message behind the mark therefore waits at most ``RESET_SECONDS`` longer than it would have; nothing is
skipped for longer and nothing is taken twice (the pick still locks and deletes what it returns).
"""

from __future__ import annotations

import threading
import time

__all__ = ["RESET_SECONDS", "LowWaterMark"]

RESET_SECONDS = 1.0


class LowWaterMark:
    """The RowVersion after which this queue's next receive picks, shared by the threads receiving."""

    def __init__(self, reset_seconds: float = RESET_SECONDS) -> None:
        self.reset_seconds = reset_seconds
        self._lock = threading.Lock()
        self._after: int | None = None
        self._since = 0.0

    def position(self) -> int | None:
        """Where the next pick starts (after this RowVersion), or None: from the first row."""
        with self._lock:
            if self._after is not None and time.monotonic() - self._since >= self.reset_seconds:
                self._after = None
            return self._after

    def taken(self, highest: int | None, asked: int, got: int) -> None:
        """A receive committed or is about to: move the mark past a full batch, else forget it."""
        with self._lock:
            if highest is None or got < asked:
                self._after = None
                return
            if self._after is None:
                self._since = time.monotonic()
            self._after = max(self._after or 0, highest)

    def reset(self) -> None:
        with self._lock:
            self._after = None
