"""Every published figure is rendered from committed data: docs/benchmarks.md from docs/benchmarks/*.json, and
the generated blocks of the other pages from docs/data/*.json (benchmarks/render.py). Each page must be what
its data renders to, and every data file must say where its figures come from (the run's commit and machine,
and where its output was copied from: none is old page text transcribed into JSON)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
DATA = ROOT / "docs" / "data"


@pytest.fixture(scope="module")
def render():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import render as module
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def test_every_page_matches_its_data(render) -> None:
    rendered = render.rendered_pages()
    names = (
        "reliability.md",
        "performance.md",
        "history/performance-tuning.md",
        "spark.md",
        "spark-exactly-once.md",
        "dba-maintenance.md",
        "history/deep-queues.md",
        "airflow-ui.md",
        "delayed-delivery.md",
        "history/delayed-delivery.md",
        "operating.md",
        "history/operating.md",
        "exactly-once.md",
    )
    pages = {ROOT / "docs" / name for name in names}
    pages.add(BENCHMARKS / "README.md")
    assert pages <= set(rendered)
    for page, text in rendered.items():
        assert page.read_text(encoding="utf-8") == text, f"{page.relative_to(ROOT)}: run benchmarks/render.py"


def test_the_check_command_reports_a_page_that_differs(render, tmp_path: Path, monkeypatch) -> None:
    """A figure typed into a generated block by hand is found, and the command says how to fix it."""
    page = tmp_path / "reliability.md"
    text = (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")
    data = json.loads((DATA / "reliability.json").read_text(encoding="utf-8"))
    sent = data["recorded"][data["soak"]["recorded"][0]]["messages"]
    assert f"| {sent:,} |" in text
    page.write_text(text.replace(f"| {sent:,} |", f"| {sent + 1:,} |"), encoding="utf-8")
    monkeypatch.setattr(render, "ROOT", tmp_path)
    monkeypatch.setattr(render, "BLOCK_PAGES", {page: render.BLOCK_PAGES[ROOT / "docs" / "reliability.md"]})
    monkeypatch.setattr(render, "DEFAULT_OUT", ROOT / "docs" / "benchmarks.md")
    assert render.check() == ["reliability.md"]


def test_a_page_without_its_markers_is_refused_with_what_to_add(render) -> None:
    from pages.blocks import MissingBlock, replace_blocks

    with pytest.raises(MissingBlock, match=r"generated block 'soak'.*end of generated block soak"):
        replace_blocks("# A page\n", {"soak": ("docs/data/x.json", ["| a |"])}, "docs/x.md")


def test_the_check_command_passes_on_the_committed_pages() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "render.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_run_says_where_its_figures_come_from() -> None:
    files = sorted(DATA.glob("*.json"))
    assert files, "no data files in docs/data"
    for path in files:
        runs = json.loads(path.read_text(encoding="utf-8"))["runs"]
        assert runs, path.name
        for name, run in runs.items():
            for key in ("commit", "machine", "source"):
                assert str(run.get(key, "")).strip(), f"{path.name}: run {name} lacks {key}"
            assert not run["source"].startswith("transcribed"), f"{path.name}: run {name} is transcribed"


def test_reliability_results_copied_from_a_raw_file_are_in_it_unchanged() -> None:
    data = json.loads((DATA / "reliability.json").read_text(encoding="utf-8"))
    named = [
        node for check in data["checks"] for result in check["results"] for node in result.get("recorded", [])
    ]
    assert sorted(named) == sorted(data["recorded"]), "a copied entry is missing or unused"
    for check in data["checks"]:
        for result in check["results"]:
            assert result["run"] in data["runs"], result
            if result.get("recorded"):
                assert set(result) == {"engine", "run", "recorded"}, "copied figures are read, not retyped"


def test_the_benchmarks_page_names_the_commit_a_run_records(render) -> None:
    from pages.benchmarks_page import page_text

    doc = json.loads((ROOT / "docs" / "benchmarks" / "results.json").read_text(encoding="utf-8"))
    doc["meta"].pop("commit", None)  # runs before run.py recorded it
    assert "| commit measured |" not in page_text(doc, None, "images/benchmarks.png", True)
    doc["meta"]["commit"] = "abc1234"
    assert "| commit measured | abc1234 |" in page_text(doc, None, "images/benchmarks.png", True)


def test_the_changes_table_of_performance_is_rendered_from_its_data(render) -> None:
    """The evidence column is filled from docs/data/performance.json and the runs' JSON, not typed in the
    page: a hand-edited figure is found, a run's ratio or drain rate is read from that run's own file, and a
    change whose runs' output was not kept shows no figure."""
    from pages.performance_history import UnknownFigure, changes_table

    page = ROOT / "docs" / "history" / "performance-tuning.md"
    text = page.read_text(encoding="utf-8")
    assert "0.87x → 1.60x of the raw multi-row `INSERT`" in text
    stale = text.replace("0.87x → 1.60x of the raw", "0.87x → 1.61x of the raw")
    assert render.replace_blocks(stale, render.performance_history.blocks(), "performance-tuning.md") == text
    data = json.loads((DATA / "performance.json").read_text(encoding="utf-8"))
    rows = {row["number"]: row for row in data["changes"]["rows"]}
    for row in rows.values():
        assert all(isinstance(value, dict) for value in row.get("figures", {}).values()), row["number"]
    lines = changes_table(data)
    assert lines[2].endswith("| - |")  # change 1: its runs' output was not kept
    rows[2]["evidence"], rows[2]["figures"], rows[2]["measured"] = "{after} µs", {"after": "0.4"}, []
    with pytest.raises(UnknownFigure, match=r"change 2: '0\.4' is typed"):
        changes_table(data)
    del rows[2]["evidence"]
    assert "0.87x → 1.60x of the raw multi-row `INSERT`; 0.89x → 1.69x of pgqueuer" in lines[2 + 12]
    assert "1M-row drain 26,500 → 37,500 msgs/s" in lines[2 + 13]
    rows[14]["figures"]["after"]["run"] = "first-idle-run"
    assert "1M-row drain 26,500 → 26,500 msgs/s" in changes_table(data)[2 + 13]
    for row in data["changes"]["rows"]:
        measured = row.get("measured", [])
        for run in measured if isinstance(measured, list) else [measured]:
            assert run in data["runs"], (row["number"], run)


