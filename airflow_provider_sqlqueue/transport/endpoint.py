"""Endpoints: a primary input queue shared by all instances, plus one queue per instance for replies.

An endpoint named ``Sales`` has

- the primary queue ``Sales``, shared by every instance (competing consumers);
- the instance-specific queue ``Sales.<machine>`` (or ``Sales.<suffix>``), on by default, so that replies to
  a message sent from one instance reach that instance (its address is the ``NServiceBus.ReplyToAddress``
  of everything the instance sends); its pump has its own concurrency, 1 by default. Satellite receivers
  (further input queues of the endpoint) never get one;
- the names of the shared error and audit queues;
- the delayed table ``Sales.Delayed`` and its mover (one per endpoint across all instances);
- its subscriptions (``subscribe_to``): on start it subscribes its primary queue, under its name, to each
  topic in the transport's subscription table, so that a publish of the topic reaches it;
- its requests waiting for replies (:meth:`Endpoint.request`, see requests.py): the instance queue's pump
  hands a reply to the request it answers before the handler sees anything.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..model.address import QueueAddress
from ..model.errors import ConfigurationError
from . import headers as h
from .delayed import DEFAULT_DELAYED_SUFFIX, DelayedMover, DelayedStore
from .message import OutgoingMessage, ReceivedMessage
from .publishing import PublishResult
from .pump import Handler, MessagePump, PumpSettings, check_pool_size
from .requests import PendingRequests, RequestTimeout, reply_dispatcher, timeout_seconds

if TYPE_CHECKING:
    from .connection import Transport
    from .queue import TableQueue
    from .subscriptions import Subscription

__all__ = ["Endpoint", "instance_queue_name"]

log = logging.getLogger(__name__)


def instance_queue_name(endpoint: str | QueueAddress, suffix: str | None = None) -> QueueAddress:
    """``<endpoint>.<suffix>``, the suffix defaulting to this machine's host name, in the same schema."""
    primary = QueueAddress.parse(endpoint)
    return primary.with_table(f"{primary.table}.{suffix or socket.gethostname()}")


