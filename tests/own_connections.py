"""This process's connections to a test database, counted from the operating system's view (/proc).

A count taken in one test must not include what an earlier test of the same pytest worker left open: each
test first takes :func:`own_sockets` and counts only the sockets opened after it (a socket's inode is not
reused while the process runs, unlike a client port).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["checker", "own_sockets", "own_tcp_ports", "settled"]


def own_sockets(pid: int | str = "self") -> set[str]:
    """The inodes of this process's (or process ``pid``'s) open sockets."""
    inodes = set()
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:  # the process has ended
        return inodes
    for fd in descriptors:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def own_tcp_ports(ignore: set[str] = frozenset(), pid: int | str = "self") -> list[int]:  # type: ignore[assignment]
    """The local ports of this process's (or process ``pid``'s) TCP sockets but those in ``ignore`` (inodes
    from :func:`own_sockets`): its connections to the server, told apart from those of other processes."""
    inodes = own_sockets(pid) - ignore
    ports = []
    for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[9] in inodes:
                ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def settled(count: Callable[[], int], bound: int, seconds: float = 15.0) -> int:
    """``count()`` once it is within ``bound``, or as it stands after ``seconds``: a connection closed just
    before is still listed until its server process (PostgreSQL) or its deferred close (SQLite) is done."""
    deadline = time.monotonic() + seconds
    while (found := count()) > bound and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def checker(url: str) -> Any:
    """A psycopg connection of its own to the PostgreSQL database at SQLAlchemy ``url``, to count the
    server's view of the connections (``pg_stat_activity``); a context manager."""
    import psycopg
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    return psycopg.connect(
        host=parsed.host,
        port=parsed.port,
        user=parsed.username,
        password=parsed.password,
        dbname=parsed.database,
    )
