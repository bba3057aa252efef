"""Outgoing and received messages."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import msgspec

from ..model.errors import ConfigurationError
from . import headers as h

__all__ = ["MAX_TIME_TO_BE_RECEIVED", "OutgoingMessage", "ReceivedMessage"]

MAX_TIME_TO_BE_RECEIVED = timedelta(days=365 * 50)
"""Longer TTBRs are refused (SQL Server's DATEADD takes an int of seconds); ``timedelta.max`` means none."""


_VERSION_4_MASK = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
_VERSION_4_BITS = (0x4000 << 64) | (0x8000 << 48)
_UNKNOWN_SAFETY = uuid.SafeUUID.unknown


def _uuid_from_int_slow(value: int) -> uuid.UUID:
    return uuid.UUID(int=value)


def _uuid_from_int_fast(value: int) -> uuid.UUID:
    # uuid.UUID's own constructor spends most of its time checking arguments that are known good here
    made = object.__new__(uuid.UUID)
    object.__setattr__(made, "int", value)
    object.__setattr__(made, "is_safe", _UNKNOWN_SAFETY)
    return made


def _pick_uuid_from_int() -> object:
    sample = 0x0123456789ABCDEF0123456789ABCDEF
    try:
        made = _uuid_from_int_fast(sample)
        if made == uuid.UUID(int=sample) and str(made) == str(uuid.UUID(int=sample)):
            return _uuid_from_int_fast
    except (AttributeError, TypeError):  # pragma: no cover - a Python whose UUID is built differently
        pass
    return _uuid_from_int_slow  # pragma: no cover


uuid_from_int = _pick_uuid_from_int()


def new_message_ids(count: int) -> list[uuid.UUID]:
    """``count`` random (version 4) UUIDs, as ``uuid.uuid4()`` makes them, from one read of os.urandom."""
    random = os.urandom(16 * count)
    from_bytes, make = int.from_bytes, uuid_from_int
    return [
        make(from_bytes(random[start : start + 16]) & _VERSION_4_MASK | _VERSION_4_BITS)  # type: ignore[operator]
        for start in range(0, 16 * count, 16)
    ]


def new_message_ids_and_texts(count: int) -> tuple[list[uuid.UUID], list[str]]:
    """What :func:`new_message_ids` gives, and each Id's text (``str(id)``) beside it, from one block of
    random bytes with the version bits set.

    msgspec makes both in C, for much less than building them one by one in Python costs (a batch send
    pays this for every message): the block's hexadecimal digits, 32 per Id, are read as a JSON array of
    UUIDs, and those are written back as their canonical texts.
    """
    if not count:
        return [], []
    digits = _random_id_block(count).hex(",", 16).replace(",", '","')
    ids = read_uuid_list(f'["{digits}"]')
    return ids, _write_json(ids)[2:-2].decode("ascii").split('","')


read_uuid_list = msgspec.json.Decoder(list[uuid.UUID]).decode
"""A JSON array of UUID texts as ``uuid.UUID``s, read by msgspec (ValueError if any is not one)."""
_write_json = msgspec.json.Encoder().encode


def new_id_texts(count: int) -> list[str]:
    """The texts of ``count`` random (version 4) UUIDs, for Ids only ever written as text (a new
    conversation's), with no ``uuid.UUID`` made."""
    return _id_texts(_random_id_block(count), count)


def _random_id_block(count: int) -> bytes:
    """``count`` random version-4 UUIDs' 16 bytes each, end to end, from one read of os.urandom."""
    known = _id_block_masks.get(count)
    if known is None:
        repeat = sum(1 << (128 * index) for index in range(count))
        known = (_VERSION_4_MASK * repeat, _VERSION_4_BITS * repeat)
        if len(_id_block_masks) < 64:
            _id_block_masks[count] = known
    mask, bits = known
    return ((int.from_bytes(os.urandom(16 * count)) & mask) | bits).to_bytes(16 * count)


_id_block_masks: dict[int, tuple[int, int]] = {}


def _id_texts(block: bytes, count: int) -> list[str]:
    """The UUID texts of a block of Ids: its hexadecimal digits in groups of 4, each followed by "-", cut
    and joined so each Id keeps its own dashes (8-4-4-4-12)."""
    text = block.hex("-", 2)
    return [text[at : at + 4] + text[at + 5 : at + 29] + text[at + 30 : at + 34] + text[at + 35 : at + 39]
            for at in range(0, 40 * count, 40)]  # fmt: skip


def _as_bytes(body: bytes | bytearray | memoryview | str) -> bytes:
    if type(body) is bytes:
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    raise TypeError(f"a message body must be bytes or str, not {type(body).__name__}")


@dataclass(frozen=True)
class OutgoingMessage:
    """A message to send: body bytes, headers, an optional time to be received and a sender-made Id.

    As NServiceBus does for a message that starts a conversation, ``NServiceBus.MessageId`` and
    ``NServiceBus.CorrelationId`` default to the Id, ``NServiceBus.MessageIntent`` to ``Send``,
    ``NServiceBus.ConversationId`` to a new random UUID and ``NServiceBus.TimeSent`` to now; with a time
    to be received, ``NServiceBus.TimeToBeReceived`` is its .NET ``TimeSpan`` text
    (:func:`~.headers.format_time_span`). Headers given override them. Set ``NServiceBus.ContentType`` and
    ``NServiceBus.EnclosedMessageTypes`` for .NET endpoints to deserialize the body. A ``str`` body is
    stored as UTF-8.

    ``headers_text`` is for a message passed on (forwarded, moved to the error queue, audited): that exact
    stored JSON text is written, no standard header is filled in, and ``headers`` is read from it.
    """

    body: bytes = b""
    headers: Mapping[str, str | None] = field(default_factory=dict)
    time_to_be_received: timedelta | None = None
    id: uuid.UUID = field(default_factory=uuid.uuid4)
    headers_text: str | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if type(self.body) is not bytes:
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
        if self.headers_text is not None:
            if self.headers:
                raise ConfigurationError("give an OutgoingMessage headers or headers_text, not both")
            object.__setattr__(self, "headers", h.decode_headers(self.headers_text))
            return
        text_id = str(self.id)
        if not self.headers:
            merged: dict[str, str | None] = {
                h.MESSAGE_ID: text_id,
                h.CORRELATION_ID: text_id,
                h.MESSAGE_INTENT: "Send",
                h.CONVERSATION_ID: str(uuid.uuid4()),
                h.TIME_SENT: h.time_sent_now(),
            }
        else:
            merged = dict(self.headers)  # the caller's order is the stored order
            for name, value in (
                (h.MESSAGE_ID, text_id),
                (h.CORRELATION_ID, text_id),
                (h.MESSAGE_INTENT, "Send"),
            ):
                merged.setdefault(name, value)
            if h.CONVERSATION_ID not in merged:
                merged[h.CONVERSATION_ID] = str(uuid.uuid4())
            if h.TIME_SENT not in merged:
                merged[h.TIME_SENT] = h.time_sent_now()
        if self.time_to_be_received is not None and h.TIME_TO_BE_RECEIVED not in merged:
            merged[h.TIME_TO_BE_RECEIVED] = h.format_time_span(self.time_to_be_received)
        object.__setattr__(self, "headers", merged)

    def encoded_headers(self) -> str:
        if self.headers_text is not None:
            return self.headers_text
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
    """A message taken from a queue: native Id, headers, body and its position (RowVersion).

    ``headers_text`` is the Headers column as stored, so what is passed on keeps it byte for byte.
    """

    id: uuid.UUID
    headers: dict[str, str | None]
    body: bytes
    row_version: int
    expires: datetime | None = None
    correlation_id: str | None = None
    reply_to_address: str | None = None
    headers_text: str | None = field(default=None, repr=False)

    @property
    def message_id(self) -> str:
        """The NServiceBus message id, falling back to the native Id as NServiceBus Core does."""
        return self.headers.get(h.MESSAGE_ID) or str(self.id)

    @property
    def content_type(self) -> str | None:
        return self.headers.get(h.CONTENT_TYPE)

    def text(self, encoding: str = "utf-8") -> str:
        return self.body.decode(encoding)
