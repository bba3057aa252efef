"""docs/runs.md: the record of every run whose figures a page publishes, one section per data file of
docs/data/ (commit, date, machine and its load, versions, settings, the command), so that the user pages
name only what a reader needs to weigh a figure (the engines, the machine's size) and link here for the rest.
Each section lists the pages whose generated blocks read that file, found from the blocks' own markers."""

from __future__ import annotations

import re
from typing import Any

from pages.blocks import DATA, ROOT, load_data
from pages.reliability_page import runs_covered

SOURCE = "docs/data/*.json"
SHOWN_ON = re.compile(r"<!-- generated block [^:]+: rendered by benchmarks/render\.py from ([^;]+);")
ENGINE_NAMES = {"postgresql": "PostgreSQL", "sqlite": "SQLite", "babelfish": "Babelfish"}


def pages_showing(data_file: str) -> list[str]:
    """The documentation pages (and benchmarks/README.md) whose generated blocks read ``data_file``."""
    pages = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "benchmarks" / "README.md"]
    shown = []
    for page in pages:
        sources = " ".join(SHOWN_ON.findall(page.read_text(encoding="utf-8")))
        if f"docs/data/{data_file}" in sources and page.name != "runs.md":
            shown.append(page)
    return [
        f"[{page.relative_to(ROOT / 'docs').as_posix()}]({page.relative_to(ROOT / 'docs').as_posix()})"
        if page.is_relative_to(ROOT / "docs")
        else f"`{page.relative_to(ROOT).as_posix()}`"
        for page in shown
    ]


def machine_text(run: dict[str, Any]) -> str:
    machine = run.get("machine")
    if machine is None or isinstance(machine, str):
        return machine or "not recorded"
    disk = machine.get("disk", {})
    virtual = ", a virtual machine" if machine.get("virtual_machine") else ""
    return (
        f"{machine['cpus']} cores ({machine['cpu']}, {machine.get('ram_gib', '?')} GiB, "
        f"{disk.get('fstype', 'unknown')} disk{virtual})"
    )


def load_text(run: dict[str, Any]) -> str | None:
    """The 1-minute load average at the start and the end, and whether other work shared the machine."""
    if "load_average_before" in run:
        before = run["load_average_before"][0]
        after = run.get("load_average_after")
        cpus = run["machine"]["cpus"] if isinstance(run.get("machine"), dict) else 2
        shared = "; other work shared the machine" if before > cpus / 2 else ""
        end = f", {after[0]:.1f} at the end" if after else ""
        return f"1-minute load average {before:.1f} at the start{end}{shared}"
    return str(run["load"]) if "load" in run else None


def settings_text(run: dict[str, Any]) -> str | None:
    versions = run.get("versions", {})
    parts = [f"{ENGINE_NAMES.get(name, name)} {version}" for name, version in versions.items()]
    parts += [
        f"{ENGINE_NAMES.get(key.removesuffix('_settings'), key.removesuffix('_settings'))} {value}"
        for key, value in run.items()
        if key.endswith("_settings")
    ]
    if "python" in run:
        parts.append(f"Python {run['python']}")
    return "; ".join(parts) or None


def run_line(name: str, run: dict[str, Any], covers: list[str]) -> str:
    parts = [f"- **{name}**: {run.get('when') or run.get('date', 'date not recorded')}"]
    parts.append(f"commit {run['commit']}" if "commit" in run else "commit not recorded")
    if "before_commit" in run:
        parts.append(f"compared with {run['before_commit']}'s package")
    parts.append(machine_text(run))
    parts += [text for text in (load_text(run), settings_text(run)) if text]
    if "engines" in run:
        parts.append(f"engines: {run['engines']}")
    line = "; ".join(parts) + "."
    command = run.get("command")
    source = run.get("source")
    if command:
        quoted = command.startswith(("`", "the "))
        line += f" Command: {command if quoted else f'`{command}`'}."
    if source:
        line += f" Source: {source}."
    if run.get("literal_zeros"):
        line += (
            " Written as a literal 0 after the exactness assertions passed, not counted (counted since): "
            + "; ".join(run["literal_zeros"])
            + "."
        )
    if covers:
        line += f" Its figures: {', '.join(covers)}."
    return line


def nested_runs(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every run a data file describes: its own, and those of the runs it keeps beside them (another
    engine's, the previous one)."""
    runs = list(data["runs"].items())
    for key in ("previous", "parent_same_hour"):
        if isinstance(data.get(key), dict) and "runs" in data[key]:
            runs += [(f"{name} ({key.replace('_', ' ')})", run) for name, run in data[key]["runs"].items()]
    for engine, measured in data.get("engines", {}).items():
        if isinstance(measured, dict) and "runs" in measured:
            runs += [
                (f"{name} ({ENGINE_NAMES.get(engine, engine)})", run)
                for name, run in measured["runs"].items()
            ]
    return runs


def section(data_file: str) -> list[str]:
    data = load_data(data_file)
    covered = runs_covered(data) if data_file == "reliability.json" else {}
    shown = pages_showing(data_file)
    lines = [f"## {data_file.removesuffix('.json')}", ""]
    lines.append(
        f"`docs/data/{data_file}`" + (f", shown on {', '.join(shown)}." if shown else ", shown on no page.")
    )
    lines.append("")
    lines += [run_line(name, run, covered.get(name, [])) for name, run in nested_runs(data)]
    return [*lines, ""]


def runs_lines() -> list[str]:
    lines: list[str] = []
    for path in sorted(DATA.glob("*.json")):
        lines += section(path.name)
    return lines[:-1]


def runs_blocks() -> dict[str, tuple[str, list[str]]]:
    return {"runs": (SOURCE, runs_lines())}
