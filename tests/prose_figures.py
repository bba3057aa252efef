"""Figures typed into the prose of the published pages.

Every measured figure on a page (a ratio, a rate, a duration, a size, a share) must come from committed data
through a generated block of ``benchmarks/render.py``; what a page's author types is not re-checked when
the code changes. This module finds the figures outside those blocks: ``typed_figures(text)`` yields each
one with its line. What is typed on purpose (a setting, a default, a target, the size of an input: not a
measurement) is listed per page in :data:`ALLOWED` with the reason, and an entry that no longer occurs is
reported too, so the list cannot outlive the text it excuses.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_GENERATED = re.compile(
    r"<!-- generated block (?P<name>[\w-]+):[^\n]*-->\n.*?<!-- end of generated block (?P=name) -->",
    re.DOTALL,
)
_FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1", re.DOTALL | re.MULTILINE)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_LINK_TARGET = re.compile(r"\]\([^)\s]*\)")
_NUMBER = r"\d[\d,]*(?:\.\d+)?"
_UNIT = (
    r"x|\u00d7|%|ms|µs|us|ns|s|sec|seconds?|min|minutes?|hours?|h|msgs/s|messages/s|rows/s|"
    r"messages per second|MB|GB|KB|kB|MiB|GiB|KiB|TB|cores busy"
)
FIGURE = re.compile(
    rf"(?<![\w.\-/])(?:about |≈ ?|~)?{_NUMBER}(?:\s?(?:-|\u2013|to)\s?{_NUMBER})?\s?(?:{_UNIT})(?![\w/])"
)


def prose(text: str) -> str:
    """``text`` without its generated blocks, code, comments and link targets, line numbers kept."""

    def blank(match: re.Match[str]) -> str:
        return "\n" * match.group(0).count("\n")

    for pattern in (_GENERATED, _FENCE, _COMMENT):
        text = pattern.sub(blank, text)
    return _LINK_TARGET.sub("]()", _CODE_SPAN.sub("``", text))


def typed_figures(text: str) -> Iterator[tuple[int, str]]:
    """Each figure in the prose of a page's ``text``: its line number and the figure as written."""
    for number, line in enumerate(prose(text).splitlines(), 1):
        for match in FIGURE.finditer(line):
            yield number, match.group(0).strip()


def published_pages() -> list[Path]:
    """The pages whose figures readers take as measured: the docs site and the two READMEs. The API pages
    are generated from docstrings, and docs/benchmarks.md is rendered whole from its data."""
    pages = [REPO / "README.md", REPO / "benchmarks" / "README.md"]
    pages += sorted(
        page
        for page in (REPO / "docs").rglob("*.md")
        if "api" not in page.relative_to(REPO / "docs").parts[:1] and page.name != "benchmarks.md"
    )
    return pages


SETTING = "a setting or a default of the package, a tool or a server, not a measurement"
INPUT = "the size, length or share of a test's or a run's input, not a measurement"
BOUND = "a limit the code or a test enforces, not a measurement"
ENGINE_LIMIT = "a limit of the engine or of a data type, from its documentation"
EXAMPLE = "an example threshold for an alert, not a measurement"
TARGET = "a performance target the benchmark judges against, not a measurement"

