"""The archive beside an error queue: where deleting failed messages moves them, and its purge by age.

``sqlqueue failed delete`` (and :func:`.failed.delete_failed`) moves the selected rows of the error queue
into ``<error table>_archive`` in the same schema (the dialect's ``object_name``: a hashed tail where the
name would pass the engine's identifier limit), one server-side statement per row in the batch's single
transaction: a row is in exactly one of the two tables at every commit. The archive keeps the queue's
columns (so a message can be read or restored as it was), ``ErrorRowVersion`` (its RowVersion in the error
queue; not named ``RowVersion``, so the archive is never listed as a queue) and ``ArchivedAt`` (UTC by the
database clock). :meth:`ErrorArchive.purge` deletes what was archived longer ago than a retention, in
batches like ``purge_expired``.

The table is made where the error queue is provisioned (``sqlqueue create``, ``ProvisionQueuesOperator``,
``sqlqueue script``), and on first use if missing: that needs the provisioning role's right to create a
table in the error queue's schema. A role without it gets :class:`PermissionDenied` naming the fix before
anything is deleted.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from ..model.address import QueueAddress
from ..model.errors import ConfigurationError, PermissionDenied
from .queue.provisioning import begin_creation, create_racing, first_value, table_exists, table_exists_on

if TYPE_CHECKING:
    from ..dialects.base import Dialect
    from .queue import TableQueue

__all__ = ["ARCHIVE_SUFFIX", "ErrorArchive", "archive_address", "archive_script", "parse_age"]

log = logging.getLogger(__name__)

ARCHIVE_SUFFIX = "archive"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def archive_address(dialect: Dialect, error_queue: QueueAddress) -> QueueAddress:
    """``<error table>_archive`` beside the (resolved) error queue's address."""
    return error_queue.with_table(dialect.object_name(error_queue, ARCHIVE_SUFFIX))


def archive_script(dialect: Dialect, error_queue: QueueAddress) -> str:
    """The DDL that :meth:`ErrorArchive.create` runs for the archive of ``error_queue`` (a resolved
    address), as a script a DBA can review and run; no database needed."""
    address = archive_address(dialect, error_queue)
    statements = [dialect.create_archive_table(address)]
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
        return create_racing(self.transport.dialect, self._create_once, f"error archive {self.address}")

    def _create_once(self) -> bool:
        dialect, address = self.transport.dialect, self.address
        with self.transport.connection(address) as connection:
            cursor = connection.cursor()
            begin_creation(cursor, dialect, address, self.transport.current_catalog())
            created = not table_exists_on(cursor, dialect, address)
            if created:
                cursor.execute(dialect.create_archive_table(address), ())
            for index in dialect.archive_indexes(address):
                cursor.execute(*dialect.index_exists(address, index.name))
                if not first_value(cursor, dialect):
                    cursor.execute(index.create, ())
            connection.commit()
        if created:
            log.info("created the archive %s of error queue %s", address, self.error_queue.address)
        return created

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
            cursor.execute(self.transport.dialect.count_archive(self.address), ())
            value = first_value(cursor, self.transport.dialect)
            connection.commit()
        return int(value or 0)

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
        statement = dialect.purge_archive_batch(self.address)
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
