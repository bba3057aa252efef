"""The archive beside an error queue: where deleting failed messages moves them, and its purge by age.

``sqlqueue failed delete`` (and :func:`.failed.delete_failed`) moves the selected rows of the error queue
into ``<error table>_archive`` in the same schema (the dialect's ``object_name``: a hashed tail where the
name would pass the engine's identifier limit), one server-side statement per row in the batch's single
transaction: a row is in exactly one of the two tables at every commit. The archive keeps the queue's
columns (so a message can be read or restored as it was), ``ErrorRowVersion`` (its RowVersion in the error
queue; not named ``RowVersion``, so the archive is never listed as a queue) and ``ArchivedAt`` (UTC by the
database clock). :meth:`ErrorArchive.purge` deletes what was archived longer ago than a retention, in
batches like ``purge_expired``.

:meth:`ErrorArchive.browse` reads one page of it, newest archived first, with each message's failure
headers and its body's size (bodies stay on the server); :meth:`ErrorArchive.restore` moves archived
messages back into the error queue by Id, the reverse of the delete's move: one server-side statement per
Id, all in one transaction, so each row is in exactly one of the two tables at every commit. A restored
message keeps its Id, headers and body; it gets a new RowVersion in the error queue, from where it can be
retried or deleted again.

The table is made where the error queue is provisioned (``sqlqueue create``, ``ProvisionQueuesOperator``,
``sqlqueue script``), and on first use if missing: that needs the provisioning role's right to create a
table in the error queue's schema. A role without it gets :class:`PermissionDenied` naming the fix before
anything is deleted.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..model.address import QueueAddress
from ..model.errors import ConfigurationError, HeaderFormatError, PermissionDenied, QueueNotFound
from . import headers as h
from .browse import canonical_id, column_text
from .queue.provisioning import create_side_table, first_value, table_exists
from .queue.received_rows import as_utc

if TYPE_CHECKING:
    from ..dialects.base import Dialect
    from .queue import TableQueue

__all__ = [
    "ARCHIVE_SUFFIX",
    "MAX_ARCHIVE_PAGE",
    "MAX_RESTORE",
    "ArchivePage",
    "ArchivedMessage",
    "ErrorArchive",
    "RestoreOutcome",
    "archive_address",
    "archive_script",
    "parse_age",
]

log = logging.getLogger(__name__)

ARCHIVE_SUFFIX = "archive"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# A page is read whole into memory (headers only), and an offset is read past by the server on every page.
MAX_ARCHIVE_PAGE = 500
MAX_ARCHIVE_OFFSET = 1_000_000
# The Ids of one restore, all in one transaction.
MAX_RESTORE = 10_000


@dataclass(frozen=True)
class ArchivedMessage(h.FailureHeaders):
    """One row of an archive as :meth:`ErrorArchive.browse` reads it: the body's size, not the body.

    ``headers`` is empty and ``header_error`` says why when the stored headers cannot be parsed;
    ``raw_headers`` is the stored text either way. ``error_row_version`` is the row's RowVersion in the
    error queue when it was archived.
    """

    id: str
    correlation_id: str | None
    reply_to_address: str | None
    headers: dict[str, str | None]
    raw_headers: str
    header_error: str | None
    body_size: int
    error_row_version: int
    archived_at: datetime | None
    expires: datetime | None


@dataclass(frozen=True)
class ArchivePage:
    """One page of an archive, newest archived first: ``offset`` rows before it, and ``more`` says older
    rows follow."""

    messages: list[ArchivedMessage]
    offset: int
    size: int
    more: bool


@dataclass
class RestoreOutcome:
    """What :meth:`ErrorArchive.restore` did: the Ids it moved back (``restored``), how many rows that was
    (``moved``: a message archived twice has two), and the Ids the archive did not hold (``unknown``)."""

    restored: list[str] = field(default_factory=list)
    moved: int = 0
    unknown: list[str] = field(default_factory=list)


def archive_ids(ids: Sequence[str]) -> list[str]:
    """``ids`` as canonical UUID text, each once, in the order given; a value that is no UUID is refused
    before anything moves."""
    if isinstance(ids, str):
        raise ConfigurationError("ids is a sequence of message Ids, not one string")
    canonical: list[str] = []
    for value in ids:
        try:
            text = str(uuid.UUID(str(value)))
        except ValueError:
            raise ConfigurationError(
                f"message Id {value!r} is not a UUID; copy it from 'sqlqueue failed archive'"
            ) from None
        if text not in canonical:
            canonical.append(text)
    if len(canonical) > MAX_RESTORE:
        raise ConfigurationError(f"restore at most {MAX_RESTORE:,} Ids at once, not {len(canonical):,}")
    return canonical


def _archived_message(row: Sequence[Any]) -> ArchivedMessage:
    message_id, correlation_id, reply_to, raw_headers, body_size, row_version, archived_at, expires = row
    raw = column_text(raw_headers)
    try:
        headers, problem = dict(h.decode_headers(raw)), None
    except HeaderFormatError as error:
        headers, problem = {}, str(error)
    return ArchivedMessage(
        id=canonical_id(message_id),
        correlation_id=correlation_id,
        reply_to_address=reply_to,
        headers=headers,
        raw_headers=raw,
        header_error=problem,
        body_size=int(body_size or 0),
        error_row_version=int(row_version),
        archived_at=as_utc(archived_at),
        expires=as_utc(expires),
    )


def archive_address(dialect: Dialect, error_queue: QueueAddress) -> QueueAddress:
    """``<error table>_archive`` beside the (resolved) error queue's address."""
    return error_queue.with_table(dialect.object_name(error_queue, ARCHIVE_SUFFIX))


