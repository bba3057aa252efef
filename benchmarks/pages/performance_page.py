"""docs/performance.md: the current targets table, read from the JSON of the last benchmark run beside the
first run on the idle machine, and the dated tuning tables of its history section, from
docs/data/performance.json."""

from __future__ import annotations

import json
from typing import Any

from pages.blocks import ROOT, load_data
from pages.throughput import compute_targets, ratio_text, value_text, wanted_text
from pages.transcribed_text import block_lines

SOURCE = "docs/data/performance.json"


def _run_scale(run: dict[str, Any]) -> dict[str, Any] | None:
    scale_path = ROOT / run["scale"]
    return json.loads(scale_path.read_text(encoding="utf-8")) if scale_path.exists() else None  # type: ignore[no-any-return]


def _run_targets(run: dict[str, Any]) -> list[dict[str, Any]]:
    results = json.loads((ROOT / run["results"]).read_text(encoding="utf-8"))
    return compute_targets(results, _run_scale(run))


def current_table(data: dict[str, Any]) -> list[str]:
    """Every target of the last run beside the first idle run: one row per target, from the runs' JSON."""
    runs = data["runs"]
    last, first = _run_targets(runs["last-run"]), _run_targets(runs["first-idle-run"])
    earlier = {target["target"]: target for target in first}
    met = sum(1 for target in last if target["status"] == "PASS")
    lines = [
        f"**{met} of {len(last)} targets met** in the last run ({runs['last-run']['when']}, "
        f"`{runs['last-run']['results']}`), against "
        f"{sum(1 for target in first if target['status'] == 'PASS')} in the first run on the idle machine "
        f"({runs['first-idle-run']['when']}, `{runs['first-idle-run']['results']}`), both on "
        f"{runs['last-run']['machine']}. Commits: the first idle run {runs['first-idle-run']['commit']}; "
        f"the last run {runs['last-run']['commit']}.",
        "",
        "| target | first idle run | last run | wanted | result (last run) | figures (last run) |",
        "|---|--:|--:|--:|:-:|---|",
    ]
    for target in last:
        before = earlier.get(target["target"])
        lines.append(
            f"| {target['target']} | {value_text(before) if before else '-'} | "
            f"**{value_text(target)}** | {wanted_text(target)} | "
            f"{target['status']} | {target['detail']} |"
        )
    return lines


def _number(value: float) -> str:
    return f"{value:,}"


def _part(part: dict[str, Any], emphasise: bool) -> str:
    if "ratio" in part and isinstance(part["ratio"], list):
        median, low, high = part["ratio"]
        text = f"{median:.2f}x"
        return f"{f'**{text}**' if emphasise else text} [{low:.2f}-{high:.2f}]"
    if "cpu" in part:
        raw, project = part["cpu"]
        return f"{part.get('prefix', '')}{raw} → {project}"
    if "range" in part:
        low, high = part["range"]
        return f"{low}-{high}"
    small, large = part["peek"]
    ratio = part["ratio"]
    ratio_cell = f"{ratio:,}x" if isinstance(ratio, int) else f"{ratio:.2f}x"
    if part.get("bold"):
        ratio_cell = f"**{ratio_cell}**"
    note = f"; {part['note']}" if part.get("note") else ""
    return f"{_number(small)} µs → {_number(large)} µs ({ratio_cell}{note})"


def tuning_table(table: dict[str, Any]) -> list[str]:
    """A before/after table of the tuning: the ratios of the tuned code in bold."""
    header = table["header"]
    lines = [
        "|" + "|".join(f" {name} " if name else " " for name in header) + "|",
        "|---|" + "--:|" * (len(header) - 1),
    ]
    for when, cells in table["rows"].items():
        texts = [
            cell.get("sep", " / ").join(_part(part, when == "after") for part in cell["parts"])
            + cell.get("suffix", "")
            for cell in cells
        ]
        lines.append(f"| {when} | " + " | ".join(texts) + " |")
    return lines


class UnknownFigure(ValueError):
    """A figure of the changes table names a run, target or drain its data does not hold."""


def _figure(figure: str | dict[str, Any], runs: dict[str, Any], row: int) -> str:
    """One figure of a change's evidence: transcribed text as it stands, or read from a run's JSON."""
    if isinstance(figure, str):
        return figure
    if figure.get("run") not in runs or "results" not in runs[figure["run"]]:
        raise UnknownFigure(f"change {row}: {figure!r} names no run with results in performance.json's runs")
    run = runs[figure["run"]]
    if "target" in figure:
        for target in _run_targets(run):
            if target["target"] == figure["target"]:
                return ratio_text(target["value"])
        raise UnknownFigure(f"change {row}: run {figure['run']} has no target {figure['target']!r}")
    wanted = figure["drain"]
    for result in (_run_scale(run) or {}).get("scale", []):
        for drain in result["drains"] if result["engine"] == wanted["engine"] else []:
            if drain["rows"] == wanted["rows"] and drain["autovacuum"] == wanted["autovacuum"]:
                return f"{round(drain['msgs_per_s'] / figure['round_to']) * figure['round_to']:,}"
    raise UnknownFigure(f"change {row}: run {figure['run']}'s scale JSON has no drain {wanted!r}")


def changes_table(data: dict[str, Any]) -> list[str]:
    """The history's table of changes, each with the evidence that it paid: the figures filled into the
    evidence sentence from the data, the measuring runs named in performance.json's runs."""
    lines = ["| # | change | where | evidence (before → after) |", "|--:|---|---|---|"]
    for row in data["changes"]["rows"]:
        number = row["number"]
        figures = {name: _figure(value, data["runs"], number) for name, value in row["figures"].items()}
        measured = row["measured"] if isinstance(row["measured"], list) else [row["measured"]]
        missing = [run for run in measured if run not in data["runs"]]
        if missing:
            raise UnknownFigure(f"change {number}: measured by {missing}, not in performance.json's runs")
        evidence = row["evidence"].format(**figures)
        lines.append(f"| {row['number']} | {row['change']} | {row['where']} | {evidence} |")
    return lines


def blocks() -> dict[str, tuple[str, list[str]]]:
    data = load_data("performance.json")
    run = data["runs"][data["tuning"]["run"]]
    return {
        "performance-current": (f"{SOURCE} and the benchmark runs' JSON it names", current_table(data)),
        "performance-tuning-run": (
            SOURCE,
            [f"Measured {run['when']} on {run['machine']}: {run['commit']}. Source: {run['source']}."],
        ),
        **{
            f"performance-tuning-{name}": (SOURCE, tuning_table(table))
            for name, table in data["tuning"]["tables"].items()
        },
        "performance-changes": (f"{SOURCE} and the benchmark runs' JSON it names", changes_table(data)),
        **{name: (SOURCE, block_lines(data, name, SOURCE)) for name in data["blocks"]},
    }
