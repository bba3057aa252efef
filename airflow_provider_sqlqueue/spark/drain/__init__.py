"""Drain a queue into a sink with Spark, losing nothing and receiving nothing twice.

Phase 1 (executors): N tasks, each a competing consumer with its own connection, receive batches and, in the
same transaction as each receive's DELETE, insert the messages into the staging table under the run id. A
task that fails rolls back its open batch (those messages are back in the queue); what it committed is
staged. The action returns only counts, so a re-evaluation could only receive *more* messages into staging,
and the run state stops even that once phase 2 has begun.

Phase 2 (driver): the run moves to ``processing`` (receivers that still run see it and stop), the staged
rows of the run become a DataFrame (read in RowVersion slices; the rows of a run no longer change, so any
re-read returns the same data), the user transform runs, and the result is committed once per run id:

- table and queue sinks: one transaction writes the results, marks the run ``committed`` and deletes the
  run's staged rows (exactly once);
- file sinks: Spark writes ``<path>/run_id=<run id>/`` (overwriting an earlier attempt of the same run),
  then one transaction marks the run committed and deletes its staged rows (at least once: every output
  row carries message ids).

If anything fails before the commit, the run is marked ``aborted`` and its staged messages go back to the
input queue in one transaction. A driver killed outright leaves them staged: a re-run of the same run id
finishes the run, and any later job on the queue puts them back once the run's heartbeat is older than
``orphan_timeout``.

Only the transport core, the database driver and PySpark are used here: no Airflow. One module per part:

- ``config.py``: :class:`DrainConfig`, what one drain is asked to do;
- ``run.py``: :class:`Drain` and :func:`run_drain`, the run on the driver from start to commit or abort;
- ``receive.py``: phase 1, the receivers on the executors;
- ``messages.py``: the messages DataFrame, the run read with ``spark.read.format("sqlqueue")``;
- ``transform.py``: loading and applying the user's transform;
- ``sinks.py``: checking and writing the table, queue or file sink.

The run's row, its staged messages and orphaned runs are the one run lifecycle's (``spark/runs.py``).

The drain is an application of the ``sqlqueue`` data source (:mod:`..source`): phase 2 reads the run with
``spark.read.format("sqlqueue")`` and its run id (and the held ranges, with ``read_in_place``).
"""

from __future__ import annotations

from ..source.columns import message_row
from ..source.errors import DrainError, InjectedFault
from ..source.schema import messages_schema
from .config import DrainConfig
from .messages import run_messages, staged_messages
from .run import Drain, run_drain, summary_json
from .transform import load_transform

__all__ = [
    "Drain",
    "DrainConfig",
    "DrainError",
    "InjectedFault",
    "load_transform",
    "message_row",
    "messages_schema",
    "run_drain",
    "run_messages",
    "staged_messages",
    "summary_json",
]
