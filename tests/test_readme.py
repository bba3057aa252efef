"""The README's ten-line DAG runs as printed: through ``dag.test()``, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import EngineTarget
from test_airflow_dags import DagRun, airflow_db  # noqa: F401  (a fixture, found by name)

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_dag() -> str:
    text = README.read_text(encoding="utf-8")
    found = re.search(r"<!-- readme-dag:[^>]*-->\s*```python\n(.*?)```", text, flags=re.DOTALL)
    assert found, "README.md lost its ten-line DAG (the block after <!-- readme-dag -->)"
    return found.group(1)


def test_the_readme_dag_is_about_ten_lines() -> None:
    lines = [line for line in readme_dag().splitlines() if line.strip()]
    assert len(lines) <= 10, lines


@pytest.mark.slow
@pytest.mark.usefixtures("airflow_db")
def test_the_readme_dag_runs_as_printed(
    target: EngineTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "readme_dag.py").write_text(readme_dag(), encoding="utf-8")
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(dags))
    with target.open() as transport:
        for name in ("orders", "error"):
            transport.queue(name).create()
    run = DagRun(target, "orders_in_ten_lines")
    run.finish()
    assert run.process.returncode == 0 and run.state == "success", f"the README's DAG failed:\n{run.output}"
    assert re.search(r"message \S+ type - body \{\"order\": ?1\}", run.output), run.output
    with target.open() as transport:
        assert transport.queue("orders").count() == 0
