"""The SQL Server live suite's server and drivers: a real server when one is named, else the TDS engine.

Where the server comes from, first match wins:

1. ``SQLQUEUE_TEST_MSSQL_HOST`` (with ``_PORT``, ``_USER``, ``_PASSWORD``, ``_DATABASE`` and optionally
   ``_ENCRYPT``): a server someone runs, e.g. SQL Server 2022 in the GitHub workflow.
2. ``../shared/tds-engine/start.sh`` beside the repository (or ``SQLQUEUE_TDS_ENGINE``, the folder holding
   it): a throwaway Babelfish for PostgreSQL instance started for the test session and stopped after it.
   It is test equipment; the product never depends on it.

Every test that takes the SQL Server target runs once per ODBC driver: FreeTDS (Debian's ``tdsodbc``) and
Microsoft's ODBC Driver 18 (the library the PyPI package ``mssql-python-odbc`` ships), which the bed
registers with unixODBC in a private ``odbcinst.ini`` (``ODBCSYSINI``) that keeps the machine's own driver
entries.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FREETDS_LIBRARY = Path("/usr/lib/x86_64-linux-gnu/odbc/libtdsodbc.so")
# Not the driver's usual name, "ODBC Driver 18 for SQL Server": tests that expect that name to be missing
# (connections to servers that do not exist) would otherwise wait out its 10-second login timeout.
MSODBC_NAME = "ODBC Driver 18 for SQL Server (sqlqueue test bed)"
DRIVERS = ("freetds", "msodbc")
DRIVER_NAMES = {"freetds": "FreeTDS", "msodbc": "Microsoft ODBC Driver 18"}


def tds_engine_dir() -> Path | None:
    """The folder holding the TDS engine's start.sh, or None when this checkout has none beside it."""
    named = os.environ.get("SQLQUEUE_TDS_ENGINE")
    folder = Path(named) if named else REPO.parent / "shared" / "tds-engine"
    return folder if (folder / "start.sh").is_file() else None


def msodbc_library() -> Path | None:
    """Microsoft's ODBC Driver 18 from the mssql-python-odbc package, when it is installed."""
    try:
        import mssql_python_odbc
    except ImportError:
        return None
    root = Path(mssql_python_odbc.__file__).parent / "libs" / "linux" / "debian_ubuntu" / "x86_64" / "lib"
    found = sorted(root.glob("libmsodbcsql-18*.so*"))
    return found[-1] if found else None


def register_msodbc() -> None:
    """Register Driver 18 as ``ODBC Driver 18 for SQL Server`` for this process and every process it starts
    later (Spark's JVM and Python workers among them), when the library is installed."""
    library = msodbc_library()
    if library is None or os.environ.get("SQLQUEUE_TEST_ODBCSYSINI") == os.environ.get("ODBCSYSINI", "-"):
        return
    home = Path(tempfile.mkdtemp(prefix="sqlqueue-odbcinst-"))
    system = Path(os.environ.get("ODBCSYSINI", "/etc")) / "odbcinst.ini"
    existing = system.read_text() if system.is_file() else ""
    home.mkdir(parents=True, exist_ok=True)
    (home / "odbcinst.ini").write_text(
        f"{existing.rstrip()}\n\n[{MSODBC_NAME}]\nDescription=Microsoft ODBC Driver 18 for SQL Server "
        f"(mssql-python-odbc, registered by the test bed)\nDriver={library}\nUsageCount=1\n"
    )
    (home / "odbc.ini").touch()
    os.environ["ODBCSYSINI"] = os.environ["SQLQUEUE_TEST_ODBCSYSINI"] = str(home)


def _braced(value: str) -> str:
    return "{" + value.replace("}", "}}") + "}"


