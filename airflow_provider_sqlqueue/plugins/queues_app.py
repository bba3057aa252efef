"""The Queues page's web app, mounted by Airflow's API server at ``/sqlqueue`` (see :mod:`.`).

Every request is Airflow's: the user comes from Airflow's session (the ``_token`` cookie the UI holds, or a
bearer token), and :mod:`.access` asks the auth manager what they may do: open the page (the custom view
``SQL Queues``), see a connection (the right to read it, as ``GET /api/v2/connections/{id}``, and only a
connection of type ``sqlqueue``; an unknown, forbidden or other-typed id all get one 404), and retry or
delete failed messages, or restore archived ones, through it (the right to edit it; each written to
Airflow's audit log). :mod:`.failed_views` reads a group's messages, one message and a page of the error
queue's archive for the detail views.

A retry, delete or restore is a ``POST`` of JSON (``Content-Type: application/json``), which an HTML form
on another site can not send without a CORS preflight this app never grants, and the request's ``Origin``,
when the browser sends one, must be this server. No connection field is ever rendered: pages show the
connection id and the password-free description of its database.

Airflow is imported inside the functions that use it: every Airflow process that loads plugins imports
this module, and only the API server needs Airflow's web layer.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple
from urllib.parse import urlencode, urlsplit

from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, Field

from ..get_provider_info import setting_default
from ..hooks.queues_page_link import QUEUE_ANCHOR
from ..hooks.sqlqueue import SqlQueueHook, secret_forms
from ..model.errors import ConfigurationError
from ..transport.archive import ErrorArchive, archive_address
from ..transport.failed import (
    FailureFilter,
    FailureOutcome,
    delete_failed,
    retry_failed,
)
from ..transport.overview import FAILED_LIMIT, QueuesOverview, queue_depth, queues_overview
from .access import (
    DELETE_EVENT,
    NOT_SERVED,
    QUEUES_VIEW,
    RESTORE_EVENT,
    RETRY_EVENT,
    audit,
    auth_manager,
    may_edit,
    may_view,
    queue_connection_ids,
    require_read,
    require_view,
)
from .depth_history import DepthHistory, sparkline, stored_series
from .failed_views import (
    ARCHIVE_LIST_LIMIT,
    BODY_PREVIEW_BYTES,
    GROUP_LIST_LIMIT,
    MAX_ARCHIVE_LIST,
    MAX_GROUP_LIST,
    archive_page,
    failed_message,
    group_messages,
)
from .queues_page import render
from .subscriptions_view import SubscriptionsView, subscriptions_view
from .thresholds import ALERT, Thresholds, configured_thresholds

if TYPE_CHECKING:
    from ..transport.queue import TableQueue

__all__ = ["NAVIGATION_ICONS", "NOT_SERVED", "QUEUES_VIEW", "VIEWS", "create_app"]

log = logging.getLogger(__name__)

GROUP_PATTERN = r"^[0-9a-f]{12}$"
MESSAGE_ID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


# The icons of the navigation entry (plugins/__init__.py), in Airflow's light and dark modes.
NAVIGATION_ICONS = ("queues", "queues-dark")

# What the page's reads saw of each queue's depth, for its sparklines and charts (see .depth_history).
DEPTH_HISTORY = DepthHistory()

# A retry or delete request reads at most this many error-queue rows (headers only) and takes the group's
# among them, so no request holds the API server for long however large the group; the page's script
# repeats it.
RETRY_ROWS_PER_REQUEST = 2000
# How many of the newest error-queue rows a page load groups (the page says "more…" beyond them).
FAILED_GROUPS_LIMIT = FAILED_LIMIT


def _step(outcome: FailureOutcome, after: int) -> dict[str, Any]:
    """Where a retry or delete step stopped: ``more`` to do, the ``after``/``up_to`` of the next step, and
    ``left``, at most how many error-queue rows remain to look through (RowVersions up to ``up_to``)."""
    reached = outcome.read_to if outcome.read_to is not None else after
    left = max(outcome.up_to - reached, 0) if outcome.more and outcome.up_to is not None else 0
    return {"more": outcome.more, "after": reached, "up_to": outcome.up_to, "left": left}


def refresh_seconds() -> int:
    """How often the open page reads itself again: ``[sqlqueue] page_refresh_seconds``
    (``AIRFLOW__SQLQUEUE__PAGE_REFRESH_SECONDS``), the declared default otherwise, at least 2."""
    from airflow.configuration import conf

    fallback = int(setting_default("page_refresh_seconds"))
    return max(conf.getint("sqlqueue", "page_refresh_seconds", fallback=fallback), 2)


def history_retention_hours() -> int:
    """``[sqlqueue] depth_history_retention_hours``, as the triggers and pumps keep their samples (the page
    says it; it deletes nothing)."""
    from airflow.configuration import conf

    fallback = int(setting_default("depth_history_retention_hours"))
    return conf.getint("sqlqueue", "depth_history_retention_hours", fallback=fallback)


def exact_below() -> int:
    """Below which estimated depth the page counts exactly when asked: ``[sqlqueue] exact_count_below``
    (``AIRFLOW__SQLQUEUE__EXACT_COUNT_BELOW``), the declared default otherwise."""
    from airflow.configuration import conf

    return conf.getint("sqlqueue", "exact_count_below", fallback=int(setting_default("exact_count_below")))


@functools.cache
def _get_user_reads_the_request(get_user: Callable[..., Any]) -> bool:
    """Whether this Airflow's ``get_user`` reads the request itself (3.1 and later), asked once."""
    return "request" in inspect.signature(get_user).parameters


