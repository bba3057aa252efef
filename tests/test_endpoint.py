"""Endpoints: the primary queue shared by instances, instance-specific queues, and replies that reach the
instance that sent the request."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from airflow_provider_sqlqueue.transport import ConfigurationError, Endpoint, Transport


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
    assert sales.reply_to_address == str(transport.resolve("Sales.n1"))
    assert Endpoint(transport, "Sales").instance_address == transport.resolve(f"Sales.{socket.gethostname()}")
    single = Endpoint(transport, "Sales", instance_specific_queue=False, delayed_delivery=False)
    assert single.instance_queue is None and single.reply_to_address == str(transport.resolve("Sales"))
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
