"""The engine-neutral transport core: queue tables with send, receive, peek and purge; the message pump,
endpoints and delayed delivery on top of them.

It imports no Airflow and no Spark, so plain scripts and Spark executors use it directly::

    from airflow_provider_sqlqueue.transport import open_transport

    with open_transport("sqlite:///queues.db") as transport:
        orders = transport.queue("orders")
        orders.create()
        orders.send(b"hello", headers={"NServiceBus.ContentType": "text/plain"})
        with orders.receive(max_messages=10) as batch:
            for message in batch:
                print(message.body)

The address and error types live one layer down, in :mod:`airflow_provider_sqlqueue.model`, where the
dialects import them too; they are re-exported here as part of this API.
"""

from __future__ import annotations

from ..model.address import QueueAddress
from ..model.errors import (
    ConfigurationError,
    HeaderFormatError,
    InvalidQueueName,
    MessageTooLarge,
    PermissionDenied,
    QueueNotFound,
    SqlQueueError,
    TransactionEndedError,
    TransientDatabaseError,
)
from .connection import Transport, open_transport
from .delayed import DelayedMover, DelayedStore
from .endpoint import Endpoint
from .lent import LentConnection, ReceiveConnection
from .message import OutgoingMessage, ReceivedMessage
from .pool import PooledConnection
from .publishing import PublishResult
from .pump import (
    MessageContext,
    MessagePump,
    PumpSettings,
    PumpStats,
    RampUpController,
    Strategy,
    load_handler,
)
from .queue import (
    Finding,
    ReceivedBatch,
    TableOptions,
    TableQueue,
    TableStorage,
    TransactionMode,
    VacuumResult,
)
from .recoverability import CircuitBreakerSettings
from .subscriptions import (
    Subscription,
    SubscriptionSettings,
    SubscriptionStore,
    topic_name,
    topics_of,
)

__all__ = [
    "CircuitBreakerSettings",
    "ConfigurationError",
    "DelayedMover",
    "DelayedStore",
    "Endpoint",
    "Finding",
    "HeaderFormatError",
    "InvalidQueueName",
    "LentConnection",
    "MessageContext",
    "MessagePump",
    "MessageTooLarge",
    "OutgoingMessage",
    "PermissionDenied",
    "PooledConnection",
    "PublishResult",
    "PumpSettings",
    "PumpStats",
    "QueueAddress",
    "QueueNotFound",
    "RampUpController",
    "ReceiveConnection",
    "ReceivedBatch",
    "ReceivedMessage",
    "SqlQueueError",
    "Strategy",
    "Subscription",
    "SubscriptionSettings",
    "SubscriptionStore",
    "TableOptions",
    "TableQueue",
    "TableStorage",
    "TransactionEndedError",
    "TransactionMode",
    "TransientDatabaseError",
    "Transport",
    "VacuumResult",
    "load_handler",
    "open_transport",
    "topic_name",
    "topics_of",
]
