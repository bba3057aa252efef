"""The HTML of the Queues page (``templates/queues.html``): one self-contained document (no external
script, font or style), shown by Airflow's UI in its frame. Jinja2 escapes every value; the only script
posts a retry and reloads."""

from __future__ import annotations

from datetime import datetime

from jinja2 import Environment, PackageLoader

from ..transport.overview import QueuesOverview, human_age

__all__ = ["render_page"]


def _stamp(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "—"


_environment = Environment(
    loader=PackageLoader("airflow_provider_sqlqueue.plugins", "templates"),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render_page(
    *,
    connections: list[str],
    conn_id: str | None,
    description: str | None,
    overview: QueuesOverview | None,
    error: str | None,
    may_retry: bool,
) -> str:
    return _environment.get_template("queues.html").render(
        connections=connections,
        conn_id=conn_id,
        database=description,
        overview=overview,
        error=error,
        may_retry=may_retry,
        age=human_age,
        stamp=_stamp,
    )
