"""A throwaway Spark standalone cluster on loopback: one master and two workers from the PySpark
installation (``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), each in its own
process group with its own directories, stopped at the end.

The executors run a *different* Python from the tests' (the interpreter the venv was made from) with only
the package's third-party dependencies on its path (``executor_site``: SQLAlchemy, msgspec, psycopg,
pyarrow, pandas, installed with ``pip --target`` as a cluster image would have them). This provider is not
there: it reaches the executors only as a ``--py-files`` zip, as on a real cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent
# What executors import besides this provider; pinned by the CI constraints like the venv itself.
EXECUTOR_PACKAGES = ("sqlalchemy", "msgspec", "psycopg[binary]", "pyarrow", "pandas")


def spark_test_java_options() -> str:
    """The JVM options tests/conftest.py gives every spark-submit, for the daemons and executors too."""
    return os.environ.get("SPARK_SUBMIT_OPTS", "")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def base_python() -> str:
    """The interpreter the venv was created from: the same Python version, without the venv's packages."""
    candidate = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    if not candidate.exists():
        raise RuntimeError(f"no base interpreter {candidate}")
    return str(candidate)


def install_executor_site(directory: Path, constraints: Path | None) -> Path:
    """``pip install --target`` the executors' third-party packages (not this provider)."""
    command = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--target"]
    command += [str(directory), *EXECUTOR_PACKAGES]
    if constraints is not None and constraints.exists():
        command += ["-c", str(constraints)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"pip install --target {directory} failed:\n{result.stdout}\n{result.stderr}")
    return directory


class SparkStandalone:
    def __init__(self, root: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.root = root
        self.port = free_port()
        self.ui_port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.master: subprocess.Popen | None = None
        self.worker_processes: list[subprocess.Popen] = []
        self.env = {
            **os.environ,
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(root / "logs"),
            "SPARK_NO_DAEMONIZE": "1",
            "SPARK_DAEMON_JAVA_OPTS": spark_test_java_options(),
        }

    def _start(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 (closed with the process)
        process = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            env=self.env,
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        return process

    def start(self, timeout: float = 120) -> None:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        self.master = self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        )
        self._wait(lambda: self.state() is not None, "the master", timeout)
        for index in range(self.workers):
            self.start_worker(index)
        self._wait(lambda: self.alive_workers() >= self.workers, f"{self.workers} workers", timeout)

    def start_worker(self, index: int) -> None:
        work_dir = self.root / f"worker-{index}"
        work_dir.mkdir(exist_ok=True)
        process = self._start(
            f"worker-{index}",
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--cores",
            str(self.cores),
            "--memory",
            self.memory,
            "--work-dir",
            str(work_dir),
            "--webui-port",
            str(free_port()),
            self.master_url,
        )
        if index < len(self.worker_processes):
            self.worker_processes[index] = process
        else:
            self.worker_processes.append(process)

    def _wait(self, condition: Any, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.master is not None and self.master.poll() is not None:
                raise RuntimeError(f"the Spark master exited:\n{self.log_tail('master')}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}:\n{self.log_tail('master')}")
            time.sleep(0.5)

    def state(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as answer:
                return json.loads(answer.read())
        except OSError:
            return None

    def alive_workers(self) -> int:
        state = self.state()
        return int(state.get("aliveworkers", 0)) if state else 0

    def worker_of(self, pid: int) -> int | None:
        """The index of the worker that ``pid`` (an executor's Python worker, say) descends from."""
        workers = {process.pid: index for index, process in enumerate(self.worker_processes)}
        while pid > 1:
            if pid in workers:
                return workers[pid]
            pid = _parent(pid)
        return None

    def kill_worker(self, index: int) -> None:
        """SIGKILL a worker with everything under it (its executors, their Python daemons and workers, which
        PySpark puts in process groups of their own), as a lost machine would go."""
        process = self.worker_processes[index]
        for pid in [process.pid, *_descendants(process.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait(timeout=10)

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.root / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def stop(self) -> None:
        processes = [p for p in (*self.worker_processes, self.master) if p is not None]
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            if process.poll() is None:
                process.wait(timeout=5)


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            children.setdefault(_parent(int(entry.name)), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
