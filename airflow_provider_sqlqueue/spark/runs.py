"""A run's life in the bridge's runs table, the same for every run: the drain job's, a batch read's, and a
stream's staged rows ended by hand. It starts, and it ends in one transaction. Each kind of run has its rules
for a run id seen before (the drain counts a new job attempt, a batch read resumes what it staged); they are
here too, beside the one start and the one end they apply.

Starting inserts the run's row. A duplicate key there means the run id is taken: started before, or at the
same moment by a second driver of the run id (two tries of one Airflow task). The driver error of a unique
violation is not one the transport translates, so every untranslated failure of the insert reads the row
instead, and only a missing row makes it an error.

Ending changes the run's state by compare-and-set and, in the same transaction, puts its staged messages back
at the end of the input queue (a release or an abort) or just deletes them (a commit, whose results are
written, or written in that very transaction). Nothing is staged twice and nothing is lost, whoever ends it.

The run id is the idempotency key: a re-run of a committed run does nothing, of an unfinished one finishes
it. A drain run whose driver died keeps its messages staged until its heartbeat is older than the drain's
``orphan_timeout``; then any later drain of the queue puts them back (:meth:`Runs.restore_orphans`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple

from ..transport import ConfigurationError, QueueAddress, SqlQueueError, Transport
from .source.errors import DrainError
from .source.transactions import begin_write, execute, execute_counted, rows_changed
from .tables import ABORTED, COMMITTED, PROCESSING, READ, RECEIVING, STREAMING, BridgeSql

__all__ = ["BATCH_READ_SINK", "STREAM_SINK", "RunRow", "Runs"]

# The Sink column of the data source's runs (a drain run's is its sink): they tell the kinds of run apart.
BATCH_READ_SINK = "spark.read"
STREAM_SINK = "spark.readStream"


class RunRow(NamedTuple):
    """A run's row: its state, job attempt, input queue and summary (JSON text, or None)."""

    state: str
    attempt: int
    queue: str
    summary: str | None


