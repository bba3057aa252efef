"""The Queues page's web app, mounted by Airflow's API server at ``/sqlqueue`` (see :mod:`.`).

Every request is Airflow's: the user comes from Airflow's session (the ``_token`` cookie the UI holds, or a
bearer token), and :mod:`.access` asks the auth manager what they may do: open the page (the custom view
``SQL Queues``), see a connection (the right to read it, as ``GET /api/v2/connections/{id}``, and only a
connection of type ``sqlqueue``; an unknown, forbidden or other-typed id all get one 404), and retry or
delete through it (the right to edit it; both written to Airflow's audit log). :mod:`.failed_views` reads
a group's messages and one message for the detail views.

A retry or delete is a ``POST`` of JSON (``Content-Type: application/json``), which an HTML form on another
site can not send without a CORS preflight this app never grants, and the request's ``Origin``, when the
browser sends one, must be this server. No connection field is ever rendered: pages show the connection id
and the password-free description of its database.

Airflow is imported inside the functions that use it: every Airflow process that loads plugins imports
this module, and only the API server needs Airflow's web layer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple
from urllib.parse import urlsplit

from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse
from pydantic import BaseModel, Field

from ..hooks.sqlqueue import SqlQueueHook, secret_forms
from ..model.errors import ConfigurationError
from ..transport.failed import (
    FailureFilter,
    FailureOutcome,
    delete_failed,
    retry_failed,
)
from ..transport.overview import EXACT_BELOW, FAILED_LIMIT, QueuesOverview, queues_overview
from .access import (
    DELETE_EVENT,
    NOT_SERVED,
    QUEUES_VIEW,
    RETRY_EVENT,
    audit,
    auth_manager,
    may_edit,
    may_read,
    queue_connection_ids,
    require_read,
    require_view,
)
from .failed_views import BODY_PREVIEW_BYTES, GROUP_LIST_LIMIT, MAX_GROUP_LIST, failed_message, group_messages
from .queues_page import render_group, render_message, render_page
from .subscriptions_view import SubscriptionsView, subscriptions_view

if TYPE_CHECKING:
    from ..transport.queue import TableQueue

__all__ = ["NOT_SERVED", "QUEUES_VIEW", "create_app"]

log = logging.getLogger(__name__)

GROUP_PATTERN = r"^[0-9a-f]{12}$"
MESSAGE_ID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


class RetryRequest(BaseModel):
    """A group to retry, one step at a time: the first request names no ``after``/``up_to``; each answer
    says whether ``more`` remains and the ``after``/``up_to`` to send for the next step."""

    conn_id: str = Field(min_length=1, max_length=250)
    group: str = Field(pattern=GROUP_PATTERN)
    after: int = Field(default=0, ge=0)
    up_to: int | None = Field(default=None, ge=0)


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


def exact_below() -> int:
    """Below which estimated depth the page counts exactly when asked: ``[sqlqueue] exact_count_below``
    (``AIRFLOW__SQLQUEUE__EXACT_COUNT_BELOW``), default :data:`.overview.EXACT_BELOW`."""
    from airflow.configuration import conf

    return conf.getint("sqlqueue", "exact_count_below", fallback=EXACT_BELOW)


class DeleteRequest(BaseModel):
    """A group (``group``) or one message (``id``) of a connection's error queue; exactly one of the two.
    A group is deleted in steps, as :class:`RetryRequest` retries one."""

    conn_id: str = Field(min_length=1, max_length=250)
    group: str | None = Field(default=None, pattern=GROUP_PATTERN)
    id: str | None = Field(default=None, pattern=MESSAGE_ID_PATTERN)
    after: int = Field(default=0, ge=0)
    up_to: int | None = Field(default=None, ge=0)


async def _user(request: Request) -> Any:
    """Airflow's user of this request, as ``GetUserDep`` resolves it (a bearer token first, else the session
    cookie), through ``get_user``'s keyword parameters ``request`` and ``bearer_credentials``."""
    from airflow.api_fastapi.core_api.security import get_user

    bearer = None
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        from fastapi.security import HTTPAuthorizationCredentials

        bearer = HTTPAuthorizationCredentials(scheme="bearer", credentials=header[7:].strip())
    return await get_user(request=request, bearer_credentials=bearer)


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


