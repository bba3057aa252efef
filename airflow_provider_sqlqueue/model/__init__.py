"""The values every layer shares: queue addresses and the error hierarchy.

This is the bottom layer. It imports nothing else of the package, so the dialects (which parse, quote and
classify with these types) and the transport (which composes the dialects) both build on it without
importing each other. Users import these names from :mod:`airflow_provider_sqlqueue.transport`.
"""

from __future__ import annotations

from .address import QueueAddress
from .errors import (
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

__all__ = [
    "ConfigurationError",
    "HeaderFormatError",
    "InvalidQueueName",
    "MessageTooLarge",
    "PermissionDenied",
    "QueueAddress",
    "QueueNotFound",
    "SqlQueueError",
    "TransactionEndedError",
    "TransientDatabaseError",
]
