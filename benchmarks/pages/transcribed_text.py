"""Hand-written sentences and tables that state measured figures, with the figures kept in a data file of
docs/data/ beside the run that measured them: each line of a block is a template whose ``{named}`` fields
are filled from its ``figures``, and ``measured`` names the run in the file's ``runs``. Used for
docs/airflow-ui.md (docs/data/airflow-ui.json), whose figures were copied from the browser check's own
timings line and ``/usr/bin/time -v``."""

from __future__ import annotations

from typing import Any

from pages.blocks import load_data, run_link


class UnknownRun(ValueError):
    """A line of a block names a run its data file does not describe."""


def block_lines(data: dict[str, Any], name: str, source: str) -> list[str]:
    """The lines of block ``name``: each template filled with its figures, after checking that the run it
    names is described in the data's ``runs``."""
    lines = []
    for line in data["blocks"][name]:
        run = line.get("measured")
        if line.get("figures") and run not in data["runs"]:
            raise UnknownRun(f"{source}: block {name}: {line['text'][:40]!r} names run {run!r}, not in runs")
        lines.append(line["text"].format(**line.get("figures", {})))
    return lines


def data_blocks(data_file: str) -> dict[str, tuple[str, list[str]]]:
    data = load_data(data_file)
    source = f"docs/data/{data_file}"
    return {
        name: (source, [*block_lines(data, name, source), "", run_link(data_file)]) for name in data["blocks"]
    }


def airflow_ui_blocks() -> dict[str, tuple[str, list[str]]]:
    return data_blocks("airflow-ui.json")