async def _user(request: Request) -> Any:
    """Airflow's user of this request, as ``GetUserDep`` resolves it: a bearer token first, else the session
    cookie the login set. From Airflow 3.1 ``get_user`` reads both itself (keyword parameters ``request``
    and ``bearer_credentials``); Airflow 3.0's takes only the token, which its own UI reads from that cookie
    and sends as a bearer token, so here the cookie is read the same way, with 3.0's own errors (401 when
    there is none or it expired, 403 when it is not valid)."""
    from airflow.api_fastapi.core_api.security import get_user

    bearer = None
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        from fastapi.security import HTTPAuthorizationCredentials

        bearer = HTTPAuthorizationCredentials(scheme="bearer", credentials=header[7:].strip())
    if _get_user_reads_the_request(get_user):
        return await get_user(request=request, bearer_credentials=bearer)
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

    token = bearer.credentials if bearer is not None else request.cookies.get(COOKIE_NAME_JWT_TOKEN)
    if not token:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "Not authenticated")
    return await get_user(token)


async def _session(request: Request) -> Any:
    """The logged-in user, or None where the page sends the browser to Airflow's login instead."""
    try:
        return await _user(request)
    except HTTPException as error:
        if error.status_code == status.HTTP_401_UNAUTHORIZED:
            return None
        raise


def _login_url(request: Request) -> str:
    try:
        return str(auth_manager().get_url_login(next_url=str(request.url)))
    except Exception:
        return "/"


UserDep = Annotated[Any, Depends(_user)]
SessionDep = Annotated[Any, Depends(_session)]


def _scrubbed(error: BaseException, hook: SqlQueueHook | None) -> str:
    """An error's text for a page, with the connection's password in any form it can take replaced."""
    text = f"{type(error).__name__}: {error}"
    try:
        password = hook.connection.password if hook is not None else None
    except Exception:
        password = None
    for form in sorted(secret_forms(password), key=len, reverse=True) if password else ():
        text = text.replace(form, "***")
    return text


class _Opened:
    """A connection's hook and transport for one request, closed after it."""

    def __init__(self, conn_id: str) -> None:
        self.hook: SqlQueueHook | None = None
        self.conn_id = conn_id

    def __enter__(self) -> SqlQueueHook:
        self.hook = SqlQueueHook(sqlqueue_conn_id=self.conn_id)
        return self.hook

    def __exit__(self, *exc: object) -> None:
        if self.hook is not None:
            self.hook.close()


class _Read(NamedTuple):
    """What a page load read of a connection: the overview, the database's description and the error
    text (overview None); the subscriptions by topic, or why they could not be read."""

    overview: QueuesOverview | None
    description: str | None
    error: str | None
    subscriptions: SubscriptionsView | None = None
    subscriptions_error: str | None = None
    staged: list[dict[str, Any]] | None = None
    staged_error: str | None = None
    internal: dict[str, str] | None = None
    error_archive: str | None = None
    picked: str | None = None
    stored_history: dict[str, list[dict[str, Any]]] | None = None


def _picked(transport: Any, queue_name: str | None) -> str | None:
    """The table name the page lists for ``queue_name`` (an address as a task names it), or None when it
    names none."""
    if not queue_name:
        return None
    try:
        return str(transport.queue(queue_name, error_queue=None).address)
    except Exception:
        return None


