"""A reply queue of one durable request: where a caller that may stop and resume (an Airflow task that
defers, is retried, or whose triggerer restarts) finds the answer to its request.

:mod:`.requests` keeps waiting requests in memory, as the reference's callbacks do, so its replies are
lost to a caller that restarts. A durable request instead has a queue of its own, named after the
request's id (``<prefix>.<request id as 32 hex digits>``), which is the request's
``NServiceBus.ReplyToAddress``. That makes every step restartable without reading any queue by
correlation:

- the request is sent in one transaction with a marker message into its reply queue, so the queue holding
  the marker means the request went out (:meth:`ReplyQueue.send_request` sends it once, whatever the
  number of tries);
- the reply waits in that queue, however late the caller looks (:meth:`ReplyQueue.find_reply` reads it
  without taking it: a plain ordered read of a queue holding two messages);
- :meth:`ReplyQueue.close` ends the request: whatever else reached the queue (a reply after the caller gave
  up, a message that answers another request) goes to the error queue with the reason, then the table is
  dropped. A reply sent after that fails at its sender (the queue is gone), which retries it and then
  moves the request it answers to its own error queue: nothing is dropped silently.

Creating and dropping the table need DDL rights on the schema.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from ..model.address import QueueAddress
from ..model.errors import ConfigurationError
from . import headers as h
from .browse import BrowsedMessage, browse
from .message import OutgoingMessage
from .requests import correlation_of_reply

if TYPE_CHECKING:
    from .connection import Transport
    from .queue import TableQueue

__all__ = ["REQUEST_MARKER", "ReplyQueue", "reply_queue_name"]

REQUEST_MARKER = "SqlQueue.RequestSent"
"""The header of the marker sent with a request into its reply queue: its value is the request's id."""
UNCLAIMED_REPLY = "airflow_provider_sqlqueue.transport.requests.UnclaimedReply"
READ_AT_ONCE = 20


def reply_queue_name(prefix: str, request_id: uuid.UUID) -> str:
    """The address of request ``request_id``'s reply queue: ``prefix``'s with the id appended to its table
    name (schema and catalog kept; the transport resolves what the prefix leaves out)."""
    base = QueueAddress.parse(prefix)
    return str(base.with_table(f"{base.table}.{request_id.hex}"))


@dataclass(frozen=True)
class ReplyQueue:
    """The reply queue of request ``request_id``; ``prefix`` is a queue address whose table name the
    request's id is appended to (its schema and catalog are kept)."""

    transport: Transport
    prefix: str
    request_id: uuid.UUID

    @property
    def address(self) -> QueueAddress:
        return self.transport.resolve(reply_queue_name(self.prefix, self.request_id))

    @property
    def queue(self) -> TableQueue:
        return self.transport.queue(self.address)

    @property
    def reply_to_address(self) -> str:
        """The request's ``NServiceBus.ReplyToAddress``: this queue's canonical address."""
        return str(self.transport.canonical(self.address))

    def request_message(self, message: OutgoingMessage) -> OutgoingMessage:
        """``message`` as this request: its Id and ``NServiceBus.MessageId`` the request's id (so its
        correlation id too), intent Send, replies to this queue; its own other headers kept."""
        if message.headers_text is not None:
            raise ConfigurationError("a request is built from headers, not stored header text")
        headers = dict(message.headers)
        for name in (h.MESSAGE_ID, h.CORRELATION_ID, h.CONVERSATION_ID, h.TIME_SENT):
            headers.pop(name, None)  # made again for the request's id
        headers[h.MESSAGE_INTENT] = "Send"
        headers[h.REPLY_TO_ADDRESS] = self.reply_to_address
        return OutgoingMessage(message.body, headers, message.time_to_be_received, id=self.request_id)

    def was_sent(self) -> bool:
        """Whether the request went out: its reply queue exists and holds the marker (or more)."""
        queue = self.queue
        return queue.exists() and queue.count() > 0

    def send_request(self, destination: str | QueueAddress, message: OutgoingMessage) -> bool:
        """Create the reply queue if missing and, unless the request went out already, send it to
        ``destination`` in one transaction with the marker; True when this call sent it."""
        queue = self.queue
        queue.create()
        if queue.count() > 0:
            return False
        request = self.request_message(message)
        marker = OutgoingMessage(b"", {REQUEST_MARKER: str(self.request_id)})
        target = self.transport.queue(destination)
        with self.transport.connection(queue.address) as connection:
            queue.send_on(connection, [marker], commit=False)
            target.send_on(connection, [request], commit=True)
        return True

    def find_reply(self) -> BrowsedMessage | None:
        """The reply to the request, if it arrived: the oldest message of the queue whose correlation id is
        the request's id and whose intent is Reply (see :func:`.requests.correlation_of_reply`). Left in
        the queue."""
        wanted = str(self.request_id)
        for message in browse(self.queue, READ_AT_ONCE):
            if message.header_error is None and correlation_of_reply(message.headers) == wanted:
                return message
        return None

    def close(self, reason: str, *, answered_by: str | None = None, error_queue: str = "error") -> int:
        """End the request: every message of the queue but the marker and the reply with native Id
        ``answered_by`` goes to ``error_queue`` with ``reason``, then the table is dropped; return how many
        went to the error queue. Nothing to do when the queue is gone."""
        queue = self.queue
        if not queue.exists():
            return 0
        failed = self.transport.queue(error_queue)
        moved = 0
        while True:
            with queue.receive(READ_AT_ONCE) as batch:
                for message in batch:
                    if REQUEST_MARKER in message.headers or str(message.id) == answered_by:
                        continue
                    text = h.edit_headers_text(
                        message.headers_text or h.encode_headers(message.headers),
                        {
                            h.FAILED_QUEUE: self.reply_to_address,
                            f"{h.EXCEPTION_INFO_PREFIX}ExceptionType": UNCLAIMED_REPLY,
                            f"{h.EXCEPTION_INFO_PREFIX}Message": reason,
                            h.TIME_OF_FAILURE: h.format_timestamp(datetime.now(timezone.utc)),
                        },
                    )
                    batch.send_in_receive_transaction(
                        failed, [OutgoingMessage(message.body, headers_text=text)]
                    )
                    moved += 1
            if len(batch) < READ_AT_ONCE:
                break
        queue.drop()
        return moved
