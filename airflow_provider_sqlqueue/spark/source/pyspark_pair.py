"""The data source refuses to import under a mixed PySpark install: ``pyspark`` and ``pyspark-client`` put
their files into one ``pyspark`` package folder, so with two versions installed the last one installed wins
file by file (a 4.3 JVM under 4.2 Python files once failed every Spark job, far from the cause). The
``spark`` extra pins both to one release; this check catches an environment assembled another way."""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, version

__all__ = ["MixedPySparkInstall", "check_pyspark_pair"]


class MixedPySparkInstall(ImportError):
    """pyspark and pyspark-client are installed at different versions."""


def _installed(distribution: str) -> str | None:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


@cache
def check_pyspark_pair() -> None:
    """Raise :class:`MixedPySparkInstall` when both distributions are installed at different versions.

    Reading two distributions' metadata scans every entry of the path (a sizeable fraction of a second beside
    Airflow's dependencies), so it runs once per process, where a user's code takes the data source, not in
    each process Spark starts to plan a read or run a worker."""
    full, client = _installed("pyspark"), _installed("pyspark-client")
    if full is not None and client is not None and full != client:
        raise MixedPySparkInstall(
            f"pyspark {full} and pyspark-client {client} are installed together: both write the one pyspark "
            "package folder, so its files come from two releases. Install them at one version, e.g. "
            f'pip install "pyspark=={client}" "pyspark-client=={client}" (the spark extra of '
            "airflow-provider-sqlqueue pins both)"
        )
