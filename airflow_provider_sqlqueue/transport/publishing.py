"""Publishing an event: one copy to each distinct queue subscribed to its topic or one of its ancestors, all
in one transaction.

As the reference, a publish is a send per subscriber queue (same message, same ``NServiceBus.MessageId``),
with ``NServiceBus.MessageIntent`` = ``Publish`` and ``NServiceBus.EnclosedMessageTypes`` naming the
topics (joined by ``;``, most specific first) unless the caller gives that header. The copies are written
in one transaction: every subscriber queue gets its copy or none does (a missing queue raises
QueueNotFound and nothing is sent). With no subscriber nothing is sent and that is logged.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from . import headers as h
from .lease import shared_cursor
from .message import OutgoingMessage
from .subscriptions import topics_of

if TYPE_CHECKING:
    from .roles import PublishingTransport

__all__ = ["PublishResult", "publish", "publish_message"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PublishResult:
    """What a publish did: the message's Id, the topics it looked up and the queues that got a copy (empty
    when nobody subscribed)."""

    message_id: uuid.UUID
    topics: tuple[str, ...]
    queues: tuple[str, ...]


def publish_message(
    message: OutgoingMessage | bytes | str,
    headers: Mapping[str, str | None] | None,
    time_to_be_received: timedelta | None,
    topics: tuple[str, ...],
) -> OutgoingMessage:
    """The message every subscriber gets: the intent ``Publish`` and the enclosed types set."""
    given = OutgoingMessage.of(message, headers, time_to_be_received)
    merged = dict(given.headers)
    merged[h.MESSAGE_INTENT] = "Publish"
    if not merged.get(h.ENCLOSED_MESSAGE_TYPES):
        merged[h.ENCLOSED_MESSAGE_TYPES] = ";".join(topics)
    return OutgoingMessage(given.body, merged, given.time_to_be_received, id=given.id)


def publish(
    transport: PublishingTransport,
    topic: str | type,
    message: OutgoingMessage | bytes | str,
    headers: Mapping[str, str | None] | None = None,
    *,
    base_topics: Iterable[str] = (),
    time_to_be_received: timedelta | None = None,
    connection: Any = None,
) -> PublishResult:
    """Send ``message`` to every queue subscribed to ``topic`` or one of its ancestors (see
    :func:`~.subscriptions.topics_of`), in one transaction: the transport's own, committed, or with
    ``connection`` the caller's (uncommitted, as :meth:`TableQueue.send`'s)."""
    topics = topics_of(topic, base_topics)
    outgoing = publish_message(message, headers, time_to_be_received, topics)
    queues = transport.subscriptions.subscriber_queues(topics, connection=connection)
    if not queues:
        log.info("published %s (%s): no subscriber, nothing sent", outgoing.id, topics[0])
        return PublishResult(outgoing.id, topics, ())
    # One copy per table: two spellings of one queue (with and without its catalog) are one subscriber.
    targets = list({target.address: target for target in map(transport.queue, queues)}.values())
    if connection is not None:
        for target in targets:
            target.send(outgoing, connection=connection)
    else:
        with transport.connection() as pooled:
            begin = transport.dialect.begin_write()
            if begin:
                shared_cursor(pooled).execute(begin, ())
            for target in targets:
                target.send(outgoing, connection=pooled)
            pooled.commit()
    sent = tuple(str(transport.canonical(target.address)) for target in targets)
    log.debug("published %s (%s) to %s", outgoing.id, topics[0], ", ".join(sent))
    return PublishResult(outgoing.id, topics, sent)
