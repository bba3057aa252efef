"""RequestReplyOperator and ReplyTrigger on real engines: the example DAG and a retried request through
``dag.test()``, and the trigger in real event loops (concurrent requests, a reply that came before the
trigger started, a restarted triggerer, a timeout and the late reply after it). The service is a Python
endpoint run by the test, standing in for a .NET one."""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")

from airflow.providers.common.compat.sdk import AirflowException, TaskDeferred
from test_airflow_dags import airflow_db, assert_succeeded, run_dag  # noqa: F401  (airflow_db: a fixture)

from airflow_provider_sqlqueue.operators.request_reply import RequestReplyOperator
from airflow_provider_sqlqueue.transport import Endpoint
from airflow_provider_sqlqueue.transport import headers as h
from airflow_provider_sqlqueue.transport.browse import queue_tables
from airflow_provider_sqlqueue.triggers.reply import ReplyTrigger

if TYPE_CHECKING:
    from conftest import EngineTarget

TEST_DAGS = {"AIRFLOW__CORE__DAGS_FOLDER": str(Path(__file__).with_name("dags"))}
PRICES = {"widget": 12.5}


class PricingService:
    """The ``Pricing`` endpoint: answers every request with its price as JSON and counts the requests."""

    def __init__(self, transport) -> None:
        self.endpoint = Endpoint(transport, "Pricing", instance_specific_queue=False, delayed_delivery=False)
        self.endpoint.create()
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def handle(self, message, context) -> None:
        asked = json.loads(message.body)
        with self._lock:
            self.requests.append(asked)
        price = PRICES.get(asked["item"], float(len(asked["item"])))
        answer = json.dumps({"item": asked["item"], "price": price})
        context.reply(answer, {h.CONTENT_TYPE: "application/json"})

    @contextmanager
    def running(self) -> Iterator[PricingService]:
        self.endpoint.start(self.handle, idle_delay=0.1, max_concurrency=2)
        try:
            yield self
        finally:
            self.endpoint.stop(timeout=5)


def wait_until(condition, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def reply_queues(transport) -> list[str]:
    return [
        str(address) for address in queue_tables(transport) if address.table.startswith("airflow.replies.")
    ]


# ---- dag.test() --------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_example_dag_asks_the_service_and_uses_its_price(airflow_db: Path, target: EngineTarget) -> None:  # noqa: F811
    with target.open() as transport:
        service = PricingService(transport)
        with service.running():
            run = run_dag(target, "sqlqueue_request_reply_example", {"item": "widget", "quantity": 3})
        assert_succeeded(run, target)
        assert service.requests == [{"item": "widget"}]
        assert re.search(r"^order total: 37\.5$", run.output, flags=re.MULTILINE), run.output
        assert reply_queues(transport) == []  # the answered request's reply queue is gone
        assert transport.queue("error").count() == 0


@pytest.mark.slow
@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_a_retried_request_is_not_sent_again_and_still_gets_its_reply(
    airflow_db: Path,  # noqa: F811
    target: EngineTarget,
) -> None:
    with target.open() as transport:
        service = PricingService(transport)
        with service.running():
            run = run_dag(target, "sqlqueue_test_request_retry", env=TEST_DAGS)
        assert_succeeded(run, target)
        [ask] = run.task_instances
        assert ask["try_number"] == 2 and ask["state"] == "success", run.task_instances
        assert service.requests == [{"item": "retried"}]  # one request for both tries
        assert reply_queues(transport) == []


# ---- the trigger in real event loops -------------------------------------------------------------------
def _operator(task_id: str = "ask", **options: Any) -> RequestReplyOperator:
    return RequestReplyOperator(
        task_id=task_id, destination="Pricing", body=options.pop("body", {"item": task_id}), **options
    )


def _context(task_id: str, try_number: int = 1) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="d", task_id=task_id, run_id="r1", map_index=-1, try_number=try_number)
    return {"ti": ti}


def _deferred(operator: RequestReplyOperator, context: dict[str, Any]) -> ReplyTrigger:
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(context)
    assert deferred.value.method_name == "execute_complete"
    return deferred.value.trigger


async def _first_event(trigger: ReplyTrigger, seconds: float) -> dict[str, Any] | None:
    try:
        async with asyncio.timeout(seconds):
            async for event in trigger.run():
                return event.payload
    except TimeoutError:
        return None
    return None


def _roundtrip(trigger: ReplyTrigger) -> ReplyTrigger:
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_sqlqueue.triggers.reply.ReplyTrigger"
    rebuilt = ReplyTrigger(**json.loads(json.dumps(kwargs)))
    assert rebuilt.serialize() == (classpath, kwargs)
    return rebuilt


@pytest.fixture
def airflow_connection(target: EngineTarget, monkeypatch) -> EngineTarget:
    for key, value in target.airflow_env().items():
        monkeypatch.setenv(key, value)
    return target


def test_concurrent_deferred_requests_get_their_own_replies(airflow_connection: EngineTarget) -> None:
    # each request creates and drops a table: Babelfish's DDL costs seconds, so it runs fewer of them
    items = [f"item-{n:02d}" for n in range(3 if airflow_connection.engine == "sqlserver" else 12)]
    with airflow_connection.open() as transport:
        service = PricingService(transport)
        operators = {item: _operator(item, poll_interval=0.1) for item in items}
        triggers = {item: _deferred(op, _context(item)) for item, op in operators.items()}

        async def wait_all() -> list[dict[str, Any] | None]:
            return await asyncio.gather(*(_first_event(_roundtrip(t), 60) for t in triggers.values()))

        with service.running():
            events = asyncio.run(wait_all())
        results = {}
        for item, event in zip(items, events, strict=True):
            assert event is not None and event["status"] == "success", event
            results[item] = operators[item].execute_complete(_context(item), event)
        assert sorted(r["item"] for r in service.requests) == items  # one request each
        for item, result in results.items():
            assert result["body"] == {"item": item, "price": float(len(item))}  # its own, none misrouted
            assert result["content_type"] == "application/json"
        assert reply_queues(transport) == [] and transport.queue("error").count() == 0


