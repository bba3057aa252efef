"""The Airflow surface through ``dag.test()`` on real engines, with the test DAGs of ``tests/dags``.

Each run is a ``dag_runner.py`` subprocess (see ``test_airflow_dags``) whose dags folder is ``tests/dags``;
``sqlqueue_default`` points at the test's engine.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import rawsql

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")

from airflow.sdk.definitions._internal.abstractoperator import DEFAULT_QUEUE
from test_airflow_dags import airflow_db, assert_succeeded, run_dag  # noqa: F401  (airflow_db: a fixture)

from airflow_provider_sqlqueue.transport import OutgoingMessage
from airflow_provider_sqlqueue.transport.depth_samples import DepthSampleTable, depth_samples_address
from airflow_provider_sqlqueue.triggers.queue import PendingMessagesTrigger

if TYPE_CHECKING:
    from conftest import EngineTarget

TEST_DAGS = {"AIRFLOW__CORE__DAGS_FOLDER": str(Path(__file__).with_name("dags"))}


@pytest.mark.slow
def test_mapped_and_plain_tasks_run_on_the_default_executor_queue(
    airflow_db: Path,  # noqa: F811
    target: EngineTarget,
) -> None:
    run = run_dag(target, "sqlqueue_test_mapped", env=TEST_DAGS)

    assert_succeeded(run, target)
    instances = run.task_instances
    assert sorted((ti["task_id"], ti["map_index"]) for ti in instances) == [
        ("consume", 0),
        ("plain_send", -1),
        ("provision", -1),
        ("send", 0),
        ("send", 1),
        ("send", 2),
        ("wait", 0),
    ], run.output
    assert {ti["queue"] for ti in instances} == {DEFAULT_QUEUE}, instances
    assert {ti["state"] for ti in instances} == {"success"}, instances
    with target.open() as transport:
        assert transport.queue("orders").count() == 0


@pytest.mark.slow
def test_every_templated_field_takes_an_xcomarg_and_a_jinja_string(
    airflow_db: Path,  # noqa: F811
    target: EngineTarget,
    tmp_path: Path,
) -> None:
    run = run_dag(target, "sqlqueue_test_templated", {"script_dir": str(tmp_path)}, env=TEST_DAGS)

    assert_succeeded(run, target)
    assert {ti["state"] for ti in run.task_instances} == {"success"}, run.task_instances
    output = run.output
    for kind, queue in (("FromXCom", "orders"), ("FromJinja", "invoices")):
        line = rf"message \S+ type Sales\.{kind} body (.*?)(?: +\[airflow_provider_sqlqueue\S*\].*)?$"
        typed = re.findall(line, output, flags=re.MULTILINE)
        bodies = [json.loads(body) if body.startswith("{") else body for body in typed]
        first = {"order": 1} if kind == "FromXCom" else "hello from jinja"
        assert sorted(map(json.dumps, bodies)) == sorted(map(json.dumps, [first, {"order": 2}, {"order": 3}]))
        assert f"{queue}: processed 3, failed 0" in output, output
    for prefix, queue in (("x", "orders"), ("j", "invoices")):
        text = (tmp_path / f"{prefix}_script.sql").read_text(encoding="utf-8")
        open_quote, close_quote = ("[", "]") if target.engine == "sqlserver" else ('"', '"')
        name = re.escape(f"{open_quote}{queue}{close_quote}")
        assert re.search(rf"CREATE TABLE (\S+\.)?{name}", text), text
        assert f"{open_quote}{prefix}_extra{close_quote} (" in text, text
    for name in ("x_extra", "j_extra"):
        assert f"purged 0 expired message(s) from {name}" in output, output
    with target.open() as transport:
        tables = ("orders", "orders.x1", "x_extra", "invoices", "invoices.j1", "j_extra", "rows_x", "rows_j")
        assert [name for name in tables if not transport.queue(name).exists()] == []
        assert transport.queue("orders").count() == 0 and transport.queue("invoices").count() == 0


@pytest.mark.slow
def test_a_retried_send_repeats_its_message_ids_and_returns_a_summary(
    airflow_db: Path,  # noqa: F811
    target: EngineTarget,
) -> None:
    run = run_dag(target, "sqlqueue_test_retry", env=TEST_DAGS)

    assert_succeeded(run, target)
    tries = {(ti["task_id"], ti["map_index"]): ti["try_number"] for ti in run.task_instances}
    assert tries[("send", -1)] == 2, run.task_instances  # the first try failed after its commit
    [returned] = re.findall(r"^send returned (\{.*\})", run.output, flags=re.MULTILINE)
    [mapped] = re.findall(r"^mapped returned (\[.*\])", run.output, flags=re.MULTILINE)
    summary, mapped_summaries = json.loads(returned), json.loads(mapped)
    with target.open() as transport:
        rows = rawsql.all_rows(transport.queue("orders"))
    sent = [
        (message_id, json.loads(headers)["NServiceBus.MessageId"], body) for message_id, headers, body in rows
    ]
    assert all(message_id == header for message_id, header, _ in sent)
    batch = [(message_id, body) for message_id, _, body in sent if body.startswith(b"{")]
    assert [body for _, body in batch] == [b'{"n": 0}', b'{"n": 1}', b'{"n": 2}'] * 2
    assert [message_id for message_id, _ in batch[:3]] == [message_id for message_id, _ in batch[3:]]
    assert len({message_id for message_id, _ in batch}) == 3
    assert summary == {"queue": "orders", "count": 3, "first_id": batch[0][0], "last_id": batch[2][0]}
    singles = {body: message_id for message_id, _, body in sent if not body.startswith(b"{")}
    assert sorted(singles) == [b"a", b"b"] and singles[b"a"] != singles[b"b"]
    assert sorted(item["first_id"] for item in mapped_summaries) == sorted(singles.values())
    assert all(item["count"] == 1 for item in mapped_summaries)


@pytest.mark.slow
def test_provisioning_with_defaults_creates_the_same_tables_on_any_worker(
    airflow_db: Path,  # noqa: F811
    target: EngineTarget,
) -> None:
    run = run_dag(target, "sqlqueue_test_provision_default", env=TEST_DAGS)

    assert_succeeded(run, target)
    with target.open() as transport:
        tables = rawsql.user_tables(transport, target.schema)
        # the error queue comes with its archive, where deleted failed messages go
        if target.babelfish:  # its sys.tables reads names back in lower case
            assert tables == {"sales", "error", "error_archive", "audit"}
        else:
            assert tables == {"Sales", "error", "error_archive", "audit"}


def test_an_instance_queue_needs_an_explicit_suffix() -> None:
    from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator, endpoint_queues

    with pytest.raises(ValueError, match="needs instance_suffix"):
        ProvisionQueuesOperator(task_id="p", endpoint="Sales", instance_specific_queue=True)
    with pytest.raises(ValueError, match="needs instance_suffix"):
        endpoint_queues("Sales", instance_specific_queue=True)
    assert endpoint_queues("Sales") == ["Sales", "error", "audit"]
    assert endpoint_queues("Sales", instance_suffix="node1") == ["Sales", "Sales.node1", "error", "audit"]


@pytest.mark.slow
def test_the_sensors_default_count_does_not_fire_on_an_overcounting_estimate(
    airflow_db: Path,  # noqa: F811
    target: EngineTarget,
) -> None:
    with target.open() as transport:
        transport.queue("error").create()
        orders = transport.queue("orders")
        orders.create()
        orders.send_batch([OutgoingMessage(b"stale", time_to_be_received=timedelta(milliseconds=1))] * 2)
        orders.send(b"fresh")
        time.sleep(0.05)
        assert orders.peek_estimate() == 3 and orders.count() == 1  # the estimate overcounts
        history = DepthSampleTable(transport, depth_samples_address(transport, orders.address))
        history.create()

    run = run_dag(target, "sqlqueue_test_sensor_count", env=TEST_DAGS)

    states = {ti["task_id"]: ti["state"] for ti in run.task_instances}
    assert states == {"poke": "skipped"}, run.output
    with target.open() as transport:
        samples = DepthSampleTable(transport, history.address).read(0)["orders"]
    # each poke offered the depth it read; the table keeps the first of each minute
    assert 1 <= len(samples) <= 2 and {s.messages for s in samples} == {1}, samples

    async def first_event_within(seconds: float) -> object:
        trigger = PendingMessagesTrigger(queue_name="orders", min_messages=3, poll_interval=0.2)
        try:
            async for event in _with_timeout(trigger.run(), seconds):
                return event.payload
        except TimeoutError:
            return None
        return None

    with pytest.MonkeyPatch.context() as patch:
        for key, value in target.airflow_env().items():
            patch.setenv(key, value)
        assert asyncio.run(first_event_within(2.0)) is None  # the deferred sensor's trigger waits too
        with target.open() as transport:
            transport.queue("orders").send_batch([b"two", b"three"])
        assert asyncio.run(first_event_within(10.0)) == {
            "status": "success",
            "queue": "orders",
            "depth": 3,
            "count_mode": "estimate",
        }


async def _with_timeout(events: AsyncIterator[Any], seconds: float) -> AsyncIterator[Any]:
    async with asyncio.timeout(seconds):
        async for event in events:
            yield event


@pytest.mark.slow
def test_failed_messages_of_one_queue_are_retried_by_the_operator_in_a_dag(
    airflow_db: Path,  # noqa: F811
    target: EngineTarget,
) -> None:
    """dag.test() of RetryFailedMessagesOperator: the ValueErrors of orders go back, the rest stay."""
    from test_failed import Handler, drain

    handler = Handler()
    with target.open() as transport:
        transport.queue("error").create()
        for name, bodies in (("orders", [b"v1", b"v2", b"v3", b"k1"]), ("invoices", [b"v4"])):
            transport.queue(name).create()
            transport.queue(name).send_batch(bodies)
            drain(transport.queue(name), handler)

    run = run_dag(target, "sqlqueue_test_failed_retry", {"failed_queue": "orders"}, env=TEST_DAGS)

    assert_succeeded(run, target)
    [returned] = re.findall(r"^retry returned (\{.*\})", run.output, flags=re.MULTILINE)
    result = json.loads(returned)
    assert result["count"] == 3 and result["refused"] == 0 and result["batches"] == 2
    handler.broken = False
    with target.open() as transport:
        assert result["queues"] == {str(transport.queue("orders").address): 3}
        assert transport.queue("invoices").count() == 0
        drain(transport.queue("orders"), handler)
    assert len(handler.seen) == 3 and set(handler.seen.values()) == {1}
    assert {result["first_id"], result["last_id"]} <= set(handler.seen)
