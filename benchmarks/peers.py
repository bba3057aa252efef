"""The message pump case and the peer queue libraries, as worker runners for core_bench's process harness.

Every runner here has the signature core_bench expects of ``task["runner"]``: it gets the task dict in a
freshly spawned worker process, connects and prepares everything its timed part needs, and returns
``(run, close, info)``. ``run()`` is what the clock measures; it returns the identities of the messages
it received (an empty list for senders). The parent (``run_peer`` below, or core_bench's
``EngineBench.run_case`` for the pump) starts the workers together and checks the identities.

Peers are used only through their public APIs, with their documented defaults unless said otherwise
(see benchmarks/README.md, "Fairness"). Each peer run does the same logical work: N messages with
1,024-byte bodies sent, then all N received and acknowledged by the consumers, counted exactly: every
message must arrive exactly once, or the run is invalid and the benchmark stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import random
import shutil
import sqlite3
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core_bench import BODY, BODY_BYTES, run_processes, until_last_received

BATCH = 100
ID_WIDTH = 12  # every peer message starts with its sequence number in 12 digits, then filler to 1 KB
FILLER_TEXT = random.Random(20240602).randbytes(BODY_BYTES).hex()[: BODY_BYTES - ID_WIDTH]
FILLER_BYTES = BODY[ID_WIDTH:]
PUMP_POOL_SIZE = 8  # 4 receives in flight + the monitor's peek + headroom, as docs/concurrency.md advises


def text_body(number: int) -> str:
    """A 1,024-character ASCII body (for peers whose payloads are JSON or text)."""
    return f"{number:0{ID_WIDTH}d}{FILLER_TEXT}"


def bytes_body(number: int) -> bytes:
    """A 1,024-byte body (for peers whose payloads are bytes)."""
    return f"{number:0{ID_WIDTH}d}".encode() + FILLER_BYTES


def ident(body: str | bytes) -> str:
    head = body[:ID_WIDTH]
    return head.decode() if isinstance(head, bytes) else head


# ---- this project's message pump ---------------------------------------------------------------------
def pump_runner(task: dict[str, Any]) -> tuple[Callable[[], list[Any]], Callable[[], None], dict[str, Any]]:
    """MessagePump, monitor strategy, concurrency 4, a no-op handler (it notes the Id), until empty; with
    ``batch_size`` when the case's batch is above 1 (a build without that parameter is never run here:
    run.py reports the case as not available)."""
    from airflow_provider_sqlqueue.transport import open_transport
    from airflow_provider_sqlqueue.transport.pump import MessagePump

    transport = open_transport(task["url"], pool_size=PUMP_POOL_SIZE)
    queue = transport.queue(task["table"])
    _ = queue._sql
    with transport.connection():
        pass
    ids: list[Any] = []
    info: dict[str, Any] = {}
    note_last = bool(task.get("time_to_last_message"))

    def handler(message: Any) -> None:
        ids.append(message.id)
        if note_last:  # beside the raw 4-process receive, timed to its last message as well
            info["last_received"] = time.monotonic()  # just before this message's commit

    batching = {"batch_size": task["batch"]} if task.get("batch", 1) > 1 else {}
    pump = MessagePump(
        queue, handler, max_concurrency=task.get("concurrency", 4), strategy="monitor", **batching
    )

    def run() -> list[Any]:
        stats = pump.run(until_empty=True)
        info["pump_stats"] = {
            key: value
            for key, value in stats.as_dict().items()
            if key in ("processed", "failed", "retried", "receives", "empty_receives", "peeks", "max_workers")
        }
        return ids

    return run, transport.close, info


# ---- peers: which are installed ----------------------------------------------------------------------
@dataclass(frozen=True)
class PeerCase:
    key: str  # e.g. "pgqueuer"
    label: str
    engine: str
    modules: tuple[str, ...]  # importable modules the peer needs
    send_batch: int  # messages per send call (1: one per call)
    receive_batch: int  # messages per receive (as the peer's consumer fetches them)
    consumers: int  # consumer processes (procrastinate: one worker process with concurrency 4)
    per_message: bool  # True: runs at N_single (one commit per message somewhere), else N
    settings: str  # what we set, for the docs
    slow: bool = False  # True: runs at the smaller --n-slow (a few hundred messages per second)

    @property
    def key_engine(self) -> str:
        return f"{self.key}@{self.engine}"


PEERS = (
    PeerCase(
        "pgqueuer",
        "pgqueuer: batched enqueue (100), 1 consumer with batch_size=100",
        "postgresql",
        ("pgqueuer", "asyncpg"),
        BATCH,
        BATCH,
        1,
        False,
        "asyncpg driver; Queries.enqueue with lists of 100; QueueManager.run(batch_size=100, mode=drain); "
        "defaults otherwise (durability, completion buffering, log table)",
    ),
    PeerCase(
        "procrastinate",
        "procrastinate: batch_defer_async (100), 1 worker with concurrency 4",
        "postgresql",
        ("procrastinate",),
        BATCH,
        1,
        1,
        True,
        "PsycopgConnector; Task.batch_defer_async with 100 jobs per call; run_worker_async(concurrency=4, "
        "wait=False); async task; defaults otherwise (listen_notify on, jobs kept as succeeded)",
    ),
    PeerCase(
        "kombu",
        "kombu + SQLAlchemy transport: put 1 by 1, 4 consumers get+ack 1 by 1",
        "postgresql",
        ("kombu", "sqlalchemy", "psycopg"),
        1,
        1,
        4,
        True,
        "sqla+postgresql+psycopg:// URL; SimpleQueue.put / get_nowait / ack; json serializer; "
        "transport defaults",
        slow=True,
    ),
    PeerCase(
        "kombu",
        "kombu + SQLAlchemy transport: put 1 by 1, 4 consumers get+ack 1 by 1",
        "sqlite",
        ("kombu", "sqlalchemy"),
        1,
        1,
        4,
        True,
        "sqla+sqlite:/// URL; SimpleQueue.put / get_nowait / ack; json serializer; transport defaults",
        slow=True,
    ),
    PeerCase(
        "persistqueue",
        "persist-queue SQLiteAckQueue: put 1 by 1, 1 consumer get+ack 1 by 1",
        "sqlite",
        ("persistqueue",),
        1,
        1,
        1,
        True,
        "SQLiteAckQueue(path) with its defaults (auto_commit=True, pickle serializer); one process "
        "(the queue is thread-safe within a process, not shared between processes)",
    ),
)


def missing_modules(peer: PeerCase) -> list[str]:
    return [name for name in peer.modules if importlib.util.find_spec(name) is None]


# ---- peers: the workers -----------------------------------------------------------------------------
Runner = tuple[Callable[[], list[Any]], Callable[[], None], dict[str, Any]]


def _loop_runner(prepare: Any, work: Any, close: Any) -> Runner:
    """Async peers: connect on a private loop before the clock, run ``work`` on it when timed."""
    loop = asyncio.new_event_loop()
    state = loop.run_until_complete(prepare())

    def run() -> list[Any]:
        return loop.run_until_complete(work(state))  # type: ignore[no-any-return]

    def finish() -> None:
        with contextlib.suppress(Exception):
            loop.run_until_complete(close(state))
        loop.close()

    return run, finish, {}


def pgqueuer_runner(task: dict[str, Any]) -> Runner:
    import asyncpg
    from pgqueuer import Queries, QueueManager
    from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver
    from pgqueuer.types import QueueExecutionMode

    count, dsn = task["count"], task["dsn"]

    async def prepare() -> dict[str, Any]:
        connection = await asyncpg.connect(dsn)
        state: dict[str, Any] = {"connection": connection, "queries": Queries(AsyncpgDriver(connection))}
        if task["phase"] == "send":
            state["chunks"] = [
                [bytes_body(number) for number in range(start, min(start + BATCH, count))]
                for start in range(0, count, BATCH)
            ]
        return state

    async def send(state: dict[str, Any]) -> list[Any]:
        for payloads in state["chunks"]:
            await state["queries"].enqueue(["bench"] * len(payloads), payloads, [0] * len(payloads))
        return []

    async def receive(state: dict[str, Any]) -> list[Any]:
        received: list[str] = []
        manager = QueueManager(state["queries"])

        @manager.entrypoint("bench")
        async def bench(job: Any) -> None:
            received.append(ident(job.payload))

        await manager.run(batch_size=BATCH, mode=QueueExecutionMode.drain)
        return received

    async def close(state: dict[str, Any]) -> None:
        await state["connection"].close()

    return _loop_runner(prepare, send if task["phase"] == "send" else receive, close)


def procrastinate_runner(task: dict[str, Any]) -> Runner:
    import procrastinate

    count = task["count"]
    received: list[str] = []
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=task["dsn"]))

    @app.task(name="bench", queue="bench")
    async def bench(body: str) -> None:
        received.append(ident(body))

    async def prepare() -> dict[str, Any]:
        await app.open_async()
        state: dict[str, Any] = {}
        if task["phase"] == "send":
            state["chunks"] = [
                [{"body": text_body(number)} for number in range(start, min(start + BATCH, count))]
                for start in range(0, count, BATCH)
            ]
        return state

    async def send(state: dict[str, Any]) -> list[Any]:
        for chunk in state["chunks"]:
            await bench.batch_defer_async(*chunk)
        return []

    async def receive(state: dict[str, Any]) -> list[Any]:
        await app.run_worker_async(
            queues=["bench"], concurrency=task["concurrency"], wait=False, install_signal_handlers=False
        )
        return received

    async def close(state: dict[str, Any]) -> None:
        await app.close_async()

    return _loop_runner(prepare, send if task["phase"] == "send" else receive, close)


def kombu_runner(task: dict[str, Any]) -> Runner:
    from kombu import Connection

    count = task["count"]
    connection = Connection(task["kombu_url"])
    queue = connection.SimpleQueue("bench")
    queue.consumer  # noqa: B018 - declare the queue before the clock
    bodies = [text_body(number) for number in range(count)] if task["phase"] == "send" else []

    def send() -> list[Any]:
        for body in bodies:
            queue.put(body)
        return []

    info: dict[str, Any] = {}

    def receive() -> list[Any]:
        received: list[str] = []
        while True:
            try:
                message = queue.get_nowait()
            except queue.Empty:
                return received
            received.append(ident(message.payload))
            message.ack()
            info["last_received"] = time.monotonic()  # as core_bench's runners note it

    def close() -> None:
        queue.close()
        connection.release()

    return (send if task["phase"] == "send" else receive), close, info


def persistqueue_runner(task: dict[str, Any]) -> Runner:
    from persistqueue import SQLiteAckQueue
    from persistqueue.exceptions import Empty

    count = task["count"]
    queue = SQLiteAckQueue(task["path"])
    bodies = [text_body(number) for number in range(count)] if task["phase"] == "send" else []

    def send() -> list[Any]:
        for body in bodies:
            queue.put(body)
        return []

    info: dict[str, Any] = {}

    def receive() -> list[Any]:
        received: list[str] = []
        while True:
            try:
                item = queue.get(block=False)
            except Empty:
                return received
            received.append(ident(item))
            queue.ack(item)
            info["last_received"] = time.monotonic()  # as core_bench's runners note it

    return (send if task["phase"] == "send" else receive), lambda: None, info


RUNNERS = {
    "pgqueuer": "peers:pgqueuer_runner",
    "procrastinate": "peers:procrastinate_runner",
    "kombu": "peers:kombu_runner",
    "persistqueue": "peers:persistqueue_runner",
}


# ---- peers: the parent side -------------------------------------------------------------------------
class PeerRun:
    """Fresh storage for one peer run: a new database on the PostgreSQL server, or a new SQLite file."""

    def __init__(self, engine: str, admin_dsn: str | None, folder: Path, name: str) -> None:
        self.engine, self.admin_dsn, self.name = engine, admin_dsn, name
        if engine == "postgresql":
            import psycopg

            with psycopg.connect(admin_dsn, autocommit=True) as admin:
                admin.execute(f"DROP DATABASE IF EXISTS {name}")
                admin.execute(f"CREATE DATABASE {name}")
            self.dsn = admin_dsn.rsplit("/", 1)[0] + f"/{name}"  # type: ignore[union-attr]
            self.path = None
        else:
            self.path = folder / f"{name}.db"  # persist-queue makes this a folder holding its data.db
            self.drop()
            self.dsn = None

    def kombu_url(self) -> str:
        if self.engine == "postgresql":
            return "sqla+" + self.dsn.replace("postgresql://", "postgresql+psycopg://", 1)  # type: ignore[union-attr]
        return f"sqla+sqlite:///{self.path}"

    def drop(self) -> None:
        if self.engine == "postgresql":
            import psycopg

            with psycopg.connect(self.admin_dsn, autocommit=True) as admin:  # type: ignore[arg-type]
                admin.execute(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")
        elif self.path is not None and self.path.is_dir():
            shutil.rmtree(self.path)
        else:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)


def _install_schema(peer: PeerCase, storage: PeerRun) -> None:
    """Each peer's own schema, through its own API (not timed)."""
    if peer.key == "pgqueuer":
        import asyncpg
        from pgqueuer import Queries
        from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver

        async def install() -> None:
            connection = await asyncpg.connect(storage.dsn)
            try:
                await Queries(AsyncpgDriver(connection)).install()
            finally:
                await connection.close()

        asyncio.run(install())
    elif peer.key == "procrastinate":
        import procrastinate

        app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=storage.dsn))

        async def apply() -> None:
            async with app.open_async():
                await app.schema_manager.apply_schema_async()

        asyncio.run(apply())