def _overview(conn_id: str, exact: bool = False, queue_name: str | None = None) -> _Read:
    """What the page shows of a connection; never raises. Depths are estimates; with ``exact``, counted
    where the estimate is below :func:`exact_below`. A failed read of the subscription table (a monitoring
    role without SELECT on it) or of the Spark bridge's tables costs only that section."""
    opened = _Opened(conn_id)
    try:
        with opened as hook:
            transport = hook.get_transport()
            overview = queues_overview(
                transport,
                transport.error_queue or "error",
                exact_below=exact_below() if exact else 0,
                failed_limit=FAILED_GROUPS_LIMIT,
                error_exact_below=exact_below(),
            )
            try:
                subscriptions, subscriptions_error = subscriptions_view(hook), None
            except Exception as error:
                log.warning("Queues page: subscriptions of %s: %s", conn_id, type(error).__name__)
                subscriptions, subscriptions_error = None, _scrubbed(error, hook)
            names = [state.name for state in overview.queues]
            staged, staged_error = _staged(hook, conn_id, names)
            archive = str(archive_address(transport.dialect, transport.resolve(overview.error_queue)))
            internal = {
                archive: "archive of the error queue",
                str(transport.subscriptions.address): "subscriptions",
            }
            internal |= hook.bridge_table_names(names)
            watched = {
                name: transport.queue(name, error_queue=None).address
                for name in names
                if name not in internal
            }
            stored = stored_series(transport, watched, overview.checked_at, overview.error_queue)
            return _Read(
                overview,
                transport.description,
                None,
                subscriptions,
                subscriptions_error,
                staged,
                staged_error,
                internal,
                archive,
                _picked(transport, queue_name),
                stored,
            )
    except Exception as error:
        log.warning("Queues page: connection %s: %s", conn_id, type(error).__name__)
        return _Read(None, None, _scrubbed(error, opened.hook))


def _staged(hook: SqlQueueHook, conn_id: str, queues: list[str]) -> tuple[list[dict[str, Any]], str | None]:
    """The Spark data source's staged runs beside ``queues`` (none where the bridge's tables are missing),
    or why they could not be read: that costs only their section."""
    try:
        return hook.staged_runs_beside(queues), None
    except Exception as error:
        log.warning("Queues page: staged runs of %s: %s", conn_id, type(error).__name__)
        return [], _scrubbed(error, hook)


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if not origin or origin == "null":
        return origin is None
    ours = urlsplit(str(request.base_url))
    theirs = urlsplit(origin)
    return (theirs.scheme, theirs.netloc) == (ours.scheme, ours.netloc)


def _require_change(request: Request, user: Any, conn_id: str, doing: str) -> None:
    """What a request that changes the error queue needs: JSON from this origin (no form on another site
    can send it without a preflight this app never grants), a connection ``user`` may read, and the right
    to edit it."""
    if not request.headers.get("content-type", "").startswith("application/json"):
        raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, "send JSON")
    if not _same_origin(request):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "cross-origin request refused")
    require_read(user, conn_id)
    if not may_edit(user, conn_id):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, f"{doing} failed messages needs the right to edit connection {conn_id}"
        )


DEEPEST = 3  # queues the summary names


def _depth_level(kind: str, messages: int | None, thresholds: Thresholds) -> str | None:
    """A queue's depth against the thresholds; any message in the error queue is an alert (a failure);
    the provider's own tables are not queues and have none."""
    if kind == "error queue":
        return ALERT if messages else None
    return thresholds.depth_level(messages) if kind == "queue" else None


