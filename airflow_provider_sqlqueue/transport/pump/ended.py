"""What the pump does when a handler ended the receive's transaction behind its back.

The lent connection refuses ``commit()``, ``rollback()`` and ``close()``, but a handler can still end the
transaction another way: SQL text ``COMMIT`` or ``ROLLBACK``, the driver object reached through a cursor, a
driver object kept from an earlier message. After every handler call the pump reads the transaction
(:class:`~..transaction_guard.TransactionWatch`); when it ended, this module settles the receive so that
nothing is lost and nothing handled twice:

- whatever the handler began after the end (a write in the next transaction) is rolled back;
- how the receive's transaction ended is read: exactly on PostgreSQL (the status of its transaction id),
  elsewhere from the rows it deleted (gone: committed; back: rolled back);
- committed: the receive's DELETE of the whole batch is committed, so the batch's messages after the
  offender are put back at once (Id, headers and body as received, the time left to be received) and the
  offender goes to the error queue, both in one new transaction, before anything else happens. The
  messages before it committed with their work and count as processed;
- rolled back: every message of the receive is back in the queue as it was; the offender goes to the error
  queue when it is received next (its handler does not run again), the others are handled again (their
  work was rolled back with the receive).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from ...model.errors import TransactionEndedError
from .. import headers as h
from ..message import OutgoingMessage, ReceivedMessage
from ..transaction_guard import open_transaction

if TYPE_CHECKING:
    import uuid

    from ..queue import ReceivedBatch
    from ..transaction_guard import TransactionWatch
    from .roles import ProcessingPump

__all__ = ["EndedReceive", "HandlerEndedTransaction", "ReceiveRepair"]

log = logging.getLogger(__package__)

ENDED_REASON = "the handler ended the receive's transaction"
_ONE_SECOND = timedelta(seconds=1)


class HandlerEndedTransaction(Exception):
    """Raised out of a receive block once :class:`ReceiveRepair` settled a receive whose transaction a
    handler ended; ``committed`` says whether that receive's DELETE (and the work before) committed."""

    def __init__(self, committed: bool) -> None:
        super().__init__(ENDED_REASON)
        self.committed = committed


class EndedReceive:
    """The offenders whose receive rolled back: sent to the error queue when received next, without their
    handler (which would end the transaction again). Bounded: a message another process receives first
    is never seen here again."""

    def __init__(self, capacity: int = 10_000) -> None:
        self._capacity = capacity
        self._errors: OrderedDict[uuid.UUID, TransactionEndedError] = OrderedDict()

    def remember(self, message_id: uuid.UUID, error: TransactionEndedError) -> None:
        self._errors[message_id] = error
        while len(self._errors) > self._capacity:
            self._errors.popitem(last=False)

    def take(self, message_id: uuid.UUID) -> TransactionEndedError | None:
        return self._errors.pop(message_id, None) if self._errors else None


class ReceiveRepair:
    """Settles a receive whose transaction the handler of ``offender`` ended (see the module)."""

    def __init__(self, pump: ProcessingPump, ended: EndedReceive) -> None:
        self._pump = pump
        self._ended = ended

    def settle(
        self,
        batch: ReceivedBatch,
        watch: TransactionWatch,
        offender: ReceivedMessage,
        raised: BaseException | None,
        move_to_error_queue: Callable[[ReceivedMessage, ReceivedBatch], None],
    ) -> bool:
        """Settle the receive; True when its DELETE had committed (and the repair committed), False when
        it had rolled back (every message is queued again). ``raised``: the handler's error, if any."""
        pump = self._pump
        dialect = pump.dialect
        connection = batch.connection
        dialect.rollback(connection)  # what the handler began after the end: never committed
        committed = watch.committed()
        if committed is None:
            committed = not watch.rows_back()
            dialect.rollback(connection)  # the read's own transaction (SQL Server opens one for it)
        index = next(i for i, message in enumerate(batch) if message is offender)
        unhandled = list(batch)[index + 1 :]
        how = "committed it" if committed else "rolled it back"
        detail = f"{ENDED_REASON} (it {how}"
        if raised is not None:
            detail += f", then raised {type(raised).__name__}: {str(raised).strip()[:200]}"
        detail += "): commit, roll back or begin only through the pump, never by SQL text or the driver"
        error = TransactionEndedError(detail)
        error.__cause__ = raised
        if not committed:
            if raised is not None:
                return False  # the engine rolled back on the handler's error: an ordinary failure, retried
            self._ended.remember(offender.id, error)
            log.error(
                "%s: %s on message %s; its receive of %d message(s) rolled back, so all are queued again, "
                "and message %s goes to the error queue %s when received next, without its handler",
                pump.name, ENDED_REASON, offender.id, len(batch), offender.id, pump.error_queue,
            )  # fmt: skip
            return False
        open_transaction(self._pump.dialect, connection)
        if unhandled:
            batch.send_in_receive_transaction(pump.queue.address, [_put_back(m) for m in unhandled])
            log.error(
                "%s: %s on message %s, which committed its receive of %d message(s): the %d not yet "
                "handled were put back in %s",
                pump.name, ENDED_REASON, offender.id, len(batch), len(unhandled), pump.queue.address,
            )  # fmt: skip
        pump.failures.record(offender.id, error)
        move_to_error_queue(offender, batch)
        connection.commit()
        return True


def _put_back(message: ReceivedMessage) -> OutgoingMessage:
    """The message as it was received: same Id, header text and body, and the time it had left."""
    left = None
    if message.expires is not None:
        left = max(message.expires - datetime.now(timezone.utc), _ONE_SECOND)
    headers_text = message.headers_text
    if headers_text is None:
        headers_text = h.encode_headers(message.headers)
    return OutgoingMessage(message.body, headers_text=headers_text, id=message.id, time_to_be_received=left)
