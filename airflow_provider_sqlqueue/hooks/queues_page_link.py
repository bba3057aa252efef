"""Where a task's queue is shown in Airflow's UI: the Queues page of its connection, with its queue picked.

A sensor or consumer task names a connection and a queue; :class:`QueuesPageLink` is the "Queues page" button
Airflow's UI shows on such a task's instances (an operator extra link: the worker computes it when the task
ends, from the task as it ran, its templates rendered, and Airflow keeps it as the XCom
:attr:`QueuesPageLink.xcom_key`). The page itself is the plugin's (``plugins/``); its address is here, beneath
both the plugin and the operators, so that both name one address.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from airflow.providers.common.compat.sdk import BaseOperatorLink, conf

__all__ = ["QUEUES_PAGE", "QUEUE_ANCHOR", "URL_PREFIX", "QueuesPageLink", "queues_page_url"]

URL_PREFIX = "/sqlqueue"  # where Airflow's API server mounts the plugin's web app
QUEUES_PAGE = f"{URL_PREFIX}/queues"
QUEUE_ANCHOR = "chosen-queue"  # the id of the picked queue's row on the page


def queues_page_url(conn_id: str, queue_name: str | None = None) -> str:
    """The Queues page of ``conn_id``, ``queue_name`` picked: under ``[api] base_url`` when it is set (a UI
    served under a path), else from the server's root."""
    base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    query = {"conn_id": conn_id} | ({"queue": queue_name} if queue_name else {})
    anchor = f"#{QUEUE_ANCHOR}" if queue_name else ""
    return f"{base}{QUEUES_PAGE}?{urlencode(query)}{anchor}"


class QueuesPageLink(BaseOperatorLink):
    """The "Queues page" button of a task with a ``sqlqueue_conn_id`` and a ``queue_name``."""

    name = "Queues page"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        conn_id = getattr(operator, "sqlqueue_conn_id", None)
        if not conn_id:
            return ""
        queue_name = getattr(operator, "queue_name", None)
        return queues_page_url(str(conn_id), str(queue_name) if queue_name else None)
