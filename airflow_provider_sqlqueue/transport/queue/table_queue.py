"""TableQueue: send, receive, peek, count and purge on a queue table, the same on every engine.

The engine's SQL comes from its dialect; this module only composes statements and transactions, so the
receive semantics below hold everywhere:

- rows are deleted inside an open transaction and handed out in FIFO (RowVersion) order;
- leaving the ``receive`` block commits; an exception rolls back, and the messages are back in the queue
  in their original order;
- expired rows (judged by the database clock) are deleted and never handed out;
- a row whose headers cannot be parsed moves unchanged to the error queue in the same transaction.

Creating, scripting, inspecting and dropping the table are :mod:`.provisioning`'s; reading the deleted rows
is :mod:`.received_rows`'; the receive's batch and its sends are :mod:`.batch`'.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from functools import cached_property
from itertools import chain
from typing import TYPE_CHECKING, Any

from ...dialects import dialect_for_table
from ...dialects.base import Dialect, Finding, Row, TableOptions, TableStorage
from ...model.address import QueueAddress
from ...model.errors import (
    ConfigurationError,
    HeaderFormatError,
    MessageTooLarge,
    QueueNotFound,
    TransientDatabaseError,
)
from ..callers import write_in_callers_transaction
from ..headers import default_headers_text, default_headers_texts, time_sent_now
from ..lease import shared_cursor
from ..message import OutgoingMessage, new_id_texts, new_message_ids_and_texts
from .batch import ReceivedBatch
from .low_water import LowWaterMark
from .provisioning import (
    create_table,
    drop_table,
    first_value,
    inspect_table,
    table_exists,
    table_exists_on,
    table_options,
    table_script,
)
from .received_rows import ROW_VERSION, PoisonRow, display_id
from .receiving import ReceiveBlock
from .send_rows import plain_send_rows
from .statements import LockingStatements, QueueStatements
from .storage import VacuumResult, table_storage, vacuum_table
from .transaction_mode import TransactionMode

if TYPE_CHECKING:
    from ..roles import QueueTransport

__all__ = ["TableQueue"]

# The log lines keep the name they had before the split: airflow_provider_sqlqueue.transport.queue
# (the command line's inspect silences it while it prints the findings itself).
log = logging.getLogger(__package__)

MAX_RECEIVE_BATCH = 100_000
MIRRORED_COLUMN_LIMIT = 255


def _mirror(value: str | None) -> str | None:
    """The legacy CorrelationId/ReplyToAddress columns are varchar(255); longer values, and values no text
    column of every engine can hold (NUL), stay in the headers only."""
    if value is None or len(value) > MIRRORED_COLUMN_LIMIT or not value.isascii() or "\x00" in value:
        return None
    return value


class TableQueue:
    """One queue table. Obtain it from :meth:`Transport.queue`; it is cheap and thread-safe."""

    def __init__(
        self, transport: QueueTransport, address: QueueAddress, error_queue: QueueAddress | None
    ) -> None:
        self.transport = transport
        self.address = address
        self.error_queue = error_queue
        self._statements: QueueStatements | None = None
        self._recoverable: bool | None = None
        self._layout: tuple[Dialect, Dialect] | None = None
        self._row_locks: bool | None = None
        self._bulk_send: bool | None = None
        self._low_water = LowWaterMark()

    def __repr__(self) -> str:
        return f"<TableQueue {self.address} on {self.transport.description}>"

    @property
    def name(self) -> str:
        return str(self.address)

    @property
    def dialect(self) -> Dialect:
        """The dialect of this queue's table: the transport's (read at use: a variant is chosen when the
        first connection opens), or, once :meth:`table_dialect` found the table in another layout of the
        engine, that layout's."""
        engine = self.transport.dialect
        known = self._layout
        return known[1] if known is not None and known[0] is engine else engine

    def table_dialect(self, cursor: Any) -> Dialect:
        """The dialect for this queue's table as its columns say (a table NServiceBus.Transport.PostgreSql
        made is read and written in its own layout): asked once per queue, then remembered."""
        engine = self.transport.dialect
        known = self._layout
        if known is not None and known[0] is engine:
            return known[1]
        found = dialect_for_table(engine, cursor, self.address)
        if found is None:
            return engine  # no table: the statement reports it; decide once the table exists
        self._layout = (engine, found)
        if found is not engine:
            log.info("queue %s has the %s layout; using its columns", self.address, found.layout)
        return found

    @property
    def _sql(self) -> QueueStatements:
        statements = self._statements
        if statements is None or statements.dialect is not self.transport.dialect:
            statements = self._statements = QueueStatements(self)
        return statements

    def resolved_dialect(self) -> Dialect:
        """:meth:`table_dialect` for code that renders its statements before it connects (browsing, the
        error queue's pages): the first time, asks on a pooled connection of its own."""
        engine = self.transport.dialect
        known = self._layout
        if known is not None and known[0] is engine:
            return known[1]
        with self.transport.connection(self.address) as connection:
            found = self.table_dialect(connection.cursor())
            connection.commit()
        return found

    # ---- provisioning (see provisioning.py) ----------------------------------------------------
    def create(
        self, options: TableOptions | None = None, *, add_missing_indexes: bool = False, **overrides: Any
    ) -> bool:
        """Create the table and its indexes if missing; safe to run from many processes at once.

        Returns True when this call created the table. Needs DDL rights (the provisioning role). An
        existing table keeps its indexes as they are: each missing one is logged as a warning with its
        statement, and built only with ``add_missing_indexes=True``, since building it blocks the
        receivers using the table (see the DBA guide).
        """
        options = table_options(options, overrides)
        self._recoverable = self._bulk_send = self._layout = None
        return create_table(self.transport, self.address, options, add_missing_indexes=add_missing_indexes)

    def create_script(self, options: TableOptions | None = None, **overrides: Any) -> str:
        """The DDL that :meth:`create` runs for a new table, as a script a DBA can review and run."""
        return table_script(self.dialect, self.address, table_options(options, overrides))

    def exists(self) -> bool:
        return table_exists(self.transport, self.address)

    def drop(self) -> None:
        """Drop the table and every message in it. Needs DDL rights."""
        drop_table(self.transport, self.address)

    def inspect(self, options: TableOptions | None = None, **overrides: Any) -> list[Finding]:
        """Check indexes and column types; log a warning with the fixing statement for each finding."""
        return inspect_table(self.transport, self.address, table_options(options, overrides))

    def storage(self) -> TableStorage:
        """What the table takes on disk and what deleted rows left in it, with the maintenance that calls
        for (PostgreSQL; elsewhere a note saying nothing is to be scheduled). See storage.py."""
        return table_storage(self.transport, self.address)

    def vacuum(self) -> VacuumResult:
        """A plain VACUUM of the table on PostgreSQL (needs its owner); elsewhere nothing. See storage.py."""
        return vacuum_table(self.transport, self.address)

    # ---- sending -------------------------------------------------------------------------------
    def _row_params(self, message: OutgoingMessage) -> tuple[Any, ...]:
        size = len(message.body)
        if size > self.transport.max_body_bytes:
            raise MessageTooLarge(
                f"message {message.id} has a {size:,}-byte body; {self.dialect.display_name} queues on this "
                f"transport take at most {self.transport.max_body_bytes:,} bytes. Nothing was sent"
            )
        return self.dialect.send_params(
            self.dialect.row_id(message.id),
            _mirror(message.correlation_id),
            _mirror(message.reply_to_address),
            message.time_to_be_received,
            message.encoded_headers(),
            message.body,
        )

    @cached_property
    def _ids_bind_as_text(self) -> bool:
        """Whether the dialect binds an Id as its text, so the text made for the headers serves it too."""
        sample = uuid.UUID(int=0x0123456789ABCDEF0123456789ABCDEF)
        return self.dialect.row_id(sample) == str(sample)

    def _plain_rows(self, messages: Iterable[OutgoingMessage | bytes | str]) -> tuple[list[Any], list[Any]]:
        """Send parameters and Ids of messages; bare bodies take a short path.

        A bare body (bytes or str) gets what :class:`OutgoingMessage` would give it (a random Id, the five
        standard headers with one TimeSent for the call, the Id mirrored into CorrelationId) without
        building the object: per message that was most of a batch send's client time. The Ids and their
        texts, and the conversations' texts, are made for the whole call at once.
        """
        items = messages if isinstance(messages, list | tuple) else list(messages)
        count = len(items)
        if not count:
            return [], []
        ids, texts = new_message_ids_and_texts(count)
        conversations = new_id_texts(count)
        time_sent = time_sent_now()
        dialect = self.dialect
        send_params, row_id = dialect.send_params, dialect.row_id
        keys: list[Any] = texts if self._ids_bind_as_text else [row_id(value) for value in ids]
        limit = self.transport.max_body_bytes
        if all(type(item) is bytes for item in items) and max(map(len, items)) <= limit:  # type: ignore[arg-type]
            headers = default_headers_texts(texts, time_sent, conversations)
            return plain_send_rows(dialect, keys, texts, headers, items), ids  # type: ignore[arg-type]
        rows = []
        for index, item in enumerate(items):
            kind = type(item)
            if kind is bytes or kind is str:
                body = item if kind is bytes else item.encode("utf-8")  # type: ignore[union-attr]
                if len(body) > limit:
                    self._row_params(OutgoingMessage(body, id=ids[index]))  # raises MessageTooLarge
                text = texts[index]
                headers = default_headers_text(text, time_sent, conversations[index])
                rows.append(send_params(keys[index], text, None, None, headers, body))
            else:
                outgoing = OutgoingMessage.of(item)  # type: ignore[arg-type]
                ids[index] = outgoing.id
                rows.append(self._row_params(outgoing))
        return rows, ids

    def send(
        self,
        message: OutgoingMessage | bytes | str,
        headers: Mapping[str, str | None] | None = None,
        time_to_be_received: timedelta | None = None,
        *,
        connection: Any = None,
    ) -> uuid.UUID:
        """Send one message (one INSERT, one commit); return its Id.

        With ``connection`` (a SQLAlchemy ``Connection`` or a DB-API connection of this transport's driver,
        on the same database) the INSERT runs in that connection's transaction and nothing is committed:
        the message is sent when the caller commits, and not at all if the caller rolls back.
        """
        if connection is not None:
            return self._send_in(connection, [OutgoingMessage.of(message, headers, time_to_be_received)])[0]
        if headers or time_to_be_received:
            outgoing = OutgoingMessage.of(message, headers, time_to_be_received)
            params, message_id = self._row_params(outgoing), outgoing.id
        else:
            rows, ids = self._plain_rows((message,))
            params, message_id = rows[0], ids[0]
        with self.transport.connection(self.address) as connection:
            cursor = shared_cursor(connection)
            with_recoverable = self.has_recoverable(cursor)
            with self._recoverable_guard():
                cursor.execute(self._sql.send_for(with_recoverable), params)
            connection.commit()
        return message_id

    def send_batch(
        self, messages: Iterable[OutgoingMessage | bytes | str], *, connection: Any = None
    ) -> list[uuid.UUID]:
        """Send many messages atomically with multi-row INSERTs in one transaction; return their Ids.

        With ``connection`` they are written in that connection's transaction, uncommitted (see
        :meth:`send`)."""
        if connection is not None:
            return self._send_in(connection, messages)
        with self.transport.connection(self.address) as connection:
            return self.send_on(connection, messages, commit=True)

    def _send_in(self, connection: Any, messages: Iterable[OutgoingMessage | bytes | str]) -> list[uuid.UUID]:
        """Write ``messages`` in a caller's transaction (see callers.py), without committing."""
        rows, ids = self._plain_rows(messages)
        if rows:
            write_in_callers_transaction(
                self.dialect, connection, self.address, lambda cursor: self._write_rows(cursor, rows)
            )
        return ids

    def send_on(
        self, connection: Any, messages: Iterable[OutgoingMessage | bytes | str], *, commit: bool
    ) -> list[uuid.UUID]:
        """Write ``messages`` in the open transaction of ``connection``, a loan of this transport's own pool
        (a receive's, a Spark job's), committing only with ``commit``; unlike ``send_batch(connection=...)``
        it neither checks nor wraps the connection, so a receive's sends cost what the queue's own do."""
        rows, ids = self._plain_rows(messages)
        if not rows:
            return []
        cursor = shared_cursor(connection)
        if commit:
            begin = self.dialect.begin_write()
            if begin and len(rows) > self.dialect.send_batch_rows:
                cursor.execute(begin, ())
        self._write_rows(cursor, rows)
        if commit:
            connection.commit()
        return ids

    def _write_rows(self, cursor: Any, rows: list[Any]) -> None:
        """The INSERTs of a send (bulk where the dialect can), in the cursor's transaction."""
        with_recoverable = self.has_recoverable(cursor)
        chunk = self.dialect.send_batch_rows
        with self._recoverable_guard():
            bulk = len(rows) > 1 and self._bulk_send_fits(cursor)
            if bulk and self.dialect.bulk_send(cursor, self.address, rows, with_recoverable):
                rows = []  # all written
            for start in range(0, len(rows), chunk):
                part = rows[start : start + chunk]
                if len(part) == 1:
                    cursor.execute(self._sql.send_for(with_recoverable), part[0])
                else:
                    statement = self._sql.send_batch(len(part), with_recoverable)
                    cursor.execute(statement, list(chain.from_iterable(part)))

    def has_recoverable(self, cursor: Any) -> bool:
        """Whether the table has the legacy Recoverable column: asked once per queue, then remembered.

        NServiceBus tables lost the column in later versions; sends leave it out where it is gone.
        """
        self.table_dialect(cursor)
        known = self._recoverable
        if known is not None:
            return known
        cursor.execute(*self.dialect.column_exists(self.address, "Recoverable"))
        if first_value(cursor, self.dialect) is not None:
            self._recoverable = True
        elif table_exists_on(cursor, self.dialect, self.address):
            self._recoverable = False
            log.info("queue %s has no Recoverable column; sending without it", self.address)
        else:
            return True  # no table: the send reports it; decide once the table exists
        return self._recoverable

    def _bulk_send_fits(self, cursor: Any) -> bool:
        """Whether the dialect's bulk path can write this table: asked once per queue, then remembered."""
        known = self._bulk_send
        if known is not None:
            return known
        check = self.dialect.bulk_send_check(self.address)
        if check is None:
            self._bulk_send = False
            return False
        cursor.execute(*check)
        fits = first_value(cursor, self.dialect)
        if not fits and not table_exists_on(cursor, self.dialect, self.address):
            return False  # no table: the send reports it; decide once the table exists
        self._bulk_send = bool(fits)
        return self._bulk_send

    def receive_statement(self, cursor: Any) -> str:
        """The receive's ``DELETE ... RETURNING`` text (one parameter: how many) for this role.

        For code that builds on the receive inside its own statement, as the Spark drain's server-side
        move does; ``cursor`` answers the one-time privilege question.
        """
        return self._locking(cursor).receive_batch

    def _locking(self, cursor: Any) -> LockingStatements:
        """The statements of this role's locking, rendered for the table's layout (both known from here)."""
        row_locks = self._uses_row_locks(cursor)
        return self._sql.locking(row_locks)

    def uses_row_locks(self, cursor: Any) -> bool:
        """Whether receivers of this role take row locks (else advisory locks); see :meth:`pick` for why
        code that builds on :meth:`receive_statement` tops up a short pick when they do not."""
        return self._uses_row_locks(cursor)

    def _uses_row_locks(self, cursor: Any) -> bool:
        """Whether receivers here take row locks: asked once per queue, then remembered.

        PostgreSQL grants row locks only to roles with an UPDATE privilege on the table; a role holding
        just SELECT, INSERT and DELETE competes through advisory locks instead (see the dialect).
        """
        self.table_dialect(cursor)
        known = self._row_locks
        if known is not None:
            return known
        mode = self.transport.lock_mode
        probe = self.dialect.row_lock_probe(self.address) if mode == "auto" else None
        if probe is None:
            self._row_locks = mode != "advisory"
            return self._row_locks
        cursor.execute(*probe)
        allowed = first_value(cursor, self.dialect)
        if allowed is None:
            return True  # no table: the statement reports it; decide once the table exists
        self._row_locks = bool(allowed)
        if not self._row_locks:
            log.info("this role may not lock rows of %s; receivers use advisory locks", self.address)
        return self._row_locks

    def insert_raw(self, cursor: Any, params: Sequence[Any]) -> None:
        """Write one row as it is, in the cursor's transaction: ``params`` are its Id, CorrelationId,
        ReplyToAddress, header text and body, none of them rewritten (a retried failed message keeps its Id,
        a poison row its unreadable headers). A legacy Recoverable column is filled as sends fill it."""
        with_recoverable = self.has_recoverable(cursor)
        with self._recoverable_guard():
            cursor.execute(self._sql.insert_raw_for(with_recoverable), tuple(params))

    @contextmanager
    def _recoverable_guard(self) -> Iterator[None]:
        """If the Recoverable column changed since it was checked, forget the answer and say so.

        Any failed send also forgets whether the bulk path fits: the table may have been replaced."""
        try:
            yield
        except Exception as error:
            self._bulk_send = None
            if not self.dialect.is_recoverable_column_error(error):
                raise
            self._recoverable = None
            raise TransientDatabaseError(
                f"the Recoverable column of {self.address} changed since it was checked; nothing was sent, "
                "send again"
            ) from error

    # ---- receiving -----------------------------------------------------------------------------
    def receive(
        self,
        max_messages: int = 1,
        *,
        transaction_mode: TransactionMode | str | None = None,
    ) -> AbstractContextManager[ReceivedBatch]:
        """Receive up to ``max_messages`` of the oldest messages no other receiver holds:
        ``with queue.receive(...) as batch:``.

        The batch may be empty. See :class:`TransactionMode` for when the DELETE commits.
        """
        if isinstance(max_messages, bool) or not isinstance(max_messages, int):
            raise ConfigurationError(f"max_messages must be an int, not {type(max_messages).__name__}")
        if not 1 <= max_messages <= MAX_RECEIVE_BATCH:
            raise ConfigurationError(
                f"max_messages must be between 1 and {MAX_RECEIVE_BATCH:,}, not {max_messages}"
            )
        try:
            if not transaction_mode:
                mode = TransactionMode.SENDS_ATOMIC_WITH_RECEIVE
            elif type(transaction_mode) is TransactionMode:
                mode = transaction_mode
            else:
                mode = TransactionMode(transaction_mode)
        except ValueError:
            modes = ", ".join(m.value for m in TransactionMode)
            raise ConfigurationError(
                f"transaction_mode must be one of {modes}, not {transaction_mode!r}"
            ) from None
        return ReceiveBlock(self, max_messages, mode)

    @property
    def low_water(self) -> LowWaterMark:
        """Where this queue's receives start picking (low_water.py); a receive that rolls back resets it."""
        return self._low_water

    def pick(self, cursor: Any, max_messages: int) -> list[Any]:
        """The receive's DELETE, after the low-water mark where the engine needs one (low_water.py), in the
        cursor's open transaction: the rows as the driver returned them (the receive block decodes them).

        A pick after the mark that comes back short is topped up from the start of the queue in the same
        transaction, so a message left behind the mark never makes a receive look empty. So is a short pick
        through advisory locks, once: its statement reads the queue as it was when the statement began, so
        it can lock rows another receiver deleted and committed meanwhile, and find them gone; the next
        statement reads the queue anew."""
        row_locks = self._uses_row_locks(cursor)  # knows the table's layout from here on
        sql = self._sql
        after_mark = sql.receive_batch_after if row_locks else None
        statement = sql.locking(row_locks).receive_batch
        if after_mark is None:  # no mark on this engine (or role): nothing to remember
            raw = self.dialect.receive_rows(cursor, self.address, statement, max_messages)
            if not row_locks and len(raw) < max_messages:
                raw += self.dialect.receive_rows(cursor, self.address, statement, max_messages - len(raw))
            return raw
        after = self._low_water.position()
        if after is None:
            raw = self.dialect.receive_rows(cursor, self.address, statement, max_messages)
            self._low_water.taken(max(map(ROW_VERSION, raw)) if raw else None, max_messages, len(raw))
            return raw
        raw = self.dialect.receive_rows(cursor, self.address, after_mark, max_messages, after)
        self._low_water.taken(max(map(ROW_VERSION, raw)) if raw else None, max_messages, len(raw))
        if len(raw) < max_messages:
            raw += self.dialect.receive_rows(cursor, self.address, statement, max_messages - len(raw))
        return raw

    def rollback_quietly(self, connection: Any) -> None:
        """Roll back a receive that failed in its block; the block's own error stays the one raised."""
        try:
            self.dialect.rollback(connection)
        except Exception as error:
            log.warning(
                "rollback of a receive on %s failed (%s); the server rolls back when the connection "
                "closes, so the messages stay queued",
                self.address,
                error,
            )
            connection.invalidate()

    def move_poison(self, cursor: Any, poison: list[PoisonRow]) -> None:
        """Move rows whose headers cannot be read, unchanged, to the error queue in the receive's transaction;
        without an error queue (or when it is missing) raise, so such a row stays queued rather than lost."""
        for item in poison:
            if self.error_queue is None:
                raise HeaderFormatError(
                    f"message {display_id(item.row.id)} in {self.address} "
                    f"(RowVersion {item.row.row_version}) cannot be read: {item.reason}; "
                    "no error queue is configured, so it was left in the queue"
                )
            log.error(
                "Error receiving message %s from %s: probable message metadata corruption (%s). "
                "Moving it to error queue %s.",
                display_id(item.row.id),
                self.address,
                item.reason,
                self.error_queue,
            )
            row = item.row
            headers = row.headers
            if isinstance(headers, bytes | bytearray | memoryview):
                headers = bytes(headers).decode("utf-8", errors="replace")
            raw = Row(
                row.id,
                row.correlation_id,
                row.reply_to_address,
                row.expired,
                "" if headers is None else headers,
                row.body,
                row.row_version,
                row.expires,
            )
            error_queue = self.transport.queue(self.error_queue, error_queue=None)
            try:
                error_queue.insert_raw(cursor, self.dialect.raw_params(raw))
            except Exception as error:
                if isinstance(self.dialect.classify(error, self.error_queue), QueueNotFound):
                    raise QueueNotFound(
                        f"error queue {self.error_queue} does not exist, so the unreadable message "
                        f"{display_id(row.id)} stays in {self.address} and blocks its head; "
                        "create the error queue"
                    ) from error
                raise

    # ---- depth and maintenance -----------------------------------------------------------------
    def _scalar(self, statement: Callable[[LockingStatements], str]) -> int:
        with self.transport.connection(self.address) as connection:
            cursor = shared_cursor(connection)
            cursor.execute(statement(self._locking(cursor)), ())
            rows = self.dialect.fetch_rows(cursor)
            connection.commit()
        return int(rows[0][0] or 0) if rows else 0

    def peek_estimate(self) -> int:
        """An upper bound of the messages waiting (max - min + 1 of RowVersion over unlocked rows).

        Its cost does not grow with the queue's length; gaps and expired rows make it overestimate.
        """
        return self._scalar(lambda locking: locking.peek_estimate)

    def peek_bounds(self) -> tuple[int | None, int | None]:
        """Oldest and newest RowVersion of the unlocked rows, ``(None, None)`` when there are none.

        ``newest - oldest + 1`` is the peek estimate; the newest alone tells whether messages arrived
        since an earlier look (event triggers keep it as a watermark).
        """
        with self.transport.connection(self.address) as connection:
            cursor = shared_cursor(connection)
            cursor.execute(self._locking(cursor).peek_bounds, ())
            rows = self.dialect.fetch_rows(cursor)
            connection.commit()
        oldest, newest = rows[0] if rows else (None, None)
        return (None if oldest is None else int(oldest), None if newest is None else int(newest))

    def count(self) -> int:
        """The exact number of unexpired messages; scans the table, so prefer peek_estimate for polling."""
        return self._scalar(lambda _locking: self._sql.count_exact)

    def purge_expired(
        self,
        batch_size: int = 10_000,
        *,
        max_batches: int | None = None,
        max_seconds: float | None = None,
    ) -> int:
        """Delete expired messages in batches (each its own transaction) while batches come back full.

        Rows held by receivers are skipped, so it runs safely beside them. Returns the number deleted.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigurationError(f"batch_size must be a positive int, not {batch_size!r}")
        started = time.monotonic()
        total = batches = 0
        while True:
            deleted = self.purge_expired_batch(batch_size)
            total += deleted
            batches += 1
            log.debug("purged %d expired message(s) from %s", deleted, self.address)
            if deleted < batch_size:
                break
            if max_batches is not None and batches >= max_batches:
                break
            if max_seconds is not None and time.monotonic() - started >= max_seconds:
                break
        if total:
            log.info("purged %d expired message(s) from %s in %d batch(es)", total, self.address, batches)
        return total

    def purge_expired_batch(self, batch_size: int) -> int:
        """Delete up to ``batch_size`` expired rows that no receiver holds, in a transaction of its own."""
        with self.transport.connection(self.address) as connection:
            cursor = connection.cursor()
            begin = self.dialect.begin_write()
            if begin:
                cursor.execute(begin, ())
            statement = self._locking(cursor).purge_expired_batch
            cursor.execute(statement, (batch_size,))
            if self.dialect.purge_returns_count():
                rows = self.dialect.fetch_rows(cursor)
                deleted = int(rows[0][0]) if rows else 0
            else:
                deleted = max(cursor.rowcount, 0)
            connection.commit()
        return deleted
