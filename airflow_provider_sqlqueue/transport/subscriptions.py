"""Native publish/subscribe's subscription table: which endpoint's queue wants which topic.

The table is the reference's (``SubscriptionRouting`` in the default schema unless
:class:`SubscriptionSettings` names another), shared by every endpoint on the database, .NET ones
included: a row is (QueueAddress, Endpoint, Topic), keyed by (Endpoint, Topic). Subscribing is an upsert
of one row, unsubscribing deletes it, and a publish reads the distinct queues of every row whose topic is
one of the published message's topics (:func:`topics_of`), through a cache kept ``cache_seconds``.

Topics. The reference names a topic by the .NET type's ``FullName`` (``Sales.Events.OrderPlaced``) and
publishes to the type, each of its base types and each of its interfaces. Here a topic is

- a string, taken exactly (``"Sales.Events.OrderPlaced"``); the ancestors a subscriber of a broader topic
  should also be reached through are given as ``base_topics``;
- or a Python class: its own name and those of the classes of its MRO except ``object``, most derived
  first. A class is named by a ``__sqlqueue_topic__`` string it defines itself (to match a .NET
  ``FullName``: ``__sqlqueue_topic__ = "Sales.Events.OrderPlaced"``), else ``module.QualName``.

What the cache means for a new subscriber: a publisher that looked the topic up less than
``cache_seconds`` ago sends to the queues it found then, so an endpoint that subscribes in another process
gets events published from about ``cache_seconds`` after it subscribed (5 s by default, as the
reference); ``cache_seconds=0`` looks the subscribers up on every publish. A subscribe or unsubscribe
through a store clears that store's cached lookups of the topic at once.
"""

from __future__ import annotations

import builtins
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..dialects.base import SUBSCRIPTION_COLUMN_LENGTH
from ..model.address import QueueAddress
from ..model.errors import ConfigurationError
from .callers import write_in_callers_transaction
from .queue.provisioning import create_side_table, first_value

if TYPE_CHECKING:
    from .roles import SubscriptionTransport

__all__ = [
    "Subscription",
    "SubscriptionSettings",
    "SubscriptionStore",
    "topic_name",
    "topics_of",
]

log = logging.getLogger(__name__)

TOPIC_ATTRIBUTE = "__sqlqueue_topic__"
# How often a subscribe that lost a race for a new row (an engine that ignores locking hints) runs again.
_SUBSCRIBE_ATTEMPTS = 3


@dataclass(frozen=True)
class Subscription:
    """One row of the subscription table: ``endpoint`` receives ``topic``'s events in ``queue_address``."""

    queue_address: str
    endpoint: str
    topic: str


@dataclass(frozen=True)
class SubscriptionSettings:
    """Where the subscription table is and how long a publisher trusts its lookup.

    :param table: the table's name (the reference's default, ``SubscriptionRouting``).
    :param schema: its schema; None for the transport's default schema (``dbo``, ``public``).
    :param catalog: its database on SQL Server; None for the connection's.
    :param cache_seconds: how long a publish reuses the subscribers it looked up (5 s, as the reference);
        0 looks them up on every publish.
    """

    table: str = "SubscriptionRouting"
    schema: str | None = None
    catalog: str | None = None
    cache_seconds: float = 5.0

    def __post_init__(self) -> None:
        if not isinstance(self.table, str) or not self.table:
            raise ConfigurationError(f"the subscription table needs a name, not {self.table!r}")
        seconds = self.cache_seconds
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
            raise ConfigurationError(
                f"cache_seconds must be a number of seconds, 0 or more (0: no cache), not {seconds!r}"
            )
        QueueAddress(self.table, self.schema, self.catalog)  # InvalidQueueName for a name no table can have


def subscription_settings(given: SubscriptionSettings | None) -> SubscriptionSettings:
    """``given``, or the defaults for None; ConfigurationError for anything else."""
    if given is not None and not isinstance(given, SubscriptionSettings):
        raise ConfigurationError(f"subscriptions takes a SubscriptionSettings, not a {type(given).__name__}")
    return given or SubscriptionSettings()


