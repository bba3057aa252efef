"""The drain's own exceptions: the one it raises when it cannot finish, and the fault its drills inject."""

from __future__ import annotations

from ...transport import SqlQueueError

__all__ = ["DrainError", "InjectedFault"]


class DrainError(SqlQueueError):
    """The drain could not finish; its messages are back in the input queue (or staged, if said so)."""


class InjectedFault(RuntimeError):
    """Raised by ``fail_receive_batch`` drills, inside a receive, before its commit."""
