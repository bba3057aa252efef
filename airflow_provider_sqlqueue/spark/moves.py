"""Receiving into staging, the one way the drain's receivers, the batch read and the stream stage messages.

Each batch's receive and the staging INSERT of its messages commit in one transaction, after a check (under
a shared lock on the run's row) that the run is still receiving. Where the engine can
(``BridgeSql.can_move_server_side``, PostgreSQL), the server moves the rows: the receive's
``DELETE ... RETURNING`` feeds the staging INSERT in one statement, so the bodies never travel to Python
and back. Only the headers come back, to be checked as every receive checks them: rows whose headers are
not a header map go on to the error queue in the same transaction, and expired rows are dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..transport import HeaderFormatError, Transport
from ..transport.headers import decode_headers
from .tables import RECEIVING, BridgeSql

log = logging.getLogger("airflow_provider_sqlqueue.spark")

__all__ = ["MovedBatch", "move_batch", "require_error_queue", "stage_batch", "stage_rows", "unreadable_keys"]


@dataclass(frozen=True)
class MovedBatch:
    """What one move took from the queue: rows now staged, expired rows dropped, unreadable rows moved to the
    error queue. ``numbered`` counts the staging keys the move used (staged and unreadable rows)."""

    staged: int
    expired: int
    poisoned: int

    @property
    def numbered(self) -> int:
        return self.staged + self.poisoned

    @property
    def taken(self) -> int:
        return self.staged + self.expired + self.poisoned


def move_batch(
    transport: Transport,
    queue: Any,
    sql: BridgeSql,
    cursor: Any,
    statement: str,
    params: Callable[[int, int], tuple],
    size: int,
    run_id: str,
) -> MovedBatch:
    """Move up to ``size`` messages into staging under ``run_id`` on ``cursor``'s open transaction.

    ``statement`` is a form of :meth:`BridgeSql.move_to_staging`; ``params(size, numbered)`` gives its
    parameters for a move of ``size`` rows after ``numbered`` staging keys this call already used. The caller
    commits.
    """
    cursor.execute(statement, params(size, 0))
    rows = list(transport.dialect.fetch_rows(cursor))
    if len(rows) < size and not queue.uses_row_locks(cursor):
        # an advisory pick may find its rows deleted meanwhile; one more reads anew (TableQueue.pick)
        numbered = sum(1 for row in rows if not row[2])
        cursor.execute(statement, params(size - len(rows), numbered))
        rows += transport.dialect.fetch_rows(cursor)
    expired = sum(1 for row in rows if row[2])
    poison = unreadable_keys(queue, rows)
    if poison:
        require_error_queue(queue, len(poison))
        cursor.execute(sql.move_poison(queue.error_queue), (run_id, poison))
    return MovedBatch(len(rows) - expired - len(poison), expired, len(poison))


def unreadable_keys(queue: Any, rows: Any, *, log_each: bool = True) -> list[int]:
    """The keys of the unexpired rows among (key, Headers, expired) whose headers are not a header map,
    each logged as every receive logs it (unless ``log_each`` is off: the caller logs them when it moves
    them)."""
    poison: list[int] = []
    for key, headers, is_expired in rows:
        if is_expired:
            continue
        try:
            decode_headers(headers)
        except HeaderFormatError as error:
            poison.append(int(key))
            if not log_each:
                continue
            log.error(
                "Error receiving message %s from %s: probable message metadata corruption (%s). "
                "Moving it to error queue %s.",
                key,
                queue.address,
                error,
                queue.error_queue,
            )
    return poison


def require_error_queue(queue: Any, unreadable: int) -> None:
    """Refuse to go on with unreadable rows when there is no error queue to move them to."""
    if queue.error_queue is None:
        raise HeaderFormatError(
            f"{unreadable} message(s) in {queue.address} cannot be read and no error queue is "
            "configured; they stay in the queue"
        )


class _Stopped(Exception):
    """The run left ``receiving``: the open batch rolls back."""


def stage_batch(
    transport: Transport,
    queue: Any,
    sql: BridgeSql,
    run_id: str,
    size: int,
    part: int,
    *,
    job_attempt: int = 1,
    before_commit: Callable[[], None] | None = None,
) -> MovedBatch | None:
    """Receive one batch of up to ``size`` messages into staging under ``run_id`` (keyed with ``job_attempt``
    and ``part``), in one transaction; None when the run is no longer receiving (nothing was taken).
    ``before_commit`` runs inside the transaction (the failure drills)."""
    if sql.can_move_server_side:
        with transport.connection(queue.address) as connection:
            cursor = connection.cursor()
            if not _receiving(transport, cursor, sql, run_id):
                connection.rollback()
                return None
            statement = sql.move_to_staging(queue.receive_statement(cursor))

            def params(rows: int, _: int) -> tuple:
                return (rows, run_id, job_attempt, part)

            moved = move_batch(transport, queue, sql, cursor, statement, params, size, run_id)
            if before_commit is not None:
                before_commit()
            connection.commit()
        return moved
    try:
        with queue.receive(size) as batch:
            cursor = batch.connection.cursor()
            if not _receiving(transport, cursor, sql, run_id):
                raise _Stopped()
            stage_rows(
                cursor, sql, [sql.stage_params(run_id, job_attempt, part, message) for message in batch]
            )
            if before_commit is not None:
                before_commit()
    except _Stopped:
        return None
    return MovedBatch(len(batch), batch.expired, batch.poisoned)


def stage_rows(cursor: Any, sql: BridgeSql, params: list[tuple]) -> None:
    """INSERT rows of :meth:`BridgeSql.stage_params` into staging, as many a statement as the engine takes."""
    chunk = sql.stage_rows_per_statement
    for start in range(0, len(params), chunk):
        part = params[start : start + chunk]
        cursor.execute(sql.stage_rows(len(part)), [value for row in part for value in row])


def _receiving(transport: Transport, cursor: Any, sql: BridgeSql, run_id: str) -> bool:
    cursor.execute(sql.run_state_shared(), (run_id,))
    rows = transport.dialect.fetch_rows(cursor)
    return bool(rows) and rows[0][0] == RECEIVING
