"""Realistic order messages for the examples, the demo and the benchmarks, and a small order feed."""

from __future__ import annotations

import json
import random
import threading
from datetime import datetime, timedelta, timezone

from ..transport import OutgoingMessage, TableQueue
from ..transport.headers import CONTENT_TYPE, ENCLOSED_MESSAGE_TYPES

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
    queue: TableQueue,
    count: int,
    *,
    waves: int = 4,
    interval: float = 1.0,
    first_order_id: int = 1,
    stop: threading.Event | None = None,
) -> int:
    """Send ``count`` orders to ``queue`` in ``waves`` waves, ``interval`` seconds apart, as another system
    would; return how many were sent. A set ``stop`` ends it between waves."""
    stop = stop or threading.Event()
    sent = 0
    for wave in range(waves):
        if wave and stop.wait(interval):
            break
        size = count // waves + (1 if wave < count % waves else 0)
        queue.send_batch(make_orders(size, first_order_id=first_order_id + sent))
        sent += size
    return sent
