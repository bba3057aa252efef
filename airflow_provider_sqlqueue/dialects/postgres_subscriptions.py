"""PostgreSQL: the subscription table of native publish/subscribe as the reference's PostgreSQL transport
creates it (``"SubscriptionRouting"`` quoted, its columns unquoted and so folded to lower case,
``varchar(200)``, ``fillfactor=100``), its ``INSERT ... ON CONFLICT`` upsert, DELETE and lookup."""

from __future__ import annotations

from ..model.address import QueueAddress
from .base import Dialect
from .subscriptions import SUBSCRIPTION_COLUMN_LENGTH

_WIDTH = SUBSCRIPTION_COLUMN_LENGTH


class PostgresSubscriptions(Dialect):
    """PostgresDialect's subscription statements."""

    def create_subscription_table(self, address: QueueAddress) -> str:
        return (
            f"CREATE TABLE {self.qualified_name(address)} (\n"
            f"    QueueAddress varchar({_WIDTH}) NOT NULL,\n"
            f"    Endpoint varchar({_WIDTH}) NOT NULL,\n"
            f"    Topic varchar({_WIDTH}) NOT NULL,\n"
            "    PRIMARY KEY (Endpoint, Topic)\n) WITH (fillfactor=100)"
        )

    def subscribe(self, address: QueueAddress) -> str:
        return (
            f"INSERT INTO {self.qualified_name(address)} (Endpoint, Topic, QueueAddress) "
            "VALUES (%s, %s, %s) ON CONFLICT (Endpoint, Topic) DO UPDATE SET QueueAddress = "
            "EXCLUDED.QueueAddress"
        )

    def unsubscribe(self, address: QueueAddress) -> str:
        return f"DELETE FROM {self.qualified_name(address)} WHERE Endpoint = %s AND Topic = %s"

    def select_subscribers(self, address: QueueAddress, topics: int) -> str:
        marks = ", ".join(["%s"] * topics)
        return f"SELECT DISTINCT QueueAddress FROM {self.qualified_name(address)} WHERE Topic IN ({marks})"

    def select_subscriptions(
        self, address: QueueAddress, by_topic: bool, by_endpoint: bool, limited: bool = False
    ) -> str:
        wanted = (("Topic = %s", by_topic), ("Endpoint = %s", by_endpoint))
        conditions = [text for text, given in wanted if given]
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        return (
            f"SELECT QueueAddress, Endpoint, Topic FROM {self.qualified_name(address)}{where} "
            "ORDER BY Topic, Endpoint" + (" LIMIT %s" if limited else "")
        )
