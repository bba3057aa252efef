"""Counts the tests that ran against SQL Server (or Babelfish), per ODBC driver, and fails a run that
executed fewer than ``--sqlserver-min-executed`` through either driver.

A missing driver or server makes the SQL Server targets skip; the expected-skips list fails those, and this
floor catches the quieter loss: a renamed parameter or a narrowed selection that collects no SQL Server run
through one driver at all. CI's steps (.ci/test) and the SQL Server workflow (.ci/sqlserver-live) pass it.
"""

from __future__ import annotations

import pytest
from sqlserver_bed import DRIVER_NAMES


class LiveSuiteCounts:
    def __init__(self, floor: int) -> None:
        self.floor = floor
        self.counts: dict[str, dict[str, int]] = {driver: {} for driver in DRIVER_NAMES}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not (report.when == "call" or report.skipped or (report.failed and report.when == "setup")):
            return
        for driver in DRIVER_NAMES:
            if f"sqlserver-{driver}" in report.nodeid:
                by_outcome = self.counts[driver]
                by_outcome[report.outcome] = by_outcome.get(report.outcome, 0) + 1

    def executed(self, driver: str) -> int:
        return sum(n for outcome, n in self.counts[driver].items() if outcome != "skipped")

    def short(self) -> list[str]:
        """The drivers that executed fewer tests than the floor."""
        return [driver for driver in DRIVER_NAMES if self.executed(driver) < self.floor]

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.short() and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not any(self.counts.values()) and not self.floor:
            return
        terminalreporter.section("SQL Server live suite")
        for driver, by_outcome in self.counts.items():
            detail = ", ".join(f"{outcome} {n}" for outcome, n in sorted(by_outcome.items())) or "none"
            terminalreporter.write_line(
                f"through {DRIVER_NAMES[driver]}: {self.executed(driver)} executed ({detail})"
            )
        for driver in self.short():
            terminalreporter.write_line(
                f"through {DRIVER_NAMES[driver]}: {self.executed(driver)} executed, fewer than the "
                f"--sqlserver-min-executed={self.floor} this run requires: that fails the run",
                red=True,
            )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("sqlserver live suite").addoption(
        "--sqlserver-min-executed",
        metavar="N",
        type=int,
        default=0,
        help="fail the run unless at least N tests executed against SQL Server through each ODBC driver",
    )


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker sees only its share; the controller counts
        return
    config.pluginmanager.register(LiveSuiteCounts(config.getoption("sqlserver_min_executed")), "live-suite")
