"""The pyodbc code path, for real: the whole behavioural suite again, through unixODBC, against PostgreSQL
(psqlODBC) and SQLite (SQLite3 ODBC driver), each with its own dialect.

SQL Server's T-SQL cannot run on these machines, but the driver layer it uses can: ``?`` parameters,
Unicode and binary binding, reading the rows a DELETE returns, draining result sets, SQLSTATE
classification, and the guard against drivers that delete rows without handing them over.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from conftest import EngineTarget, odbc_target
from test_queue import *  # noqa: F403  (re-collected here, with the ODBC targets below)

pyodbc = pytest.importorskip("pyodbc", reason="pyodbc (the mssql extra) is not installed")


@pytest.fixture(params=["postgresql", "sqlite"], ids=["postgresql-odbc", "sqlite-odbc"])
def target(request: pytest.FixtureRequest, tmp_path) -> Iterator[EngineTarget]:
    yield from odbc_target(request, request.param, tmp_path)


def test_the_sqlite_odbc_driver_loses_rows_on_delete_returning(tmp_path) -> None:
    """Why the SQLite-over-ODBC dialect never uses RETURNING: the driver deletes, then says 'No results'."""
    connection = pyodbc.connect(f"DRIVER={{SQLite3}};Database={tmp_path / 'raw.db'}", autocommit=True)
    connection.execute("CREATE TABLE q (RowVersion INTEGER PRIMARY KEY, Body BLOB)")
    connection.execute("INSERT INTO q (Body) VALUES (?), (?)", (b"a", b"b"))
    with pytest.raises(pyodbc.Error, match="No results"):
        connection.execute("DELETE FROM q WHERE RowVersion IN (SELECT min(RowVersion) FROM q) RETURNING Body")
        connection.cursor().fetchall()
    assert connection.execute("SELECT count(*) FROM q").fetchone()[0] == 1  # one row gone, never delivered


def test_odbc_ids_and_bodies_come_back_exactly(transport) -> None:
    queue = transport.queue("exact")
    queue.create()
    chosen = uuid.uuid4()
    from airflow_provider_sqlqueue.transport import OutgoingMessage

    queue.send(OutgoingMessage(b"\x00\x01\xfe\xff" * 1000, {"ü": "😀/\x00"}, id=chosen))
    with queue.receive() as batch:
        [message] = batch
    assert message.id == chosen
    assert message.body == b"\x00\x01\xfe\xff" * 1000
    assert message.headers["ü"] == "😀/\x00"


def test_odbc_storage_report_and_vacuum(transport, target: EngineTarget) -> None:
    queue = transport.queue("drained")
    queue.create()
    queue.send_batch([b"x" * 1024] * 2000)
    with queue.receive(2000) as batch:
        assert len(batch) == 2000
    storage = queue.storage()
    result = queue.vacuum()

    if target.engine == "sqlite":
        assert not storage.applicable and not result.ran and result.note == storage.note
        return
    assert dict(storage.storage_parameters or ())["autovacuum_vacuum_threshold"] == "1000"
    assert storage.table_bytes and storage.table_bytes > 2000 * 1024
    assert result.ran and result.bytes_before and result.bytes_after is not None
    assert result.bytes_after < result.bytes_before / 10


def test_odbc_failed_delete_archives_and_purges(transport) -> None:
    """The archive's statements through psqlODBC and the SQLite ODBC driver (placeholders rewritten)."""
    from airflow_provider_sqlqueue.transport.archive import ErrorArchive
    from airflow_provider_sqlqueue.transport.failed import FailureFilter, delete_failed

    error = transport.queue("error")
    error.create()
    sent = [str(error.send(body, headers={"NServiceBus.FailedQ": "orders"})) for body in (b"a", b"b", b"c")]
    archive = ErrorArchive.of(error)
    outcome = delete_failed(error, FailureFilter(ids=sent[:2]), batch_size=1)
    assert sorted(outcome.done) == sorted(sent[:2]) and outcome.batches == 2
    assert archive.count() == 2 and error.count() == 1
    assert archive.purge("1d") == 0 and archive.purge(0) == 2 and archive.count() == 0
