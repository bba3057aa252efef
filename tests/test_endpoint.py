"""Endpoints: the primary queue shared by instances, instance-specific queues, and replies that reach the
instance that sent the request."""

from __future__ import annotations

import socket
import threading
import time
import uuid

import pytest
import rawsql
from sqlalchemy.engine import make_url

from airflow_provider_sqlqueue.model.address import QueueAddress
from airflow_provider_sqlqueue.transport import ConfigurationError, Endpoint, Transport, open_transport
from airflow_provider_sqlqueue.transport import headers as h


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_reply_reaches_the_instance_that_sent_the_request(target, transport: Transport) -> None:
    server = Endpoint(transport, "Server", instance_suffix="s1")
    clients = [Endpoint(transport, "Client", instance_suffix=f"node{n}") for n in (1, 2)]
    for endpoint in (server, *clients):
        endpoint.create()
    replies: dict[str, list] = {"node1": [], "node2": []}
    lock = threading.Lock()

    def serve(message, context) -> None:
        context.reply(b"pong:" + message.body)

    def client_handler(name: str):
        def handle(message, context) -> None:
            with lock:
                replies[name].append((context.queue.address.table, message))

        return handle

    server.start(serve, max_concurrency=2, idle_delay=0.1)
    for name, client in zip(("node1", "node2"), clients, strict=True):
        client.start(client_handler(name), idle_delay=0.1)
    try:
        request = clients[1].send("Server", b"ping-2")
        requests = [clients[0].send("Server", f"ping-1.{n}".encode()) for n in range(3)]
        wait_for(lambda: len(replies["node2"]) == 1 and len(replies["node1"]) == 3)
        time.sleep(0.2)
    finally:
        for endpoint in (server, *clients):
            endpoint.stop(timeout=5)
    [(queue_table, reply)] = replies["node2"]
    assert queue_table == "Client.node2"  # the instance queue, not the shared Client queue
    assert reply.body == b"pong:ping-2"
    assert reply.headers["NServiceBus.MessageIntent"] == "Reply"
    assert reply.headers["NServiceBus.CorrelationId"] == str(request)
    assert reply.headers["NServiceBus.RelatedTo"] == str(request)
    assert reply.headers["NServiceBus.ReplyToAddress"] == server.reply_to_address
    assert sorted(m.headers["NServiceBus.CorrelationId"] for _, m in replies["node1"]) == sorted(
        str(r) for r in requests
    )
    assert {table for table, _ in replies["node1"]} == {"Client.node1"}


def test_endpoint_queues_names_and_switches(target, transport: Transport) -> None:
    sales = Endpoint(transport, "Sales", instance_suffix="n1", audit_queue="audit")
    names = [transport.resolve(n) for n in ("Sales", "Sales.n1", "error", "audit")]
    assert sales.queue_names() == [str(n) for n in names]
    created = sales.create()
    assert str(sales.delayed.address) in created and sales.create() == []
    assert sales.reply_to_address == str(transport.canonical("Sales.n1"))
    assert Endpoint(transport, "Sales").instance_address == transport.resolve(f"Sales.{socket.gethostname()}")
    single = Endpoint(transport, "Sales", instance_specific_queue=False, delayed_delivery=False)
    assert single.instance_queue is None and single.reply_to_address == str(transport.canonical("Sales"))
    with pytest.raises(ConfigurationError, match="without delayed delivery"):
        single.send("Sales", b"x", delay=1)
    with pytest.raises(ConfigurationError, match="error queue"):
        Endpoint(transport, "Sales", error_queue=None)


def test_a_satellite_receiver_has_no_instance_queue(target, transport: Transport) -> None:
    sales = Endpoint(transport, "Sales", instance_suffix="n1")
    sales.create()
    transport.queue("Sales.Retries").create()
    seen: list[bytes] = []
    with sales.start(lambda message: None, idle_delay=0.1):
        pump = sales.satellite("Sales.Retries", lambda message: seen.append(message.body), idle_delay=0.1)
        transport.queue("Sales.Retries").send(b"again")
        wait_for(lambda: seen == [b"again"])
        queues = sorted(p.queue.address.table for p in sales.pumps)
    assert queues == ["Sales", "Sales.Retries", "Sales.n1"]
    assert pump.endpoint is sales


def database_of(target) -> str | None:
    """The target's current database, asked without the transport (SQLite has none)."""
    if target.engine == "sqlite":
        return None
    if target.engine == "postgresql":
        return make_url(target.url).database
    import pyodbc

    with pyodbc.connect(target.url, autocommit=True) as connection:
        return connection.execute("SELECT DB_NAME()").fetchone()[0]


