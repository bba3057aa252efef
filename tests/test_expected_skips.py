"""The expected-skips plugin (tests/expected_skips.py), run on small test files through ``pytester``."""

from __future__ import annotations

import pytest

SKIPS = """
import pytest

@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_rows(engine):
    if engine == "sqlite":
        pytest.skip("SQLite has no row locks")

@pytest.mark.skipif(True, reason="needs Debian's chromium")
def test_browser():
    pass

@pytest.mark.xfail(reason="a known bug", strict=True)
def test_known_bug():
    assert False

def test_runs():
    pass
"""

JAVA_MODULE = """
import pytest
pytest.skip("Spark needs a Java runtime", allow_module_level=True)

def test_spark():
    pass
"""


def run(pytester: pytest.Pytester, expected: str | None, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_rows=SKIPS)
    options = ["-p", "expected_skips", "-ra", *args]
    if expected is not None:
        (pytester.path / "expected-skips").write_text(expected, encoding="utf-8")
        options.append("--expected-skips=expected-skips")
    return pytester.runpytest(*options)


def test_listed_skips_pass_and_an_xfail_is_not_a_skip(pytester: pytest.Pytester) -> None:
    result = run(
        pytester,
        "# comment\n\ntest_rows.py::test_rows[sqlite] # SQLite has no row locks\n"
        "test_rows.py::test_browser # no browser on CI\n",
    )
    result.assert_outcomes(passed=2, skipped=2, xfailed=1)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["expected skips: all 2 skip(s) of this run are listed in expected-skips"])


def test_an_unlisted_skip_fails_the_run_naming_the_test_and_its_reason(pytester: pytest.Pytester) -> None:
    result = run(pytester, "test_rows.py::test_rows[sqlite] # SQLite has no row locks\n")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*= unexpected skips =*",
            "SKIPPED test_rows.py::test_browser: needs Debian's chromium",
            "1 skip(s) not listed in expected-skips fail this run: *",
            "*2 passed, 2 skipped, 1 xfailed, 1 skipped unexpectedly*",
        ]
    )
    result.stdout.no_fnmatch_line("SKIPPED test_rows.py::test_rows[[]sqlite[]]: *")


def test_a_listed_parameter_covers_only_itself_and_a_star_matches_any_characters(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_java=JAVA_MODULE)
    listed = "test_rows.py::test_rows[postgresql] # another one\ntest_rows.py::test_b*ser # no browser\n"
    result = run(pytester, listed)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*= unexpected skips =*",
            "SKIPPED test_java.py: Spark needs a Java runtime",
            "SKIPPED test_rows.py::test_rows[[]sqlite[]]: SQLite has no row locks",
        ]
    )
    result.stdout.no_fnmatch_line("SKIPPED test_rows.py::test_browser: *")


def test_a_module_skipped_at_collection_passes_only_when_listed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_java=JAVA_MODULE)
    result = run(
        pytester,
        "test_java.py # no Java on this machine\ntest_rows.py::* # every skip of that file is expected\n",
    )
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=2, skipped=3, xfailed=1)


def test_only_skips_fail_a_run_that_selects_nothing_else(pytester: pytest.Pytester) -> None:
    result = run(pytester, "test_rows.py::test_rows[sqlite] # SQLite has no row locks\n", "-k", "browser")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["SKIPPED test_rows.py::test_browser: needs Debian's chromium"])


@pytest.mark.parametrize("option", [[], ["--expected-skips="]], ids=["absent", "empty"])
def test_without_the_option_skips_do_not_fail_a_developer_run(
    pytester: pytest.Pytester, option: list[str]
) -> None:
    result = run(pytester, None, *option)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=2, skipped=2, xfailed=1)
    result.stdout.no_fnmatch_line("*unexpected skips*")


def test_a_line_without_a_reason_is_a_usage_error_saying_what_to_write(pytester: pytest.Pytester) -> None:
    result = run(pytester, "test_rows.py::test_browser\n")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*expected-skips:1: 'test_rows.py::test_browser' is not an expected skip; write the test id, then*"]
    )


def test_a_missing_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_rows=SKIPS)
    result = pytester.runpytest("-p", "expected_skips", "--expected-skips=nowhere")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--expected-skips: cannot read nowhere (No such file or directory)*"])
