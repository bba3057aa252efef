"""Where people find the Queues page: the "Queues page" button (an operator extra link) of a sensor's and a
consumer's task instances, built by Airflow from a real run, opens the page of the task's connection with its
queue picked."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
from conftest import EngineTarget
from test_airflow_dags import DagRun, airflow_db, assert_succeeded  # noqa: F401  (a fixture)
from test_queues_page import CONN_ID, Client, app, queues  # noqa: F401  (fixtures)

from airflow_provider_sqlqueue.hooks.queues_page_link import QUEUE_ANCHOR, QueuesPageLink
from airflow_provider_sqlqueue.operators.consume import ConsumeMessagesOperator
from airflow_provider_sqlqueue.sensors.queue import QueueSensor
from airflow_provider_sqlqueue.transport import Transport

TESTS = Path(__file__).parent
BASE_URL = "http://airflow.test/airflow/"


def saved_links(dag_id: str) -> dict[str, str]:
    """The "Queues page" link of each task of ``dag_id``'s latest run, as Airflow keeps it for its UI."""
    from airflow.models.dagrun import DagRun as RunModel
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    key = QueuesPageLink().xcom_key
    with create_session() as session:
        latest = session.scalar(
            select(RunModel.run_id).where(RunModel.dag_id == dag_id).order_by(RunModel.id.desc()).limit(1)
        )
        rows = session.execute(
            select(XComModel.task_id, XComModel.value).where(
                XComModel.dag_id == dag_id, XComModel.run_id == latest, XComModel.key == key
            )
        )
        return {task_id: value if isinstance(value, str) else json.dumps(value) for task_id, value in rows}


@pytest.mark.slow  # one dag.test() run of two tasks
@pytest.mark.parametrize("target", ["sqlite"], indirect=True)  # decided before any database
def test_a_sensors_and_a_consumers_queues_page_link_picks_their_queue_on_the_page(
    app: Client,  # noqa: F811
    queues: Transport,  # noqa: F811
    target: EngineTarget,
) -> None:
    env = {
        **target.airflow_env(CONN_ID),
        "AIRFLOW__CORE__DAGS_FOLDER": str(TESTS / "dags"),
        "AIRFLOW__API__BASE_URL": BASE_URL,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    run = DagRun(target, "sqlqueue_test_queues_link", env=env)
    run.finish()
    assert_succeeded(run, target)
    links = saved_links("sqlqueue_test_queues_link")
    assert set(links) == {"wait", "consume"} and links["wait"] == links["consume"], run.output

    url = urlsplit(links["wait"])
    assert f"{url.scheme}://{url.netloc}{url.path}" == f"{BASE_URL}sqlqueue/queues"
    asked = dict(parse_qsl(url.query))
    assert asked == {"conn_id": CONN_ID, "queue": "orders"} and url.fragment == QUEUE_ANCHOR  # rendered

    app.as_role("OP")
    page = app.get("/queues", **asked).text
    picked = re.findall(
        rf'<tr id="{QUEUE_ANCHOR}" class="picked" aria-current="true" data-queue="([^"]+)"', page
    )
    assert picked == [str(queues.queue("orders").address)], page
    assert f'id="{QUEUE_ANCHOR}"' not in app.get("/queues", conn_id=CONN_ID, queue="no_such_queue").text
    assert app.get("/api/queues", **asked).json()["picked_queue"] == picked[0]


def test_the_link_is_an_extra_link_of_the_sensor_and_the_consumer_and_names_only_ids() -> None:
    for operator in (
        QueueSensor(task_id="wait", queue_name="orders@[sales]", sqlqueue_conn_id="sq"),
        ConsumeMessagesOperator(
            task_id="eat",
            queue_name="orders@[sales]",
            sqlqueue_conn_id="sq",
            handler="consume_handlers:record",
        ),
    ):
        [link] = [link for link in operator.operator_extra_links if isinstance(link, QueuesPageLink)]
        assert link.name == "Queues page"
        url = urlsplit(link.get_link(operator, ti_key=None))
        assert url.path.endswith("/sqlqueue/queues") and url.fragment == QUEUE_ANCHOR
        assert dict(parse_qsl(url.query)) == {"conn_id": "sq", "queue": "orders@[sales]"}
