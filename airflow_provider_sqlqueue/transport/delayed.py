"""Delayed delivery: the ``<endpoint>.Delayed`` table and the one mover per endpoint that empties it.

A delayed send is an INSERT into the endpoint's delayed table (Headers, Body, Due, RowVersion) with the
destination in the ``NServiceBus.SqlServer.ForwardDestination`` header. ``Due`` is an absolute UTC time
(``deliver_at``) or the database clock plus a delay, so the machines' clocks never matter. On PostgreSQL a
delayed table of NServiceBus.Transport.PostgreSql's layout (Id, Headers, Body, Due) is recognised by its
columns and used as it is, so that endpoints of both share it; ``create(column_layout=
"postgresql-transport")`` makes one.

The mover deletes due rows in batches (by the database clock, oldest Due first) and inserts them into their
destination queues in the same transaction. Of all the endpoint's instances, one mover runs at a time:

- PostgreSQL and SQL Server elect it with a session-level lock (``pg_try_advisory_lock`` /
  ``sp_getapplock``) held on a dedicated connection; the others stand by and retry the lock once per idle
  delay, and take over when the holder stops or its connection dies;
- SQLite has one writer at a time, so every move (``BEGIN IMMEDIATE``) excludes the others.

Between moves the mover sleeps until the next Due (asked of the database, so skew-free) but never longer
than the idle delay, and a local store of a sooner message wakes it at once. A message is therefore never
moved before its due time and, with a running mover, not later than one idle delay after it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from ..dialects import dialect_for_layout, dialect_for_table
from ..dialects.base import ColumnLayout, Dialect, Row
from ..model.address import QueueAddress
from ..model.errors import (
    ConfigurationError,
    HeaderFormatError,
    InvalidQueueName,
    QueueNotFound,
    TransientDatabaseError,
)
from . import headers as h
from .callers import write_in_callers_transaction
from .headers import decode_headers
from .message import MAX_TIME_TO_BE_RECEIVED, OutgoingMessage
from .queue.provisioning import create_side_table, table_exists_on
from .recoverability import (
    CircuitBreaker,
    CircuitBreakerSettings,
    CriticalErrorCallback,
    FailureInfo,
    failure_headers,
)

if TYPE_CHECKING:
    from .connection import Transport

__all__ = ["DEFAULT_DELAYED_SUFFIX", "DelayedMover", "DelayedStore"]

log = logging.getLogger(__name__)

DEFAULT_DELAYED_SUFFIX = "Delayed"
DEFAULT_MOVE_BATCH = 100
# RowVersions bound to one move statement (SQL Server takes 2,100 parameters, older SQLite builds 999).
MAX_ROWS_PER_MOVE_STATEMENT = 500


def _as_utc(value: Any) -> datetime:
    if isinstance(value, str):  # SQLite's text, or a timestamp as an ODBC driver renders it ('...+00')
        text = value.strip()
        if len(text) > 3 and text[-3] in "+-" and text[-2:].isdigit():
            text += ":00"  # Python 3.10's fromisoformat wants +HH:MM
        value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def _row_key(value: Any) -> Any:
    """A delayed row's name as the mover binds it back: this package's RowVersion (an integer), or the Id
    (a uuid) of a delayed table of the reference's PostgreSQL layout."""
    return value if isinstance(value, uuid.UUID | str) else int(value)


def _padded_chunks(row_versions: list[Any], slots: int, *, pad: bool = True) -> list[list[Any]]:
    """The RowVersions in lists of ``slots``, the last padded by repeating its last value (``IN`` ignores
    the repeats): one statement text per destination, which servers parse and plan once (Babelfish's
    first run of a text costs hundreds of milliseconds)."""
    chunks = [row_versions[start : start + slots] for start in range(0, len(row_versions), slots)]
    if pad and chunks:
        last = chunks[-1]
        last.extend([last[-1]] * (slots - len(last)))
    return chunks


