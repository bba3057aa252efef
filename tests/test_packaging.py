"""How the distribution installs and registers: the provider entry point without the 'airflow' extra,
the engine-neutral core without Airflow, and the extras' pins against the providers they sit beside."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent

BLOCKER = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if any(name == blocked or name.startswith(blocked + ".") for blocked in {blocked!r}):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Block())
"""


def run_python(code: str, blocked: list[str]) -> subprocess.CompletedProcess[str]:
    script = BLOCKER.format(blocked=blocked) + textwrap.dedent(code)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO, timeout=300
    )


def site_without(tmp_path: Path, package_path: tuple[str, ...], dist_prefix: str) -> Path:
    """A copy of this environment's site-packages (symlinks) in which one distribution is not installed:
    neither its files (``package_path`` inside a namespace package) nor its ``*.dist-info``."""
    import sysconfig

    source = Path(sysconfig.get_paths()["purelib"])
    site = tmp_path / "site-packages"

    def mirror(origin: Path, copy: Path, skip: tuple[str, ...]) -> None:
        copy.mkdir()
        for entry in origin.iterdir():
            if entry.name.startswith(dist_prefix) and entry.name.endswith(".dist-info"):
                continue
            if skip and entry.name == skip[0]:
                if len(skip) > 1:
                    mirror(entry, copy / entry.name, skip[1:])
                continue
            (copy / entry.name).symlink_to(entry)

    mirror(source, site, package_path)
    return site


