"""docs/history/performance-tuning.md: the targets of the first run on the idle machine, of the run after
changes 12-14 and of the last run side by side, the last run's SQLite finishing times, the changes table and
the before/after tables of the SQLite passes, each read from the runs' own JSON that
docs/data/performance.json names (with each run's commit, date and machine)."""

from __future__ import annotations

import json
from typing import Any

from pages.blocks import ROOT, load_data
from pages.throughput import compute_targets, ratio_text, value_text, wanted_text

SOURCE = "docs/data/performance.json"


def _run_scale(run: dict[str, Any]) -> dict[str, Any] | None:
    scale_path = ROOT / run["scale"]
    return json.loads(scale_path.read_text(encoding="utf-8")) if scale_path.exists() else None  # type: ignore[no-any-return]


def _run_targets(run: dict[str, Any]) -> list[dict[str, Any]]:
    results = json.loads((ROOT / run["results"]).read_text(encoding="utf-8"))
    return compute_targets(results, _run_scale(run))


HISTORY_RUNS = ("first-idle-run", "changes-12-14-run", "last-run")


def targets_across_runs(data: dict[str, Any]) -> list[str]:
    """Every target of the last run beside the same target in the earlier runs: one row per target, from
    the runs' JSON, with each run's commit, date and machine under the table."""
    runs = data["runs"]
    by_run = {name: {t["target"]: t for t in _run_targets(runs[name])} for name in HISTORY_RUNS}
    last = _run_targets(runs[HISTORY_RUNS[-1]])
    headers = ("first idle run", "after changes 12-14", "last run")
    lines = [
        "| target | " + " | ".join(headers) + " | wanted |",
        "|---|" + "--:|" * len(headers) + "--:|",
    ]
    for target in last:
        cells = []
        for name in HISTORY_RUNS:
            earlier = by_run[name].get(target["target"])
            cells.append(value_text(earlier) if earlier else "-")
        lines.append(f"| {target['target']} | " + " | ".join(cells) + f" | {wanted_text(target)} |")
    lines.append("")
    for header, name in zip(headers, HISTORY_RUNS, strict=True):
        met = sum(1 for target in by_run[name].values() if target["status"] == "PASS")
        run = runs[name]
        lines.append(
            f"- **{header}**: {met} of {len(by_run[name])} met; {run['when']}, `{run['results']}` "
            f"(scale targets `{run['scale']}`); commit {run['commit']}; {run['machine']}."
        )
    return lines


