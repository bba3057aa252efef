"""The reliability tests' figures (messages, faults injected, lost, duplicated, seconds), kept as JSON.

A test takes the ``figures`` fixture and calls it once its assertions have passed; each call merges one
entry, keyed by the test's node id, into the file named by ``SQLQUEUE_FIGURES`` (default
``build/reliability-figures.json``, which git ignores), with the machine and the commit. The published figures
are committed in docs/data/reliability.json (copied unchanged from such a file, each run saying which) and
rendered into docs/reliability.md by benchmarks/render.py. ``lost`` and ``duplicated`` are counts the test
made (``counted()``), never literals.
A test module asks for the fixture with ``pytest_plugins = ["reliability_figures"]``.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
FIGURES_ENV = "SQLQUEUE_FIGURES"


def figures_path() -> Path:
    return Path(os.environ.get(FIGURES_ENV) or REPO / "build" / "reliability-figures.json")


def machine() -> str:
    python = platform.python_version()
    return f"{socket.gethostname()} ({platform.machine()}, {os.cpu_count()} cores, Python {python})"


def commit() -> str:
    """The commit the tests ran from (``+changes`` when the work tree differed), or why it is unknown."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + ("+changes" if changed else "")


def counted(expected: Iterable[Hashable], received: Iterable[Hashable]) -> dict[str, int]:
    """``lost`` and ``duplicated`` counted from what was sent and what arrived, for ``figures(**...)``: a
    figure that restates the assertion (``lost=0``) would be published even if the count were never made."""
    arrivals = Counter(received)
    return {
        "lost": len(set(expected) - set(arrivals)),
        "duplicated": sum(count - 1 for count in arrivals.values() if count > 1),
    }


def write_figures(test_id: str, values: dict[str, Any], path: Path | None = None) -> dict[str, Any]:
    """Merge one test's figures into the file (under a lock: pytest-xdist workers may share it)."""
    path = path or figures_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {
        "recorded": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "commit": commit(),
        **values,
    }
    with open(path.with_suffix(path.suffix + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            existing = json.loads(path.read_text()) if path.exists() else {}
        except json.JSONDecodeError:
            existing = {}
        existing[test_id] = entry
        temporary = path.with_suffix(path.suffix + ".tmp")
        temporary.write_text(json.dumps(existing, indent=2, sort_keys=True) + "\n")
        temporary.replace(path)
    return entry


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[Callable[..., dict[str, Any]]]:
    """``figures(messages=..., faults_injected=..., **counted(sent, received), ...)``: call it after the
    assertions."""
    started = time.monotonic()

    def record(**values: Any) -> dict[str, Any]:
        values.setdefault("seconds", round(time.monotonic() - started, 1))
        entry = write_figures(request.node.nodeid, values)
        print(f"figures {request.node.nodeid}: {json.dumps(values, sort_keys=True)}")
        return entry

    yield record


def markdown_table(path: Path | None = None) -> str:
    """The figures file as a Markdown table (``python tests/reliability_figures.py``), for
    docs/reliability.md."""
    entries = json.loads((path or figures_path()).read_text())
    lines = [
        "| test | messages | faults injected | lost | duplicated | seconds | other figures |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    shown = {"messages", "faults_injected", "lost", "duplicated", "seconds", "recorded", "machine"}
    for test_id in sorted(entries):
        entry = entries[test_id]
        others = ", ".join(f"{key} {value}" for key, value in sorted(entry.items()) if key not in shown)
        name = test_id.replace("tests/", "").replace("::", " ")
        cells = [
            entry.get(key, "") for key in ("messages", "faults_injected", "lost", "duplicated", "seconds")
        ]
        lines.append(f"| `{name}` | " + " | ".join(str(cell) for cell in cells) + f" | {others} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
