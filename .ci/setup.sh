#!/usr/bin/env bash
# Installs everything the demo and the tests need on a fresh Debian 12 machine with Python 3.11:
# Debian packages (PostgreSQL server, unixODBC and its drivers, a Java runtime for Spark, Chromium for the
# Airflow UI check), a virtualenv in .venv, and this package with Airflow, PySpark, the docs and test tools.
# Idempotent: a second run installs nothing new.
set -euo pipefail
cd "$(dirname "$0")/.."

# chromium: the Airflow UI check (tests/test_airflow_ui.py) drives Debian's browser headless.
# zstd, libossp-uuid16, freetds-bin: the TDS engine (../shared/tds-engine, Babelfish) that the SQL Server
# live suite starts; tdsodbc is its FreeTDS driver (Microsoft's Driver 18 comes from the dev extra).
# gcc builds the rogue ODBC "driver" that tests/test_hook_connections.py proves is never loaded.
APT_PACKAGES=(postgresql unixodbc odbc-postgresql tdsodbc libsqliteodbc chromium zstd libossp-uuid16 freetds-bin gcc)
# Spark 4 runs on Java 17+: Debian 12's default runtime (OpenJDK 17), unless a java is already on PATH.
command -v java >/dev/null 2>&1 || APT_PACKAGES+=(default-jre-headless)
missing=()
for package in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "setup: Python 3.10+ is required")'
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi
EXTRAS="dev,postgres,mssql,airflow,messaging,spark,docs,ui"
stamp=".venv/.installed-$( (cat pyproject.toml .ci/constraints.txt; echo "$EXTRAS") | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "setup: installing the package and its test dependencies into .venv"
  echo "setup: (pyspark builds its wheel from a 450 MB source archive: allow a few minutes)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[$EXTRAS]" -c .ci/constraints.txt
  rm -f .venv/.installed-*
  touch "$stamp"
fi

# The oldest SQLAlchemy both pyproject.toml and the venv's Airflow allow (tests/sqlalchemy_floor.py), in a
# folder of its own: tests/test_hook_sqlalchemy_paths.py puts it first on a child process's PYTHONPATH to
# try the driver injections under it as well as under the venv's SQLAlchemy. (SQLAlchemy 1.4, which
# pyproject.toml allows for Airflow 3.0, is the SQLAlchemy of .ci/airflow-oldest's venv.)
floor=$(.venv/bin/python tests/sqlalchemy_floor.py)
[ -n "$floor" ] || { echo "setup: no SQLAlchemy floor from tests/sqlalchemy_floor.py" >&2; exit 1; }
if [ ! -f ".venv/sqlalchemy-floor/$floor/sqlalchemy/__init__.py" ]; then
  echo "setup: installing SQLAlchemy $floor (the floor the tests try) into .venv/sqlalchemy-floor/$floor"
  rm -rf ".venv/sqlalchemy-floor/$floor"
  .venv/bin/python -m pip install -q --no-deps --target ".venv/sqlalchemy-floor/$floor" "sqlalchemy==$floor"
fi