def test_a_change_figure_naming_a_missing_target_is_refused(render) -> None:
    from pages.performance_history import UnknownFigure, changes_table

    data = json.loads((DATA / "performance.json").read_text(encoding="utf-8"))
    data["changes"]["rows"][12]["figures"]["raw_after"]["target"] = "no such target"
    expected = "change 13: run changes-12-14-run has no target 'no such target'"
    with pytest.raises(UnknownFigure, match=expected):
        changes_table(data)


def test_hand_measured_figures_in_prose_come_from_their_data(render) -> None:
    """The browser check's timings and peak memory and the deep drains are rendered from their data: a
    figure typed into a page is found."""
    ui = json.loads((DATA / "airflow-ui.json").read_text(encoding="utf-8"))["blocks"]["airflow-ui-duration"]
    [peak] = [line["figures"]["driver_peak_mb"] for line in ui if "driver_peak_mb" in line.get("figures", {})]
    for page_name, old, new in (
        ("airflow-ui.md", f"peak memory was {peak} MB", f"peak memory was {int(peak) + 1} MB"),
        ("dba-maintenance.md", "| 13.3 s | 0.90x |", "| 13.3 s | 0.95x |"),
    ):
        page = ROOT / "docs" / page_name
        text = page.read_text(encoding="utf-8")
        assert old in text, page_name
        blocks = render.BLOCK_PAGES[page]()
        assert render.replace_blocks(text.replace(old, new), blocks, page_name) == text


def test_a_transcribed_line_naming_an_undescribed_run_is_refused(render) -> None:
    from pages.transcribed_text import UnknownRun, block_lines

    data = json.loads((DATA / "airflow-ui.json").read_text(encoding="utf-8"))
    data["blocks"]["airflow-ui-duration"][0]["measured"] = "no-such-run"
    with pytest.raises(UnknownRun, match="names run 'no-such-run', not in runs"):
        block_lines(data, "airflow-ui-duration", "docs/data/airflow-ui.json")


def test_the_readme_summary_counts_lost_and_duplicated_from_the_reliability_data(render) -> None:
    from pages.reliability_page import lost_and_duplicated

    data = json.loads((DATA / "reliability.json").read_text(encoding="utf-8"))
    assert lost_and_duplicated(data) == (0, 0)
    data["recorded"][data["soak"]["recorded"][0]]["lost"] = 3
    assert lost_and_duplicated(data) == (3, 0)
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    assert "with lost = 0 and duplicated = 0" in text
    stale = text.replace("with lost = 0 and", "with lost = 1 and")
    assert render.replace_blocks(stale, render.BLOCK_PAGES[readme](), "README.md") == text