# page -> {figure as written: why it is not a measurement}
ALLOWED: dict[str, dict[str, str]] = {
    "benchmarks/README.md": {
        "0.5 s": INPUT,
        "256 kB": SETTING,
        "10,000 msgs/s": INPUT,
        "3 s": INPUT,
        "100 ms": SETTING,
        "1 s": SETTING,
        "5 s": SETTING,
        "2 %": SETTING,
        "1 MiB": SETTING,
        "0.8x": TARGET,
        "0.2 s": SETTING,
        "1 GiB": SETTING,
    },
    "docs/airflow-ui.md": {"20 s": SETTING},
    "docs/dba.md": {"10 MB": INPUT},
    "docs/dba-ddl.md": {"5 s": SETTING, "60 s": SETTING},
    "docs/dba-maintenance.md": {
        "1 KB": INPUT,
        "20 %": SETTING,
        "2 ms": SETTING,
        "0.5 ms": SETTING,
        "1 min": SETTING,
        "2 %": "PostgreSQL's own threshold, from its documentation",
        "128 MiB": SETTING,
        "256 kB": SETTING,
        "30 s": SETTING,
    },
    "docs/dba-troubleshooting.md": {"30 s": SETTING},
    "docs/history/deep-queues.md": {"0 to 0.5 ms": SETTING, "2 ms": SETTING, "0.5 ms": SETTING},
    "docs/history/performance-tuning.md": {"0.8x": TARGET, "100 ms": SETTING},
    "docs/cli.md": {"10 seconds": SETTING, "5 s": SETTING, "10 s": SETTING},
    "docs/concepts.md": {
        "30 seconds": SETTING,
        "15 minutes": "the lifetime of an Amazon RDS token, from AWS's documentation",
        "1 GiB": ENGINE_LIMIT,
        "1 MiB": ENGINE_LIMIT,
        "about 3 ms": ENGINE_LIMIT,
        "30 s": SETTING,
        "5 s": SETTING,
        "50 ms": SETTING,
        "1 s": SETTING,
        "0.1 s": BOUND,
        "10 s": BOUND,
    },
    "docs/concurrency.md": {
        "1 s": SETTING,
        "0.1 s": BOUND,
        "10 s": BOUND,
        "50 ms": SETTING,
        "400 ms": SETTING,
        "5 s": SETTING,
        "30 s": SETTING,
    },
    "docs/connections.md": {
        "30 s": SETTING,
        "10 s": SETTING,
        "15 minutes": "the lifetime of an Amazon RDS token, from AWS's documentation",
    },
    "docs/delayed-delivery.md": {
        "37 %": "the reference's own figure, quoted with its issue number; not measured here",
        "1 s": SETTING,
    },
    "docs/operating.md": {
        "15 s": SETTING,
        "1 s": SETTING,
        "5 min": EXAMPLE,
        "10 min": EXAMPLE,
        "30 min": EXAMPLE,
        "15 min": EXAMPLE,
    },
    "docs/operators-consume.md": {
        "5 seconds": "Airflow's grace period before SIGKILL, from its documentation"
    },
    "docs/operators-spark-submit.md": {"1 GiB": SETTING},
    "docs/performance.md": {"1 KB": INPUT},
    "docs/publish-subscribe.md": {"5 seconds": SETTING, "about 5 seconds": SETTING, "5 s": SETTING},
    "docs/reliability.md": {
        "60 s": INPUT,
        "300 s": INPUT,
        "15 s": INPUT,
        "20 MB": BOUND,
        "1 MB": INPUT,
        "10 MB": INPUT,
        "100 MB": INPUT,
    },
    "docs/spark.md": {"1 s": SETTING, "40%": INPUT, "1 KB": INPUT},
    "docs/spark-options.md": {"30 s": SETTING, "900 s": SETTING},
    "docs/spark-exactly-once.md": {"30 s": SETTING, "900 s": SETTING, "1 s": SETTING},
    "docs/triggers.md": {"30 s": SETTING},
    "docs/tuning-a-pump.md": {"1 s": SETTING, "0.1 s": BOUND},
}


def unexplained_figures(page: Path) -> list[str]:
    """The typed figures of ``page`` that :data:`ALLOWED` does not explain, as ``page:line: figure``."""
    name = page.relative_to(REPO).as_posix()
    allowed = ALLOWED.get(name, {})
    return [
        f"{name}:{line}: {figure}"
        for line, figure in typed_figures(page.read_text(encoding="utf-8"))
        if figure not in allowed
    ]


def stale_allowances() -> list[str]:
    """Entries of :data:`ALLOWED` whose figure no longer occurs in the prose of their page."""
    stale = []
    for name, figures in ALLOWED.items():
        page = REPO / name
        present = (
            {figure for _, figure in typed_figures(page.read_text(encoding="utf-8"))}
            if page.exists()
            else set()
        )
        stale += [f"{name}: {figure}" for figure in figures if figure not in present]
    return stale