def _overview_json(
    overview: QueuesOverview,
    internal: dict[str, str] | None = None,
    error_archive: str | None = None,
    thresholds: Thresholds | None = None,
) -> dict[str, Any]:
    """The overview as the page and /api/queues show it: each table with its ``kind`` (a queue, the error
    queue, or one of the provider's own tables, which are not queues), and a ``summary``: failed messages
    (exact when every error-queue row was read, as the groups were), the oldest waiting message and the
    deepest queues. A queue's ``depth_level`` and ``age_level`` say where it stands against ``thresholds``
    (``warning``, ``alert`` or None); the error queue's depth is an alert whenever it holds a message."""
    thresholds = thresholds or Thresholds()

    def stamp(moment: Any) -> str | None:
        return moment.isoformat().replace("+00:00", "Z") if moment else None

    internal = internal or {}
    failed_exact = overview.failed is not None and not overview.failed_more
    tables = []
    for state in overview.queues:
        kind = "error queue" if state.name == overview.error_queue else internal.get(state.name, "queue")
        messages, exact = state.messages, state.exact
        if kind == "error queue" and failed_exact:
            messages, exact = overview.failed_read, True
        tables.append(
            {
                "queue": state.name,
                "kind": kind,
                "messages": messages,
                "messages_exact": exact,
                "oldest_time_sent": stamp(state.oldest_time_sent),
                "oldest_age_seconds": state.oldest_age_seconds,
                "depth_level": _depth_level(kind, messages, thresholds),
                "age_level": thresholds.age_level(state.oldest_age_seconds) if kind == "queue" else None,
            }
        )
    queues = [row for row in tables if row["kind"] == "queue"]
    error_row = next((row for row in tables if row["kind"] == "error queue"), None)
    waiting = [row for row in queues if row["oldest_age_seconds"] is not None]
    oldest = max(waiting, key=lambda row: row["oldest_age_seconds"], default=None)
    deepest = sorted((row for row in queues if row["messages"]), key=lambda row: -row["messages"])[:DEEPEST]
    return {
        "checked_at": stamp(overview.checked_at),
        "summary": {
            "failed": None if error_row is None else error_row["messages"],
            "failed_exact": bool(error_row and error_row["messages_exact"]),
            "queues": len(queues),
            "messages": sum(row["messages"] for row in queues),
            "messages_exact": all(row["messages_exact"] for row in queues),
            "oldest_queue": oldest["queue"] if oldest else None,
            "oldest_age_seconds": oldest["oldest_age_seconds"] if oldest else None,
            "oldest_level": oldest["age_level"] if oldest else None,
            "deepest": [
                {
                    "queue": row["queue"],
                    "messages": row["messages"],
                    "messages_exact": row["messages_exact"],
                    "level": row["depth_level"],
                }
                for row in deepest
            ],
        },
        "thresholds": thresholds.as_json(),
        "queues": tables,
        "error_queue": overview.error_queue,
        "error_archive": error_archive,
        "failed_read": overview.failed_read,
        "failed_limit": overview.failed_limit,
        "failed_more": overview.failed_more,
        "failed_groups": None
        if overview.failed is None
        else [
            {
                "group": group.key,
                "failed_queue": group.failed_queue,
                "exception_type": group.exception_type,
                "exception_message": group.exception_message,
                "count": group.count,
                "first_failure": stamp(group.first_failure),
                "last_failure": stamp(group.last_failure),
            }
            for group in overview.failed
        ],
    }


def _on_error_queue(conn_id: str, action: Callable[[TableQueue], Any]) -> Any:
    """``action`` on the connection's error queue; its errors as HTTP errors with the password scrubbed."""
    opened = _Opened(conn_id)
    try:
        with opened as hook:
            transport = hook.get_transport()
            return action(transport.queue(transport.error_queue or "error", error_queue=None))
    except ConfigurationError as error:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, _scrubbed(error, opened.hook)) from None
    except Exception as error:
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, _scrubbed(error, opened.hook)) from None


# ---- one path per view: a page and its /api twin read the same data, with the same errors ---------------
class View(NamedTuple):
    """A view of the page: ``read(user, query)`` gives its data (a JSON-ready dict) or raises an
    HTTPException whose detail is a sentence; ``/api<path>`` answers that data or error as JSON, ``<path>``
    renders ``template`` with it (the error shown in the page, under the same status)."""

    path: str
    template: str
    query: Callable[..., Any]
    read: Callable[[Any, Any], dict[str, Any]]


# The queues table's sortable columns: the field of a table's row each sorts by and its first order.
SORT_KEYS = {
    "queue": ("queue", "asc"),
    "messages": ("messages", "desc"),
    "oldest": ("oldest_age_seconds", "desc"),
}
SORT_PATTERN = "^(" + "|".join(SORT_KEYS) + ")$"
ORDER_PATTERN = "^(asc|desc)$"


class QueuesQuery:
    def __init__(
        self,
        conn_id: Annotated[str | None, Query(max_length=250)] = None,
        exact: bool = False,
        queue: Annotated[str | None, Query(max_length=500)] = None,
        sort: Annotated[str | None, Query(pattern=SORT_PATTERN)] = None,
        order: Annotated[str | None, Query(pattern=ORDER_PATTERN)] = None,
    ) -> None:
        self.conn_id = conn_id or None
        self.exact = exact
        self.queue = queue or None
        self.sort = sort or None
        self.order = order or SORT_KEYS.get(sort or "", ("", "asc"))[1]