def _settle(storage: PeerRun) -> None:
    if storage.engine == "postgresql":
        import psycopg

        with psycopg.connect(storage.dsn, autocommit=True) as connection:  # type: ignore[arg-type]
            connection.execute("VACUUM (ANALYZE)")
            connection.execute("CHECKPOINT")
    else:
        path = storage.path / "data.db" if storage.path.is_dir() else storage.path  # type: ignore[union-attr]
        with contextlib.closing(sqlite3.connect(path)) as connection:
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


def _left_over(peer: PeerCase, storage: PeerRun) -> int | None:
    """Messages still waiting in the peer's storage after the drain, by its own tables (None: unknown)."""
    try:
        if storage.engine == "postgresql":
            import psycopg

            sql = {
                "pgqueuer": "SELECT count(*) FROM pgqueuer",
                "procrastinate": "SELECT count(*) FROM procrastinate_jobs WHERE status <> 'succeeded'",
                "kombu": "SELECT count(*) FROM kombu_message WHERE visible",
            }[peer.key]
            with psycopg.connect(storage.dsn) as connection:  # type: ignore[arg-type]
                return int(connection.execute(sql).fetchone()[0])  # type: ignore[index]
        if peer.key == "kombu":
            with contextlib.closing(sqlite3.connect(storage.path)) as connection:  # type: ignore[arg-type]
                return int(
                    connection.execute("SELECT count(*) FROM kombu_message WHERE visible").fetchone()[0]
                )
    except Exception:
        return None
    return None


