"""Reading the rows a receive deleted, as drivers return them: times, Ids and flags in each driver's form,
then the messages, the count of expired rows and the unreadable rows set apart."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from operator import itemgetter
from typing import Any

from ...dialects.base import Row
from ...model.errors import HeaderFormatError
from ..headers import decode_headers, read_header_map
from ..message import ReceivedMessage, read_uuid_list, uuid_from_int

__all__ = ["PoisonRow", "as_utc", "decode_rows", "display_id"]


def as_utc(value: Any) -> datetime | None:
    """A time as drivers return it (aware, naive UTC or SQLite text) as an aware UTC datetime."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime):
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)
    return None


def display_id(value: Any) -> str:
    """Ids as one canonical text in logs and errors, whatever case or type the driver returns."""
    try:
        return str(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
    except ValueError:
        return repr(value)


ROW_VERSION = itemgetter(6)  # a driver row's RowVersion, in Row's column order


def parse_id(value: Any) -> uuid.UUID:
    """An Id as a UUID, whether the driver returns one or its text (SQLite, ODBC); ValueError if neither."""
    if type(value) is str and len(value) == 36:
        digits = value.replace("-", "")
        if len(digits) == 32:
            try:
                return uuid_from_int(int(digits, 16))  # what uuid.UUID(value) does, without its checks
            except ValueError:
                pass
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def parse_text_ids(values: list[Any]) -> list[uuid.UUID] | None:
    """The Ids of a batch as UUIDs in one pass, when the driver returns them as text (SQLite, ODBC); None
    when any is not plain UUID text, and then :func:`parse_id` reads them one by one and decides.

    Joined into one JSON array, they are read by msgspec's decoder in C, for much less than parsing
    them one at a time costs. The join is exact only when no Id holds a quote or a backslash: each
    value is then one JSON string, and msgspec reads it as ``uuid.UUID`` would or refuses it.
    """
    try:
        joined = '","'.join(values)
    except TypeError:
        return None
    if joined.count('"') != 2 * (len(values) - 1) or "\\" in joined:
        return None
    try:
        return read_uuid_list(f'["{joined}"]')
    except ValueError:
        return None


def flag(value: Any) -> bool:
    """A boolean column as drivers return it: bool, 0/1, or text such as psqlODBC's '0' / '1'."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "t", "true", "y", "yes")
    return bool(value)


@dataclass(frozen=True)
class PoisonRow:
    """A row a receive deleted but cannot hand out (its headers or Id cannot be read), and why."""

    row: Row
    reason: str


def decode_rows(raw: Sequence[Any]) -> tuple[list[ReceivedMessage], int, list[PoisonRow]]:
    """Messages from the rows a receive deleted (driver rows in :class:`Row`'s column order), in
    RowVersion order; expired rows counted, unreadable ones set apart as poison."""
    messages: list[ReceivedMessage] = []
    poison: list[PoisonRow] = []
    expired = 0
    rows = sorted(raw, key=ROW_VERSION) if len(raw) > 1 else raw
    ids = parse_text_ids([row[0] for row in rows]) if rows and type(rows[0][0]) is str else None
    append, new, give = messages.append, object.__new__, object.__setattr__
    for index, row in enumerate(rows):
        row_id, correlation_id, reply_to_address, expired_flag, text, body, row_version, expires = row
        if expired_flag and flag(expired_flag):
            expired += 1
            continue
        try:
            if type(text) is str:  # decode_headers' fast path, without its call
                try:
                    headers = read_header_map(text)
                except ValueError:
                    headers = decode_headers(text)
            else:
                headers = decode_headers(text)
            message_id = parse_id(row_id) if ids is None else ids[index]
        except HeaderFormatError as error:
            poison.append(PoisonRow(Row(*row), str(error)))
            continue
        except ValueError:
            poison.append(PoisonRow(Row(*row), f"the Id {row_id!r} is not a UUID"))
            continue
        message = new(ReceivedMessage)  # the frozen dataclass's fields all at once, without its __init__
        give(
            message,
            "__dict__",
            {
                "id": message_id,
                "headers": headers,
                "body": body if type(body) is bytes else b"" if body is None else bytes(body),
                "row_version": row_version if type(row_version) is int else int(row_version),
                "expires": None if expires is None else as_utc(expires),
                "correlation_id": headers.get("NServiceBus.CorrelationId") or correlation_id,
                "reply_to_address": headers.get("NServiceBus.ReplyToAddress") or reply_to_address,
                "headers_text": text if type(text) is str else bytes(text).decode("utf-8"),
            },
        )
        append(message)
    return messages, expired, poison
