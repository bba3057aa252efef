"""What each part of a transport needs of the transport: the narrow interfaces
:class:`~.connection.Transport` offers its connection leases, its queues, the queue table's provisioning
and storage, its subscription store, publishing and the SQLAlchemy engine over its connections.

The parts type their transport with these protocols instead of importing ``Transport``, so the transport
imports in one direction: ``connection`` builds and calls the parts, the parts know only their role. This
module imports neither ``connection`` nor ``queue/table_queue``, not even for type checking; a queue the
transport opens for a part is typed here by what the parts use of it (:class:`OpenedQueue`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..dialects.base import Dialect
    from ..model.address import QueueAddress
    from .message import OutgoingMessage
    from .pool import PooledConnection

__all__ = [
    "ConnectingTransport",
    "DepthHistoryTransport",
    "EngineTransport",
    "LeaseTransport",
    "OpenedQueue",
    "ProvisioningTransport",
    "PublishingTransport",
    "QueueTransport",
    "StorageTransport",
    "SubscriberLookup",
    "SubscriptionTransport",
]


class LeaseTransport(Protocol):
    """What a :class:`~.lease.ConnectionLease` reads of the transport it lends for: the dialect that
    translates a failed loan's errors, and how many connections the pool lends at most (said when none is
    free). The pool itself is handed to the lease."""

    pool_size: int

    @property
    def dialect(self) -> Dialect: ...


class ConnectingTransport(Protocol):
    """What running statements on the transport's database takes: its dialect (read at use: the first
    connection may switch it to the server's variant) and a pooled connection."""

    @property
    def dialect(self) -> Dialect: ...

    def connection(self, address: QueueAddress | None = None) -> AbstractContextManager[PooledConnection]: ...


class ProvisioningTransport(ConnectingTransport, Protocol):
    """What creating, checking, inspecting and dropping a table needs (``queue/provisioning.py``, the
    subscription table): also the transport's database, which names the lock that serialises creators."""

    def current_catalog(self) -> str | None: ...


class StorageTransport(ConnectingTransport, Protocol):
    """What reading a table's storage and vacuuming it needs (``queue/storage.py``): also a connection
    outside the pool, since a VACUUM runs outside any transaction."""

    def new_connection(self) -> Any: ...


class EngineTransport(Protocol):
    """What the SQLAlchemy engine over a transport's connections needs (``lent.py``): the dialect, which
    names SQLAlchemy's, and new connections for the engine to read the server's settings on. The engine is
    kept per transport, which it references weakly."""

    @property
    def dialect(self) -> Dialect: ...

    def new_connection(self) -> Any: ...


class OpenedQueue(Protocol):
    """What the transport's parts use of a queue the transport opens for them (``Transport.queue``): a
    receive's batch sends to it, a poison row is written raw into the error queue, publishing sends a copy,
    the subscription store checks and drops its table through it."""

    address: QueueAddress

    @property
    def dialect(self) -> Dialect: ...

    def send(
        self,
        message: OutgoingMessage | bytes | str,
        headers: Mapping[str, str | None] | None = None,
        time_to_be_received: timedelta | None = None,
        *,
        connection: Any = None,
    ) -> uuid.UUID: ...

    def send_batch(
        self, messages: Iterable[OutgoingMessage | bytes | str], *, connection: Any = None
    ) -> list[uuid.UUID]: ...

    def send_on(
        self, connection: Any, messages: Iterable[OutgoingMessage | bytes | str], *, commit: bool
    ) -> list[uuid.UUID]: ...

    def insert_raw(self, cursor: Any, params: Sequence[Any]) -> None: ...

    def exists(self) -> bool: ...

    def drop(self) -> None: ...


class QueueTransport(ProvisioningTransport, StorageTransport, Protocol):
    """What a :class:`~.queue.TableQueue` and its parts need of the transport it was opened on: where it
    is (for messages), how large a body may be, how receivers lock rows, the table's provisioning and
    storage, and the other queues a receive sends to or moves poison rows into."""

    description: str
    max_body_bytes: int
    lock_mode: str

    def queue(
        self, address: str | QueueAddress, *, error_queue: str | object | None = ...
    ) -> OpenedQueue: ...


class SubscriptionTransport(ProvisioningTransport, Protocol):
    """What the :class:`~.subscriptions.SubscriptionStore` needs: the table's address resolved and the
    queue addresses canonical as the transport's headers carry them, and the table opened as a queue to
    check it exists and to drop it."""

    description: str

    def resolve(self, address: str | QueueAddress) -> QueueAddress: ...

    def canonical(self, address: str | QueueAddress) -> QueueAddress: ...

    def queue(
        self, address: str | QueueAddress, *, error_queue: str | object | None = ...
    ) -> OpenedQueue: ...


class DepthHistoryTransport(ProvisioningTransport, Protocol):
    """What the depth history (:mod:`.depth_samples`) needs: its table's address resolved beside a queue's,
    connections to write and read it, and the creation lock's catalog."""

    def resolve(self, address: str | QueueAddress) -> QueueAddress: ...


class SubscriberLookup(Protocol):
    """What publishing asks of the subscription store: the queues subscribed to any of the topics."""

    def subscriber_queues(self, topics: Sequence[str], *, connection: Any = None) -> list[str]: ...


class PublishingTransport(ConnectingTransport, Protocol):
    """What :func:`~.publishing.publish` needs: the subscribers of the topics, each subscriber's queue to
    send a copy to, and the queue addresses as the headers carry them (for the result)."""

    @property
    def subscriptions(self) -> SubscriberLookup: ...

    def queue(
        self, address: str | QueueAddress, *, error_queue: str | object | None = ...
    ) -> OpenedQueue: ...

    def canonical(self, address: str | QueueAddress) -> QueueAddress: ...
