"""What many waiting requests cost (issue 67): a reply queue per request against one shared reply queue read
by correlation, side by side in one run, as a ratio.

``RequestReplyOperator`` gives each request a reply queue of its own (transport/reply_queue.py), so each
waiting trigger's poll reads a table of two rows (the request's marker and, once it came, the reply),
however many requests wait. The alternative without a new statement is one shared reply queue in which
each trigger looks for its reply among all the others' (the plain ordered read the Queues page browses
with, up to the queue's length): its poll grows with the number of waiting requests. Both hold the same
``--requests`` answered requests; a poll round is one read per request (what the triggerer runs each
``poll_interval``), timed ``--rounds`` times alternating the two layouts, median taken. The price of the
per-request queue, its table created with the request and dropped with the answer, is timed too. Nothing
is asserted: the figures are for the reader.

    python benchmarks/request_reply_bench.py sqlite:////tmp/replies.db postgresql://user:pw@host/db
    python benchmarks/request_reply_bench.py --requests 300 --rounds 3 'DRIVER=...;SERVER=...'
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from dataclasses import dataclass

from airflow_provider_sqlqueue.transport import OutgoingMessage, open_transport
from airflow_provider_sqlqueue.transport import headers as h
from airflow_provider_sqlqueue.transport.browse import browse
from airflow_provider_sqlqueue.transport.reply_queue import ReplyQueue
from airflow_provider_sqlqueue.transport.requests import correlation_of_reply

PREFIX = "bench.replies"
SHARED = "bench.replies.shared"
SERVICE = "bench.service"


@dataclass
class ReplyLayoutCost:
    """Seconds per poll round of each layout (median over the rounds) and the per-request queue's price."""

    engine: str
    requests: int
    rounds: int
    own_queue_round: float
    shared_queue_round: float
    open_seconds: float  # per request: create the reply queue, send the request with its marker
    close_seconds: float  # per request: take what is left, drop the reply queue

    @property
    def ratio(self) -> float:
        """A shared queue's poll round over the per-request queues' (above 1: the shared one is slower)."""
        return self.shared_queue_round / self.own_queue_round

    def line(self) -> str:
        return (
            f"{self.engine}: {self.requests} waiting requests, a poll round of one read each takes "
            f"{self.own_queue_round * 1e3:,.1f} ms with a reply queue per request and "
            f"{self.shared_queue_round * 1e3:,.1f} ms with one shared queue read by correlation: ratio "
            f"{self.ratio:.1f}; a request's own queue costs {self.open_seconds * 1e3:,.1f} ms to open and "
            f"{self.close_seconds * 1e3:,.1f} ms to close ({self.rounds} rounds)"
        )


def _reply(request_id: uuid.UUID) -> OutgoingMessage:
    headers = {h.CORRELATION_ID: str(request_id), h.MESSAGE_INTENT: "Reply"}
    return OutgoingMessage(b'{"price": 12.5}', headers)


def _own_round(replies: list[ReplyQueue]) -> float:
    start = time.perf_counter()
    for reply_queue in replies:
        assert reply_queue.find_reply() is not None
    return time.perf_counter() - start


def _shared_round(shared, request_ids: list[uuid.UUID]) -> float:
    start = time.perf_counter()
    for request_id in request_ids:
        wanted = str(request_id)
        found = [m for m in browse(shared, len(request_ids)) if correlation_of_reply(m.headers) == wanted]
        assert found
    return time.perf_counter() - start


def measure(url: str, requests: int = 200, rounds: int = 3, **transport_options: object) -> ReplyLayoutCost:
    with open_transport(url, **transport_options) as transport:  # type: ignore[arg-type]
        for name in ("error", SERVICE, SHARED):
            transport.queue(name).create()
        request_ids = [uuid.uuid4() for _ in range(requests)]
        replies = [ReplyQueue(transport, PREFIX, request_id) for request_id in request_ids]
        start = time.perf_counter()
        for reply_queue in replies:
            reply_queue.send_request(SERVICE, OutgoingMessage(b'{"item": "widget"}'))
        open_seconds = (time.perf_counter() - start) / requests
        answers = [str(reply_queue.queue.send(_reply(reply_queue.request_id))) for reply_queue in replies]
        shared = transport.queue(SHARED)
        shared.send_batch([_reply(request_id) for request_id in request_ids])
        own, alone = [], []
        for _ in range(rounds):
            own.append(_own_round(replies))
            alone.append(_shared_round(shared, request_ids))
        start = time.perf_counter()
        for reply_queue, answer in zip(replies, answers, strict=True):
            reply_queue.close("benchmark done", answered_by=answer)
        close_seconds = (time.perf_counter() - start) / requests
        for name in ("error", SERVICE, SHARED):
            transport.queue(name).drop()
        return ReplyLayoutCost(
            transport.dialect.name,
            requests,
            rounds,
            statistics.median(own),
            statistics.median(alone),
            open_seconds,
            close_seconds,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("urls", nargs="+", help="transport URLs or ODBC strings, one run each")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    for url in arguments.urls:
        print(measure(url, arguments.requests, arguments.rounds).line())


if __name__ == "__main__":
    main()
