"""The Airflow surface through ``dag.test()`` on real engines, with the test DAGs of ``tests/dags``.

Each run is a ``dag_runner.py`` subprocess (see ``test_airflow_dags``) whose dags folder is ``tests/dags``;
``sqlqueue_default`` points at the test's engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")

from airflow.sdk.definitions._internal.abstractoperator import DEFAULT_QUEUE
from test_airflow_dags import airflow_db, assert_succeeded, run_dag  # noqa: F401  (airflow_db: a fixture)

if TYPE_CHECKING:
    from conftest import EngineTarget

TEST_DAGS = {"AIRFLOW__CORE__DAGS_FOLDER": str(Path(__file__).with_name("dags"))}


@pytest.mark.slow
def test_mapped_and_plain_tasks_run_on_the_default_executor_queue(
    airflow_db: Path,  # noqa: F811
    target: EngineTarget,
) -> None:
    run = run_dag(target, "sqlqueue_test_mapped", env=TEST_DAGS)

    assert_succeeded(run, target)
    instances = run.task_instances
    assert sorted((ti["task_id"], ti["map_index"]) for ti in instances) == [
        ("consume", 0),
        ("plain_send", -1),
        ("provision", -1),
        ("send", 0),
        ("send", 1),
        ("send", 2),
        ("wait", 0),
    ], run.output
    assert {ti["queue"] for ti in instances} == {DEFAULT_QUEUE}, instances
    assert {ti["state"] for ti in instances} == {"success"}, instances
    with target.open() as transport:
        assert transport.queue("orders").count() == 0
