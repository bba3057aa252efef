"""The errors of moving queued messages through Spark: the one a drain raises when it cannot finish (its run's
bookkeeping or its hold found the run changed under it), and the fault the failure drills inject (the drain's
``fail_receive_batch``, the writer's ``failAfterBatch``)."""

from __future__ import annotations

from ...transport import SqlQueueError

__all__ = ["DrainError", "InjectedFault"]


class DrainError(SqlQueueError):
    """The drain could not finish; its messages are back in the input queue (or staged, if said so)."""


class InjectedFault(RuntimeError):
    """Raised by a failure drill: ``fail_receive_batch`` inside a receive, before its commit;
    ``failAfterBatch`` right after a written batch committed."""
