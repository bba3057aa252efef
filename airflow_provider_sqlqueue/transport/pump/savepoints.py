"""The savepoint each message of a batch runs under, sent with the handler's first statement.

A batching pump handles every message of a batch inside the batch's one transaction, each under a
savepoint, so that a failed attempt's statements roll back alone (see ``processing.py``). Marked when the
connection is lent and released when the message is done, that savepoint cost two round trips of its own
per message on a server, twice what the handler's own ``INSERT`` costs. Here it costs none where the
driver can send several statements before waiting (psycopg's pipeline mode): the savepoint is marked only
when the handler's first statement runs, in one pipeline with it. Where the dialect releases message
savepoints (SQLite), the previous message's is released just before the new one is marked, so at most one
is established between two messages; elsewhere each nests in the one before until the batch's commit (a
rollback to the name undoes the newest only; SQL Server has no release at all). Drivers without a pipeline
(sqlite3, pyodbc) run the same statements one after another just before the handler's first statement:
in-process on SQLite, one round trip on SQL Server.

A handler that takes the driver's own connection, a cursor's attributes or the SQLAlchemy connection gets
the savepoint marked at once, since what it does next is out of sight (:class:`~..lent.LentConnection`).

The same pipeline carries the pump's read of the transaction's name (PostgreSQL: its id), right behind the
handler's first statement: when that statement is the handler's last, the check after the handler
(:class:`~..transaction_guard.TransactionWatch`) needs no round trip of its own. A text the pipeline refuses
before running it (several commands in one statement, which psycopg runs outside a pipeline) is run again
outside it, after a rollback to the savepoint just marked.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..lease import shared_cursor

if TYPE_CHECKING:
    from ..queue import ReceivedBatch
    from ..transaction_guard import TransactionWatch

__all__ = ["MESSAGE_SAVEPOINT", "BatchSavepoints", "MessageSavepoint"]

# The savepoint each message of a batch runs under once its handler uses the receive's connection.
MESSAGE_SAVEPOINT = "sqlqueue_message"

T = TypeVar("T")


class BatchSavepoints:
    """The savepoints of one batch's messages, all under one name. A finished message's savepoint stays
    established (its work is the batch's either way) until the next message's is marked, which releases
    it in the same round trip where the dialect releases them, or nests in it; the batch's commit ends the
    rest."""

    def __init__(
        self, batch: ReceivedBatch, watch: TransactionWatch | None = None, name: str = MESSAGE_SAVEPOINT
    ) -> None:
        self.batch = batch
        self.watch = watch
        self.name = name
        self._names: Any = None  # the cursor the transaction's name is read on, once needed
        self._finished = False  # a finished message's savepoint is still established
        dialect = batch.queue.dialect
        mark = dialect.savepoint(name)
        release = dialect.release_savepoint(name) if dialect.releases_message_savepoints else None
        # what marks a message's savepoint: alone, or after a finished message's (with its release, where
        # the engine has one)
        self._alone = (mark,)
        self._after_finished = (release, mark) if release else (mark,)
        self._undo = dialect.rollback_to_savepoint(name)
        self._pipelines: bool | None = None  # whether the driver has a pipeline, once asked

    def attempt(self) -> MessageSavepoint:
        """The savepoint of one handler call, not yet marked."""
        return MessageSavepoint(self)

    def finished(self, savepoint: MessageSavepoint) -> None:
        """A handler call whose savepoint was marked succeeded: keep its work, release it with the next."""
        if savepoint.marked:
            self._finished = True

    def rollback(self, savepoint: MessageSavepoint) -> None:
        """Undo the failed attempt's statements (and forget its savepoint), keeping the batch. Raises where
        the engine already ended the transaction: the whole batch must then roll back."""
        self.batch.rollback_to_savepoint(self.name)
        savepoint.marked = False

    def mark(self, savepoint: MessageSavepoint, first_statement: Callable[[], T] | None) -> T | None:
        """Release the previous message's savepoint, mark this one, then run ``first_statement`` (the
        handler's, or nothing): in one round trip where the driver has a pipeline. An error before the
        savepoint was marked sets ``savepoint.failed`` (the batch's transaction or connection failed, not
        the handler); one of the handler's statement leaves the savepoint marked, to roll back to."""
        statements = self._after_finished if self._finished else self._alone
        connection = self.batch.connection
        cursor = shared_cursor(connection)
        if self._pipelines is None:
            self._pipelines = _has_pipeline(connection)
        if not self._pipelines:
            try:
                for statement in statements:
                    cursor.execute(statement, ())
            except Exception:
                savepoint.failed = True
                raise
            self._marked(savepoint)
            return None if first_statement is None else first_statement()
        name_query = None
        if first_statement is not None and self.watch is not None:
            self.watch.unseen()
            name_query = self.watch.name_query()
        names = None if name_query is None else self._name_cursor()
        try:
            with _driver(connection).pipeline():
                for statement in statements:
                    # not prepared: preparing one inside a pipeline makes psycopg wait for it there
                    cursor.execute(statement, (), prepare=False)
                result = None if first_statement is None else first_statement()
                if names is not None:
                    names.execute(name_query, (), prepare=False)
        except Exception as error:
            if cursor.statusmessage != "SAVEPOINT":  # the savepoint was not marked
                savepoint.failed = True
                raise
            self._marked(savepoint)  # the handler's statement failed, after the mark
            if first_statement is None or not self.batch.queue.dialect.refused_in_a_pipeline(error):
                raise
            cursor.execute(self._undo, ())  # it ran nothing; the savepoint stays; outside a pipeline it runs
            return first_statement()
        self._marked(savepoint)
        if names is not None and self.watch is not None:
            row = names.fetchone()
            self.watch.seen(None if row is None else row[0])
        return result

    def _name_cursor(self) -> Any:
        if self._names is None:
            self._names = self.batch.connection.cursor()
        return self._names

    def _marked(self, savepoint: MessageSavepoint) -> None:
        self._finished = False  # released (or, without a release, nested below the new one)
        savepoint.marked = True


class MessageSavepoint:
    """One handler call's savepoint, marked with its first statement (or at once: :meth:`mark_now`)."""

    def __init__(self, savepoints: BatchSavepoints) -> None:
        self._savepoints = savepoints
        self.marked = False
        self.failed = False  # marking it failed: the batch's transaction or connection is gone

    def mark_now(self) -> None:
        """Mark it before anything the pump cannot see runs (the driver's connection handed out)."""
        if not self.marked:
            self._savepoints.mark(self, None)

    def run_first(self, statement: Callable[[], T]) -> T:
        """Run the handler's first statement on the lent connection, with the savepoint marked before it."""
        if self.marked:
            return statement()
        return self._savepoints.mark(self, statement)  # type: ignore[return-value]


def _driver(connection: Any) -> Any:
    return getattr(connection, "dbapi_connection", connection)


def _has_pipeline(connection: Any) -> bool:
    """Whether ``connection``'s driver has a pipeline that sends the statements run inside it together and
    waits once when it ends (psycopg 3's ``Connection.pipeline()``, where its libpq supports it)."""
    return hasattr(_driver(connection), "pipeline") and _psycopg_pipelines()


@functools.cache
def _psycopg_pipelines() -> bool:
    import psycopg  # the only driver the transport uses that has a pipeline

    return bool(psycopg.Pipeline.is_supported())
