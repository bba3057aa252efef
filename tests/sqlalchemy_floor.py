"""The oldest SQLAlchemy the venv's tests try beside its own (tests/test_hook_sqlalchemy_paths.py): the
higher of pyproject.toml's floor and the floor of the installed Airflow. pyproject.toml allows 1.4 because
Airflow 3.0 requires it (.ci/airflow-oldest runs the Airflow surface there); Airflow 3.1+ cannot import
with it, so a venv of a newer Airflow tries that Airflow's own floor. ``python tests/sqlalchemy_floor.py``
prints it for .ci/setup.sh, which installs it into ``.venv/sqlalchemy-floor/<version>``."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, requires
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def pyproject_floor() -> Version:
    found = re.search(r'^\s*"sqlalchemy>=([0-9.]+),', PYPROJECT.read_text(), re.MULTILINE)
    if found is None:
        raise SystemExit("pyproject.toml's SQLAlchemy pin has no floor")
    return Version(found.group(1))


def airflow_floor() -> Version | None:
    try:
        declared = requires("apache-airflow-core") or []
    except PackageNotFoundError:
        return None
    for text in declared:
        requirement = Requirement(text)
        if requirement.name.lower() == "sqlalchemy" and requirement.marker is None:
            lows = [Version(spec.version) for spec in requirement.specifier if spec.operator == ">="]
            return max(lows, default=None)
    return None


def floor_version() -> str:
    airflow = airflow_floor()
    return str(max(pyproject_floor(), airflow) if airflow is not None else pyproject_floor())


if __name__ == "__main__":
    print(floor_version())
