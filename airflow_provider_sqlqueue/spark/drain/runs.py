"""Run bookkeeping: a drain's row in the runs table and its staged messages, from start to commit or abort.

The run id is the idempotency key: a re-run of a committed run does nothing, of an unfinished one finishes
it. A run whose driver died keeps its messages staged until its heartbeat is older than ``orphan_timeout``;
then any later drain of the queue puts them back (:meth:`RunLedger.restore_orphans`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from ...transport import ConfigurationError, SqlQueueError, Transport
from ..reading.errors import DrainError
from ..reading.transactions import begin_write, execute, rows_changed
from ..tables import ABORTED, COMMITTED, PROCESSING, RECEIVING, BridgeSql
from .config import DrainConfig

log = logging.getLogger("airflow_provider_sqlqueue.spark.drain")

__all__ = ["RunLedger"]


class RunLedger:
    """The runs table and the staging rows of one drain's input queue, as the driver sees them."""

    def __init__(
        self,
        transport: Transport,
        sql: BridgeSql,
        config: DrainConfig,
        input_queue: Any,
        echo: Callable[[str], None],
    ) -> None:
        self.transport = transport
        self.sql = sql
        self.config = config
        self.input = input_queue
        self.echo = echo

    def row(self) -> tuple | None:
        """The run's (state, attempt, queue name, summary), or None before it started."""
        rows = execute(self.transport, self.sql.get_run(), (self.config.run_id,), write=False)
        return tuple(rows[0]) if rows else None

    def staged_stats(self) -> tuple[int, int | None, int | None]:
        """How many messages the run has staged, and their lowest and highest RowVersion."""
        rows = execute(self.transport, self.sql.staged_stats(), (self.config.run_id,), write=False)
        count, low, high = rows[0]
        return int(count or 0), None if low is None else int(low), None if high is None else int(high)

    def start(self) -> tuple[str, int]:
        """Register or resume the run; return (state, job attempt)."""
        run_id = self.config.run_id
        sink = str(self.config.parsed_sink)
        existing = self.row()
        if existing is None:
            try:
                execute(self.transport, self.sql.insert_run(), (run_id, self.input.name, sink))
                return RECEIVING, 1
            except SqlQueueError:
                raise
            except Exception:
                existing = self.row()  # a concurrent start of the same run id won the insert
                if existing is None:
                    raise
        state, attempt, queue_name, _summary = existing
        if queue_name != self.input.name:
            raise ConfigurationError(f"run {run_id} drains {queue_name}, not {self.input.name}")
        if state == COMMITTED:
            return COMMITTED, int(attempt)
        execute(self.transport, self.sql.restart_run(), (sink, run_id))
        state, attempt, _queue, _summary = self.row()  # type: ignore[misc]
        return state, int(attempt)

    def restore_orphans(self) -> list[str]:
        """Put back the staged messages of other runs on this queue whose heartbeat stopped."""
        statement, bind = self.sql.orphans()
        params = (self.input.name, self.config.run_id, bind(self.config.orphan_timeout))
        rows = execute(self.transport, statement, params, write=False)
        restored = []
        for (orphan,) in rows:
            moved = self.abort(
                orphan, f"orphaned: no heartbeat for {self.config.orphan_timeout:.0f} s", stale=True
            )
            if moved is not None:
                restored.append(orphan)
                self.echo(f"restored {moved} message(s) of orphaned run {orphan} to {self.input.name}")
        return restored

    def abort(self, run_id: str, reason: str, *, stale: bool = False) -> int | None:
        """Mark a run aborted and move its staged messages back to the input queue, in one transaction.

        Returns how many moved, or None when the run was not active (or, with ``stale``, not stale).
        """
        statement = self.sql.set_state((RECEIVING, PROCESSING))
        params: tuple = (ABORTED, run_id)
        if stale:
            statement, bind = self.sql.set_state_if_stale((RECEIVING, PROCESSING))
            params += (bind(self.config.orphan_timeout),)
        with self.transport.connection() as connection:
            cursor = connection.cursor()
            begin_write(self.transport, cursor)
            if rows_changed(self.transport, cursor, self.sql.counted(statement), params) != 1:
                connection.rollback()
                return None
            cursor.execute(self.sql.staged_stats(), (run_id,))
            moved = int(self.transport.dialect.fetch_rows(cursor)[0][0] or 0)
            cursor.execute(self.sql.restore(self.input.address), (run_id,))
            cursor.execute(self.sql.delete_staging(), (run_id,))
            note = json.dumps(
                {"run_id": run_id, "state": ABORTED, "reason": reason[:2000], "restored": moved}
            )
            cursor.execute(self.sql.set_summary(), (note, run_id))
            connection.commit()
        return moved

    def finish(self, cursor: Any, staged: int, written: int, summary: dict[str, Any]) -> None:
        """Inside the commit's transaction: check nothing was staged since, drop the staged rows, and mark
        the run committed with ``summary`` (updated with ``written`` and the state)."""
        run_id = self.config.run_id
        cursor.execute(self.sql.staged_stats(), (run_id,))
        now_staged = int(self.transport.dialect.fetch_rows(cursor)[0][0] or 0)
        if now_staged != staged:
            raise DrainError(f"run {run_id}: {now_staged} staged messages, but {staged} were processed")
        cursor.execute(self.sql.delete_staging(), (run_id,))
        summary.update(written=written, state=COMMITTED)
        text = json.dumps(summary, default=str)
        if rows_changed(self.transport, cursor, self.sql.counted(self.sql.finish_run()), (text, run_id)) != 1:
            raise DrainError(f"run {run_id} could not be marked committed")
