"""Throwaway PostgreSQL clusters on loopback: test equipment for the test suite and the benchmarks.

Uses the server binaries of Debian's ``postgresql`` package (``/usr/lib/postgresql/<version>/bin``) or the
``initdb`` found on PATH. PostgreSQL refuses to run as root, so under root the cluster's files belong to the
``postgres`` OS user and the server runs as that user.

Plain Python without pytest, so the benchmarks (their own virtualenv, no pytest) import it as well
(``benchmarks/postgres_bed.py``); the session's ``postgres_server`` fixture is in ``postgres_plugin.py``.
Not part of the installed package: users running queues do not need a throwaway database server.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

__all__ = ["PostgresCluster", "find_postgres_bindir", "throwaway_postgres"]


def find_postgres_bindir() -> Path | None:
    """The newest installed PostgreSQL server's bin folder, or None."""
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda path: int(path.parent.parent.name) if path.parent.parent.name.isdigit() else 0,
    )
    if candidates:
        return candidates[-1].parent
    found = shutil.which("initdb")
    return Path(found).resolve().parent if found else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresCluster:
    """One private PostgreSQL server: ``start()``, ``stop()``, ``url()``; ``remove()`` deletes its files."""

    def __init__(
        self,
        bindir: Path | None = None,
        *,
        max_connections: int = 200,
        durable: bool = False,
        settings: dict[str, str] | None = None,
    ) -> None:
        found = bindir or find_postgres_bindir()
        if found is None:
            raise RuntimeError(
                "no PostgreSQL server binaries found; install Debian's postgresql package "
                "(apt-get install -y postgresql) or set SQLQUEUE_TEST_POSTGRES_DSN to an existing server"
            )
        self.bindir = found
        self.root = Path(tempfile.mkdtemp(prefix="sqlqueue-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self.password = secrets.token_urlsafe(18)
        self.settings = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.root),
            "max_connections": str(max_connections),
            "shared_buffers": "128MB",
        }
        if not durable:
            self.settings |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
        self.settings |= settings or {}
        self._as_postgres = os.geteuid() == 0
        self._initdb()

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, check=check, capture_output=True, text=True, timeout=120)

    def _initdb(self) -> None:
        password_file = self.root / "pwfile"
        password_file.write_text(self.password + "\n")
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
            shutil.chown(password_file, "postgres", "postgres")
        password_file.chmod(0o600)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            f"--pwfile={password_file}",
        )
        password_file.unlink()
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            for key, value in self.settings.items():
                conf.write(f"{key} = '{value}'\n")
            conf.write(f"port = {self.port}\n")

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop", check=False)

    def is_running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def url(self, database: str = "postgres", user: str = "postgres", password: str | None = None) -> str:
        secret = self.password if password is None and user == "postgres" else password
        credentials = quote(user, safe="") + (f":{quote(secret, safe='')}" if secret else "")
        return f"postgresql://{credentials}@127.0.0.1:{self.port}/{quote(database, safe='')}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run SQL as the superuser over the private socket; return what psql printed."""
        result = self._run(
            "psql",
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            str(self.root),
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "-d",
            database,
            "-At",
            "-c",
            sql,
        )
        return result.stdout

    def remove(self) -> None:
        if self.is_running():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def throwaway_postgres(**options: object) -> Iterator[PostgresCluster]:
    """A started cluster that is stopped and deleted on exit."""
    cluster = PostgresCluster(**options)  # type: ignore[arg-type]
    try:
        cluster.start()
        deadline = time.monotonic() + 30
        while not cluster.is_running() and time.monotonic() < deadline:
            time.sleep(0.1)
        yield cluster
    finally:
        cluster.remove()
