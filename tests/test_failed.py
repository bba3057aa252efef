"""Failed-message management: messages a failing handler sent to the error queue are listed in groups,
retried to their source queue after the handler is fixed and processed there exactly once, Ids kept."""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter

import pytest
import rawsql

from airflow_provider_sqlqueue import cli
from airflow_provider_sqlqueue.cli import Exit
from airflow_provider_sqlqueue.transport import ConfigurationError, MessagePump, TableQueue, Transport
from airflow_provider_sqlqueue.transport.failed import (
    FailureFilter,
    delete_failed,
    failed_groups,
    retry_failed,
    show_failed,
)
from airflow_provider_sqlqueue.transport.headers import decode_headers

FAST = {"idle_delay": 0.1}
FAILURE_HEADERS = (
    "NServiceBus.FailedQ",
    "NServiceBus.TimeOfFailure",
    "NServiceBus.ExceptionInfo.",
)


class Handler:
    """Fails ``v*`` bodies with ValueError and ``k*`` bodies with KeyError until fixed; counts the rest."""

    def __init__(self) -> None:
        self.broken = True
        self.seen: Counter[str] = Counter()
        self.message_ids: dict[str, str | None] = {}
        self.lock = threading.Lock()

    def __call__(self, message, context) -> None:
        if self.broken and message.body.startswith(b"v"):
            raise ValueError("database down")
        if self.broken and message.body.startswith(b"k"):
            raise KeyError("customer")
        with self.lock:
            self.seen[str(message.id)] += 1
            self.message_ids[str(message.id)] = message.message_id


def drain(queue: TableQueue, handler: Handler) -> None:
    MessagePump(queue, handler, transaction_mode="none", **FAST).run(until_empty=True, timeout=30)


def stored_rows(queue: TableQueue) -> dict[str, dict[str, str | None]]:
    from airflow_provider_sqlqueue.transport.browse import browse

    return {message.id: message.headers for message in browse(queue, 1000)}


@pytest.fixture
def failed(transport: Transport) -> tuple[Transport, Handler, dict[str, set[str]]]:
    """orders and invoices, whose broken handler sent 3 + 2 orders and 2 invoices to the error queue."""
    transport.queue("error").create()
    sent: dict[str, set[str]] = {}
    handler = Handler()
    for name, bodies in (("orders", [b"v1", b"v2", b"v3", b"k1", b"k2"]), ("invoices", [b"v4", b"v5"])):
        queue = transport.queue(name)
        queue.create()
        sent[name] = {str(message_id) for message_id in queue.send_batch(bodies)}
        drain(queue, handler)
    assert not handler.seen
    return transport, handler, sent


def test_failed_messages_are_grouped_retried_after_the_fix_and_processed_once_with_their_ids(failed) -> None:
    transport, handler, sent = failed
    error = transport.queue("error")
    orders = transport.canonical(transport.queue("orders").address)
    invoices = transport.canonical(transport.queue("invoices").address)
    before = stored_rows(error)
    assert {headers["NServiceBus.MessageId"] for headers in before.values()} == sent["orders"] | sent[
        "invoices"
    ]
    error.send(b"v-lost", headers={"NServiceBus.FailedQ": "gone", "NServiceBus.ExceptionInfo.Message": "x"})

    groups = failed_groups(error)
    summary = {(g.failed_queue, g.exception_type, g.exception_message): g.count for g in groups}
    assert summary == {
        (str(orders), "ValueError", "database down"): 3,
        (str(orders), "KeyError", "'customer'"): 2,
        (str(invoices), "ValueError", "database down"): 2,
        ("gone", None, "x"): 1,
    }
    for group in groups[:3]:
        assert group.first_failure is not None and group.first_failure <= group.last_failure

    handler.broken = False
    outcome = retry_failed(error, batch_size=3)
    assert sorted(outcome.done) == sorted(before)
    [refusal] = outcome.refused
    lost_id = refusal.id
    assert "gone does not exist" in refusal.reason and refusal.missing_queue and lost_id not in outcome.done
    assert set(stored_rows(error)) == {lost_id}

    retried = stored_rows(transport.queue("orders")) | stored_rows(transport.queue("invoices"))
    assert set(retried) == set(before)
    for message_id, headers in retried.items():
        kept = {k: v for k, v in before[message_id].items() if not k.startswith(FAILURE_HEADERS)}
        assert headers == kept and headers["NServiceBus.ProcessingMachine"]
        assert headers["NServiceBus.MessageId"] == before[message_id]["NServiceBus.MessageId"]

    for name in ("orders", "invoices"):
        drain(transport.queue(name), handler)
    assert set(handler.seen) == set(before) and set(handler.seen.values()) == {1}
    assert {handler.message_ids[i] for i in handler.seen} == sent["orders"] | sent["invoices"]
    assert all(handler.message_ids[i] == before[i]["NServiceBus.MessageId"] for i in handler.seen)
    assert transport.queue("orders").count() == 0 and set(stored_rows(error)) == {lost_id}