def _due(delay: timedelta | float | None, deliver_at: datetime | None) -> tuple[Any, Any, float]:
    """Check the due-time arguments; return (delay, deliver_at, seconds until due by the local clock)."""
    if (delay is None) == (deliver_at is None):
        raise ConfigurationError("a delayed send takes exactly one of delay and deliver_at")
    if delay is not None:
        if isinstance(delay, int | float) and not isinstance(delay, bool):
            if not math.isfinite(delay):
                raise ConfigurationError(f"delay must be finite, not {delay!r}")
            delay = timedelta(seconds=delay)
        if not isinstance(delay, timedelta):
            raise ConfigurationError(f"delay must be a timedelta or seconds, not {type(delay).__name__}")
        if abs(delay) > MAX_TIME_TO_BE_RECEIVED:
            raise ConfigurationError(f"delay {delay} is longer than the 50-year maximum")
        return delay, None, delay.total_seconds()
    if not isinstance(deliver_at, datetime):
        raise ConfigurationError(f"deliver_at must be a datetime, not {type(deliver_at).__name__}")
    at = _as_utc(deliver_at)  # a naive time is taken as UTC
    return None, at, (at - datetime.now(timezone.utc)).total_seconds()


@dataclass(frozen=True)
class PreparedDelayed:
    """A delayed message ready to store: its outgoing form, the statement's parameters, when it is due."""

    message: OutgoingMessage
    params: tuple[Any, ...]
    due_in: float


