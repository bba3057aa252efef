"""PostgreSQL: the statements of an error queue's archive (``transport/archive.py``): its table and index, the
move of a failed message into it (one statement: a DELETE whose returned row the INSERT takes) and the
purge by age."""

from __future__ import annotations

from ..model.address import QueueAddress
from .base import Dialect, IndexSpec


class PostgresArchive(Dialect):
    """PostgresDialect's archive statements."""

    def create_archive_table(self, address: QueueAddress) -> str:
        return (
            f"CREATE TABLE {self.qualified_name(address)} (\n"
            "    Id uuid NOT NULL,\n"
            "    CorrelationId varchar(255) NULL,\n"
            "    ReplyToAddress varchar(255) NULL,\n"
            "    Recoverable boolean NULL,\n"
            "    Expires timestamptz NULL,\n"
            "    Headers text NOT NULL,\n"
            "    Body bytea NULL,\n"
            "    ErrorRowVersion bigint NOT NULL,\n"
            "    ArchivedAt timestamptz NOT NULL DEFAULT statement_timestamp()\n)"
        )

    def archive_indexes(self, address: QueueAddress) -> list[IndexSpec]:
        archived_at = self.object_name(address, "ArchivedAt")
        return [
            IndexSpec(
                archived_at,
                f"CREATE INDEX {self.quote(archived_at)} ON {self.qualified_name(address)} (ArchivedAt)",
            )
        ]

    def archive_failed_row(
        self, address: QueueAddress, archive: QueueAddress, with_recoverable: bool = True
    ) -> list[str]:
        recoverable = "Recoverable" if with_recoverable else "NULL::boolean"
        return [
            f"WITH taken AS (DELETE FROM {self.qualified_name(address)} WHERE RowVersion = %s "
            f"RETURNING Id, CorrelationId, ReplyToAddress, {recoverable} AS Recoverable, Expires, Headers, "
            f"Body, RowVersion) INSERT INTO {self.qualified_name(archive)} (Id, CorrelationId, "
            "ReplyToAddress, Recoverable, Expires, Headers, Body, ErrorRowVersion) "
            "SELECT Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body, RowVersion "
            "FROM taken RETURNING ErrorRowVersion"
        ]

    def purge_archive_batch(self, archive: QueueAddress) -> str:
        # The archive has no key of its own (nothing updates its rows, so a ctid stays the row's).
        table = self.qualified_name(archive)
        return (
            f"DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {table} "
            "WHERE ArchivedAt < statement_timestamp() - %s * interval '1 second' LIMIT %s))"
        )

    def count_archive(self, archive: QueueAddress) -> str:
        return f"SELECT count(*) FROM {self.qualified_name(archive)}"
