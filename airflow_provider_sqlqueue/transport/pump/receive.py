"""A pump's one receive: up to ``size`` messages in one transaction, handled one after another, committed
once.

Every strategy's receives come here, one message or a batch; the strategies only decide how many run and
how large. Per message the guarantees are the transaction mode's (see :mod:`.processing`); what a batch
changes is what a failure of the whole receive returns: a crash, a lost connection or a failed write rolls
every message of it back, to be received again (at least once, as before, just more of it).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from .ended import HandlerEndedTransaction
from .processing import CONSUMED, EMPTY, MESSAGE, RETRY, MessageProcessor
from .savepoints import BatchSavepoints
from .stats import Counters

if TYPE_CHECKING:
    from .roles import ReceivingPump

__all__ = ["MAX_BATCH_SIZE", "Receiver"]

MAX_BATCH_SIZE = 1000


class Receiver:
    """Receives and handles one receive for a pump; the pump's loops decide when and how large."""

    def __init__(self, pump: ReceivingPump, processor: MessageProcessor) -> None:
        self._pump = pump
        self._processor = processor
        self._writer = threading.Lock()

    def _one_writer(self) -> contextlib.AbstractContextManager[object]:
        """On an engine with one writer at a time (SQLite), a receive's transaction holds the write lock
        from its DELETE to its commit, so the pump's other receives could only wait for it; they wait here,
        on a lock handed over at once, instead of in the engine's busy handler, which sleeps in growing
        steps (up to 100 ms) while the lock may already be free."""
        pump = self._pump
        if pump.dialect.single_writer and pump.transaction_mode.handled_in_receive:
            return self._writer
        return contextlib.nullcontext()

    def receive(self, size: int, received: Callable[[bool], None]) -> str:
        """Receive up to ``size`` messages (fewer when the run's message budget has less room) and handle
        them; return the outcome. The caller reserved one message of the budget; the rest is reserved here.

        A receive of one message retries a failing handler by rolling back (the message is received
        again); a batch retries it in place, under a savepoint, so the rest of the batch still commits
        (:meth:`~.processing.MessageProcessor.handle`).

        Counts reach the pump's counters only once the receive committed, so one that rolls back is not
        counted as processed. A handler that ended the receive's transaction ends the receive there
        (:mod:`.ended` settled it): when that committed, the messages before it and the offender (moved to
        the error queue) count, and the rest were put back, uncounted.
        """
        pump = self._pump
        extra = pump.budget.reserve_up_to(size - 1) if size > 1 else 0
        handled = 0
        counters = Counters()
        after_commit: list[Callable[[], None]] = []
        try:
            pump.counters.add("receives")
            with self._one_writer():
                try:
                    with pump.queue.receive(1 + extra, transaction_mode=pump.transaction_mode) as batch:
                        received(bool(batch) or bool(batch.expired) or bool(batch.poisoned))
                        pump.receive_breaker.success()
                        if batch:
                            watch = self._processor.watch(batch)
                            savepoints = BatchSavepoints(batch, watch) if size > 1 else None
                            for message in batch:
                                self._processor.handle(
                                    message, batch, after_commit, counters, watch, savepoints
                                )
                                handled += 1
                except HandlerEndedTransaction as ended:
                    if not ended.committed:
                        raise
                    handled += 1  # the offender, moved to the error queue
                    pump.counters.merge(counters)
                    for action in after_commit:
                        action()
                    return MESSAGE
            pump.counters.merge(counters)
            if batch.expired:
                pump.counters.add("expired", batch.expired)
            if batch.poisoned:
                pump.counters.add("poisoned", batch.poisoned)
        except HandlerEndedTransaction:
            handled = 0  # rolled back by the handler: every message is queued again
            return RETRY
        except BaseException:
            handled = 0  # rolled back: nothing of the batch was used
            raise
        else:
            for action in after_commit:
                action()
            if batch:
                return MESSAGE
            if batch.expired or batch.poisoned:
                return CONSUMED
            pump.counters.add("empty_receives")
            return EMPTY
        finally:
            pump.budget.settle_many(extra, max(0, handled - 1))
