"""Read-only looks into queue tables, for tools: browse the oldest messages, count the expired ones, list
the queue tables of a schema.

Nothing here deletes, locks for long or changes a row: browsing is a plain ordered SELECT through the
engine's dialect (``Dialect.browse``), so it needs only SELECT on the table and runs beside receivers
without slowing them. What a browse shows is a snapshot; a receiver may take any of it a moment later.
How each engine treats messages in flight is in the dialects' ``browse``: SQL Server skips rows that
receivers hold (READPAST); PostgreSQL and SQLite show them until the receiver commits.

::

    from airflow_provider_sqlqueue.transport import open_transport
    from airflow_provider_sqlqueue.transport.browse import browse

    with open_transport("sqlite:///queues.db") as transport:
        for message in browse(transport.queue("orders"), 10):
            print(message.row_version, message.headers, message.body)
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..model.address import QueueAddress
from ..model.errors import ConfigurationError, HeaderFormatError, QueueNotFound
from . import headers as h
from .queue.received_rows import as_utc

if TYPE_CHECKING:
    from .connection import Transport
    from .queue import TableQueue

__all__ = [
    "MAX_BROWSE",
    "BodyPreview",
    "BrowsedMessage",
    "browse",
    "canonical_id",
    "column_text",
    "count_expired",
    "estimated_depth",
    "oldest_time_sent",
    "preview_body",
    "queue_tables",
]

MAX_BROWSE = 100_000


@dataclass(frozen=True)
class BrowsedMessage:
    """A message as it sits in its queue, not taken.

    ``headers`` is empty and ``header_error`` says why when the stored headers cannot be parsed (a receive
    would move such a row to the error queue); ``raw_headers`` is the stored text either way.
    """

    id: str
    headers: dict[str, str | None]
    body: bytes
    row_version: int
    expires: datetime | None
    raw_headers: str
    header_error: str | None = None

    @property
    def time_sent(self) -> datetime | None:
        """The sender's ``NServiceBus.TimeSent`` header as an aware UTC time, None if absent or unreadable."""
        return h.timestamp_or_none(self.headers.get(h.TIME_SENT))


@dataclass(frozen=True)
class BodyPreview:
    """The first bytes of a message body, for people: ``text`` is the body's start as text when the whole
    body is UTF-8 (``encoding`` ``utf-8``), else as hexadecimal digits (``hex``), so a binary body is never
    handed to a terminal or a page as characters."""

    text: str
    encoding: str
    size: int
    truncated: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "body": self.text,
            "body_encoding": self.encoding,
            "body_bytes": self.size,
            "body_truncated": self.truncated,
        }


def preview_body(body: bytes, limit: int) -> BodyPreview:
    """The first ``limit`` bytes of ``body`` (a UTF-8 character cut at the limit is left out)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigurationError(f"a body preview's limit must be a non-negative int, not {limit!r}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return BodyPreview(body[:limit].hex(), "hex", len(body), len(body) > limit)
    shown = text.encode("utf-8")[:limit].decode("utf-8", errors="ignore")
    return BodyPreview(shown, "utf-8", len(body), len(body) > limit)


def column_text(value: Any) -> str:
    """A text column as the driver returned it (bytes from some ODBC drivers), as text."""
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def canonical_id(value: Any) -> str:
    """An Id column as the canonical UUID text (each driver returns its own type), or as it is."""
    try:
        return str(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
    except ValueError:
        return str(value)


def _query(queue: TableQueue, statement: str, params: tuple[Any, ...]) -> list[Any]:
    with queue.transport.connection(queue.address) as connection:
        cursor = connection.cursor()
        cursor.execute(statement, params)
        rows = queue.dialect.fetch_rows(cursor)
        connection.commit()
    return rows


def _require(queue: TableQueue, error: Exception) -> None:
    """Turn "no such table" into QueueNotFound on engines whose read of a missing table says otherwise."""
    if isinstance(error, QueueNotFound) or not queue.exists():
        raise QueueNotFound(f"queue {queue.address} does not exist") from error


def browse(queue: TableQueue, max_messages: int = 10) -> list[BrowsedMessage]:
    """The oldest ``max_messages`` unexpired messages of ``queue`` in FIFO order, left where they are."""
    if isinstance(max_messages, bool) or not isinstance(max_messages, int):
        raise ConfigurationError(f"max_messages must be an int, not {type(max_messages).__name__}")
    if not 1 <= max_messages <= MAX_BROWSE:
        raise ConfigurationError(f"max_messages must be between 1 and {MAX_BROWSE:,}, not {max_messages}")
    try:
        rows = _query(queue, queue.resolved_dialect().sql("browse", queue.address), (max_messages,))
    except Exception as error:
        _require(queue, error)
        raise
    messages = []
    for row in rows:
        message_id, _correlation_id, _reply_to, raw_headers, body, row_version, expires = row
        raw = column_text(raw_headers)
        try:
            headers, problem = h.decode_headers(raw), None
        except HeaderFormatError as error:
            headers, problem = {}, str(error)
        messages.append(
            BrowsedMessage(
                id=canonical_id(message_id),
                headers=dict(headers),
                body=b"" if body is None else bytes(body),
                row_version=int(row_version),
                expires=as_utc(expires),
                raw_headers=raw,
                header_error=problem,
            )
        )
    return messages


def estimated_depth(queue: TableQueue) -> int:
    """``queue``'s peek estimate (newest RowVersion - oldest + 1, an upper bound of its messages) by a plain
    read: two index edges, whatever the queue's length, with no row lock taken (so nothing is written and
    SELECT is enough), unlike :meth:`TableQueue.peek_estimate`, which skips rows receivers hold."""
    try:
        rows = _query(queue, queue.dialect.without_row_locks("peek_estimate", queue.address), ())
    except Exception as error:
        _require(queue, error)
        raise
    return int(rows[0][0] or 0) if rows else 0


def oldest_time_sent(queue: TableQueue) -> datetime | None:
    """When the oldest unexpired message of ``queue`` was sent (its ``NServiceBus.TimeSent`` header), read
    from that one row's RowVersion and Headers, never its body; None when the queue is empty or the header
    is absent or unreadable."""
    try:
        rows = _query(queue, queue.resolved_dialect().sql("oldest_headers", queue.address), ())
    except Exception as error:
        _require(queue, error)
        raise
    if not rows:
        return None
    try:
        headers = h.decode_headers(column_text(rows[0][1]))
    except HeaderFormatError:
        return None
    return h.timestamp_or_none(dict(headers).get(h.TIME_SENT))


def count_expired(queue: TableQueue) -> int:
    """How many messages of ``queue`` have expired and wait for a receive or a purge to delete them."""
    try:
        rows = _query(queue, queue.resolved_dialect().sql("count_expired", queue.address), ())
    except Exception as error:
        _require(queue, error)
        raise
    return int(rows[0][0] or 0) if rows else 0


def queue_tables(transport: Transport, schema: str | None = None) -> list[QueueAddress]:
    """The tables of ``schema`` (default: the transport's default schema) with a queue table's columns."""
    dialect = transport.dialect
    schema = schema or transport.default_schema or dialect.default_schema
    statement, params = dialect.queue_tables(schema)
    with transport.connection() as connection:
        cursor = connection.cursor()
        cursor.execute(statement, tuple(params))
        rows = dialect.fetch_rows(cursor)
        connection.commit()
    return [QueueAddress(str(table), None if found is None else str(found)) for found, table in rows]
