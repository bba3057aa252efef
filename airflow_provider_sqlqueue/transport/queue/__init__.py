"""A queue table: create, send, receive, peek, count and purge, the same on every engine.

The modules of this package, one idea each: :mod:`.table_queue` (``TableQueue``: send, receive, depth,
purge), :mod:`.provisioning` (the table's lifecycle: create, script, inspect, drop), :mod:`.storage`
(what deleted rows leave behind, and the vacuum that gives it back), :mod:`.batch` (``ReceivedBatch``: a
receive's messages and sends), :mod:`.receiving` (the receive block), :mod:`.transaction_mode`,
:mod:`.received_rows` (reading the rows drivers return), :mod:`.statements` (a queue's rendered SQL) and
:mod:`.roles` (what the statements, the receive block and a batch need of their queue, as protocols).
"""

from __future__ import annotations

from ...dialects.base import Finding, TableOptions, TableStorage
from .batch import ReceivedBatch
from .provisioning import begin_creation
from .received_rows import as_utc
from .storage import VacuumResult
from .table_queue import TableQueue
from .transaction_mode import TransactionMode

__all__ = [
    "Finding",
    "ReceivedBatch",
    "TableOptions",
    "TableQueue",
    "TableStorage",
    "TransactionMode",
    "VacuumResult",
    "as_utc",
    "begin_creation",
]
