"""VacuumQueuesOperator: a scheduled plain VACUUM of PostgreSQL queue tables, giving a drained queue's
storage back at a time the DAG chooses."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from ..hooks.sqlqueue import SqlQueueHook
from ._rendered import as_names


class VacuumQueuesOperator(BaseOperator):
    """Run a plain ``VACUUM`` (never ``FULL``) on each queue table, one at a time, beside running receivers.

    PostgreSQL queue tables are created with autovacuum settings that give a drained table's space back
    within a minute or two of the drain (see the DBA guide); this is for tables made without them, tables
    with autovacuum off, or a drain whose space is wanted back at a known time. The vacuum blocks neither
    senders nor receivers; it gives the empty pages back only if it gets a moment's exclusive lock, so a
    table in constant use keeps its space for reuse by later sends. The connection's role must own the
    tables (the provisioning role). On SQLite (freed pages are reused) and SQL Server (ghost cleanup frees
    them) nothing runs, and the task says so.

    :param queues: a queue address or a list of them (templated).
    :return: ``{queue: {"ran", "bytes_before", "bytes_after", "note"}}``; sizes include the indexes.
    """

    template_fields: Sequence[str] = ("queues",)
    ui_color = "#dfe8d3"

    def __init__(
        self,
        *,
        queues: str | Sequence[str],
        sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.queues = queues
        self.sqlqueue_conn_id = sqlqueue_conn_id

    def execute(self, context: Any) -> dict[str, dict[str, Any]]:
        names = as_names("queues", self.queues)
        results: dict[str, dict[str, Any]] = {}
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        try:
            for name in names:
                result = hook.vacuum(name)
                results[name] = {
                    "ran": result.ran,
                    "bytes_before": result.bytes_before,
                    "bytes_after": result.bytes_after,
                    "note": result.note,
                }
                if result.ran:
                    self.log.info(
                        "vacuumed %s: %.1f MiB before, %.1f MiB after (table and indexes)",
                        name,
                        (result.bytes_before or 0) / 2**20,
                        (result.bytes_after or 0) / 2**20,
                    )
                else:
                    self.log.info("nothing to vacuum for %s: %s", name, result.note)
        finally:
            hook.close()
        return results
