"""SQL Server: the statements of an error queue's archive (``transport/archive.py``): its table and index, the
move of a failed message into it (``DELETE ... OUTPUT deleted.* INTO``, the delayed mover's form, which
Babelfish runs as it is) and the purge by age, held by the golden files like every T-SQL statement."""

from __future__ import annotations

from typing import Any

from ..model.address import QueueAddress
from .base import Dialect, IndexSpec


class SqlServerArchive(Dialect):
    """SqlServerDialect's archive statements (``GETUTCDATE()`` the only clock, as the reference's)."""

    def create_archive_table(self, address: QueueAddress) -> str:
        return (
            f"CREATE TABLE {self.qualified_name(address)} (\n"
            "    [Id] uniqueidentifier NOT NULL,\n"
            "    [CorrelationId] varchar(255) NULL,\n"
            "    [ReplyToAddress] varchar(255) NULL,\n"
            "    [Recoverable] bit NULL,\n"
            "    [Expires] datetime NULL,\n"
            "    [Headers] nvarchar(max) NOT NULL,\n"
            "    [Body] varbinary(max) NULL,\n"
            "    [ErrorRowVersion] bigint NOT NULL,\n"
            "    [ArchivedAt] datetime NOT NULL DEFAULT GETUTCDATE()\n)"
        )

    def archive_indexes(self, address: QueueAddress) -> list[IndexSpec]:
        return [
            IndexSpec(
                "Index_ArchivedAt",
                f"CREATE NONCLUSTERED INDEX [Index_ArchivedAt] ON {self.qualified_name(address)} "
                "([ArchivedAt] ASC)",
            )
        ]

    def archive_failed_row(
        self, address: QueueAddress, archive: QueueAddress, with_recoverable: bool = True
    ) -> list[str]:
        # The delayed mover's form (DELETE ... OUTPUT deleted.* INTO), ArchivedAt from its default.
        recoverable = "deleted.[Recoverable]" if with_recoverable else "NULL"
        return [
            f"DELETE FROM {self.qualified_name(address)} "
            "OUTPUT deleted.[Id], deleted.[CorrelationId], deleted.[ReplyToAddress], "
            f"{recoverable}, deleted.[Expires], deleted.[Headers], deleted.[Body], deleted.[RowVersion] "
            f"INTO {self.qualified_name(archive)} ([Id], [CorrelationId], [ReplyToAddress], [Recoverable], "
            "[Expires], [Headers], [Body], [ErrorRowVersion]) "
            "WHERE [RowVersion] = ?; SELECT @@ROWCOUNT"
        ]

    def purge_archive_batch(self, archive: QueueAddress) -> str:
        # The archive has no key of its own: the oldest N by ErrorRowVersion, and only rows old enough (an
        # error queue made again restarts its RowVersions, so a number may stand for an old and a new row).
        table = self.qualified_name(archive)
        older = "[ArchivedAt] < DATEADD(second, ?, GETUTCDATE())"
        return (
            f"DELETE FROM {table} WHERE {older} AND [ErrorRowVersion] IN ("
            f"SELECT TOP (?) [ErrorRowVersion] FROM {table} WHERE {older} ORDER BY [ArchivedAt]); "
            "SELECT @@ROWCOUNT"
        )

    def purge_archive_params(self, older_than_seconds: int, size: int) -> tuple[Any, ...]:
        return (-older_than_seconds, size, -older_than_seconds)

    def count_archive(self, archive: QueueAddress) -> str:
        return f"SELECT count_big(*) FROM {self.qualified_name(archive)}"