def archive_script(dialect: Dialect, error_queue: QueueAddress) -> str:
    """The DDL that :meth:`ErrorArchive.create` runs for the archive of ``error_queue`` (a resolved
    address), as a script a DBA can review and run; no database needed."""
    address = archive_address(dialect, error_queue)
    statements = [dialect.sql("create_archive_table", address)]
    statements += [index.create for index in dialect.archive_indexes(address)]
    return "".join(f"{dialect.display_sql(statement)};\n" for statement in statements)


def parse_age(text: str | timedelta | int) -> timedelta:
    """A retention: a timedelta, a number of seconds, or text such as ``30d``, ``12h``, ``90m``, ``2w``."""
    if isinstance(text, timedelta):
        age = text
    elif isinstance(text, int) and not isinstance(text, bool):
        age = timedelta(seconds=text)
    elif isinstance(text, str) and text[:-1].isdigit() and text[-1:].lower() in _UNITS:
        age = timedelta(seconds=int(text[:-1]) * _UNITS[text[-1].lower()])
    else:
        raise ConfigurationError(f"an age is a number and a unit (s, m, h, d or w), e.g. 30d, not {text!r}")
    if age < timedelta(0):
        raise ConfigurationError(f"an age cannot be negative, not {text!r}")
    return age


class ErrorArchive:
    """The archive table of one error queue. Obtain it with :meth:`ErrorArchive.of`."""

    def __init__(self, error_queue: TableQueue) -> None:
        self.error_queue = error_queue
        self.transport = error_queue.transport
        self.address = archive_address(self.transport.dialect, error_queue.address)

    @classmethod
    def of(cls, error_queue: TableQueue) -> ErrorArchive:
        return cls(error_queue)

    def __repr__(self) -> str:
        return f"<ErrorArchive {self.address} of {self.error_queue.address}>"

    # ---- provisioning --------------------------------------------------------------------------
    def create(self) -> bool:
        """Create the table and its ArchivedAt index if missing (safe from many processes); True if
        created. Needs the right to create a table in the error queue's schema."""
        dialect, address = self.transport.dialect, self.address
        return create_side_table(
            self.transport,
            address,
            dialect.sql("create_archive_table", address),
            f"the archive {address} of error queue {self.error_queue.address}",
            dialect.archive_indexes(address),
        )

    def create_script(self) -> str:
        """The DDL :meth:`create` runs for a new archive, as a script a DBA can review and run."""
        return archive_script(self.transport.dialect, self.error_queue.address)

    def exists(self) -> bool:
        return table_exists(self.transport, self.address)

    def ensure(self) -> None:
        """Create the archive if it is missing; a role that may not gets a PermissionDenied naming the fix."""
        if self.exists():
            return
        try:
            self.create()
        except PermissionDenied as error:
            raise PermissionDenied(
                f"the archive {self.address} of error queue {self.error_queue.address} does not exist and "
                f"this role may not create it ({error}). Nothing was deleted. Create it with the "
                f"provisioning role (`sqlqueue create {self.error_queue.address} --error-queue "
                f"{self.error_queue.address}`, the DDL of `sqlqueue script`, or ProvisionQueuesOperator), "
                "or delete for good with permanent=True (`--permanent`)"
            ) from error

    # ---- reading and purging -------------------------------------------------------------------
    def count(self) -> int:
        with self.transport.connection(self.address) as connection:
            cursor = connection.cursor()
            cursor.execute(self.transport.dialect.sql("count_archive", self.address), ())
            value = first_value(cursor, self.transport.dialect)
            connection.commit()
        return int(value or 0)

    def browse(self, offset: int = 0, limit: int = 50) -> ArchivePage:
        """One page of the archive, newest archived first: at most ``limit`` messages after the first
        ``offset`` (headers and body sizes, one read-only statement of ``limit + 1`` rows, so the cost is
        bounded however large the archive). A missing archive is an empty page."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_ARCHIVE_PAGE:
            raise ConfigurationError(f"limit must be an int between 1 and {MAX_ARCHIVE_PAGE}, not {limit!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_ARCHIVE_OFFSET:
            raise ConfigurationError(
                f"offset must be an int between 0 and {MAX_ARCHIVE_OFFSET:,}, not {offset!r}"
            )
        if not self.exists():
            return ArchivePage([], offset, limit, False)
        dialect = self.transport.dialect
        with self.transport.connection(self.address) as connection:
            cursor = connection.cursor()
            params = dialect.browse_archive_params(offset, limit + 1)
            cursor.execute(dialect.sql("browse_archive", self.address), params)
            rows = dialect.fetch_rows(cursor)
            connection.commit()
        messages = [_archived_message(row) for row in rows[:limit]]
        return ArchivePage(messages, offset, limit, len(rows) > limit)

    def restore(self, ids: Sequence[str]) -> RestoreOutcome:
        """Move the archived messages with these Ids back into the error queue, all in one transaction (one
        server-side statement per Id, so at every commit each row is in exactly one of the two tables; a
        failure leaves both as they were). Ids the archive does not hold (never archived, already
        restored, purged) are reported in :attr:`RestoreOutcome.unknown`, not raised."""
        wanted = archive_ids(ids)
        outcome = RestoreOutcome()
        if not wanted:
            return outcome
        if not self.error_queue.exists():
            raise QueueNotFound(f"error queue {self.error_queue.address} does not exist")
        if not self.exists():
            outcome.unknown.extend(wanted)
            return outcome
        dialect = self.error_queue.resolved_dialect()
        with self.transport.connection(self.address) as connection:
            cursor = connection.cursor()
            begin = dialect.begin_write()
            if begin:
                cursor.execute(begin, ())
            with_recoverable = self.error_queue.has_recoverable(cursor)
            statements = dialect.restore_archived(self.error_queue.address, self.address, with_recoverable)
            for message_id in wanted:
                moved = self._restore_one(cursor, dialect, statements, message_id)
                if moved:
                    outcome.restored.append(message_id)
                    outcome.moved += moved
                else:
                    outcome.unknown.append(message_id)
            connection.commit()
        log.info(
            "restored %d archived row(s) of %d message(s) from %s into %s",
            outcome.moved,
            len(outcome.restored),
            self.address,
            self.error_queue.address,
        )
        return outcome

    @staticmethod
    def _restore_one(cursor: Any, dialect: Dialect, statements: list[str], message_id: str) -> int:
        """Run the restore of one Id; how many rows it moved (the last statement's one row)."""
        value = dialect.row_id(uuid.UUID(message_id))
        for statement in statements:
            cursor.execute(statement, (value,))
        rows = dialect.fetch_rows(cursor)
        return int(rows[0][0] or 0) if rows else 0

    def purge(
        self,
        older_than: str | timedelta | int,
        batch_size: int = 10_000,
        *,
        max_batches: int | None = None,
        max_seconds: float | None = None,
    ) -> int:
        """Delete the messages archived longer ago than ``older_than`` (by the database clock), in batches
        of ``batch_size`` (each its own transaction) while batches come back full; the number deleted.
        A missing archive has nothing to purge (0)."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigurationError(f"batch_size must be a positive int, not {batch_size!r}")
        seconds = int(parse_age(older_than).total_seconds())
        if not self.exists():
            return 0
        dialect = self.transport.dialect
        statement = dialect.sql("purge_archive_batch", self.address)
        params = dialect.purge_archive_params(seconds, batch_size)
        started = time.monotonic()
        total = batches = 0
        while True:
            with self.transport.connection(self.address) as connection:
                cursor = connection.cursor()
                begin = dialect.begin_write()
                if begin:
                    cursor.execute(begin, ())
                cursor.execute(statement, params)
                if dialect.purge_returns_count():
                    rows = dialect.fetch_rows(cursor)
                    deleted = int(rows[0][0]) if rows else 0
                else:
                    deleted = max(cursor.rowcount, 0)
                connection.commit()
            total += deleted
            batches += 1
            if deleted < batch_size:
                break
            if max_batches is not None and batches >= max_batches:
                break
            if max_seconds is not None and time.monotonic() - started >= max_seconds:
                break
        log.info("purged %d archived message(s) older than %d s from %s", total, seconds, self.address)
        return total
