"""The ``sqlqueue`` command line against real SQLite and PostgreSQL: every subcommand, bodies from
arguments, files and stdin, JSON lines, exit codes per error class, password masking, Airflow connection
ids, and running without Airflow.

Most tests call ``cli.main([...])`` in-process with captured output; a few run the installed
``sqlqueue`` script as a subprocess (stdin pipes, ``--help``, an interpreter without Airflow).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import rawsql
from sqlalchemy.engine import make_url

from airflow_provider_sqlqueue import cli
from airflow_provider_sqlqueue.cli import Exit
from airflow_provider_sqlqueue.transport.browse import browse

REPO = Path(__file__).resolve().parent.parent
SQLQUEUE = Path(sys.executable).parent / "sqlqueue"


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json_lines(self) -> list[dict]:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]


@dataclass
class Cli:
    """Runs ``sqlqueue`` in-process against one test target; checks no secret ever reaches the output."""

    target: object
    capsys: pytest.CaptureFixture[str]
    monkeypatch: pytest.MonkeyPatch

    @property
    def database(self) -> list[str]:
        if self.target is None:
            return []
        args = ["--url", self.target.url]
        return args + (["--schema", self.target.schema] if self.target.schema else [])

    @property
    def password(self) -> str | None:
        if self.target is None or "://" not in self.target.url:
            return None
        return make_url(self.target.url).password

    def __call__(self, *args: str, stdin: bytes | None = None, database: bool = True) -> Result:
        command, *rest = args
        argv = [command, *(self.database if database else []), *rest]
        if stdin is not None:
            self.monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        self.capsys.readouterr()
        code = cli.main(argv)
        captured = self.capsys.readouterr()
        result = Result(code, captured.out, captured.err)
        if self.password:
            assert self.password not in result.out + result.err, "a password was printed"
        assert "Traceback" not in result.err
        return result


@pytest.fixture
def run(target, capsys, monkeypatch) -> Cli:
    monkeypatch.delenv("SQLQUEUE_URL", raising=False)
    monkeypatch.delenv("SQLQUEUE_CONN_ID", raising=False)
    return Cli(target, capsys, monkeypatch)


@pytest.fixture
def offline(capsys, monkeypatch) -> Cli:
    """The command line without a test database: the tests give --url themselves."""
    monkeypatch.delenv("SQLQUEUE_URL", raising=False)
    monkeypatch.delenv("SQLQUEUE_CONN_ID", raising=False)
    return Cli(None, capsys, monkeypatch)


@pytest.fixture
def queues(target, run):
    """``orders`` and ``error`` created through the CLI; yields the core transport to check with."""
    assert run("create", "orders", "error").code == Exit.OK
    with target.open() as transport:
        yield transport


def _without_tty_stdin(monkeypatch: pytest.MonkeyPatch, data: bytes = b"") -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


# ---- the happy paths -----------------------------------------------------------------------------------
def test_create_send_peek_depth_receive(run, queues) -> None:
    orders = queues.queue("orders")
    assert run("create", "orders").out.strip() == f"{orders.address} already exists"

    sent = run("send", "orders", "hello", "-H", "NServiceBus.ContentType=text/plain", "-H", "x=a=b")
    assert sent.code == Exit.OK
    first_id = sent.out.strip()
    uuid.UUID(first_id)
    second = run("send", "orders", "second", "--ttbr", "1h", "--content-type", "application/json", "--json")
    second = second.json_lines()[0]
    assert second["sent"] == 1 and len(second["ids"]) == 1

    peeked = run("peek", "orders", "--json")
    assert peeked.code == Exit.OK
    records = peeked.json_lines()
    assert [r["body"] for r in records] == ["hello", "second"]
    assert records[0]["id"] == first_id and records[0]["queue"] == str(orders.address)
    assert records[0]["headers"]["NServiceBus.ContentType"] == "text/plain"
    assert records[0]["headers"]["x"] == "a=b" and records[0]["expires"] is None
    assert records[1]["headers"]["NServiceBus.ContentType"] == "application/json"
    assert records[1]["expires"].endswith("Z") and records[0]["row_version"] < records[1]["row_version"]
    assert orders.count() == 2, "peek must not remove messages"

    pretty = run("peek", "orders", "-n", "1")
    assert "hello" in pretty.out and "second" not in pretty.out and "NServiceBus.ContentType" in pretty.out
    assert "nothing was removed" in pretty.err

    depth = run("depth", "orders", "error", "--exact", "--json").json_lines()
    assert depth == [
        {"queue": str(orders.address), "estimate": 2, "exact": 2},
        {"queue": str(queues.queue("error").address), "estimate": 0, "exact": 0},
    ]
    assert "~2" in run("depth", "orders").out

    received = run("receive", "orders", "-n", "5", "--json")
    assert received.code == Exit.OK
    assert [r["body"] for r in received.json_lines()] == ["hello", "second"]
    assert orders.count() == 0
    assert run("receive", "orders").code == Exit.OK
    assert run("receive", "orders", "--fail-on-empty").code == Exit.EMPTY
    assert run("peek", "orders", "--fail-on-empty").code == Exit.EMPTY
    assert run("depth", "orders", "--fail-on-empty").code == Exit.EMPTY


def test_send_bodies_from_stdin_files_and_lines(run, queues, tmp_path, monkeypatch) -> None:
    orders = queues.queue("orders")
    assert run("send", "orders", stdin=b"from stdin\n").code == Exit.OK
    assert run("send", "orders", "-", stdin=b"dash").code == Exit.OK
    binary = bytes(range(256))
    (tmp_path / "body.bin").write_bytes(binary)
    assert run("send", "orders", "--file", str(tmp_path / "body.bin")).code == Exit.OK
    (tmp_path / "lines.txt").write_bytes(b"one\ntwo\r\n\nthree")
    lines = run("send", "orders", "--lines", "--file", str(tmp_path / "lines.txt"))
    assert lines.code == Exit.OK and "sent 3 message(s)" in lines.err
    assert run("send", "orders", "--lines", stdin=b'{"a": 1}\n{"a": 2}\n').code == Exit.OK

    records = run("receive", "orders", "-n", "100", "--json").json_lines()
    bodies = [r["body"] for r in records]
    assert bodies[:2] == ["from stdin\n", "dash"]
    assert records[2]["body_encoding"] == "base64"
    import base64

    assert base64.b64decode(records[2]["body"]) == binary
    assert bodies[3:] == ["one", "two", "three", '{"a": 1}', '{"a": 2}']
    assert orders.count() == 0

    # Usage errors: two bodies, an unreadable file, a bad header, a bad duration.
    assert run("send", "orders", "x", "--file", str(tmp_path / "body.bin")).code == Exit.USAGE
    missing = run("send", "orders", "--file", str(tmp_path / "nope.txt"))
    assert missing.code == Exit.USAGE and "cannot read" in missing.err
    assert run("send", "orders", "x", "-H", "novalue").code == Exit.USAGE
    bad = run("send", "orders", "x", "--ttbr", "soon")
    assert bad.code == Exit.USAGE and "not a duration" in bad.err
    assert run("send", "orders", "x", "--lines", "--count", "2").code == Exit.USAGE
    assert orders.count() == 0


def test_send_many_with_count_in_batches(run, queues) -> None:
    result = run("send", "orders", "load", "--count", "1234", "--batch-size", "500", "--ids")
    assert result.code == Exit.OK and "sent 1,234 message(s)" in result.err
    ids = result.out.split()
    assert len(ids) == len(set(ids)) == 1234
    assert queues.queue("orders").count() == 1234
    summary = run("send", "orders", "more", "--count", "10", "--json").json_lines()[0]
    assert summary["sent"] == 10 and "ids" not in summary


def test_time_to_be_received_stats_and_purge(run, queues, target) -> None:
    orders = queues.queue("orders")
    assert run("send", "orders", "short-lived", "--count", "3", "--ttbr", "1s").code == Exit.OK
    assert run("send", "orders", "kept", "--count", "2", "--ttbr", "1:00:00").code == Exit.OK
    rawsql.execute(
        queues, f"CREATE TABLE {queues.dialect.qualified_name(queues.resolve('not_a_queue'))} (x int)"
    )
    time.sleep(1.3)

    peeked = run("peek", "orders", "--json").json_lines()
    assert [r["body"] for r in peeked] == ["kept", "kept"], "expired messages are not shown"

    stats = {row["queue"]: row for row in run("stats", "--json").json_lines()}
    assert set(stats) == {str(orders.address), str(queues.queue("error").address)}
    row = stats[str(orders.address)]
    assert row["messages"] == 2 and row["expired"] == 3 and row["estimate"] == 5
    assert 1.0 <= row["oldest_age_seconds"] < 60 and row["oldest_time_sent"].endswith("Z")
    assert stats[str(queues.queue("error").address)]["oldest_age_seconds"] is None
    table = run("stats", "orders")
    assert table.code == Exit.OK and "expired" in table.out and str(orders.address) in table.out

    purged = run("purge-expired", "orders", "error", "--batch-size", "2", "--json")
    assert purged.code == Exit.OK
    by_queue = {row["queue"]: row for row in purged.json_lines()}
    assert by_queue[str(orders.address)]["purged"] == 3 and by_queue[str(orders.address)]["batches"] == 2
    assert by_queue[str(queues.queue("error").address)]["purged"] == 0
    assert orders.count() == 2 and rawsql.column_values(orders, "Expires")[0] is not None
    human = run("purge-expired", "orders")
    assert "purged 0 expired message(s)" in human.out


def test_receive_writes_json_lines_to_a_file_before_removing(run, queues, tmp_path) -> None:
    orders = queues.queue("orders")
    orders.send_batch([f"m{n}".encode() for n in range(7)])
    output = tmp_path / "out.jsonl"
    first = run("receive", "orders", "-n", "5", "--batch-size", "2", "--output", str(output))
    assert first.code == Exit.OK and "received 5 message(s)" in first.err
    assert run("receive", "orders", "-n", "5", "-o", str(output)).code == Exit.OK
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["body"] for r in records] == [f"m{n}" for n in range(7)], "appended, in order"
    assert orders.count() == 0

    # A write that fails rolls the batch back: the messages stay queued, in order.
    orders.send_batch([b"a", b"b", b"c"])
    if Path("/dev/full").exists():
        failed = run("receive", "orders", "-n", "3", "--output", "/dev/full")
        assert failed.code == Exit.ERROR and "not removed" in failed.err
    assert run("receive", "orders", "--output", str(tmp_path / "no" / "dir.jsonl")).code == Exit.USAGE
    assert [m.body for m in browse(orders, 10)] == [b"a", b"b", b"c"]
    bodies = run("receive", "orders", "-n", "3", "--body-only")
    assert bodies.out.splitlines() == ["a", "b", "c"]


def test_unreadable_headers_are_shown_by_peek_and_moved_by_receive(run, queues) -> None:
    orders = queues.queue("orders")
    rawsql.insert_foreign_row(orders, "this is not JSON", b"\xff\xfe binary")
    [record] = run("peek", "orders", "--json").json_lines()
    assert record["header_error"] and record["raw_headers"] == "this is not JSON"
    assert record["headers"] == {} and record["body_encoding"] == "base64"
    pretty = run("peek", "orders")
    assert "unreadable headers" in pretty.out and "not UTF-8" in pretty.out
    received = run("receive", "orders", "--fail-on-empty")
    assert received.code == Exit.EMPTY and "moved to the error queue" in received.err
    assert orders.count() == 0 and queues.queue("error").count() == 1


def test_receive_waits_for_a_first_message(run, queues) -> None:
    started = time.monotonic()
    assert run("receive", "orders", "--wait", "0.6s", "--fail-on-empty").code == Exit.EMPTY
    assert time.monotonic() - started >= 0.5


def test_drop_asks_and_reports(run, queues, monkeypatch) -> None:
    orders = queues.queue("orders")
    orders.send(b"x")
    _without_tty_stdin(monkeypatch)
    refused = run("drop", "orders")
    assert refused.code == Exit.USAGE and "--yes" in refused.err and orders.exists()
    dropped = run("drop", "orders", "--yes")
    assert dropped.code == Exit.OK and "(1 messages)" in dropped.out and not orders.exists()
    assert run("drop", "orders", "--yes").code == Exit.QUEUE_MISSING
    assert run("drop", "orders", "--yes", "--if-exists").code == Exit.OK


def test_script_needs_no_database(offline) -> None:
    run = offline
    sqlserver = run("script", "--engine", "sqlserver", "orders@[queues]", "--layout", "heap", database=False)
    assert sqlserver.code == Exit.OK
    assert "CREATE TABLE [queues].[orders]" in sqlserver.out and "NONCLUSTERED INDEX" in sqlserver.out
    assert sqlserver.out.startswith("-- queue orders@[queues] (SQL Server, layout heap)")
    pg = run("script", "--engine", "postgresql", "orders", "--schema", "app", "--body-string", database=False)
    assert 'CREATE TABLE "app"."orders"' in pg.out and "BodyString" in pg.out
    lite = run("script", "--engine", "sqlite", "orders", database=False)
    assert 'CREATE TABLE "orders"' in lite.out
    # A URL only names the engine: nothing connects, so an unreachable server is fine.
    url = "postgresql://dba:Sup3r-Secret@127.0.0.1:1/app"
    offline = run("script", "--url", url, "orders", database=False)
    assert offline.code == Exit.OK and 'CREATE TABLE "public"."orders"' in offline.out
    assert "Sup3r-Secret" not in offline.out + offline.err
    assert run("script", "orders", database=False).code == Exit.USAGE
    assert run("script", "--engine", "oracle", "orders", database=False).code == Exit.USAGE


def test_inspect_reports_findings_with_fixes(run, queues) -> None:
    ok = run("inspect", "orders", "error")
    assert ok.code == Exit.OK and ok.out.count(": ok") == 2
    orders = queues.queue("orders")
    sqlserver = queues.dialect.name == "sqlserver"
    expires_index = "Index_Expires" if sqlserver else queues.dialect.object_name(orders.address, "Expires")
    rawsql.drop_index(orders, expires_index)
    found = run("inspect", "orders", "--json")
    assert found.code == Exit.FINDINGS
    [report] = found.json_lines()
    assert report["ok"] is False and report["findings"][0]["code"] == "missing_expires_index"
    create_index = "CREATE NONCLUSTERED INDEX" if sqlserver else "CREATE INDEX"
    assert create_index in report["findings"][0]["fix"]
    human = run("inspect", "orders")
    assert human.code == Exit.FINDINGS and f"fix: {create_index}" in human.out
    assert human.err.count(create_index) == 0, "findings are not logged a second time"


def test_script_shows_the_postgresql_storage_parameters_and_takes_others(offline) -> None:
    run = offline
    default = run("script", "--engine", "postgresql", "orders", database=False)
    assert default.code == Exit.OK
    assert (
        ") WITH (\n    autovacuum_vacuum_scale_factor = 0,\n    autovacuum_vacuum_threshold = 1000,"
        in default.out
    )
    none = run("script", "--engine", "postgresql", "orders", "--no-storage-parameters", database=False)
    assert none.code == Exit.OK and "WITH" not in none.out
    own = run(
        "script", "--engine", "postgresql", "orders", "--storage-parameter", "fillfactor=90", database=False
    )
    assert own.code == Exit.OK and "WITH (\n    fillfactor = 90\n)" in own.out and "autovacuum" not in own.out
    lite = run("script", "--engine", "sqlite", "orders", database=False)
    assert lite.code == Exit.OK and "WITH" not in lite.out
    for bad in ("fillfactor", "fillfactor=90);DROP TABLE x"):
        refused = run(
            "script", "--engine", "postgresql", "orders", "--storage-parameter", bad, database=False
        )
        assert refused.code == Exit.USAGE and "DROP" not in refused.out


def test_inspect_shows_the_storage_and_advises_vacuum_after_a_drain(run, queues) -> None:
    made = run("create", "drained", "--storage-parameter", "autovacuum_enabled=off")
    assert made.code == Exit.OK
    drained = queues.queue("drained")
    drained.send_batch([b"x" * 1024] * 3000)
    with drained.receive(3000) as batch:
        assert len(batch) == 3000
    deadline = time.monotonic() + 30
    while True:  # the server publishes a backend's row counts about once a second
        [report] = run("inspect", "drained", "--json").json_lines()
        storage = report["storage"]
        if not storage["applicable"] or (storage["dead_tuples"] or 0) >= 3000 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    human = run("inspect", "drained")

    assert report["ok"] is True and human.code == Exit.OK, "advice is not a finding"
    if queues.dialect.name != "postgresql":
        assert storage["applicable"] is False and storage["note"].startswith("not applicable")
        assert f"storage: {storage['note']}" in " ".join(human.out.split())
        return
    table = queues.dialect.display_sql(queues.dialect.qualified_name(drained.address))
    assert storage["storage_parameters"] == {"autovacuum_enabled": "off"}
    assert storage["live_tuples"] == 0 and storage["dead_tuples"] == 3000
    assert storage["table_bytes"] > 3000 * 1024 and storage["last_vacuum"] is None
    assert storage["advice"][-1].endswith(f"run: VACUUM (INDEX_CLEANUP ON) {table}")
    text = " ".join(human.out.split())
    assert "storage parameters: autovacuum_enabled=off" in text and "3,000 dead" in text
    assert "advice: 3,000 dead rows against 0 live" in text and f"VACUUM (INDEX_CLEANUP ON) {table}" in text


def test_create_leaves_an_index_missing_from_an_existing_table_unless_asked(run, queues) -> None:
    orders = queues.queue("orders")
    sqlserver = queues.dialect.name == "sqlserver"
    expires_index = "Index_Expires" if sqlserver else queues.dialect.object_name(orders.address, "Expires")
    rawsql.drop_index(orders, expires_index)
    left = run("create", "orders")
    assert left.code == Exit.OK and "already exists" in left.out
    assert (
        "add_missing_indexes=True" in left.err and "INDEX" in left.err.split("add_missing_indexes=True")[-1]
    )
    assert "--add-missing-indexes" in left.err
    assert [finding.code for finding in orders.inspect()] == ["missing_expires_index"]
    added = run("create", "orders", "--add-missing-indexes")
    assert added.code == Exit.OK and orders.inspect() == []


# ---- exit codes ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "command",
    [
        ["send", "nope", "x"],
        ["receive", "nope"],
        ["peek", "nope"],
        ["depth", "nope"],
        ["stats", "nope"],
        ["purge-expired", "nope"],
        ["inspect", "nope"],
        ["drop", "nope", "--yes"],
        ["consume", "nope", "--handler", "consume_handlers:record", "--until-empty"],
    ],
    ids=lambda command: command[0],
)
def test_a_missing_queue_exits_3(run, queues, command) -> None:
    result = run(*command)
    assert result.code == Exit.QUEUE_MISSING, result.err
    assert "nope" in result.err and ("does not exist" in result.err or "QueueNotFound" in result.err)


def test_usage_errors_exit_2(run, queues) -> None:
    invalid = run("depth", "x" * 300)
    assert invalid.code == Exit.USAGE and "InvalidQueueName" in invalid.err
    assert run("depth", database=False).code == Exit.USAGE
    assert run("frobnicate", database=False).code == Exit.USAGE
    assert run("receive", "orders", "-n", "0").code == Exit.USAGE
    assert run("depth", "orders", "--conn-id", "x").code == Exit.USAGE, "--url and --conn-id together"
    bad_scheme = run("depth", "--url", "oracle://scott:tiger-pass@db/x", "orders", database=False)
    assert bad_scheme.code == Exit.USAGE and "tiger-pass" not in bad_scheme.err
    assert run("depth", "--url", "::nonsense::", "orders", database=False).code == Exit.USAGE
    assert run("depth", "--url", "sqlite://", "orders", database=False).code == Exit.USAGE


def test_an_unreachable_database_exits_4_with_the_password_masked(offline, tmp_path) -> None:
    run = offline
    refused = run("depth", "--url", "postgresql://app:Pa55-w0rd!@127.0.0.1:1/db", "orders", database=False)
    assert refused.code == Exit.UNREACHABLE
    assert "cannot connect" in refused.err and "127.0.0.1" in refused.err
    assert "Pa55-w0rd!" not in refused.err and "app:***@" in refused.err
    encoded = run("peek", "--url", "postgresql://app:p%40ss%2Fw0rd@127.0.0.1:1/db", "q", database=False)
    assert encoded.code == Exit.UNREACHABLE and "p%40ss%2Fw0rd" not in encoded.err
    assert "p@ss/w0rd" not in encoded.err

    missing_file = tmp_path / "typo.db"
    result = run("send", "--url", f"sqlite:///{missing_file}", "orders", "x", database=False)
    assert result.code == Exit.UNREACHABLE and "does not exist" in result.err
    assert not missing_file.exists(), "only create makes a SQLite file"


def test_secrets_are_masked_in_usage_errors_and_odbc_strings(offline) -> None:
    run = offline
    result = run("depth", "orders", "postgresql://u:Hidden-Secret-1@h/db", "--bogus", database=False)
    assert result.code == Exit.USAGE
    odbc = "DRIVER={No Such Driver};SERVER=db;UID=u;PWD={Hidden;Secret-2}"
    odbc_result = run("send", "--url", odbc, "orders", "x", database=False)
    assert odbc_result.code in (Exit.UNREACHABLE, Exit.USAGE)
    for text in (result.err, odbc_result.err):
        assert "Hidden" not in text and "Secret-" not in text


@pytest.mark.postgres
def test_permission_denied_exits_6(postgres_server, capsys, monkeypatch) -> None:
    role = f"r_{uuid.uuid4().hex[:10]}"
    password = f"pw-{uuid.uuid4().hex}"
    schema = f"t_{uuid.uuid4().hex[:12]}"
    postgres_server.execute(f'CREATE SCHEMA "{schema}"')
    postgres_server.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
    try:
        base = make_url(postgres_server.base_url)
        admin = ["--url", postgres_server.base_url, "--schema", schema]
        assert cli.main(["create", *admin, "orders"]) == Exit.OK
        postgres_server.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}')
        url = base.set(username=role, password=password).render_as_string(hide_password=False)
        capsys.readouterr()
        assert cli.main(["depth", "--url", url, "--schema", schema, "orders"]) == Exit.PERMISSION_DENIED
        err = capsys.readouterr().err
        assert "permission denied" in err.lower() and password not in err
        assert cli.main(["create", "--url", url, "--schema", schema, "more"]) == Exit.PERMISSION_DENIED
        assert password not in capsys.readouterr().err
    finally:
        postgres_server.execute(f'DROP SCHEMA "{schema}" CASCADE')
        postgres_server.execute(f"DROP OWNED BY {role}")
        postgres_server.execute(f"DROP ROLE {role}")


# ---- Airflow connections and the environment -----------------------------------------------------------
def test_airflow_conn_id_and_environment(run, queues, target, monkeypatch) -> None:
    pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")
    for key, value in target.airflow_env("cli_test").items():
        monkeypatch.setenv(key, value)
    orders = queues.queue("orders")
    assert run("send", "--conn-id", "cli_test", "orders", "via airflow", database=False).code == Exit.OK
    assert orders.count() == 1
    depth = run("depth", "--conn-id", "cli_test", "orders", "--exact", "--json", database=False)
    assert depth.json_lines()[0]["exact"] == 1
    monkeypatch.setenv("SQLQUEUE_CONN_ID", "cli_test")
    received = run("receive", "orders", "--json", database=False)
    assert received.json_lines()[0]["body"] == "via airflow"
    monkeypatch.setenv("SQLQUEUE_URL", target.url)
    assert run("depth", "orders", database=False).code == Exit.USAGE, "both variables set"
    monkeypatch.delenv("SQLQUEUE_CONN_ID")
    if target.schema is None:
        assert run("depth", "orders", database=False).code == Exit.OK

    unknown = run("depth", "--conn-id", "no_such_conn", "orders", database=False)
    assert unknown.code == Exit.USAGE and "no_such_conn" in unknown.err


def test_airflow_connection_passwords_are_masked(offline, monkeypatch) -> None:
    run = offline
    pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")
    connection = {
        "conn_type": "sqlqueue",
        "host": "127.0.0.1",
        "port": 1,
        "login": "app",
        "password": "Airflow-Secret-9",
        "schema": "db",
        "extra": {"engine": "postgresql"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_CLI_DOWN", json.dumps(connection))
    result = run("stats", "--conn-id", "cli_down", database=False)
    assert result.code == Exit.UNREACHABLE and "Airflow-Secret-9" not in result.err and "***" in result.err


def test_without_airflow_installed(tmp_path) -> None:
    """A URL works with Airflow unimportable; --conn-id says what to install."""
    blocker = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'airflow' or name.startswith('airflow.'):\n"
        "            raise ImportError('No module named ' + repr(name))\n"
        "sys.meta_path.insert(0, Block())\n"
        "from airflow_provider_sqlqueue.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    url = f"sqlite:///{tmp_path / 'q.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLQUEUE_")}

    def python(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-c", blocker, *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)

    assert python("create", "--url", url, "orders").returncode == Exit.OK
    sent = python("send", "--url", url, "orders", "no airflow here")
    assert sent.returncode == Exit.OK, sent.stderr
    peeked = python("peek", "--url", url, "orders", "--json")
    assert json.loads(peeked.stdout)["body"] == "no airflow here"
    needs = python("depth", "--conn-id", "sqlqueue_default", "orders")
    assert needs.returncode == Exit.USAGE and "needs Apache Airflow" in needs.stderr
    assert "Traceback" not in needs.stderr


# ---- the installed script ------------------------------------------------------------------------------
def test_the_installed_script_reads_stdin_and_has_help(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SQLQUEUE_")}, "SQLQUEUE_URL": url}

    def sqlqueue(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SQLQUEUE), *args], input=stdin, capture_output=True, text=True, env=env, timeout=120
        )

    assert sqlqueue("create", "orders", "error").returncode == 0
    sent = sqlqueue("send", "orders", "-H", "NServiceBus.ContentType=application/json", stdin='{"n": 1}')
    assert sent.returncode == 0 and uuid.UUID(sent.stdout.strip())
    received = sqlqueue("receive", "orders", "--json")
    record = json.loads(received.stdout)
    assert record["body"] == '{"n": 1}' and record["headers"]["NServiceBus.ContentType"] == "application/json"

    main_help = sqlqueue("--help")
    assert main_help.returncode == 0 and "exit codes:" in main_help.stdout
    commands = ["create", "drop", "send", "receive", "peek", "depth", "stats", "purge-expired", "script"]
    commands += ["inspect", "consume"]
    for command in commands:
        assert command in main_help.stdout
        shown = sqlqueue(command, "--help")
        assert shown.returncode == 0 and "examples:" in shown.stdout and "sqlqueue " + command in shown.stdout
    assert sqlqueue("--version").stdout.startswith("sqlqueue ")


def test_consume_takes_url_options_and_conn_ids(run, queues, target, monkeypatch) -> None:
    orders = queues.queue("orders")
    orders.send_batch([b"a", b"b", b"c"])
    sys.path.insert(0, str(REPO / "tests"))
    try:
        done = run("consume", "orders", "--handler", "consume_handlers:record", "--max-messages", "2")
        assert done.code == Exit.OK and "processed 2" in done.err
        if target.schema is None:  # the legacy form: the URL as the first argument
            legacy = [target.url, "orders", "--handler", "consume_handlers:record", "--until-empty"]
            assert run("consume", *legacy, database=False).code == Exit.OK
            assert orders.count() == 0
        bad = run("consume", "orders", "--handler", "consume_handlers:nothing", "--until-empty")
        assert bad.code == Exit.USAGE and "cannot load handler" in bad.err
    finally:
        sys.path.remove(str(REPO / "tests"))


def test_ctrl_c_exits_130_without_a_traceback(tmp_path) -> None:
    import signal

    url = f"sqlite:///{tmp_path / 'q.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLQUEUE_")}
    assert (
        subprocess.run([str(SQLQUEUE), "create", "--url", url, "orders"], env=env, timeout=120).returncode
        == 0
    )
    process = subprocess.Popen(
        [str(SQLQUEUE), "receive", "--url", url, "orders", "--wait", "2m"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(4.0)  # started, connected, waiting (slow on a loaded machine)
        process.send_signal(signal.SIGINT)
        _out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == Exit.INTERRUPTED, err
    assert "interrupted" in err and "Traceback" not in err


STUCK_ON_THE_WAY_OUT = """
import sys, threading
from airflow_provider_sqlqueue import cli
from airflow_provider_sqlqueue.cli import _receive
from airflow_provider_sqlqueue.transport import Transport

