"""The Airflow UI check (tests/browser/airflow_ui_check.py, docs/airflow-ui.md) as a pytest test.

It starts a throwaway Airflow with the example DAGs and drives Debian's headless Chromium through the
connection form, a deferred sensor run and the provider's Queues page (as admin and as a viewer).
Skipped when /usr/bin/chromium or the ``playwright`` package is missing. Screenshots go to the
test's temporary folder (``.ci/ui-check`` refreshes docs/images instead).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BROWSER_DIR = Path(__file__).resolve().parent / "browser"
CHROMIUM = Path("/usr/bin/chromium")
TIME_LIMIT = 720  # the check's own limit; it stops Airflow and Chromium when it is reached

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
    pytest.mark.skipif(
        importlib.util.find_spec("playwright") is None, reason="needs the playwright package (the ui extra)"
    ),
    pytest.mark.timeout(TIME_LIMIT + 120),
]


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)  # the Queues page on it too
def test_airflow_ui_connection_form_deferred_sensor_and_queues_page(tmp_path: Path, target: Any) -> None:
    home = tmp_path / "airflow-home"
    command = [
        sys.executable,
        str(BROWSER_DIR / "airflow_ui_check.py"),
        "--images",
        str(tmp_path / "images"),
        "--home",
        str(home),
        "--timeout",
        str(TIME_LIMIT),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))}
    # The PostgreSQL database of the Queues page's second pass, password included: in the environment,
    # never on the command line.
    connection = target.airflow_connection()
    connection["extra"] = json.dumps(connection.get("extra") or {})
    env["SQLQUEUE_UI_CHECK_POSTGRES"] = json.dumps(
        {"url": target.url, "schema": target.schema, "connection": connection}
    )
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = process.communicate(timeout=TIME_LIMIT + 60)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)  # the check stops Airflow on SIGTERM
        try:
            output, _ = process.communicate(timeout=45)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
    finally:
        sys.path.insert(0, str(BROWSER_DIR))
        try:
            from airflow_stack import kill_leftovers
        finally:
            sys.path.remove(str(BROWSER_DIR))
        kill_leftovers(home)
    print(output)
    assert process.returncode == 0, f"the UI check failed (exit {process.returncode}):\n{output[-6000:]}"
    shots = {p.name for p in (tmp_path / "images").glob("airflow-ui-*.png")}
    docs = Path(__file__).resolve().parents[1] / "docs"
    shown = {
        name
        for page in docs.rglob("*.md")
        for name in re.findall(r"images/(airflow-ui-[\w-]+\.png)", page.read_text(encoding="utf-8"))
    }
    assert shown and shown <= shots, (
        f"the docs show screenshots the check did not take: {sorted(shown - shots)}"
    )
