"""ExecuteSqlAndSendOperator's guard reads the transaction, not the text: each statement the textual check
lets through but the engine runs as a commit or rollback is caught by the state the driver reports after it
(psycopg's transaction_status, SQL Server's @@TRANCOUNT and XACT_STATE(), sqlite3's in_transaction), on
real engines, SQL Server (Babelfish) through both ODBC drivers.

Each bypass runs as the second of four statements: an insert of ``first``, the bypass, an insert of
``after`` and a duplicate of ``first`` that fails. Before the guard the transaction ended at the bypass,
``after`` committed on its own (autocommit or a new transaction) and the failing statement rolled back
nothing of what came before; now the task fails at the bypass with an error naming it, ``after`` never
runs, no message is sent, and the rows show what the bypass itself did: ``first`` committed by a commit,
gone after a rollback.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import rawsql

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")

from test_airflow_dags import airflow_db, run_dag  # noqa: F401  (airflow_db: a fixture)
from test_airflow_own_transaction import create_ledger, entries, sent

from airflow_provider_sqlqueue.dialects.transaction_state import TransactionState
from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_provider_sqlqueue.operators.execute_and_send import (
    ExecuteSqlAndSendOperator,
    refuse_transaction_control,
)
from airflow_provider_sqlqueue.transport import TransactionEndedError, Transport
from airflow_provider_sqlqueue.transport.transaction_guard import guarded_transaction

if TYPE_CHECKING:
    from conftest import EngineTarget

TEST_DAGS = {"AIRFLOW__CORE__DAGS_FOLDER": str(Path(__file__).with_name("dags"))}
SQLSERVER = ["sqlserver-freetds", "sqlserver-msodbc"]

# name: (statement, what the statement did to the rows before it: the entries committed)
POSTGRES_BYPASSES = {
    # PostgreSQL's block comments nest: the regex and sqlparse end the comment at the first */
    "nested-comment-then-end": ("/* /* */ x */ END", {"first"}),
    # standard_conforming_strings is on (the default since 9.1): '\' is a whole string, END runs, -- hides
    # the rest; sqlparse reads \' as an escaped quote and the whole tail as one string
    "backslash-string-then-end": ("SELECT '\\'; END; --'", {"first"}),
    # ends the transaction and begins the next in one statement: the driver's state reads open again, only
    # the transaction's id (assigned when the guard named it) tells that it is another one
    "end-then-begin": ("/* /* */ x */ END; /* /* */ x */ BEGIN", {"first"}),
    "backslash-string-then-end-then-begin": ("SELECT '\\'; END; BEGIN; --'", {"first"}),
}
SQLSERVER_BYPASSES = {
    # commits, then fails: "Transaction count after execution indicates a mismatch" (the row stays committed)
    "exec-commit": ("EXEC('COMMIT')", {"first"}),
    "if-rollback": ("IF 1=1 ROLLBACK", set()),
    # T-SQL's block comments nest too: to sqlparse the COMMIT is inside a string after a comment
    "commit-after-nested-comment": ("/* /* */ '*/ COMMIT --'", {"first"}),
    # commits and begins the next transaction: @@TRANCOUNT reads 1 again, only the lock the guard's
    # transaction owned (sp_getapplock) is gone
    "commit-then-begin": ("/* /* */ '*/ COMMIT BEGIN TRANSACTION --'", {"first"}),
    "rollback-then-begin": ("IF 1=1 BEGIN ROLLBACK; BEGIN TRANSACTION END", set()),
}
SQLITE_BYPASSES = {
    # SQLite ends an unterminated comment at the end of the text; the regex wants END alone on its line
    "end-before-unterminated-comment": ("END/* unterminated", {"first"}),
}


@pytest.fixture
def airflow_conn(target: EngineTarget, monkeypatch: pytest.MonkeyPatch) -> Any:
    for key, value in target.airflow_env().items():
        monkeypatch.setenv(key, value)
    with target.open() as transport:
        for name in ("error", "out"):
            transport.queue(name).create()
        yield transport


def ended_at_the_second(statement: str, failed: bool = False) -> str:
    """The error for the second statement ending the transaction (and raising too: ``failed``), as a regex."""
    how = (
        "failed and ended the transaction" if failed else r"ended the transaction \(a commit or a rollback\)"
    )
    return (
        rf"^the statement 2 {re.escape(repr(statement))} {how}.*: "
        r"statements 1\.\.2 may have committed without the messages; nothing after it ran"
    )


def run_bypass(transport: Transport, statement: str) -> tuple[TransactionEndedError, Counter[str]]:
    """Run the operator with ``statement`` second of four; the error it fails with and the entries left."""
    refuse_transaction_control([statement])  # the textual check lets it through: that is the bypass
    ledger = create_ledger(transport)
    operator = ExecuteSqlAndSendOperator(
        task_id="guarded",
        sql=[
            f"INSERT INTO {ledger} (entry) VALUES ('first')",
            statement,
            f"INSERT INTO {ledger} (entry) VALUES ('after')",
            f"INSERT INTO {ledger} (entry) VALUES ('first')",  # fails: a duplicate
        ],
        queue_name="out",
        body="announced",
    )
    with pytest.raises(TransactionEndedError) as raised:
        operator.execute({})
    assert sent(transport) == [], "a message was sent although the transaction ended"
    return raised.value, entries(transport, ledger)


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
@pytest.mark.parametrize("bypass", list(POSTGRES_BYPASSES))
def test_postgresql_a_statement_that_ends_the_transaction_fails_the_task_there(
    airflow_conn: Transport, bypass: str
) -> None:
    statement, committed = POSTGRES_BYPASSES[bypass]
    [[conforming]] = rawsql.execute(airflow_conn, "SHOW standard_conforming_strings")
    assert conforming == "on"
    error, left = run_bypass(airflow_conn, statement)
    assert re.match(ended_at_the_second(statement), str(error)), str(error)
    assert left == Counter(committed)  # END committed ``first``; ``after`` never ran


@pytest.mark.parametrize("target", SQLSERVER, indirect=True)
@pytest.mark.parametrize("bypass", list(SQLSERVER_BYPASSES))
def test_sqlserver_a_statement_that_ends_the_transaction_fails_the_task_there(
    airflow_conn: Transport, bypass: str
) -> None:
    statement, committed = SQLSERVER_BYPASSES[bypass]
    error, left = run_bypass(airflow_conn, statement)
    assert re.match(ended_at_the_second(statement, failed=bypass == "exec-commit"), str(error)), str(error)
    assert left == Counter(committed)  # COMMIT kept ``first``, ROLLBACK undid it; ``after`` never ran
    if bypass == "exec-commit":  # it raised too, after committing: that error is chained, the end reported
        assert "mismatch" in str(error.__cause__)


@pytest.mark.parametrize("target", SQLSERVER, indirect=True)
def test_sqlserver_a_transaction_begun_inside_fails_the_task_and_nothing_commits(
    airflow_conn: Transport,
) -> None:
    """``BEGIN TRANSACTION`` in a block: @@TRANCOUNT 2, which the driver's one COMMIT would leave at 1, and
    closing the connection would roll everything back after the task had succeeded."""
    statement = "IF 1=1 BEGIN TRANSACTION"
    refuse_transaction_control([statement])
    ledger = create_ledger(airflow_conn)
    operator = ExecuteSqlAndSendOperator(
        task_id="nested",
        sql=[f"INSERT INTO {ledger} (entry) VALUES ('first')", statement],
        queue_name="out",
        body="announced",
    )
    with pytest.raises(TransactionEndedError, match=r"^the statement 2 'IF 1=1 BEGIN TRANSACTION' began a"):
        operator.execute({})
    assert entries(airflow_conn, ledger) == Counter() and sent(airflow_conn) == []


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
@pytest.mark.parametrize("bypass", list(SQLITE_BYPASSES))
def test_sqlite_a_statement_that_ends_the_transaction_fails_the_task_there(
    airflow_conn: Transport, bypass: str
) -> None:
    statement, committed = SQLITE_BYPASSES[bypass]
    error, left = run_bypass(airflow_conn, statement)
    assert re.match(ended_at_the_second(statement), str(error)), str(error)
    assert left == Counter(committed)


@pytest.mark.parametrize("target", ["sqlite", "postgresql", *SQLSERVER], indirect=True)
def test_statements_that_keep_the_transaction_commit_with_the_messages(airflow_conn: Transport) -> None:
    """No false alarm: a query with results, a savepoint, and on SQL Server a first statement that opens no
    implicit transaction (DECLARE) leave the transaction open, and all of it commits with the message."""
    transport = airflow_conn
    ledger = create_ledger(transport)
    first = "DECLARE @unused int = 1" if transport.dialect.name == "sqlserver" else "SELECT 1"
    savepoint, undo = (
        ("SAVE TRANSACTION s1", "ROLLBACK TRANSACTION s1")
        if transport.dialect.name == "sqlserver"
        else ("SAVEPOINT s1", "ROLLBACK TO s1")
    )
    operator = ExecuteSqlAndSendOperator(
        task_id="kept",
        sql=[
            first,
            f"INSERT INTO {ledger} (entry) VALUES ('kept')",
            f"SELECT entry FROM {ledger}",
            savepoint,
            f"INSERT INTO {ledger} (entry) VALUES ('undone')",
            undo,
        ],
        queue_name="out",
        body="announced",
    )
    assert operator.execute({})["statements"] == 6
    assert entries(transport, ledger) == Counter({"kept": 1})
    assert [body for _, _, body in sent(transport)] == [b"announced"]


@pytest.mark.parametrize("target", ["sqlite", "postgresql", *SQLSERVER], indirect=True)
def test_each_engine_reports_its_transactions_state(airflow_conn: Transport) -> None:
    """The dialect's transaction_state on the hook's connection: open inside guarded_transaction, ended
    after a commit run as a statement (which the guard's check turns into the error), and on PostgreSQL
    failed (aborted) after a statement error."""
    transport = airflow_conn
    dialect = transport.dialect
    hook = SqlQueueHook()
    try:
        connection = hook.get_conn()
        try:
            ended = r"^the test's COMMIT ended the transaction .*: the SELECT may have committed without it"
            with (
                pytest.raises(TransactionEndedError, match=ended),
                guarded_transaction(dialect, connection, shared_with="it") as guard,
            ):
                cursor = connection.cursor()
                cursor.execute("SELECT 1")
                cursor.fetchall()
                assert dialect.transaction_state(connection) is TransactionState.OPEN
                cursor.execute("COMMIT")
                assert dialect.transaction_state(connection) is TransactionState.ENDED
                guard.check("the test's COMMIT", "the SELECT")
            if dialect.name == "postgresql":
                with (
                    pytest.raises(Exception, match="division by zero"),
                    guarded_transaction(dialect, connection),
                ):
                    cursor = connection.cursor()
                    try:
                        cursor.execute("SELECT 1/0")
                    finally:
                        assert dialect.transaction_state(connection) is TransactionState.FAILED
        finally:
            connection.close()
    finally:
        hook.close()


@pytest.mark.slow
@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_templated_value_that_ends_the_transaction_fails_the_task_through_dag_test(
    airflow_db: Path,  # noqa: F811
    target: EngineTarget,
) -> None:
    """The backslash bypass arriving as a value rendered into the SQL (the run's conf), through dag.test()."""
    with target.open() as transport:
        for name in ("error", "out"):
            transport.queue(name).create()
        ledger = create_ledger(transport)
    note = "\\'; END; --"
    run = run_dag(target, "sqlqueue_test_guard_templated", {"ledger": ledger, "note": note}, env=TEST_DAGS)

    states = {ti["task_id"]: ti["state"] for ti in run.task_instances}
    assert states == {"noted": "failed"}, run.output
    assert (
        "TransactionEndedError: the statement 2 \"SELECT '\\\\'; END; --'\" ended the transaction"
        in run.output
    )
    assert "statements 1..2 may have committed without the messages" in run.output
    with target.open() as transport:
        assert entries(transport, ledger) == Counter({"first": 1})
        assert sent(transport) == []
