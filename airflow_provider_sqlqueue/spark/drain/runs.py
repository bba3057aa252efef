"""The drain's rules for its run, over the one run lifecycle (``spark/runs.py``).

The run id is the idempotency key: a re-run of a committed run does nothing, of an unfinished one finishes
it. A run whose driver died keeps its messages staged until its heartbeat is older than ``orphan_timeout``;
then any later drain of the queue puts them back (:meth:`RunLedger.restore_orphans`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ...transport import Transport
from ..reading.errors import DrainError
from ..reading.transactions import execute
from ..runs import RunRow, Runs
from ..tables import ABORTED, COMMITTED, PROCESSING, RECEIVING, BridgeSql
from .config import DrainConfig

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
        self.runs = Runs(transport, sql)
        self.sql = sql
        self.config = config
        self.input = input_queue
        self.echo = echo

    def row(self) -> RunRow | None:
        """The run's (state, attempt, queue name, summary), or None before it started."""
        return self.runs.row(self.config.run_id)

    def staged_stats(self) -> tuple[int, int | None, int | None]:
        return self.runs.staged_stats(self.config.run_id)

    def start(self) -> tuple[str, int]:
        """Register or resume the run; return (state, job attempt)."""
        run_id, sink = self.config.run_id, str(self.config.parsed_sink)
        row, created = self.runs.start(run_id, self.input.name, sink)
        if created or row.state == COMMITTED:
            return row.state, row.attempt
        self.runs.restart(run_id, sink)
        row = self.row()  # type: ignore[assignment]
        return row.state, row.attempt

    def restore_orphans(self) -> list[str]:
        """Put back the staged messages of other runs on this queue whose heartbeat stopped."""
        statement, bind = self.sql.orphans()
        params = (self.input.name, self.config.run_id, bind(self.config.orphan_timeout))
        rows = execute(self.runs.transport, statement, params, write=False)
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
        claim, params = self.sql.set_state((RECEIVING, PROCESSING)), (ABORTED, run_id)
        if stale:
            claim, bind = self.sql.set_state_if_stale((RECEIVING, PROCESSING))
            params += (bind(self.config.orphan_timeout),)
        note = {"run_id": run_id, "state": ABORTED, "reason": reason[:2000]}
        return self.runs.end(run_id, claim, params, restore_to=self.input.address, note=note)

    def finish(self, cursor: Any, staged: int, written: int, summary: dict[str, Any]) -> None:
        """Inside the commit's transaction: mark the run committed with ``summary`` (updated with ``written``
        and the state), check nothing was staged since, and drop the staged rows."""
        run_id = self.config.run_id
        summary.update(written=written, state=COMMITTED)
        text = json.dumps(summary, default=str)
        now_staged = self.runs.end_in(cursor, run_id, self.sql.finish_run(), (text, run_id))
        if now_staged is None:
            raise DrainError(f"run {run_id} could not be marked committed")
        if now_staged != staged:
            raise DrainError(f"run {run_id}: {now_staged} staged messages, but {staged} were processed")
