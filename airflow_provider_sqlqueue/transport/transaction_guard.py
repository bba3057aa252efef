"""A transaction that others' statements run in, checked after each of them by what the driver reports.

``ExecuteSqlAndSendOperator`` runs a user's statements and then sends messages in one transaction: if a
statement commits or rolls back that transaction, the statements before it commit without the messages,
and with pyodbc or psycopg the next statement runs in a new transaction or in autocommit. What a statement
does cannot be read from its text reliably (nested comments, backslashes in strings, ``EXEC('COMMIT')``,
``IF 1=1 ROLLBACK``), so this module asks the connection instead (``Dialect.transaction_state``) and stops
at the first statement that changed the state. The message pump checks its handlers with the same
mechanism (:class:`TransactionWatch`), so none of it knows about Airflow or messages.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..dialects.transaction_state import TransactionState
from ..model.errors import TransactionEndedError

if TYPE_CHECKING:
    from ..dialects.base import Dialect

__all__ = [
    "TransactionGuard",
    "TransactionWatch",
    "guarded_transaction",
    "open_transaction",
    "require_open_transaction",
]

log = logging.getLogger(__name__)


def require_open_transaction(
    dialect: Dialect,
    connection: Any,
    *,
    step: str,
    ran_before: str,
    shared_with: str = "the messages",
    cause: BaseException | None = None,
    state: TransactionState | None = None,
) -> TransactionState:
    """Raise :class:`TransactionEndedError` unless ``connection``'s transaction is still the one open
    transaction after ``step`` (e.g. ``"the statement 2 'IF 1=1 ROLLBACK'"``), as the driver reports it.

    Share the mechanism with the pump's guard: this is the one check, for the operator's statements now and
    for the pump's handler later, so both say the same thing about the same state. ``ran_before`` names what
    ran in the transaction up to and including ``step`` (``"statements 1..2"``): after a commit or rollback
    it may be committed without ``shared_with``, and the error says so. With ``cause`` (``step`` raised),
    an aborted transaction is that error's ordinary outcome, not a second one: only an ended or nested
    transaction is raised, chained to it. A driver that cannot tell (UNKNOWN) passes; the state is returned.
    ``state``: the state already read (a :class:`TransactionWatch`'s, which also sees a transaction ended
    and begun anew); by default the driver's.
    """
    if state is None:
        state = dialect.transaction_state(connection)
    if state is TransactionState.ENDED:
        how = (
            "ended the transaction (a commit or a rollback)"
            if cause is None
            # Babelfish rolls back on some errors (a missing table), SQL Server under XACT_ABORT; but
            # EXEC('COMMIT') commits, then fails: from the state alone the two cannot be told apart
            else "failed and ended the transaction (the engine rolled it back on the error, or the statement "
            "committed before failing)"
        )
        error = "" if cause is None else f". The statement's error: {str(cause).strip()[:300]}"
        raise TransactionEndedError(
            f"{step} {how}: {ran_before} may have committed without {shared_with}; nothing after it ran, "
            f"and what was left is rolled back{error}"
        ) from cause
    if state is TransactionState.NESTED:
        raise TransactionEndedError(
            f"{step} began a transaction inside the one shared with {shared_with}, which its commit would "
            "not end: everything is rolled back, nothing committed (a savepoint is allowed)"
        ) from cause
    if state is TransactionState.FAILED and cause is None:
        raise TransactionEndedError(
            f"{step} left the transaction aborted (it can only roll back) without raising an error: "
            "everything is rolled back, nothing committed"
        )
    return state


class TransactionGuard:
    """Checks one connection's transaction after each step run in it (:func:`require_open_transaction`),
    read by a :class:`TransactionWatch`, so that a step that ended the transaction and began another
    (``END; BEGIN`` on PostgreSQL, ``COMMIT BEGIN TRANSACTION`` in T-SQL) is caught like one that only
    ended it. :meth:`arm` names the transaction, before the first step."""

    def __init__(self, dialect: Dialect, connection: Any, shared_with: str = "the messages") -> None:
        self.dialect = dialect
        self.connection = connection
        self.shared_with = shared_with
        self.watch = TransactionWatch(dialect, connection)
        self.ended = False  # once a check saw the transaction end: rolling back then finds none to end

    def arm(self) -> None:
        """Name the open transaction (see :meth:`TransactionWatch.arm`); until then only the driver's state
        is read."""
        self.watch.arm(begins=True)

    def check(self, step: str, ran_before: str, cause: BaseException | None = None) -> None:
        """Raise unless the transaction is still open after ``step`` (``cause``: the error it raised)."""
        try:
            require_open_transaction(
                self.dialect,
                self.connection,
                step=step,
                ran_before=ran_before,
                shared_with=self.shared_with,
                cause=cause,
                state=self.watch.state() if self.watch.armed else None,
            )
        except TransactionEndedError:
            self.ended = True
            raise

    @contextmanager
    def statement(self, number: int, text: str, cursor: Any) -> Iterator[None]:
        """Run the block (statement ``number`` of the caller's, ``text``, executed on ``cursor``), read past
        its results, then check the transaction; if it raised, check it too, so that a statement that ended
        the transaction and then failed (``EXEC('COMMIT')`` on SQL Server does both) is reported as the end
        it was."""
        step = f"the statement {number} {text.strip()[:80]!r}"
        ran_before = "statement 1" if number == 1 else f"statements 1..{number}"
        try:
            yield
            self.dialect.discard_results(cursor)
        except Exception as error:
            self.check(step, ran_before, cause=error)
            raise
        self.check(step, ran_before)


class TransactionWatch:
    """One receive's transaction, watched across code the caller does not control (a pump's handlers).

    :meth:`arm` names the transaction (PostgreSQL: its id), :meth:`state` says afterwards whether it is
    still that same transaction: the driver's state (:meth:`Dialect.transaction_state`), then, while that
    reads OPEN, whether it is the transaction :meth:`arm` named (PostgreSQL) or, where the engine has no
    name for it (SQL Server, SQLite), whether the rows the receive deleted are still deleted as this
    connection sees them (a ``ROLLBACK`` followed by a write leaves a new transaction open, with them back).
    Unarmed, it reads nothing: a pump arms it only once a handler was lent the receive's connection, so
    handlers that never touch it cost nothing.
    """

    def __init__(
        self,
        dialect: Dialect,
        connection: Any,
        rows_check: Callable[[], tuple[str, tuple[Any, ...]]] | None = None,
    ) -> None:
        self.dialect = dialect
        self.connection = connection
        # what the dialect reads the state from: the driver's object, not the pool's wrapper of it
        self.driver = getattr(connection, "dbapi_connection", connection)
        self._rows_check = rows_check  # gives the statement counting the receive's deleted rows, its values
        self.armed = False
        self.following = False  # whether every use of the connection runs through a path that reports it
        self.mark: Any = None
        self._seen: Any = None  # the transaction's name read right after the handler's last statement
        self._seen_valid = False
        self._left = False  # a statement on a followed path found the transaction not open (see ran)

    def arm(self, begins: bool = False) -> None:
        """Start watching (once): name the transaction where the engine can. ``begins``: the transaction
        was just opened for what follows, and naming it may be what begins it (psycopg sends its BEGIN with
        the first statement); otherwise only an open transaction is named."""
        if self.armed:
            return
        self.armed = True
        if begins or self.dialect.transaction_state(self.driver) is TransactionState.OPEN:
            self.mark = self.dialect.transaction_mark(self.driver)

    def name_query(self) -> str | None:
        """The query that reads the watched transaction's name, for a caller that can queue it right behind
        a handler's statement in the driver's pipeline and report the answer with :meth:`seen` (then
        :meth:`state` costs no round trip of its own); None when the watch has nothing to compare it with."""
        if not self.armed or self.mark is None or not self.following:
            return None
        return self.dialect.transaction_name_query()

    def seen(self, name: Any) -> None:
        """The transaction's name as read right behind the handler's statement (see :meth:`name_query`)."""
        self._seen, self._seen_valid = name, True

    def ran(self) -> None:
        """A statement on a followed path returned. Where the driver's state after each statement is the
        whole story (:attr:`~..dialects.transaction_state.TransactionStates.state_follows_statements`), an
        open transaction now is the watched one unless an earlier statement left it, and :meth:`state`
        needs no query of its own unless something runs after this; one found not open is remembered, so
        that a write opening the next transaction does not hide the end (``ROLLBACK``, then ``INSERT``)."""
        if not (self.armed and self.following and self.dialect.state_follows_statements):
            return
        if not self._left and self.dialect.transaction_state(self.driver) is TransactionState.OPEN:
            self.seen(self.mark)
        else:
            self._left = True
            self.unseen()

    def unseen(self) -> None:
        """Something ran, or may have run, after the name was last read: :meth:`state` must read it again."""
        self._seen_valid = False

    def state(self) -> TransactionState:
        """Where the watched transaction stands now (OPEN when unarmed: nothing was lent to change it).

        ENDED also for a transaction ended and begun anew, as far as the engine lets that be seen; FAILED,
        NESTED and UNKNOWN as :meth:`Dialect.transaction_state` reads them. The name read behind the
        handler's last statement (:meth:`seen`) stands for reading it now, once."""
        seen, self._seen_valid = self._seen_valid, False
        left, self._left = self._left, False
        if not self.armed:
            return TransactionState.OPEN
        state = self.dialect.transaction_state(self.driver)
        if state is not TransactionState.OPEN:
            return state
        if left:
            return TransactionState.ENDED
        if seen:
            same = self._seen == self.mark
        elif self.mark is not None:
            same = self.dialect.transaction_mark_matches(self.driver, self.mark)
        else:
            same = not self.rows_back()
        return TransactionState.OPEN if same else TransactionState.ENDED

    def rows_back(self) -> bool:
        """Whether any row the receive deleted is in the queue table again, as this connection sees it."""
        if self._rows_check is None:
            return False
        statement, parameters = self._rows_check()
        cursor = self.connection.cursor()
        try:
            cursor.execute(statement, parameters)
            row = cursor.fetchone()
            self.dialect.discard_results(cursor)
        finally:
            cursor.close()
        return bool(row and int(row[0]))

    def committed(self) -> bool | None:
        """After the watched transaction ended: whether it committed, where the engine can tell exactly
        (PostgreSQL, by its id); None elsewhere."""
        return self.dialect.transaction_committed(self.driver, self.mark)