def _sorted_tables(tables: list[dict[str, Any]], sort: str | None, order: str) -> list[dict[str, Any]]:
    """The page's tables by column ``sort`` (:data:`SORT_KEYS`) in ``order``; tables without a value for
    it (no message waiting: no age) last either way. Unsorted (None): as the overview lists them."""
    if sort is None:
        return tables
    field = SORT_KEYS[sort][0]
    valued = [row for row in tables if row[field] is not None]
    return sorted(valued, key=lambda row: row[field], reverse=order == "desc") + [
        row for row in tables if row[field] is None
    ]


def sort_link(query: QueuesQuery, conn_id: str | None, column: str) -> dict[str, str]:
    """The queues table's header link of ``column``: its ``href`` (the same page sorted by it, in its
    default order, or reversed when already sorted by it) and its ``aria_sort``."""
    current = query.sort == column
    reversed_order = "asc" if query.order == "desc" else "desc"
    order = reversed_order if current else SORT_KEYS[column][1]
    asked = {"conn_id": conn_id or "", "queue": query.queue or "", "sort": column, "order": order}
    href = "?" + urlencode({key: value for key, value in asked.items() if value})
    aria = ("ascending" if query.order == "asc" else "descending") if current else "none"
    return {"href": href, "aria_sort": aria}


class GroupQuery:
    def __init__(
        self,
        conn_id: Annotated[str, Query(min_length=1, max_length=250)],
        group: Annotated[str, Query(pattern=GROUP_PATTERN)],
        limit: Annotated[int, Query(ge=1, le=MAX_GROUP_LIST)] = GROUP_LIST_LIMIT,
        page: Annotated[int, Query(ge=1, le=10_000)] = 1,
    ) -> None:
        self.conn_id, self.group, self.limit, self.page = conn_id, group, limit, page


class MessageQuery:
    def __init__(
        self,
        conn_id: Annotated[str, Query(min_length=1, max_length=250)],
        id: Annotated[str, Query(pattern=MESSAGE_ID_PATTERN)],
    ) -> None:
        self.conn_id, self.id = conn_id, id


class ArchiveQuery:
    def __init__(
        self,
        conn_id: Annotated[str, Query(min_length=1, max_length=250)],
        limit: Annotated[int, Query(ge=1, le=MAX_ARCHIVE_LIST)] = ARCHIVE_LIST_LIMIT,
        page: Annotated[int, Query(ge=1, le=10_000)] = 1,
    ) -> None:
        self.conn_id, self.limit, self.page = conn_id, limit, page


def _read_queues(user: Any, query: QueuesQuery) -> dict[str, Any]:
    require_view(user)
    chosen = query.conn_id
    if chosen is None:
        known = queue_connection_ids(user)
        if not known:
            return {"conn_id": None, "queues": None}
        chosen = known[0]
    require_read(user, chosen)
    read = _overview(chosen, query.exact, query.queue)
    if read.overview is None:
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, f"Cannot read the queues of {chosen}: {read.error}")
    shown = _overview_json(read.overview, read.internal, read.error_archive, configured_thresholds())
    shown["queues"] = _sorted_tables(shown["queues"], query.sort, query.order)
    watched = [row for row in shown["queues"] if row["kind"] in ("queue", "error queue")]
    DEPTH_HISTORY.record(
        chosen,
        read.overview.checked_at,
        {row["queue"]: (row["messages"], row["messages_exact"]) for row in watched},
    )
    history = DEPTH_HISTORY.series(chosen) if read.stored_history is None else read.stored_history
    return {
        "conn_id": chosen,
        "database": read.description,
        "picked_queue": read.picked,
        **shown,
        "history": {row["queue"]: history.get(row["queue"], []) for row in watched},
        # where the history comes from: the depth history table, or this page's own reads (depth_history.py)
        "history_source": "memory" if read.stored_history is None else "table",
        "history_retention_hours": history_retention_hours(),
        "refresh_seconds": refresh_seconds(),
        "subscriptions": None if read.subscriptions is None else read.subscriptions.as_json(),
        "subscriptions_error": read.subscriptions_error,
        "staged_runs": read.staged,
        "staged_runs_error": read.staged_error,
    }


