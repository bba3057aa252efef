"""Deleting failed messages archives them by default: each selected row moves from the error queue into
``<error>_archive`` in its batch's transaction (nothing lost, nothing doubled), ``permanent`` deletes for
good, the archive is purged by age in batches, and a role that may not create a missing archive is told
how to fix it before anything is deleted."""

from __future__ import annotations

import contextlib
import json
import secrets
import uuid
from collections.abc import Iterator

import pytest
import rawsql
from conftest import EngineTarget, _mssql_execute

from airflow_provider_sqlqueue import cli
from airflow_provider_sqlqueue.cli import Exit
from airflow_provider_sqlqueue.transport import PermissionDenied, Transport
from airflow_provider_sqlqueue.transport.archive import ErrorArchive, parse_age
from airflow_provider_sqlqueue.transport.failed import FailureFilter, delete_failed, failed_rows

FAILED_QUEUE = "NServiceBus.FailedQ"


@pytest.fixture
def error_queue(transport: Transport):
    """An error queue holding four failed messages: three from orders, one from invoices."""
    error = transport.queue("error")
    error.create()
    for body, source in ((b"o1", "orders"), (b"o2", "orders"), (b"o3", "orders"), (b"i1", "invoices")):
        error.send(body, headers={FAILED_QUEUE: source, "NServiceBus.ExceptionInfo.Message": "boom"})
    return error


def error_rows(error) -> dict[str, tuple[str, bytes]]:
    """Id -> (Headers, Body) of every row of the error queue, as stored."""
    return {row[0]: (row[1], row[2]) for row in rawsql.all_rows(error)}


def archived(transport: Transport, error) -> dict[str, tuple[str, bytes, int]]:
    """Id -> (Headers, Body, ErrorRowVersion) of every archived row."""
    archive = ErrorArchive.of(error)
    table = transport.dialect.qualified_name(archive.address)
    rows = rawsql.execute(transport, f"SELECT Id, Headers, Body, ErrorRowVersion, ArchivedAt FROM {table}")
    assert all(row[4] is not None for row in rows)
    return {str(r[0]).lower(): (r[1], bytes(r[2]), int(r[3])) for r in rows}


def test_delete_moves_the_rows_into_the_archive_and_permanent_deletes_for_good(
    transport: Transport, error_queue
) -> None:
    before = error_rows(error_queue)
    versions = {row.id: row.row_version for row in failed_rows(error_queue)}
    archive = ErrorArchive.of(error_queue)
    assert not archive.exists()

    outcome = delete_failed(error_queue, FailureFilter(failed_queue="orders"), batch_size=2)
    assert len(outcome.done) == 3 and outcome.batches == 2 and archive.exists()
    kept = archived(transport, error_queue)
    assert set(kept) == set(outcome.done)
    assert {i: (hs, body) for i, (hs, body, _v) in kept.items()} == {i: before[i] for i in outcome.done}
    assert {i: v for i, (_h, _b, v) in kept.items()} == {i: versions[i] for i in outcome.done}
    assert set(error_rows(error_queue)) == set(before) - set(outcome.done)
    assert archive.count() == 3

    [last] = error_rows(error_queue)
    gone = delete_failed(error_queue, FailureFilter(ids=[last]), permanent=True)
    assert gone.done == [last] and error_rows(error_queue) == {} and archive.count() == 3


def test_a_batch_failing_half_way_leaves_the_error_queue_and_the_archive_as_they_were(
    transport: Transport, error_queue
) -> None:
    """The archive refuses the second row (a CHECK on its ErrorRowVersion): its batch is undone whole."""
    rows = list(failed_rows(error_queue))
    archive = ErrorArchive.of(error_queue)
    ddl = transport.dialect.sql("create_archive_table", archive.address)
    refused = rows[1].row_version
    rawsql.execute(transport, ddl[: ddl.rindex("\n)")] + f",\n    CHECK (ErrorRowVersion <> {refused})\n)")
    before = error_rows(error_queue)

    with pytest.raises(Exception) as raised:
        delete_failed(error_queue)
    assert not isinstance(raised.value, AssertionError)
    assert error_rows(error_queue) == before and archive.count() == 0

    with pytest.raises(Exception) as raised:
        delete_failed(error_queue, batch_size=1)
    assert not isinstance(raised.value, AssertionError)
    assert set(archived(transport, error_queue)) == {rows[0].id}
    assert set(error_rows(error_queue)) == set(before) - {rows[0].id}


