"""ProvisionQueuesOperator: create an endpoint's queue tables, or render their DDL for a DBA."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator

from ..hooks.sqlqueue import SqlQueueHook
from ..transport import QueueAddress, TableOptions
from ..transport.archive import ErrorArchive
from ..transport.depth_samples import DepthSampleTable, depth_samples_address
from ._rendered import as_names


def _instance_queue_wanted(instance_specific_queue: bool | None, instance_suffix: str | None) -> bool:
    """Whether to create ``<endpoint>.<suffix>``: only with a suffix given, never from a host name.

    A host name is the worker's (or the DAG processor's) that happens to run the code, a new one for each
    Celery worker or Kubernetes pod, so it would make every run create a table of its own.
    """
    if instance_specific_queue is None:
        return bool(instance_suffix)
    if instance_specific_queue and not instance_suffix:
        raise ValueError(
            "instance_specific_queue=True needs instance_suffix: name the endpoint instance the queue is "
            "for (e.g. instance_suffix='node1'); the host name of whichever worker runs the task is not used"
        )
    if not instance_specific_queue and instance_suffix:
        raise ValueError("instance_suffix is given but instance_specific_queue=False: drop one of them")
    return instance_specific_queue


def endpoint_queues(
    endpoint: str,
    *,
    instance_specific_queue: bool | None = None,
    instance_suffix: str | None = None,
    error_queue: str | None = "error",
    audit_queue: str | None = "audit",
    extra_queues: Sequence[str] = (),
) -> list[str]:
    """The queues of an endpoint: primary, ``<endpoint>.<suffix>`` (with a suffix), error, audit, extras."""
    primary = QueueAddress.parse(endpoint)
    names = [str(primary)]
    if _instance_queue_wanted(instance_specific_queue, instance_suffix):
        names.append(str(primary.with_table(f"{primary.table}.{instance_suffix}")))
    names += [name for name in (error_queue, audit_queue) if name]
    names += list(extra_queues)
    return list(dict.fromkeys(names))


class ProvisionQueuesOperator(BaseOperator):
    """Create an endpoint's queues idempotently and inspect them; or, with ``dry_run``, only render the DDL.

    Needs DDL rights: run it with a provisioning connection, and everything else with a runtime one.
    Inspection findings (a missing index, varchar Headers) are logged as warnings with the statement that
    fixes each; nothing fails because of them.

    :param endpoint: the endpoint's primary queue address, e.g. ``Sales`` or ``Sales@[sales]`` (templated).
    :param instance_specific_queue: also create ``<endpoint>.<suffix>`` for replies to one instance;
        default: exactly when ``instance_suffix`` is given. True without a suffix raises ``ValueError``.
    :param instance_suffix: the suffix (templated). Never the worker's host name: that differs per
        Celery worker or Kubernetes pod, and each run would create another table.
    :param error_queue: shared error queue name, or None. It is created with its archive table
        ``<error>_archive``, where deleted failed messages go (see the operating guide).
    :param audit_queue: shared audit queue name, or None.
    :param extra_queues: further queue names (templated).
    :param layout: ``clustered`` (the seeds' layout) or ``heap`` (SQL Server only).
    :param column_layout: the columns of the new tables: ``sqlserver-transport`` (NServiceBus's SQL Server
        transport's, on every engine) or ``postgresql-transport`` (NServiceBus.Transport.PostgreSql's, for
        .NET endpoints on PostgreSQL; a ConfigurationError on other engines). An existing table keeps its
        own; a ValueError when the DAG is parsed for any other name.
    :param unicode_headers: ``nvarchar(max)`` Headers (SQL Server; False gives the seeds' ``varchar``).
    :param body_string: add the readable ``BodyString`` computed column.
    :param storage_parameters: PostgreSQL: the new tables' ``WITH (...)`` storage parameters instead of the
        package's autovacuum settings (``{}``: none); a ValueError when the DAG is parsed if one is not a
        plain name and value.
    :param add_missing_indexes: also build the indexes missing from queues that already exist. Off by
        default: building an index blocks the receivers using the table (SQL Server builds it offline),
        so the missing ones are reported as findings instead; turn it on for a quiet window.
    :param subscribe_to: topics of native publish/subscribe to subscribe the endpoint's primary queue to,
        under the endpoint's name, as an NServiceBus endpoint subscribes at start; the shared subscription
        table is created first if missing (templated). A dry run adds the table's DDL to the script and
        subscribes nothing.
    :param depth_history: also create the depth history table (``sqlqueue_depth_samples``) in the endpoint's
        primary queue's schema, where the triggers and pumps sample queue depths for the Queues page (listed
        among the created or existing names; a dry run adds its DDL to the script).
    :param dry_run: create nothing; return the DDL script (real queue names in it).
    :param script_path: with ``dry_run``, also write the script to this file (templated).
    :return: ``{"created": [...], "existing": [...], "findings": {...}}`` (the archive table and, with
        ``subscribe_to``, the subscription table among the created or existing names; then
        ``"subscribed"``, the topics), or the script for a dry run.
    """

    template_fields: Sequence[str] = (
        "endpoint",
        "instance_suffix",
        "extra_queues",
        "script_path",
        "subscribe_to",
    )
    ui_color = "#e8f0d3"

    def __init__(
        self,
        *,
        endpoint: str,
        sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
        instance_specific_queue: bool | None = None,
        instance_suffix: str | None = None,
        error_queue: str | None = "error",
        audit_queue: str | None = "audit",
        extra_queues: Sequence[str] = (),
        layout: str = "clustered",
        column_layout: str = "sqlserver-transport",
        unicode_headers: bool = True,
        body_string: bool = False,
        storage_parameters: Mapping[str, Any] | None = None,
        add_missing_indexes: bool = False,
        dry_run: bool = False,
        script_path: str | None = None,
        subscribe_to: Sequence[str] = (),
        depth_history: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.options = TableOptions(
            layout=layout,  # type: ignore[arg-type]
            column_layout=column_layout,  # type: ignore[arg-type]
            unicode_headers=unicode_headers,
            body_string=body_string,
            storage_parameters=storage_parameters,
        )
        self.endpoint = endpoint
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.instance_specific_queue = instance_specific_queue
        self.instance_suffix = instance_suffix
        if instance_specific_queue and instance_suffix is None:
            _instance_queue_wanted(instance_specific_queue, instance_suffix)  # raises: say so when parsed
        self.error_queue = error_queue
        self.audit_queue = audit_queue
        self.extra_queues = extra_queues
        self.add_missing_indexes = add_missing_indexes
        self.dry_run = dry_run
        self.script_path = script_path
        self.subscribe_to = subscribe_to
        self.depth_history = depth_history

    def queue_names(self) -> list[str]:
        return endpoint_queues(
            self.endpoint,
            instance_specific_queue=self.instance_specific_queue,
            instance_suffix=self.instance_suffix,
            error_queue=self.error_queue,
            audit_queue=self.audit_queue,
            extra_queues=as_names("extra_queues", self.extra_queues),
        )

    def _subscribe(self, hook: SqlQueueHook, topics: list[str], result: dict[str, Any]) -> None:
        """Create the subscription table if missing and subscribe the endpoint to ``topics`` (a dry run:
        the table's DDL only)."""
        store = hook.get_transport().subscriptions
        if self.dry_run:
            result["script"] += "\n" + store.create_script()
            return
        result["created" if store.create() else "existing"].append(str(store.address))
        for topic in topics:
            hook.subscribe(str(self.endpoint), topic)
        result["subscribed"] = topics
        self.log.info("subscribed %s to %s", self.endpoint, ", ".join(topics))

    def _depth_history(self, hook: SqlQueueHook, primary: str, result: dict[str, Any]) -> None:
        """Create the depth history table of the primary queue's schema if missing (a dry run: its DDL)."""
        transport = hook.get_transport()
        address = depth_samples_address(transport, hook.get_queue(primary).address)
        table = DepthSampleTable(transport, address)
        if self.dry_run:
            result["script"] += "\n" + table.create_script()
        else:
            result["created" if table.create() else "existing"].append(str(address))

    def execute(self, context: Any) -> Any:
        names = self.queue_names()
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        try:
            result = hook.provision(
                names, self.options, dry_run=self.dry_run, add_missing_indexes=self.add_missing_indexes
            )
            if self.error_queue:
                archive = ErrorArchive.of(hook.get_queue(self.error_queue))
                if self.dry_run:
                    result["script"] += "\n" + archive.create_script()
                else:
                    result["created" if archive.create() else "existing"].append(str(archive.address))
            topics = as_names("subscribe_to", self.subscribe_to)
            if topics:
                self._subscribe(hook, topics, result)
            if self.depth_history:
                self._depth_history(hook, names[0], result)
        finally:
            hook.close()
        if self.dry_run:
            script = result["script"]
            if self.script_path:
                Path(self.script_path).write_text(script, encoding="utf-8")
                self.log.info("wrote the DDL of %d queue(s) to %s", len(names), self.script_path)
            self.log.info("DDL for %s (nothing was created):\n%s", ", ".join(names), script)
            return script
        self.log.info(
            "created %s; already there: %s", result["created"] or "none", result["existing"] or "none"
        )
        for queue, findings in result["findings"].items():
            for finding in findings:
                self.log.warning("%s: %s Fix: %s", queue, finding["message"], finding["fix"])
        return result
