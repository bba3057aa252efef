"""The Queues page's actions that tests/test_queues_page.py leaves out: one message retried from its own
view, a selection deleted, a group deleted from its page, and the times of every view in Airflow's
timezone. Against the same app and engines as that file (its fixtures), through the page's /api."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from test_airflow_dags import airflow_db  # noqa: F401  (a fixture)
from test_queues_page import CONN_ID, Client, a_group, app, queues, table  # noqa: F401  (fixtures)

from airflow_provider_sqlqueue.plugins.queues_page import TIME_FORMAT
from airflow_provider_sqlqueue.transport import Transport
from airflow_provider_sqlqueue.transport.archive import ErrorArchive
from airflow_provider_sqlqueue.transport.browse import browse
from airflow_provider_sqlqueue.transport.failed import failed_rows

ORIGIN = {"Origin": "http://airflow.test"}
# The statements behind these actions are the group actions' (tests/test_queues_page.py runs those on every
# engine, Babelfish through both drivers): here the page's handling of each selection, on two engines.
BOTH = pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)


def failed_ids(transport: Transport, queue: str) -> set[str]:
    return {row.id for row in failed_rows(transport.queue("error")) if table(row.failed_queue) == queue}


@BOTH
def test_one_message_is_retried_from_its_own_view_and_the_rest_of_its_group_stays(
    app: Client,  # noqa: F811
    queues: Transport,  # noqa: F811
) -> None:
    app.as_role("OP")
    payments = sorted(failed_ids(queues, "payments"))
    one, other = payments
    assert 'id="retry-message"' in app.get("/message", conn_id=CONN_ID, id=one).text
    done = app.post("/api/retry", {"conn_id": CONN_ID, "id": one}, **ORIGIN)
    assert done.status_code == 200 and done.json()["done"] == [one], done.text
    assert {message.id for message in browse(queues.queue("payments"), 10)} == {one}
    assert failed_ids(queues, "payments") == {other}
    assert app.get("/api/message", conn_id=CONN_ID, id=one).status_code == 404
    again = app.post("/api/retry", {"conn_id": CONN_ID, "id": one}, **ORIGIN)
    assert again.status_code == 200 and again.json()["done"] == []


@BOTH
def test_a_selection_is_deleted_into_the_archive_and_only_the_selection(
    app: Client,  # noqa: F811
    queues: Transport,  # noqa: F811
) -> None:
    app.as_role("OP")
    picked = sorted(failed_ids(queues, "payments"))[:1] + sorted(failed_ids(queues, "refunds"))
    kept = failed_ids(queues, "payments") - set(picked)
    gone = app.post("/api/delete", {"conn_id": CONN_ID, "ids": picked}, **ORIGIN)
    assert gone.status_code == 200 and sorted(gone.json()["done"]) == sorted(picked), gone.text
    assert {row.id for row in failed_rows(queues.queue("error"))} == kept
    assert ErrorArchive.of(queues.queue("error")).count() == len(picked)


@BOTH
def test_a_group_is_deleted_from_its_page_whole(
    app: Client,  # noqa: F811
    queues: Transport,  # noqa: F811
) -> None:
    app.as_role("OP")
    group = a_group(queues, "payments")
    page = app.get("/failed", conn_id=CONN_ID, group=group).text
    assert 'id="delete-group"' in page
    gone = app.post("/api/delete", {"conn_id": CONN_ID, "group": group}, **ORIGIN)
    assert gone.status_code == 200 and len(gone.json()["done"]) == 2, gone.text
    assert failed_ids(queues, "payments") == set() and len(failed_ids(queues, "refunds")) == 1
    assert app.get("/api/failed", conn_id=CONN_ID, group=group).json()["messages"] == []


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)  # a rendering question: one engine is enough
def test_every_view_writes_its_times_in_airflows_timezone_in_one_format(
    app: Client,  # noqa: F811
    queues: Transport,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``[core] default_timezone`` decides the server-rendered text (the page's script then follows the
    timezone the user picked in the UI); the ``datetime`` attribute keeps the moment itself. The message
    view shows its headers as they are stored, so it has no times of its own."""
    app.as_role("OP")
    monkeypatch.setenv("AIRFLOW__CORE__DEFAULT_TIMEZONE", "Asia/Kolkata")  # +05:30, no daylight saving
    group = a_group(queues, "payments")
    pages = {
        "queues": app.get("/queues", conn_id=CONN_ID).text,
        "group": app.get("/failed", conn_id=CONN_ID, group=group).text,
    }
    for view, page in pages.items():
        times = [
            (moment, shown)
            for moment, shown in (
                part.split('">', 1)
                for part in (piece.split("</time>")[0] for piece in page.split('<time datetime="')[1:])
            )
        ]
        assert times, f"the {view} view shows no time"
        for moment, shown in times:
            instant = datetime.fromisoformat(moment.replace("Z", "+00:00"))
            if instant.tzinfo is None:
                instant = instant.replace(tzinfo=timezone.utc)
            assert shown == instant.astimezone(ZoneInfo("Asia/Kolkata")).strftime(TIME_FORMAT), (view, moment)
            assert shown != instant.astimezone(timezone.utc).strftime(TIME_FORMAT), "written in UTC"
        assert "Asia/Kolkata" in page, f"the {view} view does not name the timezone it writes"
