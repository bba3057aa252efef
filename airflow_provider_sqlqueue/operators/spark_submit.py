"""The Spark bridge from a DAG: submit the shipped drain job, and provision the bridge's tables.

``SqlQueueSparkSubmitOperator`` is the apache-spark provider's ``SparkSubmitOperator`` with the queue's
parameters added: everything about the cluster (master from the Spark connection: local, standalone, YARN,
Kubernetes; conf, memory, py_files) works as there. The queue database's credentials reach the job only
through its environment (``env_vars``, set at execution time and never rendered): ``SQLQUEUE_URL`` without
the password and ``SQLQUEUE_PASSWORD``, which is also registered with Airflow's secrets masker.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Sequence
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.common.compat.sdk import AirflowException
from airflow.sdk import BaseOperator
from airflow.sdk.log import mask_secret

from ..hooks.sqlqueue import SqlQueueHook
from ..spark import DRAIN_JOB
from ..spark.config import PASSWORD_ENV, URL_ENV, Sink, split_credentials
from ..spark.tables import (
    DEFAULT_PREFIX,
    RUN_ID_MAX,
    BridgeSql,
    bridge_tables,
    create_bridge_tables,
    create_sink_table,
)

__all__ = [
    "ProvisionSparkBridgeOperator",
    "SqlQueueSparkSubmitOperator",
    "default_run_id",
    "queue_environment",
    "task_run_id",
]


def queue_environment(hook: SqlQueueHook) -> dict[str, str]:
    """``SQLQUEUE_URL`` (no password) and ``SQLQUEUE_PASSWORD`` for a Spark job; both registered with the
    masker."""
    url = hook.sqlalchemy_url
    stripped, password = split_credentials(url)
    env = {URL_ENV: stripped}
    if password:
        mask_secret(password)
        mask_secret(url.render_as_string(hide_password=False))
        env[PASSWORD_ENV] = password
    return env


def task_run_id(context: Any) -> str:
    """:func:`default_run_id` of the running task instance: the same on every try of it."""
    ti = context["ti"]
    return default_run_id(ti.dag_id, ti.task_id, ti.run_id, getattr(ti, "map_index", -1))


def default_run_id(dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> str:
    """``<dag>.<task>.<dag run>[.<map index>]``, hashed down to the 200-character limit if longer."""
    text = f"{dag_id}.{task_id}.{run_id}" + (f".{map_index}" if map_index >= 0 else "")
    if len(text) <= RUN_ID_MAX:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return f"{text[: RUN_ID_MAX - 17]}~{digest}"


class SqlQueueSparkSubmitOperator(SparkSubmitOperator):
    """Drain ``input_queue`` into ``sink`` through a DataFrame transform with ``spark-submit``.

    Nothing is lost whatever fails, and a run id is committed at most once (see docs/spark.md): a retry of
    the task re-runs the same run id, which finishes the run or finds it committed and returns its summary.

    :param input_queue: queue to drain (templated).
    :param sink: ``table:<name>``, ``queue:<address>`` (both in the queue database: exactly once) or
        ``parquet:<path>`` / ``json:<path>`` (at least once; rows carry message ids) (templated).
    :param sqlqueue_conn_id: the queue database's Airflow connection.
    :param transform: dotted path of a ``DataFrame -> DataFrame`` function importable by the driver (and
        by executors if it uses Python UDFs; ship it with ``py_files``) (templated).
    :param batch_size: messages per receive transaction.
    :param max_messages: receive at most this many (default: until the queue is empty) (templated).
    :param partitions: competing receivers (one connection each).
    :param run_id: the idempotency key (templated); default ``<dag>.<task>.<dag run>``.
    :param create_tables: let the job create the bridge's tables and a missing sink table (DDL rights);
        by default the provisioning step (``ProvisionSparkBridgeOperator``) creates them.
    :param orphan_timeout: seconds without heartbeat after which another run puts a crashed run's
        staged messages back into the queue.
    :param run_id_column: add the run id as this column to table and queue results.
    :param message_type: ``NServiceBus.EnclosedMessageTypes`` of queue-sink messages.
    :param read_in_place: PostgreSQL: the driver takes the messages with a delete it leaves
        uncommitted from phase 1 to the commit, and the executors read them where they are, instead of
        staging them (docs/spark.md says what that changes). ``None`` (default): on PostgreSQL unless the
        job finds a reason to stage; ``True``: required; ``False``: always stage.
    :param prefix: name prefix of the bridge's tables.
    :param default_schema: schema of unqualified names (default: the connection's).
    :param error_queue: where unreadable rows go (default: the connection's, else ``error``).
    :param application: the job file; defaults to the shipped ``drain_job.py``.
    :return: the job's summary (received, expired, written, seconds, ...), read back from the runs table.
    """

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "input_queue",
        "sink",
        "transform",
        "max_messages",
        "run_id",
    )
    ui_color = "#f4d9c6"

    def __init__(
        self,
        *,
        input_queue: str,
        sink: str,
        sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
        transform: str | None = None,
        batch_size: int = 1000,
        max_messages: int | str | None = None,
        partitions: int = 2,
        run_id: str | None = None,
        create_tables: bool = False,
        orphan_timeout: float = 900.0,
        run_id_column: str | None = None,
        message_type: str | None = None,
        read_in_place: bool | None = None,
        prefix: str = DEFAULT_PREFIX,
        default_schema: str | None = None,
        error_queue: str | None = None,
        application: str = DRAIN_JOB,
        name: str = "sqlqueue-drain",
        **kwargs: Any,
    ) -> None:
        super().__init__(application=application, name=name, **kwargs)
        if isinstance(sink, str) and "{{" not in sink:  # a template or an XComArg is checked in execute
            Sink.parse(sink)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, not {batch_size!r}")
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise ValueError(f"partitions must be a positive int, not {partitions!r}")
        self.input_queue = input_queue
        self.sink = sink
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.transform = transform
        self.batch_size = batch_size
        self.max_messages = max_messages
        self.partitions = partitions
        self.run_id = run_id
        self.create_tables = create_tables
        self.orphan_timeout = orphan_timeout
        self.run_id_column = run_id_column
        self.message_type = message_type
        self.read_in_place = read_in_place
        self.prefix = prefix
        self.default_schema = default_schema
        self.error_queue = error_queue

    # ---- what the job gets ---------------------------------------------------------------------
    def job_run_id(self, context: Any) -> str:
        return str(self.run_id) if self.run_id else task_run_id(context)

    def job_arguments(self, run_id: str, default_schema: str | None, error_queue: str) -> list[str]:
        """The application arguments: names and sizes only, never a credential."""
        args = ["--queue", str(self.input_queue), "--sink", str(self.sink), "--run-id", run_id]
        args += ["--batch-size", str(self.batch_size), "--partitions", str(self.partitions)]
        args += ["--prefix", self.prefix, "--error-queue", error_queue]
        args += ["--orphan-timeout", str(self.orphan_timeout)]
        if self.transform:
            args += ["--transform", str(self.transform)]
        if self.max_messages not in (None, ""):
            args += ["--max-messages", str(int(self.max_messages))]  # type: ignore[arg-type]
        if default_schema:
            args += ["--default-schema", default_schema]
        if self.create_tables:
            args.append("--create-tables")
        if self.run_id_column:
            args += ["--run-id-column", self.run_id_column]
        if self.message_type:
            args += ["--message-type", self.message_type]
        if self.read_in_place is not None:
            args.append("--read-in-place" if self.read_in_place else "--stage")
        return args

    def job_environment(self, hook: SqlQueueHook) -> dict[str, str]:
        """``SQLQUEUE_URL`` (no password) and ``SQLQUEUE_PASSWORD``; both registered with the masker."""
        return queue_environment(hook)

    def _settings(self, hook: SqlQueueHook) -> tuple[str | None, str]:
        extra = hook.connection_extra
        default_schema = self.default_schema or extra.get("default_schema") or None
        error_queue = self.error_queue or extra.get("error_queue") or "error"
        return default_schema, error_queue

    def execute(self, context: Any) -> dict[str, Any]:
        Sink.parse(self.sink if isinstance(self.sink, str) else repr(self.sink))
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        run_id = self.job_run_id(context)
        default_schema, error_queue = self._settings(hook)
        user_env, user_args = self.env_vars, self.application_args
        env = {**(user_env or {}), **self.job_environment(hook)}
        self.env_vars = env
        self.application_args = [*self.job_arguments(run_id, default_schema, error_queue), *(user_args or [])]
        self._hook = self._get_hook()
        if str(self._hook._connection.get("master", "")).startswith("local") and "PYSPARK_PYTHON" not in env:
            env["PYSPARK_PYTHON"] = sys.executable  # local Python workers run this environment's Python
            self._hook = self._get_hook()
        self.log.info("draining %s into %s as run %s", self.input_queue, self.sink, run_id)
        try:
            super().execute(context)
        finally:
            self.env_vars, self.application_args = user_env, user_args
        try:
            summary = self.read_summary(hook, run_id, default_schema)
        finally:
            hook.close()
        self.log.info(
            "run %s: %s received, %s expired, %s written to %s in %s s",
            run_id,
            summary.get("processed"),
            summary.get("expired"),
            summary.get("written"),
            summary.get("sink"),
            summary.get("seconds"),
        )
        return summary

    def read_summary(self, hook: SqlQueueHook, run_id: str, default_schema: str | None) -> dict[str, Any]:
        """The summary the job stored with its run (works for every deploy mode)."""
        transport = hook.get_transport()
        sql = BridgeSql(transport, bridge_tables(transport, str(self.input_queue), self.prefix))
        with transport.connection() as connection:
            cursor = connection.cursor()
            cursor.execute(sql.get_run(), (run_id,))
            rows = transport.dialect.fetch_rows(cursor)
            connection.commit()
        if not rows:
            raise AirflowException(f"the drain job recorded no run {run_id}")
        state, _attempt, _queue, summary = rows[0]
        if state != "committed" or not summary:
            raise AirflowException(f"run {run_id} ended in state {state}: {summary}")
        return json.loads(summary)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the drained queue as input; the sink (a table or queue of the queue database, or
        the files written) and the error queue as outputs. The bridge's own run and staging tables are
        bookkeeping, not data, and are left out."""
        from ._lineage import file_dataset, operator_lineage

        sink = Sink.parse(str(self.sink))
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        try:
            _default_schema, error_queue = self._settings(hook)
        finally:
            hook.close()
        outputs = [error_queue] if sink.is_file else [sink.target, error_queue]
        files = [file_dataset(sink.target)] if sink.is_file else []
        return operator_lineage(
            self.sqlqueue_conn_id, inputs=[str(self.input_queue)], outputs=outputs, extra_outputs=files
        )


class ProvisionSparkBridgeOperator(BaseOperator):
    """Create the Spark bridge's tables beside a queue, and optionally a sink table. Needs DDL rights.

    :param queue_name: a queue of the schema that holds the bridge's tables (the drain's input queue)
        (templated). ``queue`` stays Airflow's executor queue.
    :param sink_table: also create this table if missing ...
    :param sink_columns: ... with these ``(name, logical type, nullable)`` columns; logical types are
        string, long, int, double, boolean, timestamp, date, binary, json, decimal(p,s).
    :param prefix: name prefix of the bridge's tables.
    """

    template_fields: Sequence[str] = ("queue_name", "sink_table")
    ui_color = "#e8f0d3"

    def __init__(
        self,
        *,
        queue_name: str,
        sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
        sink_table: str | None = None,
        sink_columns: Sequence[tuple[str, str, bool]] | None = None,
        prefix: str = DEFAULT_PREFIX,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (sink_table is None) != (sink_columns is None):
            raise ValueError("give sink_table and sink_columns together")
        self.queue_name = queue_name
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.sink_table = sink_table
        self.sink_columns = [tuple(column) for column in sink_columns or ()]
        self.prefix = prefix

    def execute(self, context: Any) -> dict[str, str]:
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        try:
            transport = hook.get_transport()
            tables = create_bridge_tables(transport, self.queue_name, self.prefix)
            created = {"runs": str(tables.runs), "staging": str(tables.staging), "fill": str(tables.fill)}
            if self.sink_table:
                create_sink_table(transport, self.sink_table, self.sink_columns)  # type: ignore[arg-type]
                created["sink"] = str(transport.resolve(self.sink_table))
        finally:
            hook.close()
        self.log.info("Spark bridge tables ready: %s", created)
        return created
