"""The failed-message views of the Queues page: a group's messages and one message, bounded in what
they read and show (the limits below), as plain data for the page's templates and its JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..transport.archive import MAX_ARCHIVE_PAGE, ErrorArchive
from ..transport.browse import preview_body
from ..transport.failed import STACK_TRACE, failed_rows, group_key, show_failed
from ..transport.headers import EXCEPTION_INFO_PREFIX, FAILED_QUEUE

if TYPE_CHECKING:
    from ..transport.queue import TableQueue

__all__ = [
    "ARCHIVE_LIST_LIMIT",
    "BODY_PREVIEW_BYTES",
    "GROUP_LIST_LIMIT",
    "MAX_ARCHIVE_LIST",
    "MAX_GROUP_LIST",
    "archive_page",
    "failed_message",
    "group_messages",
]

GROUP_LIST_LIMIT = 50  # messages of a group listed by default; at most MAX_GROUP_LIST
MAX_GROUP_LIST = 500
GROUP_SCAN_ROWS = 10_000  # error-queue rows (headers only) a group's listing looks through at most
ARCHIVE_LIST_LIMIT = 50  # archived messages listed per page by default; at most MAX_ARCHIVE_LIST
MAX_ARCHIVE_LIST = MAX_ARCHIVE_PAGE
BODY_PREVIEW_BYTES = 4096  # as 'sqlqueue failed show'
MAX_HEADER_CHARS = 4096  # a header value longer than this is cut on the page
MAX_STACK_TRACE_CHARS = 65_536


def _clip(text: str | None, limit: int) -> str | None:
    return text if text is None or len(text) <= limit else text[:limit] + " …"


def _stamp(moment: Any) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def group_messages(error_queue: TableQueue, group: str, limit: int, page: int = 1) -> dict[str, Any]:
    """Page ``page`` (``limit`` messages, oldest first) of failed-message group ``group`` among the oldest
    GROUP_SCAN_ROWS rows of the error queue (headers only, in keyset pages): Id, queue, exception and time
    of failure of each; ``total`` the group's messages among the rows read, exact (``total_exact``) when
    every row of the error queue was read; ``more`` when the group may hold messages after this page (a
    next page, or rows left unread); ``read`` how many rows were looked through; ``failed_queue``,
    ``exception_type`` and ``exception_message`` the group's own (from its first message)."""
    first = (page - 1) * limit
    found: list[Any] = []
    total = 0
    read = 0
    sample = None
    complete = True
    for row in failed_rows(error_queue, up_to=None):
        if read >= GROUP_SCAN_ROWS:
            complete = False
            break
        read += 1
        if row.group_key == group:
            sample = sample or row
            if first <= total < first + limit:
                found.append(row)
            total += 1
    return {
        "error_queue": str(error_queue.address),
        "group": group,
        "failed_queue": sample.failed_queue if sample else None,
        "exception_type": sample.exception_type if sample else None,
        "exception_message": _clip(sample.exception_message, MAX_HEADER_CHARS) if sample else None,
        "page": page,
        "limit": limit,
        "total": total,
        "total_exact": complete,
        "messages": [
            {
                "id": row.id,
                "failed_queue": row.failed_queue,
                "exception_type": row.exception_type,
                "exception_message": _clip(row.exception_message, MAX_HEADER_CHARS),
                "time_of_failure": _stamp(row.time_of_failure),
            }
            for row in found
        ],
        "more": first + limit < total or not complete,
        "read": read,
    }


def failed_message(error_queue: TableQueue, message_id: str) -> dict[str, Any] | None:
    """One failed message for people: its headers (each cut at MAX_HEADER_CHARS), its stack trace
    (``NServiceBus.ExceptionInfo.StackTrace``, cut at MAX_STACK_TRACE_CHARS) and a preview of its body (the
    first BODY_PREVIEW_BYTES, hex when the body is not UTF-8); None when the error queue holds no such Id."""
    found = show_failed(error_queue, message_id)
    if not found:
        return None
    message = found[0]
    headers = message.headers
    return {
        "error_queue": str(error_queue.address),
        "id": message.id,
        "group": group_key(
            headers.get(FAILED_QUEUE) or None,
            headers.get(f"{EXCEPTION_INFO_PREFIX}ExceptionType"),
            headers.get(f"{EXCEPTION_INFO_PREFIX}Message"),
        ),
        "headers": {k: _clip(v, MAX_HEADER_CHARS) for k, v in headers.items() if k != STACK_TRACE},
        "stack_trace": _clip(headers.get(STACK_TRACE), MAX_STACK_TRACE_CHARS),
        "header_error": message.header_error,
        "raw_headers": _clip(message.raw_headers, MAX_HEADER_CHARS) if message.header_error else None,
        **preview_body(message.body, BODY_PREVIEW_BYTES).as_dict(),
    }


def archive_page(error_queue: TableQueue, limit: int, page: int = 1) -> dict[str, Any]:
    """Page ``page`` (``limit`` messages, newest archived first) of the archive beside ``error_queue``: Id,
    queue, exception, time of failure, when it was archived and the body's size of each (one bounded read,
    headers only); ``more`` when older archived messages follow; ``exists`` False where nothing was ever
    archived (no table yet)."""
    archive = ErrorArchive.of(error_queue)
    exists = archive.exists()
    read = archive.browse((page - 1) * limit, limit) if exists else None
    messages = read.messages if read is not None else []
    return {
        "error_queue": str(error_queue.address),
        "archive": str(archive.address),
        "exists": exists,
        "page": page,
        "limit": limit,
        "more": bool(read and read.more),
        "messages": [
            {
                "id": message.id,
                "failed_queue": message.failed_queue,
                "exception_type": message.exception_type,
                "exception_message": _clip(message.exception_message, MAX_HEADER_CHARS),
                "time_of_failure": _stamp(message.time_of_failure),
                "archived_at": _stamp(message.archived_at),
                "body_size": message.body_size,
                "header_error": message.header_error,
            }
            for message in messages
        ],
    }
