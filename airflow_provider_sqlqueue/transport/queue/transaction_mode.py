"""The transaction modes of a receive: when its DELETE commits relative to the work done with its
messages, and what that work's sends join.

Each mode answers for itself what the receive block, the pump and a handler's context need to know, so
none of them branches on which mode it is.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from ...model.errors import ConfigurationError

if TYPE_CHECKING:
    from ...dialects.base import Dialect

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

    @property
    def handled_in_receive(self) -> bool:
        """Whether the messages are handled while the receive's transaction is still open: in every mode
        but ``none``, whose DELETE commits before the block runs. Only then can a failed handler's message
        roll back to be received again, can a handler be lent the receive's connection for statements that
        commit with it, and does the receive hold a single-writer engine's write lock while it is handled."""
        return self is not TransactionMode.NONE

    @property
    def sends_join_receive(self) -> bool:
        """Whether the sends, delayed sends and publishes made while handling run on the receive's
        connection and commit or roll back with its DELETE: only in ``sends_atomic_with_receive``. In the
        other modes each commits on its own at once, on a connection of its own."""
        return self is TransactionMode.SENDS_ATOMIC_WITH_RECEIVE

    def check_own_commit(self, dialect: Dialect, what: str) -> None:
        """Refuse ``what`` (a send or publish that commits on its own) where it would wait for the write lock
        its own receive holds: ``receive_only`` on an engine with a single writer (SQLite)."""
        if self.handled_in_receive and not self.sends_join_receive and dialect.single_writer:
            raise ConfigurationError(
                f"{dialect.display_name} has a single writer: {what} that commits on its own would wait "
                "for this receive's own write lock. Use transaction_mode='sends_atomic_with_receive'"
            )
