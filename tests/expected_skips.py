"""pytest plugin: with ``--expected-skips=FILE``, any skip that FILE does not list fails the run.

A missing Java runtime, browser or driver skips whole modules; counted among the skips, a run that tested
nothing of Spark would stay green. CI (``bash .ci/test``) passes ``--expected-skips=.ci/expected-skips``;
a developer's own ``pytest`` or ``-k`` run is not affected unless it passes the option.

FILE has one expected skip per line: a test id (``*`` matches any run of characters, everything else,
``[`` included, matches itself), then `` # `` and why the CI machine skips it. Blank lines and lines
starting with ``#`` are comments. Skips at collection (``importorskip``, ``pytest.skip(...,
allow_module_level=True)``) are checked by the module's id; xfail is not a skip.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REASON_SEPARATOR = " # "
STATS_KEY = "skipped unexpectedly"


@dataclass(frozen=True)
class ExpectedSkip:
    """One line of the expected-skips file: a test-id pattern and why that skip is expected."""

    pattern: str
    reason: str
    line: int
    regex: re.Pattern[str] = field(compare=False, repr=False)

    @classmethod
    def parse(cls, text: str, line: int, path: Path) -> ExpectedSkip:
        pattern, separator, reason = text.partition(REASON_SEPARATOR)
        pattern, reason = pattern.strip(), reason.strip()
        if not separator or not pattern or not reason:
            raise pytest.UsageError(
                f"{path}:{line}: {text.strip()!r} is not an expected skip; write the test id, then "
                f"'{REASON_SEPARATOR}' and why this machine skips it, e.g. "
                "'tests/test_x.py::test_y[sqlite] # SQLite has no row locks'"
            )
        regex = re.compile(".*".join(re.escape(part) for part in pattern.split("*")))
        return cls(pattern, reason, line, regex)

    def matches(self, nodeid: str) -> bool:
        return self.regex.fullmatch(nodeid) is not None


def read_expected_skips(path: Path) -> list[ExpectedSkip]:
    """The file's expected skips; a usage error naming the file when it cannot be read or parsed."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise pytest.UsageError(
            f"--expected-skips: cannot read {path} ({error.strerror}); pass the list of skips this machine "
            "is expected to have (.ci/expected-skips), or leave the option out"
        ) from error
    return [
        ExpectedSkip.parse(line, number, path)
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The message ``pytest.skip`` was given (pytest keeps skips as ``(path, line, "Skipped: reason")``)."""
    longrepr = report.longrepr
    message = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return str(message).removeprefix("Skipped: ")


@dataclass
class UnexpectedSkip:
    nodeid: str
    reason: str


class SkipAudit:
    """Collects the skips that no line of the file expects, and fails the session on them."""

    def __init__(self, expected: list[ExpectedSkip], path: Path) -> None:
        self.expected = expected
        self.path = path
        self.unexpected: list[UnexpectedSkip] = []
        self.expected_seen = 0
        self._unexpected_reports: list[pytest.TestReport | pytest.CollectReport] = []

    def _check(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        if any(expected.matches(report.nodeid) for expected in self.expected):
            self.expected_seen += 1
            return
        self.unexpected.append(UnexpectedSkip(report.nodeid, skip_reason(report)))
        self._unexpected_reports.append(report)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            self._check(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.skipped:
            self._check(report)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.unexpected and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.unexpected:
            if self.expected_seen:
                terminalreporter.write_line(
                    f"expected skips: all {self.expected_seen} skip(s) of this run are listed in {self.path}"
                )
            return
        terminalreporter.section("unexpected skips", sep="=", red=True, bold=True)
        for skip in self.unexpected:
            terminalreporter.write_line(f"SKIPPED {skip.nodeid}: {skip.reason}", red=True)
        terminalreporter.write_line(
            f"{len(self.unexpected)} skip(s) not listed in {self.path} fail this run: fix what each "
            "reason names (install the missing tool or package), or, if this machine is meant to skip it, "
            f"add a line '<test id>{REASON_SEPARATOR}<why>' to {self.path}"
        )
        terminalreporter.stats.setdefault(STATS_KEY, []).extend(self._unexpected_reports)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("expected skips").addoption(
        "--expected-skips",
        metavar="FILE",
        default=None,
        help="fail the run on any skip not listed in FILE (one 'test-id-pattern # reason' a line); "
        "CI passes .ci/expected-skips. Empty: no check.",
    )


def pytest_configure(config: pytest.Config) -> None:
    option = config.getoption("expected_skips")
    if option:
        path = Path(option)
        config.pluginmanager.register(SkipAudit(read_expected_skips(path), path), "expected-skips-audit")
