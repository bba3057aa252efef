"""Wake-up latency: how soon an idle consumer handles a message another process has just committed.

Part of ``benchmarks/run.py`` (section ``wakeup``). For each case a consumer process starts and reports
ready; it is left idle for 3 s (nothing in its queue); then a second process sends 50 single messages,
one commit each, 100 ms apart. The sender notes ``time.monotonic()`` right after each send has committed
(each body carries its sequence number) and the consumer's handler notes it on entry; on Linux
``CLOCK_MONOTONIC`` is one clock for every process of the machine, so the difference is the time from
commit to handler call. Reported per case: p50, p95 and max (and min) over the messages.

Cases: this project's ``MessagePump`` (monitor strategy, concurrency 4, no-op handler) with push wake-up
(``wake_up="auto"``: LISTEN/NOTIFY on PostgreSQL) and with polling (``wake_up="poll"``, the default idle
delay of 1 s), and pgqueuer's consumer with its own LISTEN/NOTIFY wake-up, on PostgreSQL; the pump's
polling on SQLite (which has no push across processes). A pump case whose parameter this build of the
project lacks is reported as not available, never measured with something else.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import inspect
import math
import queue as queue_module
import statistics
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SENDS = 50
SPACING_S = 0.1
IDLE_S = 3.0
QUICK = {"sends": 5, "spacing_s": 0.05, "idle_s": 0.5}
SEQUENCE_WIDTH = 12
PUMP_POOL_SIZE = 8  # as peers.py's throughput case: 4 receives + the monitor's peek + headroom
STEP_TIMEOUT_S = 60.0  # start-up or the tail of a run: far beyond any wake-up, short enough to fail a hang


@dataclass(frozen=True)
class WakeCase:
    key: str  # unique per engine
    engine: str
    label: str
    system: str  # "sqlqueue" or "pgqueuer"
    wake_up: str | None  # the pump's wake_up argument; None for pgqueuer

    @property
    def key_engine(self) -> str:
        return f"{self.key}@{self.engine}"


CASES = (
    WakeCase("pump_push", "postgresql", 'MessagePump, push (wake_up="auto")', "sqlqueue", "auto"),
    WakeCase(
        "pump_poll", "postgresql", 'MessagePump, polling (wake_up="poll", idle 1 s)', "sqlqueue", "poll"
    ),
    WakeCase("pgqueuer", "postgresql", "pgqueuer consumer (its LISTEN/NOTIFY)", "pgqueuer", None),
    WakeCase("pump_poll", "sqlite", 'MessagePump, polling (wake_up="poll", idle 1 s)', "sqlqueue", "poll"),
)


def pump_parameters() -> set[str]:
    """The keyword arguments this build's MessagePump accepts (features are detected, never assumed)."""
    from airflow_provider_sqlqueue.transport.pump import MessagePump

    return set(inspect.signature(MessagePump).parameters)


def pump_wake_up_arguments(wake_up: str, parameters: set[str]) -> dict[str, str] | None:
    """The pump's arguments for a wake-up mode, or None when this build cannot run it. A build without the
    ``wake_up`` parameter polls, so its polling case is today's pump with no argument."""
    if "wake_up" in parameters:
        return {"wake_up": wake_up}
    return {} if wake_up == "poll" else None


def unavailable_reason(case: WakeCase, parameters: set[str]) -> str | None:
    """Why ``case`` cannot run here, or None."""
    if case.system == "pgqueuer":
        missing = [name for name in ("pgqueuer", "asyncpg") if importlib.util.find_spec(name) is None]
        return f"not importable here: {', '.join(missing)} (run benchmarks/setup.sh)" if missing else None
    if pump_wake_up_arguments(case.wake_up or "", parameters) is None:
        return "not available in this build: MessagePump has no wake_up parameter"
    return None


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile: the smallest value with at least ``fraction`` of the values at or
    below it (p95 of 50 values is the 48th smallest)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def summarize(latencies_ms: list[float]) -> dict[str, float]:
    return {
        "p50_ms": percentile(latencies_ms, 0.50),
        "p95_ms": percentile(latencies_ms, 0.95),
        "max_ms": max(latencies_ms),
        "min_ms": min(latencies_ms),
        "mean_ms": statistics.fmean(latencies_ms),
    }


def sequence_of(body: str | bytes) -> int:
    head = body[:SEQUENCE_WIDTH]
    return int(head.decode() if isinstance(head, bytes) else head)


def body_for(sequence: int) -> bytes:
    return f"{sequence:0{SEQUENCE_WIDTH}d}".encode() + b"." * 100


