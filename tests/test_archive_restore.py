"""The archive is browsable and restorable: a page of it reads newest archived first with each message's
failure headers, and a restore moves archived messages back into the error queue, server-side and in one
transaction, with their Id, headers and body as they were, from where a retry sends them on. The command
line's ``failed archive`` and ``failed restore`` call the same two functions. Every engine of the suite
(SQLite, PostgreSQL, Babelfish through FreeTDS and through Microsoft's ODBC driver)."""

from __future__ import annotations

import uuid

import pytest
import rawsql
from test_failed_archive import sqlqueue
from test_legacy_tables import drop_recoverable

from airflow_provider_sqlqueue.cli import Exit
from airflow_provider_sqlqueue.model.errors import ConfigurationError
from airflow_provider_sqlqueue.transport import Transport
from airflow_provider_sqlqueue.transport.archive import ErrorArchive
from airflow_provider_sqlqueue.transport.failed import FailureFilter, delete_failed, retry_failed

FAILED_QUEUE = "NServiceBus.FailedQ"
EXCEPTION_TYPE = "NServiceBus.ExceptionInfo.ExceptionType"
EXCEPTION_MESSAGE = "NServiceBus.ExceptionInfo.Message"


def fail_into(error, count: int, source: str = "orders") -> list[str]:
    """``count`` failed messages from ``source`` in the error queue, as the pump leaves them; their Ids."""
    return [
        str(
            error.send(
                f"body {n}".encode(),
                headers={
                    FAILED_QUEUE: source,
                    EXCEPTION_TYPE: "System.InvalidOperationException",
                    EXCEPTION_MESSAGE: f"boom {n}",
                    "Custom": f"kept {n}",
                },
            )
        )
        for n in range(count)
    ]


def error_rows(error) -> dict[str, tuple[str, bytes]]:
    return {row[0]: (row[1], row[2]) for row in rawsql.all_rows(error)}


@pytest.fixture
def queues(transport: Transport):
    """An error queue and the source queue its messages failed in."""
    error, orders = transport.queue("error"), transport.queue("orders")
    error.create()
    orders.create()
    return error, orders


def test_restore_moves_archived_messages_back_unchanged_and_a_retry_then_sends_them_on(queues) -> None:
    error, orders = queues
    ids = fail_into(error, 3)
    before = error_rows(error)
    assert len(delete_failed(error).done) == 3 and error_rows(error) == {}
    archive = ErrorArchive.of(error)
    assert archive.count() == 3

    never = str(uuid.uuid4())
    outcome = archive.restore([ids[0], ids[2].upper(), never, ids[0]])
    assert outcome.restored == [ids[0], ids[2]] and outcome.moved == 2 and outcome.unknown == [never]
    assert error_rows(error) == {i: before[i] for i in (ids[0], ids[2])}
    assert archive.count() == 1 and {m.id for m in archive.browse().messages} == {ids[1]}

    again = archive.restore([ids[0]])  # restored already: no longer archived
    assert again.restored == [] and again.moved == 0 and again.unknown == [ids[0]]

    retried = retry_failed(error, FailureFilter(ids=[ids[0]]))
    assert retried.done == [ids[0]] and not retried.refused
    with orders.receive(max_messages=10) as batch:
        [message] = list(batch)
    assert str(message.id) == ids[0] and message.body == b"body 0"
    assert message.headers["Custom"] == "kept 0" and FAILED_QUEUE not in message.headers
    assert set(error_rows(error)) == {ids[2]}


def test_a_message_archived_twice_comes_back_twice(queues) -> None:
    error, _orders = queues
    [message_id] = fail_into(error, 1)
    delete_failed(error)
    archive = ErrorArchive.of(error)
    assert archive.restore([message_id]).moved == 1
    delete_failed(error)
    table = error.transport.dialect.qualified_name(archive.address)
    # the same message failed and was deleted once more: a second archived row of its Id
    rawsql.execute(error.transport, f"INSERT INTO {table} SELECT * FROM {table}")
    assert archive.count() == 2
    outcome = archive.restore([message_id])
    assert outcome.restored == [message_id] and outcome.moved == 2 and archive.count() == 0
    assert [row[0] for row in rawsql.all_rows(error)] == [message_id, message_id]