class Runs:
    """The runs table and the staged rows of one set of bridge tables."""

    def __init__(self, transport: Transport, sql: BridgeSql) -> None:
        self.transport = transport
        self.sql = sql

    def row(self, run_id: str) -> RunRow | None:
        rows = execute(self.transport, self.sql.get_run(), (run_id,), write=False)
        if not rows:
            return None
        state, attempt, queue, summary = rows[0]
        return RunRow(str(state), int(attempt), str(queue), summary)

    def sink(self, run_id: str) -> str:
        return str(execute(self.transport, self.sql.run_sink(), (run_id,), write=False)[0][0])

    def staged_stats(self, run_id: str) -> tuple[int, int | None, int | None]:
        """How many messages the run has staged, and their lowest and highest RowVersion."""
        count, low, high = execute(self.transport, self.sql.staged_stats(), (run_id,), write=False)[0]
        return int(count or 0), None if low is None else int(low), None if high is None else int(high)

    def start(self, run_id: str, queue: str, sink: str) -> tuple[RunRow, bool]:
        """Insert the run's row (``receiving``, attempt 1); return it and True. If the run id is taken, by an
        earlier start or a racing one, return its row as it is and False; a run id of another queue is an
        error."""
        row = self._insert(run_id, self.sql.insert_run(), (run_id, queue, sink))
        if row is None:
            return RunRow(RECEIVING, 1, queue, None), True
        if row.queue != queue:
            raise ConfigurationError(f"run id {run_id} belongs to queue {row.queue}, not {queue}")
        return row, False

    def start_stream(self, stream_id: str, queue: str, summary: str) -> RunRow:
        """A stream's row, inserted (``streaming``, at the position ``summary`` holds) the first time. It is
        read on every micro-batch, so it is read before it is inserted; a racing first query's row is taken as
        it is. The caller checks it is a stream's, of its queue."""
        row = self.row(stream_id)
        if row is not None:
            return row
        params = (stream_id, queue, STREAM_SINK, summary)
        row = self._insert(stream_id, self.sql.insert_stream(), params)
        return RunRow(STREAMING, 1, queue, summary) if row is None else row

    def _insert(self, run_id: str, statement: str, params: tuple) -> RunRow | None:
        """Insert a run's row and return None; or, when the run id is taken, return its row as it is."""
        try:
            execute(self.transport, statement, params)
            return None
        except SqlQueueError:
            raise  # translated: lost connection, permission, missing table; not the key
        except Exception:
            row = self.row(run_id)
            if row is None:
                raise
        return row

    def restart(self, run_id: str, sink: str) -> int:
        """A new job attempt on an unfinished run: back to ``receiving`` if it was aborted, else the state it
        has; returns 1, or 0 when the run is committed."""
        return execute_counted(self.transport, self.sql.counted(self.sql.restart_run()), (sink, run_id))

    def start_drain(self, run_id: str, queue: str, sink: str) -> RunRow:
        """The drain's start: register the run, or count a new job attempt on the unfinished run an earlier
        attempt (or a racing driver of the run id) registered, so an aborted run receives again. A committed
        run is returned as it is: the re-run has nothing to do."""
        row, created = self.start(run_id, queue, sink)
        if created or row.state == COMMITTED:
            return row
        self.restart(run_id, sink)
        return self.row(run_id)  # type: ignore[return-value]  # a run's row is never deleted

    def start_read(self, run_id: str, queue: str) -> str:
        """A batch read's start: register the run, or resume it; return its state: ``receiving``, ``read``,
        or ``processing`` (an application's run whose messages are staged: the read receives no more). An
        acknowledged run id cannot be read again; a released one receives again."""
        row, _created = self.start(run_id, queue, BATCH_READ_SINK)
        if row.state == COMMITTED:
            raise ConfigurationError(
                f"run id {run_id} was acknowledged: its messages were read and deleted. Use a new run id"
            )
        if row.state == ABORTED:
            return RECEIVING if self.restart(run_id, BATCH_READ_SINK) else self.start_read(run_id, queue)
        if row.state not in (RECEIVING, READ, PROCESSING):
            raise ConfigurationError(
                f"run id {run_id} is a {row.state} run of the drain job, not a batch read"
            )
        return row.state

    def end(
        self,
        run_id: str,
        claim: str,
        params: tuple,
        *,
        restore_to: QueueAddress | None = None,
        takeover: bool = False,
        note: dict[str, Any] | None = None,
    ) -> int | None:
        """End a run in one transaction of its own: see :meth:`end_in`. With ``takeover`` the run's row is
        first locked as a stream's takeover locks it (after the reads of its staged rows under way); with
        ``note`` the run's summary becomes that note with ``restored`` (how many went back). Returns how many
        staged messages it ended, or None when the claim changed nothing (nothing was done)."""
        with self.transport.connection() as connection:
            cursor = connection.cursor()
            begin_write(self.transport, cursor)
            if takeover:
                cursor.execute(self.sql.run_state_shared("takeover"), (run_id,))
                self.transport.dialect.fetch_rows(cursor)
            count = self.end_in(cursor, run_id, claim, params, restore_to=restore_to)
            if count is None:
                connection.rollback()
                return None
            if note is not None:
                text = json.dumps({**note, "restored": count}, default=str)
                cursor.execute(self.sql.set_summary(), (text, run_id))
            connection.commit()
        return count

    def end_in(
        self, cursor: Any, run_id: str, claim: str, params: tuple, *, restore_to: QueueAddress | None = None
    ) -> int | None:
        """In the caller's transaction: run ``claim`` (an UPDATE of the run's row, from the state it must be
        in to the one it ends in) and, if it changed the row, put the staged messages back at the end of
        ``restore_to`` (if given, in their order) and delete them from staging; return how many, or None when
        the claim changed nothing."""
        if rows_changed(self.transport, cursor, self.sql.counted(claim), params) != 1:
            return None
        cursor.execute(self.sql.staged_stats(), (run_id,))
        count = int(self.transport.dialect.fetch_rows(cursor)[0][0] or 0)
        if restore_to is not None:
            cursor.execute(self.sql.restore(restore_to), (run_id,))
        cursor.execute(self.sql.delete_staging(), (run_id,))
        return count

    def end_read(self, run_id: str, to_state: str, restore_to: QueueAddress | None) -> int:
        """End a receiving or read batch read in ``to_state``, its staged messages put back at the end of
        ``restore_to`` or deleted; 0 when it ended so before (the call is idempotent)."""
        claim = self.sql.set_state((READ, RECEIVING))
        count = self.end(run_id, claim, (to_state, run_id), restore_to=restore_to)
        if count is not None:
            return count
        row = self.row(run_id)
        if row is not None and row.state == to_state:
            return 0
        state = "unknown" if row is None else row.state
        raise ConfigurationError(f"run {run_id} is {state}: it cannot become {to_state}")

    def abort(
        self, run_id: str, reason: str, restore_to: QueueAddress, *, stale_after: float | None = None
    ) -> int | None:
        """Mark an active run aborted and move its staged messages back to ``restore_to``, in one transaction,
        its summary noting ``reason``. With ``stale_after`` only while its heartbeat is older than that many
        seconds. Returns how many moved, or None when the run was not active (or not stale)."""
        claim, params = self.sql.set_state((RECEIVING, PROCESSING)), (ABORTED, run_id)
        if stale_after is not None:
            claim, bind = self.sql.set_state_if_stale((RECEIVING, PROCESSING))
            params += (bind(stale_after),)
        note = {"run_id": run_id, "state": ABORTED, "reason": reason[:2000]}
        return self.end(run_id, claim, params, restore_to=restore_to, note=note)

    def restore_orphans(
        self,
        run_id: str,
        queue: str,
        restore_to: QueueAddress,
        timeout: float,
        echo: Callable[[str], None],
    ) -> list[str]:
        """Put back the staged messages of the other runs of ``queue`` whose heartbeat is older than
        ``timeout`` seconds (their drivers died); return their run ids."""
        statement, bind = self.sql.orphans()
        rows = execute(self.transport, statement, (queue, run_id, bind(timeout)), write=False)
        restored = []
        for (orphan,) in rows:
            moved = self.abort(
                orphan, f"orphaned: no heartbeat for {timeout:.0f} s", restore_to, stale_after=timeout
            )
            if moved is not None:
                restored.append(orphan)
                echo(f"restored {moved} message(s) of orphaned run {orphan} to {queue}")
        return restored

    def commit_in(self, cursor: Any, run_id: str, staged: int, summary: dict[str, Any]) -> None:
        """Inside the transaction that writes the run's results: mark it committed with ``summary`` (its
        state set), check nothing was staged since the ``staged`` messages processed, drop the staged rows."""
        summary["state"] = COMMITTED
        text = json.dumps(summary, default=str)
        now_staged = self.end_in(cursor, run_id, self.sql.finish_run(), (text, run_id))
        if now_staged is None:
            raise DrainError(f"run {run_id} could not be marked committed")
        if now_staged != staged:
            raise DrainError(f"run {run_id}: {now_staged} staged messages, but {staged} were processed")
