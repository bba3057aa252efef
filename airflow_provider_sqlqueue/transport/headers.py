"""Message headers: the NServiceBus header names and the JSON text stored in the ``Headers`` column.

The stored form is a flat JSON object of string keys to string or null values, written the way the .NET
transport writes it so that both can share a queue: non-ASCII text as-is, characters outside the Basic
Multilingual Plane as ``\\uXXXX`` surrogate pairs, control characters as escapes, and every ``/`` as ``\\/``.
Reading accepts both ``/`` and ``\\/`` and any valid JSON escaping.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ..model.errors import HeaderFormatError

__all__ = [
    "Headers",
    "decode_headers",
    "encode_headers",
    "format_timestamp",
    "parse_timestamp",
]

MESSAGE_ID = "NServiceBus.MessageId"
CORRELATION_ID = "NServiceBus.CorrelationId"
REPLY_TO_ADDRESS = "NServiceBus.ReplyToAddress"
CONVERSATION_ID = "NServiceBus.ConversationId"
RELATED_TO = "NServiceBus.RelatedTo"
MESSAGE_INTENT = "NServiceBus.MessageIntent"
ENCLOSED_MESSAGE_TYPES = "NServiceBus.EnclosedMessageTypes"
CONTENT_TYPE = "NServiceBus.ContentType"
TIME_SENT = "NServiceBus.TimeSent"
DELIVER_AT = "NServiceBus.DeliverAt"
TIME_TO_BE_RECEIVED = "NServiceBus.TimeToBeReceived"
ORIGINATING_ENDPOINT = "NServiceBus.OriginatingEndpoint"
ORIGINATING_MACHINE = "NServiceBus.OriginatingMachine"
FAILED_QUEUE = "NServiceBus.FailedQ"
TIME_OF_FAILURE = "NServiceBus.TimeOfFailure"
EXCEPTION_INFO_PREFIX = "NServiceBus.ExceptionInfo."
FORWARD_DESTINATION = "NServiceBus.SqlServer.ForwardDestination"

Headers = dict[str, str | None]

_TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S:%f Z"
_json_decoder = json.JSONDecoder()
_json_scan = _json_decoder.scan_once
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPE_AFTER_DUMPS = re.compile(r"(\\\\)|\\u([0-9a-f]{4})|/|([\U00010000-\U0010FFFF])")


def _dotnet_escape(match: re.Match[str]) -> str:
    escaped_backslash, lower_hex, astral = match.groups()
    if escaped_backslash:
        return escaped_backslash
    if lower_hex:
        return "\\u" + lower_hex.upper()
    if astral:
        code = ord(astral) - 0x10000
        return f"\\u{0xD800 + (code >> 10):04X}\\u{0xDC00 + (code & 0x3FF):04X}"
    return "\\/"


def encode_headers(headers: Mapping[str, str | None]) -> str:
    """Serialize headers to the stored JSON text; raise :class:`HeaderFormatError` for non-string entries."""
    for key, value in headers.items():
        if not isinstance(key, str):
            raise HeaderFormatError(f"header names must be strings, got {type(key).__name__} {key!r}")
        if value is not None and not isinstance(value, str):
            raise HeaderFormatError(
                f"header {key!r} must be a string or None, got {type(value).__name__}; "
                "serialize structured values yourself (for example with json.dumps)"
            )
    text = json.dumps(dict(headers), ensure_ascii=False, separators=(",", ":"))
    if text.isascii() and "\\u" not in text:
        return text.replace("/", "\\/")  # the common case: only '/' differs from .NET's bytes
    if _LONE_SURROGATE.search(text):
        raise HeaderFormatError("headers contain a lone surrogate, which is not valid Unicode text")
    return _ESCAPE_AFTER_DUMPS.sub(_dotnet_escape, text)


def default_headers_text(message_id: str, time_sent: str) -> str:
    """The stored JSON of the four standard headers of a message sent without headers of its own.

    The same text :func:`encode_headers` writes for ``{MessageId: id, CorrelationId: id, MessageIntent:
    "Send", TimeSent: time_sent}`` in that order, for an Id and a time that need no escaping (a UUID's
    text and :func:`time_sent_now`); built without the general encoder because every plain send pays it.
    """
    return (
        f'{{"{MESSAGE_ID}":"{message_id}","{CORRELATION_ID}":"{message_id}",'
        f'"{MESSAGE_INTENT}":"Send","{TIME_SENT}":"{time_sent}"}}'
    )


_second_text: tuple[int, str] = (-1, "")


def time_sent_now() -> str:
    """Now as :func:`format_timestamp` writes it; the text up to the second is formatted once a second."""
    global _second_text
    microseconds = time.time_ns() // 1000
    second, fraction = divmod(microseconds, 1_000_000)
    cached = _second_text  # one read: another thread may replace it, never half of it
    if cached[0] != second:
        cached = (second, datetime.fromtimestamp(second, timezone.utc).strftime("%Y-%m-%d %H:%M:%S:"))
        _second_text = cached
    return f"{cached[1]}{fraction:06d} Z"


def decode_headers(text: str | bytes | None) -> Headers:
    """Parse stored header text; raise :class:`HeaderFormatError` saying why it is not a header map.

    An empty string is an empty map, as in the reference. NULL is not: this transport always writes
    headers, so NULL means another system wrote the row, and it is treated as poison.
    """
    if type(text) is not str:
        if text is None:
            raise HeaderFormatError("headers are NULL")
        if isinstance(text, bytes | bytearray | memoryview):
            try:
                text = bytes(text).decode("utf-8")
            except UnicodeDecodeError as error:
                raise HeaderFormatError(f"headers are not UTF-8 text: {error}") from error
    try:
        # every received message pays this: the JSON scanner itself when the text is one bare value,
        # the full decoder (whitespace around it, errors with their position) otherwise
        value, end = _json_scan(text, 0)
        if end != len(text):
            value = _json_decoder.decode(text)
    except StopIteration:
        value = _decode_json(text)
    except (ValueError, RecursionError) as error:
        if not text.strip():
            return {}
        raise HeaderFormatError(f"headers are not valid JSON: {error}") from error
    if type(value) is not dict:
        raise HeaderFormatError(f"headers must be a JSON object, got a JSON {type(value).__name__}")
    for item in value.values():
        if type(item) is not str and item is not None:
            key = next(key for key, found in value.items() if found is item)
            raise HeaderFormatError(
                f"header {key!r} has a non-string JSON value of type {type(item).__name__}"
            )
    return value


def _decode_json(text: str) -> Any:
    try:
        return _json_decoder.decode(text)
    except (ValueError, RecursionError) as error:
        if not text.strip():
            return {}
        raise HeaderFormatError(f"headers are not valid JSON: {error}") from error


def format_timestamp(moment: datetime) -> str:
    """Format a time as NServiceBus does: ``yyyy-MM-dd HH:mm:ss:ffffff Z`` in UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime(_TIMESTAMP_FORMAT)


def parse_timestamp(text: str) -> datetime:
    """Parse the NServiceBus timestamp format into an aware UTC datetime."""
    try:
        return datetime.strptime(text, _TIMESTAMP_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError as error:
        raise HeaderFormatError(f"{text!r} is not an NServiceBus timestamp: {error}") from error