def test_restore_into_an_error_queue_without_recoverable(transport: Transport) -> None:
    error = transport.queue("error")
    error.create()
    drop_recoverable(transport, error)
    ids = fail_into(transport.queue("error"), 2)
    with_fresh = transport.queue("error")
    before = error_rows(with_fresh)
    delete_failed(with_fresh)
    outcome = ErrorArchive.of(with_fresh).restore(ids)
    assert outcome.restored == ids and error_rows(with_fresh) == before


def test_browse_reads_pages_newest_archived_first_with_the_failure_headers(queues) -> None:
    error, _orders = queues
    ids = fail_into(error, 5)
    for message_id in ids:  # one at a time: archived in this order
        assert delete_failed(error, FailureFilter(ids=[message_id])).done == [message_id]
    archive = ErrorArchive.of(error)

    first = archive.browse(limit=2)
    second = archive.browse(offset=2, limit=2)
    last = archive.browse(offset=4, limit=2)
    assert (first.more, second.more, last.more) == (True, True, False)
    pages = [m.id for page in (first, second, last) for m in page.messages]
    assert sorted(pages) == sorted(ids) and len(pages) == 5
    moments = [m.archived_at for page in (first, second, last) for m in page.messages]
    assert all(moment is not None and moment.tzinfo is not None for moment in moments)
    assert moments == sorted(moments, reverse=True)

    newest = {m.id: m for m in first.messages + second.messages + last.messages}
    message = newest[ids[3]]
    assert message.failed_queue == "orders" and message.exception_message == "boom 3"
    assert message.exception_type == "System.InvalidOperationException"
    assert message.body_size == len(b"body 3") and message.header_error is None
    assert message.headers["Custom"] == "kept 3" and message.error_row_version > 0
    assert archive.browse(offset=5).messages == []


def test_browse_and_restore_refuse_what_is_not_a_page_or_an_id(queues) -> None:
    error, _orders = queues
    archive = ErrorArchive.of(error)
    assert archive.browse().messages == [] and not archive.exists()  # nothing archived yet: an empty page
    assert archive.restore([str(uuid.uuid4())]).moved == 0
    for bad in ({"limit": 0}, {"limit": 501}, {"offset": -1}, {"limit": True}):
        with pytest.raises(ConfigurationError):
            archive.browse(**bad)
    with pytest.raises(ConfigurationError, match="not a UUID"):
        archive.restore(["not-an-id"])
    with pytest.raises(ConfigurationError):
        archive.restore("6b1c2f0e-8c1a-4a53-9f7e-2a7f1e0c9b11")  # a string, not a list of them


# ---- the command line ------------------------------------------------------------------------------
def test_cli_lists_the_archive_in_pages_and_restores_by_id(target, queues, capsys) -> None:
    error, _orders = queues
    ids = fail_into(error, 3)
    for message_id in ids:
        delete_failed(error, FailureFilter(ids=[message_id]))

    code, first, _ = sqlqueue(target, capsys, "failed", "archive", "--limit", "2")
    assert code == Exit.OK and [r["id"] for r in first] == ids[:0:-1]
    assert first[0]["exception_message"] == "boom 2" and first[0]["body_bytes"] == len(b"body 2")
    assert first[0]["archive"].startswith("error_archive") and first[0]["archived_at"]
    code, second, _ = sqlqueue(target, capsys, "failed", "archive", "--limit", "2", "--page", "2")
    assert code == Exit.OK and [r["id"] for r in second] == ids[:1]

    never = str(uuid.uuid4())
    code, [restored], err = sqlqueue(target, capsys, "failed", "restore", ids[0], never)
    assert code == Exit.EMPTY and restored["done"] == [ids[0]] and restored["unknown"] == [never]
    code, [restored], _ = sqlqueue(target, capsys, "failed", "restore", ids[1], ids[2])
    assert code == Exit.OK and restored["done"] == ids[1:] and restored["moved"] == 2
    assert sorted(error_rows(error)) == sorted(ids) and ErrorArchive.of(error).count() == 0
    code, _records, err = sqlqueue(target, capsys, "failed", "restore", "not-an-id")
    assert code == Exit.USAGE and "not a UUID" in err
    code, _records, err = sqlqueue(target, capsys, "failed", "archive", "--limit", "501")
    assert code == Exit.USAGE and "limit" in err
