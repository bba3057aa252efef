"""Publishing an event: one copy to each distinct queue subscribed to its topic or one of its ancestors, all
in one transaction.

As the reference, a publish is a send per subscriber queue (same message, same ``NServiceBus.MessageId``),
with ``NServiceBus.MessageIntent`` = ``Publish`` and ``NServiceBus.EnclosedMessageTypes`` naming the
topics (joined by ``;``, most specific first) unless the caller gives that header. The copies are written
in one transaction: every subscriber queue gets its copy or none does. With no subscriber nothing is sent
and that is logged.

A row's ``QueueAddress`` is read in either form a writer stores (this package's ``table@[schema]``, SQL
Server's ``table@[schema]@[catalog]``, the reference's PostgreSQL ``"schema"."table"``, see
:mod:`~..model.address`). A row naming no queue table fails the whole publish, as the reference's does, and
nothing is sent: :class:`QueueNotFound` (or :class:`InvalidQueueName` for a value that is no address)
names the row's ``QueueAddress`` as stored and the topics looked up.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..model.errors import InvalidQueueName, QueueNotFound
from . import headers as h
from .lease import shared_cursor
from .message import OutgoingMessage
from .subscriptions import topics_of

if TYPE_CHECKING:
    from .roles import OpenedQueue, PublishingTransport

__all__ = ["PublishResult", "publish", "publish_message", "sending_to_subscriber", "subscriber_targets"]

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
    targets = subscriber_targets(transport, queues, topics)
    if connection is not None:
        for row, target in targets:
            with sending_to_subscriber(row, topics):
                target.send(outgoing, connection=connection)
    else:
        with transport.connection() as pooled:
            begin = transport.dialect.begin_write()
            if begin:
                shared_cursor(pooled).execute(begin, ())
            for row, target in targets:
                with sending_to_subscriber(row, topics):
                    target.send(outgoing, connection=pooled)
            pooled.commit()
    sent = tuple(str(transport.canonical(target.address)) for _, target in targets)
    log.debug("published %s (%s) to %s", outgoing.id, topics[0], ", ".join(sent))
    return PublishResult(outgoing.id, topics, sent)


def subscriber_targets(
    transport: PublishingTransport, rows: Iterable[str], topics: Sequence[str]
) -> list[tuple[str, OpenedQueue]]:
    """The queue of each subscription row's ``QueueAddress`` (as stored), one per table: two spellings of
    one queue (with and without its catalog or schema, or in the reference's PostgreSQL form) are one
    subscriber. InvalidQueueName naming the row for a value that is no queue address."""
    targets: dict[object, tuple[str, OpenedQueue]] = {}
    for row in rows:
        try:
            target = transport.queue(row)
        except InvalidQueueName as error:
            raise InvalidQueueName(
                f"the subscription row with QueueAddress {row!r} (a subscriber of {', '.join(topics)}) "
                f"names no queue: {error}; nothing was published"
            ) from error
        targets.setdefault(target.address, (row, target))
    return list(targets.values())


@contextmanager
def sending_to_subscriber(row: str, topics: Sequence[str]) -> Iterator[None]:
    """A send of a publish's copy: a missing queue table is reported as the subscription row naming it."""
    try:
        yield
    except QueueNotFound as error:
        raise QueueNotFound(
            f"the subscription row with QueueAddress {row!r} (a subscriber of {', '.join(topics)}) names a "
            f"queue that does not exist ({error}); nothing was published: create the queue, or unsubscribe "
            "the endpoint"
        ) from error
