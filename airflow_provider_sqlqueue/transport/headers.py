"""Message headers: the NServiceBus header names and the JSON text stored in the ``Headers`` column.

The stored form is a flat JSON object of string keys to string or null values, written the way the .NET
transport writes it so that both can share a queue. The reference serializes a ``Dictionary<string, string>``
with System.Text.Json and ``JavaScriptEncoder.UnsafeRelaxedJsonEscaping``, then rewrites every ``/`` as
``\\/`` (NServiceBus.SqlServer ``src/NServiceBus.Transport.Sql.Shared/Queuing/DictionarySerializer.cs``).
That encoder writes a BMP character as-is only when its Unicode category is a letter, mark, number,
punctuation, symbol or format character (``Cf``), or it is U+0020; everything else (controls including
U+007F-U+009F, other spaces such as U+00A0, the separators U+2028/U+2029, private use and unassigned code
points) becomes ``\\uXXXX`` with upper-case hex, ``"`` and ``\\`` and the common controls their short
escapes, and characters outside the BMP surrogate pairs. Reading accepts both ``/`` and ``\\/`` and any valid
JSON escaping.

Messages passed on (forwarded, moved to the error queue, audited) keep their stored text:
:func:`edit_headers_text` changes only the members it must, as the reference's dictionary would.
"""

from __future__ import annotations

import json
import re
import time
import unicodedata
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

import msgspec

from ..model.errors import HeaderFormatError