def header_address(target, table: str) -> str:
    """How the reference writes a queue's address in headers: with the catalog on SQL Server only, as
    ``"schema"."table"`` on PostgreSQL (NServiceBus.Transport.PostgreSql's form)."""
    if target.engine == "postgresql":
        return f'"{target.schema}"."{table}"'
    catalog = database_of(target) if target.engine == "sqlserver" else None
    return str(QueueAddress(table, target.schema, catalog))


# The rendering and the look-up do not depend on the ODBC driver: SQL Server runs once, through FreeTDS.
@pytest.mark.parametrize(
    "target", ["sqlite", "postgresql", "sqlserver-freetds", "sqlserver-msodbc"], indirect=True
)
def test_reply_to_failed_queue_and_forward_destination_name_the_catalog_on_sql_server(
    target, transport: Transport
) -> None:
    sales = Endpoint(transport, "Sales", instance_specific_queue=False)
    sales.create()
    expected = header_address(target, "Sales")
    sales.send("Sales", b"later", delay=3600)
    sales.send("Sales", b"fails")
    [(stored,)] = rawsql.execute(
        transport, f"SELECT Headers FROM {transport.dialect.qualified_name(sales.delayed.address)}"
    )
    assert h.decode_headers(stored)[h.FORWARD_DESTINATION] == expected

    def fail(message) -> None:
        raise ValueError("no")

    with sales.start(fail, immediate_retries=0, idle_delay=0.1, run_mover=False):
        wait_for(lambda: transport.queue("error").count() == 1)
    with transport.queue("error").receive() as batch:
        [failed] = list(batch)
    assert failed.headers[h.REPLY_TO_ADDRESS] == expected == sales.reply_to_address
    assert failed.headers[h.FAILED_QUEUE] == expected


@pytest.mark.parametrize("target", ["postgresql", "sqlserver-freetds", "sqlserver-msodbc"], indirect=True)
def test_a_forward_destination_naming_this_queue_with_its_catalog_is_handled_here(
    target, transport: Transport
) -> None:
    """.NET endpoints write ForwardDestination with the catalog: it names this queue, not another one."""
    sales = Endpoint(transport, "Sales", instance_specific_queue=False, delayed_delivery=False)
    sales.create()
    here = str(QueueAddress("Sales", target.schema, database_of(target)))
    sales.send("Sales", b"due", {h.FORWARD_DESTINATION: here})
    handled: list[bytes] = []
    with sales.start(lambda message: handled.append(message.body), idle_delay=0.1, run_mover=False):
        wait_for(lambda: handled == [b"due"])
        [pump] = sales.pumps
        assert pump.stats().forwarded == 0
    assert transport.resolve(here) == transport.resolve("Sales") == sales.address


@pytest.mark.parametrize(
    "target", ["sqlite", "postgresql", "sqlserver-freetds", "sqlserver-msodbc"], indirect=True
)
def test_the_catalog_is_looked_up_at_most_once_per_transport(target, monkeypatch, request) -> None:
    """Without a database in the connection string, the first connection asks (DB_NAME(),
    current_database(): no privilege needed) and every later address reuses the answer; with one, nothing
    is asked. On PostgreSQL a role with no privilege at all, whose name is not the database's, connects
    to the database libpq's PGDATABASE names."""
    url = target.url
    if target.engine == "postgresql":
        server = request.getfixturevalue("postgres_server")
        role = f"qcat_{uuid.uuid4().hex[:8]}"
        server.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
        request.addfinalizer(lambda: server.execute(f"DROP ROLE {role}"))
        parsed = make_url(url)
        monkeypatch.setenv("PGDATABASE", parsed.database)  # libpq's default, which the URL cannot show
        url = parsed._replace(database=None, username=role, password="pw").render_as_string(
            hide_password=False
        )
    elif target.engine == "sqlserver":
        url = ";".join(part for part in url.split(";") if not part.upper().startswith("DATABASE="))
    with open_transport(url, default_schema=target.schema) as transport:
        assert transport.catalog_lookups == 0
        expected = None
        if target.engine == "postgresql":
            expected = make_url(target.url).database
        elif target.engine == "sqlserver":
            import pyodbc

            with pyodbc.connect(url, autocommit=True) as connection:
                expected = connection.execute("SELECT DB_NAME()").fetchone()[0]
        for _ in range(3):
            transport.new_connection().close()
        assert transport.current_catalog() == expected
        written = (
            f'"{target.schema}"."q"'
            if target.engine == "postgresql"
            else str(QueueAddress("q", target.schema, expected if target.engine == "sqlserver" else None))
        )
        assert str(transport.canonical("q")) == written
        if expected is not None:
            assert transport.resolve(QueueAddress("q", target.schema, expected)) == transport.resolve("q")
        assert transport.catalog_lookups == (0 if target.engine == "sqlite" else 1)
    with target.open() as named:
        named.new_connection().close()
        assert named.current_catalog() == database_of(target)
        assert named.catalog_lookups == 0  # the connection string's database wins without a query