HOME_CONNECTIONS = 10  # Home counts the failed messages of this many connections; the rest are a number


def _failed_of(conn_id: str) -> dict[str, Any]:
    """One connection's failed messages as Home shows them: its error queue's depth, exact below
    :func:`exact_below` as the page's summary counts it; never raises."""
    opened = _Opened(conn_id)
    answer: dict[str, Any] = {"conn_id": conn_id, "error_queue": None, "failed": None, "failed_exact": False}
    try:
        with opened as hook:
            transport = hook.get_transport()
            errors = transport.queue(transport.error_queue or "error", error_queue=None)
            answer["error_queue"] = str(errors.address)
            if errors.exists():
                answer["failed"], answer["failed_exact"] = queue_depth(errors, exact_below())
            return answer | {"error": None}
    except Exception as error:
        log.warning("Queues page: Home's count of %s: %s", conn_id, type(error).__name__)
        return answer | {"error": _scrubbed(error, opened.hook)}


def _read_home(user: Any) -> dict[str, Any]:
    """The failed messages of each connection ``user`` may read, for Airflow's Home (``home.js``)."""
    require_view(user)
    known = queue_connection_ids(user)
    shown = [_failed_of(conn_id) for conn_id in known[:HOME_CONNECTIONS]]
    return {
        "connections": shown,
        "failed": sum(row["failed"] or 0 for row in shown),
        "failed_exact": all(row["failed_exact"] or row["failed"] is None for row in shown),
        "not_shown": len(known) - len(shown),
    }


def _read_group(user: Any, query: GroupQuery) -> dict[str, Any]:
    require_read(user, query.conn_id)
    listed = _on_error_queue(
        query.conn_id, lambda queue: group_messages(queue, query.group, query.limit, query.page)
    )
    return {"conn_id": query.conn_id, **listed}


def _read_message(user: Any, query: MessageQuery) -> dict[str, Any]:
    require_read(user, query.conn_id)
    message = _on_error_queue(query.conn_id, lambda queue: failed_message(queue, query.id))
    if message is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"No failed message {query.id} in the error queue: it was retried or deleted, or the address"
            " is wrong.",
        )
    return {"conn_id": query.conn_id, **message}


def _read_archive(user: Any, query: ArchiveQuery) -> dict[str, Any]:
    require_read(user, query.conn_id)
    listed = _on_error_queue(query.conn_id, lambda queue: archive_page(queue, query.limit, query.page))
    return {"conn_id": query.conn_id, **listed}


VIEWS = (
    View("/queues", "queues.html", QueuesQuery, _read_queues),
    View("/failed", "group.html", GroupQuery, _read_group),
    View("/message", "message.html", MessageQuery, _read_message),
    View("/archive", "archive.html", ArchiveQuery, _read_archive),
)


def _page_context(user: Any, view: View, query: Any, data: dict[str, Any] | None) -> dict[str, Any]:
    """What a page shows beside its data: the connections to pick from and whether the user may act."""
    conn_id = (data or {}).get("conn_id") or getattr(query, "conn_id", None)
    context: dict[str, Any] = {
        "conn_id": conn_id,
        "may_retry": data is not None and conn_id is not None and may_edit(user, conn_id),
        "query": query,
    }
    if view.path == "/queues":
        context["connections"] = queue_connection_ids(user) if may_view(user) else []
        context["sparkline"] = sparkline
        context["exact_below"] = exact_below()
        context["max_group_list"] = MAX_GROUP_LIST
        context["queue_anchor"] = QUEUE_ANCHOR
        context["sort_link"] = lambda column: sort_link(query, conn_id, column)
    if view.path == "/failed":
        context["max_group_list"] = MAX_GROUP_LIST
    if view.path == "/archive":
        context["max_archive_list"] = MAX_ARCHIVE_LIST
    if view.path == "/message":
        context["preview_bytes"] = BODY_PREVIEW_BYTES
    return context


def _query_dependency(query: type) -> Any:
    """``query``'s class as a FastAPI dependency whose parameters carry their types rather than the strings
    this module's postponed annotations make of them: FastAPI 0.116 (Airflow 3.0.6's) resolves a class's
    string annotations without the module's names and fails on the first request."""
    query.__signature__ = inspect.signature(query, eval_str=True)  # type: ignore[attr-defined]
    return Depends(query)


