"""A throwaway Airflow 3 on loopback: API server, scheduler, DAG processor and triggerer.

Everything lives in a temporary ``AIRFLOW_HOME`` (SQLite metadata database, logs, airflow.cfg); the
example DAGs of this repository are the DAGs folder; the simple auth manager lets everyone in as admin.
Each process runs in its own process group; ``stop()`` ends the groups and then any process left whose
environment names this home (task runners the executor started), so nothing outlives the check.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(what: str, condition: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
    """Poll ``condition`` until it returns something truthy; raise TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except Exception as error:  # keep polling; report the last error on timeout
            last_error = error
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}{detail}")
        time.sleep(interval)


class AirflowStack:
    def __init__(
        self,
        home: Path,
        dags_folder: Path = REPO / "dags_examples",
        log=print,
        users: dict[str, str] | None = None,
    ) -> None:
        self.home = home
        self.users = dict(users or {"admin": "ADMIN", "viewer": "VIEWER"})
        self.passwords = {name: secrets.token_urlsafe(12) for name in self.users}
        self._tokens: dict[str, str] = {}
        self.dags_folder = dags_folder
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.processes: dict[str, subprocess.Popen] = {}
        self.bin = Path(sys.executable).parent
        self.env = self._environment()

    def _environment(self) -> dict[str, str]:
        users_roles = self.users.items()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))}
        env.update(
            {
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": "4",
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
                "AIRFLOW__CORE__AUTH_MANAGER": (
                    "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
                ),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in users_roles),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.home / "passwords.json"),
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home / 'airflow.db'}",
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__BASE_URL": self.base_url,
                "AIRFLOW__API__WORKERS": "1",
                # The Queues page reads itself every 3 s when its auto-refresh is on (the check turns it
                # on only to watch a queue drain).
                "AIRFLOW__SQLQUEUE__PAGE_REFRESH_SECONDS": "3",
                "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
                "AIRFLOW__OPENLINEAGE__DISABLED": "True",
                "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
                "PYTHONUNBUFFERED": "1",
                "NO_COLOR": "1",
            }
        )
        return env

    # ---- lifecycle -----------------------------------------------------------------------------
    def migrate(self) -> None:
        (self.home / "passwords.json").write_text(json.dumps(self.passwords) + "\n")
        self.log(f"airflow: accounts {', '.join(f'{u} ({r})' for u, r in self.users.items())}")
        self.log("airflow: migrating the metadata database")
        started = time.monotonic()
        result = subprocess.run(
            [str(self.bin / "airflow"), "db", "migrate"],
            env=self.env,
            cwd=self.home,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=180,
        )
        if result.returncode != 0:
            raise RuntimeError(f"airflow db migrate failed:\n{result.stdout[-4000:]}")
        self.log(f"airflow: database ready in {time.monotonic() - started:.1f} s")

    def start(self) -> None:
        for name in COMPONENTS:
            self.start_component(name)

    def start_component(self, name: str) -> None:
        """Start one component; its log file is appended to, so a restarted component keeps its history."""
        args = [str(self.bin / "airflow"), name]
        if name == "api-server":
            args += ["--host", "127.0.0.1", "--port", str(self.port)]
        log_file = open(self.home / f"{name}.log", "ab")  # noqa: SIM115 (closed with the process)
        self.processes[name] = subprocess.Popen(
            args,
            env=self.env,
            cwd=self.home,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log_file.close()
        self.log(f"airflow: started {name} (pid {self.processes[name].pid})")

    def restart(self, name: str, timeout: float = 60) -> None:
        """Stop one component as a deployment does (SIGTERM, then a graceful exit) and start it again."""
        process = self.processes[name]
        _signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
        self.log(f"airflow: {name} exited with {process.returncode}")
        self.start_component(name)

    def check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"airflow {name} exited with {process.returncode}:\n{self.log_tail(name)}")

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.home / f"{name}.log"
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def wait_until_ready(self, timeout: float = 120) -> None:
        def healthy() -> bool:
            self.check_alive()
            health = self._call("GET", "/api/v2/monitor/health", None, {})
            components = ("metadatabase", "scheduler", "triggerer", "dag_processor")
            return all((health.get(c) or {}).get("status") == "healthy" for c in components)

        wait_for("the API server, scheduler, triggerer and DAG processor to report healthy", healthy, timeout)

    def stop(self) -> None:
        """End every process this stack started, and their children, even if some are stuck."""
        for process in self.processes.values():
            _signal_group(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
        for process in self.processes.values():
            _signal_group(process.pid, signal.SIGKILL)
            if process.poll() is None:
                process.wait(timeout=5)
        # Task runners and supervisors may have left the groups: find them by this home in their environment.
        kill_leftovers(self.home)

    # ---- REST API (a cross-check; the UI is what the check looks at) -----------------------------
    def token(self, user: str | None = None) -> str:
        """A JWT of ``user`` (default: the first account) from the simple auth manager's token endpoint."""
        user = user or next(iter(self.users))
        if user not in self._tokens:
            body = {"username": user, "password": self.passwords[user]}
            self._tokens[user] = self._call("POST", "/auth/token", body, {})["access_token"]
        return self._tokens[user]

    def api(self, method: str, path: str, body: Any = None, user: str | None = None) -> Any:
        return self._call(method, path, body, {"Authorization": f"Bearer {self.token(user)}"})

    def _call(self, method: str, path: str, body: Any, headers: dict[str, str]) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", **headers},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read().decode()
        return json.loads(text) if text else None


def kill_leftovers(home: Path) -> list[int]:
    """SIGKILL every process whose environment has ``AIRFLOW_HOME=<home>``; return their ids."""
    pids = _pids_with_env("AIRFLOW_HOME", str(home))
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return pids


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _pids_with_env(key: str, value: str) -> list[int]:
    needle = f"{key}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found