def test_one_message_or_a_group_is_retried_or_deleted_and_the_rest_stay(failed) -> None:
    transport, _handler, sent = failed
    error = transport.queue("error")
    orders = transport.queue("orders")
    key_errors = next(g for g in failed_groups(error) if g.exception_type == "KeyError")
    assert key_errors.count == 2
    one = next(i for i, hs in stored_rows(error).items() if hs["NServiceBus.MessageId"] in sent["invoices"])

    assert retry_failed(error, FailureFilter(ids=[one.upper()])).done == [one]
    assert set(stored_rows(transport.queue("invoices"))) == {one}

    deleted = delete_failed(error, FailureFilter(group=key_errors.key))
    assert len(deleted.done) == 2 and not deleted.refused
    remaining = {(g.exception_type, g.count) for g in failed_groups(error)}
    assert remaining == {("ValueError", 3), ("ValueError", 1)}
    assert len(stored_rows(error)) == 4 and orders.count() == 0

    by_queue = retry_failed(error, FailureFilter(failed_queue="orders"))
    assert len(by_queue.done) == 3 and orders.count() == 3 and len(stored_rows(error)) == 1


def test_show_returns_headers_and_body_and_bad_ids_are_refused(failed) -> None:
    transport, _handler, sent = failed
    error = transport.queue("error")
    message_id = next(
        i for i, hs in stored_rows(error).items() if hs["NServiceBus.MessageId"] in sent["invoices"]
    )
    [shown] = show_failed(error, message_id)
    assert shown.id == message_id and shown.body in (b"v4", b"v5")
    assert "Traceback" in shown.headers["NServiceBus.ExceptionInfo.StackTrace"]
    assert decode_headers(shown.raw_headers) == shown.headers
    assert show_failed(error, str(uuid.uuid4())) == []
    with pytest.raises(ConfigurationError, match="not a UUID"):
        show_failed(error, "nope")
    with pytest.raises(ConfigurationError, match="not a UUID"):
        FailureFilter(ids=["nope"])
    with pytest.raises(ConfigurationError, match="batch_size"):
        retry_failed(error, batch_size=0)


def test_a_batch_that_fails_midway_rolls_back_whole_and_unreadable_rows_are_refused(failed) -> None:
    """An INSERT that the source table refuses undoes its batch's deletes too: nothing lost, none doubled."""
    transport, _handler, _sent = failed
    error = transport.queue("error")
    orders = transport.queue("orders")
    rawsql.execute(transport, f"CREATE TABLE {rawsql.table_of(transport.queue('narrow'))} (Id varchar(40))")
    narrow = str(transport.canonical(transport.queue("narrow").address))
    error.send(b"v-narrow", headers={"NServiceBus.FailedQ": narrow})
    unreadable = str(rawsql.insert_foreign_row(error, "{not json"))
    before = stored_rows(error)

    with pytest.raises(Exception) as raised:
        retry_failed(error, batch_size=100)
    assert not isinstance(raised.value, AssertionError)
    assert stored_rows(error) == before and orders.count() == 0

    outcome = retry_failed(error, FailureFilter(failed_queue=str(transport.canonical(orders.address))))
    assert len(outcome.done) == 5 and orders.count() == 5 and not outcome.refused
    outcome = retry_failed(error, FailureFilter(ids=[unreadable]))
    [refusal] = outcome.refused
    assert refusal.id == unreadable and "headers cannot be read" in refusal.reason and not outcome.done
    assert not refusal.missing_queue
    assert unreadable in stored_rows(error)


