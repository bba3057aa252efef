"""This provider's Airflow plugin: the Queues page (docs/operating.md, "The Queues page").

Airflow 3 loads it through the provider's metadata (``plugins`` in ``get_provider_info``). It adds a
FastAPI app, which the API server mounts at ``/sqlqueue``, and a "Queues" entry with its own icon at the
top level of the UI's navigation (Airflow 3.1 and later show plugin entries; 3.0 shows none), which shows
that app's page in the UI's frame at ``/plugin/sqlqueue-queues``. From Airflow 3.1, Airflow's Home also shows
each readable connection's failed messages (``home.js``, a ``react_apps`` entry on the dashboard).
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from ..hooks.queues_page_link import QUEUES_PAGE, URL_PREFIX
from .queues_app import create_app

__all__ = ["SqlQueuePlugin"]


class SqlQueuePlugin(AirflowPlugin):
    name = "sqlqueue"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "SQL Queue: Queues"}]
    external_views = [
        {
            "name": "Queues",
            "href": QUEUES_PAGE,
            "destination": "nav",
            "nav_top_level": True,
            "icon": f"{URL_PREFIX}/icons/queues.svg",
            "icon_dark_mode": f"{URL_PREFIX}/icons/queues-dark.svg",
            "url_route": "sqlqueue-queues",
        }
    ]
    # Airflow 3.0 has no react_apps; 3.1 added them, with the Home page ("dashboard") as a destination.
    if hasattr(AirflowPlugin, "react_apps"):
        react_apps = [
            {"name": "SQL Queue", "bundle_url": f"{URL_PREFIX}/home.js", "destination": "dashboard"}
        ]
