"""User pages state figures, not run records: a run's commit, id, date-stamped name and the machine's load
average belong on docs/runs.md, docs/benchmarks.md, the history pages and the CHANGELOG, where
benchmarks/render.py puts them. A page that quotes one ages with every new run and tells a reader about our
process instead of the product; this test finds them as they are written: commits that really exist in this
repository's history (asked of git) or that a data file records for a run, the run ids the data files name,
load averages and our own issue numbers (the reference's are written ``#1614``)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RECORD_PAGES = {"benchmarks.md", "runs.md", "changelog.md"}
HEX_WORD = re.compile(r"(?<![-\w./])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![-\w])")
LOAD_AVERAGE = re.compile(r"load average", re.IGNORECASE)
OUR_ISSUE = re.compile(r"\b[Ii]ssues? \d+")


def user_pages() -> list[Path]:
    pages = [
        page
        for page in sorted(DOCS.rglob("*.md"))
        if page.name not in RECORD_PAGES and "history" not in page.relative_to(DOCS).parts
    ]
    return [*pages, ROOT / "README.md"]


def run_ids() -> set[str]:
    """The run ids of docs/data/, except those that are only a data file's name (``spark-drain``)."""
    ids: set[str] = set()
    for path in (DOCS / "data").glob("*.json"):
        ids |= set(json.loads(path.read_text(encoding="utf-8"))["runs"])
    return ids - {path.stem for path in (DOCS / "data").glob("*.json")}


def recorded_commits() -> set[str]:
    """The commits the data files record for their runs (``commit``, ``before_commit``, ...), some of which
    may not be in this clone's history."""

    def walk(value: object, key: str = "") -> set[str]:
        if isinstance(value, dict):
            return set().union(*(walk(item, name) for name, item in value.items()))
        if isinstance(value, list):
            return set().union(*(walk(item, key) for item in value))
        if isinstance(value, str) and "commit" in key:
            return set(HEX_WORD.findall(value))
        return set()

    paths = [*(DOCS / "data").glob("*.json"), *(DOCS / "benchmarks").glob("*.json")]
    return set().union(*(walk(json.loads(path.read_text(encoding="utf-8"))) for path in paths))


def commits_of_this_repository(words: set[str]) -> set[str]:
    """The words that name a commit of this repository: git answers for each, in one call."""
    if not words:
        return set()
    ordered = sorted(words)
    answer = subprocess.run(
        ["git", "cat-file", "--batch-check"],
        input="".join(f"{word}^{{commit}}\n" for word in ordered),
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    found = answer.stdout.splitlines()
    assert len(found) == len(ordered), answer.stdout
    return {word for word, line in zip(ordered, found, strict=True) if line.split()[1:2] == ["commit"]}


def run_records(page: Path, ids: set[str]) -> list[str]:
    """Each run record on ``page``, as ``line number: what``."""
    lines = page.read_text(encoding="utf-8").splitlines()
    hex_words = {match.group(0) for line in lines for match in HEX_WORD.finditer(line)}
    commits = commits_of_this_repository(hex_words) | (hex_words & recorded_commits())
    found = []
    for number, line in enumerate(lines, 1):
        found += [f"{number}: commit {word}" for word in HEX_WORD.findall(line) if word in commits]
        found += [f"{number}: run id {run}" for run in sorted(ids) if run in line]
        found += [f"{number}: {match}" for match in LOAD_AVERAGE.findall(line)]
        found += [f"{number}: {match}" for match in OUR_ISSUE.findall(line)]
    return found


def test_the_repository_history_is_there_to_ask() -> None:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    assert head.returncode == 0, "these checks ask git which words are commits: run them in a clone"
    assert commits_of_this_repository({head.stdout.strip()}) == {head.stdout.strip()}


@pytest.mark.parametrize("page", user_pages(), ids=lambda page: page.relative_to(ROOT).as_posix())
def test_a_user_page_holds_no_run_record(page: Path) -> None:
    assert run_records(page, run_ids()) == [], (
        f"{page.relative_to(ROOT)} carries run records; render the figure's provenance on docs/runs.md "
        "(benchmarks/pages/runs_page.py) and link it with blocks.run_link"
    )


def test_the_check_finds_each_kind_of_run_record(tmp_path: Path) -> None:
    head = subprocess.run(
        ["git", "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.strip()
    run = sorted(run_ids())[0]
    page = tmp_path / "page.md"
    page.write_text(
        f"Measured at {head}, a 1-minute Load average of 0.4.\nRun {run}; see issue 65.\n"
        "The reference's issue #1614 and a message id 9b2f3c1a-0c4e-4d6f-8a1b-2c3d4e5f6a7b are not.\n",
        encoding="utf-8",
    )
    assert run_records(page, run_ids()) == [
        f"1: commit {head}",
        "1: Load average",
        f"2: run id {run}",
        "2: issue 65",
    ]
