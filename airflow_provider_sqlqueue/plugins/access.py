"""Who may see and change which connection on the Queues page, and the record of what they changed.

The auth manager decides, asked as Airflow's own connection routes ask it (``requires_access_connection``
in ``airflow.api_fastapi.core_api.security``): reading a connection (``GET``) to be shown its queues and
failed messages, editing it (``PUT``) to retry or delete through it. Only connections of this provider's
type are served: the API server logs in with a connection's credentials, so a ``postgres`` or ``mssql``
connection (perhaps a superuser's) is never opened here, whoever asks. A connection is served under one
spelling of its id only (:func:`canonical_conn_id`), the one the auth manager is asked about. Retries and
deletes go to Airflow's audit log.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import HTTPException, status

from ..hooks.sqlqueue import SqlQueueHook

__all__ = [
    "CONN_TYPE",
    "DELETE_EVENT",
    "NOT_SERVED",
    "QUEUES_VIEW",
    "RESTORE_EVENT",
    "RETRY_EVENT",
    "audit",
    "canonical_conn_id",
    "may_edit",
    "may_read",
    "queue_connection_ids",
    "require_read",
    "require_view",
]

QUEUES_VIEW = "SQL Queues"
CONN_TYPE = SqlQueueHook.conn_type
# The one answer for an id that is unknown, forbidden to this user or not of type sqlqueue.
NOT_SERVED = "no SQL Queue connection with that id that you may read"
RETRY_EVENT = "sqlqueue.retry_failed"  # the audit log's event names
DELETE_EVENT = "sqlqueue.delete_failed"
RESTORE_EVENT = "sqlqueue.restore_archived"


def auth_manager() -> Any:
    """The API server's auth manager."""
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager()


def may_view(user: Any) -> bool:
    return bool(auth_manager().is_authorized_custom_view(method="GET", resource_name=QUEUES_VIEW, user=user))


def may_use(user: Any, conn_id: str, method: str) -> bool:
    """The auth manager's answer for ``method`` on connection ``conn_id``, asked as Airflow's connection
    routes ask it (``requires_access_connection``): with the connection's team when multi-team is on
    (Airflow 3.1 and later; 3.0's ``ConnectionDetails`` has no team)."""
    from airflow.api_fastapi.auth.managers.models.resource_details import ConnectionDetails
    from airflow.configuration import conf

    details = ConnectionDetails(conn_id=conn_id)
    if conf.getboolean("core", "multi_team", fallback=False):
        from airflow.models.connection import Connection

        details = ConnectionDetails(conn_id=conn_id, team_name=Connection.get_team_name(conn_id))
    return bool(auth_manager().is_authorized_connection(method=method, details=details, user=user))


def may_edit(user: Any, conn_id: str) -> bool:
    """Whether ``user`` may write through ``conn_id`` (retry, delete): the right to edit it."""
    return may_use(user, conn_id, "PUT")


def canonical_conn_id(conn_id: str) -> str | None:
    """The one spelling of ``conn_id`` under which the page serves the connection Airflow finds for it, or
    None when Airflow finds none; looking it up opens nothing.

    Airflow finds a connection in the environment under any letter case of its id, since it reads
    ``AIRFLOW_CONN_`` followed by the id upper-cased, and returns it under the id as asked. The auth manager
    answers for the spelling it is asked about, so a rule about ``secret_env`` says nothing of
    ``SECRET_ENV``: a connection from the environment is served under its id in lower case only, as
    Airflow's documentation names them (``AIRFLOW_CONN_MY_DB`` is ``my_db``). Any other connection has the
    id it comes back with (a metadata database with a case-insensitive collation answers ``MY_DB`` with the
    stored ``my_db``).
    """
    found = _looked_up(conn_id)
    return None if found is None else found[0]


def _looked_up(conn_id: str) -> tuple[str, Any] | None:
    """:func:`canonical_conn_id` of ``conn_id`` and the connection Airflow finds for it, in one lookup."""
    from airflow.secrets.environment_variables import EnvironmentVariablesBackend

    try:
        connection = SqlQueueHook.get_connection(conn_id)
    except Exception:
        return None
    if EnvironmentVariablesBackend().get_conn_value(conn_id) is not None:
        return conn_id.lower(), connection
    return str(connection.conn_id), connection


def is_queue_connection(conn_id: str) -> bool:
    """Whether ``conn_id``, spelled as :func:`canonical_conn_id` spells it, names a connection (stored, in a
    secrets backend or the environment) of type ``sqlqueue``; looking it up opens nothing."""
    found = _looked_up(conn_id)
    return found is not None and found[0] == conn_id and found[1].conn_type == CONN_TYPE


def may_read(user: Any, conn_id: str) -> bool:
    """Whether ``user`` may be shown ``conn_id``'s queues: the id is first resolved to the only spelling the
    page serves (any other is refused, as an unknown id is), so the auth manager is asked about the very id
    the connection is then looked up and served under, and retries and deletes are checked against it."""
    return is_queue_connection(conn_id) and may_use(user, conn_id, "GET")


def require_view(user: Any) -> None:
    if not may_view(user):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"you may not see {QUEUES_VIEW}")


def require_read(user: Any, conn_id: str) -> None:
    """404 with one body whether ``conn_id`` is unknown, forbidden to ``user`` or of another type."""
    require_view(user)
    if not may_read(user, conn_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, NOT_SERVED)


def queue_connection_ids(user: Any) -> list[str]:
    """The ids of the connections of type ``sqlqueue`` stored in the metadata database that ``user`` may
    read: ``get_authorized_connections``, the filter of ``GET /api/v2/connections`` (Airflow 3.1 and
    later), or on Airflow 3.0, which has no such filter, the auth manager asked of each (:func:`may_use`)."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        of_type = select(Connection.conn_id).where(Connection.conn_type == CONN_TYPE)
        found = [str(conn_id) for conn_id in session.scalars(of_type)]
    authorized = getattr(auth_manager(), "get_authorized_connections", None)
    if authorized is None:
        return sorted(conn_id for conn_id in found if may_use(user, conn_id, "GET"))
    readable = authorized(user=user, method="GET")
    return sorted(conn_id for conn_id in found if conn_id in readable)


def audit(user: Any, event: str, details: dict[str, Any]) -> None:
    """An entry in Airflow's audit log: who (``owner``), ``event``, and ``details`` as JSON in ``extra``,
    the shape Airflow's own routes write with ``api_fastapi.logging.decorators.action_logging``. That is a
    route dependency, which records the request before it runs and would have this module import Airflow's
    core API wherever plugins load; this entry is written after the action, so it says what was done."""
    from airflow.models.log import Log
    from airflow.utils.session import create_session

    name = user.get_name()
    with create_session() as session:
        session.add(Log(event=event, owner=name, owner_display_name=name, extra=json.dumps(details)))
