"""Exactly once with the handler's own tables, under faults (issue 43, part 4): a handler that, through
``context.connection`` in ``sends_atomic_with_receive``, inserts a business row, adds one to a counter row
and sends one message per message it receives, in worker processes killed with SIGKILL at random points and
restarted; on PostgreSQL the server also crashes (``pg_ctl stop -m immediate``) and restarts once mid-run.
At the end every message has exactly one business row (no unique key dedups them: the table has none), the
counter equals the row count, every send exists exactly once, the input queue is empty and, with the
batching pump, the messages whose handler always fails are in the error queue exactly once and left no row
and no send behind.

``SQLQUEUE_FAULT_MESSAGES`` sets the messages per run (default 10,000, the published figures' size; CI runs
fewer, .ci/test says how many).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import rawsql
from conftest import ENGINES, EngineTarget, sqlserver_target
from postgres_cluster import PostgresCluster, throwaway_postgres
from reliability_figures import counted
from reliability_workers import failing_sequence, pump_into_business_tables

from airflow_provider_sqlqueue.transport import OutgoingMessage, TransientDatabaseError, Transport

pytest_plugins = ["reliability_figures"]  # the figures fixture

MESSAGES_ENV = "SQLQUEUE_FAULT_MESSAGES"
KILLS = 6
WORKERS = 2
BATCH_SIZE = 10
FAIL_EVERY = 25  # the batching drill's handler fails for one message in 25, on every attempt
RELATED_TO = "NServiceBus.RelatedTo"
MESSAGE_ID = "NServiceBus.MessageId"
EXCEPTION = "NServiceBus.ExceptionInfo.Message"


def fault_messages() -> int:
    text = os.environ.get(MESSAGES_ENV, "10000")
    if not text.isdigit() or int(text) < 100:
        raise pytest.UsageError(f"{MESSAGES_ENV} must be a whole number of at least 100, not {text!r}")
    return int(text)


@dataclass
class Bed:
    """One engine's database for the drill, and how to restart its server mid-run (PostgreSQL only)."""

    target: EngineTarget
    cluster: PostgresCluster | None = None

    def restart(self) -> float:
        """Crash the server (no checkpoint: the start recovers from the WAL) and start it again; returns
        the seconds it was down."""
        assert self.cluster is not None
        stopped = time.monotonic()
        self.cluster.stop("immediate")
        time.sleep(1)
        self.cluster.start()
        return time.monotonic() - stopped


@pytest.fixture(params=ENGINES)
def bed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bed]:
    """The engine fixtures' targets, except that PostgreSQL is a durable server of the test's own, which it
    may crash without disturbing the session's."""
    engine, _, driver = str(request.param).partition("-")
    if engine == "sqlite":
        yield Bed(EngineTarget("sqlite", f"sqlite:///{tmp_path / 'queues.db'}", None))
    elif engine == "sqlserver":
        for target in sqlserver_target(request, driver):
            yield Bed(target)
    else:
        with throwaway_postgres(durable=True) as cluster:
            yield Bed(EngineTarget("postgresql", cluster.url(), None), cluster)


def create_tables(transport: Transport) -> tuple[str, str]:
    """The queues, the business table (no unique key) and the counter row; returns the two tables' names."""
    for name in ("orders", "out", "error"):
        transport.queue(name).create()
    dialect = transport.dialect
    invoices = dialect.qualified_name(transport.resolve("invoices"))
    tally = dialect.qualified_name(transport.resolve("tally"))
    rawsql.execute(
        transport, f"CREATE TABLE {invoices} (message_id varchar(40) NOT NULL, sequence int NOT NULL)"
    )
    rawsql.execute(transport, f"CREATE TABLE {tally} (name varchar(20) PRIMARY KEY, handled int NOT NULL)")
    mark = dialect.placeholder
    rawsql.execute(transport, f"INSERT INTO {tally} (name, handled) VALUES ({mark}, {mark})", ("invoices", 0))
    return invoices, tally


def headers_of(rows: list[tuple[Any, ...]], name: str) -> list[str]:
    return [json.loads(headers)[name] for _, headers, _ in rows]


