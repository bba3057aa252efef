"""Handlers that the consume operator and CLI tests load by dotted path (``consume_handlers:record``)."""

from __future__ import annotations

import os
import threading

_lock = threading.Lock()
seen: list[bytes] = []


def record(message) -> None:
    """Remember the body here, and append it to the file named by SQLQUEUE_TEST_RECORD if set."""
    with _lock:
        seen.append(message.body)
        path = os.environ.get("SQLQUEUE_TEST_RECORD")
        if path:
            with open(path, "ab") as file:
                file.write(message.body + b"\n")


def reject_bad(message) -> None:
    if message.body.startswith(b"bad"):
        raise ValueError("bad message")
