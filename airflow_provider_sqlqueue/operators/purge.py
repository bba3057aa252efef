"""PurgeExpiredMessagesOperator: scheduled, bounded removal of expired messages."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from ..hooks.sqlqueue import SqlQueueHook
from ._rendered import as_names


class PurgeExpiredMessagesOperator(BaseOperator):
    """Delete expired messages from one or many queues in batches, beside running receivers.

    Each batch is its own short transaction and skips rows that receivers hold (``READPAST`` /
    ``SKIP LOCKED``), so the purge never blocks or deadlocks a receive for long.

    :param queues: a queue address or a list of them (templated).
    :param batch_size: rows per batch (default 10,000, as the reference).
    :param max_batches: stop each queue after this many batches.
    :param max_seconds: stop after this much time in all; queues not reached are logged and left out of
        the result.
    :return: ``{queue: number purged}``.
    """

    template_fields: Sequence[str] = ("queues",)
    ui_color = "#f5e3d3"

    def __init__(
        self,
        *,
        queues: str | Sequence[str],
        sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
        batch_size: int = 10_000,
        max_batches: int | None = None,
        max_seconds: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, not {batch_size!r}")
        if max_batches is not None and (
            isinstance(max_batches, bool) or not isinstance(max_batches, int) or max_batches < 1
        ):
            raise ValueError(f"max_batches must be a positive int or None, not {max_batches!r}")
        if max_seconds is not None and not max_seconds > 0:
            raise ValueError(f"max_seconds must be positive or None, not {max_seconds!r}")
        self.queues = queues
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.batch_size = batch_size
        self.max_batches = max_batches
        self.max_seconds = max_seconds

    def execute(self, context: Any) -> dict[str, int]:
        names = as_names("queues", self.queues)
        started = time.monotonic()
        purged: dict[str, int] = {}
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        try:
            for name in names:
                remaining = None
                if self.max_seconds is not None:
                    remaining = self.max_seconds - (time.monotonic() - started)
                    if remaining <= 0:
                        self.log.warning("time budget spent; skipped %s", name)
                        continue
                purged[name] = hook.purge_expired(name, self.batch_size, self.max_batches, remaining)
                self.log.info("purged %d expired message(s) from %s", purged[name], name)
        finally:
            hook.close()
        return purged

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the queues purged (rows deleted) as output datasets."""
        from ._lineage import operator_lineage

        return operator_lineage(self.sqlqueue_conn_id, outputs=as_names("queues", self.queues))