def _backdate(transport: Transport, archive: ErrorArchive, ids: list[str], days: int) -> None:
    dialect = transport.dialect
    table = dialect.qualified_name(archive.address)
    earlier = {
        "sqlite": f"strftime('%Y-%m-%d %H:%M:%f', 'now', '-{days} days')",
        "postgresql": f"statement_timestamp() - interval '{days} days'",
        "sqlserver": f"DATEADD(day, -{days}, GETUTCDATE())",
    }[dialect.name]
    for message_id in ids:
        value = uuid.UUID(message_id) if dialect.name == "postgresql" else message_id
        rawsql.execute(
            transport, f"UPDATE {table} SET ArchivedAt = {earlier} WHERE Id = {dialect.placeholder}", (value,)
        )


def test_the_archive_is_purged_by_age_in_batches(transport: Transport, error_queue) -> None:
    archive = ErrorArchive.of(error_queue)
    assert archive.purge("30d") == 0  # no archive yet: nothing to purge
    done = delete_failed(error_queue).done
    assert len(done) == 4
    old, recent = done[:3], done[3:]
    _backdate(transport, archive, old, days=40)

    assert archive.purge("41d") == 0 and archive.count() == 4
    assert archive.purge(parse_age("30d"), batch_size=2) == 3
    assert set(archived(transport, error_queue)) == set(recent)
    assert archive.purge(0) == 1 and archive.count() == 0
    with pytest.raises(Exception, match="age"):
        parse_age("30 days")


# ---- a role that may not create the archive ------------------------------------------------------
@pytest.fixture
def runtime_target(request: pytest.FixtureRequest, target: EngineTarget) -> Iterator[EngineTarget]:
    """A login that may SELECT, INSERT and DELETE in the test's schema, and create nothing."""
    name = f"runtime_{uuid.uuid4().hex[:8]}"
    password = f"Rt-{secrets.token_hex(8)}"
    if target.engine == "postgresql":
        server = request.getfixturevalue("postgres_server")
        server.execute(f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}'")
        server.execute(f'GRANT USAGE ON SCHEMA "{target.schema}" TO "{name}"')
        server.execute(f'GRANT SELECT, INSERT, DELETE ON ALL TABLES IN SCHEMA "{target.schema}" TO "{name}"')
        # as docs/dba-permissions.md says: the tables the provisioning role creates later (the archive) too
        server.execute(
            f'ALTER DEFAULT PRIVILEGES IN SCHEMA "{target.schema}" GRANT SELECT, INSERT, DELETE ON TABLES '
            f'TO "{name}"'
        )
        url = server.base_url.split("://", 1)[1].split("@", 1)[1]
        yield EngineTarget("postgresql", f"postgresql://{name}:{password}@{url}", target.schema)
        server.execute(f'DROP OWNED BY "{name}"')
        server.execute(f'DROP ROLE "{name}"')
        return
    import pyodbc
    from sqlserver_bed import SqlServerBed

    bed = request.getfixturevalue("sqlserver_bed")
    _mssql_execute(target.url, f"CREATE LOGIN [{name}] WITH PASSWORD = '{password}'")
    _mssql_execute(target.url, f"CREATE USER [{name}] FOR LOGIN [{name}]")
    _mssql_execute(target.url, f"GRANT SELECT, INSERT, DELETE ON SCHEMA::[{target.schema}] TO [{name}]")
    runtime = SqlServerBed(bed.host, bed.port, name, password, bed.database, bed.encrypt)
    try:
        yield EngineTarget(
            "sqlserver",
            runtime.odbc(target.driver or "freetds"),
            target.schema,
            target.driver,
            target.variant,
        )
    finally:
        for statement in (f"DROP USER [{name}]", f"DROP LOGIN [{name}]"):
            with contextlib.suppress(pyodbc.Error):
                _mssql_execute(target.url, statement)


