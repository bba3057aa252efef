"""The state of a connection's transaction as each engine's driver or server reports it, not as the text of
the statements suggests.

A guard that reads the statements' text (a regex, a SQL parser) misses what the engine does with it: a
nested comment before ``END`` on PostgreSQL, a string ending in a backslash, ``EXEC('COMMIT')`` or
``IF 1=1 ROLLBACK`` in T-SQL. After such a statement the driver knows the transaction is gone; asking it
is the check. Declared here as a mixin of :class:`~.base.Dialect`, with each engine's way of asking it;
``transport/transaction_guard.py`` turns the answer into an error.
"""

from __future__ import annotations

import uuid
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from ..model.address import QueueAddress


class TransactionState(Enum):
    """Where a connection's transaction stands after a statement."""

    OPEN = "open"  # still the one transaction: what ran is uncommitted, a commit or rollback decides it
    ENDED = "ended"  # committed or rolled back (what ran before may be committed); none open, or a new one
    FAILED = "failed"  # aborted (PostgreSQL) or doomed (SQL Server XACT_STATE() = -1): it can only roll back
    NESTED = "nested"  # SQL Server: a BEGIN TRANSACTION inside it, which the driver's commit would not end
    UNKNOWN = "unknown"  # the driver cannot say (PostgreSQL and SQLite through ODBC)


class TransactionStates:
    """How a dialect reads its connection's transaction state; by default it cannot."""

    # Whether the state read right after each statement the driver ran is the whole story: one execute runs
    # one statement, which cannot end the transaction and begin another (sqlite3). Then a transaction open
    # after every statement of a caller's is the one it was, with nothing more to read.
    state_follows_statements: ClassVar[bool] = False

    if TYPE_CHECKING:
        placeholder: str

        # Provided by Dialect, which this class is a mixin of.
        def qualified_name(self, address: QueueAddress) -> str: ...

    def transaction_state(self, connection: Any) -> TransactionState:
        """The state of ``connection``'s transaction as its driver or server reports it (UNKNOWN where it
        cannot), read without changing it."""
        return TransactionState.UNKNOWN

    def transaction_mark(self, connection: Any) -> Any:
        """Something that names the open transaction itself, so that a transaction ended and begun anew
        between two reads (``COMMIT; BEGIN``, or a ``ROLLBACK`` followed by a write that opens the next one)
        is not mistaken for the same one; None where the engine has no such name for it (then only
        :meth:`transaction_state` and the rows a receive deleted can tell)."""
        return None

    def transaction_mark_matches(self, connection: Any, mark: Any) -> bool:
        """Whether the open transaction is still the one :meth:`transaction_mark` named."""
        return True

    def transaction_name_query(self) -> str | None:
        """The query whose one value is the open transaction's name as :meth:`transaction_mark` gave it,
        for queueing right behind another statement where the driver pipelines (None where the engine has
        no such name, or reads it otherwise)."""
        return None

    def refused_in_a_pipeline(self, error: BaseException) -> bool:
        """Whether ``error`` says the statement cannot run in the driver's pipeline at all (and ran
        nothing), though it runs outside one."""
        return False

    def transaction_committed(self, connection: Any, mark: Any) -> bool | None:
        """How the transaction :meth:`transaction_mark` named ended: True committed, False rolled back, None
        where the engine cannot say (then the rows it deleted must tell)."""
        return None

    def queued_row_versions(self, address: QueueAddress, count: int) -> str:
        """How many of ``count`` RowVersions (the parameters) are in the queue table, as this transaction
        sees it: after a receive deleted them, any of them seen again means its DELETE was rolled back."""
        marks = ", ".join([self.placeholder] * count)
        return f"SELECT COUNT(*) FROM {self.qualified_name(address)} WHERE RowVersion IN ({marks})"

    def discard_results(self, cursor: Any) -> None:
        """Read past whatever a statement run on ``cursor`` returned, so that the connection can answer
        :meth:`transaction_state` and the errors of a batch's later statements surface here. psycopg and
        sqlite3 have done so in ``execute``."""


