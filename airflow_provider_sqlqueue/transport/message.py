"""Outgoing and received messages."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from . import headers as h
from .errors import ConfigurationError

__all__ = ["MAX_TIME_TO_BE_RECEIVED", "OutgoingMessage", "ReceivedMessage"]

MAX_TIME_TO_BE_RECEIVED = timedelta(days=365 * 50)
"""Longer TTBRs are refused (SQL Server's DATEADD takes an int of seconds); ``timedelta.max`` means none."""


def _as_bytes(body: bytes | bytearray | memoryview | str) -> bytes:
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    raise TypeError(f"a message body must be bytes or str, not {type(body).__name__}")


@dataclass(frozen=True)
class OutgoingMessage:
    """A message to send: body bytes, headers, an optional time to be received and a sender-made Id.

    As NServiceBus does for a message that starts a conversation, ``NServiceBus.MessageId`` and
    ``NServiceBus.CorrelationId`` default to the Id, ``NServiceBus.MessageIntent`` to ``Send`` and
    ``NServiceBus.TimeSent`` to now; headers given override them. Set ``NServiceBus.ContentType`` and
    ``NServiceBus.EnclosedMessageTypes`` for .NET endpoints to deserialize the body. A ``str`` body is
    stored as UTF-8.
    """

    body: bytes = b""
    headers: Mapping[str, str | None] = field(default_factory=dict)
    time_to_be_received: timedelta | None = None
    id: uuid.UUID = field(default_factory=uuid.uuid4)

    def __post_init__(self) -> None:
        object.__setattr__(self, "body", _as_bytes(self.body))
        if not isinstance(self.id, uuid.UUID):
            object.__setattr__(self, "id", uuid.UUID(str(self.id)))
        ttbr = self.time_to_be_received
        if ttbr is not None:
            if not isinstance(ttbr, timedelta):
                raise ConfigurationError(
                    f"time_to_be_received must be a timedelta, not {type(ttbr).__name__}"
                )
            if ttbr == timedelta.max:
                object.__setattr__(self, "time_to_be_received", None)
            elif ttbr <= timedelta(0):
                raise ConfigurationError(f"time_to_be_received must be positive, got {ttbr}")
            elif ttbr > MAX_TIME_TO_BE_RECEIVED:
                raise ConfigurationError(
                    f"time_to_be_received {ttbr} is longer than the 50-year maximum; "
                    "use None (or timedelta.max) for a message that never expires"
                )
        merged: dict[str, str | None] = dict(self.headers)  # the caller's order is the stored order
        for name, value in (
            (h.MESSAGE_ID, str(self.id)),
            (h.CORRELATION_ID, str(self.id)),
            (h.MESSAGE_INTENT, "Send"),
            (h.TIME_SENT, h.format_timestamp(datetime.now(timezone.utc))),
        ):
            merged.setdefault(name, value)
        object.__setattr__(self, "headers", merged)

    def encoded_headers(self) -> str:
        return h.encode_headers(self.headers)

    @property
    def correlation_id(self) -> str | None:
        return self.headers.get(h.CORRELATION_ID)

    @property
    def reply_to_address(self) -> str | None:
        return self.headers.get(h.REPLY_TO_ADDRESS)

    @classmethod
    def of(
        cls,
        message: OutgoingMessage | bytes | bytearray | memoryview | str,
        headers: Mapping[str, str | None] | None = None,
        time_to_be_received: timedelta | None = None,
    ) -> OutgoingMessage:
        """Accept a ready message, or build one from a body and options."""
        if isinstance(message, OutgoingMessage):
            if headers or time_to_be_received:
                raise ConfigurationError(
                    "pass headers and time_to_be_received inside the OutgoingMessage, not beside it"
                )
            return message
        return cls(message, headers or {}, time_to_be_received)


@dataclass(frozen=True)
class ReceivedMessage:
    """A message taken from a queue: native Id, headers, body and its position (RowVersion)."""

    id: uuid.UUID
    headers: dict[str, str | None]
    body: bytes
    row_version: int
    expires: datetime | None = None
    correlation_id: str | None = None
    reply_to_address: str | None = None

    @property
    def message_id(self) -> str:
        """The NServiceBus message id, falling back to the native Id as NServiceBus Core does."""
        return self.headers.get(h.MESSAGE_ID) or str(self.id)

    @property
    def content_type(self) -> str | None:
        return self.headers.get(h.CONTENT_TYPE)

    def text(self, encoding: str = "utf-8") -> str:
        return self.body.decode(encoding)
