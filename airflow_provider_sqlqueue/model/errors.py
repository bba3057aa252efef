"""The error hierarchy of the transport and the dialects.

Every error the transport raises derives from :class:`SqlQueueError`, so callers can catch one type.
Driver errors are classified by the dialect of their engine and re-raised as one of these, with the
original exception chained as ``__cause__``.
"""

from __future__ import annotations


class SqlQueueError(Exception):
    """Base class of every error raised by the transport."""


class ConfigurationError(SqlQueueError, ValueError):
    """A connection URL, option or argument that cannot work (raised before anything is sent)."""


class InvalidQueueName(SqlQueueError, ValueError):
    """A queue, schema or catalog name that is empty, too long, or contains characters no engine accepts."""


class QueueNotFound(SqlQueueError):
    """The queue table (or its schema) does not exist: create it with the provisioning step first."""


class PermissionDenied(SqlQueueError):
    """The database refused the statement for lack of a privilege; the message names what is missing."""


class MessageTooLarge(SqlQueueError, ValueError):
    """A message body exceeds what the engine (or the configured limit) can store; nothing was sent."""


class HeaderFormatError(SqlQueueError, ValueError):
    """Headers that are not a flat JSON object of string keys to string or null values."""


class TransientDatabaseError(SqlQueueError):
    """A failure worth retrying: deadlock, serialization failure, lock timeout or a lost connection.

    A receive that fails this way has been rolled back (or its connection is gone, which rolls it back on
    the server), so its messages are still in the queue. A commit that fails this way leaves the outcome
    unknown to the client: the messages were either delivered once or are still queued, never lost.
    """


class TransactionEndedError(SqlQueueError):
    """A statement run in a transaction that others' work shares ended it (committed or rolled back), left
    it aborted, or nested another in it, as the driver reported afterwards. The message says which
    statement, and whether what ran before it may already be committed."""