@dataclass
class SqlServerBed:
    """Where the live suite's SQL Server is and how each driver reaches it."""

    host: str
    port: int
    user: str
    password: str
    database: str
    encrypt: str = "no"
    kind: str = "server"  # "babelfish" for the TDS engine
    version: str = ""
    drivers: dict[str, str] = field(default_factory=dict)  # driver -> ODBC connection string
    missing: dict[str, str] = field(default_factory=dict)  # driver -> why it cannot run
    engine_dir: Path | None = None  # the TDS engine's folder, when the bed started it
    workdir: Path | None = None  # its instance

    @property
    def label(self) -> str:
        return f"Babelfish {self.version}" if self.kind == "babelfish" else f"SQL Server {self.version}"

    def odbc(self, driver: str, database: str | None = None) -> str:
        database = database or self.database
        if driver == "freetds":
            return (
                f"DRIVER={FREETDS_LIBRARY};SERVER={self.host};PORT={self.port};UID={self.user};"
                f"PWD={_braced(self.password)};DATABASE={_braced(database)};TDS_Version=7.4;"
                "ClientCharset=UTF-8"
            )
        trust = ";TrustServerCertificate=yes" if self.encrypt != "no" else ""
        return (
            f"DRIVER={{{MSODBC_NAME}}};SERVER={self.host},{self.port};UID={self.user};"
            f"PWD={_braced(self.password)};DATABASE={_braced(database)};Encrypt={self.encrypt}{trust}"
        )

    def sessions_waiting_on_a_lock(self) -> int:
        """How many sessions the server shows blocked on a lock: on the TDS engine from its PostgreSQL side
        (each TDS session is a backend there), on SQL Server from ``sys.dm_exec_requests``."""
        if self.kind == "babelfish" and self.workdir is not None:
            import psycopg

            port = int((self.workdir / "pg_port").read_text())
            with psycopg.connect(
                host=str(self.workdir / "run"), port=port, user="postgres", dbname="postgres", autocommit=True
            ) as connection:
                row = connection.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                ).fetchone()
                return int(row[0]) if row else 0
        import pyodbc

        odbc = next(iter(self.drivers.values()))
        with pyodbc.connect(odbc, autocommit=True) as connection:
            sql = "SELECT COUNT(*) FROM sys.dm_exec_requests WHERE blocking_session_id <> 0"
            return int(connection.execute(sql).fetchone()[0])

    def stop(self) -> None:
        if self.engine_dir is not None and self.workdir is not None:
            subprocess.run(["bash", str(self.engine_dir / "stop.sh"), str(self.workdir)], check=False)


def _quiet_protocol_log(socket_dir: str, port: int) -> None:
    """Babelfish logs every TDS message by default; the tests send hundreds of thousands. Errors, crashes
    and everything else still reach the instance's server.log."""
    import psycopg

    with psycopg.connect(
        host=socket_dir, port=port, user="postgres", dbname="postgres", autocommit=True
    ) as c:
        c.execute("ALTER SYSTEM SET babelfishpg_tds.tds_debug_log_level = 0")
        c.execute("SELECT pg_reload_conf()")


def start_bed() -> tuple[SqlServerBed | None, str]:
    """The session's SQL Server, or None and the reason why the live suite cannot run here."""
    if os.environ.get("SQLQUEUE_TEST_MSSQL_HOST"):
        bed = SqlServerBed(
            host=os.environ["SQLQUEUE_TEST_MSSQL_HOST"],
            port=int(os.environ.get("SQLQUEUE_TEST_MSSQL_PORT", "1433")),
            user=os.environ.get("SQLQUEUE_TEST_MSSQL_USER", "sa"),
            password=os.environ.get("SQLQUEUE_TEST_MSSQL_PASSWORD", ""),
            database=os.environ.get("SQLQUEUE_TEST_MSSQL_DATABASE", "master"),
            encrypt=os.environ.get("SQLQUEUE_TEST_MSSQL_ENCRYPT", "yes"),
        )
    else:
        engine = tds_engine_dir()
        if engine is None:
            return None, (
                "SQL Server live suite: no server here (set SQLQUEUE_TEST_MSSQL_HOST, or put the TDS engine "
                "at ../shared/tds-engine beside the repository)"
            )
        workdir = Path(tempfile.mkdtemp(prefix="sqlqueue-tds-engine-"))
        started = subprocess.run(
            ["bash", str(engine / "start.sh"), str(workdir / "instance")],
            capture_output=True,
            text=True,
            check=False,
        )
        if started.returncode != 0:
            raise RuntimeError(f"the TDS engine did not start:\n{started.stderr[-4000:]}")
        values = dict(line.split("=", 1) for line in started.stdout.splitlines() if "=" in line)
        bed = SqlServerBed(
            host=values["TDS_HOST"],
            port=int(values["TDS_PORT"]),
            user=values["TDS_USER"],
            password=values["TDS_PASSWORD"],
            database=values["TDS_DATABASE"],
            kind="babelfish",
        )
        bed.engine_dir, bed.workdir = engine, workdir / "instance"
        _quiet_protocol_log(values["PG_SOCKET_DIR"], int(values["PG_PORT"]))
    library = msodbc_library()
    for driver in DRIVERS:
        if driver == "freetds" and not FREETDS_LIBRARY.is_file():
            bed.missing[driver] = f"FreeTDS is not installed ({FREETDS_LIBRARY}; Debian's tdsodbc)"
            continue
        if driver == "msodbc" and library is None:
            bed.missing[driver] = (
                "Microsoft's ODBC Driver 18 is not installed (pip install mssql-python-odbc)"
            )
            continue
        bed.drivers[driver] = bed.odbc(driver)
    return bed, ""
