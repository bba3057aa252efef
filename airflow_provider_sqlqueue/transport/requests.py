"""Request and reply: a send whose caller waits for the answer (the reference's NServiceBus.Callbacks).

A request is an ordinary send from an endpoint instance: its ``NServiceBus.ReplyToAddress`` is the
instance's own queue, so the reply reaches the process that waits for it. The responder answers with a
reply (``context.reply`` here, ``context.Reply(...)`` in .NET), which NServiceBus Core writes with
``NServiceBus.MessageIntent`` ``Reply`` and ``NServiceBus.CorrelationId`` the request's correlation id, by
default the request's ``NServiceBus.MessageId``. As the reference, a message on the instance queue is the
answer to a waiting request when

- its ``NServiceBus.CorrelationId`` is the ``NServiceBus.MessageId`` of a request this process still waits
  for, and
- its ``NServiceBus.MessageIntent`` is ``Reply`` (not checked for senders whose ``NServiceBus.Version`` is
  below 5, which did not write the intent of replies).

The waiting requests are kept in memory (:class:`PendingRequests`), as the reference's: a reply that
nobody waits for any more (the request timed out, the process that sent it restarted) is handled like
any message on the instance queue. On an endpoint started with a handler that handler gets it; otherwise
:class:`UnclaimedReply` is raised for it, so the pump's recoverability moves it to the error queue with the
reason in ``NServiceBus.ExceptionInfo.Message``, which is where the reference's endpoint sends a reply no
callback and no handler takes. It is never dropped.

A reply is handed to its caller when the pump takes it, before the receive commits: if that commit fails,
the caller has its answer and the message comes back, finds nobody waiting and goes to the error queue
(at least once, never lost).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from ..model.errors import ConfigurationError, SqlQueueError
from . import headers as h
from .message import ReceivedMessage
from .pump.handler import Handler, load_handler, takes_context

__all__ = [
    "PendingRequests",
    "RequestTimeout",
    "UnclaimedReply",
    "correlation_of_reply",
    "reply_dispatcher",
    "timeout_seconds",
]

REPLY_INTENT = "Reply"
FIRST_VERSION_WRITING_REPLY_INTENT = (5, 0)


class RequestTimeout(SqlQueueError, TimeoutError):
    """No reply to a request arrived in time; a reply that arrives later goes where unclaimed replies go."""


class UnclaimedReply(SqlQueueError):
    """A message on an instance queue that no waiting request and no handler takes (the reason a reply
    nobody waits for is moved to the error queue)."""


def timeout_seconds(timeout: Any) -> float:
    """A request's timeout (seconds or a ``timedelta``) as positive seconds."""
    seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
        raise ConfigurationError(
            f"a request's timeout must be positive seconds or a timedelta, not {timeout!r}"
        )
    return float(seconds)


def _version(text: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(part) for part in (text or "").split(".")[:2])
    except ValueError:
        return None


def correlation_of_reply(headers: dict[str, str | None]) -> str | None:
    """The ``NServiceBus.CorrelationId`` of a message that may answer a request (None when it cannot: no
    correlation, or an intent other than ``Reply`` from a sender that writes the intent of replies)."""
    correlation = headers.get(h.CORRELATION_ID)
    if not correlation:
        return None
    version_text = headers.get(h.NSERVICEBUS_VERSION)
    version = _version(version_text) if version_text else None
    checks_intent = version is None or version >= FIRST_VERSION_WRITING_REPLY_INTENT
    if checks_intent and headers.get(h.MESSAGE_INTENT) != REPLY_INTENT:
        return None
    return correlation


class _Waiter:
    """One request waiting for its reply, from a thread or an event loop."""

    def __init__(self, message_id: str) -> None:
        self.message_id = message_id
        self.reply: ReceivedMessage | None = None
        self._arrived = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._future: asyncio.Future[ReceivedMessage] | None = None

    def for_loop(self) -> asyncio.Future[ReceivedMessage]:
        """A future of the running event loop, done when the reply arrives."""
        self._loop = asyncio.get_running_loop()
        self._future = self._loop.create_future()
        return self._future

    def deliver(self, reply: ReceivedMessage) -> None:
        self.reply = reply
        self._arrived.set()
        loop, future = self._loop, self._future
        if loop is not None and future is not None:
            loop.call_soon_threadsafe(lambda: future.done() or future.set_result(reply))

    def wait(self, timeout: float) -> bool:
        return self._arrived.wait(timeout)


class PendingRequests:
    """The requests of one endpoint instance still waiting for their replies, by request message id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, _Waiter] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._waiting)

    def register(self, message_id: str) -> _Waiter:
        """Wait for the reply to ``message_id`` (before the request is sent, so no reply can come first)."""
        with self._lock:
            if message_id in self._waiting:
                raise ConfigurationError(f"a request with message id {message_id} is already waiting")
            waiter = self._waiting[message_id] = _Waiter(message_id)
        return waiter

    def forget(self, waiter: _Waiter) -> bool:
        """Stop waiting; True when the reply had arrived meanwhile (it is then the caller's after all)."""
        with self._lock:
            if self._waiting.get(waiter.message_id) is waiter:
                del self._waiting[waiter.message_id]
        return waiter.reply is not None

    def claim(self, message: ReceivedMessage) -> bool:
        """Hand ``message`` to the request it answers; False when no waiting request takes it."""
        correlation = correlation_of_reply(message.headers)
        if correlation is None:
            return False
        with self._lock:
            waiter = self._waiting.pop(correlation, None)
            if waiter is None:
                return False
            waiter.deliver(message)
        return True


def reply_dispatcher(pending: PendingRequests, handler: Handler | str | None) -> Callable[[Any, Any], None]:
    """The handler of an instance queue: replies go to their waiting requests, anything else to
    ``handler``; without one it raises :class:`UnclaimedReply` (to the error queue, with the reason)."""
    fallback = None if handler is None else load_handler(handler)
    pass_context = fallback is not None and takes_context(fallback)

    def dispatch(message: ReceivedMessage, context: Any) -> None:
        if pending.claim(message):
            return
        if fallback is not None:
            fallback(message, context) if pass_context else fallback(message)
            return
        raise UnclaimedReply(
            f"no request waits for message {message.message_id} (NServiceBus.CorrelationId "
            f"{message.headers.get(h.CORRELATION_ID)!r}, intent "
            f"{message.headers.get(h.MESSAGE_INTENT)!r}) on this instance queue: the request timed out, "
            "the process that sent it stopped, or it is not a reply to a request"
        )

    return dispatch
