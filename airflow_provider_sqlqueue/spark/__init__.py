"""The Spark bridge: PySpark applications that drain queues into sinks and fill queues from DataFrames.

``drain_job.py`` and ``fill_job.py`` are files that ``spark-submit`` runs directly; on executors they use only
the transport core and the database driver (no Airflow). ``SqlQueueSparkSubmitOperator`` submits them from a
DAG. :class:`SqlQueueDataSource` is the ``sqlqueue`` format for ``spark.read``, ``spark.readStream`` and
``DataFrame.write`` (imported with PySpark on first use). How to use them: docs/spark.md; delivery
guarantees and the protocol: docs/spark-exactly-once.md.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .source.datasource import SqlQueueDataSource

__all__ = ["DRAIN_JOB", "FILL_JOB", "SqlQueueDataSource", "package_zip"]

_HERE = Path(__file__).resolve().parent
DRAIN_JOB = str(_HERE / "drain_job.py")
FILL_JOB = str(_HERE / "fill_job.py")


def package_zip(destination: str | Path) -> str:
    """Zip the importable package (for ``--py-files`` on a cluster whose nodes do not have it installed).

    The executors also need the package's own dependencies (SQLAlchemy, msgspec) and the database driver
    (psycopg, pyodbc) in their Python; ship those with the cluster's own means (an image, ``--archives`` of
    a venv).
    """
    root = _HERE.parent
    destination = Path(destination)
    with zipfile.ZipFile(destination, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(root.rglob("*.py")):
            archive.write(path, Path(root.name) / path.relative_to(root))
    return str(destination)


def __getattr__(name: str) -> Any:
    if name == "SqlQueueDataSource":
        from .source.pyspark_pair import check_pyspark_pair

        check_pyspark_pair()
        from .source.datasource import SqlQueueDataSource

        return SqlQueueDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