@pytest.mark.parametrize("target", ["postgresql", "sqlserver-freetds", "sqlserver-msodbc"], indirect=True)
def test_a_role_that_may_not_create_the_archive_is_told_the_fix_and_nothing_is_deleted(
    transport: Transport, error_queue, runtime_target: EngineTarget
) -> None:
    before = error_rows(error_queue)
    with runtime_target.open() as runtime:
        error = runtime.queue("error")
        with pytest.raises(PermissionDenied, match="Nothing was deleted") as raised:
            delete_failed(error)
        assert "sqlqueue create" in str(raised.value) and "--permanent" in str(raised.value)
        assert error_rows(error_queue) == before
        database = ["--url", runtime_target.url, "--schema", str(runtime_target.schema)]
        assert cli.main(["failed", "delete", *database, "--all", "--yes"]) == Exit.PERMISSION_DENIED
        assert error_rows(error_queue) == before
        ErrorArchive.of(error_queue).create()  # what the provisioning role does
        assert len(delete_failed(error, FailureFilter(failed_queue="orders")).done) == 3
        assert len(delete_failed(error, permanent=True).done) == 1
    assert error_rows(error_queue) == {} and ErrorArchive.of(error_queue).count() == 3


# ---- the command line ------------------------------------------------------------------------------
def sqlqueue(target: EngineTarget, capsys, *args: str) -> tuple[int, list[dict], str]:
    database = ["--url", target.url] + (["--schema", target.schema] if target.schema else [])
    capsys.readouterr()
    code = cli.main([*args[:2], *database, "--json", *args[2:]])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, [json.loads(line) for line in captured.out.splitlines() if line.strip()], captured.err


def test_cli_deletes_into_the_archive_permanently_on_request_and_purges_it(
    target: EngineTarget, transport: Transport, error_queue, capsys
) -> None:
    code, [deleted], _ = sqlqueue(target, capsys, "failed", "delete", "--queue", "orders", "--yes")
    assert code == Exit.OK and len(deleted["done"]) == 3 and deleted["archive"].startswith("error_archive")
    code, [gone], _ = sqlqueue(target, capsys, "failed", "delete", "--all", "--permanent", "--yes")
    assert code == Exit.OK and len(gone["done"]) == 1 and gone["archive"] is None
    archive = ErrorArchive.of(error_queue)
    assert error_rows(error_queue) == {} and archive.count() == 3
    _backdate(transport, archive, deleted["done"][:2], days=10)
    code, [purged], _ = sqlqueue(target, capsys, "failed", "purge-archive", "--older-than", "7d")
    assert code == Exit.OK and purged["purged"] == 2 and archive.count() == 1
    code, _records, err = sqlqueue(target, capsys, "failed", "purge-archive", "--older-than", "soon")
    assert code == Exit.USAGE and "30d" in err and archive.count() == 1


def test_create_and_script_make_the_error_queues_archive_beside_it(target: EngineTarget, capsys) -> None:
    def run(*args: str) -> tuple[int, str]:
        database = ["--url", target.url] + (["--schema", target.schema] if target.schema else [])
        capsys.readouterr()
        code = cli.main([args[0], *database, *args[1:]])
        return code, capsys.readouterr().out

    code, out = run("create", "orders", "error", "--json")
    made = json.loads(out)
    with target.open() as transport:
        archive = ErrorArchive.of(transport.queue("error"))
        assert code == Exit.OK and made["created"][-1] == str(archive.address) and archive.exists()
        assert not ErrorArchive.of(transport.queue("orders")).exists()
        code, out = run("script", "orders", "error")
        assert code == Exit.OK and out.count("CREATE TABLE") == 3 and archive.create_script() in out
        code, out = run("script", "orders", "error", "--error-queue", "orders")
        orders_archive = ErrorArchive.of(transport.queue("orders"))
        assert out.count("CREATE TABLE") == 3 and orders_archive.create_script() in out
        assert archive.create_script() not in out
