"""Smaller points of the Airflow surface (issue 15, point 10): the triggers close their hook off the
event loop, task-side modules read configuration through the Task SDK, and the built distribution carries
py.typed and no documentation link but a real one (there is none yet)."""

from __future__ import annotations

import ast
import asyncio
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")

from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_provider_sqlqueue.triggers.queue import PendingMessagesTrigger, QueueMessagesEventTrigger

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "airflow_provider_sqlqueue"


@pytest.fixture
def conn(target, monkeypatch: pytest.MonkeyPatch):
    for key, value in target.airflow_env().items():
        monkeypatch.setenv(key, value)
    with target.open() as transport:
        transport.queue("orders").create()
        yield transport


@pytest.fixture
def close_threads(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """For each SqlQueueHook.close: whether it ran on a thread with a running event loop."""
    on_loop: list[bool] = []
    close = SqlQueueHook.close

    def recording_close(self: SqlQueueHook) -> None:
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        close(self)

    monkeypatch.setattr(SqlQueueHook, "close", recording_close)
    return on_loop


def test_the_task_trigger_closes_its_hook_off_the_event_loop(conn, close_threads: list[bool]) -> None:
    conn.queue("orders").send_batch([b"a", b"b"])

    async def first() -> dict:
        run = PendingMessagesTrigger("orders", min_messages=2, poll_interval=0.1).run()
        payload = (await asyncio.wait_for(run.__anext__(), 20)).payload
        await run.aclose()  # what the triggerer does once the event is taken
        return payload

    assert asyncio.run(asyncio.wait_for(first(), 20))["depth"] == 2
    assert close_threads == [False]


def test_the_event_trigger_closes_its_hook_off_the_event_loop_when_cancelled(
    conn, close_threads: list[bool]
) -> None:
    conn.queue("orders").send(b"a")

    async def watch_then_cancel() -> dict:
        run = QueueMessagesEventTrigger("orders", poll_interval=0.1).run()
        payload = (await asyncio.wait_for(run.__anext__(), 20)).payload
        waiting = asyncio.ensure_future(run.__anext__())
        await asyncio.sleep(0.3)
        waiting.cancel()  # what the triggerer does to a trigger it no longer runs
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return payload

    assert asyncio.run(watch_then_cancel())["depth"] == 1
    assert close_threads == [False]


def test_task_side_modules_read_configuration_through_the_task_sdk() -> None:
    """``airflow.configuration`` is Airflow core's; workers of Airflow 3 may have only the Task SDK."""
    task_side = ["hooks", "sensors", "triggers", "operators", "queues"]
    offenders = []
    for folder in task_side:
        for path in (PACKAGE / folder).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [alias.name for alias in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                offenders += [
                    f"{path.relative_to(REPO)}: {name}" for name in names if name == "airflow.configuration"
                ]
    assert offenders == []
    from airflow.providers.common.compat.sdk import conf

    from airflow_provider_sqlqueue.sensors import queue as sensor_module

    assert sensor_module.conf is conf


# Imports that Airflow 3.0.6, the oldest supported release, lacks (measured there): the package takes conf
# and AirflowException from airflow.providers.common.compat.sdk, which answers with the Task SDK's where
# Airflow has them, and puts the other two behind an ImportError fallback.
MISSING_IN_AIRFLOW_3_0 = {
    ("airflow.sdk", "conf"),
    ("airflow.sdk", "BaseHook"),
    ("airflow.sdk.exceptions", None),
    ("airflow.sdk.observability.metrics.stats_utils", None),
    ("airflow.dag_processing.dagbag", None),
}


def test_the_package_imports_what_airflow_3_0_has_or_falls_back() -> None:
    """.ci/airflow-oldest runs the Airflow surface on Airflow 3.0.6; this keeps the imports it needs in
    the everyday run: an import Airflow 3.0 lacks sits in a ``try`` that catches ``ImportError``."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        guarded = {
            id(node)
            for handler in ast.walk(tree)
            if isinstance(handler, ast.Try)
            and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in handler.handlers
            )
            for statement in handler.body
            for node in ast.walk(statement)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or id(node) in guarded:
                continue
            for alias in node.names:
                if (node.module, alias.name) in MISSING_IN_AIRFLOW_3_0 or (node.module, None) in (
                    MISSING_IN_AIRFLOW_3_0
                ):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.module}.{alias.name}")
    assert offenders == []


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import shutil

    source = tmp_path_factory.mktemp("source") / "tree"
    ignored = shutil.ignore_patterns(
        ".git", "build", "*.egg-info", "__pycache__", ".venv", ".site", "benchmarks"
    )
    shutil.copytree(REPO, source, ignore=ignored)  # setuptools would reuse a build/ folder left in the tree
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("airflow_provider_sqlqueue-*.whl")
    return built


def test_the_wheel_carries_py_typed(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        assert "airflow_provider_sqlqueue/py.typed" in archive.namelist()


def test_the_distributions_metadata_names_no_documentation_link_that_is_not_the_docs(wheel: Path) -> None:
    """Airflow's providers page links the ``Documentation`` Project-URL as the provider's documentation;
    the docs are the MkDocs site built from docs/, hosted nowhere yet, so the metadata names none (Airflow
    shows no link: its discovery reads None) rather than the package index page it used to name."""
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(name).decode())
    # what airflow's providers discovery does with Project-URL entries (issue-59576 in its source)
    documentation = None
    for entry in metadata.get_all("Project-URL") or []:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "documentation":
            documentation = url.strip()
    assert documentation is None
    assert not any("pypi.org" in entry for entry in metadata.get_all("Project-URL") or [])
