"""What a handler may do besides reading its message: send (now or delayed) and reply, in the pump's
transaction mode."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ...model.address import QueueAddress
from ...model.errors import ConfigurationError
from .. import headers as h
from ..lent import LentConnection, ReceiveConnection, receive_connection
from ..message import OutgoingMessage, ReceivedMessage
from ..publishing import PublishResult, publish_message
from ..queue import ReceivedBatch, TableQueue
from ..subscriptions import topics_of

if TYPE_CHECKING:
    from ..transaction_guard import TransactionWatch
    from .roles import ContextPump
    from .savepoints import MessageSavepoint

__all__ = ["MessageContext"]


class MessageContext:
    """What a handler may do besides reading its message: send, send delayed, reply.

    Sends follow the pump's transaction mode: in ``sends_atomic_with_receive`` they commit or roll back
    with the receive (delayed sends too); in the other modes they commit on their own at once.

    With ``buffered`` (a batching pump, whose retries happen inside the batch's transaction), atomic sends
    are kept in memory until :meth:`flush`, which the pump calls only once the handler has returned: a failed
    attempt's sends are dropped with the attempt instead of committing with the rest of the batch.

    :attr:`connection` and :attr:`sqlalchemy_connection` lend the handler the receive's connection and
    transaction for its own statements (not in mode ``none``, whose receive committed before the handler
    ran). With ``savepoint`` (a batching pump) the handler's first statement on them is preceded by that
    savepoint, sent with it where the driver allows (``savepoints.py``), so the pump can undo a failed
    attempt's statements alone.
    """

    def __init__(
        self,
        pump: ContextPump,
        message: ReceivedMessage,
        batch: ReceivedBatch,
        attempt: int,
        *,
        buffered: bool = False,
        savepoint: MessageSavepoint | None = None,
        watch: TransactionWatch | None = None,
    ):
        self.message = message
        self.queue = pump.queue
        self.attempt = attempt
        self.transaction_mode = pump.transaction_mode
        self.endpoint = pump.endpoint
        self._pump = pump
        self._batch = batch
        self.after_commit: list[Callable[[], None]] = []
        self._buffered = buffered and pump.transaction_mode.sends_join_receive
        self._pending_sends: dict[QueueAddress, tuple[TableQueue, list[OutgoingMessage]]] = {}
        self._pending_delayed: list[Callable[[], None]] = []
        self._savepoint = savepoint
        self._lend_failed = False
        self._lent: LentConnection | None = None
        self._sqlalchemy: ReceiveConnection | None = None
        self._watch = watch
        self._ended = False

    @property
    def connection(self) -> LentConnection:
        """The receive's DB-API connection, in the receive's transaction: what the handler runs on it
        commits with the receive and the handler's sends, or rolls back with them (and the message is
        received again). Do not commit, roll back or close it: those are refused. Valid during this
        handler call only. ``connection.dbapi_connection`` stands for the driver's own connection object
        (guarded the same way)."""
        return self._lend()

    @property
    def sqlalchemy_connection(self) -> ReceiveConnection:
        """The same connection and transaction as :attr:`connection`, as a SQLAlchemy ``Connection``
        (for ``text()`` statements, Core tables, pandas or an ORM ``Session``, which joins it). Do not
        commit or roll back; ``begin_nested()`` gives a savepoint. Not for PostgreSQL or SQLite reached
        through ODBC, which SQLAlchemy has no dialect for."""
        connection = self._sqlalchemy
        if connection is None:
            connection = self._sqlalchemy = receive_connection(self.queue.transport, self._lend())
        return connection

    @property
    def lent_connection(self) -> bool:
        """Whether the handler was lent the receive's connection in this attempt."""
        return self._lent is not None

    @property
    def savepoint_marked(self) -> bool:
        """Whether this attempt's savepoint was marked (the handler ran a statement on the connection, or
        took something of it the pump cannot follow): only then is there a savepoint to roll back to."""
        return self._savepoint is not None and self._savepoint.marked

    @property
    def savepoint_failed(self) -> bool:
        """Whether lending the connection (naming its transaction) or marking this attempt's savepoint
        failed: the batch's transaction or connection is gone, which the pump must not count against the
        message, whose handler had not run a statement yet."""
        return self._lend_failed or (self._savepoint is not None and self._savepoint.failed)

    def _lend(self) -> LentConnection:
        lent = self._lent
        if lent is not None:
            return lent
        if self._ended:
            raise ConfigurationError(
                "the handler call this context was given to has ended; use its connection only inside "
                "that call"
            )
        if not self.transaction_mode.handled_in_receive:
            raise ConfigurationError(
                "transaction mode 'none' commits the receive before the handler runs, so there is no "
                "receive transaction to write in; use transaction_mode='sends_atomic_with_receive' (or "
                "'receive_only') for the handler's statements to commit or roll back with the message"
            )
        if self._watch is not None:
            try:
                self._watch.arm()  # names the transaction before the handler can end it
            except Exception:
                self._lend_failed = True  # a lost connection or a server restart, not the handler's doing
                raise
        self._pump.lends_connection = True  # from now on every handler call of the pump is checked
        lend_to_user = getattr(self._batch.connection, "lend_to_user", None)
        if lend_to_user is not None:  # the pool restores the session the handler may change
            lend_to_user()
        lent = self._lent = LentConnection(self._batch.connection, prelude=self._savepoint, watcher=self)
        return lent

    def statement(self) -> None:
        """A statement after the handler's first ran on the lent connection: the transaction's name read
        behind the first no longer tells where it stands (``LendWatcher``)."""
        if self._watch is not None:
            self._watch.unseen()

    def ran(self) -> None:
        """A statement on the lent connection returned: where the driver's state after it says all, it is
        read now (``LendWatcher``)."""
        if self._watch is not None:
            self._watch.ran()

    def reached(self) -> None:
        """The handler was given the driver's own object, which it may use out of the pump's sight, now or
        in a later call: from now on the pump reads the transaction itself after every handler call."""
        self._pump.driver_reached = True
        if self._watch is not None:
            self._watch.unseen()
            self._watch.following = False

    def end(self) -> None:
        """Withdraw the lent connection (the pump calls it when the handler's attempt ends)."""
        self._ended = True
        if self._lent is not None:
            self._lent.end()

    def __repr__(self) -> str:
        return f"<MessageContext {self.message.id} attempt={self.attempt} on {self.queue.address}>"

    def _outgoing(
        self,
        message: OutgoingMessage | bytes | str,
        headers: Mapping[str, str | None] | None,
        time_to_be_received: timedelta | None,
    ) -> OutgoingMessage:
        if isinstance(message, OutgoingMessage):
            return OutgoingMessage.of(message, headers, time_to_be_received)
        merged: dict[str, str | None] = dict(self._pump.outgoing_headers())
        conversation = self.message.headers.get(h.CONVERSATION_ID)
        if conversation:
            merged[h.CONVERSATION_ID] = conversation
            wanted = (headers or {}).get(h.CONVERSATION_ID, conversation)
            if wanted != conversation:  # as NServiceBus Core, which refuses to override it
                raise ConfigurationError(
                    f"cannot set {h.CONVERSATION_ID} to {wanted!r}: a send from a handler continues the "
                    f"incoming message's conversation ({conversation!r}); to start a new conversation, "
                    "send from outside the handler (transport.queue(...).send)"
                )
        merged[h.RELATED_TO] = self.message.message_id
        merged.update(headers or {})
        return OutgoingMessage(message, merged, time_to_be_received)

    def send(
        self,
        destination: str | QueueAddress | TableQueue,
        message: OutgoingMessage | bytes | str,
        headers: Mapping[str, str | None] | None = None,
        *,
        time_to_be_received: timedelta | None = None,
        delay: timedelta | float | None = None,
        deliver_at: datetime | None = None,
    ) -> uuid.UUID:
        """Send to ``destination``; with ``delay`` or ``deliver_at`` through the endpoint's delayed table."""
        outgoing = self._outgoing(message, headers, time_to_be_received)
        if delay is None and deliver_at is None:
            if self._buffered:
                target = self._batch._target(destination)
                self._pending_sends.setdefault(target.address, (target, []))[1].append(outgoing)
                return outgoing.id
            return self._batch.send(destination, outgoing)
        store = self._pump.delayed
        if store is None:
            raise ConfigurationError(
                "a delayed send needs a delayed table: run the pump through an Endpoint with delayed "
                "delivery, or give the pump delayed=DelayedStore(...)"
            )
        target = destination.address if isinstance(destination, TableQueue) else destination
        prepared = store.prepare(target, outgoing, delay=delay, deliver_at=deliver_at)
        if self._buffered:
            self._pending_delayed.append(lambda: store.store_on(self._batch.connection, prepared))
            self.after_commit.append(lambda: store.notify(prepared.due_in))
        elif self.transaction_mode.sends_join_receive:
            store.store_on(self._batch.connection, prepared)
            self.after_commit.append(lambda: store.notify(prepared.due_in))
        else:
            with store.transport.connection(store.address) as connection:
                store.store_on(connection, prepared)
                connection.commit()
            store.notify(prepared.due_in)
        return outgoing.id

    def flush(self) -> None:
        """Write the buffered sends into the receive's transaction: one statement per destination."""
        if not self._pending_sends and not self._pending_delayed:
            return
        for target, messages in self._pending_sends.values():
            self._batch.send_batch(target, messages)
        for store_delayed in self._pending_delayed:
            store_delayed()
        self._pending_sends.clear()
        self._pending_delayed.clear()

    def publish(
        self,
        topic: str | type,
        message: OutgoingMessage | bytes | str,
        headers: Mapping[str, str | None] | None = None,
        *,
        base_topics: Iterable[str] = (),
        time_to_be_received: timedelta | None = None,
    ) -> PublishResult:
        """Publish to every queue subscribed to ``topic`` or its ancestors, as a send in the pump's
        transaction mode: in ``sends_atomic_with_receive`` the copies commit or roll back with the receive
        (the lookup reads on the receive's connection); in the other modes they commit together, in one
        transaction of their own, at once."""
        topics = topics_of(topic, base_topics)
        outgoing = publish_message(self._outgoing(message, headers, time_to_be_received), None, None, topics)
        transport = self.queue.transport
        if not self.transaction_mode.sends_join_receive:
            self.transaction_mode.check_own_commit(transport.dialect, "a publish")
            return transport.publish(topics[0], outgoing, base_topics=topics[1:])
        queues = transport.subscriptions.subscriber_queues(topics, connection=self._batch.connection)
        targets = list({target.address: target for target in map(transport.queue, queues)}.values())
        for target in targets:
            self.send(target, outgoing)
        return PublishResult(outgoing.id, topics, tuple(str(transport.canonical(t.address)) for t in targets))

    def reply(
        self,
        message: OutgoingMessage | bytes | str,
        headers: Mapping[str, str | None] | None = None,
        **options: Any,
    ) -> uuid.UUID:
        """Send to the message's ``NServiceBus.ReplyToAddress`` (the sending instance's queue)."""
        reply_to = self.message.reply_to_address
        if not reply_to:
            raise ConfigurationError(f"message {self.message.id} has no NServiceBus.ReplyToAddress")
        merged: dict[str, str | None] = {
            h.MESSAGE_INTENT: "Reply",
            h.CORRELATION_ID: self.message.correlation_id or self.message.message_id,
        }
        merged.update(headers or {})
        return self.send(reply_to, message, merged, **options)
