"""The Queues page's archive view: the error queue's section links to it, it and its /api twin read one
bounded page of the archive newest archived first, and Restore (one message or a selection) moves archived
messages back into the error queue through the same checked, audited POST path as retry and delete. On
SQLite and PostgreSQL, with Airflow's own simple auth manager deciding who may do what."""

from __future__ import annotations

from typing import Any

import pytest
from test_airflow_dags import airflow_db  # noqa: F401  (a fixture)
from test_queues_page import (  # noqa: F401  (fixtures)
    CONN_ID,
    Client,
    app,
    audit_entries,
    delete,
    last_audit_id,
    queues,
    queues_app_not_served,
    table,
)

from airflow_provider_sqlqueue.transport import Transport
from airflow_provider_sqlqueue.transport.archive import ErrorArchive
from airflow_provider_sqlqueue.transport.failed import failed_rows

ORIGIN = "http://airflow.test"


def restore(client: Client, conn_id: str = CONN_ID, **selection: Any) -> Any:
    return client.post("/api/restore", {"conn_id": conn_id, **selection}, Origin=ORIGIN)


def archive_everything(client: Client, transport: Transport) -> list[str]:
    """Delete every failed message through the page, one at a time (so they are archived in this order);
    their Ids, oldest archived first."""
    ids = [row.id for row in failed_rows(transport.queue("error"))]
    for message_id in ids:
        done = delete(client, id=message_id)
        assert done.status_code == 200 and done.json()["done"] == [message_id], done.text
    return ids


@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_the_archive_page_lists_pages_and_restores_one_message_and_a_selection(
    app: Client,  # noqa: F811
    queues: Transport,  # noqa: F811
) -> None:
    app.as_role("OP")
    overview = app.get("/queues", conn_id=CONN_ID)
    assert overview.status_code == 200 and 'id="archive-link"' in overview.text
    assert f'href="archive?conn_id={CONN_ID}"' in overview.text
    error = queues.queue("error")
    before = {row.id: row.raw_headers for row in failed_rows(error)}
    ids = archive_everything(app, queues)
    assert error.count() == 0 and ErrorArchive.of(error).count() == 3

    first = app.get("/api/archive", conn_id=CONN_ID, limit=2).json()
    second = app.get("/api/archive", conn_id=CONN_ID, limit=2, page=2).json()
    assert (first["more"], len(first["messages"]), second["more"], len(second["messages"])) == (
        True,
        2,
        False,
        1,
    )
    listed = [m["id"] for m in first["messages"] + second["messages"]]
    assert listed == ids[::-1]  # newest archived first
    payments = [m for m in first["messages"] + second["messages"] if table(m["failed_queue"]) == "payments"]
    assert len(payments) == 2 and {m["exception_type"] for m in payments} == {"ConnectionError"}
    assert {m["exception_message"] for m in payments} == {"payment service unreachable"}
    assert all(m["body_size"] == 2 and m["archived_at"].endswith("Z") for m in payments)
    assert table(first["error_queue"]) == "error" and table(first["archive"]) == "error_archive"

    page = app.get("/archive", conn_id=CONN_ID, limit=2)
    assert page.status_code == 200 and all(f'data-id="{i}"' in page.text for i in ids[1:])
    assert 'id="restore-selected"' in page.text and 'id="next"' in page.text and 'id="confirm"' in page.text
    assert f'aria-label="Restore archived message {ids[2]} to the error queue' in page.text
    assert 'role="alertdialog"' in page.text and "confirm(" not in page.text

    audited = last_audit_id()
    one = restore(app, id=ids[0])
    assert one.status_code == 200, one.text
    assert (one.json()["done"], one.json()["unknown"], one.json()["more"]) == ([ids[0]], [], False)
    selection = restore(app, ids=[ids[1], ids[2], ids[0]])  # ids[0] is no longer archived: reported
    assert selection.status_code == 200, selection.text
    assert (selection.json()["done"], selection.json()["unknown"]) == ([ids[1], ids[2]], [ids[0]])
    assert {row.id: row.raw_headers for row in failed_rows(error)} == before  # back as they were
    assert app.get("/api/archive", conn_id=CONN_ID).json()["messages"] == []
    assert 'id="no-messages"' in app.get("/archive", conn_id=CONN_ID).text
    entries = audit_entries(audited)
    assert [(event, owner) for event, owner, _ in entries] == [("sqlqueue.restore_archived", "op")] * 2
    assert entries[0][2] == {"conn_id": CONN_ID, "id": ids[0], "method": "POST", "done": 1, "unknown": 0}
    assert entries[1][2]["done"] == 2 and entries[1][2]["unknown"] == 1

    retried = app.post("/api/retry", {"conn_id": CONN_ID, "ids": ids}, Origin=ORIGIN)
    assert retried.status_code == 200 and sorted(retried.json()["done"]) == sorted(ids), retried.text
    assert error.count() == 0 and queues.queue("payments").count() == 2


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)  # decided before any database
def test_a_viewer_can_neither_read_nor_restore_the_archive_and_a_restore_is_checked_as_a_delete(
    app: Client,  # noqa: F811
    queues: Transport,  # noqa: F811
) -> None:
    app.as_role("OP")
    assert 'id="no-archive"' in app.get("/archive", conn_id=CONN_ID).text  # nothing archived yet
    ids = archive_everything(app, queues)
    error = queues.queue("error")

    app.as_role("VIEWER")
    refused = [app.get("/api/archive", conn_id=CONN_ID), restore(app, id=ids[0]), restore(app, ids=ids)]
    unknown = [
        app.get("/api/archive", conn_id="nope"),
        restore(app, "nope", id=ids[0]),
        restore(app, "nope", ids=ids),
    ]
    for answer, missing in zip(refused, unknown, strict=True):
        assert (answer.status_code, answer.content) == (missing.status_code, missing.content)
        assert answer.status_code == 404 and answer.json() == {"detail": queues_app_not_served()}
    shown = app.get("/archive", conn_id=CONN_ID)
    assert shown.status_code == 404 and ids[0] not in shown.text and 'data-action="restore"' not in shown.text
    assert error.count() == 0 and ErrorArchive.of(error).count() == 3

    app.as_role("ADMIN")
    cross = app.post("/api/restore", {"conn_id": CONN_ID, "id": ids[0]}, Origin="http://evil.example")
    assert cross.status_code == 403 and "cross-origin" in cross.json()["detail"]
    form = app.http.post("/api/restore", data={"conn_id": CONN_ID, "id": ids[0]})
    assert form.status_code in (415, 422)
    group = restore(app, group="0123456789ab")
    assert group.status_code == 422 and "message id" in group.json()["detail"]
    assert restore(app, id="not-an-id").status_code == 422
    assert app.get("/api/archive", conn_id=CONN_ID, limit=0).status_code == 422
    assert error.count() == 0 and ErrorArchive.of(error).count() == 3

    app.as_role(None)
    assert restore(app, id=ids[0]).status_code == 401
    assert app.get("/archive", conn_id=CONN_ID).status_code == 401
    assert ErrorArchive.of(error).count() == 3
