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

Names are loaded on first use, so that the dialects can import the address and error modules of this
package without a cycle.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "QueueAddress": "address",
    "OutgoingMessage": "message",
    "ReceivedMessage": "message",
    "Transport": "connection",
    "open_transport": "connection",
    "TableQueue": "queue",
    "ReceivedBatch": "queue",
    "TransactionMode": "queue",
    "TableOptions": "queue",
    "Finding": "queue",
    "SqlQueueError": "errors",
    "ConfigurationError": "errors",
    "InvalidQueueName": "errors",
    "QueueNotFound": "errors",
    "PermissionDenied": "errors",
    "MessageTooLarge": "errors",
    "HeaderFormatError": "errors",
    "TransientDatabaseError": "errors",
    "MessagePump": "pump",
    "MessageContext": "pump",
    "PumpStats": "pump",
    "RampUpController": "pump",
    "Strategy": "pump",
    "load_handler": "pump",
    "CircuitBreakerSettings": "recoverability",
    "DelayedStore": "delayed",
    "DelayedMover": "delayed",
    "Endpoint": "endpoint",
}

__all__ = [
    "CircuitBreakerSettings",
    "ConfigurationError",
    "DelayedMover",
    "DelayedStore",
    "Endpoint",
    "Finding",
    "HeaderFormatError",
    "InvalidQueueName",
    "MessageContext",
    "MessagePump",
    "MessageTooLarge",
    "OutgoingMessage",
    "PermissionDenied",
    "PumpStats",
    "QueueAddress",
    "QueueNotFound",
    "RampUpController",
    "ReceivedBatch",
    "ReceivedMessage",
    "SqlQueueError",
    "Strategy",
    "TableOptions",
    "TableQueue",
    "TransactionMode",
    "TransientDatabaseError",
    "Transport",
    "load_handler",
    "open_transport",
]

if TYPE_CHECKING:
    from .address import QueueAddress
    from .connection import Transport, open_transport
    from .delayed import DelayedMover, DelayedStore
    from .endpoint import Endpoint
    from .errors import (
        ConfigurationError,
        HeaderFormatError,
        InvalidQueueName,
        MessageTooLarge,
        PermissionDenied,
        QueueNotFound,
        SqlQueueError,
        TransientDatabaseError,
    )
    from .message import OutgoingMessage, ReceivedMessage
    from .pump import MessageContext, MessagePump, PumpStats, RampUpController, Strategy, load_handler
    from .queue import Finding, ReceivedBatch, TableOptions, TableQueue, TransactionMode
    from .recoverability import CircuitBreakerSettings


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