cli.INTERRUPT_GRACE_SECONDS = 1.0
found = _receive.existing_queue


def announced(*args):
    queue = found(*args)
    print("waiting", flush=True)
    return queue


_receive.existing_queue = announced
Transport.close = lambda self: threading.Event().wait()  # the unwinding hangs, as a lock left held would
sys.argv = ["sqlqueue", "receive", "--url", sys.argv[1], "orders", "--wait", "2m"]
sys.exit(cli.main())
"""


def test_ctrl_c_exits_130_even_when_the_unwinding_is_stuck(tmp_path) -> None:
    """A CI run once saw ``sqlqueue receive`` outlive its Ctrl-C by a minute. Whatever holds the unwinding
    up, the program exits 130 after its grace period (here shortened to 1 s)."""
    import signal

    url = f"sqlite:///{tmp_path / 'q.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLQUEUE_")}
    assert cli.main(["create", "--url", url, "orders"]) == Exit.OK
    process = subprocess.Popen(
        [sys.executable, "-c", STUCK_ON_THE_WAY_OUT, url], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == "waiting\n"
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == Exit.INTERRUPTED
    finally:
        if process.poll() is None:
            process.kill()


@pytest.fixture(params=["postgresql", "sqlite"], ids=["postgresql-odbc", "sqlite-odbc"])
def odbc(request: pytest.FixtureRequest, tmp_path):
    pytest.importorskip("pyodbc", reason="pyodbc (the mssql extra) is not installed")
    from conftest import odbc_target

    yield from odbc_target(request, request.param, tmp_path)


def test_reading_commands_over_odbc(odbc, capsys, monkeypatch) -> None:
    """peek, stats and purge-expired render their statements with pyodbc's ``?`` parameters too."""
    cli_run = Cli(odbc, capsys, monkeypatch)
    assert cli_run("create", "orders").code == Exit.OK
    assert cli_run("send", "orders", "gone", "--ttbr", "1s").code == Exit.OK
    assert cli_run("send", "orders", "kept", "-H", "k=v").code == Exit.OK
    time.sleep(1.3)
    [record] = cli_run("peek", "orders", "--json").json_lines()
    assert record["body"] == "kept" and record["headers"]["k"] == "v"
    [row] = cli_run("stats", "--json").json_lines()
    assert row["messages"] == 1 and row["expired"] == 1 and row["oldest_age_seconds"] is not None
    [purged] = cli_run("purge-expired", "orders", "--json").json_lines()
    assert purged["purged"] == 1
