"""What every dialect renders for native publish/subscribe (``transport/subscriptions.py``): the shared
subscription table (the reference's ``SubscriptionRouting``), the subscribe upsert, the unsubscribe, the
publish lookup and a listing. Declared here, a mixin of :class:`~.base.Dialect`; each engine's statements
are in its own module.

The table has the reference's three columns, ``QueueAddress``, ``Endpoint`` and ``Topic`` (200 characters
each, all NOT NULL), keyed by (Endpoint, Topic): one row per subscribing endpoint and topic, naming the
queue that endpoint receives the topic's events in."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from ..model.address import QueueAddress

# The reference's column width: longer values would fail its INSERT, so they are refused up front.
SUBSCRIPTION_COLUMN_LENGTH = 200


class SubscriptionStatements:
    """The subscription table's statements; an engine without them raises NotImplementedError."""

    display_name: ClassVar[str]

    def create_subscription_table(self, address: QueueAddress) -> str:
        """DDL of the subscription table: QueueAddress, Endpoint, Topic, primary key (Endpoint, Topic)."""
        raise NotImplementedError(f"{self.display_name} has no subscription table")

    def subscribe(self, address: QueueAddress) -> str:
        """The upsert of one subscription: insert (Endpoint, Topic) -> QueueAddress, or set QueueAddress
        where the row exists with another one; parameters from :meth:`subscribe_params`. Where it can race
        with a concurrent subscriber of the same key (an engine that ignores the statement's locking
        hints), the loser fails with a duplicate key (:meth:`is_duplicate_key`) and is run again."""
        raise NotImplementedError(f"{self.display_name} has no subscription table")

    def subscribe_params(self, endpoint: str, topic: str, queue_address: str) -> tuple[Any, ...]:
        return (endpoint, topic, queue_address)

    def unsubscribe(self, address: QueueAddress) -> str:
        """DELETE of the row of an endpoint (first parameter) and topic (second); its count as
        :meth:`purge_expired_batch`'s (a row holding it where :meth:`purge_returns_count`, else rowcount)."""
        raise NotImplementedError(f"{self.display_name} has no subscription table")

    def select_subscribers(self, address: QueueAddress, topics: int) -> str:
        """``SELECT DISTINCT QueueAddress`` of the rows whose Topic is one of the ``topics`` parameters."""
        raise NotImplementedError(f"{self.display_name} has no subscription table")

    def select_subscriptions(
        self, address: QueueAddress, by_topic: bool, by_endpoint: bool, limited: bool = False
    ) -> str:
        """QueueAddress, Endpoint, Topic of every row (or of one topic, one endpoint), ordered by Topic then
        Endpoint; with ``limited`` the first N only. Parameters from :meth:`select_subscriptions_params`."""
        raise NotImplementedError(f"{self.display_name} has no subscription table")

    def select_subscriptions_params(self, filters: tuple[str, ...], limit: int | None) -> tuple[Any, ...]:
        """The listing's parameters: the topic and endpoint filtered on (those given), then the limit."""
        return filters if limit is None else (*filters, limit)

    def is_duplicate_key(self, error: BaseException) -> bool:
        """True when a statement failed on a primary key or unique index (a concurrent subscriber won)."""
        return False