# ---- the two processes ----------------------------------------------------------------------------
def _consumer(task: dict[str, Any], events: Any) -> None:
    """Start the consumer, report ready, note the time each message reaches the handler, report them."""
    try:
        handled = (
            _pgqueuer_consume(task, events) if task["system"] == "pgqueuer" else _pump_consume(task, events)
        )
        events.put(("handled", handled))
    except BaseException:
        events.put(("error", "consumer", traceback.format_exc()))


def _pump_consume(task: dict[str, Any], events: Any) -> dict[int, float]:
    import threading

    from airflow_provider_sqlqueue.transport import open_transport
    from airflow_provider_sqlqueue.transport.pump import MessagePump

    handled: dict[int, float] = {}
    everything = threading.Event()

    def handler(message: Any) -> None:
        handled[sequence_of(message.body)] = time.monotonic()
        if len(handled) >= task["sends"]:
            everything.set()

    transport = open_transport(task["url"], pool_size=PUMP_POOL_SIZE)
    try:
        pump = MessagePump(
            transport.queue(task["table"]),
            handler,
            max_concurrency=4,
            strategy="monitor",
            **task["pump_arguments"],
        )
        pump.start()
        try:
            events.put(("ready", "consumer"))
            everything.wait(task["idle_s"] + task["sends"] * task["spacing_s"] + STEP_TIMEOUT_S)
        finally:
            pump.stop(10)
    finally:
        transport.close()
    return handled


def _pgqueuer_consume(task: dict[str, Any], events: Any) -> dict[int, float]:
    import asyncpg
    from pgqueuer import Queries, QueueManager
    from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver

    handled: dict[int, float] = {}

    async def consume() -> None:
        connection = await asyncpg.connect(task["dsn"])
        try:
            manager = QueueManager(Queries(AsyncpgDriver(connection)))

            @manager.entrypoint("wakeup")
            async def wakeup(job: Any) -> None:
                handled[sequence_of(job.payload)] = time.monotonic()
                if len(handled) >= task["sends"]:
                    manager.shutdown.set()

            async def report_ready() -> None:
                await asyncio.sleep(0.2)  # the manager's LISTEN is issued as run() starts
                events.put(("ready", "consumer"))

            ready = asyncio.create_task(report_ready())
            timeout = task["idle_s"] + task["sends"] * task["spacing_s"] + STEP_TIMEOUT_S
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(manager.run(), timeout)
            await ready
        finally:
            await connection.close()

    asyncio.run(consume())
    return handled


def _sender(task: dict[str, Any], events: Any, go: Any) -> None:
    """Connect, report ready, and on ``go`` send one message per commit on schedule; report the times
    noted right after each commit."""
    try:
        committed = (
            _pgqueuer_send(task, events, go) if task["system"] == "pgqueuer" else _pump_send(task, events, go)
        )
        events.put(("committed", committed))
    except BaseException:
        events.put(("error", "sender", traceback.format_exc()))


def _pump_send(task: dict[str, Any], events: Any, go: Any) -> dict[int, float]:
    from airflow_provider_sqlqueue.transport import open_transport

    committed: dict[int, float] = {}
    with open_transport(task["url"]) as transport:
        queue = transport.queue(task["table"])
        with transport.connection():
            pass
        events.put(("ready", "sender"))
        if not go.wait(STEP_TIMEOUT_S):
            raise TimeoutError("no start signal")
        started = time.monotonic()
        for sequence in range(task["sends"]):
            _sleep_until(started + sequence * task["spacing_s"])
            queue.send(body_for(sequence))
            committed[sequence] = time.monotonic()
    return committed


def _pgqueuer_send(task: dict[str, Any], events: Any, go: Any) -> dict[int, float]:
    import asyncpg
    from pgqueuer import Queries
    from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver

    committed: dict[int, float] = {}

    async def send() -> None:
        connection = await asyncpg.connect(task["dsn"])
        try:
            queries = Queries(AsyncpgDriver(connection))
            events.put(("ready", "sender"))
            if not await asyncio.to_thread(go.wait, STEP_TIMEOUT_S):
                raise TimeoutError("no start signal")
            started = time.monotonic()
            for sequence in range(task["sends"]):
                await asyncio.sleep(max(0.0, started + sequence * task["spacing_s"] - time.monotonic()))
                await queries.enqueue("wakeup", body_for(sequence), 0)  # autocommitted: one commit each
                committed[sequence] = time.monotonic()
        finally:
            await connection.close()

    asyncio.run(send())
    return committed