def open_transaction(dialect: Dialect, connection: Any) -> None:
    """Open a transaction on ``connection`` so that it is open before the first statement on every driver:
    SQLite needs ``begin_write`` (else a statement that reads only opens nothing), SQL Server through
    Microsoft's driver ``open_transaction`` (in implicit-transaction mode ``DECLARE`` or ``SELECT 1`` opens
    none, and ``@@TRANCOUNT`` 0 would read as ended); psycopg opens one before the first statement."""
    cursor = connection.cursor()
    try:
        for begin in (dialect.begin_write(), dialect.optional_sql("open_transaction")):
            if begin:
                cursor.execute(begin)
    finally:
        cursor.close()


@contextmanager
def guarded_transaction(
    dialect: Dialect, connection: Any, shared_with: str = "the messages"
) -> Iterator[TransactionGuard]:
    """Open a transaction on ``connection`` (not in autocommit mode) that is open before the first statement
    on every driver, yield its guard, commit when the block ends and roll back if it raises.

    SQLite needs ``begin_write`` (else a statement that reads only opens nothing); SQL Server through
    Microsoft's driver needs ``open_transaction`` (in implicit-transaction mode ``DECLARE`` or ``SELECT 1``
    opens none, and ``@@TRANCOUNT`` 0 would read as ended); psycopg opens one before the first statement.
    """
    open_transaction(dialect, connection)
    guard = TransactionGuard(dialect, connection, shared_with)
    try:
        guard.arm()
        yield guard
        connection.commit()
    except BaseException:
        try:
            connection.rollback()
        except Exception as error:  # the block's error is the one to report
            # after a statement ended the transaction SQL Server has none to roll back (error 3903)
            log.log(logging.DEBUG if guard.ended else logging.WARNING, "rolling back failed too: %s", error)
        raise
