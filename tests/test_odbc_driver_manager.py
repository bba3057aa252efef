"""The ODBC driver manager's own reading of a connection string, held against the real unixODBC.

``transport/odbc_string.py`` models how unixODBC 2.3.11 reads the string pyodbc hands it (each UTF-16 unit
cut to its low byte, text after a closing brace starting a new pair, the last DRIVER winning). Here the real
driver manager is the judge: strings as this package used to write them load a marker library (the attack
was real), the model predicts each of those loads, and every string :func:`render_odbc` writes, for values
drawn by hypothesis from the characters that matter, makes the driver manager try the driver it was given
and no other (its "Can't open lib" error names the library it tried; none of them exists, so nothing loads).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("pyodbc", reason="the mssql extra is not installed")

import pyodbc

from airflow_provider_sqlqueue.spark.config import join_credentials, split_credentials
from airflow_provider_sqlqueue.transport import ConfigurationError, open_transport
from airflow_provider_sqlqueue.transport.odbc_string import (
    driver_manager_pairs,
    driver_manager_refusal,
    odbc_pairs,
    reduced,
    render_odbc,
)

NO_DRIVER = "/nonexistent/libsqlqueue-chosen.so"
LIBRARY_SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void loaded(void) {
    const char *marker = getenv("SQLQUEUE_TEST_DRIVER_MARKER");
    if (marker) { FILE *file = fopen(marker, "w"); if (file) { fputs("loaded\n", file); fclose(file); } }
}
"""


def as_the_package_wrote_it(pairs: list[tuple[str, str]]) -> str:
    """The writing this package used before it read strings as the driver manager does: braces only for
    the ASCII ``;{}=`` and white space at the ends."""

    def value(text: str) -> str:
        if any(char in text for char in ";{}=") or text != text.strip():
            return "{" + text.replace("}", "}}") + "}"
        return text

    return ";".join(f"{key}={value(text)}" for key, text in pairs)


def old_strings(library: str) -> dict[str, str]:
    """Connection strings the package wrote (or took as they were) that name ``library`` to the driver
    manager, though this package's own reading (odbc_pairs) finds the chosen driver alone."""
    server = [("DRIVER", NO_DRIVER), ("SERVER", "127.0.0.1,1"), ("UID", "sa")]
    return {
        "U+013B/U+013D in a password": as_the_package_wrote_it(
            [*server, ("PWD", f"x\u013bDRIVER\u013d{library}")]
        ),
        "U+017D closing a braced password": as_the_package_wrote_it(
            [*server, ("PWD", f"x\u017d;DRIVER={library};")]
        ),
        "text after a closing brace": f"DRIVER={NO_DRIVER};SERVER=127.0.0.1,1;APP={{a}}DRIVER={library}",
        "a keyword spelled with U+0144": f"DRIVER={NO_DRIVER};SERVER=127.0.0.1,1;\u0144RIVER={library}",
    }


CASES = list(old_strings("x"))

_CONNECT = """
import sys, pyodbc
try:
    pyodbc.connect(sys.stdin.read(), timeout=2)
except Exception as error:
    print(error)
"""


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.fail("needs a C compiler to build the marker library (.ci/setup.sh installs gcc)")
    folder = tmp_path_factory.mktemp("dm")
    source = folder / "marker.c"
    source.write_text(LIBRARY_SOURCE)
    built = folder / "libmarker.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(built), str(source)], check=True)
    return built


@pytest.mark.parametrize("case", CASES)
def test_the_driver_manager_loaded_the_library_from_strings_the_package_wrote(
    case: str, library: Path, tmp_path: Path
) -> None:
    """The attack was real on this machine's unixODBC, and the model reads each string as it does."""
    marker = tmp_path / "loaded"
    text = old_strings(str(library))[case]
    assert [value for key, value in odbc_pairs(text) if key == "DRIVER"] == [NO_DRIVER]
    predicted = [value for key, value in driver_manager_pairs(text) if key.upper() == "DRIVER"][-1]
    assert predicted == str(library)
    assert driver_manager_refusal(text, [NO_DRIVER]) is not None
    env = {"PATH": "/usr/bin:/bin", "SQLQUEUE_TEST_DRIVER_MARKER": str(marker)}
    subprocess.run(
        [sys.executable, "-c", _CONNECT], input=text, text=True, env=env, timeout=60, capture_output=True
    )
    assert marker.exists(), f"{case}: the driver manager did not load the library"


def tried_library(text: str) -> str:
    """The library the driver manager tried for ``text``, from its "Can't open lib" error."""
    with pytest.raises(pyodbc.Error) as failed:
        pyodbc.connect(text, timeout=1)
    message = str(failed.value)
    assert "Can't open lib '" in message, message
    return message.split("Can't open lib '", 1)[1].split("'", 1)[0]


TRICKY = st.sampled_from([*";={} \t", "\u013b", "\u013d", "\u017b", "\u017d", "\u0144", "\u0120", "é", "x"])
VALUES = st.lists(st.one_of(TRICKY, st.sampled_from(["DRIVER", "DSN", "=", "/tmp/lib.so"])), max_size=12).map(
    "".join
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(password=VALUES, app=VALUES)
def test_every_string_rendered_makes_the_driver_manager_try_the_chosen_driver_alone(
    password: str, app: str
) -> None:
    pairs = [("DRIVER", NO_DRIVER), ("SERVER", "127.0.0.1,1"), ("PWD", password), ("APP", app)]
    try:
        text = render_odbc(pairs)
    except ConfigurationError:
        assert any(reduced(char) in ("}", "") and char not in "}" for char in password + app)
        return
    assert driver_manager_pairs(text) == [(key, reduced(value)) for key, value in pairs]
    assert tried_library(text) == NO_DRIVER


def test_a_connection_factorys_value_is_written_so_the_driver_manager_reads_it_as_one_value() -> None:
    transport = open_transport(
        f"mssql+pyodbc://sa@127.0.0.1:1/erp?driver={NO_DRIVER}",
        connect=lambda: {"PWD": "x\u013bDRIVER\u013d/tmp/libother.so"},
        connect_timeout=1,
    )
    with transport, pytest.raises(Exception, match="libsqlqueue-chosen"):
        transport.new_connection()
    refused = open_transport(
        f"mssql+pyodbc://sa@127.0.0.1:1/erp?driver={NO_DRIVER}",
        connect=lambda: {"PWD": "x\u017d;DRIVER=/tmp/libother.so"},
        connect_timeout=1,
    )
    with refused, pytest.raises(ConfigurationError, match="the connection factory's PWD"):
        refused.new_connection()


def test_the_spark_jobs_password_is_written_back_braced() -> None:
    password = "x\u013bDRIVER\u013d/tmp/libother.so"
    url = render_odbc([("DRIVER", NO_DRIVER), ("SERVER", "h,1"), ("PWD", password), ("APP", f"a{password}")])
    stripped, taken = split_credentials(url)
    assert taken == password
    joined = join_credentials(stripped, taken)
    assert driver_manager_refusal(joined, [NO_DRIVER]) is None
    assert tried_library(joined) == NO_DRIVER