class Workers:
    """The drill's worker processes (:func:`pump_into_business_tables`), spawned; leaving the ``with``
    block kills any still running, so a failed test leaves no process behind."""

    def __init__(self, args: tuple[Any, ...], folder: Path) -> None:
        self.attempts_path = folder / "attempts"
        self.stop_path = folder / "stop"
        self.args = (*args, str(self.attempts_path), str(self.stop_path))
        self.context = multiprocessing.get_context("spawn")
        self.processes: list[Any] = []

    def start(self) -> Any:
        process = self.context.Process(target=pump_into_business_tables, args=self.args)
        process.start()
        return process

    def dead(self) -> list[int]:
        return [process.exitcode for process in self.processes if process.exitcode is not None]

    def handling(self) -> list[int]:
        """The workers that have called their handler (they are past their start-up)."""
        if not self.attempts_path.exists():
            return []
        pids = {line.split()[0] for line in self.attempts_path.read_text().splitlines()}
        return [index for index, process in enumerate(self.processes) if str(process.pid) in pids]

    def kill_and_replace(self, index: int) -> None:
        victim = self.processes[index]
        victim.kill()  # SIGKILL: no rollback, no clean close
        victim.join(30)
        assert victim.exitcode == -9, f"the killed worker's exit code is {victim.exitcode}"
        self.processes[index] = self.start()

    def stop(self) -> list[int | None]:
        """Ask every worker to stop its pump gracefully; their exit codes."""
        self.stop_path.touch()
        for process in self.processes:
            process.join(90)
        return [process.exitcode for process in self.processes]

    def __enter__(self) -> Workers:
        self.processes = [self.start() for _ in range(WORKERS)]
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            if process.exitcode is None:
                process.kill()
                process.join(30)


