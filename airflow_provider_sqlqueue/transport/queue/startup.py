"""What a receiver does to its input queue once, when it starts: the optional purge of expired messages,
then a look at the table's schema, as the reference's receivers do.

The look only logs: a table that is slower than it could be still works, so nothing here stops a start. The
purge is opt-in (the reference made it so after it deadlocked with receives); a deadlock ends it with a
warning and the start goes on, since receives drop the expired messages they reach anyway.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ...dialects.base import TableOptions
from ...model.errors import ConfigurationError

if TYPE_CHECKING:
    from .table_queue import TableQueue

__all__ = ["DEFAULT_PURGE_BATCH_SIZE", "inspect_at_start", "purge_expired_at_start"]

# The log lines keep the name of the package's other modules: airflow_provider_sqlqueue.transport.queue.
log = logging.getLogger(__package__)

DEFAULT_PURGE_BATCH_SIZE = 10_000  # the reference's PurgeBatchSize default


def check_purge_batch_size(batch_size: object) -> int:
    """``batch_size`` as a positive int, or a :class:`ConfigurationError` saying what it must be."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigurationError(f"purge_batch_size must be a positive int, not {batch_size!r}")
    return batch_size


def purge_expired_at_start(queue: TableQueue, batch_size: int = DEFAULT_PURGE_BATCH_SIZE) -> int:
    """Delete the queue's expired messages in batches until a batch comes back short; return how many.

    A deadlock (the purge chosen as the victim) is logged as a warning and ends the purge: the batches
    already committed stay done. Any other failure is logged with the count so far and raised.
    """
    total = 0
    try:
        while True:
            deleted = queue.purge_expired_batch(batch_size)
            total += deleted
            if deleted < batch_size:
                break
    except Exception as error:
        if queue.dialect.is_deadlock(error.__cause__ or error):
            log.warning(
                "purging expired messages from %s at start was chosen as a deadlock victim after %d were "
                "deleted; starting anyway (receives drop the expired messages they reach): %s",
                queue.address,
                total,
                error,
            )
            return total
        log.warning(
            "purging expired messages from %s at start failed after %d were deleted", queue.address, total
        )
        raise
    log.info("purged %d expired message(s) from %s at start", total, queue.address)
    return total


def inspect_at_start(queue: TableQueue, *, purging: bool) -> None:
    """Look at the queue table once and log what could be better; never raises.

    Logged as warnings: a missing RowVersion index and ``varchar`` Headers, and a missing Expires index when
    ``purging`` (only the purge reads it). As information: the Expires index otherwise, SQL Server's
    clustered RowVersion index (this package's default layout; the heap is the reference's advice for many
    competing receivers). Not the legacy Recoverable column: ``create()`` makes it, as the reference's own
    table script does, and sends adapt to a table without it, so there is nothing to act on.
    """
    dialect, address = queue.dialect, queue.address
    try:
        with queue.transport.connection(address) as connection:
            cursor = connection.cursor()
            dialect = queue.table_dialect(cursor)
            findings = dialect.inspect(cursor, address, TableOptions())
            clustered = dialect.rowversion_index_is_clustered(cursor, address)
            connection.commit()
    except Exception as error:
        log.warning("checking the schema of queue %s failed; starting anyway: %s", address, error)
        return
    for finding in findings:
        level = logging.WARNING
        if finding.code == "missing_expires_index" and not purging:
            level = logging.INFO
        log.log(level, "%s Fix: %s", finding.message, dialect.display_sql(finding.fix))
    if clustered:
        log.info(
            "queue %s keeps RowVersion in a clustered index (the clustered layout). With many competing "
            "receivers and page-latch waits on the table, the heap layout avoids its hot head; see "
            "'Migrating a table from clustered to heap' in the DBA guide",
            address,
        )
