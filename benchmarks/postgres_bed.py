"""The benchmarks' throwaway PostgreSQL: the test suite's own cluster (tests/postgres_cluster.py).

The cluster is test equipment, not part of the installed package; this is the one place the benchmark
scripts (run from the repository root, ``benchmarks/`` first on their path) put ``tests/`` on ``sys.path``
to reach it. The module has no pytest dependency, so benchmarks/.venv does not need pytest.
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
if str(TESTS) not in sys.path:
    sys.path.append(str(TESTS))

from postgres_cluster import PostgresCluster, find_postgres_bindir, throwaway_postgres  # noqa: E402

__all__ = ["PostgresCluster", "find_postgres_bindir", "throwaway_postgres"]
