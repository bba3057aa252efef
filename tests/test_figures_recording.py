"""The reliability tests record what they counted: ``lost`` and ``duplicated`` come from the messages sent and
received (``reliability_figures.counted``), never from literals that restate the assertions, and every
entry names the machine and the commit it was measured on."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from reliability_figures import counted, write_figures

TESTS = Path(__file__).resolve().parent


def _literal_counts(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "figures":
            for keyword in node.keywords:
                if keyword.arg in ("lost", "duplicated") and isinstance(keyword.value, ast.Constant):
                    found.append(f"{path.name}:{node.lineno} {keyword.arg}={keyword.value.value!r}")
    return found


def test_reliability_figures_are_counted_not_restated() -> None:
    """``figures(lost=0)`` would publish 0 whatever happened; ``counted(sent, received)`` is a count."""
    tests = sorted(TESTS.glob("test_*.py"))
    assert any("figures(" in path.read_text(encoding="utf-8") for path in tests)
    assert [found for path in tests for found in _literal_counts(path)] == []


def test_counted_counts_what_is_missing_and_what_came_twice() -> None:
    assert counted([1, 2, 3, 4], [1, 2, 2, 2, 3]) == {"lost": 1, "duplicated": 2}
    assert counted(["a"], ["a"]) == {"lost": 0, "duplicated": 0}


def test_an_entry_records_the_machine_and_the_commit(tmp_path: Path) -> None:
    path = tmp_path / "figures.json"
    write_figures("tests/x.py::test_y", {"messages": 3, **counted([1, 2, 3], [1, 2, 3])}, path)
    entry = json.loads(path.read_text())["tests/x.py::test_y"]
    assert entry["lost"] == 0 and entry["duplicated"] == 0 and entry["messages"] == 3
    assert entry["machine"] and len(entry["commit"].split("+")[0]) >= 7, entry
