"""Generated blocks inside hand-written pages: a renderer owns the text between its two markers, the page's
author owns the rest. ``render.py`` rewrites the blocks; ``render.py --check`` and
tests/test_rendered_pages.py compare them with what the committed data renders to."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
DATA = ROOT / "docs" / "data"


def begin_marker(name: str, source: str) -> str:
    return (
        f"<!-- generated block {name}: rendered by benchmarks/render.py from {source}; "
        "edit the data or the renderer, not this block -->"
    )


def end_marker(name: str) -> str:
    return f"<!-- end of generated block {name} -->"


def load_data(name: str) -> dict[str, Any]:
    """One committed data file of docs/data/."""
    return json.loads((DATA / name).read_text(encoding="utf-8"))  # type: ignore[no-any-return]


class MissingBlock(ValueError):
    """A page lacks the markers of a block its renderer writes."""


def replace_blocks(text: str, blocks: dict[str, tuple[str, list[str]]], page: str) -> str:
    """``text`` with each named block's lines replaced by ``blocks[name] = (source, lines)``."""
    for name, (source, lines) in blocks.items():
        pattern = re.compile(
            r"<!-- generated block " + re.escape(name) + r":[^\n]*-->\n.*?" + re.escape(end_marker(name)),
            re.DOTALL,
        )
        found = pattern.findall(text)
        if len(found) != 1:
            raise MissingBlock(
                f"{page}: expected one generated block {name!r}, found {len(found)}; put the two lines "
                f"{begin_marker(name, source)!r} and {end_marker(name)!r} where its table belongs"
            )
        body = "\n".join([begin_marker(name, source), *lines, end_marker(name)])
        start, end = pattern.search(text).span()  # type: ignore[union-attr]
        text = text[:start] + body + text[end:]
    return text


def machine_at_start(run: dict[str, Any]) -> str:
    """A run's machine and its load when it started (from the ``machine`` and ``load_average_before`` the
    benchmarks record), saying that other work shared it only when the load says so."""
    machine = run["machine"]
    load = run["load_average_before"][0]
    shared = " (other work shared the machine)" if load > machine["cpus"] / 2 else ""
    return (
        f"{machine['cpus']} cores ({machine['cpu']}, {machine['disk'].get('fstype', 'unknown')} disk), a "
        f"1-minute load average of {load:.1f} at the start{shared}"
    )


def machine_brief(run: dict[str, Any]) -> str:
    """The machine as a user page names it (its cores, processor and disk): what a reader needs to weigh
    the figures. The run itself (commit, date, load) is told on docs/runs.md, which ``run_link`` points to."""
    machine = run["machine"]
    return (
        f"{machine['cpus']} cores ({machine['cpu']}, {machine.get('disk', {}).get('fstype', 'unknown')} disk)"
    )


def run_link(data_file: str) -> str:
    """The sentence that sends a user page's reader to the run behind its figures, on docs/runs.md."""
    stem = data_file.removesuffix(".json")
    return (
        f"The commit, date and machine load of each run: [Runs behind the figures](runs.md#{stem}); every "
        f"recorded figure: `docs/data/{data_file}`."
    )