class Endpoint:
    """An endpoint instance on a transport: its queues, how it sends, and the pumps it runs.

    :param name: the endpoint's name = its primary queue address (``Sales`` or ``Sales@[sales]``).
    :param instance_specific_queue: create and receive from ``<name>.<suffix>`` (default True).
    :param instance_suffix: that queue's suffix (default: this machine's host name).
    :param error_queue: the shared error queue (default ``error``).
    :param audit_queue: the shared audit queue, or None for no audit copies (default).
    :param delayed_delivery: keep a ``<name>.Delayed`` table for delayed sends (default True).
    :param delayed_table_suffix: the delayed table's suffix (default ``Delayed``).
    :param subscribe_to: topics (strings, or classes: see :func:`.subscriptions.topics_of`) that
        :meth:`start` subscribes the primary queue to, under the endpoint's name; the subscriptions stay
        when the endpoint stops (as the reference's), :meth:`unsubscribe` removes one.
    """

    def __init__(
        self,
        transport: Transport,
        name: str | QueueAddress,
        *,
        instance_specific_queue: bool = True,
        instance_suffix: str | None = None,
        error_queue: str | None = "error",
        audit_queue: str | None = None,
        delayed_delivery: bool = True,
        delayed_table_suffix: str = DEFAULT_DELAYED_SUFFIX,
        subscribe_to: Iterable[str | type] = (),
        reply_settings: PumpSettings | Mapping[str, Any] | None = None,
    ) -> None:
        if error_queue is None:
            raise ConfigurationError("an endpoint needs an error queue")
        if isinstance(subscribe_to, str | bytes):
            raise ConfigurationError("subscribe_to takes a list of topics, not one string")
        self.subscribe_to: tuple[str | type, ...] = tuple(subscribe_to)
        self.transport = transport
        self.address = transport.resolve(name)
        self.name = self.address.table
        self.machine = socket.gethostname()
        self.instance_address = (
            transport.resolve(instance_queue_name(self.address, instance_suffix))
            if instance_specific_queue
            else None
        )
        self.error_queue = transport.resolve(error_queue)
        self.audit_queue = None if audit_queue is None else transport.resolve(audit_queue)
        self.delayed: DelayedStore | None = None
        if delayed_delivery:
            delayed = self.address.with_table(f"{self.address.table}.{delayed_table_suffix}")
            self.delayed = DelayedStore(transport, delayed)
        self.pumps: list[MessagePump] = []
        self.mover: DelayedMover | None = None
        self.pending_requests = PendingRequests()
        self.reply_settings = PumpSettings.of(reply_settings)
        self._reply_pump: MessagePump | None = None
        self._reply_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<Endpoint {self.address} instance={self.instance_address}>"

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- queues --------------------------------------------------------------------------------
    @property
    def queue(self) -> TableQueue:
        return self.transport.queue(self.address, error_queue=str(self.error_queue))

    @property
    def instance_queue(self) -> TableQueue | None:
        if self.instance_address is None:
            return None
        return self.transport.queue(self.instance_address, error_queue=str(self.error_queue))

    @property
    def reply_to_address(self) -> str:
        """Where replies to this instance's messages go: its own queue, or the primary queue without one."""
        return str(self.transport.canonical(self.instance_address or self.address))

    def queue_names(self) -> list[str]:
        names = [self.address, self.instance_address, self.error_queue, self.audit_queue]
        return list(dict.fromkeys(str(name) for name in names if name is not None))

    def create(self) -> list[str]:
        """Create every queue of the endpoint, its delayed table and the transport's subscription table
        (shared by every endpoint, as the reference's installers create it) if missing; return those
        created."""
        created = [name for name in self.queue_names() if self.transport.queue(name).create()]
        if self.delayed is not None and self.delayed.create():
            created.append(str(self.delayed.address))
        subscriptions = self.transport.subscriptions
        if subscriptions.create():
            created.append(str(subscriptions.address))
        return created

    # ---- sending -------------------------------------------------------------------------------
    def outgoing_headers(self) -> dict[str, str | None]:
        """The headers this instance puts on what it sends (replies come back to its own queue)."""
        return {
            h.REPLY_TO_ADDRESS: self.reply_to_address,
            h.ORIGINATING_ENDPOINT: self.name,
            h.ORIGINATING_MACHINE: self.machine,
        }

    def send(
        self,
        destination: str | QueueAddress,
        message: OutgoingMessage | bytes | str,
        headers: Mapping[str, str | None] | None = None,
        *,
        time_to_be_received: timedelta | None = None,
        delay: timedelta | float | None = None,
        deliver_at: datetime | None = None,
        connection: Any = None,
    ) -> Any:
        """Send from this instance; with ``delay`` or ``deliver_at`` through the delayed table. With
        ``connection`` the send joins that connection's transaction (see :meth:`TableQueue.send`)."""
        if isinstance(message, OutgoingMessage):
            outgoing = OutgoingMessage.of(message, headers, time_to_be_received)
        else:
            merged = self.outgoing_headers()
            merged.update(headers or {})
            outgoing = OutgoingMessage(message, merged, time_to_be_received)
        if delay is None and deliver_at is None:
            return self.transport.queue(destination).send(outgoing, connection=connection)
        if self.delayed is None:
            raise ConfigurationError(f"endpoint {self.address} was created without delayed delivery")
        return self.delayed.store(
            destination, outgoing, delay=delay, deliver_at=deliver_at, connection=connection
        )

    def publish(
        self,
        topic: str | type,
        message: OutgoingMessage | bytes | str,
        headers: Mapping[str, str | None] | None = None,
        *,
        base_topics: Iterable[str] = (),
        time_to_be_received: timedelta | None = None,
        connection: Any = None,
    ) -> PublishResult:
        """Publish from this instance (its reply-to and originating headers on every copy): one copy to
        each queue subscribed to ``topic`` or its ancestors, in one transaction (see
        :meth:`Transport.publish`)."""
        if isinstance(message, OutgoingMessage):
            outgoing: OutgoingMessage | bytes | str = OutgoingMessage.of(
                message, headers, time_to_be_received
            )
            merged = None
        else:
            merged = self.outgoing_headers()
            merged.update(headers or {})
            outgoing = message
        return self.transport.publish(
            topic,
            outgoing,
            merged,
            base_topics=base_topics,
            time_to_be_received=None if merged is None else time_to_be_received,
            connection=connection,
        )

    # ---- subscriptions -------------------------------------------------------------------------
    def subscribe(self, topic: str | type) -> Subscription:
        """Subscribe this endpoint's primary queue to ``topic`` under the endpoint's name (an upsert: a
        subscription of the same name and topic to another queue is moved to this one)."""
        return self.transport.subscriptions.subscribe(self.name, topic, self.address)

    def unsubscribe(self, topic: str | type) -> bool:
        """Remove this endpoint's subscription to ``topic``; True when there was one."""
        return self.transport.subscriptions.unsubscribe(self.name, topic)

    # ---- receiving -----------------------------------------------------------------------------
    def start(
        self,
        handler: Handler | str,
        settings: PumpSettings | Mapping[str, Any] | None = None,
        *,
        instance_concurrency: int = 1,
        run_mover: bool = True,
        mover_batch_size: int = 100,
        **options: Any,
    ) -> Endpoint:
        """Run ``handler`` on the primary queue and the instance queue, and take part in electing the
        delayed-message mover. ``settings`` and ``options`` are the pumps' (:class:`PumpSettings`: the
        primary queue's pump takes ``max_concurrency``, the instance queue's ``instance_concurrency``; the
        mover takes the idle delay and circuit breaker). First it subscribes to the topics of
        ``subscribe_to`` (the subscription table must exist: :meth:`create` makes it)."""
        if self.pumps:
            raise ConfigurationError(f"endpoint {self.address} is already running")
        pump_settings = PumpSettings.of(settings, **options)
        wiring: dict[str, Any] = {
            "error_queue": str(self.error_queue),
            "audit_queue": None if self.audit_queue is None else str(self.audit_queue),
            "delayed": self.delayed,
            "endpoint": self,
        }
        pumps = [MessagePump(self.queue, handler, pump_settings, **wiring)]
        if self.instance_queue is not None:
            instance_settings = PumpSettings.of(pump_settings, max_concurrency=instance_concurrency)
            dispatch = reply_dispatcher(self.pending_requests, handler)
            pumps.append(MessagePump(self.instance_queue, dispatch, instance_settings, **wiring))
        mover = None
        if run_mover and self.delayed is not None:
            mover = DelayedMover(
                self.delayed,
                batch_size=mover_batch_size,
                idle_delay=pump_settings.idle_delay,
                error_queue=str(self.error_queue),
                circuit_breaker=pump_settings.circuit_breaker,
                on_critical_error=pump_settings.on_critical_error,
                name=f"mover {self.delayed.address} ({self.reply_to_address})",
            )
        needed = sum(pump.required_connections() for pump in pumps) + 1  # + sends outside handlers
        if mover is not None and self.transport.dialect.try_lock_delayed_mover(self.delayed.address) is None:
            needed += 1  # the mover borrows a pooled connection per move (its election lock has its own)
        check_pool_size(self.transport, needed, f"endpoint {self.address}")
        for topic in self.subscribe_to:
            self.subscribe(topic)
        self._stop_reply_pump()  # the instance queue's pump takes the replies over
        self.pumps = pumps
        for pump in pumps:
            pump.start()
        if mover is not None:
            self.mover = mover.start()
        return self

    def satellite(self, queue: str | QueueAddress, handler: Handler | str, **options: Any) -> MessagePump:
        """Start a pump on a further input queue of this endpoint (no instance-specific queue for it)."""
        options.setdefault("error_queue", str(self.error_queue))
        options.setdefault("audit_queue", None if self.audit_queue is None else str(self.audit_queue))
        options.setdefault("delayed", self.delayed)
        pump = MessagePump(self.transport.queue(queue), handler, endpoint=self, **options)
        self.pumps.append(pump)
        return pump.start()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the pumps (running handlers get ``timeout`` seconds) and the mover; True if all clean."""
        clean = True
        for pump in self.pumps:
            pump.request_stop()
        for pump in self.pumps:
            clean = pump.stop(timeout) and clean
        if self.mover is not None:
            clean = self.mover.stop() and clean
            self.mover = None
        self.pumps = []
        return self._stop_reply_pump(timeout) and clean

    # ---- request and reply (requests.py) ---------------------------------------------------------
    def request(
        self,
        destination: str | QueueAddress,
        message: bytes | str,
        headers: Mapping[str, str | None] | None = None,
        *,
        timeout: float | timedelta,
        message_id: uuid.UUID | str | None = None,
        time_to_be_received: timedelta | None = None,
    ) -> ReceivedMessage:
        """Send ``message`` to ``destination`` with this instance's queue as ``NServiceBus.ReplyToAddress``
        and return the reply (the message on that queue whose ``NServiceBus.CorrelationId`` is the
        request's ``NServiceBus.MessageId``, intent ``Reply``); raise :class:`RequestTimeout` when none
        arrives within ``timeout``. A reply arriving later goes to the instance queue's handler, or without
        one to the error queue with the reason (see requests.py).

        The instance queue is read by the endpoint's pump when it was started, otherwise by a pump that
        only takes replies, started on the first request and stopped with the endpoint.
        """
        seconds = timeout_seconds(timeout)
        outgoing = self._request_message(message, headers, message_id, time_to_be_received)
        waiter = self.pending_requests.register(outgoing.headers[h.MESSAGE_ID] or "")
        try:
            self._start_reply_pump()
            self.send(destination, outgoing)
            waiter.wait(seconds)
        finally:
            self.pending_requests.forget(waiter)  # after this no reply can reach the waiter
        if waiter.reply is None:
            raise self._timed_out(outgoing, seconds)
        return waiter.reply

    async def request_async(
        self,
        destination: str | QueueAddress,
        message: bytes | str,
        headers: Mapping[str, str | None] | None = None,
        *,
        timeout: float | timedelta,
        message_id: uuid.UUID | str | None = None,
        time_to_be_received: timedelta | None = None,
    ) -> ReceivedMessage:
        """:meth:`request` for an event loop: the send runs in a worker thread and the wait holds none."""
        seconds = timeout_seconds(timeout)
        outgoing = self._request_message(message, headers, message_id, time_to_be_received)
        waiter = self.pending_requests.register(outgoing.headers[h.MESSAGE_ID] or "")
        arrived = waiter.for_loop()
        try:
            await asyncio.to_thread(self._start_reply_pump)
            await asyncio.to_thread(self.send, destination, outgoing)
            return await asyncio.wait_for(arrived, seconds)
        except asyncio.TimeoutError:
            self.pending_requests.forget(waiter)  # first: after this no reply can reach the waiter
            if waiter.reply is not None:
                return waiter.reply
            raise self._timed_out(outgoing, seconds) from None
        finally:
            self.pending_requests.forget(waiter)

    def _request_message(
        self,
        message: bytes | str,
        headers: Mapping[str, str | None] | None,
        message_id: uuid.UUID | str | None,
        time_to_be_received: timedelta | None,
    ) -> OutgoingMessage:
        if self.instance_address is None:
            raise ConfigurationError(
                f"endpoint {self.address} has no instance-specific queue, so a reply could reach any "
                "instance; requests need instance_specific_queue=True"
            )
        if isinstance(message, OutgoingMessage):
            raise ConfigurationError("give a request's body and headers, not an OutgoingMessage")
        merged = self.outgoing_headers()
        merged.update(headers or {})
        native_id = uuid.uuid4() if message_id is None else uuid.UUID(str(message_id))
        merged[h.MESSAGE_ID] = str(native_id)
        merged.pop(h.CORRELATION_ID, None)  # a request's correlation id is its own message id
        merged[h.MESSAGE_INTENT] = "Send"
        return OutgoingMessage(message, merged, time_to_be_received, id=native_id)

    def _timed_out(self, outgoing: OutgoingMessage, seconds: float) -> RequestTimeout:
        return RequestTimeout(
            f"no reply to request {outgoing.headers[h.MESSAGE_ID]} reached {self.instance_address} within "
            f"{seconds:g} s; a reply arriving later goes to the instance queue's handler, or to "
            f"{self.error_queue} with the reason"
        )

    def _start_reply_pump(self) -> None:
        """Read the instance queue for replies when the endpoint's own pumps do not."""
        with self._reply_lock:
            if self.pumps or self._reply_pump is not None or self.instance_queue is None:
                return
            pump = MessagePump(
                self.instance_queue,
                reply_dispatcher(self.pending_requests, None),
                self.reply_settings,
                error_queue=str(self.error_queue),
                endpoint=self,
                name=f"replies {self.instance_address}",
            )
            check_pool_size(self.transport, pump.required_connections() + 1, f"endpoint {self.address}")
            self._reply_pump = pump.start()

    def _stop_reply_pump(self, timeout: float | None = None) -> bool:
        with self._reply_lock:
            pump, self._reply_pump = self._reply_pump, None
        return True if pump is None else pump.stop(timeout)
