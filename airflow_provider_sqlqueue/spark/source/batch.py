"""``spark.read.format("sqlqueue")``: a batch read that stages what it receives under a run id, hands Spark
the staged rows, and keeps them staged until the application acknowledges or releases the run.

A receive deletes the message, so a batch read cannot simply be repeated; but Spark evaluates a DataFrame
again for every action and re-runs failed tasks. So planning (``partitions()``, on the driver) receives
into staging once per run id: every later plan of the same run id, in this job or a re-run of it, reads the
same staged rows and receives nothing. What ends a run:

- :func:`ack_read` once the results are safely written: the staged rows are deleted (the run is committed);
- :func:`release_read` to give up: the staged messages go back to the end of the input queue.

Until then nothing is lost and nothing goes back by itself: a failed job leaves its messages staged under
its run id, and a new read with that run id returns them.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from ...transport import ConfigurationError, Transport
from ..moves import stage_batch
from ..runs import Runs
from ..tables import ABORTED, COMMITTED, READ, RECEIVING, BridgeSql
from .heartbeat import Heartbeat
from .hold import RowHold
from .in_place import read_held
from .options import SourceOptions
from .staging import bridge_sql, read_staged
from .transactions import execute, execute_counted, require_bridge_layout

__all__ = [
    "ReadTask",
    "SqlQueueBatchReader",
    "ack_read",
    "move_unreadable_held",
    "plan_tasks",
    "release_read",
    "slice_bounds",
]

log = logging.getLogger("airflow_provider_sqlqueue.spark")

HEARTBEAT_SECONDS = 30.0


class ReadTask(InputPartition):
    """The RowVersion slices (from, to exclusive) one read task reads, in order: of the run's staged rows, or
    of the rows an application holds in the queue (``heldRanges``)."""

    def __init__(self, bounds: list[tuple[int, int]]) -> None:
        super().__init__(bounds)
        self.bounds = bounds


def slice_bounds(ranges: Sequence[tuple[int, int]], rows_per_slice: int) -> list[tuple[int, int]]:
    """Inclusive RowVersion ranges cut into slices (from, to exclusive) of at most ``rows_per_slice``."""
    bounds = []
    for low, high in ranges:
        for start in range(low, high + 1, rows_per_slice):
            bounds.append((start, min(start + rows_per_slice, high + 1)))
    return bounds


def plan_tasks(
    options: SourceOptions, count: int, low: int, high: int, held: Sequence[tuple[int, int]] | None = None
) -> list[ReadTask]:
    """The read tasks of ``count`` rows between RowVersions ``low`` and ``high``: held rows in their ``held``
    ranges, staged rows evenly over the span. Slices of at most ``sliceRows`` rows bound what one statement
    fetches; consecutive slices go to one task up to ``partitionRows`` rows, as tasks have a fixed cost
    (never fewer tasks than ``partitions``, nor more than slices)."""
    if held is not None:
        bounds = slice_bounds(held, options.slice_rows)
    else:
        span = high - low + 1
        slices = min(max(options.partitions, math.ceil(count / options.slice_rows)), span)
        edges = [low + (span * i) // slices for i in range(slices)] + [high + 1]
        bounds = [(edges[i], edges[i + 1]) for i in range(slices)]
    tasks = min(len(bounds), max(options.partitions, math.ceil(count / options.partition_rows)))
    return [ReadTask(bounds[len(bounds) * i // tasks : len(bounds) * (i + 1) // tasks]) for i in range(tasks)]


def _run_id(options: SourceOptions) -> str:
    if not options.run_id:
        raise ConfigurationError(
            'a batch read of sqlqueue needs option("runId", ...) (or SQLQUEUE_RUN_ID in the environment, '
            "as SqlQueueSparkApplicationOperator sets it): the messages it receives stay staged under that "
            "id until ack_read or release_read, and a re-run with the same id reads them again"
        )
    return options.run_id


def _receive(transport: Transport, sql: BridgeSql, queue: Any, options: SourceOptions, run_id: str) -> None:
    """Receive into staging with ``receivers`` competing threads (one connection each) until the queue is
    empty or ``max_messages`` were taken (counting what an earlier attempt of the run staged)."""
    quota: int | None = None
    if options.max_messages is not None:
        count = int(execute(transport, sql.staged_stats(), (run_id,), write=False)[0][0] or 0)
        quota = max(options.max_messages - count, 0)
    lock = threading.Lock()

    def take(size: int) -> int:
        nonlocal quota
        with lock:
            if quota is None:
                return size
            granted = min(size, quota)
            quota -= granted
            return granted

    def give_back(count: int) -> None:
        nonlocal quota
        with lock:
            if quota is not None:
                quota += count

    def receiver(part: int) -> None:
        while True:
            size = take(options.batch_size)
            if size == 0:
                return
            moved = stage_batch(transport, queue, sql, run_id, size, part)
            taken = 0 if moved is None else moved.taken
            if taken == 0:
                give_back(size)
                return
            give_back(size - taken)

    heartbeat = Heartbeat(transport, sql, run_id, HEARTBEAT_SECONDS)
    heartbeat.start()
    try:
        with ThreadPoolExecutor(options.receivers, thread_name_prefix="sqlqueue-read") as pool:
            for future in [pool.submit(receiver, part) for part in range(options.receivers)]:
                future.result()
    finally:
        heartbeat.stopped.set()
    changed = execute_counted(transport, sql.counted(sql.set_state((RECEIVING,))), (READ, run_id))
    if changed != 1:
        raise ConfigurationError(f"run {run_id} was released while it received; read it again")


class SqlQueueBatchReader(DataSourceReader):
    """Plans a batch read on the driver (receiving into staging once per run id) and reads staged slices on
    the executors. Holds only the options: it is pickled to the executors, where each read opens its own
    connection."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[ReadTask]:
        options = self.options
        run_id = _run_id(options)
        if options.held_ranges is not None:  # the application holds them: nothing to receive or count
            ranges = options.held_ranges
            return plan_tasks(options, sum(high - low + 1 for low, high in ranges), 0, 0, ranges)
        with options.open(pool_size=options.receivers + 1, max_overflow=1) as transport:
            sql = bridge_sql(transport, options, check=True)
            queue = transport.queue(options.queue)
            if not queue.exists():
                raise ConfigurationError(f"queue {queue.name} does not exist")
            require_bridge_layout(queue, "queue")
            if Runs(transport, sql).start_read(run_id, queue.name) == RECEIVING:
                _receive(transport, sql, queue, options, run_id)
            count, low, high = execute(transport, sql.staged_stats(), (run_id,), write=False)[0]
        count = int(count or 0)
        return plan_tasks(options, count, int(low), int(high)) if count else []

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, ReadTask):  # PySpark's placeholder: the run staged nothing
            return
        run_id = _run_id(self.options)
        if self.options.held_ranges is not None:
            yield from read_held(self.options, partition.bounds, partial(note_held_read, run_id))
            return
        for low, high in partition.bounds:
            yield from read_staged(self.options, run_id, low, high)