class DelayedStore:
    """The delayed-message table of one endpoint (``<endpoint>.Delayed``).

    ``store`` commits on its own; the pump stores on the receive's connection instead (:meth:`store_on`),
    so that a delayed send from a handler commits with the receive.
    """

    def __init__(self, transport: Transport, address: str | QueueAddress) -> None:
        self.transport = transport
        self.address = transport.resolve(address)
        self._listeners: list[Callable[[float], None]] = []
        self._sql_store = self.dialect.sql("store_delayed", self.address)  # the same INSERT in either layout
        self._layout: tuple[Dialect, Dialect] | None = None  # (the engine's dialect, the table's) once read

    @property
    def dialect(self) -> Dialect:
        """The transport's dialect, read at use: a variant is chosen when the first connection opens."""
        return self.transport.dialect

    def __repr__(self) -> str:
        return f"<DelayedStore {self.address} on {self.transport.description}>"

    def table_dialect(self, cursor: Any) -> Dialect:
        """The dialect for this delayed table as its columns say (one NServiceBus.Transport.PostgreSql made
        is read in its own layout): asked once, then remembered; the engine's while there is no table."""
        engine = self.dialect
        known = self._layout
        if known is not None and known[0] is engine:
            return known[1]
        found = dialect_for_table(engine, cursor, self.address)
        if found is None:
            return engine
        self._layout = (engine, found)
        if found is not engine:
            log.info("delayed table %s has the %s layout; using its columns", self.address, found.layout)
        return found

    # ---- provisioning --------------------------------------------------------------------------
    def create(self, column_layout: ColumnLayout = "sqlserver-transport") -> bool:
        """Create the table and its Due index if missing (safe from many processes); True if created.
        ``column_layout="postgresql-transport"``: NServiceBus.Transport.PostgreSql's delayed table (Id,
        Headers, Body, Due), which that transport's own mover reads too (PostgreSQL only)."""
        dialect = dialect_for_layout(self.dialect, column_layout)
        created = create_side_table(
            self.transport,
            self.address,
            dialect.sql("create_delayed_table", self.address),
            f"delayed table {self.address}",
            dialect.delayed_indexes(self.address),
        )
        self._layout = None
        return created

    def create_script(self, column_layout: ColumnLayout = "sqlserver-transport") -> str:
        dialect = dialect_for_layout(self.dialect, column_layout)
        statements = [dialect.sql("create_delayed_table", self.address)]
        statements += [index.create for index in dialect.delayed_indexes(self.address)]
        return "".join(f"{dialect.display_sql(statement)};\n" for statement in statements)

    def exists(self) -> bool:
        return self.transport.queue(self.address, error_queue=None).exists()

    def drop(self) -> None:
        self.transport.queue(self.address, error_queue=None).drop()

    def count(self) -> int:
        with self.transport.connection(self.address) as connection:
            cursor = connection.cursor()
            cursor.execute(self.dialect.sql("count_delayed", self.address), ())
            rows = self.dialect.fetch_rows(cursor)
            connection.commit()
        return int(rows[0][0] or 0) if rows else 0

    # ---- storing -------------------------------------------------------------------------------
    def prepare(
        self,
        destination: str | QueueAddress,
        message: OutgoingMessage | bytes | str,
        headers: Mapping[str, str | None] | None = None,
        *,
        delay: timedelta | float | None = None,
        deliver_at: datetime | None = None,
    ) -> PreparedDelayed:
        outgoing = OutgoingMessage.of(message, headers)
        if outgoing.time_to_be_received is not None:
            raise ConfigurationError(
                "delayed delivery of messages with a time to be received is not supported (as in NServiceBus)"
            )
        size = len(outgoing.body)
        if size > self.transport.max_body_bytes:
            raise ConfigurationError(f"a {size:,}-byte body exceeds this transport's limit; nothing was sent")
        delay, at, due_in = _due(delay, deliver_at)
        stored_headers = dict(outgoing.headers)
        stored_headers[h.FORWARD_DESTINATION] = str(self.transport.canonical(destination))
        params = self.dialect.store_delayed_params(h.encode_headers(stored_headers), outgoing.body, at, delay)
        return PreparedDelayed(outgoing, params, due_in)

    def store_on(self, connection: Any, prepared: PreparedDelayed) -> None:
        """Insert on a caller's connection and transaction (no commit; call :meth:`notify` after it)."""
        connection.cursor().execute(self._sql_store, prepared.params)

    def store(
        self,
        destination: str | QueueAddress,
        message: OutgoingMessage | bytes | str,
        headers: Mapping[str, str | None] | None = None,
        *,
        delay: timedelta | float | None = None,
        deliver_at: datetime | None = None,
        connection: Any = None,
    ) -> uuid.UUID:
        """Store a message for ``destination``, due after ``delay`` (database clock) or at ``deliver_at``.

        With ``connection`` (as for :meth:`TableQueue.send`) the row joins that connection's transaction,
        uncommitted. This process's movers are told at once: committed after it is due, it moves at the
        mover's next look.
        """
        prepared = self.prepare(destination, message, headers, delay=delay, deliver_at=deliver_at)
        if connection is not None:
            store = self._sql_store
            write_in_callers_transaction(
                self.dialect, connection, self.address, lambda cursor: cursor.execute(store, prepared.params)
            )
            self.notify(prepared.due_in)
            return prepared.message.id
        with self.transport.connection(self.address) as connection:
            self.store_on(connection, prepared)
            connection.commit()
        self.notify(prepared.due_in)
        return prepared.message.id

    # ---- waking local movers -------------------------------------------------------------------
    def add_listener(self, listener: Callable[[float], None]) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[float], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def notify(self, due_in: float) -> None:
        """Tell the movers of this process that a message due in ``due_in`` seconds was committed."""
        for listener in list(self._listeners):
            listener(due_in)


@dataclass(frozen=True)
class MoveRound:
    """One move, timed from when the mover held its lock (write lock or election) until its commit."""

    started: float
    ended: float
    moved: int


