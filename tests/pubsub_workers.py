"""Child-process bodies of the publish/subscribe tests (spawned, so they live in an importable module)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow_provider_sqlqueue.transport import open_transport


def churn_subscriptions(
    url: str, schema: str | None, endpoint: str, topic: str, queue: str, stop: str, started: Any
) -> None:
    """Subscribe and unsubscribe ``endpoint`` to ``topic`` in turn until the file ``stop`` exists."""
    with open_transport(url, default_schema=schema) as transport:
        store = transport.subscriptions
        store.subscribe(endpoint, topic, queue)
        started.set()
        while not Path(stop).exists():
            store.unsubscribe(endpoint, topic)
            store.subscribe(endpoint, topic, queue)
        store.unsubscribe(endpoint, topic)
