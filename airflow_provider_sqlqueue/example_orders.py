"""Realistic order messages for the examples, the demo and the benchmarks, and a small order feed.

``python -m airflow_provider_sqlqueue.example_orders feed --queue orders --count 2000 --waves 4 --interval 1``
sends orders in waves, as another system would; the database URL comes from ``SQLQUEUE_URL`` (and
``SQLQUEUE_PASSWORD``), never from the command line.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from datetime import datetime, timedelta, timezone

from .transport import OutgoingMessage, open_transport
from .transport.headers import CONTENT_TYPE, ENCLOSED_MESSAGE_TYPES

__all__ = ["ORDER_TYPE", "make_orders"]

ORDER_TYPE = "Sales.Messages.OrderPlaced"
CURRENCIES = ("EUR", "EUR", "EUR", "USD", "GBP")


def make_orders(
    count: int,
    *,
    seed: int = 7,
    first_order_id: int = 1,
    customers: int = 40,
    short_lived_every: int | None = 10,
    short_lived_ttbr: timedelta = timedelta(seconds=2),
    body_bytes: int | None = None,
) -> list[OutgoingMessage]:
    """``count`` OrderPlaced messages; every ``short_lived_every``-th expires after ``short_lived_ttbr``.

    ``body_bytes`` pads each body with a ``note`` so that it is about that long (for benchmarks).
    """
    rng = random.Random(seed + first_order_id)
    placed = datetime(2026, 11, 21, 8, 0, tzinfo=timezone.utc)
    messages = []
    for number in range(first_order_id, first_order_id + count):
        items = rng.randint(1, 6)
        order = {
            "order_id": number,
            "customer": f"C{rng.randint(1, customers):03d}",
            "amount": round(sum(rng.uniform(3, 120) for _ in range(items)), 2),
            "currency": rng.choice(CURRENCIES),
            "items": items,
            "placed_at": (placed + timedelta(seconds=number * 7)).isoformat(),
        }
        if body_bytes:
            text = json.dumps(order)
            order["note"] = "x" * max(0, body_bytes - len(text) - 12)
        short = short_lived_every is not None and number % short_lived_every == 0
        messages.append(
            OutgoingMessage(
                json.dumps(order).encode(),
                {CONTENT_TYPE: "application/json", ENCLOSED_MESSAGE_TYPES: ORDER_TYPE},
                short_lived_ttbr if short else None,
            )
        )
    return messages


def feed(
    url: str,
    queue: str,
    count: int,
    *,
    waves: int = 4,
    interval: float = 1.0,
    first_order_id: int = 1,
    default_schema: str | None = None,
) -> int:
    """Send ``count`` orders in ``waves`` waves, ``interval`` seconds apart; return how many were sent."""
    sent = 0
    with open_transport(url, default_schema=default_schema) as transport:
        target = transport.queue(queue)
        for wave in range(waves):
            size = count // waves + (1 if wave < count % waves else 0)
            target.send_batch(make_orders(size, first_order_id=first_order_id + sent))
            sent += size
            if wave + 1 < waves:
                time.sleep(interval)
    return sent


def main(argv: list[str] | None = None) -> int:
    from .spark.config import url_from_environment

    parser = argparse.ArgumentParser(description="send example orders in waves")
    parser.add_argument("command", choices=["feed"])
    parser.add_argument("--queue", default="orders")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--waves", type=int, default=4)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--first-order-id", type=int, default=1)
    parser.add_argument("--default-schema")
    args = parser.parse_args(argv)
    sent = feed(
        url_from_environment(),
        args.queue,
        args.count,
        waves=args.waves,
        interval=args.interval,
        first_order_id=args.first_order_id,
        default_schema=args.default_schema,
    )
    print(f"order feed: sent {sent} order(s) to {args.queue} in {args.waves} wave(s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
