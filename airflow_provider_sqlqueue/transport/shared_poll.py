"""One poller per database for all the watchers of one event loop (a triggerer's deferred sensors).

A triggerer holds hundreds of triggers on one asyncio loop. Each one polling through its own transport held a
connection per trigger and ran a statement per trigger per poll, until the server ran out of connections and
locked out the senders the triggers were waiting for. Here the watchers of one database (one ``key``: an
Airflow connection id) share a :class:`SharedPoller`: one transport whose reads run one at a time (so its
pool holds one connection), one :class:`~.depth_reads.DepthReader` statement per poll for every watched
queue, and, where the engine pushes notifications (PostgreSQL), one :class:`~.wakeup.WakeUpListener`
connection that makes a send to any watched queue start a read at once. Each watcher gets every look at
its queue and checks its own condition.

A poller starts with its first watcher and closes, transport and listener, when its last one leaves. It reads
when one of its watchers is due (each at its own interval) or a push arrives, and then reads every watched
queue: the statement's text stays the same while the watched queues do, so the driver may prepare it and
the server plan it once (psycopg does from its sixth run). For the same reason a queue whose last watcher
left stays in the statement until such queues are as many as the watched ones. An error reading one queue
reaches only that queue's watchers; after one that is not transient, they are next served
:data:`ERROR_BACKOFF` seconds later, and their queue is left out of the reads until then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from ..model.address import QueueAddress
from ..model.errors import TransientDatabaseError
from .depth_reads import DepthReader, QueueLook, Target
from .depth_samples import RETENTION, DepthSampler
from .wakeup import WakeUpListener

if TYPE_CHECKING:
    from .connection import Transport

__all__ = ["ERROR_BACKOFF", "PUSH_SPACING", "SHARED_POLLERS", "SharedDatabase", "SharedPoller", "Watch"]

log = logging.getLogger(__name__)

ERROR_BACKOFF = 30.0  # seconds before a watcher that got a lasting error is served again
PUSH_SPACING = 0.02  # at least this long between two reads that pushes started


@dataclass(frozen=True)
class SharedDatabase:
    """How a poller reaches its database: ``key`` names it (watchers with the same key share a poller),
    ``open`` makes its transport (awaited once, by the poller) and ``close`` ends it. ``depth_retention``:
    how long the depth samples its reads leave (:mod:`.depth_samples`) are kept; None: it samples none."""

    key: str
    open: Callable[[], Awaitable[Transport]]
    close: Callable[[Transport], Awaitable[None]]
    depth_retention: timedelta | None = RETENTION


class Watch:
    """One watcher's interest in one queue: :meth:`next` waits for the poller's next look at it.

    :param exact_from: read the exact count too when the estimate reaches this (0: every poll; None: never).
    """

    def __init__(self, queue_name: str, interval: float, exact_from: int | None) -> None:
        self.queue_name = queue_name
        self.interval = interval
        self.exact_from = exact_from
        self.due = 0.0
        self.failing = False  # the last look was an error that is not transient
        self._latest: QueueLook | BaseException | None = None
        self._ready = asyncio.Event()

    async def next(self) -> QueueLook:
        """The next look at the queue; raises the error its read raised instead."""
        await self._ready.wait()
        self._ready.clear()
        latest, self._latest = self._latest, None
        if isinstance(latest, BaseException):
            raise latest
        assert latest is not None
        return latest

    def deliver(self, look: QueueLook | BaseException, now: float) -> None:
        lasting = isinstance(look, BaseException) and not isinstance(look, TransientDatabaseError)
        self.failing = lasting
        self.due = now + (max(self.interval, ERROR_BACKOFF) if lasting else self.interval)
        self._latest = look
        self._ready.set()


class SharedPoller:
    """The reads of one database for the watchers of one event loop (see the module)."""

    def __init__(self, database: SharedDatabase) -> None:
        self.database = database
        self.watches: set[Watch] = set()
        self.statements = 0  # statements run, for tests and benchmarks
        self.reads = 0
        self.transport: Transport | None = None
        self._reader: DepthReader | None = None
        self._sampler: DepthSampler | None = None
        self._listener: WakeUpListener | None = None
        self._targets: dict[str, Target | BaseException] = {}
        self._read_set: dict[str, None] = {}  # the queues each read reads, in the statement's order
        self._erring: set[str] = set()  # the queues whose last read failed other than transiently
        self._heard: set[QueueAddress] = set()
        self._changed = asyncio.Event()
        self._pushed = False
        self._last_push_read = 0.0
        self._stopping = False
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(self._run(), name=f"sqlqueue shared poller {database.key}")

    def serves(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether this poller still runs on ``loop`` (an id may come back with a new loop)."""
        return self._loop is loop and not self._task.done()

    @property
    def listener(self) -> WakeUpListener | None:
        """The push listener, once a watched queue's engine has push (PostgreSQL)."""
        return self._listener

    def add(self, watch: Watch) -> None:
        self.watches.add(watch)
        self._changed.set()

    def remove(self, watch: Watch) -> None:
        self.watches.discard(watch)

    async def close(self) -> None:
        """Stop after the read under way; the poller's task then closes the listener and the transport."""
        self._stopping = True
        self._changed.set()
        await asyncio.wait([self._task])

    # ---- the loop --------------------------------------------------------------------------------
    async def _run(self) -> None:
        try:
            while not self._stopping:
                now = time.monotonic()
                pushed = self._pushed and now - self._last_push_read >= PUSH_SPACING
                due = [w for w in self.watches if pushed or w.due <= now]
                if due:
                    if pushed:
                        self._pushed = False
                        self._last_push_read = now
                    await self._serve(due)
                    continue
                waits = [w.due for w in self.watches]
                if self._pushed:
                    waits.append(self._last_push_read + PUSH_SPACING)
                timeout = max(0.0, min(waits) - time.monotonic()) if waits else None
                self._changed.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout)
        finally:
            await self._release()

    async def _release(self) -> None:
        """Close the listener and the transport when the poller ends, closed or cancelled: a loop that ends
        with watchers never closed (an event generator left unfinished, a triggerer shutting down) cancels
        this task before their ``finally`` could close the poller, and its connections must not outlive it."""
        listener, self._listener = self._listener, None
        if listener is not None:
            await asyncio.to_thread(listener.stop)
        transport, self.transport = self.transport, None
        if transport is not None:
            try:
                await self.database.close(transport)
            except Exception as error:
                log.warning("closing the shared poller of %s failed: %s", self.database.key, error)

    async def _serve(self, due: list[Watch]) -> None:
        names = self._names_to_read(due)
        now_due = set(due)
        served = [w for w in self.watches if w.queue_name in names and (w in now_due or not w.failing)]
        try:
            looks = await self._read(names, served)
        except Exception as error:  # the transport cannot be opened: every watcher of these queues hears
            looks = dict.fromkeys(names, error)
        self._erring = {
            name
            for name, look in looks.items()
            if isinstance(look, BaseException) and not isinstance(look, TransientDatabaseError)
        }
        now = time.monotonic()
        for watch in served:
            watch.deliver(looks[watch.queue_name], now)

    def _names_to_read(self, due: list[Watch]) -> list[str]:
        """Every watched queue, in a stable order, but those whose watchers all wait out an error."""
        live = {w.queue_name for w in self.watches}
        for name in sorted(live - self._read_set.keys()):
            self._read_set[name] = None
        stale = [name for name in self._read_set if name not in live]
        if len(stale) >= len(live):
            for name in stale:
                del self._read_set[name]
        waiting = {w.queue_name for w in self.watches if w.failing and w not in due}
        waiting -= {w.queue_name for w in self.watches if not w.failing or w in due}
        unwatched_errors = self._erring - live
        return [name for name in self._read_set if name not in waiting and name not in unwatched_errors]

    async def _read(self, names: list[str], served: list[Watch]) -> dict[str, QueueLook | BaseException]:
        if self.transport is None:
            self.transport = await self.database.open()
            self._reader = DepthReader(self.transport)
            self._sampler = DepthSampler(self.transport, self.database.depth_retention)
        exact_from: dict[str, int] = {}
        for watch in served:
            if watch.exact_from is not None:
                exact_from[watch.queue_name] = min(
                    exact_from.get(watch.queue_name, watch.exact_from), watch.exact_from
                )
        looks = await asyncio.to_thread(self._read_in_thread, names, exact_from)
        self.reads += 1
        self._hear()
        return looks

    def _read_in_thread(
        self, names: list[str], exact_from: dict[str, int]
    ) -> dict[str, QueueLook | BaseException]:
        assert self.transport is not None and self._reader is not None
        targets: dict[str, Target | BaseException] = {}
        for name in names:
            targets[name] = self._target(name)
        readable = {n: t for n, t in targets.items() if isinstance(t, Target)}
        by_address = {t.address: exact_from[n] for n, t in readable.items() if n in exact_from}
        before = self._reader.statements
        try:
            looks = self._reader.read(readable.values(), by_address)
        finally:
            self.statements += self._reader.statements - before
        result: dict[str, QueueLook | BaseException] = {}
        for name, target in targets.items():
            result[name] = target if isinstance(target, BaseException) else looks[target.address]
        self._sample(looks.values())
        return result

    def _sample(self, looks: Iterable[QueueLook | BaseException]) -> None:
        """What this read saw of each queue into the depth history (at most once a minute a queue): the
        exact count where the read counted, else the estimate, and the error queue's estimate. A queue
        whose read failed has nothing to sample."""
        if self._sampler is None:
            return
        for look in looks:
            if not isinstance(look, QueueLook):
                continue
            counted = look.exact is not None
            self._sampler.sample(look.address, look.exact if counted else look.estimate, counted, look.failed)

    def _target(self, name: str) -> Target | BaseException:
        known = self._targets.get(name)
        if isinstance(known, Target):
            return known
        assert self.transport is not None
        try:
            queue = self.transport.queue(name)
        except TransientDatabaseError as error:
            return error
        except Exception as error:
            self._targets[name] = error
            return error
        target = Target(queue.address, queue.error_queue)
        self._targets[name] = target
        return target

    # ---- push ------------------------------------------------------------------------------------
    def _hear(self) -> None:
        """Listen for sends to the watched queues where the engine pushes; forget the unwatched ones."""
        assert self.transport is not None
        watched = [self._targets.get(w.queue_name) for w in self.watches]
        addresses = {t.address for t in watched if isinstance(t, Target)}
        if not addresses or not WakeUpListener.supported(self.transport, next(iter(addresses))):
            return
        if self._listener is None:
            self._listener = WakeUpListener(
                self.transport, None, f"shared poller {self.database.key}", on_wake=self._push_from_thread
            ).start()
        for address in addresses - self._heard:
            self._listener.listen(address)
        for address in self._heard - addresses:
            self._listener.forget(address)
        self._heard = addresses

    def _push_from_thread(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed
            self._loop.call_soon_threadsafe(self._push)

    def _push(self) -> None:
        self._pushed = True
        self._changed.set()


class SharedPollers:
    """The pollers of each event loop, by database key."""

    def __init__(self) -> None:
        self._pollers: dict[tuple[int, str], SharedPoller] = {}

    def poller(self, key: str) -> SharedPoller | None:
        """The running loop's poller of ``key``, if one runs (for tests and benchmarks)."""
        return self._pollers.get((id(asyncio.get_running_loop()), key))

    @contextlib.asynccontextmanager
    async def watch(
        self, database: SharedDatabase, queue_name: str, *, interval: float, exact_from: int | None = None
    ) -> AsyncIterator[Watch]:
        """Watch ``queue_name`` through the shared poller of ``database`` (started if none runs)."""
        loop = asyncio.get_running_loop()
        slot = (id(loop), database.key)
        poller = self._pollers.get(slot)
        if poller is None or not poller.serves(loop):  # none, or one a closed loop left behind
            poller = self._pollers[slot] = SharedPoller(database)
        watch = Watch(queue_name, interval, exact_from)
        poller.add(watch)
        try:
            yield watch
        finally:
            poller.remove(watch)
            if not poller.watches and self._pollers.get(slot) is poller:
                del self._pollers[slot]
                await asyncio.shield(poller.close())


SHARED_POLLERS = SharedPollers()