class SqliteTransactionState(TransactionStates):
    """sqlite3's ``in_transaction``: SQLite itself says whether the connection is outside autocommit mode.

    The transaction of a write is begun explicitly (``begin_write``), so ``False`` after a statement means
    that statement ended it (``COMMIT``, ``END``, ``ROLLBACK``); SQLite has no aborted-but-open state. sqlite3
    runs one statement per ``execute`` (a second raises before anything runs) and begins a transaction only
    before a statement while none is open, so no one statement ends the transaction and opens another."""

    state_follows_statements: ClassVar[bool] = True

    def transaction_state(self, connection: Any) -> TransactionState:
        return TransactionState.OPEN if connection.in_transaction else TransactionState.ENDED


class PostgresTransactionState(TransactionStates):
    """psycopg's ``connection.info.transaction_status``: the server's own transaction status, sent with
    every ReadyForQuery message, so it costs no round trip and a statement cannot hide from it."""

    def transaction_state(self, connection: Any) -> TransactionState:
        from psycopg.pq import TransactionStatus

        status = connection.info.transaction_status
        if status == TransactionStatus.INTRANS:
            return TransactionState.OPEN
        if status == TransactionStatus.IDLE:
            return TransactionState.ENDED
        if status == TransactionStatus.INERROR:
            return TransactionState.FAILED
        return TransactionState.UNKNOWN  # ACTIVE (a command running) or UNKNOWN (the connection is bad)

    # txid_* rather than pg_current_xact_id() (13+): PostgreSQL 12 is supported. txid_current() assigns the
    # transaction its id if nothing it ran wrote yet (an operator's guard arms before the first statement;
    # a receive's DELETE has assigned one already); a transaction begun anew afterwards has none until it
    # writes, and then another, so ``END; BEGIN`` in one statement is seen.
    def transaction_mark(self, connection: Any) -> Any:
        return _scalar(connection, POSTGRES_NAME_THE_TRANSACTION)

    def transaction_mark_matches(self, connection: Any, mark: Any) -> bool:
        return mark is None or _scalar(connection, POSTGRES_THE_TRANSACTIONS_NAME) == mark

    def transaction_name_query(self) -> str | None:
        return POSTGRES_THE_TRANSACTIONS_NAME

    def refused_in_a_pipeline(self, error: BaseException) -> bool:
        # A pipeline runs each statement through the extended protocol, which takes one command per
        # statement; outside one, psycopg sends a text without parameters as a simple query, which may hold
        # several ("INSERT ...; UPDATE ...").
        return getattr(error, "sqlstate", None) == "42601" and "multiple commands" in str(error)

    def transaction_committed(self, connection: Any, mark: Any) -> bool | None:
        if mark is None:
            return None
        status = _scalar(connection, f"SELECT txid_status({self.placeholder})", (mark,))
        return {"committed": True, "aborted": False}.get(status)


