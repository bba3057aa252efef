"""The transaction modes of a receive: when its DELETE commits relative to the work done with its
messages."""

from __future__ import annotations

from enum import Enum

__all__ = ["TransactionMode"]


class TransactionMode(str, Enum):
    """How a receive's DELETE relates to the work done with its messages (the reference's modes).

    - ``sends_atomic_with_receive`` (default): the DELETE commits when the block ends; sends made through
      the batch run on the same connection and transaction, so they commit or roll back with it.
    - ``receive_only``: the DELETE commits when the block ends; sends commit on their own at once.
    - ``none``: the DELETE commits before the block runs; a failure in the block loses the messages.
    """

    NONE = "none"
    RECEIVE_ONLY = "receive_only"
    SENDS_ATOMIC_WITH_RECEIVE = "sends_atomic_with_receive"
