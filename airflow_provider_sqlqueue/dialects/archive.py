"""What every dialect renders for an error queue's archive (``transport/archive.py``): the table beside the
error queue where deleting failed messages moves them, its index, the move and the purge by age. Declared
here, a mixin of :class:`~.base.Dialect`; each engine's statements are in its own module."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from ..model.address import QueueAddress
    from .index_spec import IndexSpec


class ArchiveStatements:
    """The archive's statements; an engine without them raises NotImplementedError."""

    display_name: ClassVar[str]

    def create_archive_table(self, address: QueueAddress) -> str:
        """DDL of an error queue's archive table: the queue's columns (``Recoverable`` nullable, as tables
        of later NServiceBus versions have none), ``ErrorRowVersion`` (the row's RowVersion in the error
        queue; named so that the archive is not listed as a queue) and ``ArchivedAt`` (UTC, the database
        clock, its default)."""
        raise NotImplementedError(f"{self.display_name} cannot archive failed messages")

    def archive_indexes(self, address: QueueAddress) -> list[IndexSpec]:
        """The index on ArchivedAt that the purge by age reads through."""
        raise NotImplementedError(f"{self.display_name} cannot archive failed messages")

    def archive_failed_row(
        self, address: QueueAddress, archive: QueueAddress, with_recoverable: bool = True
    ) -> list[str]:
        """Statements that move the error-queue row whose RowVersion is the parameter (each statement takes
        it) into ``archive`` without leaving the server, in the caller's transaction. The last one returns
        how many rows it moved as :meth:`purge_returns_count` says: one row holding the count, or (where
        that is False) one row per row moved. Nothing moves when another session took the row first."""
        raise NotImplementedError(f"{self.display_name} cannot archive failed messages")

    def purge_archive_batch(self, archive: QueueAddress) -> str:
        """DELETE of up to N archived rows archived before a number of seconds ago by the database clock;
        parameters from :meth:`purge_archive_params`; its count as :meth:`purge_expired_batch`'s."""
        raise NotImplementedError(f"{self.display_name} cannot purge an archive")

    def purge_archive_params(self, older_than_seconds: int, size: int) -> tuple[Any, ...]:
        return (older_than_seconds, size)

    def count_archive(self, archive: QueueAddress) -> str:
        """Number of rows in an archive table."""
        raise NotImplementedError(f"{self.display_name} cannot count an archive")
