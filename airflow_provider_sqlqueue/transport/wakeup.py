"""Push wake-up: an idle receiver hears a committed send at once instead of at its next poll.

Where the engine pushes notifications (PostgreSQL: a send's statement queues a ``NOTIFY`` on the queue's
channel, delivered when its transaction commits), a :class:`WakeUpListener` holds its own connection,
outside the pool so it never keeps a connection from a receive, ``LISTEN``s on it and wakes the waiting
receivers. Polling stays the fallback: a receiver waits at most its idle delay, so a lost listening
connection only makes wake-ups as late as polling until the listener has reconnected.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from ..model.address import QueueAddress

if TYPE_CHECKING:
    from .connection import Transport

__all__ = ["WAKE_UP_MODES", "WakeUpListener"]

log = logging.getLogger(__name__)

WAKE_UP_MODES = ("auto", "poll")
RECONNECT_FIRST = 0.1
RECONNECT_MOST = 5.0
LISTEN_SLICE = 0.1  # how often the listening thread checks for the stop


class WakeUpListener:
    """Listens for sends to one queue on a dedicated connection and wakes :meth:`wait`-ing receivers.

    A wake-up is never lost between a receive that found nothing and the wait that follows it: the event is
    cleared only by the wait that it ended, so a notification arriving in between ends the next wait at once.
    """

    def __init__(self, transport: Transport, address: QueueAddress, name: str) -> None:
        self.transport = transport
        self.address = address
        self.name = name
        self.connected = threading.Event()
        self.reconnects = 0
        self.notifications = 0
        self._statement = transport.dialect.listen_statement(address)
        self._woken = threading.Event()
        self._stopping = threading.Event()
        self._connection: Any = None
        self._thread: threading.Thread | None = None

    @staticmethod
    def supported(transport: Transport, address: QueueAddress) -> bool:
        return transport.dialect.listen_statement(address) is not None

    def start(self) -> WakeUpListener:
        self._thread = threading.Thread(target=self._listen_loop, name=f"{self.name} wake-up", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening: the listening thread closes its connection and ends within a slice."""
        self._stopping.set()
        self._woken.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(LISTEN_SLICE * 20)

    def wake(self) -> None:
        self._woken.set()

    def wait(self, timeout: float, halt: threading.Event) -> bool:
        """Wait until a send was heard (True), ``halt`` is set, or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while not halt.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self._woken.wait(min(remaining, 0.1)):
                self._woken.clear()
                return not halt.is_set()
        return False

    # ---- the listening thread ------------------------------------------------------------------
    def _listen_loop(self) -> None:
        try:
            self._listen_until_stopped()
        finally:
            self.connected.clear()
            self._close()

    def _listen_until_stopped(self) -> None:
        delay = RECONNECT_FIRST
        lost_logged = False
        while not self._stopping.is_set():
            try:
                connection = self._connect()
                if lost_logged:
                    log.info("%s: push wake-up is back (LISTEN on %s)", self.name, self.address)
                    self._woken.set()  # sends made while it was away were not heard: look once
                lost_logged = False
                delay = RECONNECT_FIRST
                while not self._stopping.is_set():
                    if self.transport.dialect.wait_for_notification(connection, LISTEN_SLICE):
                        self.notifications += 1
                        self._woken.set()
            except Exception as error:
                self.connected.clear()
                self._close()
                if self._stopping.is_set():
                    return
                if not lost_logged:
                    log.warning(
                        "%s: push wake-up lost (%s: %s); polling at the idle delay until the listener "
                        "reconnects", self.name, type(error).__name__, error,
                    )  # fmt: skip
                    lost_logged = True
                self.reconnects += 1
                self._stopping.wait(delay)
                delay = min(RECONNECT_MOST, delay * 2)

    def _connect(self) -> Any:
        connection = self.transport.new_connection()
        self._connection = connection
        connection.autocommit = True
        connection.execute(self._statement)
        self.connected.set()
        return connection

    def _close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):  # already gone
                connection.close()