def _overview(conn_id: str, exact: bool = False) -> _Read:
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
            )
            try:
                subscriptions, subscriptions_error = subscriptions_view(hook), None
            except Exception as error:
                log.warning("Queues page: subscriptions of %s: %s", conn_id, type(error).__name__)
                subscriptions, subscriptions_error = None, _scrubbed(error, hook)
            staged, staged_error = _staged(hook, conn_id, [state.name for state in overview.queues])
            return _Read(
                overview,
                transport.description,
                None,
                subscriptions,
                subscriptions_error,
                staged,
                staged_error,
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


def _overview_json(overview: QueuesOverview) -> dict[str, Any]:
    def stamp(moment: Any) -> str | None:
        return moment.isoformat().replace("+00:00", "Z") if moment else None

    return {
        "checked_at": stamp(overview.checked_at),
        "queues": [
            {
                "queue": state.name,
                "messages": state.messages,
                "messages_exact": state.exact,
                "oldest_time_sent": stamp(state.oldest_time_sent),
                "oldest_age_seconds": state.oldest_age_seconds,
            }
            for state in overview.queues
        ],
        "error_queue": overview.error_queue,
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


def create_app() -> FastAPI:
    app = FastAPI(title="SQL Queue: Queues", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/queues", response_class=HTMLResponse)
    def queues_page(
        request: Request,
        user: SessionDep,
        conn_id: Annotated[str | None, Query(max_length=250)] = None,
        exact: bool = False,
    ) -> Any:
        if user is None:
            return RedirectResponse(_login_url(request), status_code=status.HTTP_303_SEE_OTHER)
        require_view(user)
        known = queue_connection_ids(user)
        chosen = conn_id or (known[0] if known else None)
        read = _Read(None, None, None)
        code = status.HTTP_200_OK
        if chosen is not None and may_read(user, chosen):
            read = _overview(chosen, exact)
        elif chosen is not None:
            read, code = _Read(None, None, NOT_SERVED), status.HTTP_404_NOT_FOUND
        html = render_page(
            connections=known,
            conn_id=chosen,
            description=read.description,
            overview=read.overview,
            error=read.error,
            subscriptions=read.subscriptions,
            subscriptions_error=read.subscriptions_error,
            staged=read.staged,
            staged_error=read.staged_error,
            may_retry=code == status.HTTP_200_OK and chosen is not None and may_edit(user, chosen),
            exact=exact,
            exact_below=exact_below(),
        )
        return HTMLResponse(html, status_code=code, headers={"Cache-Control": "no-store"})

    @app.get("/api/queues")
    def queues_json(
        user: UserDep, conn_id: Annotated[str, Query(min_length=1, max_length=250)], exact: bool = False
    ) -> Any:
        require_read(user, conn_id)
        read = _overview(conn_id, exact)
        if read.overview is None:
            raise HTTPException(status.HTTP_502_BAD_GATEWAY, read.error)
        return {
            "conn_id": conn_id,
            "database": read.description,
            **_overview_json(read.overview),
            "subscriptions": None if read.subscriptions is None else read.subscriptions.as_json(),
            "subscriptions_error": read.subscriptions_error,
            "staged_runs": read.staged,
            "staged_runs_error": read.staged_error,
        }

    @app.post("/api/retry")
    def retry_group(request: Request, body: RetryRequest, user: UserDep) -> Any:
        _require_change(request, user, body.conn_id, "retrying")
        asked = {"conn_id": body.conn_id, "group": body.group, "method": "POST"}
        opened = _Opened(body.conn_id)
        try:
            with opened as hook:
                transport = hook.get_transport()
                error_queue = transport.queue(transport.error_queue or "error", error_queue=None)
                outcome = retry_failed(
                    error_queue,
                    FailureFilter(group=body.group),
                    max_rows=RETRY_ROWS_PER_REQUEST,
                    after=body.after,
                    up_to=body.up_to,
                )
        except ConfigurationError as error:
            audit(user, RETRY_EVENT, {**asked, "error": _scrubbed(error, opened.hook)})
            raise HTTPException(status.HTTP_400_BAD_REQUEST, _scrubbed(error, opened.hook)) from None
        except Exception as error:
            audit(user, RETRY_EVENT, {**asked, "error": _scrubbed(error, opened.hook)})
            raise HTTPException(status.HTTP_502_BAD_GATEWAY, _scrubbed(error, opened.hook)) from None
        audit(user, RETRY_EVENT, {**asked, "done": len(outcome.done), "refused": len(outcome.refused)})
        log.info(
            "Queues page: %s retried %d failed message(s) of group %s on %s (%d refused)",
            getattr(user, "get_name", lambda: "?")(),
            len(outcome.done),
            body.group,
            body.conn_id,
            len(outcome.refused),
        )
        return {
            "conn_id": body.conn_id,
            "group": body.group,
            **outcome.as_dict(),
            "more": outcome.more,
            **_step(outcome, body.after),
        }

    @app.get("/failed", response_class=HTMLResponse)
    def group_page(
        request: Request,
        user: SessionDep,
        conn_id: Annotated[str, Query(min_length=1, max_length=250)],
        group: Annotated[str, Query(pattern=GROUP_PATTERN)],
        limit: Annotated[int, Query(ge=1, le=MAX_GROUP_LIST)] = GROUP_LIST_LIMIT,
    ) -> Any:
        if user is None:
            return RedirectResponse(_login_url(request), status_code=status.HTTP_303_SEE_OTHER)
        listed, error, code = None, None, status.HTTP_200_OK
        try:
            require_read(user, conn_id)
            listed = _on_error_queue(conn_id, lambda queue: group_messages(queue, group, limit))
        except HTTPException as failure:
            if failure.status_code == status.HTTP_403_FORBIDDEN:
                raise
            error, code = failure.detail, failure.status_code
        html = render_group(
            conn_id=conn_id,
            group=group,
            listed=listed,
            limit=limit,
            max_limit=MAX_GROUP_LIST,
            error=error,
            may_retry=listed is not None and may_edit(user, conn_id),
        )
        return HTMLResponse(html, status_code=code, headers={"Cache-Control": "no-store"})

    @app.get("/api/failed")
    def group_json(
        user: UserDep,
        conn_id: Annotated[str, Query(min_length=1, max_length=250)],
        group: Annotated[str, Query(pattern=GROUP_PATTERN)],
        limit: Annotated[int, Query(ge=1, le=MAX_GROUP_LIST)] = GROUP_LIST_LIMIT,
    ) -> Any:
        require_read(user, conn_id)
        listed = _on_error_queue(conn_id, lambda queue: group_messages(queue, group, limit))
        return {"conn_id": conn_id, **listed}

    @app.get("/message", response_class=HTMLResponse)
    def message_page(
        request: Request,
        user: SessionDep,
        conn_id: Annotated[str, Query(min_length=1, max_length=250)],
        id: Annotated[str, Query(pattern=MESSAGE_ID_PATTERN)],
    ) -> Any:
        if user is None:
            return RedirectResponse(_login_url(request), status_code=status.HTTP_303_SEE_OTHER)
        message, error, code = None, None, status.HTTP_200_OK
        try:
            require_read(user, conn_id)
            message = _on_error_queue(conn_id, lambda queue: failed_message(queue, id))
            if message is None:
                raise HTTPException(status.HTTP_404_NOT_FOUND, f"no failed message {id} in the error queue")
        except HTTPException as failure:
            if failure.status_code == status.HTTP_403_FORBIDDEN:
                raise
            error, code = failure.detail, failure.status_code
        html = render_message(
            conn_id=conn_id,
            message_id=id,
            message=message,
            preview_bytes=BODY_PREVIEW_BYTES,
            error=error,
            may_retry=message is not None and may_edit(user, conn_id),
        )
        return HTMLResponse(html, status_code=code, headers={"Cache-Control": "no-store"})

    @app.get("/api/message")
    def message_json(
        user: UserDep,
        conn_id: Annotated[str, Query(min_length=1, max_length=250)],
        id: Annotated[str, Query(pattern=MESSAGE_ID_PATTERN)],
    ) -> Any:
        require_read(user, conn_id)
        message = _on_error_queue(conn_id, lambda queue: failed_message(queue, id))
        if message is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no failed message {id} in the error queue")
        return {"conn_id": conn_id, **message}

    @app.post("/api/delete")
    def delete_messages(request: Request, body: DeleteRequest, user: UserDep) -> Any:
        """Delete a group or one message from the error queue: ``delete_failed``'s default, which moves
        them to the archive beside the error queue."""
        if (body.group is None) == (body.id is None):
            raise HTTPException(422, "name a group or a message id")
        _require_change(request, user, body.conn_id, "deleting")
        selection = FailureFilter(group=body.group) if body.group else FailureFilter(ids=[str(body.id)])
        picked = {"group": body.group} if body.group else {"id": body.id}
        asked = {"conn_id": body.conn_id, **picked, "method": "POST"}
        try:
            outcome = _on_error_queue(
                body.conn_id,
                lambda queue: delete_failed(
                    queue, selection, max_rows=RETRY_ROWS_PER_REQUEST, after=body.after, up_to=body.up_to
                ),
            )
        except HTTPException as failure:
            audit(user, DELETE_EVENT, {**asked, "error": failure.detail})
            raise
        audit(user, DELETE_EVENT, {**asked, "done": len(outcome.done)})
        log.info(
            "Queues page: %s deleted %d failed message(s) (%s) on %s",
            user.get_name(),
            len(outcome.done),
            picked,
            body.conn_id,
        )
        return {"conn_id": body.conn_id, **picked, **outcome.as_dict(), **_step(outcome, body.after)}

    return app
