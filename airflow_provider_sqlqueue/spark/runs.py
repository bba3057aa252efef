"""A run's life in the bridge's runs table, the same for every run: the drain job's, a batch read's, and a
stream's staged rows ended by hand. It starts, and it ends in one transaction.

Starting inserts the run's row. A duplicate key there means the run id is taken: started before, or at the
same moment by a second driver of the run id (two tries of one Airflow task). The driver error of a unique
violation is not one the transport translates, so every untranslated failure of the insert reads the row
instead, and only a missing row makes it an error.

Ending changes the run's state by compare-and-set and, in the same transaction, puts its staged messages back
at the end of the input queue (a release or an abort) or just deletes them (a commit, whose results are
written, or written in that very transaction). Nothing is staged twice and nothing is lost, whoever ends it.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from ..transport import ConfigurationError, QueueAddress, SqlQueueError, Transport
from .reading.transactions import begin_write, execute, execute_counted, rows_changed
from .tables import RECEIVING, BridgeSql

__all__ = ["RunRow", "Runs"]


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
        try:
            execute(self.transport, self.sql.insert_run(), (run_id, queue, sink))
            return RunRow(RECEIVING, 1, queue, None), True
        except SqlQueueError:
            raise  # translated: lost connection, permission, missing table; not the key
        except Exception:
            row = self.row(run_id)
            if row is None:
                raise
        if row.queue != queue:
            raise ConfigurationError(f"run id {run_id} belongs to queue {row.queue}, not {queue}")
        return row, False

    def restart(self, run_id: str, sink: str) -> int:
        """A new job attempt on an unfinished run: back to ``receiving`` if it was aborted, else the state it
        has; returns 1, or 0 when the run is committed."""
        return execute_counted(self.transport, self.sql.counted(self.sql.restart_run()), (sink, run_id))

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