def run_drill(bed: Bed, batch_size: int, fail_every: int, tmp_path: Path, figures) -> None:
    target = bed.target
    messages = fault_messages()
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    with target.open(connect_timeout=2) as transport:
        invoices, tally = create_tables(transport)
        orders = transport.queue("orders")
        sent = [OutgoingMessage(str(sequence).encode()) for sequence in range(messages)]
        for start in range(0, messages, 1000):
            orders.send_batch(sent[start : start + 1000])
        failing = {str(m.id) for n, m in enumerate(sent) if failing_sequence(n, fail_every)}
        succeeding = [str(m.id) for m in sent if str(m.id) not in failing]

        # SQLite has one writer at a time and Babelfish's receivers wait for each other: one handler per
        # process there; two per process on PostgreSQL.
        concurrency = 2 if target.engine == "postgresql" else 1
        workers = Workers((target.url, target.schema, batch_size, concurrency, fail_every), tmp_path)

        handled_so_far = [0]

        def handled() -> int:
            try:
                [(value,)] = rawsql.execute(transport, f"SELECT handled FROM {tally}")
            except TransientDatabaseError:  # the server is restarting
                return handled_so_far[0]
            handled_so_far[0] = int(value)
            return handled_so_far[0]

        deadline = time.monotonic() + 300 + messages * 0.15

        def wait_for(done: Callable[[], bool], what: str) -> None:
            while not done():
                dead = workers.dead()
                assert not dead, f"a worker died of itself (exit code {dead}) while waiting for {what}"
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                time.sleep(0.1)

        faults: list[tuple[float, str]] = [(rng.uniform(0.05, 0.8), "kill") for _ in range(KILLS)]
        if bed.cluster is not None:
            faults.append((rng.uniform(0.35, 0.65), "restart"))
        faults.sort()
        kills = restarts = 0
        outage_seconds = 0.0
        started = time.monotonic()
        with workers:
            for fraction, fault in faults:
                goal = fraction * len(succeeding)
                wait_for(lambda goal=goal: handled() >= goal, f"{fraction:.0%} handled")
                if fault == "kill":
                    time.sleep(rng.uniform(0.0, 0.2))
                    # a worker that is handling messages if there is one, else one still starting up
                    workers.kill_and_replace(rng.choice(workers.handling() or range(WORKERS)))
                    kills += 1
                else:
                    outage_seconds += bed.restart()
                    restarts += 1

            def drained() -> bool:
                try:
                    return orders.count() == 0
                except TransientDatabaseError:
                    return False

            wait_for(drained, "the input queue to drain")
            assert workers.stop() == [0] * WORKERS, "a worker's graceful stop failed"
        run_seconds = time.monotonic() - started

        rows = Counter(str(row[0]) for row in rawsql.execute(transport, f"SELECT message_id FROM {invoices}"))
        [(counter,)] = rawsql.execute(transport, f"SELECT handled FROM {tally}")
        out_rows = rawsql.all_rows(transport.queue("out"))
        related = headers_of(out_rows, RELATED_TO)
        error_rows = rawsql.all_rows(transport.queue("error"))
        error_ids = headers_of(error_rows, MESSAGE_ID)
        left = orders.count()
        left_rows = rawsql.all_rows(orders)
    calls = Counter(line.split()[1] for line in workers.attempts_path.read_text().splitlines())

    business = counted(succeeding, [i for i in rows.elements() if i not in failing])
    sends = counted(succeeding, [i for i in related if i not in failing])
    errors = counted(failing, error_ids)
    kept_from_failed = sum(rows[i] for i in failing) + sum(1 for i in related if i in failing)
    missing = set(succeeding) - set(rows)
    failures = [json.loads(headers).get(EXCEPTION) for _, headers, _ in error_rows]
    whereabouts = {
        i: failures[error_ids.index(i)] if i in error_ids else "not in the error queue" for i in missing
    }
    assert business == {"lost": 0, "duplicated": 0}, f"business rows; the missing ones: {whereabouts}"
    assert int(counter) == sum(rows.values()), "the counter row disagrees with the business rows"
    assert sends == {"lost": 0, "duplicated": 0}, "sends"
    assert all(body == i.encode() for (_, _, body), i in zip(out_rows, related, strict=True)), (
        "a send's body is not its input's Id"
    )
    assert errors == {"lost": 0, "duplicated": 0}, "error queue"
    assert [i for i in error_ids if i not in failing] == [], "a message that succeeds is in the error queue"
    assert kept_from_failed == 0, "a failed message's row or send was kept"
    assert left == 0 and left_rows == [], "the input queue is not empty"
    assert kills == KILLS and restarts == (1 if bed.cluster is not None else 0)
    assert set(calls) == {str(m.id) for m in sent}, "the handler never saw a message"
    undone = sum(calls[i] for i in succeeding) - len(succeeding)
    failing_calls = sum(calls[i] for i in failing)
    figures(
        engine=target.engine,
        driver=target.driver,
        variant=target.variant,
        messages=messages,
        batch_size=batch_size,
        worker_processes=WORKERS,
        handlers_per_process=concurrency,
        kills=kills,
        restarts=restarts,
        faults_injected=kills + restarts,
        outage_seconds=round(outage_seconds, 1),
        failing_messages=len(failing),
        handler_calls=sum(calls.values()),
        handler_calls_undone_by_faults=undone,
        handler_calls_failed_on_purpose=failing_calls,
        business_rows=sum(rows.values()),
        counter=int(counter),
        sends=len(related),
        error_queue=len(error_ids),
        kept_from_failed=kept_from_failed,
        lost=business["lost"] + sends["lost"] + errors["lost"],
        duplicated=business["duplicated"] + sends["duplicated"] + errors["duplicated"],
        run_seconds=round(run_seconds, 1),
        seed=seed,
    )


TIMEOUT = 600 + int(fault_messages() * 0.2)


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT)
def test_handler_rows_counter_and_sends_exactly_once_through_kills_and_a_restart(
    bed, tmp_path, figures
) -> None:
    """One message per receive transaction (``batch_size=1``)."""
    run_drill(bed, 1, 0, tmp_path, figures)


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT)
def test_batching_pump_keeps_failed_messages_writes_out_and_the_rest_exactly_once(
    bed, tmp_path, figures
) -> None:
    """Batches of 10, each message under its savepoint; one message in 25 fails on every attempt and goes
    to the error queue after its retries, its row, counter update and send rolled back to its savepoint."""
    run_drill(bed, BATCH_SIZE, FAIL_EVERY, tmp_path, figures)
