#!/usr/bin/env bash
# Build benchmarks/.venv: this project with its postgres extra, plus the peer queue libraries and the
# plotting/measuring tools in benchmarks/requirements.txt. Safe to re-run.
#
#   bash benchmarks/setup.sh
#   benchmarks/.venv/bin/python benchmarks/run.py --json docs/benchmarks/results.json
#   benchmarks/.venv/bin/python benchmarks/render.py docs/benchmarks/results.json
#
# The PostgreSQL server binaries come from Debian's postgresql package (see README.md's `.ci/test`).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
python="${PYTHON:-python3}"
if [ ! -x "$here/.venv/bin/python" ]; then
    "$python" -m venv "$here/.venv"
fi
"$here/.venv/bin/python" -m pip install --quiet --upgrade pip
"$here/.venv/bin/python" -m pip install --quiet -e "$root[postgres]" -r "$here/requirements.txt"
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then
    echo "note: no PostgreSQL server binaries found; install Debian's postgresql package" \
        "(apt-get install -y postgresql) for the PostgreSQL cases" >&2
fi
if [ ! -f /usr/share/java/postgresql.jar ]; then
    echo "note: spark_drain_bench.py's JDBC baseline needs Debian's PostgreSQL JDBC driver" \
        "(apt-get install -y libpostgresql-jdbc-java)" >&2
fi
"$here/.venv/bin/python" - <<'PY'
from importlib.metadata import version
names = ["airflow-provider-sqlqueue", "psycopg", "sqlalchemy", "pgqueuer", "asyncpg", "procrastinate",
         "kombu", "persist-queue", "matplotlib", "psutil"]
print("benchmarks/.venv ready: " + ", ".join(f"{name} {version(name)}" for name in names))
PY