class SqlServerTransactionState(TransactionStates):
    """``@@TRANCOUNT`` and ``XACT_STATE()`` from the server. The driver's own view does not help: with
    autocommit off pyodbc (FreeTDS, Microsoft's driver) opens a new transaction, implicitly or at once, after
    one ends, so only the server's count tells whether the transaction the statements began in is open.

    Observed on Babelfish 4.3 through both drivers: 1 and 1 while open, 0 and 0 after ``IF 1=1 ROLLBACK``,
    ``EXEC('COMMIT')`` (which also raises "Transaction count after execution indicates a mismatch") or a
    commented ``COMMIT``, 2 and 1 after a ``BEGIN TRANSACTION`` inside."""

    def transaction_state_query(self) -> str:
        """The count of open transaction levels and whether the transaction can commit (1), is doomed
        (-1) or absent (0). A SELECT without a table opens no implicit transaction itself."""
        return "SELECT @@TRANCOUNT, XACT_STATE()"

    def discard_results(self, cursor: Any) -> None:
        # Until every result set is read, FreeTDS answers another cursor's query with "Invalid cursor
        # state"; and an error of a later statement of the batch (EXEC('COMMIT')'s among them) only
        # arrives with its result set.
        while cursor.nextset():
            pass

    def queued_row_versions(self, address: QueueAddress, count: int) -> str:
        # READPAST: a row another receiver took after a rollback gave it back is not waited for (Babelfish
        # ignores the hint and, reading a snapshot, waits for nothing anyway)
        marks = ", ".join(["?"] * count)
        table = self.qualified_name(address)
        return f"SELECT COUNT(*) FROM {table} WITH (READPAST) WHERE RowVersion IN ({marks})"

    def transaction_mark(self, connection: Any) -> Any:
        """A lock the transaction owns (``sp_getapplock`` with ``@LockOwner = 'Transaction'``) on a name no
        one else uses: it ends with the transaction, so a ``COMMIT`` followed by a ``BEGIN TRANSACTION``, or
        the driver's commit after which pyodbc opens the next transaction at once, leaves a transaction that
        does not hold it. SQL Server has ``CURRENT_TRANSACTION_ID()`` (2016+), Babelfish has neither it nor
        ``sys.dm_tran_current_transaction``; the lock is read the same on both. Taken in Shared mode, so it
        blocks nothing. Rolling back to a savepoint begun before it keeps it (SQL Server documents that
        such a rollback releases no lock; observed on Babelfish 4.3 through both drivers)."""
        name = f"sqlqueue-transaction-{uuid.uuid4().hex}"
        cursor = connection.cursor()
        try:
            cursor.execute(SQLSERVER_NAME_THE_TRANSACTION, (name,))
            row = _last_row(cursor)
        finally:
            cursor.close()
        return name if row is not None and row[0] is not None and int(row[0]) >= 0 else None

    def transaction_mark_matches(self, connection: Any, mark: Any) -> bool:
        if mark is None:
            return True
        return _scalar(connection, SQLSERVER_THE_TRANSACTION_HOLDS_ITS_NAME, (mark,)) != "NoLock"

    def transaction_state(self, connection: Any) -> TransactionState:
        cursor = connection.cursor()
        try:
            cursor.execute(self.transaction_state_query())
            levels, state = cursor.fetchone()
        finally:
            cursor.close()
        if state == -1:
            return TransactionState.FAILED
        if levels == 0:
            return TransactionState.ENDED
        return TransactionState.NESTED if levels > 1 else TransactionState.OPEN


POSTGRES_NAME_THE_TRANSACTION = "SELECT txid_current()"
POSTGRES_THE_TRANSACTIONS_NAME = "SELECT txid_current_if_assigned()"
SQLSERVER_NAME_THE_TRANSACTION = (
    "DECLARE @granted int; "
    "EXEC @granted = sp_getapplock @Resource = ?, @LockMode = 'Shared', @LockOwner = 'Transaction', "
    "@LockTimeout = 0; "
    "SELECT @granted"
)
SQLSERVER_THE_TRANSACTION_HOLDS_ITS_NAME = "SELECT APPLOCK_MODE('public', ?, 'Transaction')"


def _last_row(cursor: Any) -> Any:
    """The first row of the last result set a batch returned (FreeTDS reports the EXEC's as one without
    rows), every result set read past."""
    row = None
    while True:
        if cursor.description is not None:
            row = cursor.fetchone()
        if not cursor.nextset():
            return row


def _scalar(connection: Any, statement: str, parameters: tuple[Any, ...] = ()) -> Any:
    cursor = connection.cursor()
    try:
        cursor.execute(statement, parameters)
        row = cursor.fetchone()
    finally:
        cursor.close()
    return None if row is None else row[0]
