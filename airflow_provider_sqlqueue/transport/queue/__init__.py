"""A queue table: create, send, receive, peek, count and purge, the same on every engine.

The modules of this package, one idea each: :mod:`.table_queue` (``TableQueue``: send, receive, depth,
purge), :mod:`.provisioning` (the table's lifecycle: create, script, inspect, drop), :mod:`.batch`
(``ReceivedBatch``: a receive's messages and sends), :mod:`.transaction_mode`, :mod:`.rows` (reading the
rows drivers return) and :mod:`.statements` (a queue's rendered SQL).
"""

from __future__ import annotations

from ...dialects.base import Finding, TableOptions
from .batch import ReceivedBatch
from .provisioning import begin_creation
from .rows import as_utc
from .table_queue import TableQueue
from .transaction_mode import TransactionMode

__all__ = [
    "Finding",
    "ReceivedBatch",
    "TableOptions",
    "TableQueue",
    "TransactionMode",
    "as_utc",
    "begin_creation",
]
