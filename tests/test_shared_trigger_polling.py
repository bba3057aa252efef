"""A triggerer full of deferred sensors shares one poller per database (issue 66).

Hundreds of ``PendingMessagesTrigger`` (and some ``QueueMessagesEventTrigger``) run on one asyncio loop, each
in its own task as Airflow's triggerer runs them, against real engines. Between them they hold one pooled
connection and, on PostgreSQL, one ``LISTEN`` connection (counted in ``pg_stat_activity`` by this process's
client ports); a sender still connects; the triggers whose queues get messages fire, and only those; a
dropped queue table ends only its own triggers, with an error event; each read is one statement for every
watched queue; the poller closes with its last trigger.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

import pytest
from conftest import EngineTarget
from own_connections import checker, own_sockets, own_tcp_ports, settled

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")

from airflow_provider_sqlqueue.transport.shared_poll import SHARED_POLLERS, SharedPoller
from airflow_provider_sqlqueue.triggers.queue import (
    PendingMessagesTrigger,
    QueueMessagesEventTrigger,
    shared_database_key,
)

pytestmark = pytest.mark.timeout(300)

# Triggers and queues per engine: the 300 on PostgreSQL, fewer where each read costs more here.
SCALE = {"postgresql": (300, 30), "sqlite": (120, 24), "sqlserver": (36, 12)}
POLL_INTERVAL = 0.5
FILLED_TWICE = range(0, 5)  # two messages each: every task trigger of these fires
FILLED_ONCE = range(5, 10)  # one message each: only the triggers waiting for one fire
DROPPED = 10  # its table is dropped: its task triggers end with an error event
EVENT_TRIGGERS_PER_QUEUE = 1


def held_connections(target: EngineTarget, earlier: set[str], bound: int = 0) -> int:
    """This process's client connections to the test database (PostgreSQL) but those open before the test
    (``earlier``), once ``bound`` or fewer, or as they stand after a while (see ``settled``)."""
    return settled(lambda: _held_connections(target, earlier), bound)


def _held_connections(target: EngineTarget, earlier: set[str]) -> int:
    ports = ",".join(str(port) for port in own_tcp_ports(earlier)) or "0"
    with checker(target.url) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid() "
            f"AND client_port IN ({ports})"
        ).fetchone()
    assert row is not None
    return int(row[0])


async def until(check: Any, what: str, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def more_reads(poller: SharedPoller, count: int) -> None:
    start = poller.reads
    await until(lambda: poller.reads >= start + count, f"{count} more shared reads")


@pytest.fixture
def queues(target: EngineTarget, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    for key, value in target.airflow_env().items():
        monkeypatch.setenv(key, value)
    names = [f"q{n:02d}" for n in range(SCALE[target.engine][1])]
    with target.open() as transport:
        transport.queue("error").create()
        for name in names:
            transport.queue(name).create()
    return names


def test_hundreds_of_deferred_sensors_share_one_poller(target: EngineTarget, queues: list[str]) -> None:
    earlier = own_sockets()
    count, _ = SCALE[target.engine]
    width = len(queues)
    tasks_of = [
        PendingMessagesTrigger(
            queues[n % width], min_messages=1 + (n // width) % 2, poll_interval=POLL_INTERVAL
        )
        for n in range(count)
    ]
    watchers = [
        QueueMessagesEventTrigger(name, poll_interval=POLL_INTERVAL)
        for name in queues
        for _ in range(EVENT_TRIGGERS_PER_QUEUE)
    ]
    for trigger in [*tasks_of, *watchers]:  # what the triggerer stores and loads back
        classpath, kwargs = trigger.serialize()
        module, _, name = classpath.rpartition(".")  # as the triggerer imports it
        again = getattr(importlib.import_module(module), name)(**kwargs)
        assert type(again) is type(trigger) and again.serialize() == (classpath, kwargs)

    async def scenario() -> tuple[dict[int, dict], dict[int, dict], dict[str, Any]]:
        fired: dict[int, dict] = {}
        watched: dict[int, dict] = {}

        async def run_task(number: int, trigger: PendingMessagesTrigger) -> None:
            async for event in trigger.run():
                fired[number] = event.payload
                return

        async def run_watcher(number: int, trigger: QueueMessagesEventTrigger) -> None:
            async for event in trigger.run():
                watched.setdefault(number, event.payload)

        running = [asyncio.create_task(run_task(n, t)) for n, t in enumerate(tasks_of)]
        running += [asyncio.create_task(run_watcher(n, t)) for n, t in enumerate(watchers)]
        key = shared_database_key("sqlqueue_default")
        await until(lambda: SHARED_POLLERS.poller(key) is not None, "the shared poller")
        poller = SHARED_POLLERS.poller(key)
        assert poller is not None
        await until(lambda: len(poller.watches) == len(running), "every trigger to watch")
        await more_reads(poller, 2)
        seen: dict[str, Any] = {"reads": poller.reads, "statements": poller.statements}
        if target.engine == "postgresql":
            await until(lambda: poller.listener is not None and poller.listener.connected.is_set(), "LISTEN")
            seen["held"] = await asyncio.to_thread(held_connections, target, earlier, 2)

        def send_and_drop() -> None:
            with target.open() as sender:  # a producer still gets a connection
                for n in FILLED_TWICE:
                    sender.queue(queues[n]).send_batch([b"a", b"b"])
                for n in FILLED_ONCE:
                    sender.queue(queues[n]).send(b"a")
                sender.queue(queues[DROPPED]).drop()

        await asyncio.to_thread(send_and_drop)
        expected = {
            n
            for n, t in enumerate(tasks_of)
            if queues.index(t.queue_name) in [*FILLED_TWICE, DROPPED]
            or (queues.index(t.queue_name) in FILLED_ONCE and t.min_messages == 1)
        }
        await until(lambda: expected <= set(fired), "the triggers of the filled and dropped queues")
        await until(lambda: len(watched) == len([*FILLED_TWICE, *FILLED_ONCE]), "the event triggers")
        await more_reads(poller, 3)  # anything else that would fire has had three reads to do so
        seen["fired_after"] = set(fired)
        seen["notifications"] = poller.listener.notifications if poller.listener else None
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        seen["closed"] = SHARED_POLLERS.poller(key) is None
        if target.engine == "postgresql":
            seen["held_after"] = await asyncio.to_thread(held_connections, target, earlier)
        return fired, watched, seen

    fired, watched, seen = asyncio.run(scenario())

    # One statement per shared read for every watched queue, while no estimate reached a threshold.
    assert seen["statements"] == seen["reads"]
    if target.engine == "postgresql":
        assert seen["held"] <= 2, f"{count} deferred sensors held {seen['held']} connections"
        assert seen["notifications"] and seen["notifications"] > 0  # the sends were pushed
        assert seen["held_after"] == 0
    assert seen["closed"]

    assert set(fired) == seen["fired_after"]
    for number, trigger in enumerate(tasks_of):
        position = queues.index(trigger.queue_name)
        event = fired.get(number)
        if position in FILLED_TWICE:
            assert event == {
                "status": "success",
                "queue": trigger.queue_name,
                "depth": 2,
                "count_mode": "estimate",
            }
        elif position in FILLED_ONCE and trigger.min_messages == 1:
            assert event is not None and event["status"] == "success" and event["depth"] == 1
        elif position == DROPPED:
            assert event is not None and event["status"] == "error", event
            assert "QueueNotFound" in event["message"] or "not exist" in event["message"], event
        else:
            assert event is None, (trigger.queue_name, event)
    filled = {queues[n] for n in [*FILLED_TWICE, *FILLED_ONCE]}
    assert {watchers[n].queue_name for n in watched} == filled
    for number, payload in watched.items():
        want = 2 if queues.index(watchers[number].queue_name) in FILLED_TWICE else 1
        assert payload["depth"] == want and payload["queue"] == watchers[number].queue_name


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_a_loop_that_ends_with_a_trigger_left_unfinished_closes_the_pollers_connections(
    target: EngineTarget, queues: list[str]
) -> None:
    """A caller that takes an event trigger's first event and returns leaves its generator unfinished, inside
    its watch; the loop's end then cancels the poller's task before the generator's ``finally`` can close
    the poller. The poller still closes its pooled connection and its LISTEN connection."""
    earlier = own_sockets()
    trigger = QueueMessagesEventTrigger(queues[0], poll_interval=POLL_INTERVAL)
    pollers: list[SharedPoller | None] = []

    async def first_event() -> dict[str, Any]:
        async for event in trigger.run():
            poller = SHARED_POLLERS.poller(shared_database_key("sqlqueue_default"))
            assert poller is not None
            listening = poller.listener  # started with the poller's first read
            assert listening is not None
            await until(listening.connected.is_set, "LISTEN")
            pollers.append(poller)
            return event.payload
        raise AssertionError("the trigger ended without an event")

    with target.open() as sender:
        sender.queue(queues[0]).send(b"a")
    assert asyncio.run(first_event())["status"] == "success"
    poller = pollers[0]
    assert poller is not None and poller.transport is None and poller.listener is None
    assert held_connections(target, earlier) == 0


@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_one_listener_hears_many_queues_and_leaves_the_forgotten_ones(target: EngineTarget) -> None:
    """The pump's wake-up listener, shared: one connection LISTENs for several queues, calls ``on_wake`` for
    each send, and once the forgotten channels outnumber the heard ones it listens afresh without them
    (the send to ``a``, committed first, would be heard before the one to ``c``)."""
    import threading

    from airflow_provider_sqlqueue.transport.wakeup import WakeUpListener

    with target.open() as transport:
        a, b, c = (transport.queue(name) for name in ("a", "b", "c"))
        for queue in (a, b, c):
            queue.create()
        woken = threading.Semaphore(0)
        listener = WakeUpListener(transport, None, "test", on_wake=woken.release).start()
        try:
            listener.listen(a.address)
            listener.listen(b.address)
            assert listener.connected.wait(10)
            deadline = 10.0
            b.send(b"x")
            assert woken.acquire(timeout=deadline)
            a.send(b"x")
            assert woken.acquire(timeout=deadline)
            assert listener.notifications == 2

            listener.forget(a.address)
            listener.forget(b.address)
            listener.listen(c.address)  # a and b forgotten, c heard: the connection is opened again
            only_c = {transport.dialect.listen_statement(c.address)}
            for _ in range(200):
                if listener._listening == only_c and listener.connected.is_set():
                    break
                threading.Event().wait(0.05)
            assert listener._listening == only_c
            heard_before = listener.notifications
            a.send(b"y")  # committed before c's send: were a still heard, it would arrive first
            c.send(b"y")
            assert woken.acquire(timeout=deadline)
            while woken.acquire(timeout=1.0):
                pass
            assert listener.notifications - heard_before == 1
        finally:
            listener.stop()
