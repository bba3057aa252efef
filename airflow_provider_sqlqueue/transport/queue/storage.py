"""A queue table's storage: what deleted rows left behind (read), and the plain vacuum that gives it back.

On PostgreSQL a deleted row keeps its space until a vacuum removes it; queue tables are created so that
autovacuum does that soon after a drain, and a maintenance job may also vacuum them itself. SQLite reuses
freed pages and SQL Server's ghost cleanup frees them, so on those engines both operations only say so.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...dialects.base import TableStorage
from ...model.address import QueueAddress
from ...model.errors import PermissionDenied, QueueNotFound
from .provisioning import table_exists_on

if TYPE_CHECKING:
    from ..roles import StorageTransport

__all__ = ["VacuumResult", "table_storage", "vacuum_table"]

log = logging.getLogger(__package__)


@dataclass(frozen=True)
class VacuumResult:
    """What :func:`vacuum_table` did: ``ran`` False (with ``note`` saying why) where the engine needs no
    vacuum; the table's size with its indexes before and after where it ran."""

    queue: str
    ran: bool
    note: str = ""
    bytes_before: int | None = None
    bytes_after: int | None = None


def table_storage(transport: StorageTransport, address: QueueAddress) -> TableStorage:
    """The table's storage figures and maintenance advice (read-only; the runtime role may run it)."""
    with transport.connection(address) as connection:
        dialect = transport.dialect  # read once connected: the engine's variant is known from then on
        cursor = connection.cursor()
        if not table_exists_on(cursor, dialect, address):
            raise QueueNotFound(f"queue {address} does not exist")
        storage = dialect.table_storage(cursor, address)
        connection.commit()
    return storage


def vacuum_table(transport: StorageTransport, address: QueueAddress) -> VacuumResult:
    """Run a plain ``VACUUM`` (never ``FULL``: it would lock out receivers while it rewrites the table) on
    the queue table, outside any transaction, as VACUUM requires.

    It removes the dead rows, makes their space reusable, and gives back empty pages at the end of the
    table, which after a drain is nearly all of it; receivers and senders keep working meanwhile (giving
    the pages back needs a moment's exclusive lock, which the vacuum skips if they hold the table). Needs
    the table's owner (or, on PostgreSQL 17, the MAINTAIN privilege): PermissionDenied otherwise.
    """
    with transport.connection(address) as connection:
        dialect = transport.dialect  # read once connected: the engine's variant is known from then on
        cursor = connection.cursor()
        if not table_exists_on(cursor, dialect, address):
            raise QueueNotFound(f"queue {address} does not exist")
        statement, check = dialect.optional_sql("vacuum_table", address), dialect.vacuum_check(address)
        rows = []
        if statement is not None and check is not None:
            cursor.execute(*check)
            rows = dialect.fetch_rows(cursor)
        connection.commit()
    if statement is None or check is None:
        return VacuumResult(str(address), ran=False, note=dialect.storage_note)
    if not rows:
        raise QueueNotFound(f"queue {address} does not exist")
    allowed, bytes_before = rows[0]
    if not allowed:
        raise PermissionDenied(
            f"this role may not VACUUM queue {address}: it needs the table's owner (the role that created "
            "the queues; on PostgreSQL 17, or the MAINTAIN privilege); run the vacuum with that connection"
        )
    connection = transport.new_connection()
    try:
        connection.autocommit = True
        cursor = connection.cursor()
        try:
            cursor.execute(statement, ())
        except Exception as error:
            translated = dialect.classify(error, address)
            if translated is None:
                raise
            raise translated from error
        cursor.execute(*check)
        after = dialect.fetch_rows(cursor)
        bytes_after = int(after[0][1]) if after else None
    finally:
        with contextlib.suppress(Exception):  # already gone
            connection.close()
    log.info("vacuumed queue %s: %d bytes before, %s after", address, bytes_before, bytes_after)
    return VacuumResult(str(address), ran=True, bytes_before=int(bytes_before), bytes_after=bytes_after)
