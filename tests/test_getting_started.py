"""docs/getting-started.md as printed: its DAG runs through ``dag.test()`` on its SQLite connection and
logs the lines the page shows, in the page's order (the consumer's rate aside); a handler's SQLAlchemy
connection is what the page's table of Airflow releases says it is under the installed SQLAlchemy.

.ci/airflow-oldest runs this module under Airflow 3.0.6 and SQLAlchemy 1.4 too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy
from conftest import EngineTarget
from test_airflow_dags import DagRun, airflow_db  # noqa: F401  (a fixture, found by name)

from airflow_provider_sqlqueue.model.errors import ConfigurationError
from airflow_provider_sqlqueue.transport import MessagePump, Transport

PAGE = Path(__file__).resolve().parents[1] / "docs" / "getting-started.md"
SQLITE_ONLY = pytest.mark.parametrize("target", ["sqlite"], indirect=True)


def page() -> str:
    return PAGE.read_text(encoding="utf-8")


def tutorial_dag() -> str:
    found = re.search(r"<!-- tutorial-dag:[^>]*-->\s*```python\n(.*?)```", page(), flags=re.DOTALL)
    assert found, "docs/getting-started.md lost its DAG (the block after <!-- tutorial-dag -->)"
    return found.group(1)


def shown_log_lines() -> list[str]:
    """The package's lines in the page's expected output, without the source location and the rate."""
    found = re.search(r"## 4\. Run it.*?```text\n(.*?)```", page(), flags=re.DOTALL)
    assert found, "docs/getting-started.md lost the output of its run"
    lines = []
    for line in found.group(1).splitlines():
        if line.strip() == "...":
            continue
        message = re.sub(r"^\{[\w.]+:\d+\} INFO - ", "", line)
        lines.append(re.sub(r" \([0-9.]+/s\)$", "", message))
    return lines


def test_the_page_shows_the_lines_of_every_task() -> None:
    assert len(shown_log_lines()) >= 10, shown_log_lines()


@SQLITE_ONLY
@pytest.mark.slow
@pytest.mark.usefixtures("airflow_db")
def test_the_tutorial_dag_logs_what_the_page_shows(
    target: EngineTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "first_queue.py").write_text(tutorial_dag(), encoding="utf-8")
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(dags))
    run = DagRun(target, "first_queue")
    run.finish()
    assert run.process.returncode == 0 and run.state == "success", f"the tutorial's DAG failed:\n{run.output}"
    position = 0
    for shown in shown_log_lines():
        found = run.output.find(shown, position)
        assert found >= 0, f"{shown!r} not logged (after position {position}):\n{run.output}"
        position = found + len(shown)
    assert "Recoverable" not in run.output


@SQLITE_ONLY
def test_a_handlers_sqlalchemy_connection_is_what_the_page_says(transport: Transport) -> None:
    """SQLAlchemy 2.0 and later: a ``Connection`` in the receive's transaction; 1.4 (Airflow 3.0): refused
    with a ``ConfigurationError`` naming the DB-API connection instead, and the message is still handled."""
    orders = transport.queue("orders")
    orders.create()
    transport.queue("error").create()
    orders.send(b"order")
    outcomes: list[object] = []

    def handler(message, context) -> None:
        try:
            outcomes.append(context.sqlalchemy_connection.execute(sqlalchemy.text("SELECT 1")).scalar())
        except ConfigurationError as error:
            outcomes.append(str(error))

    MessagePump(orders, handler, idle_delay=0.1).run(until_empty=True, timeout=20)
    if sqlalchemy.__version__.startswith("1."):
        assert len(outcomes) == 1 and "needs SQLAlchemy 2.0" in str(outcomes[0]), outcomes
        assert "context.connection" in str(outcomes[0])
        assert "needs SQLAlchemy 2.0" in page()
    else:
        assert outcomes == [1]
    assert orders.count() == 0