def _serve(app: FastAPI, view: View) -> None:
    asked = _query_dependency(view.query)

    def as_json(user: UserDep, query: Any = asked) -> Any:
        return view.read(user, query)

    def as_html(request: Request, user: SessionDep, query: Any = asked) -> Any:
        if user is None:
            return _log_in_again(request)
        data, error, code = None, None, status.HTTP_200_OK
        try:
            data = view.read(user, query)
        except HTTPException as failure:
            error, code = _sentence(failure.detail), failure.status_code
        html = render(view.template, data=data, error=error, **_page_context(user, view, query, data))
        return HTMLResponse(html, status_code=code, headers={"Cache-Control": "no-store"})

    app.get(f"/api{view.path}")(as_json)
    app.get(view.path, response_class=HTMLResponse)(as_html)


def _sentence(detail: Any) -> str:
    return str(detail) if detail else "Something went wrong."


def _log_in_again(request: Request) -> HTMLResponse:
    """An expired session: Airflow's login in the whole window, not in the UI's frame."""
    return HTMLResponse(
        render("login.html", login_url=_login_url(request)),
        status_code=status.HTTP_401_UNAUTHORIZED,
        headers={"Cache-Control": "no-store"},
    )


_FIELD_SENTENCES = {
    "group": "a group is named by the 12 hexadecimal digits the Queues page links to",
    "id": "a message is named by its Id, a UUID such as 0b5c… with its 36 characters",
    "conn_id": "the connection id is missing or longer than 250 characters",
    "limit": f"limit must be between 1 and {MAX_GROUP_LIST}",
    "page": "page must be a whole number from 1",
    "sort": "sort is one of " + ", ".join(SORT_KEYS),
    "order": "order is asc or desc",
}


def _invalid(request: Request, error: RequestValidationError) -> Any:
    """A malformed address or request, as a sentence: JSON for /api, a page otherwise."""
    fields = []
    for problem in error.errors():
        name = str(problem.get("loc", ["", "?"])[-1])
        fields.append(_FIELD_SENTENCES.get(name, f"{name}: {problem.get('msg', 'invalid')}"))
    sentence = "The request is incomplete or wrong: " + "; ".join(dict.fromkeys(fields)) + "."
    if "/api/" in request.url.path:
        return JSONResponse({"detail": sentence}, status_code=422)
    html = render(
        "queues.html", data=None, error=sentence, conn_id=None, may_retry=False, connections=[], query=None
    )
    return HTMLResponse(html, status_code=422, headers={"Cache-Control": "no-store"})


# ---- actions: retry and delete of a group, one message or a selection; restore of archived messages -------
class ActionRequest(BaseModel):
    """A group (``group``), one message (``id``) or a selection (``ids``) of a connection's error queue;
    exactly one. A group is done in steps: the first request names no ``after``/``up_to``; each answer
    says whether ``more`` remains and the ``after``/``up_to`` to send for the next step."""

    conn_id: str = Field(min_length=1, max_length=250)
    group: str | None = Field(default=None, pattern=GROUP_PATTERN)
    id: str | None = Field(default=None, pattern=MESSAGE_ID_PATTERN)
    ids: list[Annotated[str, Field(pattern=MESSAGE_ID_PATTERN)]] | None = Field(
        default=None, min_length=1, max_length=MAX_GROUP_LIST
    )
    after: int = Field(default=0, ge=0)
    up_to: int | None = Field(default=None, ge=0)

    def selection(self) -> tuple[FailureFilter, dict[str, Any]]:
        named = [value for value in (self.group, self.id, self.ids) if value is not None]
        if len(named) != 1:
            raise HTTPException(
                422, "Name a group, a message id or a list of message ids (ids), one of them."
            )
        if self.group is not None:
            return FailureFilter(group=self.group), {"group": self.group}
        if self.id is not None:
            return FailureFilter(ids=[self.id]), {"id": self.id}
        return FailureFilter(ids=list(self.ids or [])), {"ids": list(self.ids or [])}


class _Answer(NamedTuple):
    """What one action step did: its JSON answer, and the counts the audit log keeps of it."""

    answer: dict[str, Any]
    counts: dict[str, int]


def _retry_step(queue: TableQueue, selection: FailureFilter, body: ActionRequest) -> _Answer:
    outcome = retry_failed(
        queue, selection, max_rows=RETRY_ROWS_PER_REQUEST, after=body.after, up_to=body.up_to
    )
    answer = {**outcome.as_dict(), **_step(outcome, body.after)}
    return _Answer(answer, {"done": len(outcome.done), "refused": len(outcome.refused)})