def finishes_table(data: dict[str, Any]) -> list[str]:
    """The last run's SQLite multi-process cases, round by round, from the run's own JSON: when the last
    message was received (what the case is timed by) and when the first and the last process finished."""
    run = data["runs"]["last-run"]
    results = json.loads((ROOT / run["results"]).read_text(encoding="utf-8"))
    lines = [
        "| case | round | raw msgs/s | raw: last message; processes done (s) "
        "| project msgs/s | project: last message; processes done (s) |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for row in results["core"]:
        if row["engine"] != "sqlite" or row["consumers"] < 2:
            continue
        for number, sample in enumerate(row["rounds"], start=1):
            cells = []
            for impl in ("raw", "project"):
                measured = sample[impl]
                finished = measured.get("finished_s")
                if not finished or "all_done_seconds" not in measured:
                    raise ValueError(f"{run['results']}: {row['case']} round {number} has no finishing times")
                cells += [
                    f"{measured['msgs_per_s']:,.0f}",
                    f"{measured['seconds']:.3f}; {finished[0]:.3f} → {finished[-1]:.3f}",
                ]
            lines.append(f"| {row['label']} | {number} | " + " | ".join(cells) + " |")
    lines += ["", f"From `{run['results']}` ({run['when']}, commit {run['commit']})."]
    return lines


class UnknownFigure(ValueError):
    """A figure of the changes table names a run, target or drain its data does not hold."""


def _figure(figure: str | dict[str, Any], runs: dict[str, Any], row: int) -> str:
    """One figure of a change's evidence, read from a run's JSON."""
    if isinstance(figure, str):
        raise UnknownFigure(f"change {row}: {figure!r} is typed; a figure names the run it is read from")
    if "part" in figure:
        if figure.get("run") not in runs or "profile" not in runs[figure["run"]]:
            raise UnknownFigure(f"change {row}: {figure!r} names no run with a profile in performance.json")
        profile = json.loads((ROOT / runs[figure["run"]]["profile"]).read_text(encoding="utf-8"))
        for part in profile["parts"]:
            if part["key"] == figure["part"]:
                return f"{part['us']:.2f}"
        raise UnknownFigure(f"change {row}: run {figure['run']}'s profile has no part {figure['part']!r}")
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
    """The table of changes, each with the evidence that it paid where a run's JSON holds it: the figures
    filled into the evidence sentence from the runs' JSON named in performance.json's runs; a change whose
    runs' output was not kept gets a dash."""
    lines = ["| # | change | where | evidence (before → after) |", "|--:|---|---|---|"]
    for row in data["changes"]["rows"]:
        number = row["number"]
        if "evidence" not in row:
            lines.append(f"| {number} | {row['change']} | {row['where']} | - |")
            continue
        figures = {name: _figure(value, data["runs"], number) for name, value in row["figures"].items()}
        measured = row["measured"] if isinstance(row["measured"], list) else [row["measured"]]
        missing = [run for run in measured if run not in data["runs"]]
        if missing:
            raise UnknownFigure(f"change {number}: measured by {missing}, not in performance.json's runs")
        evidence = row["evidence"].format(**figures)
        lines.append(f"| {row['number']} | {row['change']} | {row['where']} | {evidence} |")
    return lines


def _core_run(run: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A core_bench.py run's metadata and its rows by engine and case (``"sqlite:send_batch"``)."""
    document = json.loads((ROOT / run["core"]).read_text(encoding="utf-8"))
    return document["meta"], {f"{row['engine']}:{row['case']}": row for row in document["results"]}


def _core_cells(row: dict[str, Any] | None, emphasise: bool) -> list[str]:
    if row is None:
        return ["-", "-"]
    ratio = f"{row['ratio']:.2f}x"
    return [
        f"{f'**{ratio}**' if emphasise else ratio} [{row['ratio_min']:.2f}-{row['ratio_max']:.2f}]",
        f"{row['raw_cpu_us_per_msg']:.1f} → {row['project_cpu_us_per_msg']:.1f}",
    ]


def _core_provenance(name: str, run: dict[str, Any], meta: dict[str, Any]) -> str:
    load = meta["load_average_before"][0]
    return (
        f"{name}: commit {meta['commit']}, {meta['date']}, {meta['repeat']} rounds, "
        f"{meta['seconds']:,} s, 1-minute load average {load:.2f} at the start (`{run['core']}`)"
    )


def core_comparison(data: dict[str, Any], name: str) -> list[str]:
    """Two core_bench.py runs of the same cases, before and after a change, from their own JSON: the
    median project/raw ratio of the rounds with its range, and the client CPU per message."""
    comparison = data["core_comparisons"][name]
    runs = data["runs"]
    (before_meta, before), (after_meta, after) = (
        _core_run(runs[comparison[side]]) for side in ("before", "after")
    )
    target = comparison["target"]
    lines = [
        "| case | before | CPU µs/msg raw → project | after | CPU µs/msg raw → project "
        f"| ≥ {target}x (after) |",
        "|---|--:|--:|--:|--:|:-:|",
    ]
    for key in comparison["cases"]:
        row = after[key]
        verdict = "PASS" if row["ratio"] >= target else "MISS"
        lines.append(
            f"| {row['engine_label']} {row['label']} | "
            + " | ".join([*_core_cells(before.get(key), False), *_core_cells(row, True)])
            + f" | {verdict} |"
        )
    at_target = [
        sum(1 for key in comparison["cases"] if key in side and side[key]["ratio"] >= target)
        for side in (before, after)
    ]
    cases = len(comparison["cases"])
    lines += [
        "",
        f"At or above {target}x: {at_target[0]} of {cases} cases before, {at_target[1]} of {cases} after.",
        "",
        f"{_core_provenance('Before', runs[comparison['before']], before_meta)}; "
        f"{_core_provenance('after', runs[comparison['after']], after_meta)}. {comparison['note']}",
    ]
    return lines


def profile_comparison(data: dict[str, Any], name: str) -> list[str]:
    """Two sqlite_profile.py runs, before and after a change, part by part, from their own JSON."""
    comparison = data["profile_comparisons"][name]
    runs = data["runs"]
    documents = {
        side: json.loads((ROOT / runs[comparison[side]]["profile"]).read_text(encoding="utf-8"))
        for side in ("before", "after")
    }
    before = {part["key"]: part for part in documents["before"]["parts"]}
    lines = ["| part | unit | before | after |", "|---|---|--:|--:|"]
    for part in documents["after"]["parts"]:
        earlier = before.get(part["key"])
        earlier_text = f"{earlier['us']:.2f}" if earlier else "-"
        lines.append(f"| {part['label']} | {part['unit']} | {earlier_text} | **{part['us']:.2f}** |")
    provenance = "; ".join(
        f"{side}: commit {meta['commit']}, {meta['date']}, 1-minute load average "
        f"{meta['load_average_before'][0]:.2f} at the start (`{runs[comparison[side]]['profile']}`)"
        for side, meta in ((side, documents[side]["meta"]) for side in ("before", "after"))
    )
    return [*lines, "", f"{provenance[0].upper()}{provenance[1:]}. {comparison['note']}"]


def blocks() -> dict[str, tuple[str, list[str]]]:
    data = load_data("performance.json")
    return {
        "performance-history-targets": (
            f"{SOURCE} and the benchmark runs' JSON it names",
            targets_across_runs(data),
        ),
        "performance-sqlite-finishes": (
            f"{SOURCE} and the benchmark runs' JSON it names",
            finishes_table(data),
        ),
        "performance-changes": (f"{SOURCE} and the benchmark runs' JSON it names", changes_table(data)),
        **{
            f"performance-core-{name}": (
                f"{SOURCE} and the core_bench.py runs' JSON it names",
                core_comparison(data, name),
            )
            for name in data.get("core_comparisons", {})
        },
        **{
            f"performance-profile-{name}": (
                f"{SOURCE} and the sqlite_profile.py runs' JSON it names",
                profile_comparison(data, name),
            )
            for name in data.get("profile_comparisons", {})
        },
    }