def test_a_reply_before_the_trigger_and_across_a_triggerer_restart_is_found(
    airflow_connection: EngineTarget,
) -> None:
    with airflow_connection.open() as transport:
        service = PricingService(transport)
        early, restarted = _operator("early", poll_interval=0.1), _operator("restarted", poll_interval=0.1)
        early_trigger = _deferred(early, _context("early"))
        with service.running():  # answers "early" before its trigger ever runs
            wait_until(lambda: transport.queue(reply_queues(transport)[0]).count() == 2)
        early_event = asyncio.run(_first_event(_roundtrip(early_trigger), 30))
        restarted_trigger = _deferred(restarted, _context("restarted"))
        assert asyncio.run(_first_event(restarted_trigger, 0.5)) is None  # no service: the triggerer stops
        with service.running():
            event = asyncio.run(_first_event(_roundtrip(restarted_trigger), 30))  # a new triggerer
        assert early_event is not None and early_event["status"] == "success"
        assert early.execute_complete(_context("early"), early_event)["body"]["item"] == "early"
        assert event is not None and event["status"] == "success"
        assert restarted.execute_complete(_context("restarted"), event)["body"]["item"] == "restarted"
        assert len(service.requests) == 2 and reply_queues(transport) == []


def test_a_timeout_fails_clearly_and_the_late_reply_reaches_the_error_queue(
    airflow_connection: EngineTarget,
) -> None:
    with airflow_connection.open() as transport:
        service = PricingService(transport)
        late = _operator("late", poll_interval=0.1, reply_timeout=0.3, retries=1)
        trigger = _deferred(late, _context("late"))
        event = asyncio.run(_first_event(trigger, 30))
        assert event is not None and event["status"] == "timeout", event
        with pytest.raises(AirflowException, match="the retry waits for the same reply without sending"):
            late.execute_complete(_context("late", try_number=1), event)
        assert len(reply_queues(transport)) == 1  # kept for the retry
        with service.running():  # the reply comes after the last try's timeout
            wait_until(lambda: transport.queue(reply_queues(transport)[0]).count() == 2)
        with pytest.raises(AirflowException, match=r"no reply to request .* on the last try"):
            late.execute_complete(_context("late", try_number=2), event)
        assert reply_queues(transport) == []
        with transport.queue("error").receive(10) as batch:
            [moved] = batch
        assert json.loads(moved.body) == {"item": "late", "price": 4.0}
        assert "airflow.replies." in moved.headers[h.FAILED_QUEUE]  # the canonical address of its reply queue
        assert (
            "no request waits for this reply any more" in moved.headers[f"{h.EXCEPTION_INFO_PREFIX}Message"]
        )


@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_replies_arriving_together_are_confirmed_a_few_connections_at_a_time(
    airflow_connection: EngineTarget, monkeypatch
) -> None:
    from airflow_provider_sqlqueue.triggers import reply

    open_now, most = 0, 0

    class CountedHook(reply.SqlQueueHook):  # the hook of the triggers' confirming reads only
        async def aget_transport(self):
            nonlocal open_now, most
            open_now += 1
            most = max(most, open_now)
            return await super().aget_transport()

        async def aclose(self) -> None:
            nonlocal open_now
            await super().aclose()
            open_now -= 1

    monkeypatch.setattr(reply, "SqlQueueHook", CountedHook)
    items = [f"together-{n:02d}" for n in range(3 * reply.CONFIRMING_AT_ONCE)]
    with airflow_connection.open() as transport:
        service = PricingService(transport)
        operators = {item: _operator(item, poll_interval=0.1) for item in items}
        triggers = {item: _deferred(op, _context(item)) for item, op in operators.items()}
        with service.running():  # every reply is there before the triggers start: one poll sees them all
            wait_until(lambda: all(transport.queue(q).count() == 2 for q in reply_queues(transport)))

        async def wait_all() -> list[dict[str, Any] | None]:
            return await asyncio.gather(*(_first_event(t, 60) for t in triggers.values()))

        events = asyncio.run(wait_all())
        for item, event in zip(items, events, strict=True):
            assert event is not None and event["status"] == "success", event
            assert operators[item].execute_complete(_context(item), event)["body"]["item"] == item
    assert 1 <= most <= reply.CONFIRMING_AT_ONCE, most


def test_the_trigger_and_operator_refuse_bad_arguments() -> None:
    deadline = datetime.now(timezone.utc).isoformat()
    with pytest.raises(ValueError, match="UUID request_id"):
        ReplyTrigger("airflow.replies", "not-a-uuid", deadline)
    with pytest.raises(ValueError, match="time zone"):
        ReplyTrigger("airflow.replies", "6b7c9d6e-1f2a-4b3c-8d9e-0a1b2c3d4e5f", "2026-01-01T00:00:00")
    with pytest.raises(ValueError, match="reply_timeout"):
        _operator(reply_timeout=timedelta(0))
    operator = _operator()
    with pytest.raises(AirflowException, match="unexpected trigger event"):
        operator.execute_complete(_context("ask"), {"status": "success", "request_id": "other"})
    base = set(inspect.signature(RequestReplyOperator.__mro__[1].__init__).parameters)
    own = set(inspect.signature(RequestReplyOperator.__init__).parameters) - {"self", "kwargs"}
    assert own.isdisjoint(base), own & base  # no argument shadows a BaseOperator one