def _delete_step(queue: TableQueue, selection: FailureFilter, body: ActionRequest) -> _Answer:
    outcome = delete_failed(
        queue, selection, max_rows=RETRY_ROWS_PER_REQUEST, after=body.after, up_to=body.up_to
    )
    return _Answer({**outcome.as_dict(), **_step(outcome, body.after)}, {"done": len(outcome.done)})


def _restore_step(queue: TableQueue, selection: FailureFilter, body: ActionRequest) -> _Answer:
    """Archived messages back into the error queue: Ids only (at most a page's), so one step does it all."""
    outcome = ErrorArchive.of(queue).restore(list(selection.ids or ()))
    answer = {
        "done": outcome.restored,
        "moved": outcome.moved,
        "unknown": outcome.unknown,
        "more": False,
        "after": 0,
        "up_to": None,
        "left": 0,
    }
    return _Answer(answer, {"done": len(outcome.restored), "unknown": len(outcome.unknown)})


class _Action(NamedTuple):
    """An action of the page on failed messages: its audit event, its words and its step."""

    event: str
    doing: str
    did: str
    step: Callable[[TableQueue, FailureFilter, ActionRequest], _Answer]


ACTIONS = {
    "retry": _Action(RETRY_EVENT, "retrying", "retried", _retry_step),
    "delete": _Action(DELETE_EVENT, "deleting", "deleted", _delete_step),
    "restore": _Action(RESTORE_EVENT, "restoring", "restored", _restore_step),
}


def _act(request: Request, body: ActionRequest, user: Any, name: str) -> dict[str, Any]:
    """A retry, delete or restore step, checked, audited and logged."""
    action = ACTIONS[name]
    selection, picked = body.selection()
    if name == "restore" and body.group is not None:
        raise HTTPException(422, "Restore names archived messages: a message id or a list of ids (ids).")
    _require_change(request, user, body.conn_id, action.doing)
    asked = {"conn_id": body.conn_id, **picked, "method": "POST"}
    try:
        done = _on_error_queue(body.conn_id, lambda queue: action.step(queue, selection, body))
    except HTTPException as failure:
        audit(user, action.event, {**asked, "error": failure.detail})
        raise
    audit(user, action.event, {**asked, **done.counts})
    log.info(
        "Queues page: %s %s %d message(s) (%s) on %s",
        getattr(user, "get_name", lambda: "?")(),
        action.did,
        done.counts["done"],
        ", ".join(picked),
        body.conn_id,
    )
    return {"conn_id": body.conn_id, **picked, **done.answer}


def create_app() -> FastAPI:
    app = FastAPI(title="SQL Queue: Queues", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_exception_handler(RequestValidationError, _invalid)  # type: ignore[arg-type]
    for view in VIEWS:
        _serve(app, view)

    @app.get("/icons/{name}.svg", include_in_schema=False)
    def navigation_icon(name: str) -> Response:
        """The navigation entry's icon (light and dark), which Airflow's UI loads as an image: no data."""
        if name not in NAVIGATION_ICONS:
            raise HTTPException(status.HTTP_404_NOT_FOUND, "No such icon.")
        svg = (Path(__file__).parent / "icons" / f"{name}.svg").read_bytes()
        return Response(svg, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})

    @app.get("/home.js", include_in_schema=False)
    def home_count_bundle() -> Response:
        """The component Airflow's Home shows (``react_apps``, Airflow 3.1 and later): no data in it."""
        script = (Path(__file__).parent / "home.js").read_bytes()
        return Response(script, media_type="text/javascript", headers={"Cache-Control": "no-cache"})

    @app.get("/api/home")
    def home_counts(user: UserDep) -> Any:
        return _read_home(user)

    @app.post("/api/retry")
    def retry_failed_messages(request: Request, body: ActionRequest, user: UserDep) -> Any:
        return _act(request, body, user, "retry")

    @app.post("/api/delete")
    def delete_failed_messages(request: Request, body: ActionRequest, user: UserDep) -> Any:
        """Moves them to the archive beside the error queue (``delete_failed``'s default)."""
        return _act(request, body, user, "delete")

    @app.post("/api/restore")
    def restore_archived_messages(request: Request, body: ActionRequest, user: UserDep) -> Any:
        """Moves archived messages (``id`` or ``ids``) back into the error queue (ErrorArchive.restore)."""
        return _act(request, body, user, "restore")

    return app
