"""The ``with queue.receive() as batch:`` block: the receive's transaction from its DELETE to its commit.

A class rather than a generator under ``contextlib.contextmanager``: every receive pays its entry and exit,
and on SQLite, where a one-message receive costs the raw driver about 70-90 µs of client CPU, the
generator's machinery was a measurable part of what the transport added (docs/history/performance-tuning.md).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ...model.errors import SqlQueueError
from ..lease import ConnectionLease, shared_cursor
from .batch import ReceivedBatch
from .received_rows import decode_rows
from .transaction_mode import TransactionMode

if TYPE_CHECKING:
    from .roles import ReceivingQueue

__all__ = ["ReceiveBlock"]

log = logging.getLogger(__package__)


class ReceiveBlock:
    """One receive: ``__enter__`` deletes and decodes the rows, ``__exit__`` commits or rolls back.

    - rows are deleted inside an open transaction and handed out in FIFO (RowVersion) order;
    - leaving the block commits; an exception rolls back, and the messages are back in the queue;
    - in transaction mode ``none`` the DELETE commits before the block runs.
    """

    __slots__ = ("_batch", "_connection", "_lease", "_max", "_mode", "_queue")

    def __init__(self, queue: ReceivingQueue, max_messages: int, mode: TransactionMode) -> None:
        self._queue = queue
        self._max = max_messages
        self._mode = mode
        self._lease: ConnectionLease | None = None
        self._connection: Any = None
        self._batch: ReceivedBatch | None = None

    def __enter__(self) -> ReceivedBatch:
        if self._lease is not None:
            raise RuntimeError("a receive block can be entered once")
        queue, max_messages, mode = self._queue, self._max, self._mode
        lease = self._lease = queue.transport.connection(queue.address)  # type: ignore[assignment]
        connection = self._connection = lease.__enter__()  # type: ignore[union-attr]
        try:
            cursor = shared_cursor(connection)
            try:
                begin = queue.dialect.begin_write()
                if begin:
                    cursor.execute(begin, ())
                raw = queue.pick(cursor, max_messages)
                if len(raw) > max_messages:
                    raise SqlQueueError(
                        f"a receive of at most {max_messages} from {queue.address} deleted {len(raw)} rows; "
                        "it was rolled back, so every message is still queued. The receive statement does "
                        "not limit its batch on this database: please report it"
                    )
                messages, expired, poison = decode_rows(raw)
                if expired:
                    log.info("dropped %d expired message(s) from %s", expired, queue.address)
                if poison:
                    queue.move_poison(cursor, poison)
                batch = ReceivedBatch(queue, connection, messages, expired, len(poison), mode)
                if not mode.handled_in_receive:
                    connection.commit()
            except BaseException:
                # A driver may delete rows and then fail to hand them over: never keep such a DELETE.
                queue.low_water.reset()
                queue.rollback_quietly(connection)
                raise
        except BaseException as error:
            self._leave(error)
            raise
        self._batch = batch
        return batch

    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> bool:
        queue, connection, batch = self._queue, self._connection, self._batch
        assert batch is not None
        if error is not None:
            if not self._mode.handled_in_receive:
                if batch.messages:
                    log.error(
                        "receive block on %s failed in transaction mode 'none'; %d message(s) were "
                        "already removed: %s",
                        queue.address,
                        len(batch.messages),
                        ", ".join(str(m.id) for m in batch.messages),
                    )
            else:
                queue.low_water.reset()  # its messages are back, behind the mark
                queue.rollback_quietly(connection)
            self._leave(error)
            return False
        try:
            connection.commit()
        except BaseException as failure:
            queue.low_water.reset()
            self._leave(failure)
            raise
        self._leave(None)
        return False

    def _leave(self, error: BaseException | None) -> None:
        """Return the connection; a driver error comes out translated (as ``transport.connection()``'s)."""
        lease = self._lease
        assert lease is not None
        if error is None:
            lease.__exit__(None, None, None)
        else:
            lease.__exit__(type(error), error, error.__traceback__)
