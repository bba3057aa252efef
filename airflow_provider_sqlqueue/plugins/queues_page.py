"""The HTML of the Queues page (``templates/queues.html``) and of its views of a failed-message group
(``group.html``) and of one failed message (``message.html``): self-contained documents (no external
script, font or style), shown by Airflow's UI in its frame. Jinja2 escapes every value; the only scripts
post a retry or a delete (after a confirmation on the page) and reload."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jinja2 import Environment, PackageLoader

from ..transport.overview import QueuesOverview, human_age
from .subscriptions_view import SubscriptionsView

__all__ = ["render_group", "render_message", "render_page"]


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
    exact: bool = False,
    exact_below: int = 0,
    subscriptions: SubscriptionsView | None = None,
    subscriptions_error: str | None = None,
    staged: list[dict[str, Any]] | None = None,
    staged_error: str | None = None,
) -> str:
    """The page; ``exact``: depths were counted where the estimate is below ``exact_below``;
    ``subscriptions``: the subscription table by topic (or ``subscriptions_error``, why it was not read);
    ``staged``: the Spark data source's staged runs (or ``staged_error``)."""
    return _environment.get_template("queues.html").render(
        connections=connections,
        conn_id=conn_id,
        database=description,
        overview=overview,
        error=error,
        may_retry=may_retry,
        exact=exact,
        exact_below=exact_below,
        subscriptions=subscriptions,
        subscriptions_error=subscriptions_error,
        staged=staged or [],
        staged_error=staged_error,
        age=human_age,
        stamp=_stamp,
    )


def render_group(
    *,
    conn_id: str,
    group: str,
    listed: dict[str, Any] | None,
    limit: int,
    max_limit: int,
    error: str | None,
    may_retry: bool,
) -> str:
    """A group's messages as :func:`.queues_app.group_messages` lists them."""
    return _environment.get_template("group.html").render(
        conn_id=conn_id,
        group=group,
        listed=listed,
        limit=limit,
        max_limit=max_limit,
        error=error,
        may_retry=may_retry,
    )


def render_message(
    *,
    conn_id: str,
    message_id: str,
    message: dict[str, Any] | None,
    preview_bytes: int,
    error: str | None,
    may_retry: bool,
) -> str:
    """One message as :func:`.queues_app.failed_message` gives it (its body cut at ``preview_bytes``)."""
    return _environment.get_template("message.html").render(
        conn_id=conn_id,
        message_id=message_id,
        message=message,
        preview_bytes=preview_bytes,
        error=error,
        may_retry=may_retry,
    )