def note_held_read(
    run_id: str, transport: Transport, sql: BridgeSql, bounds: list[tuple[int, int]], unreadable: list[int]
) -> None:
    """Executor side, a task's held slices read to their end: add them (``checked``) and their rows whose
    headers cannot be read (``unreadable``) to the run's Summary, a compare-and-set (a retried task adds the
    same). Only while the application keeps its Summary a JSON object: before, nothing is noted, and the
    application reads the headers of slices noted nowhere itself (:func:`move_unreadable_held`)."""
    for _ in range(20):
        rows = execute(transport, sql.get_run(), (run_id,), write=False)
        text = rows[0][3] if rows else None
        notes = json.loads(text) if text else None
        if not isinstance(notes, dict):
            return
        checked = sorted({tuple(pair) for pair in notes.get("checked", ())} | set(bounds))
        marked = {
            **notes,
            "checked": [list(pair) for pair in checked],
            "unreadable": sorted(set(notes.get("unreadable", ())) | set(unreadable)),
        }
        params = (json.dumps(marked), run_id, text)
        if marked == notes or execute_counted(transport, sql.counted(sql.set_summary_if()), params) == 1:
            return
    log.warning("run %s keeps changing: the held slices read were not noted (they are read again)", run_id)


def move_unreadable_held(
    transport: Transport,
    sql: BridgeSql,
    run_id: str,
    hold: RowHold,
    slices: Sequence[tuple[int, int]],
    echo: Callable[[str], None],
) -> int:
    """Driver side, after the reads of the held ``slices`` and before the hold commits: move the held rows
    whose headers cannot be read to the error queue, in the hold's transaction, so they leave the queue with
    the run or come back with it; return how many. The tasks noted what they found in the run's Summary; the
    headers of a slice no task read to its end (a transform that read only some) are read here."""
    rows = execute(transport, sql.get_run(), (run_id,), write=False)
    notes = json.loads(rows[0][3]) if rows and rows[0][3] else {}
    notes = notes if isinstance(notes, dict) else {}
    unreadable = {int(key) for key in notes.get("unreadable", ())}
    checked = {(int(low), int(high)) for low, high in notes.get("checked", ())}
    unread = [bounds for bounds in slices if bounds not in checked]
    if unread:
        echo(
            f"the transform left {len(unread)} slice(s) of the held messages unread: "
            "reading their headers to find unreadable ones"
        )
        unreadable |= hold.unreadable_in(unread)
    hold.move_unreadable(sorted(unreadable))
    if unreadable:
        echo(f"{len(unreadable)} held message(s) with unreadable headers moved to the error queue")
    return len(unreadable)


def _end_run(options: SourceOptions | Mapping[str, str], to_state: str) -> int:
    """Move a receiving or read run to ``to_state``, its staged messages put back (``aborted``) or deleted,
    in one transaction; 0 when it ended so before (the call is idempotent)."""
    parsed = options if isinstance(options, SourceOptions) else SourceOptions.parse(options)
    run_id = _run_id(parsed)
    with parsed.open(pool_size=1, max_overflow=0) as transport:
        restore_to = transport.queue(parsed.queue).address if to_state == ABORTED else None
        return Runs(transport, bridge_sql(transport, parsed)).end_read(run_id, to_state, restore_to)


def ack_read(options: SourceOptions | Mapping[str, str]) -> int:
    """End a batch read whose results are safe: delete its staged messages (the read's options, with
    ``run_id``). Returns how many; 0 if it was acknowledged before."""
    return _end_run(options, COMMITTED)


def release_read(options: SourceOptions | Mapping[str, str]) -> int:
    """Give a batch read up: its staged messages go back to the end of the input queue, in their order.
    Returns how many; 0 if it was released before."""
    return _end_run(options, ABORTED)
