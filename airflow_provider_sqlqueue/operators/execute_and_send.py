"""ExecuteSqlAndSendOperator: run SQL statements and send messages in one transaction of the queue database.

Either the statements' changes and the messages commit together, or nothing does: a DAG that records a
batch in its tables and announces it to a queue has no window in which one is done and the other not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import sqlparse
from airflow.providers.common.sql.hooks.sql import DbApiHook

from ..hooks.sqlqueue import SqlQueueHook
from ..model.errors import ConfigurationError
from ..transport.transaction_guard import guarded_transaction
from ._rendered import as_list, as_mapping
from .send import SendMessageOperator

# A statement that ends, starts or leaves the operator's transaction would commit part of the work alone.
# Rolling back to a savepoint (ROLLBACK TO, T-SQL's ROLLBACK TRANSACTION <savepoint>) and T-SQL's blocks
# (BEGIN ... END, BEGIN TRY ... END TRY) stay inside it. This is only the early, clear refusal of the plain
# forms, before anything runs: text can hide a commit from it (nested comments, a backslash before a quote,
# EXEC('COMMIT'), IF 1=1 ROLLBACK). The guard is the transaction's state, read from the driver after each
# statement (transport/transaction_guard.py).
TRANSACTION_CONTROL = re.compile(
    r"""^\s*(
        COMMIT\b | ABORT\b | START\s+TRANSACTION\b
        | (ROLLBACK|END)(\s+(WORK|TRAN|TRANSACTION))?(\s+AND\s+(NO\s+)?CHAIN)?\s*;?\s*$
        | BEGIN(\s+(TRAN|TRANSACTION|WORK|DEFERRED|IMMEDIATE|EXCLUSIVE|DISTRIBUTED|ISOLATION)\b|\s*;?\s*$)
        | SET\s+(IMPLICIT_TRANSACTIONS|AUTOCOMMIT)\b
    )""",
    re.IGNORECASE | re.VERBOSE,
)


def statements_of(sql: Any, split_statements: bool) -> list[str]:
    """The statements to run: a list as given, or one text (split on ``;`` with ``split_statements``)."""
    if isinstance(sql, str):
        items = DbApiHook.split_sql_string(sql) if split_statements else [sql]
    else:
        items = as_list("sql", sql)
    statements = [item for item in items if isinstance(item, str) and item.strip()]
    if len(statements) != len(items) or not statements:
        raise ValueError(f"sql must be a non-empty statement or a list of them, not {str(sql)[:80]!r}")
    return statements


def _commits_inside(statement: str) -> bool:
    """Whether a COMMIT keyword appears anywhere in ``statement`` (in a T-SQL block, say), not in a string."""
    return any(
        token.ttype in sqlparse.tokens.Keyword and token.normalized == "COMMIT"
        for parsed in sqlparse.parse(statement)
        for token in parsed.flatten()
    )


def refuse_transaction_control(statements: Sequence[str]) -> None:
    """Refuse, before anything runs, a statement that plainly commits, rolls back or leaves the transaction:
    an early error naming it, before any row is written. Not the guard (``transport.transaction_guard``)."""
    for statement in statements:
        for part in DbApiHook.split_sql_string(statement):
            if TRANSACTION_CONTROL.match(part) or _commits_inside(part):
                raise ConfigurationError(
                    f"the statement {part.strip()[:80]!r} ends or leaves the transaction that the SQL and "
                    "the messages share, so part of the work would commit alone: remove it (the operator "
                    "commits once, after the last statement and the sends; a savepoint is allowed; a column "
                    "named commit must be quoted)"
                )


def as_parameters(value: Any) -> Mapping[str, Any] | list[Any] | None:
    """Bound parameters: a dict (named style), a list (positional), or text rendered from either."""
    if value is None or value == "":
        return None
    try:
        return as_mapping("parameters", value)
    except ValueError:
        return as_list("parameters", value)


class ExecuteSqlAndSendOperator(SendMessageOperator):
    """Run ``sql`` on the queue database, send ``body`` or ``messages`` to ``queue_name``, and commit both
    in one transaction; return a count and two Ids.

    If a statement or the send fails, the transaction rolls back: no row changed, no message sent. After each
    statement (and after the sends, before the commit) the operator reads the transaction's state from the
    driver (psycopg's ``transaction_status``, SQL Server's ``@@TRANCOUNT`` and ``XACT_STATE()``, sqlite3's
    ``in_transaction``): a statement that committed or rolled back the transaction, however its text hid it
    (``EXEC('COMMIT')``, ``IF 1=1 ROLLBACK``, a nested comment before ``END``), began one inside it, or left
    it aborted without an error, fails the task there with ``TransactionEndedError`` naming it; nothing
    after it runs, what is left rolls back, no message is sent, and where the statements before it may
    already have committed the error says so. A retry
    of a failed try therefore starts from nothing. A try that failed after its commit (a worker lost at
    that moment) is retried too and runs the SQL again: write it so that a second run changes nothing
    more (``INSERT ... WHERE NOT EXISTS``, ``ON CONFLICT DO NOTHING``, ``MERGE``); its messages repeat the
    first try's Ids (``deterministic_ids``), so a receiver that remembers Ids drops them.

    The tables must be in the queue database (on SQL Server, another database of the same server is
    reachable as ``[db].[schema].[table]``, in the same transaction).

    :param sql: a statement or a list of statements (templated; a file's statements with
        ``"{% include 'close_day.sql' %}"``: no ``template_ext``, so that a message body or queue name ending
        in ``.sql`` is not taken for a file). Statements that plainly commit, roll back or start a
        transaction (``COMMIT`` anywhere, ``ROLLBACK``, ``BEGIN TRANSACTION``, ``END``, ...) are refused
        before anything runs; any other that does so is stopped by the state check after it.
    :param parameters: bound values for every statement, in the driver's style: a dict for named
        placeholders, a list for positional ones (``?`` on SQLite and SQL Server, ``%s`` on PostgreSQL)
        (templated).
    :param split_statements: split a text ``sql`` into statements on ``;`` (SQLite runs one statement per
        call; PostgreSQL and SQL Server also run several at once, without ``parameters``).
    :param queue_name: queue address (templated). ``queue`` stays Airflow's executor queue.
    :param body: one message (templated); or ``messages``, a list of them (templated), as
        :class:`SendMessageOperator` takes them, with ``headers``, ``time_to_be_received`` and
        ``deterministic_ids``.
    :return: ``{"queue", "count", "first_id", "last_id", "statements"}``.
    """

    template_fields: Sequence[str] = (*SendMessageOperator.template_fields, "sql", "parameters")
    template_fields_renderers = {**SendMessageOperator.template_fields_renderers, "sql": "sql"}
    ui_color = "#e0e8d3"

    def __init__(
        self,
        *,
        sql: str | Sequence[str],
        queue_name: str,
        parameters: Mapping[str, Any] | Sequence[Any] | None = None,
        split_statements: bool = False,
        body: Any = None,
        headers: Mapping[str, str | None] | None = None,
        time_to_be_received: timedelta | float | None = None,
        messages: Sequence[Any] | None = None,
        sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
        deterministic_ids: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            queue_name=queue_name,
            body=body,
            headers=headers,
            time_to_be_received=time_to_be_received,
            messages=messages,
            sqlqueue_conn_id=sqlqueue_conn_id,
            deterministic_ids=deterministic_ids,
            **kwargs,
        )
        self.sql = sql
        self.parameters = parameters
        self.split_statements = split_statements

    def execute(self, context: Any) -> dict[str, Any]:
        statements = statements_of(self.sql, self.split_statements)
        refuse_transaction_control(statements)
        parameters = as_parameters(self.parameters)
        outgoing = self.outgoing_messages(context)
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        try:
            connection = hook.get_conn()
            try:
                with guarded_transaction(hook.get_transport().dialect, connection) as guard:
                    cursor = connection.cursor()
                    for number, statement in enumerate(statements, 1):
                        with guard.statement(number, statement, cursor):
                            if parameters is None:
                                cursor.execute(statement)
                            else:
                                cursor.execute(statement, parameters)
                    cursor.close()
                    ids = hook.send_batch(self.queue_name, outgoing, connection=connection)
                    guard.check("sending the messages", f"statements 1..{len(statements)}")
            finally:
                connection.close()
        finally:
            hook.close()
        self.log.info(
            "ran %d statement(s) and sent %d message(s) to %s in one transaction",
            len(statements),
            len(ids),
            self.queue_name,
        )
        return {
            "queue": self.queue_name,
            "count": len(ids),
            "first_id": ids[0] if ids else None,
            "last_id": ids[-1] if ids else None,
            "statements": len(statements),
        }

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the tables the SQL reads and writes, as common-sql's SQL parser finds them (named as
        the hook names its tables), and the queue as an output."""
        from ._lineage import operator_lineage, sql_lineage

        queue_lineage = operator_lineage(self.sqlqueue_conn_id, outputs=[str(self.queue_name)])
        if queue_lineage is None:
            return None
        found = sql_lineage(self.sqlqueue_conn_id, self.sql)
        if found is None:
            return queue_lineage
        queue_lineage.inputs = list(found.inputs)
        queue_lineage.outputs = [*found.outputs, *queue_lineage.outputs]
        queue_lineage.run_facets = {**found.run_facets, **queue_lineage.run_facets}
        queue_lineage.job_facets = {**found.job_facets, **queue_lineage.job_facets}
        return queue_lineage
