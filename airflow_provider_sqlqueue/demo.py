"""A short end-to-end run of the transport core on the embedded SQLite default.

``python -m airflow_provider_sqlqueue.demo [--db PATH] [--orders N]`` creates queues, sends a batch of order
messages (some with a short time to be received), receives them with competing threads while forwarding a
summary per batch atomically, shows a corrupted row from "another system" moving to the error queue,
purges what expired, and prints a summary. Later versions grow this into the Airflow + Spark pipeline.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import tempfile
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

from .transport import OutgoingMessage, open_transport
from .transport.headers import CONTENT_TYPE, ENCLOSED_MESSAGE_TYPES


def _orders(count: int, rng: random.Random) -> list[OutgoingMessage]:
    messages = []
    for number in range(count):
        order = {
            "order_id": number + 1,
            "customer": f"C{rng.randint(1, 50):03d}",
            "amount": round(rng.uniform(5, 500), 2),
        }
        messages.append(
            OutgoingMessage(
                json.dumps(order).encode(),
                {CONTENT_TYPE: "application/json", ENCLOSED_MESSAGE_TYPES: "Sales.OrderPlaced"},
                # one order in ten is only worth handling within 50 ms
                timedelta(milliseconds=50) if number % 10 == 9 else None,
            )
        )
    return messages


def run(db_path: Path, order_count: int, consumers: int = 4) -> dict[str, float | int]:
    rng = random.Random(7)
    url = f"sqlite:///{db_path}"
    with open_transport(url) as transport:
        orders, audit, error = (transport.queue(name) for name in ("orders", "audit", "error"))
        for queue in (orders, audit, error):
            queue.create()
        print(f"queues orders, audit and error are ready in {db_path}")

        started = time.perf_counter()
        orders.send_batch(_orders(order_count, rng))
        send_seconds = time.perf_counter() - started
        print(f"sent {order_count} orders in {send_seconds:.3f} s; peek estimate {orders.peek_estimate()}")

        with transport.connection() as connection:  # a row written by another system, headers corrupted
            connection.cursor().execute(
                'INSERT INTO "orders" (Id, Recoverable, Headers, Body) VALUES (?, 1, ?, ?)',
                (str(uuid.uuid4()), "<corrupted headers", b"{}"),
            )
            connection.commit()

        time.sleep(0.1)  # let the short-lived orders expire
        totals = {"received": 0, "amount": 0.0, "expired": 0, "poisoned": 0, "batches": 0}
        lock = threading.Lock()

        def consume() -> None:
            while True:
                with orders.receive(max_messages=25) as batch:
                    amount = sum(json.loads(message.body)["amount"] for message in batch)
                    if batch:
                        batch.send(audit, json.dumps({"orders": len(batch), "amount": round(amount, 2)}))
                    with lock:
                        totals["received"] += len(batch)
                        totals["amount"] += amount
                        totals["expired"] += batch.expired
                        totals["poisoned"] += batch.poisoned
                        totals["batches"] += 1 if batch else 0
                    if not batch and not batch.expired and not batch.poisoned:
                        return

        started = time.perf_counter()
        threads = [threading.Thread(target=consume) for _ in range(consumers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        receive_seconds = time.perf_counter() - started

        late = orders.send_batch(_orders(20, rng)[9::10])  # two more short-lived orders, never received
        time.sleep(0.1)
        purged = orders.purge_expired()
        summary = {
            "orders_sent": order_count,
            "received": int(totals["received"]),
            "expired_on_receive": int(totals["expired"]),
            "purged": purged,
            "moved_to_error_queue": int(totals["poisoned"]),
            "error_queue_depth": error.count(),
            "audit_messages": audit.count(),
            "batches": int(totals["batches"]),
            "amount": round(totals["amount"], 2),
            "send_msgs_per_s": round(order_count / send_seconds),
            "receive_msgs_per_s": round(totals["received"] / receive_seconds),
            "left_in_orders": orders.count(),
        }
        assert summary["received"] + summary["expired_on_receive"] == order_count, summary
        assert summary["purged"] == len(late) and summary["left_in_orders"] == 0, summary
        return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="SQLite queue file (default: a new temporary file)")
    parser.add_argument("--orders", type=int, default=5000, help="how many order messages to send")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    db_path = args.db or Path(tempfile.mkdtemp(prefix="sqlqueue-demo-")) / "queues.db"
    if db_path.exists():
        db_path.unlink()
    summary = run(db_path, args.orders)
    width = max(len(key) for key in summary)
    print("\nsummary")
    for key, value in summary.items():
        print(f"  {key.replace('_', ' '):<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
