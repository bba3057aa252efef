"""Rows and messages in one transaction of the queue database, from Airflow: ``SqlQueueHook.send`` and
``send_batch`` on the caller's ``get_conn()`` connection, and ``ExecuteSqlAndSendOperator``, on real engines
(through ``dag.test()`` for the DAG, in-process for the operator's refusals)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import rawsql

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")

from test_airflow_dags import airflow_db, run_dag  # noqa: F401  (airflow_db: a fixture)

from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_provider_sqlqueue.operators.execute_and_send import ExecuteSqlAndSendOperator
from airflow_provider_sqlqueue.transport import ConfigurationError, Transport

if TYPE_CHECKING:
    from conftest import EngineTarget

TEST_DAGS = {"AIRFLOW__CORE__DAGS_FOLDER": str(Path(__file__).with_name("dags"))}


def create_ledger(transport: Transport) -> str:
    """A ``ledger`` table beside the queues (one row per entry, the entry its key); its qualified name."""
    ledger = transport.dialect.qualified_name(transport.resolve("ledger"))
    rawsql.execute(transport, f"CREATE TABLE {ledger} (entry varchar(40) PRIMARY KEY)")
    return ledger


def entries(transport: Transport, ledger: str) -> Counter[str]:
    return Counter(str(row[0]) for row in rawsql.execute(transport, f"SELECT entry FROM {ledger}"))


def sent(transport: Transport, name: str = "out") -> list[tuple[str, dict[str, Any], bytes]]:
    """The rows of a queue, oldest first: (Id, headers, body)."""
    rows = rawsql.all_rows(transport.queue(name))
    return [(str(message_id), json.loads(headers), bytes(body)) for message_id, headers, body in rows]


@pytest.mark.slow
def test_rows_and_messages_commit_together_or_not_at_all_through_dag_test(
    airflow_db: Path,  # noqa: F811
    target: EngineTarget,
) -> None:
    with target.open() as transport:
        for name in ("error", "out"):
            transport.queue(name).create()
        ledger = create_ledger(transport)
        mark = transport.dialect.placeholder
    run = run_dag(target, "sqlqueue_test_own_transaction", {"ledger": ledger, "mark": mark}, env=TEST_DAGS)

    states = {ti["task_id"]: (ti["state"], ti["try_number"]) for ti in run.task_instances}
    assert states == {
        "hook_rolled_back": ("failed", 1),
        "hook_committed": ("success", 1),
        "sql_fails": ("failed", 1),
        "sql_retried": ("success", 2),
        "sql_committed": ("success", 1),
        "report": ("success", 1),
    }, run.output
    assert run.state == "success", run.output  # a run's state is its leaves' (report), not every task's
    with target.open() as transport:
        assert entries(transport, ledger) == Counter(
            {"hook-committed": 1, "sql-retried": 1, "sql-committed": 1}
        )
        messages = sent(transport)
    bodies = [body for _, _, body in messages]
    assert Counter(bodies) == Counter(
        {b"hook-committed": 1, b"retried-1": 1, b"retried-2": 1, b'{"order": 1}': 1, b"two": 1}
    )
    [returned] = re.findall(r"^sql_committed returned (\{.*\})", run.output, flags=re.MULTILINE)
    posted = [
        (message_id, headers) for message_id, headers, body in messages if body in (b'{"order": 1}', b"two")
    ]
    assert all(headers["NServiceBus.EnclosedMessageTypes"] == "Ledger.Posted" for _, headers in posted)
    assert json.loads(returned) == {
        "queue": "out",
        "count": 2,
        "first_id": posted[0][0],
        "last_id": posted[1][0],
        "statements": 1,
    }


@pytest.fixture
def airflow_conn(target: EngineTarget, monkeypatch: pytest.MonkeyPatch) -> Any:
    for key, value in target.airflow_env().items():
        monkeypatch.setenv(key, value)
    with target.open() as transport:
        for name in ("error", "out"):
            transport.queue(name).create()
        yield transport


@pytest.mark.parametrize("target", ["sqlite", "postgresql", "sqlserver-msodbc"], indirect=True)
def test_the_hooks_connection_holds_ddl_rows_and_sends_until_the_commit(airflow_conn) -> None:
    """``get_conn()`` is not in autocommit mode (on SQLite neither, unlike the transport's own connections);
    ``transaction()`` also holds DDL, which SQLite would otherwise commit at once."""
    transport = airflow_conn
    ledger = create_ledger(transport)
    mark = transport.dialect.placeholder
    made = transport.dialect.qualified_name(transport.resolve("made_in_a_transaction"))
    hook = SqlQueueHook()
    try:
        for outcome in ("rollback", "commit"):
            connection = hook.get_conn()
            connection.cursor().execute(f"INSERT INTO {ledger} (entry) VALUES ({mark})", (outcome,))
            hook.send("out", outcome.encode(), connection=connection)
            hook.send_batch("out", [f"{outcome}-a", f"{outcome}-b"], connection=connection)
            assert transport.queue("out").count() == 0 and entries(transport, ledger) == Counter()
            getattr(connection, outcome)()
            connection.close()
        with pytest.raises(RuntimeError, match="undo"), hook.transaction() as connection:
            connection.cursor().execute(f"CREATE TABLE {made} (n int)")
            hook.send("out", b"undone", connection=connection)
            raise RuntimeError("undo")
    finally:
        hook.close()
    assert entries(transport, ledger) == Counter({"commit": 1})
    assert sorted(body for _, _, body in sent(transport)) == [b"commit", b"commit-a", b"commit-b"]
    assert not transport.queue("made_in_a_transaction").exists()


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_the_operator_refuses_what_would_not_be_atomic_before_anything_runs(airflow_conn) -> None:
    transport = airflow_conn
    ledger = create_ledger(transport)
    for statement in (
        "COMMIT",
        "rollback",
        "BEGIN TRANSACTION",
        "END",
        f"INSERT INTO {ledger} (entry) VALUES ('a'); COMMIT; INSERT INTO {ledger} (entry) VALUES ('b')",
        "SET IMPLICIT_TRANSACTIONS OFF",
        "BEGIN TRY UPDATE t SET x = 1; COMMIT TRANSACTION; END TRY BEGIN CATCH SELECT 1; END CATCH",
    ):
        operator = ExecuteSqlAndSendOperator(
            task_id="refused",
            sql=[f"INSERT INTO {ledger} (entry) VALUES ('x')", statement],
            queue_name="out",
            body="x",
        )
        with pytest.raises(ConfigurationError, match="ends or leaves the transaction"):
            operator.execute({})
    assert entries(transport, ledger) == Counter() and sent(transport) == []
    for empty in ("", [], ["  "]):
        with pytest.raises(ValueError, match="sql must be"):
            ExecuteSqlAndSendOperator(task_id="empty", sql=empty, queue_name="out", body="x").execute({})
    allowed = ExecuteSqlAndSendOperator(
        task_id="allowed",
        sql=f"SAVEPOINT s1; INSERT INTO {ledger} (entry) VALUES ('undone'); ROLLBACK TO s1; "
        f"INSERT INTO {ledger} (entry) VALUES ('after')",
        split_statements=True,
        queue_name="out",
        body="x",
    )
    assert allowed.execute({})["statements"] == 4
    assert entries(transport, ledger) == Counter({"after": 1})
    assert [body for _, _, body in sent(transport)] == [b"x"]


@pytest.mark.parametrize("target", ["sqlserver-msodbc"], indirect=True)
def test_t_sql_blocks_and_savepoints_stay_in_the_operators_transaction(airflow_conn) -> None:
    """The T-SQL forms the refusal lets through, run on Babelfish: a TRY block, SAVE TRANSACTION and
    ROLLBACK TRANSACTION to it undo their part only, and the rest commits with the message."""
    transport = airflow_conn
    ledger = create_ledger(transport)
    post = ExecuteSqlAndSendOperator(
        task_id="post",
        sql=[
            f"BEGIN TRY INSERT INTO {ledger} (entry) VALUES ('in-try'); END TRY BEGIN CATCH THROW; END CATCH",
            "SAVE TRANSACTION before_undone",
            f"INSERT INTO {ledger} (entry) VALUES ('undone')",
            "ROLLBACK TRANSACTION before_undone",
            f"IF 1 = 1 BEGIN INSERT INTO {ledger} (entry) VALUES ('in-block'); END",
        ],
        queue_name="out",
        body="posted",
    )
    assert post.execute({})["statements"] == 5
    assert entries(transport, ledger) == Counter({"in-try": 1, "in-block": 1})
    assert [body for _, _, body in sent(transport)] == [b"posted"]
