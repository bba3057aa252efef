"""The Queues page's web app, mounted by Airflow's API server at ``/sqlqueue`` (see :mod:`.`).

Every request is Airflow's: the user comes from Airflow's session (the ``_token`` cookie the UI holds, or a
bearer token) and the auth manager decides what they may do:

- seeing the page and its JSON needs the custom view ``SQL Queues`` (every role from viewer up, with the
  simple auth manager; a permission of its own with FAB);
- retrying failed messages writes to the queue database through the connection, so it needs the right to
  edit that connection (``is_authorized_connection(method="PUT")``: the Op role and above with the simple
  auth manager, "can edit on Connections" with FAB). A viewer sees the groups but no Retry button, and the
  endpoint answers 403 if called all the same.

A retry is a ``POST`` of JSON (``Content-Type: application/json``), which an HTML form on another site can
not send without a CORS preflight this app never grants, and the request's ``Origin``, when the browser
sends one, must be this server. No connection field is ever rendered: pages show the connection id and the
password-free description of its database.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse
from pydantic import BaseModel, Field

from ..hooks.sqlqueue import SqlQueueHook, secret_forms
from ..model.errors import ConfigurationError
from ..transport.failed import FailureFilter, retry_failed
from ..transport.overview import QueuesOverview, queues_overview
from .queues_page import render_page

__all__ = ["QUEUES_VIEW", "create_app"]

log = logging.getLogger(__name__)

QUEUES_VIEW = "SQL Queues"
CONN_TYPE = SqlQueueHook.conn_type


class RetryRequest(BaseModel):
    conn_id: str = Field(min_length=1, max_length=250)
    group: str = Field(pattern=r"^[0-9a-f]{12}$")


def _auth_manager() -> Any:
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager()


async def _user(request: Request) -> Any:
    from airflow.api_fastapi.core_api.security import get_user

    bearer = None
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        from fastapi.security import HTTPAuthorizationCredentials

        bearer = HTTPAuthorizationCredentials(scheme="bearer", credentials=header[7:].strip())
    return await get_user(request, None, bearer)


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
        return str(_auth_manager().get_url_login(next_url=str(request.url)))
    except Exception:
        return "/"


UserDep = Annotated[Any, Depends(_user)]
SessionDep = Annotated[Any, Depends(_session)]


def _may_view(user: Any) -> bool:
    return bool(_auth_manager().is_authorized_custom_view(method="GET", resource_name=QUEUES_VIEW, user=user))


def _may_retry(user: Any, conn_id: str) -> bool:
    from airflow.api_fastapi.auth.managers.models.resource_details import ConnectionDetails

    details = ConnectionDetails(conn_id=conn_id)
    return bool(_auth_manager().is_authorized_connection(method="PUT", details=details, user=user))


def _require_view(user: Any) -> None:
    if not _may_view(user):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"you may not see {QUEUES_VIEW}")


def queue_connection_ids() -> list[str]:
    """The ids of the Airflow connections of type ``sqlqueue`` stored in the metadata database."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        found = session.scalars(select(Connection.conn_id).where(Connection.conn_type == CONN_TYPE))
        return sorted(str(conn_id) for conn_id in found)


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


def _overview(conn_id: str) -> tuple[QueuesOverview | None, str | None, str | None]:
    """(overview, description of the database, error text) of a connection; never raises."""
    opened = _Opened(conn_id)
    try:
        with opened as hook:
            transport = hook.get_transport()
            return queues_overview(transport, transport.error_queue or "error"), transport.description, None
    except Exception as error:
        log.warning("Queues page: connection %s: %s", conn_id, type(error).__name__)
        return None, None, _scrubbed(error, opened.hook)


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if not origin or origin == "null":
        return origin is None
    ours = urlsplit(str(request.base_url))
    theirs = urlsplit(origin)
    return (theirs.scheme, theirs.netloc) == (ours.scheme, ours.netloc)


def _overview_json(overview: QueuesOverview) -> dict[str, Any]:
    def stamp(moment: Any) -> str | None:
        return moment.isoformat().replace("+00:00", "Z") if moment else None

    return {
        "checked_at": stamp(overview.checked_at),
        "queues": [
            {
                "queue": state.name,
                "messages": state.messages,
                "oldest_time_sent": stamp(state.oldest_time_sent),
                "oldest_age_seconds": state.oldest_age_seconds,
            }
            for state in overview.queues
        ],
        "error_queue": overview.error_queue,
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


def create_app() -> FastAPI:
    app = FastAPI(title="SQL Queue: Queues", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/queues", response_class=HTMLResponse)
    def queues_page(
        request: Request,
        user: SessionDep,
        conn_id: Annotated[str | None, Query(max_length=250)] = None,
    ) -> Any:
        if user is None:
            return RedirectResponse(_login_url(request), status_code=status.HTTP_303_SEE_OTHER)
        _require_view(user)
        known = queue_connection_ids()
        chosen = conn_id or (known[0] if known else None)
        overview = description = error = None
        if chosen is not None:
            overview, description, error = _overview(chosen)
        html = render_page(
            connections=known,
            conn_id=chosen,
            description=description,
            overview=overview,
            error=error,
            may_retry=chosen is not None and _may_retry(user, chosen),
        )
        return HTMLResponse(html, headers={"Cache-Control": "no-store"})

    @app.get("/api/queues")
    def queues_json(user: UserDep, conn_id: Annotated[str, Query(min_length=1, max_length=250)]) -> Any:
        _require_view(user)
        overview, description, error = _overview(conn_id)
        if overview is None:
            raise HTTPException(status.HTTP_502_BAD_GATEWAY, error)
        return {"conn_id": conn_id, "database": description, **_overview_json(overview)}

    @app.post("/api/retry")
    def retry_group(request: Request, body: RetryRequest, user: UserDep) -> Any:
        if not request.headers.get("content-type", "").startswith("application/json"):
            raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, "send JSON")
        if not _same_origin(request):
            raise HTTPException(status.HTTP_403_FORBIDDEN, "cross-origin request refused")
        _require_view(user)
        if not _may_retry(user, body.conn_id):
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"retrying failed messages needs the right to edit connection {body.conn_id}",
            )
        opened = _Opened(body.conn_id)
        try:
            with opened as hook:
                transport = hook.get_transport()
                error_queue = transport.queue(transport.error_queue or "error", error_queue=None)
                outcome = retry_failed(error_queue, FailureFilter(group=body.group))
        except ConfigurationError as error:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, _scrubbed(error, opened.hook)) from None
        except Exception as error:
            raise HTTPException(status.HTTP_502_BAD_GATEWAY, _scrubbed(error, opened.hook)) from None
        log.info(
            "Queues page: %s retried %d failed message(s) of group %s on %s (%d refused)",
            getattr(user, "get_name", lambda: "?")(),
            len(outcome.done),
            body.group,
            body.conn_id,
            len(outcome.refused),
        )
        return {"conn_id": body.conn_id, "group": body.group, **outcome.as_dict()}

    return app