def _sleep_until(moment: float) -> None:
    delay = moment - time.monotonic()
    if delay > 0:
        time.sleep(delay)


# ---- the parent --------------------------------------------------------------------------------------
def _wait_for(events: Any, kind: str, processes: list[Any]) -> tuple[Any, ...]:
    deadline = time.monotonic() + STEP_TIMEOUT_S * 2
    while True:
        try:
            event = events.get(timeout=1)
        except queue_module.Empty:
            if time.monotonic() > deadline:
                raise TimeoutError(f"wake-up benchmark: no {kind!r} in time") from None
            if any(process.exitcode not in (None, 0) for process in processes):
                raise RuntimeError(f"a wake-up benchmark process died before {kind!r}") from None
            continue
        if event[0] == "error":
            raise RuntimeError(f"wake-up benchmark {event[1]} failed:\n{event[2]}")
        if event[0] != kind:
            raise RuntimeError(f"wake-up benchmark: expected {kind!r}, got {event[0]!r}")
        return event


def _prepare(case: WakeCase, url: str, admin_dsn: str | None, folder: Path) -> tuple[dict[str, Any], Any]:
    """A fresh queue (or pgqueuer database); returns the task's storage fields and a cleanup callable."""
    if case.system == "pgqueuer":
        import peers

        storage = peers.PeerRun(case.engine, admin_dsn, folder, "wakeup_pgqueuer")
        peers._install_schema(peers.PEERS[0], storage)
        return {"dsn": storage.dsn}, storage.drop
    from airflow_provider_sqlqueue.transport import open_transport

    table = f"wakeup_{case.key}"
    with open_transport(url) as transport:
        transport.queue(table).drop()
        transport.queue(table).create()

    def drop() -> None:
        with open_transport(url) as transport:
            transport.queue(table).drop()

    return {"url": url, "table": table}, drop


def run_case(
    context: Any,
    case: WakeCase,
    url: str,
    admin_dsn: str | None,
    folder: Path,
    settings: dict[str, Any],
    pump_arguments: dict[str, str],
) -> dict[str, Any]:
    """One measured case: the consumer idle for ``idle_s``, then ``sends`` single sends from another
    process; the commit-to-handler latency of each message, checked (each sequence handled once)."""
    storage, cleanup = _prepare(case, url, admin_dsn, folder)
    try:
        task = {"system": case.system, "pump_arguments": pump_arguments, **settings, **storage}
        events, go = context.Queue(), context.Event()
        consumer = context.Process(target=_consumer, args=(task, events), daemon=True)
        sender = context.Process(target=_sender, args=(task, events, go), daemon=True)
        processes = [consumer, sender]
        try:
            consumer.start()
            sender.start()  # it connects while the consumer starts, then waits for ``go``
            idle_from: float | None = None
            for _ in processes:
                if _wait_for(events, "ready", processes)[1] == "consumer":
                    idle_from = time.monotonic()
            assert idle_from is not None
            _sleep_until(idle_from + settings["idle_s"])
            go.set()
            results: dict[str, dict[int, float]] = {}
            for _ in range(2):
                event = events.get(
                    timeout=settings["idle_s"] + settings["sends"] * settings["spacing_s"] + 120
                )
                if event[0] == "error":
                    raise RuntimeError(f"wake-up benchmark {event[1]} failed:\n{event[2]}")
                results[event[0]] = event[1]
        finally:
            for process in processes:
                process.join(timeout=30)
                if process.is_alive():
                    process.terminate()
                    process.join()
        committed, handled = results["committed"], results["handled"]
        expected = set(range(settings["sends"]))
        if set(committed) != expected or set(handled) != expected:
            raise AssertionError(
                f"{case.key_engine}: sent {len(committed)}, handled {len(handled)} of {settings['sends']} "
                f"(missing {sorted(expected - set(handled))[:10]}): the run is invalid"
            )
        latencies = [(handled[number] - committed[number]) * 1000 for number in sorted(expected)]
        return {"latencies_ms": [round(value, 3) for value in latencies], **summarize(latencies)}
    finally:
        cleanup()


def row(
    case: WakeCase, settings: dict[str, Any], result: dict[str, Any] | None, reason: str | None
) -> dict[str, Any]:
    """The JSON row of a case: its figures, or why it was not measured."""
    base = {
        "case": case.key,
        "engine": case.engine,
        "label": case.label,
        "system": case.system,
        "wake_up": case.wake_up,
        **settings,
        "available": result is not None,
    }
    if reason:
        base["reason"] = reason
    return {**base, **(result or {})}