def topic_name(message_type: type) -> str:
    """The topic a class stands for: its own ``__sqlqueue_topic__``, else ``module.QualName``."""
    if not isinstance(message_type, type):
        raise ConfigurationError(f"a topic is a string or a class, not {type(message_type).__name__}")
    own = vars(message_type).get(TOPIC_ATTRIBUTE)
    if own is not None:
        return _checked_topic(own)
    return _checked_topic(f"{message_type.__module__}.{message_type.__qualname__}")


def topics_of(topic: str | type, base_topics: Iterable[str] = ()) -> tuple[str, ...]:
    """Every topic a publish of ``topic`` reaches the subscribers of, most specific first: a string and
    the ``base_topics`` given, or a class and its MRO except ``object`` (then ``base_topics``)."""
    if isinstance(base_topics, str):
        raise ConfigurationError("base_topics takes a list of topics, not one string")
    if isinstance(topic, type):
        names = [topic_name(cls) for cls in topic.__mro__ if cls is not object]
    else:
        names = [_checked_topic(topic)]
    names += [_checked_topic(base) for base in base_topics]
    return tuple(dict.fromkeys(names))


def _checked_topic(topic: Any) -> str:
    if not isinstance(topic, str) or not topic.strip():
        raise ConfigurationError(f"a topic is a non-empty string (or a class), not {topic!r}")
    return _fits("topic", topic)


def _fits(kind: str, value: str, utf16: bool = False) -> str:
    """``value`` if the subscription table's column holds it, counted as the engine counts (``utf16``: the
    dialect's ``subscription_columns_count_utf16``): SQL Server's ``nvarchar`` counts UTF-16 code units, so
    a character outside the Basic Multilingual Plane takes two; PostgreSQL's ``varchar`` and SQLite count
    characters."""
    length, unit = len(value), "characters"
    if utf16:
        length, unit = len(value.encode("utf-16-le")) // 2, "UTF-16 code units (nvarchar's count)"
    if length > SUBSCRIPTION_COLUMN_LENGTH:
        raise ConfigurationError(
            f"{kind} {value[:40]!r}... is {length} {unit} long; the subscription table (as the "
            f"reference's) holds at most {SUBSCRIPTION_COLUMN_LENGTH}"
        )
    return value


