"""Rows of one SELECT in batches, as the executors read staged or held messages.

A plain ``execute`` makes libpq take the whole result into memory before the first row reaches Python, so the
server's work and the worker's never overlap and a slice's rows all sit in memory at once. psycopg on libpq 17
or later streams them in chunks instead (``Cursor.stream(size=...)``): the worker decodes one chunk while the
server sends the next, with only a chunk in memory. Other drivers, and older libpq, fetch as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Any

__all__ = ["row_batches", "streams_in_chunks"]

CHUNKED_ROWS_LIBPQ = 170000


def streams_in_chunks(cursor: Any) -> bool:
    """Whether ``cursor`` is psycopg's on a libpq that sends rows in chunks."""
    if not hasattr(cursor, "stream") or type(cursor).__module__.split(".")[0] != "psycopg":
        return False
    import psycopg

    return psycopg.pq.version() >= CHUNKED_ROWS_LIBPQ


def row_batches(cursor: Any, statement: str, params: tuple, size: int) -> Iterator[list[Any]]:
    """The rows of ``statement`` in lists of at most ``size``, in the order the server sends them."""
    if streams_in_chunks(cursor):
        rows = cursor.stream(statement, params, size=size)
        while batch := list(islice(rows, size)):
            yield batch
        return
    cursor.execute(statement, params)
    while batch := cursor.fetchmany(size):
        yield batch
