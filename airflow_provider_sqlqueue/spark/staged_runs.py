"""Staged runs of an input queue, for people: which runs of the ``sqlqueue`` data source hold messages in the
bridge's staging table (outside the queue, so ``count()`` does not see them), how many and since when; and
the two ways to end one by hand: release (the messages go back to the end of the queue) or acknowledge (they
are deleted).

A batch read keeps its messages staged until ``ack_read`` or ``release_read``; a failed job re-run under a
new run id, or a job that never called either, leaves them there. A stream keeps the micro-batch Spark last
planned staged until the query commits it, and Spark commits only when it plans the next one. The drain
job's runs are listed too, but they end themselves (a re-run with the run id finishes the run; a later drain
of the queue puts back the messages of a run whose heartbeat stopped), so they cannot be ended here.

Nothing here imports Spark or Airflow: the ``sqlqueue`` command and the hook use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from ..transport import ConfigurationError, Transport
from .runs import BATCH_READ_SINK, Runs
from .source.transactions import execute, table_exists
from .tables import (
    ABORTED,
    COMMITTED,
    DEFAULT_PREFIX,
    READ,
    RECEIVING,
    STREAMING,
    BridgeSql,
    bridge_tables,
    check_run_id,
)

__all__ = ["StagedRun", "end_staged_run", "staged_runs", "staged_runs_beside", "staged_runs_listing"]

Kind = Literal["batch read", "stream", "drain"]
Action = Literal["release", "ack"]


@dataclass(frozen=True)
class StagedRun:
    """One run with staged messages. ``age_seconds`` is since the run started (a batch read stages right
    after it starts; a stream's row starts with its first query); ``idle_seconds`` since its last heartbeat,
    which for a stream is its last receive or planned micro-batch. The staging table keeps no time per
    message: a stream's staged messages are at most ``age_seconds`` old, usually far younger."""

    run_id: str
    queue: str
    kind: Kind
    state: str
    messages: int
    low: int
    high: int
    age_seconds: float
    idle_seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def can_end(self) -> bool:
        """Whether :func:`end_staged_run` may release or acknowledge it (not a drain run's)."""
        return self.kind != "drain"


def staged_runs_listing(sql: BridgeSql, *, of_queue: bool = True) -> str:
    """The runs that have staged messages, of one input queue (parameter) or (``of_queue`` False) of every
    queue beside these tables: run id, input queue, sink, state, staged messages, lowest and highest
    RowVersion (a stream's positions), seconds since the run started and since its last heartbeat, oldest
    start first."""
    return sql.dialect.bridge_staged_runs(sql.runs, sql.staging, of_queue=of_queue)


def _kind(sink: str, state: str) -> Kind:
    if state == STREAMING:
        return "stream"
    if state == READ or sink == BATCH_READ_SINK:
        return "batch read"
    return "drain"


def _sql(transport: Transport, queue: str, prefix: str) -> BridgeSql | None:
    tables = bridge_tables(transport, queue, prefix)
    if not table_exists(transport, tables.staging) or not table_exists(transport, tables.runs):
        return None
    return BridgeSql(transport, tables)


def staged_runs(transport: Transport, queue: str, prefix: str = DEFAULT_PREFIX) -> list[StagedRun]:
    """The runs of ``queue`` with staged messages, oldest first; none when the bridge's tables are not
    there."""
    name = transport.queue(queue).name
    sql = _sql(transport, queue, prefix)
    if sql is None:
        return []
    return _runs(execute(transport, staged_runs_listing(sql), (name,), write=False))


def staged_runs_beside(
    transport: Transport, queues: Iterable[str], prefix: str = DEFAULT_PREFIX
) -> list[StagedRun]:
    """The runs with staged messages in the bridge's tables beside any of ``queues``, whatever queue they
    read (one read per set of tables: queues of one schema share them), oldest first within a set."""
    runs: list[StagedRun] = []
    seen = set()
    for queue in queues:
        tables = bridge_tables(transport, queue, prefix)
        if tables.staging in seen:
            continue
        seen.add(tables.staging)
        sql = _sql(transport, queue, prefix)
        if sql is not None:
            runs += _runs(execute(transport, staged_runs_listing(sql, of_queue=False), write=False))
    return runs


def _runs(rows: Iterable[Sequence[Any]]) -> list[StagedRun]:
    return [
        StagedRun(
            run_id=str(run_id),
            queue=str(queue),
            kind=_kind(str(sink), str(state)),
            state=str(state),
            messages=int(count),
            low=int(low),
            high=int(high),
            age_seconds=round(max(float(age or 0), 0.0), 3),
            idle_seconds=round(max(float(idle or 0), 0.0), 3),
        )
        for run_id, queue, sink, state, count, low, high, age, idle in rows
    ]


def end_staged_run(
    transport: Transport, queue: str, run_id: str, action: Action, prefix: str = DEFAULT_PREFIX
) -> int:
    """Release (``"release"``: back to the end of ``queue``, in their order) or acknowledge (``"ack"``:
    delete) the staged messages of a batch read or a stream, in one transaction; return how many.

    A batch read becomes ``aborted`` or ``committed`` as with ``release_read`` / ``ack_read`` (ending it
    again returns 0). A stream keeps its row and position: stop its query first, since a running query's
    planned micro-batch would then read fewer rows (released messages come again in a later one)."""
    if action not in ("release", "ack"):
        raise ConfigurationError(
            f"a staged run is released or acknowledged ('release' or 'ack'), not {action!r}"
        )
    check_run_id(run_id)
    address = transport.queue(queue)
    sql = _sql(transport, queue, prefix)
    if sql is None:
        raise ConfigurationError(
            f"queue {address.name} has no Spark bridge tables (prefix {prefix}): nothing staged"
        )
    runs = Runs(transport, sql)
    row = runs.row(run_id)
    if row is None:
        raise ConfigurationError(f"run {run_id} is unknown on {address.name}")
    if row.queue != address.name:
        raise ConfigurationError(f"run {run_id} belongs to queue {row.queue}, not {address.name}")
    state, kind = row.state, _kind(runs.sink(run_id), row.state)
    if kind == "drain":
        raise ConfigurationError(
            f"run {run_id} is a drain job's run ({state}): re-run the drain with that run id to finish it; a "
            "later drain of the queue puts its messages back once its heartbeat is older than orphan_timeout"
        )
    if kind == "batch read" and state in (COMMITTED, ABORTED):
        wanted = COMMITTED if action == "ack" else ABORTED
        if state == wanted:
            return 0
        raise ConfigurationError(
            f"run {run_id} is {state}: it cannot be {'acknowledged' if action == 'ack' else 'released'}"
        )
    if kind == "stream":  # the stream keeps its row and position; the claim waits for its reads under way
        claim, params = sql.touch_run((STREAMING,)), (run_id,)
    else:
        claim, params = sql.set_state((READ, RECEIVING)), (COMMITTED if action == "ack" else ABORTED, run_id)
    restore_to = address.address if action == "release" else None
    count = runs.end(run_id, claim, params, restore_to=restore_to, takeover=kind == "stream")
    if count is None:
        return end_staged_run(transport, queue, run_id, action, prefix)  # its state changed meanwhile
    return count