class SubscriptionStore:
    """The subscription table of a transport (:attr:`Transport.subscriptions`); thread-safe.

    ``clock`` (seconds, monotonic) times the lookup cache.
    """

    def __init__(
        self,
        transport: SubscriptionTransport,
        settings: SubscriptionSettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.transport = transport
        self.settings = settings or SubscriptionSettings()
        self._clock = clock
        self._cache: dict[tuple[str, ...], tuple[float, tuple[str, ...]]] = {}
        self._generation = 0
        self._cache_lock = threading.Lock()
        self.lookups = 0  # subscriber lookups that read the table (the others came from the cache)

    def __repr__(self) -> str:
        return f"<SubscriptionStore {self.address} on {self.transport.description}>"

    @property
    def address(self) -> QueueAddress:
        """The table's resolved address (the transport's default schema filled in)."""
        settings = self.settings
        return self.transport.resolve(QueueAddress(settings.table, settings.schema, settings.catalog))

    # ---- the table -----------------------------------------------------------------------------
    def create(self) -> bool:
        """Create the table if missing (safe from many processes at once; needs DDL rights); True when
        this call created it."""
        return create_side_table(
            self.transport,
            self.address,
            self.transport.dialect.create_subscription_table(self.address),
            f"subscription table {self.address}",
        )

    def create_script(self) -> str:
        """The table's DDL as a script a DBA can review and run."""
        dialect = self.transport.dialect
        return f"{dialect.display_sql(dialect.create_subscription_table(self.address))};\n"

    def exists(self) -> bool:
        return self.transport.queue(self.address, error_queue=None).exists()

    def drop(self) -> None:
        """Drop the table and every subscription in it (needs DDL rights)."""
        self.transport.queue(self.address, error_queue=None).drop()
        self.clear_cache()

    # ---- subscribing ---------------------------------------------------------------------------
    def subscribe(
        self,
        endpoint: str,
        topic: str | type,
        queue_address: str | QueueAddress,
        *,
        connection: Any = None,
    ) -> Subscription:
        """Record that ``endpoint`` receives ``topic``'s events in ``queue_address``, replacing the queue
        of an earlier subscription of the same endpoint and topic (a class topic is one row, its own
        name, as the reference subscribes a type). The address is stored as message headers carry it, in
        the form .NET publishers on the engine parse (SQL Server ``q@[dbo]@[sales]``, PostgreSQL
        ``"public"."q"``). The subscription returned is the row as the table holds it: under a
        case-insensitive collation a subscribe differing only in case keeps the row's first spelling.

        With ``connection`` (as :meth:`TableQueue.send`'s) it joins that connection's transaction and
        commits nothing. There a subscribe that loses the race for a new row to a concurrent first
        subscriber of the same endpoint and topic (Babelfish only, which ignores the locking hints) raises
        the driver's duplicate-key error: roll back and subscribe again.
        """
        utf16 = self.transport.dialect.subscription_columns_count_utf16
        endpoint_name = _fits("endpoint name", _non_empty("endpoint", endpoint), utf16)
        topic_text = topic_name(topic) if isinstance(topic, type) else _checked_topic(topic)
        _fits("topic", topic_text, utf16)
        queue = _fits("queue address", str(self.transport.canonical(queue_address)), utf16)
        address = self.address
        held: builtins.list[Subscription] = []

        def subscribe_on(cursor: Any, table: QueueAddress, values: tuple[str, str, str]) -> int:
            held[:] = [self._subscribe_on(cursor, table, values)]
            return 1

        try:
            self._write(address, subscribe_on, (endpoint_name, topic_text, queue), connection)
        finally:
            self._forget(topic_text)
        [row] = held
        if row.topic != topic_text:
            self._forget(row.topic)
        log.info("endpoint %s subscribed to %s in queue %s", row.endpoint, row.topic, row.queue_address)
        return row

    def _subscribe_on(self, cursor: Any, address: QueueAddress, values: tuple[str, str, str]) -> Subscription:
        """The upsert, then the row as it is held: under a case-insensitive collation (SQL Server's
        default) a subscribe differing only in case updates the row, which keeps its first spelling."""
        dialect = self.transport.dialect
        endpoint, topic, queue = values
        cursor.execute(dialect.sql("subscribe", address), dialect.subscribe_params(*values))
        dialect.fetch_rows(cursor)  # surfaces an error of a later statement of the batch
        cursor.execute(
            dialect.select_subscriptions(address, True, True),
            dialect.select_subscriptions_params((topic, endpoint), None),
        )
        rows = dialect.fetch_rows(cursor)
        if len(rows) != 1:
            return Subscription(queue, endpoint, topic)  # a collation that ignores more than case: as given
        return Subscription(str(rows[0][0]), str(rows[0][1]), str(rows[0][2]))

    def unsubscribe(self, endpoint: str, topic: str | type, *, connection: Any = None) -> bool:
        """Remove ``endpoint``'s subscription to ``topic``; True when there was one. With ``connection``
        it joins that connection's transaction, as :meth:`subscribe`."""
        endpoint_name = _non_empty("endpoint", endpoint)
        topic_text = topic_name(topic) if isinstance(topic, type) else _checked_topic(topic)
        try:
            removed = self._write(self.address, self._unsubscribe_on, (endpoint_name, topic_text), connection)
        finally:
            self._forget(topic_text)
        if removed:
            log.info("endpoint %s unsubscribed from %s", endpoint_name, topic_text)
        return removed > 0

    def _unsubscribe_on(self, cursor: Any, address: QueueAddress, values: tuple[str, str]) -> int:
        dialect = self.transport.dialect
        cursor.execute(dialect.sql("unsubscribe", address), values)
        if dialect.purge_returns_count():
            return int(first_value(cursor, dialect) or 0)
        return max(int(cursor.rowcount), 0)

    def _write(
        self,
        address: QueueAddress,
        write: Callable[[Any, QueueAddress, Any], int],
        values: Any,
        connection: Any,
    ) -> int:
        """Run ``write`` in the caller's transaction, or in one of its own, committed; a statement that
        lost a race for a new row (a duplicate key where the engine ignored the locking hints) runs again
        in a new transaction, where the row it lost to is visible."""
        dialect = self.transport.dialect
        if connection is not None:
            result: list[int] = []
            write_in_callers_transaction(
                dialect, connection, address, lambda cursor: result.append(write(cursor, address, values))
            )
            return result[0]
        for attempt in range(1, _SUBSCRIBE_ATTEMPTS + 1):
            try:
                with self.transport.connection(address) as pooled:
                    cursor = pooled.cursor()
                    begin = dialect.begin_write()
                    if begin:
                        cursor.execute(begin, ())
                    count = write(cursor, address, values)
                    pooled.commit()
                    return count
            except Exception as error:
                if attempt < _SUBSCRIBE_ATTEMPTS and dialect.is_duplicate_key(error.__cause__ or error):
                    log.info("a concurrent subscriber of the same endpoint and topic won; writing again")
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    # ---- reading -------------------------------------------------------------------------------
    def list(
        self, topic: str | type | None = None, *, endpoint: str | None = None, limit: int | None = None
    ) -> builtins.list[Subscription]:
        """The subscriptions (of one topic, one endpoint), ordered by topic and endpoint, the first
        ``limit`` of them when given; never cached."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ConfigurationError(f"limit must be a whole number of rows, 1 or more, not {limit!r}")
        topic_text = None if topic is None else topic_name(topic) if isinstance(topic, type) else topic
        filters = tuple(value for value in (topic_text, endpoint) if value is not None)
        dialect = self.transport.dialect
        address = self.address
        statement = dialect.select_subscriptions(
            address, topic_text is not None, endpoint is not None, limit is not None
        )
        with self.transport.connection(address) as connection:
            cursor = connection.cursor()
            cursor.execute(statement, dialect.select_subscriptions_params(filters, limit))
            rows = dialect.fetch_rows(cursor)
            connection.commit()
        return [Subscription(str(row[0]), str(row[1]), str(row[2])) for row in rows]

    def subscriber_queues(self, topics: Sequence[str], *, connection: Any = None) -> builtins.list[str]:
        """The distinct queues subscribed to any of ``topics`` (sorted), through the cache: a lookup of the
        same topics less than ``cache_seconds`` ago is reused. With ``connection`` a lookup reads on it
        (inside the caller's transaction) instead of on a pooled connection."""
        utf16 = self.transport.dialect.subscription_columns_count_utf16
        key = tuple(dict.fromkeys(_fits("topic", _checked_topic(topic), utf16) for topic in topics))
        if not key:
            raise ConfigurationError("a subscriber lookup needs at least one topic")
        seconds = self.settings.cache_seconds
        with self._cache_lock:
            generation = self._generation
            entry = self._cache.get(key) if seconds > 0 else None
            started = self._clock()
            if entry is not None and started - entry[0] < seconds:
                return builtins.list(entry[1])
        queues = tuple(sorted(self._look_up(key, connection)))
        if seconds > 0:
            with self._cache_lock:
                if generation == self._generation:  # no subscribe or unsubscribe cleared it meanwhile
                    self._cache[key] = (started, queues)
        return builtins.list(queues)

    def _look_up(self, topics: tuple[str, ...], connection: Any) -> builtins.list[str]:
        dialect = self.transport.dialect
        address = self.address
        statement = dialect.sql("select_subscribers", address, len(topics))
        rows: builtins.list[Any] = []

        def read(cursor: Any) -> None:
            cursor.execute(statement, topics)
            rows.extend(dialect.fetch_rows(cursor))

        if connection is not None:
            write_in_callers_transaction(dialect, connection, address, read)
        else:
            with self.transport.connection(address) as pooled:
                read(pooled.cursor())
                pooled.commit()
        self.lookups += 1
        return [str(row[0]) for row in rows]

    def clear_cache(self) -> None:
        """Forget every cached lookup (the next publish of each topic reads the table)."""
        with self._cache_lock:
            self._cache.clear()
            self._generation += 1

    def _forget(self, topic: str) -> None:
        with self._cache_lock:
            for key in [key for key in self._cache if topic in key]:
                del self._cache[key]
            self._generation += 1


def _non_empty(kind: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"{kind} must be a non-empty string, not {value!r}")
    return value
