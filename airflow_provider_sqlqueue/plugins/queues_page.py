"""The HTML of the Queues page's views (``templates/``): the queues of a connection (``queues.html``), a
failed-message group (``group.html``) and one failed message (``message.html``), each rendered from the
same data its ``/api`` twin answers (see :data:`.queues_app.VIEWS`). Self-contained documents (no external
script, font or style) in Airflow's look, shown by Airflow's UI in its frame; Jinja2 escapes every value.

Times are written in Airflow's ``[core] default_timezone``, in one format (``YYYY-MM-DD HH:MM:SS``); the
page's script rewrites them into the timezone the user picked in Airflow's UI, when they picked one."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jinja2 import Environment, PackageLoader
from markupsafe import Markup, escape

from ..transport.overview import human_age

__all__ = ["TIME_FORMAT", "render"]

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def airflow_timezone() -> str:
    """Airflow's ``[core] default_timezone`` as an IANA name (``utc`` and ``system`` read as Airflow does)."""
    try:
        from airflow.configuration import conf

        name = conf.get("core", "default_timezone", fallback="utc") or "utc"
    except Exception:
        name = "utc"
    if name.lower() == "utc":
        return "UTC"
    if name.lower() == "system":
        local = datetime.now().astimezone().tzname()
        return local or "UTC"
    return name


def _zone(name: str) -> Any:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return timezone.utc


def _when(iso: str | None, zone_name: str) -> Markup:
    """A moment as ``<time>``: its ISO text for the script, shown in ``zone_name``."""
    if not iso:
        return Markup("—")
    moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    shown = moment.astimezone(_zone(zone_name)).strftime(TIME_FORMAT)
    return Markup('<time datetime="{}">{}</time>').format(escape(iso), escape(shown))


def _number(value: int | None, exact: bool = True) -> str:
    if value is None:
        return "—"
    return ("" if exact else "≈ ") + f"{value:,}"


_environment = Environment(
    loader=PackageLoader("airflow_provider_sqlqueue.plugins", "templates"),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render(template: str, **context: Any) -> str:
    """``template`` with ``context`` (a view's ``data`` or ``error`` and what the page shows beside them)."""
    zone_name = airflow_timezone()
    return _environment.get_template(template).render(
        age=human_age,
        when=lambda iso: _when(iso, zone_name),
        number=_number,
        timezone_name=zone_name,
        **context,
    )
