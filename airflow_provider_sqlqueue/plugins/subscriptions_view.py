"""The Queues page's view of publish/subscribe: who subscribed to which topic, from the connection's
subscription table, read bounded (the first ``limit`` rows by topic and endpoint, and whether there are
more), so that a page load costs the same however many subscriptions the database holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from ..hooks.sqlqueue import SqlQueueHook
from ..transport import Subscription

__all__ = ["SUBSCRIPTIONS_LIMIT", "SubscriptionsView", "TopicSubscribers", "subscriptions_view"]

# How many subscriptions a page load reads at most (the page says "more" beyond them).
SUBSCRIPTIONS_LIMIT = 500


@dataclass(frozen=True)
class TopicSubscribers:
    """One topic and the endpoints subscribed to it, each with its queue."""

    topic: str
    subscribers: list[Subscription]


@dataclass(frozen=True)
class SubscriptionsView:
    """The subscription table ``table`` by topic; ``exists`` False when there is no such table (nobody
    subscribes on this database yet); ``more``: rows beyond the first ``limit`` were not read."""

    table: str
    exists: bool
    topics: list[TopicSubscribers] = field(default_factory=list)
    more: bool = False
    limit: int = SUBSCRIPTIONS_LIMIT

    def as_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "exists": self.exists,
            "limit": self.limit,
            "more": self.more,
            "topics": [
                {
                    "topic": entry.topic,
                    "subscribers": [
                        {"endpoint": row.endpoint, "queue": row.queue_address} for row in entry.subscribers
                    ],
                }
                for entry in self.topics
            ],
        }


def subscriptions_view(hook: SqlQueueHook, limit: int | None = None) -> SubscriptionsView:
    """The first ``limit`` (default :data:`SUBSCRIPTIONS_LIMIT`) subscriptions of the hook's connection,
    grouped by topic (one read of at most ``limit + 1`` rows; none when the table does not exist)."""
    limit = SUBSCRIPTIONS_LIMIT if limit is None else limit
    store = hook.get_transport().subscriptions
    table = str(store.address)
    if not store.exists():
        return SubscriptionsView(table, exists=False, limit=limit)
    rows = hook.subscriptions(limit=limit + 1)
    topics = [
        TopicSubscribers(topic, list(group)) for topic, group in groupby(rows[:limit], lambda row: row.topic)
    ]
    return SubscriptionsView(table, exists=True, topics=topics, more=len(rows) > limit, limit=limit)
