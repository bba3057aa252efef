"""Receives the server moves into staging (PostgreSQL): the receive's ``DELETE ... RETURNING`` feeds the
staging INSERT in one statement, so the bodies never travel to Python and back.

Only the headers come back, to be checked as every receive checks them: rows whose headers are not a header
map go on to the error queue in the same transaction, and expired rows are dropped. The drain's receivers,
the batch read and the stream all stage this way where the engine can (``BridgeSql.can_move_server_side``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..transport import HeaderFormatError, Transport
from ..transport.headers import decode_headers
from .tables import BridgeSql

log = logging.getLogger("airflow_provider_sqlqueue.spark")

__all__ = ["MovedBatch", "move_batch", "require_error_queue", "unreadable_keys"]


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
