"""Push wake-up: an idle receiver hears a committed send at once instead of at its next poll.

Where the engine pushes notifications (PostgreSQL: a send's statement queues a ``NOTIFY`` on the queue's
channel, delivered when its transaction commits), a :class:`WakeUpListener` holds its own connection,
outside the pool so it never keeps a connection from a receive, ``LISTEN``s on it and wakes the waiting
receivers. Polling stays the fallback: a receiver waits at most its idle delay, so a lost listening
connection only makes wake-ups as late as polling until the listener has reconnected.

One listener may hear several queues on its one connection (:meth:`WakeUpListener.listen`,
:meth:`WakeUpListener.forget`): the triggers' shared poller (``transport/shared_poll.py``) holds one per
database for every queue its triggers watch, and is told through ``on_wake`` rather than :meth:`wait`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
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
    """Listens for sends to its queues on a dedicated connection and wakes :meth:`wait`-ing receivers (and
    calls ``on_wake``, from the listening thread, if given).

    A wake-up is never lost between a receive that found nothing and the wait that follows it: the event is
    cleared only by the wait that it ended, so a notification arriving in between ends the next wait at once.
    A queue added by :meth:`listen` is heard from the listening thread's next slice on; one dropped by
    :meth:`forget` may still wake it until the connection is next opened, which happens once the forgotten
    channels outnumber the heard ones.
    """

    def __init__(
        self,
        transport: Transport,
        address: QueueAddress | None,
        name: str,
        *,
        on_wake: Callable[[], None] | None = None,
    ) -> None:
        self.transport = transport
        self.address = address
        self.name = name
        self.connected = threading.Event()
        self.reconnects = 0
        self.notifications = 0
        self._on_wake = on_wake
        self._wanted: set[str] = set()
        self._listening: set[str] = set()
        self._channels_lock = threading.Lock()
        if address is not None:
            self.listen(address)
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

    def listen(self, address: QueueAddress) -> None:
        """Hear sends to ``address`` too (from the listening thread's next slice)."""
        statement = self.transport.dialect.listen_statement(address)
        if statement is None:
            raise ValueError(f"{self.transport.dialect.display_name} has no push notification")
        with self._channels_lock:
            self._wanted.add(statement)

    def forget(self, address: QueueAddress) -> None:
        """Stop waking for ``address`` (see the class's note on when the channel is left)."""
        statement = self.transport.dialect.listen_statement(address)
        with self._channels_lock:
            self._wanted.discard(statement)  # type: ignore[arg-type]

    def wake(self) -> None:
        self._woken.set()
        if self._on_wake is not None:
            self._on_wake()

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
                    self.wake()  # sends made while it was away were not heard: look once
                lost_logged = False
                delay = RECONNECT_FIRST
                while not self._stopping.is_set():
                    if self._channels_changed(connection):
                        break  # forgotten channels outnumber heard ones: listen afresh
                    if self.transport.dialect.wait_for_notification(connection, LISTEN_SLICE):
                        self.notifications += 1
                        self.wake()
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

    def _channels_changed(self, connection: Any) -> bool:
        """LISTEN on channels added since the last slice; True when the connection should be opened again
        to leave the forgotten ones (they outnumber the heard ones)."""
        with self._channels_lock:
            wanted = set(self._wanted)
        for statement in sorted(wanted - self._listening):
            connection.execute(statement)
            self._listening.add(statement)
        stale = len(self._listening - wanted)
        if stale and stale >= len(wanted):
            self._close()
            return True
        return False

    def _connect(self) -> Any:
        connection = self.transport.new_connection()
        self._connection = connection
        self._listening = set()
        connection.autocommit = True
        with self._channels_lock:
            wanted = sorted(self._wanted)
        for statement in wanted:
            connection.execute(statement)
            self._listening.add(statement)
        self.connected.set()
        return connection

    def _close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):  # already gone
                connection.close()
