"""How many receives a pump may start and when: the run's message budget, the monitor strategy's rounds and
the adaptive workers' back-off after empty receives.

The budget and the rounds are shared by the pump's threads, so each guards its counts with a condition; a
back-off belongs to one worker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ...model.errors import ConfigurationError

__all__ = ["BoundedBackOff", "MessageBudget", "MonitorRound"]


class MessageBudget:
    """At most ``limit`` messages handled: a receive reserves one, gives it back if nothing was used."""

    def __init__(self, limit: int | None) -> None:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ConfigurationError(f"max_messages must be a positive int or None, not {limit!r}")
        self.limit = limit
        self.used = 0
        self.reserved = 0
        self._changed = threading.Condition()

    def reserve(self) -> bool:
        with self._changed:
            if self.limit is not None and self.used + self.reserved >= self.limit:
                return False
            self.reserved += 1
            return True

    def reserve_up_to(self, count: int) -> int:
        """Reserve as many of ``count`` more messages as the limit leaves (a batch's beyond its first)."""
        with self._changed:
            granted = (
                count if self.limit is None else max(0, min(count, self.limit - self.used - self.reserved))
            )
            self.reserved += granted
            return granted

    def settle_many(self, reserved: int, used: int) -> None:
        """Give back what :meth:`reserve_up_to` reserved, counting ``used`` of it as handled."""
        if reserved <= 0:
            return
        with self._changed:
            self.reserved -= reserved
            self.used += used
            self._changed.notify_all()

    def settle(self, used: bool) -> None:
        with self._changed:
            self.reserved -= 1
            if used:
                self.used += 1
            self._changed.notify_all()

    @property
    def exhausted(self) -> bool:
        return self.limit is not None and self.used >= self.limit

    def wait(self, timeout: float) -> None:
        with self._changed:
            self._changed.wait(timeout)


class MonitorRound:
    """One monitor round: how many receives the peek allows, and a latch that counts started receives down
    as each executes its receive statement.

    A worker whose receive found a message takes the round's next receive itself (:meth:`take`) instead of
    handing its slot back to the monitor: one thread hand-off per round rather than one per message.
    """

    def __init__(self, allowed: int = 0, batch_size: int = 1) -> None:
        self.allowed = allowed
        self.batch_size = batch_size
        self.pending = 0
        self.cancelled = False
        self._done = threading.Condition()

    def spawned(self) -> None:
        with self._done:
            self.pending += 1

    def take(self, budget: MessageBudget) -> bool:
        """Start one more receive of this round if the peek allowed it and the budget has room."""
        with self._done:
            if self.cancelled or self.allowed <= 0 or not budget.reserve():
                return False
            self.allowed -= 1
            self.pending += 1
            return True

    def received(self, got_row: bool) -> None:
        with self._done:
            self.pending -= 1
            if not got_row:
                self.cancelled = True  # the queue ran dry: start no more tasks this round
            self._done.notify_all()

    def wait(self, halted: Callable[[], bool]) -> None:
        """Until every receive this round started has run, or the pump halts: a round handed to the work
        queue after stop() queued the workers' exit signals is never run, and waiting for it would hold
        the monitor thread (and stop()'s join) until the stop timeout."""
        with self._done:
            while self.pending > 0 and not halted():
                self._done.wait(0.1)


class BoundedBackOff:
    """One adaptive worker's wait after an empty receive: 50 ms, doubling up to ``maximum``; a receive that
    found a message starts it over.

    The reference's ``BoundedExponentialBackOff`` (2.1/2.2) starts at 50 ms and doubles up to 1 s; the cap
    here is the pump's idle delay, whose default is that same 1 s. ``wait`` does the sleeping (the pump
    passes its stop event's ``wait``, so a stop cuts a back-off short).
    """

    INITIAL = 0.05

    def __init__(self, maximum: float, wait: Callable[[float], object]) -> None:
        if not maximum > 0:
            raise ConfigurationError(f"a back-off needs a positive maximum, not {maximum!r}")
        self.maximum = float(maximum)
        self.current = min(self.INITIAL, self.maximum)
        self._wait = wait

    def after(self, received: bool) -> float | None:
        """Wait after an empty receive and return how long; after one that found a message, start over."""
        if received:
            self.current = min(self.INITIAL, self.maximum)
            return None
        delay = self.current
        self._wait(delay)
        self.current = min(self.maximum, self.current * 2)
        return delay
