"""The step between receiving a message and committing its receive: forward it, run the handler with its
retries, move it to the error queue once they are spent, audit it.

Everything here runs inside the receive's transaction; raising :class:`Rollback` rolls that transaction
back so the message is received again. After every handler call the transaction is read from the driver
(:class:`~..transaction_guard.TransactionWatch`): one the handler left aborted or nested counts as its
failure, one it ended is settled by :mod:`.ended`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from ...dialects.transaction_state import TransactionState
from ...model.errors import InvalidQueueName, TransactionEndedError
from .. import headers as h
from ..message import OutgoingMessage, ReceivedMessage
from ..queue import ReceivedBatch
from ..recoverability import FailureInfo, failure_headers_text
from ..transaction_guard import TransactionWatch
from .context import MessageContext
from .ended import EndedReceive, HandlerEndedTransaction, ReceiveRepair
from .handler import takes_context
from .savepoints import BatchSavepoints
from .stats import Counters

if TYPE_CHECKING:
    from .roles import ProcessingPump

__all__ = ["MessageProcessor", "Rollback"]

# The log lines keep the name they had before the split: airflow_provider_sqlqueue.transport.pump.
log = logging.getLogger(__package__)

# Outcomes of one receive.
MESSAGE = "message"  # a message was handled to the end: processed, moved to the error queue or forwarded
CONSUMED = "consumed"  # only an expired or unreadable row was taken
RETRY = "retry"  # the handler failed; the receive rolled back
EMPTY = "empty"
ERROR = "error"  # the database failed
SKIPPED = "skipped"  # the pump was stopping; nothing was received


class Rollback(Exception):
    """Raised inside a receive block to roll it back."""


class MessageProcessor:
    """Handles one received message for a pump, in that message's receive transaction."""

    def __init__(self, pump: ProcessingPump) -> None:
        self._pump = pump
        self._pass_context = takes_context(pump.handler)
        self._ended = EndedReceive()
        self._repair = ReceiveRepair(pump, self._ended)

    def watch(self, batch: ReceivedBatch) -> TransactionWatch:
        """The watch over ``batch``'s receive transaction, armed at once when a handler of this pump was
        ever lent the connection (one may have kept its driver object), else by the first lend."""
        pump = self._pump
        watch = TransactionWatch(pump.dialect, batch.connection, _RowsCheck(pump, batch))
        watch.following = not pump.driver_reached
        if pump.lends_connection and pump.transaction_mode.handled_in_receive:
            watch.arm()
        return watch

    def _after_handler(
        self,
        watch: TransactionWatch,
        message: ReceivedMessage,
        batch: ReceivedBatch,
        raised: Exception | None,
        drop_forward: bool,
        counters: Counters,
    ) -> tuple[TransactionState, Exception | None]:
        """Read the receive's transaction after a handler call (``raised``: its error): settle the receive
        when the handler ended it (raising :class:`HandlerEndedTransaction`); otherwise its state and the
        attempt's failure, which is a :class:`TransactionEndedError` for a transaction left aborted or nested
        by a handler that returned."""
        state = watch.state()
        if state is TransactionState.ENDED:

            def move(offender: ReceivedMessage, batch: ReceivedBatch) -> None:
                info, copy = self._pump.failures.get(offender.id), _copy_text(offender, drop_forward)
                self._move_to_error_queue(offender, batch, info, copy, counters)

            committed = self._repair.settle(batch, watch, message, raised, move)
            if not committed and raised is not None:
                self._pump.failures.record(message.id, raised)  # the engine's rollback on the error
                raise Rollback from raised
            raise HandlerEndedTransaction(committed) from raised
        if raised is None and state is TransactionState.FAILED:
            raised = TransactionEndedError(
                "the handler left the receive's transaction aborted (a statement failed and the handler "
                "carried on) and returned: nothing it did can commit, so it counts as a failure"
            )
        elif raised is None and state is TransactionState.NESTED:
            raised = TransactionEndedError(
                "the handler began a transaction inside the receive's (BEGIN TRANSACTION), which the pump's "
                "commit would not end: it counts as a failure and everything is rolled back"
            )
        return state, raised

    def handle(
        self,
        message: ReceivedMessage,
        batch: ReceivedBatch,
        after_commit: list[Callable[[], None]],
        counters: Counters,
        watch: TransactionWatch,
        savepoints: BatchSavepoints | None = None,
    ) -> None:
        """Forward, handle, move to the error queue or audit ``message`` inside its receive's transaction;
        what must wait for the commit (delayed-send notifications) goes to ``after_commit``, and
        ``counters`` are added to the pump's after the commit.

        A failing handler is retried one of two ways. Without ``savepoints`` (a receive of one message) the
        receive rolls back (:class:`Rollback`) and the message is received again, as the reference's
        receive strategies do. With them (a batch) it is retried in place: a failed attempt's sends were
        buffered and are dropped with it, and so are its own statements, run under a savepoint marked with
        the handler's first statement on the lent connection (:mod:`.savepoints`); once its retries are
        spent the message goes to the error queue in the same transaction, so the rest of the batch still
        commits. In a batch, raising (a database error while writing the sends, a savepoint the engine
        already rolled back with the whole transaction, the savepoint that a lost connection could not mark,
        or :class:`Rollback` when the stop gave up on this handler) rolls the whole batch back; the
        savepoint's failure does not count against the message, whose handler had not run a statement yet;
        a handler that nested a transaction, or aborted it through a driver object kept from before (no
        savepoint of this attempt), rolls the whole batch back, counted against it.

        Either way, in transaction mode ``none`` the receive has already committed, so the message goes to
        the error queue after its first failure; a handler that returns with the transaction aborted or
        nested fails like one that raised; one that ended it raises :class:`HandlerEndedTransaction` once
        :mod:`.ended` settled the receive.
        """
        pump = self._pump
        prepared = self._prepare(message, batch, counters)
        if prepared is None:
            return
        drop_forward, attempt = prepared
        started = datetime.now(timezone.utc) if pump.audit_queue is not None else None
        context: MessageContext | None = None
        savepoint = None
        while True:
            if self._pass_context:
                savepoint = savepoints.attempt() if savepoints is not None else None
                context = MessageContext(
                    pump,
                    message,
                    batch,
                    attempt,
                    buffered=savepoints is not None,
                    savepoint=savepoint,
                    watch=watch,
                )
            failure: Exception | None = None
            try:
                self._call_handler(message, context)
            except Exception as error:
                if savepoints is not None and context is not None and context.savepoint_failed:
                    raise  # the batch's transaction failed, not this message: the whole batch comes back
                failure = error
            state, failure = self._after_handler(watch, message, batch, failure, drop_forward, counters)
            if failure is None:
                break
            error = failure
            count = pump.failures.record(message.id, error)
            if savepoints is None:
                if pump.transaction_mode.handled_in_receive:
                    log.warning(
                        "%s: handler failed on message %s (attempt %d of %d): %s: %s",
                        pump.name, message.id, attempt, pump.immediate_retries + 1,
                        type(error).__name__, error,
                    )  # fmt: skip
                    raise Rollback from error
                # The receive already committed and no transaction can put the message back: as the
                # reference's ProcessWithNoTransaction, which calls its error handling once (attempt 1).
                log.warning(
                    "%s: handler failed on message %s in transaction mode none, which cannot retry: %s: %s",
                    pump.name, message.id, type(error).__name__, error,
                )  # fmt: skip
                self._move_to_error_queue(
                    message, batch, pump.failures.get(message.id), _copy_text(message, drop_forward), counters
                )
                return
            marked = context is not None and context.savepoint_marked
            if state is TransactionState.NESTED or (state is TransactionState.FAILED and not marked):
                # no savepoint of this attempt can undo it (or, nested, undo it alone): the whole
                # batch rolls back and comes back; the count sends the message on to the error queue
                raise Rollback from error
            if marked:
                savepoints.rollback(savepoint)
            if not pump.transaction_mode.handled_in_receive or count > pump.immediate_retries:
                info, copy = pump.failures.get(message.id), _copy_text(message, drop_forward)
                self._move_to_error_queue(message, batch, info, copy, counters)
                return
            log.warning(
                "%s: handler failed on message %s (attempt %d of %d), retrying it in its batch: %s: %s",
                pump.name, message.id, attempt, pump.immediate_retries + 1, type(error).__name__, error,
            )  # fmt: skip
            counters.add("retried")
            attempt += 1
            if pump.abandoned:
                raise Rollback
        if pump.abandoned:
            raise Rollback  # stop() gave up waiting for this handler: its receive comes back
        if context is not None:
            try:
                context.flush()
            except Exception as error:
                pump.failures.record(message.id, error)  # a message whose sends always fail gets moved
                raise
            if savepoints is not None:
                savepoints.finished(savepoint)  # released with the next message's mark, or by the commit
            after_commit.extend(context.after_commit)
        if started is not None:
            self._audit(message, batch, started, _copy_text(message, drop_forward), counters)
        if attempt > 1:
            pump.failures.clear(message.id)
        counters.add("processed")

    def _call_handler(self, message: ReceivedMessage, context: MessageContext | None) -> None:
        """Run the handler (with its context where it takes one); its lent connection ends with the call."""
        try:
            if self._pass_context and context is not None:
                self._pump.handler(message, context)
            else:
                self._pump.handler(message)
        finally:
            if context is not None:
                context.end()

    def _prepare(
        self, message: ReceivedMessage, batch: ReceivedBatch, counters: Counters
    ) -> tuple[bool, int] | None:
        """What comes before the handler: forward the message, or move it to the error queue once its
        earlier receives (rolled back) spent its retries; None when that settled it. Otherwise whether
        its error and audit copies drop ``ForwardDestination``, and the attempt about to run."""
        destination = message.headers.get(h.FORWARD_DESTINATION)
        if destination and self._forward(message, batch, destination, counters):
            return None
        # Delayed delivery moved it here with its header text unchanged; a copy keeping the header would be
        # sent back here by a .NET receiver of the error or audit queue.
        drop_forward = bool(destination) and self._names_this_queue(destination)
        ended = self._ended.take(message.id)
        if ended is not None:  # its handler ended a receive that rolled back: not again
            self._pump.failures.record(message.id, ended)
        info = self._pump.failures.get(message.id)
        if ended is not None:
            self._move_to_error_queue(message, batch, info, _copy_text(message, drop_forward), counters)
            return None
        if info is not None and info.count > self._pump.immediate_retries:
            self._move_to_error_queue(message, batch, info, _copy_text(message, drop_forward), counters)
            return None
        return drop_forward, 1 + (info.count if info is not None else 0)

    def _names_this_queue(self, destination: str) -> bool:
        try:
            return self._pump.transport.resolve(destination) == self._pump.queue.address
        except InvalidQueueName:
            return False

    def _forward(
        self, message: ReceivedMessage, batch: ReceivedBatch, destination: str, counters: Counters
    ) -> bool:
        """A message moved here by a .NET endpoint's delayed delivery: send it on, without the handler."""
        pump = self._pump
        try:
            address = pump.transport.resolve(destination)
        except InvalidQueueName:
            return False
        if address == pump.queue.address:
            return False
        info = pump.failures.get(message.id)
        if info is not None:
            failed_queue = str(pump.transport.canonical(address))
            self._move_to_error_queue(
                message,
                batch,
                info,
                _stored_text(message),
                counters,
                failed_queue=failed_queue,
                forwarding=True,
            )
            return True
        try:
            headers_text = h.edit_headers_text(_stored_text(message), removed=[h.FORWARD_DESTINATION])
            forwarded = OutgoingMessage(message.body, headers_text=headers_text)
            batch.send_in_receive_transaction(address, [forwarded])
        except Exception as error:
            log.error("%s: forwarding message %s to %s failed: %s", pump.name, message.id, address, error)
            pump.failures.record(message.id, error)
            raise Rollback from error
        counters.add("forwarded")
        return True

    def _move_to_error_queue(
        self,
        message: ReceivedMessage,
        batch: ReceivedBatch,
        info: FailureInfo | None,
        stored: str,
        counters: Counters,
        failed_queue: str | None = None,
        forwarding: bool = False,
    ) -> None:
        pump = self._pump
        assert info is not None
        headers_text = failure_headers_text(
            stored,
            info,
            failed_queue or str(pump.transport.canonical(pump.queue.address)),
            endpoint=getattr(pump.endpoint, "name", None) or str(pump.queue.address),
            machine=pump.machine,
            forwarding=forwarding,
        )
        log.error(
            "%s: moving message %s to the error queue %s after %d failed attempt(s): %s: %s",
            pump.name, message.id, pump.error_queue, info.count, type(info.error).__name__, info.error,
        )  # fmt: skip
        batch.send_in_receive_transaction(
            pump.error_queue, [OutgoingMessage(message.body, headers_text=headers_text)]
        )
        pump.failures.clear(message.id)
        counters.add("failed")

    def _audit(
        self,
        message: ReceivedMessage,
        batch: ReceivedBatch,
        started: datetime,
        stored: str,
        counters: Counters,
    ) -> None:
        """Send the audit copy: the stored header text with the processing headers set, as a new row."""
        pump = self._pump
        audit_headers = {
            h.PROCESSING_STARTED: h.format_timestamp(started),
            h.PROCESSING_ENDED: h.format_timestamp(datetime.now(timezone.utc)),
            h.PROCESSING_ENDPOINT: getattr(pump.endpoint, "name", None) or str(pump.queue.address),
            h.PROCESSING_MACHINE: pump.machine,
        }
        headers_text = h.edit_headers_text(stored, audit_headers)
        batch.send_in_receive_transaction(
            pump.audit_queue, [OutgoingMessage(message.body, headers_text=headers_text)]
        )
        counters.add("audited")


class _RowsCheck:
    """The statement that counts ``batch``'s deleted rows back in the queue table, and its parameters:
    built at the first check and kept for the batch's others (one per handler call)."""

    def __init__(self, pump: ProcessingPump, batch: ReceivedBatch) -> None:
        self._pump = pump
        self._batch = batch
        self._built: tuple[str, tuple[object, ...]] | None = None

    def __call__(self) -> tuple[str, tuple[object, ...]]:
        built = self._built
        if built is None:
            versions = tuple(message.row_version for message in self._batch)
            statement = self._pump.dialect.queued_row_versions(self._pump.queue.address, len(versions))
            built = self._built = (statement, versions)
        return built


def _copy_text(message: ReceivedMessage, drop_forward: bool) -> str:
    """The header text an error or audit copy starts from (built only when a copy is made)."""
    stored = _stored_text(message)
    return h.edit_headers_text(stored, removed=[h.FORWARD_DESTINATION]) if drop_forward else stored


def _stored_text(message: ReceivedMessage) -> str:
    """The message's Headers column as stored; encoded from its map for a message built without it."""
    if message.headers_text is not None:
        return message.headers_text
    return h.encode_headers(message.headers)