__all__ = [
    "FailureHeaders",
    "Headers",
    "decode_headers",
    "decode_headers_exact",
    "default_headers_text",
    "default_headers_texts",
    "edit_headers_text",
    "encode_headers",
    "format_time_span",
    "format_timestamp",
    "parse_timestamp",
    "read_header_map",
    "timestamp_or_none",
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
EXCEPTION_TYPE = f"{EXCEPTION_INFO_PREFIX}ExceptionType"
EXCEPTION_MESSAGE = f"{EXCEPTION_INFO_PREFIX}Message"
FORWARD_DESTINATION = "NServiceBus.SqlServer.ForwardDestination"
PROCESSING_ENDPOINT = "NServiceBus.ProcessingEndpoint"
PROCESSING_MACHINE = "NServiceBus.ProcessingMachine"
PROCESSING_STARTED = "NServiceBus.ProcessingStarted"
PROCESSING_ENDED = "NServiceBus.ProcessingEnded"
DELAYED_RETRIES = "NServiceBus.Retries"
IMMEDIATE_RETRIES = "NServiceBus.FLRetries"
NSERVICEBUS_VERSION = "NServiceBus.Version"
CONTROL_MESSAGE = "NServiceBus.ControlMessage"
RETURN_MESSAGE_ERROR_CODE = "NServiceBus.ReturnMessage.ErrorCode"

Headers = dict[str, str | None]

_TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S:%f Z"
_json_decoder = json.JSONDecoder()
_json_scan = _json_decoder.scan_once
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _escaped_bmp_ranges() -> str:
    """The non-ASCII BMP characters .NET's relaxed encoder escapes, as a regex class body of ranges.

    Taken from this Python's Unicode database (``unicodedata.unidata_version``); .NET takes its table from
    its own runtime's Unicode version, so a BMP character assigned in between is escaped by one side only
    (either form reads back the same).
    """
    ranges: list[str] = []
    start = -1
    for code in range(0x7F, 0x10001):
        category = unicodedata.category(chr(code)) if code < 0x10000 else "Cs"
        escaped = category != "Cs" and category[0] not in "LMNPS" and category != "Cf"
        if escaped and start < 0:
            start = code
        elif not escaped and start >= 0:
            ranges.append(f"\\u{start:04x}-\\u{code - 1:04x}")
            start = -1
    return "".join(ranges)


_ESCAPED_BMP = re.compile(f"[{_escaped_bmp_ranges()}]")
_ESCAPE_AFTER_DUMPS = re.compile(
    r"(\\\\)|\\u([0-9a-f]{4})|/|([\U00010000-\U0010FFFF])|(" + _ESCAPED_BMP.pattern + ")"
)


def _dotnet_escape(match: re.Match[str]) -> str:
    escaped_backslash, lower_hex, astral, escaped_bmp = match.groups()
    if escaped_backslash:
        return escaped_backslash
    if lower_hex:
        return "\\u" + lower_hex.upper()
    if escaped_bmp:
        return f"\\u{ord(escaped_bmp):04X}"
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
    if text.isascii() and "\\u" not in text and "\x7f" not in text:
        return text.replace("/", "\\/")  # the common case: only '/' differs from .NET's bytes
    if _LONE_SURROGATE.search(text):
        raise HeaderFormatError("headers contain a lone surrogate, which is not valid Unicode text")
    return _ESCAPE_AFTER_DUMPS.sub(_dotnet_escape, text)


_WHITESPACE = re.compile(r"[ \t\n\r]*")


def _member_spans(text: str) -> tuple[int, list[tuple[str, int, int, int]]]:
    """Where the ``}`` closing the stored object is, and each member's key, start, value start and end."""
    skip = _WHITESPACE.match
    members: list[tuple[str, int, int, int]] = []
    try:
        index = skip(text, 0).end()
        if text[index] != "{":
            raise ValueError("not a JSON object")
        index = skip(text, index + 1).end()
        if text[index] == "}":
            return index, members
        while True:
            if text[index] != '"':
                raise ValueError(f"expected a header name at {index}")
            key, after_key = json.decoder.scanstring(text, index + 1)
            colon = skip(text, after_key).end()
            if text[colon] != ":":
                raise ValueError(f"expected ':' at {colon}")
            value_start = skip(text, colon + 1).end()
            _, value_end = _json_scan(text, value_start)
            members.append((key, index, value_start, value_end))
            index = skip(text, value_end).end()
            if text[index] == "}":
                return index, members
            if text[index] != ",":
                raise ValueError(f"expected ',' or '}}' at {index}")
            index = skip(text, index + 1).end()
    except (IndexError, StopIteration, ValueError) as error:
        raise HeaderFormatError(f"headers are not a JSON object: {error}") from error


def edit_headers_text(
    text: str, changes: Mapping[str, str | None] | None = None, removed: Iterable[str] = ()
) -> str:
    """Stored header text with ``removed`` headers taken out and ``changes`` set, every other member
    left exactly as stored (its escaping, ``/`` or ``\\/``, and position).

    The reference does these edits on a .NET ``Dictionary<string, string>`` read from the text and
    serializes it again; the order follows that dictionary's: a header set again keeps its place, a
    removed one leaves a hole, and new headers fill the holes (the last made first), then go at the end.
    New values are escaped as :func:`encode_headers` escapes them. Without a removal the separators and
    whitespace of the stored text are kept too; with one the members are joined by ``,`` as .NET writes
    them. A header stored twice is kept once, in its first place with its last value, as .NET reads it.
    """
    changes = changes or {}
    removed = [key for key in removed if key not in changes]
    if not changes and not removed:
        return text
    if not text.strip():
        text = "{}"
    close, members = _member_spans(text)
    new_values = {key: encode_headers({key: value})[1:-1] for key, value in changes.items()}
    if len(members) == len({member[0] for member in members}) and not any(
        member[0] in removed for member in members
    ):
        return _edit_in_place(text, close, members, new_values)
    first_of: dict[str, int] = {}
    slots: list[str | None] = []
    for key, start, value_start, value_end in members:
        slot = first_of.get(key)
        if slot is None:
            first_of[key] = len(slots)
            slots.append(text[start:value_end])
        else:  # a repeated name: the first place, the last value
            _, first_start, first_value_start, _ = next(m for m in members if m[0] == key)
            slots[slot] = text[first_start:first_value_start] + text[value_start:value_end]
    holes: list[int] = []
    for key in removed:
        slot = first_of.pop(key, None)
        if slot is not None:
            slots[slot] = None
            holes.append(slot)
    for key, member in new_values.items():
        slot = first_of.get(key)
        if slot is None:
            slot = holes.pop() if holes else len(slots)
            if slot == len(slots):
                slots.append(None)
            first_of[key] = slot
        slots[slot] = member
    opening = text.index("{")
    return text[: opening + 1] + ",".join(slot for slot in slots if slot is not None) + text[close:]


def _edit_in_place(
    text: str, close: int, members: list[tuple[str, int, int, int]], new_values: dict[str, str]
) -> str:
    """Set ``new_values`` on text whose names are distinct and none removed: values replaced where they
    stand, new members after the last one, every other character of ``text`` kept."""
    place_of = {key: (start, value_end) for key, start, _, value_end in members}
    replaced = sorted((*place_of[key], member) for key, member in new_values.items() if key in place_of)
    appended = [member for key, member in new_values.items() if key not in place_of]
    pieces: list[str] = []
    done = 0
    for start, end, member in replaced:
        pieces += [text[done:start], member]
        done = end
    if appended:
        insert_at = max(done, members[-1][3] if members else close)
        pieces += [text[done:insert_at], ("," if members else "") + ",".join(appended)]
        done = insert_at
    pieces.append(text[done:])
    return "".join(pieces)


# The text of the five standard headers of a plain send around its three values (see below).
_DEFAULT_HEAD = f'{{"{MESSAGE_ID}":"'
_DEFAULT_AFTER_ID = f'","{CORRELATION_ID}":"'
_DEFAULT_AFTER_CORRELATION = f'","{MESSAGE_INTENT}":"Send","{CONVERSATION_ID}":"'
_DEFAULT_AFTER_CONVERSATION = f'","{TIME_SENT}":"'


def default_headers_text(message_id: str, time_sent: str, conversation_id: str) -> str:
    """The stored JSON of the five standard headers of a message sent without headers of its own.

    The same text :func:`encode_headers` writes for ``{MessageId: id, CorrelationId: id, MessageIntent:
    "Send", ConversationId: conversation_id, TimeSent: time_sent}`` in that order, for Ids and a time
    that need no escaping (UUIDs' text and :func:`time_sent_now`); built without the general encoder
    because every plain send pays it.
    """
    return default_headers_texts((message_id,), time_sent, (conversation_id,))[0]


def default_headers_texts(
    message_ids: Iterable[str], time_sent: str, conversation_ids: Iterable[str]
) -> list[str]:
    """:func:`default_headers_text` of many messages sent at one time, in one comprehension: a batch send
    of bare bodies pays this for every message, and a call per message cost more than the text."""
    head, after_id, after_correlation = _DEFAULT_HEAD, _DEFAULT_AFTER_ID, _DEFAULT_AFTER_CORRELATION
    tail = f'{_DEFAULT_AFTER_CONVERSATION}{time_sent}"}}'
    return [
        f"{head}{message_id}{after_id}{message_id}{after_correlation}{conversation_id}{tail}"
        for message_id, conversation_id in zip(message_ids, conversation_ids, strict=True)
    ]


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


read_header_map = msgspec.json.Decoder(dict[str, str | None]).decode
"""msgspec's typed read of a header map: ValueError for anything it refuses, which
:func:`decode_headers` then decides with the reason (see there)."""


def decode_headers(text: str | bytes | None) -> Headers:
    """Parse stored header text; raise :class:`HeaderFormatError` saying why it is not a header map.

    An empty string is an empty map, as in the reference. NULL is not: this transport always writes
    headers, so NULL means another system wrote the row, and it is treated as poison.

    Every received message pays this, so a map is first read by msgspec's typed decoder, which parses
    and checks the value types in one pass, in C, for much less than ``json`` costs. Whatever it refuses (and
    what it cannot read the way ``json`` does, such as escaped lone surrogates) goes through
    :func:`decode_headers_exact`, which decides and says why.
    """
    if type(text) is str:
        try:
            return read_header_map(text)
        except ValueError:
            pass
    return decode_headers_exact(text)


def decode_headers_exact(text: str | bytes | None) -> Headers:
    """:func:`decode_headers` through the standard library's ``json`` alone: the authority on what a
    header map is and on the reason a text is not one."""
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


def format_time_span(span: timedelta) -> str:
    """A duration as .NET's ``TimeSpan.ToString()`` writes it (the constant ``c`` format), which is how
    NServiceBus Core writes ``NServiceBus.TimeToBeReceived``: ``[-][d.]hh:mm:ss[.fffffff]``, the days only
    when there are any, the seven-digit fraction (100 ns ticks) only when it is not zero."""
    ticks = (span // timedelta(microseconds=1)) * 10
    sign = "-" if ticks < 0 else ""
    seconds, fraction = divmod(abs(ticks), 10_000_000)
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    days, hour = divmod(hours, 24)
    text = f"{sign}{f'{days}.' if days else ''}{hour:02d}:{minute:02d}:{second:02d}"
    return f"{text}.{fraction:07d}" if fraction else text


def parse_timestamp(text: str) -> datetime:
    """Parse the NServiceBus timestamp format into an aware UTC datetime."""
    try:
        return datetime.strptime(text, _TIMESTAMP_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError as error:
        raise HeaderFormatError(f"{text!r} is not an NServiceBus timestamp: {error}") from error


def timestamp_or_none(text: str | None) -> datetime | None:
    """A timestamp header read for display: None when it is absent or unreadable."""
    if not text:
        return None
    try:
        return parse_timestamp(text)
    except HeaderFormatError:
        return None


class FailureHeaders:
    """What a failed message's headers say about its failure, for every reader of a failed row (the error
    queue's, the archive's): the queue it failed in, the exception, and when."""

    headers: Mapping[str, str | None]

    @property
    def failed_queue(self) -> str | None:
        return self.headers.get(FAILED_QUEUE) or None

    @property
    def exception_type(self) -> str | None:
        return self.headers.get(EXCEPTION_TYPE)

    @property
    def exception_message(self) -> str | None:
        return self.headers.get(EXCEPTION_MESSAGE)

    @property
    def time_of_failure(self) -> datetime | None:
        return timestamp_or_none(self.headers.get(TIME_OF_FAILURE))