# ---- the command line ------------------------------------------------------------------------------
def sqlqueue(target, capsys, *args: str, stdin: str | None = None) -> tuple[int, list[dict], str]:
    """``sqlqueue failed ACTION`` in-process against the target, with --json; (exit code, records, stderr)."""
    action, *rest = args
    database = ["--url", target.url] + (["--schema", target.schema] if target.schema else [])
    capsys.readouterr()
    code = cli.main(["failed", action, *database, "--json", *rest])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, [json.loads(line) for line in captured.out.splitlines() if line.strip()], captured.err


def test_cli_lists_shows_retries_and_deletes_with_json_and_exit_codes(failed, target, capsys) -> None:
    transport, handler, sent = failed
    error = transport.queue("error")
    error.send(b"\xff\xfe" * 3000, headers={"NServiceBus.FailedQ": "gone"})

    code, groups, _ = sqlqueue(target, capsys, "list")
    assert code == Exit.OK
    counts = {(g["failed_queue"], g["exception_type"]): g["count"] for g in groups}
    orders = str(transport.canonical(transport.queue("orders").address))
    assert counts[(orders, "ValueError")] == 3 and counts[(orders, "KeyError")] == 2
    assert counts[("gone", None)] == 1 and sum(counts.values()) == 8
    key_errors = next(g for g in groups if g["exception_type"] == "KeyError")
    assert (
        key_errors["first_failure"].endswith("Z")
        and key_errors["last_failure"] >= key_errors["first_failure"]
    )
    code, only_orders, _ = sqlqueue(target, capsys, "list", "--queue", "orders")
    assert sum(g["count"] for g in only_orders) == 5

    lost = next(i for i, hs in stored_rows(error).items() if hs.get("NServiceBus.FailedQ") == "gone")
    code, [listed], _ = sqlqueue(target, capsys, "list", "--messages", "--queue", "gone")
    assert code == Exit.OK and listed["id"] == lost and listed["group"] == groups[-1]["group"]
    code, listed, _ = sqlqueue(target, capsys, "list", "--messages", "--group", key_errors["group"])
    assert len(listed) == 2 and all(m["exception_message"] == "'customer'" for m in listed)
    code, [shown], _ = sqlqueue(target, capsys, "show", lost, "--max-body-bytes", "16")
    assert code == Exit.OK and shown["body_encoding"] == "hex" and shown["body"] == "fffe" * 8
    assert shown["body_bytes"] == 6000 and shown["body_truncated"]
    one = next(
        i for i, hs in stored_rows(error).items() if hs.get("NServiceBus.MessageId") in sent["invoices"]
    )
    code, [shown], _ = sqlqueue(target, capsys, "show", one)
    assert shown["body"] in ("v4", "v5") and "Traceback" in shown["stack_trace"]
    assert sqlqueue(target, capsys, "show", str(uuid.uuid4()))[0] == Exit.EMPTY
    assert sqlqueue(target, capsys, "retry")[0] == Exit.USAGE  # no selection: nothing retried by accident

    code, records, err = sqlqueue(target, capsys, "delete", "--group", key_errors["group"])
    assert code == Exit.USAGE and not records and "--yes" in err  # no terminal to confirm on
    assert len(stored_rows(error)) == 8
    code, [deleted], _ = sqlqueue(target, capsys, "delete", "--group", key_errors["group"], "--yes")
    assert code == Exit.OK and len(deleted["done"]) == 2 and len(stored_rows(error)) == 6

    handler.broken = False
    code, [retried], _ = sqlqueue(target, capsys, "retry", "--all", "--batch-size", "2")
    assert code == Exit.QUEUE_MISSING  # the message from "gone" was refused; the rest moved
    assert len(retried["done"]) == 5 and retried["batches"] == 3
    [refused] = retried["refused"]
    assert refused["id"] == lost and refused["missing_queue"] and "gone does not exist" in refused["reason"]
    assert set(stored_rows(error)) == {lost}
    for name in ("orders", "invoices"):
        drain(transport.queue(name), handler)
    assert len(handler.seen) == 5 and set(handler.seen.values()) == {1}