class DelayedMover:
    """Moves due messages of one delayed table into their destinations; one runs at a time per table.

    :param store: the endpoint's delayed table.
    :param batch_size: rows per move (the reference's 100); a full batch is followed by another at once.
    :param idle_delay: the longest sleep between moves, and how often a standby tries to become the mover.
    :param error_queue: where rows go whose destination is missing or whose headers are unreadable.
    """

    def __init__(
        self,
        store: DelayedStore,
        *,
        batch_size: int = DEFAULT_MOVE_BATCH,
        idle_delay: float = 1.0,
        error_queue: str | None = "error",
        circuit_breaker: CircuitBreakerSettings | None = None,
        on_critical_error: CriticalErrorCallback | None = None,
        name: str | None = None,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigurationError(f"batch_size must be a positive int, not {batch_size!r}")
        if not 0 < idle_delay <= 60:
            raise ConfigurationError(f"idle_delay must be in (0, 60] seconds, not {idle_delay!r}")
        self.store = store
        self.transport = store.transport
        self.address = store.address
        self.batch_size = batch_size
        self.idle_delay = float(idle_delay)
        self.error_queue = None if error_queue is None else self.transport.resolve(error_queue)
        self.name = name or f"mover {self.address}"
        self.breaker = CircuitBreaker(
            f"Failed to move matured delayed messages of {self.address} to their destinations",
            circuit_breaker,
            on_critical_error,
        )
        self._session: Any = None  # the dedicated connection holding (or trying for) the election lock
        self._leader = False
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._plan_lock = threading.Lock()
        self._next_run = math.inf
        self._thread: threading.Thread | None = None
        self.moved = 0
        self.rounds: deque[MoveRound] = deque(maxlen=10_000)
        self.leadership: list[list[float | None]] = []  # [became leader, stopped being leader or None]

    @property
    def dialect(self) -> Dialect:
        """The transport's dialect, read at use: a variant is chosen when the first connection opens."""
        return self.transport.dialect

    @property
    def _lock_statement(self) -> tuple[str, Any] | None:
        return self.dialect.try_lock_delayed_mover(self.address)

    def __repr__(self) -> str:
        return f"<DelayedMover {self.address} leader={self.is_leader}>"

    @property
    def is_leader(self) -> bool:
        """True while this mover holds the election lock (always False on SQLite, which elects per move)."""
        return self._leader

    # ---- lifecycle -----------------------------------------------------------------------------
    def start(self) -> DelayedMover:
        if self._thread is not None:
            raise ConfigurationError("this mover was already started")
        self.store.add_listener(self.notify)
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop moving and give up the election; True when the thread ended within ``timeout``."""
        self.store.remove_listener(self.notify)
        self._stopping.set()
        self._wake.set()
        stopped = True
        if self._thread is not None:
            self._thread.join(timeout)
            stopped = not self._thread.is_alive()
        if stopped:
            self._resign(release=True)
        self.breaker.close()
        return stopped

    def notify(self, due_in: float) -> None:
        """A message due in ``due_in`` seconds was stored here: wake up if that is before the next move."""
        with self._plan_lock:
            if time.monotonic() + due_in < self._next_run:
                self._wake.set()

    # ---- the loop ------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                if self._lock_statement is not None and not self._leader and not self._elect():
                    self._stopping.wait(self.idle_delay)
                    continue
                with self._plan_lock:
                    self._wake.clear()
                    self._next_run = math.inf  # a store during the move wakes the next sleep at once
                moved = self.move_once()
                self.breaker.success()
                if moved >= self.batch_size:
                    continue
                sleep = self._plan(moved)
                if sleep > 0:
                    self._wake.wait(sleep)
            except Exception as error:
                self._resign(release=False)
                delay = self.breaker.failure(error)
                self._stopping.wait(delay)

    def _plan(self, moved: int) -> float:
        """Seconds until the next move: until the next Due by the database clock, at most the idle delay."""
        now, due = self._query_next_due()
        if due is None:
            sleep = self.idle_delay
        else:
            sleep = (_as_utc(due) - _as_utc(now)).total_seconds()
            if sleep <= 0:
                sleep = 0.0 if moved else 0.001  # due but held elsewhere: do not spin
            sleep = min(sleep, self.idle_delay)
        with self._plan_lock:
            self._next_run = time.monotonic() + sleep
        return sleep

    def _query_next_due(self) -> tuple[Any, Any]:
        def query(connection: Any) -> tuple[Any, Any]:
            cursor = connection.cursor()
            cursor.execute(self.store.table_dialect(cursor).sql("next_due_delayed", self.address), ())
            rows = self.dialect.fetch_rows(cursor)
            connection.commit()
            return (rows[0][0], rows[0][1]) if rows else (None, None)

        if self._session is not None:
            return query(self._session)
        with self.transport.connection(self.address) as connection:
            return query(connection)

    # ---- election ------------------------------------------------------------------------------
    def _elect(self) -> bool:
        lock = self._lock_statement
        assert lock is not None
        if self._session is None:
            self._session = self.transport.new_connection()
        try:
            cursor = self._session.cursor()
            cursor.execute(*lock)
            rows = self.dialect.fetch_rows(cursor)
            self._session.commit()
        except Exception as error:
            self._resign(release=False)
            translated = self.dialect.classify(error, self.address)
            raise (translated or error) from error
        granted = bool(rows) and rows[0][0] is not None and int(rows[0][0]) >= 0
        if granted:
            self._leader = True
            self.leadership.append([time.monotonic(), None])
            log.info("%s: elected the mover of %s", self.name, self.address)
        elif self.dialect.refused_lock_spoils_session:
            self._resign(release=False)
        return granted

    def _resign(self, *, release: bool) -> None:
        """Give up the election: release the lock if asked (closing the session releases it anyway)."""
        session, self._session = self._session, None
        if self._leader:
            self._leader = False
            if self.leadership and self.leadership[-1][1] is None:
                self.leadership[-1][1] = time.monotonic()
            log.info("%s: no longer the mover of %s", self.name, self.address)
        if session is None:
            return
        try:
            unlock = self.dialect.unlock_delayed_mover(self.address)
            if release and unlock is not None:
                cursor = session.cursor()
                cursor.execute(*unlock)
                self.dialect.fetch_rows(cursor)
                session.commit()
        except Exception as error:  # the server releases a session's locks when it closes
            log.debug("%s: releasing the mover lock failed: %s", self.name, error)
        finally:
            with contextlib.suppress(Exception):
                session.close()

    # ---- moving --------------------------------------------------------------------------------
    def move_once(self) -> int:
        """Move one batch of due messages in one transaction; return how many were moved.

        On PostgreSQL and SQL Server call it only while elected (``start`` does); on SQLite any caller
        is safe, since the move holds the write lock.
        """
        if self._session is not None:
            try:
                return self._move_on(self._session)
            except Exception as error:
                with contextlib.suppress(Exception):
                    self._session.rollback()
                translated = self.dialect.classify(error, self.address)
                raise (translated or error) from error
        with self.transport.connection(self.address) as connection:
            return self._move_on(connection)

    def _move_on(self, connection: Any) -> int:
        cursor = connection.cursor()
        begin = self.dialect.begin_write()
        if begin:
            cursor.execute(begin, ())
        started = time.monotonic()
        delayed = self.store.table_dialect(cursor)
        cursor.execute(delayed.sql("select_due_delayed", self.address), (self.batch_size,))
        due = delayed.fetch_rows(cursor)
        if due:
            self._move_rows(connection, cursor, due, delayed)
        ended = time.monotonic()  # still holding the lock: rounds of different movers never overlap
        connection.commit()
        self.rounds.append(MoveRound(started, ended, len(due)))
        if due:
            self.moved += len(due)
            log.debug("%s: moved %d due message(s)", self.name, len(due))
        return len(due)

    def _move_rows(self, connection: Any, cursor: Any, due: list[Any], delayed: Dialect) -> None:
        """Move the due rows (RowVersion or Id, Headers) of the delayed table (``delayed``: its dialect) to
        their destinations on the server, grouped by destination; the rows that cannot be delivered go to
        the error queue."""
        by_destination: dict[QueueAddress, list[Any]] = {}
        failed: dict[Any, tuple[str, str]] = {}  # RowVersion or Id: (failed queue, reason)
        resolved: dict[str, QueueAddress] = {}  # a batch names few destinations; resolving one is not free
        for row_version, headers_text in due:
            try:
                destination = decode_headers(headers_text).get(h.FORWARD_DESTINATION)
                if not destination:
                    raise HeaderFormatError(f"the {h.FORWARD_DESTINATION} header is missing")
                address = resolved.get(destination)
                if address is None:
                    address = resolved[destination] = self.transport.resolve(destination)
            except (HeaderFormatError, InvalidQueueName) as error:
                failed[_row_key(row_version)] = (
                    str(self.transport.canonical(self.address)),
                    f"unreadable delayed message: {error}",
                )
                continue
            by_destination.setdefault(address, []).append(_row_key(row_version))
        slots = min(self.batch_size, MAX_ROWS_PER_MOVE_STATEMENT)
        for address, row_versions in by_destination.items():
            queue = self.transport.queue(address)
            if not table_exists_on(cursor, self.dialect, queue.address):
                reason = f"the destination queue {address} does not exist"
                count = len(row_versions)
                log.error("%s: %s; moving %d message(s) to the error queue", self.name, reason, count)
                failed.update(
                    (row_version, (str(self.transport.canonical(address)), reason))
                    for row_version in row_versions
                )
                continue
            destination_dialect = queue.table_dialect(cursor)  # a table of the reference's layout too
            statements_for = functools.partial(
                destination_dialect.move_delayed_rows,
                self.address,
                queue.address,
                with_recoverable=queue.has_recoverable(cursor),
                delayed_layout=delayed.layout,
            )
            for chunk in _padded_chunks(row_versions, slots):
                counts = []
                for statement in statements_for(len(chunk)):
                    cursor.execute(statement, chunk)
                    counts.append(cursor.rowcount)
                if len(set(counts)) > 1:
                    raise TransientDatabaseError(
                        f"another writer changed the rows moved from {self.address} to {address} "
                        f"(row counts {counts}); the move was rolled back"
                    )
            notify = destination_dialect.notify_statement(queue.address)
            if notify:
                cursor.execute(notify, ())
        if failed:
            self._fail_rows(connection, cursor, failed, delayed)

    def _fail_rows(
        self, connection: Any, cursor: Any, failed: dict[Any, tuple[str, str]], delayed: Dialect
    ) -> None:
        rows: list[Any] = []
        for chunk in _padded_chunks(list(failed), MAX_ROWS_PER_MOVE_STATEMENT, pad=False):
            cursor.execute(delayed.sql("select_delayed_rows", self.address, len(chunk)), chunk)
            rows += delayed.fetch_rows(cursor)
            cursor.execute(delayed.sql("delete_delayed_rows", self.address, len(chunk)), chunk)
        for headers_text, body, row_version in rows:
            failed_queue, reason = failed[_row_key(row_version)]
            log.error("%s: %s; moving it to the error queue", self.name, reason)
            try:
                headers = decode_headers(headers_text)
            except HeaderFormatError:
                self._raw_to_error_queue(connection, (headers_text, body))
                continue
            self._to_error_queue(connection, headers, bytes(body or b""), failed_queue, reason)

    def _error_queue(self) -> Any:
        if self.error_queue is None:
            raise QueueNotFound(
                f"a delayed message in {self.address} cannot be delivered and no error queue is configured"
            )
        return self.transport.queue(self.error_queue, error_queue=None)

    def _to_error_queue(
        self, connection: Any, headers: Mapping[str, str | None], body: bytes, failed_queue: str, reason: str
    ) -> None:
        """The message's own headers plus the failure headers, and nothing invented (no MessageId,
        CorrelationId, MessageIntent or TimeSent the sender did not set)."""
        info = FailureInfo(1, QueueNotFound(reason), reason)
        kept = {key: value for key, value in headers.items() if key != h.FORWARD_DESTINATION}
        text = h.encode_headers(failure_headers(kept, info, failed_queue))
        self._raw_to_error_queue(connection, (text, body))

    def _raw_to_error_queue(self, connection: Any, row: Any) -> None:
        """A row into the error queue with this header text as it is (an unreadable one included, as
        poison rows go) and a new Id."""
        queue = self._error_queue()
        headers = row[0]
        if isinstance(headers, bytes | bytearray | memoryview):
            headers = bytes(headers).decode("utf-8", errors="replace")
        raw = Row(self.dialect.row_id(uuid.uuid4()), None, None, False, headers or "", row[1], 0, None)
        cursor = connection.cursor()
        queue.insert_raw(cursor, self.dialect.raw_params(raw))
