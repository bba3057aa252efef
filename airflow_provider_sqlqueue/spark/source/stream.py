"""``spark.readStream.format("sqlqueue")``: a stream read in place, or staged.

A query on a new checkpoint reads in place where the driver can hold the messages (PostgreSQL, option
``readInPlace``): its offsets name held RowVersion ranges and ``in_place.py`` does the work. Otherwise its
offsets are positions in the stream's staging rows, as below; a restarted query keeps its offsets' kind.

- ``latestOffset(start, limit)`` receives from the queue into staging (each batch's DELETE and INSERT in one
  transaction, the positions consecutive after the stream's last one) and returns the new end, at most
  ``limit`` positions after ``start``. Rows staged beyond ``start`` by a run that died before Spark wrote
  its offset log count first, so they are never skipped.
- ``partitions(start, end)`` splits ``(start, end]``; ``read`` selects those staged rows on the executors.
- ``commit(end)`` deletes the staged rows up to ``end``: Spark calls it only once the batch is in its commit
  log, so a restarted query re-reads every batch it had not committed, from the same staged rows.
  ``latestOffset(start)`` deletes the rows up to ``start`` first: Spark asks for the next end only after
  the batch ending at ``start`` is in its commit log, and it calls ``commit`` only when it plans the next
  batch, which a query that ends never does.

So the query's checkpoint and the staging table together hold every received message until the sink's batch
is committed: with a sink that writes each batch id once (the file sink, ``foreachBatch`` keyed by batch id)
every message reaches it exactly once.

A query that ends after its last batch (Trigger.AvailableNow, whose last ``latestOffset`` finds no more)
leaves nothing staged that its sink has. A query stopped (``stop()``, a failure, a killed driver) after a
batch was planned and before Spark's next ``latestOffset`` leaves that batch staged: the reader cannot tell
whether it reached the commit log (the sink has it) or not (the sink may hold part of it). A restart from
the checkpoint settles it. ``partitions`` records in the stream's row how far queries have planned; a query
on a new checkpoint (``initialOffset``) that finds staged rows up to that mark refuses to start unless the
``onUncommittedBatch`` option says whether to deliver them again or discard them. Staged rows beyond the
mark were never in a micro-batch: a new query starts with them. ``sqlqueue spark runs`` lists them.

One query owns a stream id: each reader claims it in the stream's row on its first call on the driver
(``initialOffset`` for a new checkpoint, else ``latestOffset`` or ``partitions`` after a restart), so the
query that starts last takes it over. From then on the other query's receives, plans, reads (the token
travels in each partition) and commits fail naming the stream id (``staging.py``), so no message reaches
both. ``initialOffset`` claims together with its decision on the staged rows: a query refused for an
uncommitted batch takes nothing from the query that read it. Each such claim counts one more checkpoint in
the stream's row, and the query's offsets carry the count: a query restarted from an older checkpoint than
the last one started on the stream id is refused before it claims, since its replay could repeat what the
newer query delivered.

Without ``maxMessagesPerTrigger`` a micro-batch takes at most ``batchSize * DEFAULT_RECEIVES_PER_TRIGGER``
messages (``options.py``), with Spark's ``ReadAllAvailable`` too.

Staging ahead (option ``stageAhead``, off by default: it overlaps the work, it does not reduce it): once
``partitions`` planned a micro-batch, a thread of
the driver's reader stages the next trigger's messages while Spark runs this one, so the database's moves
overlap the executors' work instead of waiting for the next ``latestOffset``. It stages exactly as
``latestOffset`` does (one receive per transaction, the stream's row compared and advanced in it, so it
stops once another query owns the stream), one trigger's worth at most beyond the planned end, within
Trigger.AvailableNow's bound, and never after a receive found the queue empty. Rows it staged are rows no
micro-batch has read: ``latestOffset`` counts them first, a restart or a new checkpoint starts with them,
so a killed driver loses and duplicates nothing (an open receive rolls back). One lock orders its receives
with the reader's own calls on the stream's row.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from ...transport import ConfigurationError, Transport
from ..runs import Runs
from ..tables import STREAMING, BridgeSql
from .batch import ReadTask, plan_tasks
from .hold import reason_not_to_hold
from .in_place import (
    INITIAL_OFFSET,
    StreamHold,
    held_offset,
    is_in_place,
    newest_row_version,
    offset_ranges,
    read_held,
)
from .options import SourceOptions
from .staging import (
    StreamConflict,
    StreamMark,
    bridge_sql,
    claim_stream,
    commit_stream,
    read_staged,
    stage_stream_batch,
    taken_over,
)
from .transactions import execute, execute_counted, require_bridge_layout

__all__ = ["PositionRange", "SqlQueueStreamReader"]


log = logging.getLogger("airflow_provider_sqlqueue.spark")


class PositionRange(InputPartition):
    """Staged rows of one stream with ``low < position <= high``, read only while ``owner`` (the planning
    query's token) owns the stream."""

    def __init__(self, low: int, high: int, owner: str | None = None) -> None:
        super().__init__((low, high))
        self.low = low
        self.high = high
        self.owner = owner


def _position(offset: dict) -> int:
    try:
        return int(offset["position"])
    except (KeyError, TypeError, ValueError):
        raise ConfigurationError(f"not an offset of the sqlqueue source: {offset!r}") from None


class SqlQueueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream's reader. Spark keeps one instance on the driver for the query's life (offsets and commits)
    and pickles it to the executors for ``read``; it holds only the options, the Trigger.AvailableNow
    bounds and its owner token, and opens a connection per call."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.stream_id = str(options.stream_id)
        self.budget: int | None = None  # Trigger.AvailableNow, staged, not PostgreSQL: how many more it takes
        self.ceiling: int | None = None  # Trigger.AvailableNow on PostgreSQL: the newest RowVersion it takes
        self.owner = uuid.uuid4().hex  # this query's claim on the stream
        self.claimed = False
        self.checkpoint: int | None = None  # the stream row's checkpoint count this query's offsets carry
        self._resumed_from: dict | None = None  # a restart's first offset, checked when it claims
        self._initial: dict | None = None  # the answer to initialOffset
        self.committed_through = 0  # the staged rows through this position are deleted (driver only)
        self._lock = threading.RLock()  # the driver's calls and the staging-ahead thread, one at a time
        self._ahead: threading.Thread | None = None
        self._ahead_through = 0  # the staging-ahead thread stages up to this position
        self._ahead_wanted = options.trigger_limit  # how far ahead: the last latestOffset's limit
        self._drained = False  # the last receive found the queue empty
        self._stopped = False
        self._held: StreamHold | None = None  # read in place: the driver's hold (in_place.py)
        self._settled: tuple | None = None  # read in place: the ranges of the batch settled last

    def __getstate__(self) -> dict:
        """What the executors get: no lock, no thread."""
        state = dict(self.__dict__)
        state["_lock"] = state["_ahead"] = state["_held"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    # ---- the stream's row ----------------------------------------------------------------------
    def _mark(self, transport: Transport, sql: BridgeSql, queue: Any) -> StreamMark:
        """The stream's row; created at position 0 the first time."""
        row = Runs(transport, sql).start_stream(self.stream_id, queue.name, StreamMark(0).summary())
        if row.state != STREAMING or row.queue != queue.name:
            raise ConfigurationError(
                f"stream id {self.stream_id} is used by a {row.state} run on {row.queue}; "
                "choose another streamId"
            )
        return StreamMark.parse(row.summary, self.stream_id)

    def _owned(self, transport: Transport, sql: BridgeSql, queue: Any) -> StreamMark:
        """The stream's row, owned by this query: claimed on the query's first call, and an error naming
        the stream id once another query has taken it, or (a restart) once a query started on it from a
        newer checkpoint."""
        for _ in range(3):
            mark = self._mark(transport, sql, queue)
            if mark.owner == self.owner:
                return mark
            if self.claimed:
                raise taken_over(self.stream_id)
            self._check_checkpoint(mark)
            if claim_stream(transport, sql, self.stream_id, mark, self.owner):
                self.claimed, self.checkpoint = True, mark.checkpoint
                return replace(mark, owner=self.owner)
        raise StreamConflict(
            f"stream {self.stream_id} keeps changing under this query: one stream id belongs to one "
            "streaming query (set option streamId)"
        )

    def _claim(self) -> None:
        """Own the stream (claim it on a restart's first call) before holding or settling rows in place."""
        with self._open() as transport:
            self._owned(transport, bridge_sql(transport, self.options), transport.queue(self.options.queue))

    def _resume(self, offset: dict) -> None:
        """Note the first offset a query restarted from its checkpoint passes (caller holds the lock)."""
        if not self.claimed and self._resumed_from is None:
            self._resumed_from = offset

    def _check_checkpoint(self, mark: StreamMark) -> None:
        """A restart claims the stream only if no query started on it from a new checkpoint since this
        checkpoint's offsets were written (offsets written before they carried the count pass)."""
        given = (self._resumed_from or {}).get("checkpoint")
        if given is None or int(given) == mark.checkpoint:
            return
        raise ConfigurationError(
            f"stream {self.stream_id}: a query started on this stream id from a new checkpoint after this "
            "checkpoint's last micro-batch, so replaying or going on from here could repeat what that query "
            "delivered. Go on with that query's checkpoint; a checkpoint of its own wants its own streamId"
        )

    def _offset(self, **fields: Any) -> dict:
        """An offset of this query: the fields and the stream row's checkpoint count."""
        return fields if self.checkpoint is None else {**fields, "checkpoint": self.checkpoint}

    def _planned(self, high: int) -> None:
        """Record that a micro-batch reads the staged rows up to ``high`` (the mark only grows)."""
        self._record(lambda mark: None if (mark.planned or 0) >= high else replace(mark, planned=high))

    def _record(self, change: Callable[[StreamMark], StreamMark | None]) -> None:
        """Compare-and-set the stream's row, owned by this query, to ``change`` of it (None: as it is)."""
        with self._open() as transport:
            sql = bridge_sql(transport, self.options)
            queue = transport.queue(self.options.queue)
            for _ in range(3):
                mark = self._owned(transport, sql, queue)
                changed = change(mark)
                if changed is None:
                    return
                params = (changed.summary(), self.stream_id, mark.summary())
                if execute_counted(transport, sql.counted(sql.set_summary_if()), params) == 1:
                    return
        raise StreamConflict(
            f"stream {self.stream_id} keeps changing under this query: one stream id belongs to one "
            "streaming query (set option streamId)"
        )

    def _open(self) -> Transport:
        return self.options.open(pool_size=1, max_overflow=0)

    # ---- Spark's calls on the driver -------------------------------------------------------------
    def initialOffset(self) -> dict:
        """Spark may ask more than once: the query starts once, from the first answer."""
        with self._lock:
            if self._initial is None:
                self._initial = self._initial_offset()
            return dict(self._initial)

    def _initial_offset(self) -> dict:
        """Where a query with a new checkpoint starts: at the stream's last position, or before the staged
        rows no micro-batch has read. Staged rows a micro-batch has read (the last batch of a query that
        ended, or of one that failed) may already be in that query's sink: ``onUncommittedBatch`` says
        whether to deliver them again, discard them, or (the default) refuse to start.

        The query claims the stream with a compare-and-set of the row it decided on, so no query plans or
        stages in between; a query that refuses to start claims nothing."""
        with self._open() as transport:
            sql = bridge_sql(transport, self.options, check=True)
            queue = transport.queue(self.options.queue)
            require_bridge_layout(queue, "queue")
            for _ in range(3):
                mark = self._mark(transport, sql, queue)
                stats = execute(transport, sql.staged_stats(), (self.stream_id,), write=False)[0]
                in_place = self._reads_in_place(transport, queue, int(stats[0] or 0))
                settled = self._in_place_start(mark)  # a batch an earlier query held and never settled
                settled = replace(settled, checkpoint=mark.checkpoint + 1)
                start = dict(INITIAL_OFFSET) if in_place else {"position": self._start(settled, *stats)}
                if claim_stream(transport, sql, self.stream_id, mark, self.owner, settled):
                    self.claimed, self.checkpoint = True, settled.checkpoint
                    start = self._offset(**start)
                    if mark.held and self.options.on_uncommitted_batch == "discard":
                        self._hold().settle(mark.held)
                    return start
        raise StreamConflict(
            f"stream {self.stream_id} keeps changing while this query starts: one stream id belongs to one "
            "streaming query (set option streamId)"
        )

    def _reads_in_place(self, transport: Transport, queue: Any, staged: int) -> bool:
        """Whether a query on a new checkpoint reads in place (``readInPlace``, by default where the driver
        can hold the messages: ``in_place.py``); the checkpoint's offsets keep the choice for restarts."""
        if self.options.read_in_place is False:
            return False
        if staged:
            reason: str | None = f"stream {self.stream_id} has {staged} staged messages to deliver first"
        elif self.options.stage_ahead:
            reason = "option stageAhead stages the messages"
        else:
            reason = reason_not_to_hold(transport, queue)
        if reason is None:
            return True
        if self.options.read_in_place:
            raise ConfigurationError(f"stream {self.stream_id} cannot read in place: {reason}")
        log.info("stream %s stages its messages: %s", self.stream_id, reason)
        return False

    def _in_place_start(self, mark: StreamMark) -> StreamMark:
        """The stream's row as a new in-place query starts with it: a batch an earlier query planned and
        never settled went back to the queue, and may be in that query's sink (``onUncommittedBatch``)."""
        if mark.held is None:
            return mark
        policy = self.options.on_uncommitted_batch
        if policy in ("redeliver", "discard"):
            return replace(mark, held=None)
        count = sum(high - low + 1 for low, high in mark.held)
        raise ConfigurationError(
            f"stream {self.stream_id}: an earlier query read up to {count} messages (RowVersions "
            f"{mark.held[0][0]} to {mark.held[-1][1]}) in a micro-batch it never committed to this source, "
            "and this query starts from a new checkpoint, so they may already be in that query's sink. "
            "Restart the earlier query from its checkpoint to go on exactly once; or set option("
            '"onUncommittedBatch", "redeliver") to deliver them again, or "discard" when they are in the '
            "sink; a new checkpoint wants its own streamId"
        )

    def _hold(self) -> StreamHold:
        if self._held is None:
            self._held = StreamHold(self.options)
        return self._held

    def _start(self, mark: StreamMark, count: Any, low: Any, high: Any) -> int:
        """Where a new checkpoint starts, from the stream's row and its staged rows' count and positions."""
        if not count:
            return mark.position
        low, high = int(low), int(high)
        if mark.planned is None or mark.planned < low:
            return low - 1
        policy = self.options.on_uncommitted_batch
        if policy == "redeliver":
            return low - 1
        if policy == "discard":
            return mark.planned
        raise ConfigurationError(
            f"stream {self.stream_id} has {min(mark.planned, high) - low + 1} messages (positions {low} to "
            f"{min(mark.planned, high)}) staged in a micro-batch that an earlier query read and never "
            "committed to this source, and this query starts from a new checkpoint, so they may already be "
            "in that query's sink. Restart the earlier query from its checkpoint to go on exactly once; or "
            'set option("onUncommittedBatch", "redeliver") to deliver them again, or "discard" when they '
            "are in the sink; a new checkpoint wants its own streamId"
        )

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.options.trigger_limit)

    def prepareForTriggerAvailableNow(self) -> None:
        """Receive no more than the messages queued now, so the query ends while senders go on. On
        PostgreSQL that is the queue's newest RowVersion now, read from the index's end: the stream holds
        or stages none above it. Elsewhere this counts the queue (a count reads every row)."""
        with self._lock, self._open() as transport:
            queue = transport.queue(self.options.queue)
            require_bridge_layout(queue, "queue")  # Spark calls this before initialOffset
            self.ceiling = newest_row_version(transport, self.options)
            if self.ceiling is None:
                self.budget = queue.count()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        with self._lock:
            self._resume(start)
            return self._latest_offset(start, limit)

    def _latest_offset(self, start: dict, limit: ReadLimit) -> dict:
        wanted = limit.max_rows if isinstance(limit, ReadMaxRows) else self.options.trigger_limit
        if is_in_place(start):
            return self._hold_next(start, wanted)
        low = _position(start)
        with self._open() as transport:
            sql = bridge_sql(transport, self.options)
            queue = transport.queue(self.options.queue)
            mark = self._owned(transport, sql, queue)
            last = mark.position
            if last < low:
                raise ConfigurationError(
                    f"stream {self.stream_id} is at position {last}, behind the checkpoint's {low}: the "
                    "checkpoint belongs to another stream id or database"
                )
            if low > self.committed_through:
                # Spark asks for the end after ``start`` only once the micro-batch ending at ``start`` is in
                # its commit log, so the sink has it: delete it now, not at the next plan's commit(), which
                # a query that ends (Trigger.AvailableNow, stop()) never reaches.
                commit_stream(transport, sql, self.stream_id, mark, low)
                self.committed_through = low
            while last - low < wanted:
                size = min(self.options.batch_size, wanted - (last - low))
                if self.budget is not None:
                    size = min(size, self.budget)
                if size <= 0:
                    break
                taken, mark = stage_stream_batch(
                    transport, queue, sql, self.stream_id, size, mark, through=self.ceiling
                )
                last = mark.position
                if self.budget is not None:
                    self.budget -= taken
                self._drained = taken < size
                if taken < size:
                    break
        self._ahead_wanted = wanted
        return self._offset(position=min(last, low + wanted))

    def _hold_next(self, start: dict, wanted: int) -> dict:
        """Read in place: commit the batch ending at ``start`` (it is in Spark's commit log), then hold up
        to ``wanted`` more messages; the offset after them names their RowVersions."""
        self._claim()
        self._settle(offset_ranges(start))
        self._ahead_wanted = wanted
        held = self._hold().take(wanted, self.ceiling)
        return self._offset(**held_offset(tuple(held.ranges))) if held.count else start

    def _settle(self, ranges: tuple) -> None:
        if ranges and ranges != self._settled:
            self._hold().settle(ranges)
            self._settled = ranges

    def _plan_held(self, ranges: tuple) -> None:
        """Record in the stream's row that a micro-batch reads the held ``ranges``."""
        self._record(lambda mark: None if mark.held == ranges else replace(mark, held=ranges))

    def reportLatestOffset(self) -> dict | None:
        return None

    def partitions(self, start: dict, end: dict) -> list[Any]:
        with self._lock:
            self._resume(end)
        if is_in_place(end):
            ranges = offset_ranges(end)
            if not ranges:
                return []
            with self._lock:
                if not self.claimed:
                    self._claim()
                self._hold().ensure(ranges)
                self._plan_held(ranges)
                if self.ceiling is None or ranges[-1][1] < self.ceiling:
                    self._hold().start_ahead(self._ahead_wanted, self.ceiling)
            return plan_tasks(self.options, sum(high - low + 1 for low, high in ranges), 0, 0, ranges)
        low, high = _position(start), _position(end)
        if high <= low:
            return []
        with self._lock:
            self._planned(high)
            self._stage_ahead(high + self._ahead_wanted)
        slices = min(self.options.partitions, high - low)
        edges = [low + ((high - low) * i) // slices for i in range(slices)] + [high]
        return [PositionRange(edges[i], edges[i + 1], self.owner) for i in range(slices)]

    def commit(self, end: dict) -> None:
        with self._lock:
            self._resume(end)
        if is_in_place(end):
            with self._lock:
                if not self.claimed:
                    self._claim()
                self._settle(offset_ranges(end))
            return
        position = _position(end)
        if position <= self.committed_through:
            return  # latestOffset(end) deleted them
        with self._lock, self._open() as transport:
            sql = bridge_sql(transport, self.options)
            mark = self._owned(transport, sql, transport.queue(self.options.queue))
            commit_stream(transport, sql, self.stream_id, mark, position)
        self.committed_through = position

    def stop(self) -> None:
        """The query stops: the staging-ahead thread ends after its open receive (if any)."""
        with self._lock:
            self._stopped = True
            if self._held is not None:
                self._held.close()  # a batch planned and not settled goes back to the queue
        if self._ahead is not None:
            self._ahead.join(timeout=60)

    def wait_for_staging_ahead(self, timeout: float | None = None) -> None:
        """Wait until the staging-ahead thread, or the hold of the next batch read in place (if any), has
        ended: for callers that drive the reader's methods themselves and want to see what it took."""
        if self._ahead is not None:
            self._ahead.join(timeout)
        if self._held is not None:
            self._held.wait_ahead(timeout)

    # ---- staging ahead (driver) ------------------------------------------------------------------
    def _stage_ahead(self, through: int) -> None:
        """Let the staging-ahead thread stage up to position ``through`` (caller holds the lock)."""
        if not self.options.stage_ahead or self._drained or self._stopped or self.budget == 0:
            return
        self._ahead_through = max(self._ahead_through, through)
        if self._ahead is None or not self._ahead.is_alive():
            self._ahead = threading.Thread(
                target=self._run_ahead, name=f"sqlqueue-stage-ahead {self.stream_id}", daemon=True
            )
            self._ahead.start()

    def _run_ahead(self) -> None:
        """Receive into staging, one receive per turn of the lock, until ``_ahead_through``, the budget, an
        empty queue, a stop, or the stream is no longer this query's. A failure only ends the thread: the
        next ``latestOffset`` receives what is missing, and reports what is wrong."""
        try:
            with self._open() as transport:
                sql = bridge_sql(transport, self.options)
                queue = transport.queue(self.options.queue)
                while self._stage_one_ahead(transport, sql, queue):
                    pass
        except Exception as error:  # the driver's next call receives, and raises what is wrong
            log.debug("stream %s: staging ahead stopped: %s", self.stream_id, error)

    def _stage_one_ahead(self, transport: Transport, sql: BridgeSql, queue: Any) -> bool:
        with self._lock:
            if self._stopped or self._drained:
                return False
            mark = self._mark(transport, sql, queue)
            if mark.owner != self.owner:
                return False
            size = min(self.options.batch_size, self._ahead_through - mark.position)
            if self.budget is not None:
                size = min(size, self.budget)
            if size <= 0:
                return False
            taken, _ = stage_stream_batch(
                transport, queue, sql, self.stream_id, size, mark, through=self.ceiling
            )
            if self.budget is not None:
                self.budget -= taken
            self._drained = taken < size
            return not self._drained

    # ---- the executors ---------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[Any]:
        if isinstance(partition, ReadTask):
            yield from read_held(self.options, partition.bounds)
            return
        if not isinstance(partition, PositionRange):  # PySpark's placeholder: nothing was planned
            return
        low, high = partition.low + 1, partition.high + 1
        yield from read_staged(self.options, self.stream_id, low, high, partition.owner)
