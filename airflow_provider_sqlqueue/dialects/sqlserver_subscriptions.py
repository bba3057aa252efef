"""SQL Server: the subscription table of native publish/subscribe, as the reference creates it (its
columns and clustered key), its ``MERGE ... WITH (HOLDLOCK, TABLOCK)`` upsert, its DELETE and its
``SELECT DISTINCT`` lookup, with ``?`` parameters; held by the golden files like every T-SQL statement."""

from __future__ import annotations

from typing import Any

from ..model.address import QueueAddress
from .base import Dialect
from .subscriptions import SUBSCRIPTION_COLUMN_LENGTH

_WIDTH = SUBSCRIPTION_COLUMN_LENGTH


class SqlServerSubscriptions(Dialect):
    """SqlServerDialect's subscription statements."""

    def create_subscription_table(self, address: QueueAddress) -> str:
        # The reference writes PRIMARY KEY CLUSTERED; a primary key is clustered by default on a table
        # without a clustered index, so this is the same table, in a form both test grammars read.
        return (
            f"CREATE TABLE {self.qualified_name(address)} (\n"
            f"    [QueueAddress] nvarchar({_WIDTH}) NOT NULL,\n"
            f"    [Endpoint] nvarchar({_WIDTH}) NOT NULL,\n"
            f"    [Topic] nvarchar({_WIDTH}) NOT NULL,\n"
            "    PRIMARY KEY ([Endpoint], [Topic])\n)"
        )

    def subscribe(self, address: QueueAddress) -> str:
        # The reference's upsert: the table lock held to the end of the statement serialises subscribers.
        return (
            f"MERGE {self.qualified_name(address)} WITH (HOLDLOCK, TABLOCK) AS target "
            "USING (SELECT ? AS [Endpoint], ? AS [Topic], ? AS [QueueAddress]) AS source "
            "ON target.[Endpoint] = source.[Endpoint] AND target.[Topic] = source.[Topic] "
            "WHEN MATCHED AND target.[QueueAddress] <> source.[QueueAddress] THEN "
            "UPDATE SET [QueueAddress] = source.[QueueAddress] "
            "WHEN NOT MATCHED THEN INSERT ([QueueAddress], [Topic], [Endpoint]) "
            "VALUES (source.[QueueAddress], source.[Topic], source.[Endpoint]);"
        )

    def unsubscribe(self, address: QueueAddress) -> str:
        return (
            f"DELETE FROM {self.qualified_name(address)} WHERE [Endpoint] = ? AND [Topic] = ?; "
            "SELECT @@ROWCOUNT"
        )

    def select_subscribers(self, address: QueueAddress, topics: int) -> str:
        marks = ", ".join(["?"] * topics)
        return (
            f"SELECT DISTINCT [QueueAddress] FROM {self.qualified_name(address)} WHERE [Topic] IN ({marks})"
        )

    def select_subscriptions(
        self, address: QueueAddress, by_topic: bool, by_endpoint: bool, limited: bool = False
    ) -> str:
        wanted = (("[Topic] = ?", by_topic), ("[Endpoint] = ?", by_endpoint))
        conditions = [text for text, given in wanted if given]
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        top = "TOP (?) " if limited else ""
        return (
            f"SELECT {top}[QueueAddress], [Endpoint], [Topic] FROM {self.qualified_name(address)}{where} "
            "ORDER BY [Topic], [Endpoint]"
        )

    def select_subscriptions_params(self, filters: tuple[str, ...], limit: int | None) -> tuple[Any, ...]:
        return filters if limit is None else (limit, *filters)