def test_a_missing_airflow_extra_is_loud_not_a_silently_missing_connection_type(tmp_path: Path) -> None:
    pytest.importorskip("airflow.providers_manager", reason="the Airflow extra is not installed")
    site = site_without(
        tmp_path, ("airflow", "providers", "common", "sql"), "apache_airflow_providers_common_sql-"
    )
    code = textwrap.dedent(
        f"""
        import site, sys
        site.addsitedir({str(site)!r})
        import logging, warnings
        logging.basicConfig(level=logging.INFO)
        warnings.simplefilter("always")
        from airflow.providers_manager import ProvidersManager
        manager = ProvidersManager()
        assert "apache-airflow-providers-common-sql" not in manager.providers
        assert "airflow-provider-sqlqueue" in manager.providers
        print("HOOK", manager.hooks.get("sqlqueue"))
        try:
            import airflow_provider_sqlqueue.operators.send
        except ImportError as error:
            print("OPERATOR", error)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=300
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "HOOK None" in output, output  # the connection type cannot load ...
    fix = "pip install 'airflow-provider-sqlqueue[airflow]'"
    assert output.count(fix) >= 2, output  # ... and both the entry point and the import say why
    assert "apache-airflow-providers-common-sql not installed" in output
    assert "OPERATOR airflow-provider-sqlqueue is installed without its 'airflow' extra" in output


def test_the_engine_neutral_core_and_the_spark_bridge_import_without_airflow(tmp_path: Path) -> None:
    result = run_python(
        f"""
        import airflow_provider_sqlqueue.transport as transport
        import airflow_provider_sqlqueue.dialects, airflow_provider_sqlqueue.spark.drain
        import airflow_provider_sqlqueue.spark.fill, airflow_provider_sqlqueue.cli
        with transport.open_transport("sqlite:///{tmp_path}/q.db") as opened:
            queue = opened.queue("orders")
            queue.create()
            queue.send(b"without airflow")
            print("COUNT", queue.count())
        print("AIRFLOW LOADED", any(name.split(".")[0] == "airflow" for name in sys.modules))
        """,
        blocked=["airflow"],
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "COUNT 1" in result.stdout and "AIRFLOW LOADED False" in result.stdout


def _requirement(distribution_name: str, package: str, extra: str | None) -> str:
    from packaging.requirements import Requirement

    for text in distribution(distribution_name).requires or []:
        requirement = Requirement(text)
        in_extra = requirement.marker is not None and requirement.marker.evaluate({"extra": extra or ""})
        if requirement.name == package and (in_extra if extra else requirement.marker is None):
            return str(requirement.specifier)
    raise AssertionError(f"{distribution_name} does not require {package} (extra {extra})")


def _spark_extra() -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    from packaging.requirements import Requirement

    texts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["spark"]
    return {Requirement(text).name: Requirement(text).specifier for text in texts}


def test_the_spark_extra_allows_only_the_pyspark_ci_tests_and_the_apache_spark_provider_takes() -> None:
    """The oldest PySpark the extra allows is the one installed here (so CI tests the floor), both
    distributions are pinned alike, and the apache-spark provider accepts that version."""
    pytest.importorskip("airflow.providers.apache.spark", reason="the spark extra is not installed")
    from packaging.requirements import Requirement
    from packaging.version import Version

    ours = _spark_extra()
    installed = {name: Version(distribution(name).version) for name in ("pyspark", "pyspark-client")}
    assert installed["pyspark"] == installed["pyspark-client"], installed
    for name, version in installed.items():
        assert version in ours[name], f"{name} {version} is installed but the extra allows {ours[name]}"
        lower = [Version(s.version) for s in ours[name] if s.operator in ("==", ">=", "~=", "===")]
        assert lower and min(lower) == version, f"{name}: the extra's floor is not the version CI tests"
    assert str(ours["pyspark"]) == str(ours["pyspark-client"]), ours
    theirs = _requirement("apache-airflow-providers-apache-spark", "pyspark-client", None)
    assert installed["pyspark-client"] in Requirement(f"x{theirs}").specifier


@pytest.mark.slow
def test_a_plain_install_of_the_spark_extra_pairs_pyspark_and_pyspark_client_at_one_version(
    tmp_path: Path,
) -> None:
    """What ``pip install ".[spark]"`` picks, resolved from the package index without a constraints file
    (a range once paired pyspark 4.3.0 with pyspark-client 4.2.0). Needs the index, as .ci/setup.sh does."""
    import json

    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    command += ["--disable-pip-version-check", "--report", str(report), f"{REPO}[spark]"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    picked = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert "pyspark" in picked and "pyspark-client" in picked, sorted(picked)
    assert picked["pyspark"] == picked["pyspark-client"], picked


def test_the_data_source_refuses_to_import_beside_a_pyspark_client_of_another_version(tmp_path: Path) -> None:
    """A pyspark-client 4.3.0 installed over this environment's pyspark (its metadata first on the path):
    the data source's import says which two versions meet and how to pair them."""
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    other = tmp_path / "pyspark_client-4.3.0.dist-info"
    other.mkdir()
    (other / "METADATA").write_text("Metadata-Version: 2.1\nName: pyspark-client\nVersion: 4.3.0\n")
    code = f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        try:
            from airflow_provider_sqlqueue.spark import SqlQueueDataSource
        except ImportError as error:
            print("REFUSED", type(error).__name__, error)
        else:
            print("IMPORTED")
        import airflow_provider_sqlqueue.spark.drain
        print("DRAIN IMPORTS")
        """
    result = run_python(code, blocked=[])
    assert result.returncode == 0, result.stdout + result.stderr
    pyspark = distribution("pyspark").version
    assert f"REFUSED MixedPySparkInstall pyspark {pyspark} and pyspark-client 4.3.0" in result.stdout
    assert 'pip install "pyspark==4.3.0" "pyspark-client==4.3.0"' in result.stdout, result.stdout
    assert "DRAIN IMPORTS" in result.stdout


def test_creating_the_data_source_imports_no_transport_and_reads_no_package_metadata() -> None:
    """What Spark's create-data-source process does (unpickle the class, create it with options, ask its
    schema) imports PySpark's types alone: not the transport, SQLAlchemy or a database driver, and the
    pyspark pair check (a scan of every distribution's metadata) does not run. The first micro-batch waits
    for each such process, so what it imports is on the stream's start. Reading still works after."""
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    code = """
        import pickle, sys
        import importlib.metadata as metadata
        scans = []
        real = metadata.version
        metadata.version = lambda name: scans.append(name) or real(name)
        from airflow_provider_sqlqueue.spark.source.datasource import SqlQueueDataSource
        source = pickle.loads(pickle.dumps(SqlQueueDataSource))(options={"queue": "orders"})
        names = source.schema().names
        watched = ("sqlalchemy", "psycopg", "airflow_provider_sqlqueue.transport")
        heavy = sorted(m for m in watched if m in sys.modules)
        print("SCHEMA", names[:3], "HEAVY", heavy, "SCANS", scans)
        from airflow_provider_sqlqueue.spark import SqlQueueDataSource as checked
        print("USER PATH SCANS", sorted(set(scans)))
        """
    result = run_python(code, blocked=[])
    assert result.returncode == 0, result.stdout + result.stderr
    created = "SCHEMA ['message_id', 'native_id', 'row_version'] HEAVY [] SCANS []"
    assert created in result.stdout, result.stdout
    assert "USER PATH SCANS ['pyspark', 'pyspark-client']" in result.stdout, result.stdout


def test_the_demo_runs_from_the_demo_subpackage_and_finds_the_example_dag() -> None:
    result = run_python(
        """
        import sys
        from airflow_provider_sqlqueue.demo import pipeline as pipeline_demo
        from airflow_provider_sqlqueue.demo.orders import make_orders
        dag_file = pipeline_demo.REPO / "dags_examples" / f"{pipeline_demo.DAG_ID}.py"
        print("DAG FILE", dag_file.is_file(), "ORDERS", len(make_orders(3)))
        print("AIRFLOW LOADED", any(name.split(".")[0] == "airflow" for name in sys.modules))
        """,
        blocked=[],
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "DAG FILE True ORDERS 3" in result.stdout, result.stdout
    assert "AIRFLOW LOADED False" in result.stdout, result.stdout  # Airflow loads in the child, not at import


def test_the_throwaway_postgres_cluster_is_test_equipment_the_benchmarks_reach_without_pytest() -> None:
    # A file check: the shared virtualenv's editable install may resolve submodules from another checkout.
    assert not (REPO / "airflow_provider_sqlqueue" / "testing.py").exists()
    result = run_python(
        f"""
        import sys
        sys.path.insert(0, {str(REPO / "benchmarks")!r})
        import postgres_bed, postgres_cluster
        print("SAME CLUSTER", postgres_bed.throwaway_postgres is postgres_cluster.throwaway_postgres)
        print("FROM TESTS", postgres_cluster.__file__)
        """,
        blocked=["pytest", "_pytest"],
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SAME CLUSTER True" in result.stdout, result.stdout
    assert f"FROM TESTS {REPO / 'tests' / 'postgres_cluster.py'}" in result.stdout, result.stdout


BUILD_SDIST = "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
BUILD_WHEEL = "import sys; from setuptools import build_meta; print(build_meta.build_wheel(sys.argv[1]))"


def build_with_warnings_as_errors(code: str, source: Path, out: Path) -> Path:
    """One build hook of the backend, run as a front end runs it, with every Python warning an error."""
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", code, str(out)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out / result.stdout.strip().splitlines()[-1]


def test_the_sdist_and_the_wheel_from_it_build_with_the_backends_warnings_as_errors(tmp_path: Path) -> None:
    """What a release build does (.ci/airflow-oldest runs `build` itself): the sdist from the tree, the
    wheel from the unpacked sdist. A deprecation of the backend, such as setuptools' of a license table
    (unsupported from 2027-02-18), fails here, before builds stop working."""
    import shutil
    import tarfile
    import zipfile
    from importlib.metadata import version

    import tomllib
    from packaging.requirements import Requirement

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    for requirement in map(Requirement, pyproject["build-system"]["requires"]):
        assert requirement.specifier.contains(version(requirement.name)), f"this venv lacks {requirement}"
    assert pyproject["project"]["license"] == "Apache-2.0"  # an SPDX expression, not a table

    tree = tmp_path / "tree"
    ignored = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", ".venv*", ".site")
    shutil.copytree(REPO, tree, ignore=ignored)
    out = tmp_path / "dist"
    out.mkdir()
    sdist = build_with_warnings_as_errors(BUILD_SDIST, tree, out)
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path / "unpacked", filter="data")
    (unpacked,) = (tmp_path / "unpacked").iterdir()
    wheel = build_with_warnings_as_errors(BUILD_WHEEL, unpacked, out)
    with zipfile.ZipFile(wheel) as archive:
        (metadata_name,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        metadata = archive.read(metadata_name).decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    mssql = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "mssql" in line]
    assert any("apache-airflow-providers-microsoft-mssql" in line for line in mssql), mssql