# ---- the operator ----------------------------------------------------------------------------------
def test_operator_retries_a_group_and_fails_naming_a_refused_message(failed, target, monkeypatch) -> None:
    pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")
    from airflow.providers.common.compat.sdk import AirflowException

    from airflow_provider_sqlqueue.operators.failed import RetryFailedMessagesOperator

    for key, value in target.airflow_env().items():
        monkeypatch.setenv(key, value)
    transport, handler, _sent = failed
    error = transport.queue("error")
    with pytest.raises(ValueError, match="retry_all=True"):
        RetryFailedMessagesOperator(task_id="unbounded")
    value_errors = next(g for g in failed_groups(error) if g.exception_type == "ValueError" and g.count == 3)

    result = RetryFailedMessagesOperator(task_id="group", group=value_errors.key, batch_size=2).execute({})
    assert result["count"] == 3 and result["refused"] == 0 and result["batches"] == 2
    assert result["queues"] == {str(transport.queue("orders").address): 3} and "done" not in result
    assert {result["first_id"], result["last_id"]} <= set(stored_rows(transport.queue("orders")))
    assert transport.queue("orders").count() == 3 and len(stored_rows(error)) == 4

    error.send(b"v-lost", headers={"NServiceBus.FailedQ": "gone"})
    with pytest.raises(AirflowException, match="1 failed message"):
        RetryFailedMessagesOperator(task_id="all", retry_all=True).execute({})
    assert transport.queue("invoices").count() == 2 and len(stored_rows(error)) == 1
    handler.broken = False
    for name in ("orders", "invoices"):
        drain(transport.queue(name), handler)
    assert len(handler.seen) == 7 and set(handler.seen.values()) == {1}


def test_a_retry_ends_at_the_rows_there_when_it_started_even_as_failures_keep_coming(failed) -> None:
    """Messages that fail again while a retry runs land behind it in the error queue; the retry takes each
    message once and ends, instead of chasing them (a retry of a still-broken handler would never end)."""
    transport, handler, _sent = failed
    error = transport.queue("error")
    before = set(stored_rows(error))
    orders = transport.queue("orders")
    pump = MessagePump(orders, handler, transaction_mode="none", **FAST)
    pump.start()
    try:
        outcome = retry_failed(error, FailureFilter(failed_queue="orders"), batch_size=1)
    finally:
        pump.stop()
    assert len(outcome.done) == len(set(outcome.done)) == 5 and set(outcome.done) <= before


def test_a_message_whose_failed_queue_is_the_error_queue_is_refused_not_moved_in_a_circle(failed) -> None:
    transport, _handler, _sent = failed
    error = transport.queue("error")
    itself = str(transport.canonical(error.address))
    looping = str(
        error.send(b"v-loop", headers={"NServiceBus.FailedQ": itself, "NServiceBus.TimeOfFailure": "x"})
    )
    outcome = retry_failed(error, FailureFilter(failed_queue="error"))
    assert outcome.done == [] and [r.id for r in outcome.refused] == [looping]
    assert "this error queue itself" in outcome.refused[0].reason
    assert stored_rows(error)[looping]["NServiceBus.TimeOfFailure"] == "x"
