"""SQLite: the subscription table of native publish/subscribe (the reference's columns and key), its
``INSERT ... ON CONFLICT`` upsert, DELETE and lookup. One writer at a time, so no upsert races."""

from __future__ import annotations

from ..model.address import QueueAddress
from .base import Dialect
from .subscriptions import SUBSCRIPTION_COLUMN_LENGTH

_WIDTH = SUBSCRIPTION_COLUMN_LENGTH


class SqliteSubscriptions(Dialect):
    """SqliteDialect's subscription statements."""

    def create_subscription_table(self, address: QueueAddress) -> str:
        return (
            f"CREATE TABLE {self.qualified_name(address)} (\n"
            f"    QueueAddress VARCHAR({_WIDTH}) NOT NULL,\n"
            f"    Endpoint VARCHAR({_WIDTH}) NOT NULL,\n"
            f"    Topic VARCHAR({_WIDTH}) NOT NULL,\n"
            "    PRIMARY KEY (Endpoint, Topic)\n)"
        )

    def subscribe(self, address: QueueAddress) -> str:
        return (
            f"INSERT INTO {self.qualified_name(address)} (Endpoint, Topic, QueueAddress) VALUES (?, ?, ?) "
            "ON CONFLICT (Endpoint, Topic) DO UPDATE SET QueueAddress = excluded.QueueAddress"
        )

    def unsubscribe(self, address: QueueAddress) -> str:
        return f"DELETE FROM {self.qualified_name(address)} WHERE Endpoint = ? AND Topic = ?"

    def select_subscribers(self, address: QueueAddress, topics: int) -> str:
        marks = ", ".join(["?"] * topics)
        return f"SELECT DISTINCT QueueAddress FROM {self.qualified_name(address)} WHERE Topic IN ({marks})"

    def select_subscriptions(
        self, address: QueueAddress, by_topic: bool, by_endpoint: bool, limited: bool = False
    ) -> str:
        wanted = (("Topic = ?", by_topic), ("Endpoint = ?", by_endpoint))
        conditions = [text for text, given in wanted if given]
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        return (
            f"SELECT QueueAddress, Endpoint, Topic FROM {self.qualified_name(address)}{where} "
            "ORDER BY Topic, Endpoint" + (" LIMIT ?" if limited else "")
        )