def run_peer(
    context: Any, peer: PeerCase, n: int, admin_dsn: str | None, folder: Path, round_number: int
) -> dict[str, Any]:
    """One timed run of a peer: N messages sent (timed), then drained by its consumers (timed), checked."""
    storage = PeerRun(peer.engine, admin_dsn, folder, f"peer_{peer.key}_{round_number}")
    try:
        _install_schema(peer, storage)
        task = {
            "runner": RUNNERS[peer.key],
            "engine": peer.engine,
            "count": n,
            "dsn": storage.dsn,
            "path": str(storage.path) if storage.path else None,
            "kombu_url": storage.kombu_url(),
            "concurrency": 4,
        }
        sent_seconds, _, send_infos = run_processes(context, [{**task, "phase": "send"}])
        _settle(storage)
        receive_all_done, received, receive_infos = run_processes(
            context, [{**task, "phase": "receive"}] * peer.consumers
        )
        receive_seconds = until_last_received(receive_infos, receive_all_done)
        counts = Counter(value for ids in received for value in ids)
        expected = {f"{number:0{ID_WIDTH}d}" for number in range(n)}
        duplicates = sum(1 for times in counts.values() if times > 1)
        missing = len(expected - counts.keys())
        unexpected = len(counts.keys() - expected)
        left = _left_over(peer, storage)
        if duplicates or missing or unexpected or left:
            raise AssertionError(
                f"{peer.key_engine}: {duplicates} received twice, {missing} never received, "
                f"{unexpected} unknown, {left} left waiting: the run is invalid"
            )
        return {
            "send_seconds": sent_seconds,
            "send_msgs_per_s": n / sent_seconds,
            "receive_seconds": receive_seconds,
            "receive_msgs_per_s": n / receive_seconds,
            "receive_all_done_seconds": receive_all_done,
            "send_cpu_us_per_msg": sum(info["cpu_seconds"] for info in send_infos) / n * 1e6,
            "receive_cpu_us_per_msg": sum(info["cpu_seconds"] for info in receive_infos) / n * 1e6,
            "per_consumer": sorted((len(ids) for ids in received), reverse=True),
        }
    finally:
        storage.drop()