def test_the_sqlite_second_pass_tables_are_read_from_the_runs_json(render, tmp_path) -> None:
    """The before/after tables of the SQLite second pass come from the core_bench.py and sqlite_profile.py
    runs' own JSON: a figure changed in a run's file changes the table, and its verdict follows the ratio."""
    from pages.performance_history import core_comparison, profile_comparison

    data = json.loads((DATA / "performance.json").read_text(encoding="utf-8"))
    comparison = data["core_comparisons"]["sqlite-i18"]
    after_run = data["runs"][comparison["after"]]
    document = json.loads((ROOT / after_run["core"]).read_text(encoding="utf-8"))
    row = next(row for row in document["results"] if row["case"] == "send_batch")
    line = next(line for line in core_comparison(data, "sqlite-i18") if "send_batch" in line)
    assert f"**{row['ratio']:.2f}x** [{row['ratio_min']:.2f}-{row['ratio_max']:.2f}]" in line
    row["ratio"] = 0.123
    changed = tmp_path / "core.json"
    changed.write_text(json.dumps(document), encoding="utf-8")
    after_run["core"] = str(changed)  # an absolute path: ROOT / it is the file itself
    line = next(line for line in core_comparison(data, "sqlite-i18") if "send_batch" in line)
    assert "**0.12x**" in line and line.endswith("| MISS |")

    profiled = data["runs"][data["profile_comparisons"]["sqlite-i18"]["after"]]
    profile = json.loads((ROOT / profiled["profile"]).read_text(encoding="utf-8"))
    part = profile["parts"][0]
    assert f"| **{part['us']:.2f}** |" in profile_comparison(data, "sqlite-i18")[2]
    part["us"] = 123.456
    changed_profile = tmp_path / "profile.json"
    changed_profile.write_text(json.dumps(profile), encoding="utf-8")
    profiled["profile"] = str(changed_profile)
    assert "| **123.46** |" in profile_comparison(data, "sqlite-i18")[2]


def test_performance_keeps_no_transcribed_run() -> None:
    """docs/data/performance.json names only runs whose own output is committed: the runs transcribed from
    old page text are gone, with every figure that rested on them."""
    data = json.loads((DATA / "performance.json").read_text(encoding="utf-8"))
    for name, run in data["runs"].items():
        assert not run["source"].startswith("transcribed"), name
        files = [run[key] for key in ("results", "scale", "core", "profile") if key in run]
        assert files and all((ROOT / path).exists() for path in files), name
    assert "blocks" not in data and "tuning" not in data
    assert not (DATA / "core-bench-first-run.json").exists()


def test_the_performance_page_computes_its_verdicts_from_the_last_run(render) -> None:
    """The targets met, the misses, the peers' ceilings and what batching saves on docs/performance.md follow
    the last run's JSON; the page names the data file, not the commit or the date of the run."""
    from pages import performance_page
    from pages.throughput import compute_targets, value_text

    doc, scale = performance_page.load_run()
    page = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    assert doc["meta"]["commit"] not in page and doc["meta"]["date"][:10] not in page
    targets = compute_targets(doc, scale, issue18=True)
    met = sum(1 for target in targets if target["status"] == "PASS")
    assert f"**{met} of {len(targets)} targets met**" in page
    kombu = next(row for row in doc["peers"] if row["peer"] == "kombu" and row["engine"] == "postgresql")
    project = next(r for r in doc["core"] if r["engine"] == "postgresql" and r["case"] == "receive_4c")
    ceiling = project["raw_msgs_per_s"] / kombu["receive_msgs_per_s"]["median"]
    assert f"reaches {ceiling:.2f}x: the project runs at" in page
    kombu["receive_msgs_per_s"]["median"] = project["project_msgs_per_s"] / 12  # the project now 12x kombu
    targets = compute_targets(doc, scale, issue18=True)
    name = "PostgreSQL single-message receive, 4 consumers, vs kombu-sqlalchemy (4 consumers)"
    target = next(target for target in targets if target["target"] == name)
    assert target["status"] == "PASS" and 11.9 < target["value"] < 12.1
    peers = "\n".join(performance_page.peer_lines(targets))
    assert f"**{name}**: {value_text(target)} (wanted >= 10.0x, PASS)" in peers
    left = "\n".join(performance_page.left_lines(targets))
    assert "vs kombu-sqlalchemy" not in left.split("**Met by")[0]
    batch = next(r for r in doc["core"] if r["engine"] == "sqlite" and r["case"] == "send_batch")
    batch["project_cpu_us_per_msg"] = 43.0
    cpu = performance_page.cpu_lines(doc)
    assert any("a send of 100 per transaction costs 43.0 µs" in line for line in cpu)
