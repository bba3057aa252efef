"""A queue table: create, send, receive, peek, count and purge, the same on every engine.

The engine's SQL comes from its dialect; this module only composes statements and transactions, so the
receive semantics below hold everywhere:

- rows are deleted inside an open transaction and handed out in FIFO (RowVersion) order;
- leaving the ``receive`` block commits; an exception rolls back, and the messages are back in the queue
  in their original order;
- expired rows (judged by the database clock) are deleted and never handed out;
- a row whose headers cannot be parsed moves unchanged to the error queue in the same transaction.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from enum import Enum
from functools import cached_property
from itertools import chain
from operator import itemgetter
from typing import TYPE_CHECKING, Any, overload

from ..dialects.base import Dialect, Finding, Row, TableOptions
from ..model.address import QueueAddress
from ..model.errors import (
    ConfigurationError,
    HeaderFormatError,
    MessageTooLarge,
    QueueNotFound,
    SqlQueueError,
    TransientDatabaseError,
)
from .headers import decode_headers, default_headers_text, time_sent_now
from .lease import shared_cursor
from .message import OutgoingMessage, ReceivedMessage, new_message_ids, received_message, uuid_from_int

if TYPE_CHECKING:
    from .connection import Transport

__all__ = ["Finding", "ReceivedBatch", "TableOptions", "TableQueue", "TransactionMode"]

log = logging.getLogger(__name__)

MAX_RECEIVE_BATCH = 100_000
MIRRORED_COLUMN_LIMIT = 255


class TransactionMode(str, Enum):
    """How a receive's DELETE relates to the work done with its messages (the reference's modes).

    - ``sends_atomic_with_receive`` (default): the DELETE commits when the block ends; sends made through
      the batch run on the same connection and transaction, so they commit or roll back with it.
    - ``receive_only``: the DELETE commits when the block ends; sends commit on their own at once.
    - ``none``: the DELETE commits before the block runs; a failure in the block loses the messages.
    """

    NONE = "none"
    RECEIVE_ONLY = "receive_only"
    SENDS_ATOMIC_WITH_RECEIVE = "sends_atomic_with_receive"


def as_utc(value: Any) -> datetime | None:
    """A time as drivers return it (aware, naive UTC or SQLite text) as an aware UTC datetime."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime):
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)
    return None


def begin_creation(cursor: Any, dialect: Any, address: QueueAddress) -> None:
    """Start a write transaction and take the lock that serialises creators of the same table."""
    begin = dialect.begin_write()
    if begin:
        cursor.execute(begin, ())
    opening = dialect.open_transaction()
    if opening:
        cursor.execute(opening)  # no parameters: a plain batch, never a procedure call
    catalog = None
    query = None if address.catalog else dialect.current_catalog()
    if query:
        cursor.execute(query, ())
        rows = dialect.fetch_rows(cursor)
        catalog = rows[0][0] if rows else None
    lock = dialect.lock_for_create(address, catalog)
    if lock is not None:
        cursor.execute(*lock)
        result = dialect.fetch_rows(cursor)
        if result and isinstance(result[0][0], int) and result[0][0] < 0:
            raise TransientDatabaseError(f"could not take the creation lock for {address}")


def _display_id(value: Any) -> str:
    """Ids as one canonical text in logs and errors, whatever case or type the driver returns."""
    try:
        return str(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
    except ValueError:
        return repr(value)


_ROW_VERSION = itemgetter(6)  # a driver row's RowVersion, in Row's column order


def _parse_id(value: Any) -> uuid.UUID:
    """An Id as a UUID, whether the driver returns one or its text (SQLite, ODBC); ValueError if neither."""
    if type(value) is str and len(value) == 36:
        digits = value.replace("-", "")
        if len(digits) == 32:
            try:
                return uuid_from_int(int(digits, 16))  # what uuid.UUID(value) does, without its checks
            except ValueError:
                pass
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _flag(value: Any) -> bool:
    """A boolean column as drivers return it: bool, 0/1, or text such as psqlODBC's '0' / '1'."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "t", "true", "y", "yes")
    return bool(value)


def _mirror(value: str | None) -> str | None:
    """The legacy CorrelationId/ReplyToAddress columns are varchar(255); longer values, and values no text
    column of every engine can hold (NUL), stay in the headers only."""
    if value is None or len(value) > MIRRORED_COLUMN_LIMIT or not value.isascii() or "\x00" in value:
        return None
    return value


@dataclass(frozen=True)
class _Poison:
    row: Row
    reason: str


@dataclass(frozen=True)
class _Locking:
    """The statements whose text depends on how receivers lock rows."""

    receive_batch: str
    peek_estimate: str
    peek_bounds: str
    purge_expired_batch: str


class _Statements:
    """A queue's statements, rendered once by its dialect."""

    def __init__(self, queue: TableQueue) -> None:
        dialect, address = queue.dialect, queue.address
        self.dialect = dialect
        self.send = dialect.send(address)
        self.send_batch_full = dialect.send_batch(address, dialect.send_batch_rows)
        self.insert_raw = dialect.insert_raw(address)
        self.receive_batch = dialect.receive_batch(address)
        self.peek_estimate = dialect.peek_estimate(address)
        self.peek_bounds = dialect.peek_bounds(address)
        self.count_exact = dialect.count_exact(address)
        self.purge_expired_batch = dialect.purge_expired_batch(address)
        self._send_batch_sized: dict[tuple[int, bool], str] = {}
        self._without_recoverable: dict[str, str] = {}
        self._queue = queue

    @cached_property
    def _with_row_locks(self) -> _Locking:
        return _Locking(self.receive_batch, self.peek_estimate, self.peek_bounds, self.purge_expired_batch)

    @cached_property
    def _without_row_locks(self) -> _Locking:
        dialect, address = self._queue.dialect, self._queue.address
        return _Locking(
            dialect.receive_batch_without_row_locks(address),
            dialect.peek_estimate_without_row_locks(address),
            dialect.peek_bounds_without_row_locks(address),
            dialect.purge_expired_batch_without_row_locks(address),
        )

    def locking(self, row_locks: bool) -> _Locking:
        return self._with_row_locks if row_locks else self._without_row_locks

    def send_for(self, with_recoverable: bool) -> str:
        if with_recoverable:
            return self.send
        return self._legacy("send", lambda: self._queue.dialect.send(self._queue.address, False))

    def insert_raw_for(self, with_recoverable: bool) -> str:
        if with_recoverable:
            return self.insert_raw
        return self._legacy("insert_raw", lambda: self._queue.dialect.insert_raw(self._queue.address, False))

    def _legacy(self, name: str, render: Any) -> str:
        statement = self._without_recoverable.get(name)
        if statement is None:
            statement = self._without_recoverable[name] = render()
        return statement

    def send_batch(self, rows: int, with_recoverable: bool = True) -> str:
        if with_recoverable and rows == self._queue.dialect.send_batch_rows:
            return self.send_batch_full
        statement = self._send_batch_sized.get((rows, with_recoverable))
        if statement is None:
            statement = self._queue.dialect.send_batch(self._queue.address, rows, with_recoverable)
            if len(self._send_batch_sized) < 64:
                self._send_batch_sized[(rows, with_recoverable)] = statement
        return statement


class ReceivedBatch(Sequence[ReceivedMessage]):
    """The messages of one receive, in FIFO order, plus sends that follow the batch's transaction mode."""

    def __init__(
        self,
        queue: TableQueue,
        connection: Any,
        messages: list[ReceivedMessage],
        expired: int,
        poisoned: int,
        mode: TransactionMode,
    ) -> None:
        self.queue = queue
        self.messages = messages
        self.expired = expired
        self.poisoned = poisoned
        self.transaction_mode = mode
        self._connection = connection

    @overload
    def __getitem__(self, index: int) -> ReceivedMessage: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[ReceivedMessage]: ...
    def __getitem__(self, index: int | slice) -> ReceivedMessage | Sequence[ReceivedMessage]:
        return self.messages[index]

    def __len__(self) -> int:
        return len(self.messages)

    def __iter__(self) -> Iterator[ReceivedMessage]:
        return iter(self.messages)

    @property
    def connection(self) -> Any:
        """The DB-API connection that holds this receive's transaction.

        Statements run on it commit or roll back together with the receive's DELETE (in transaction
        modes other than ``none``), e.g. writing results to a table of the same database. Never commit,
        roll back or close it yourself: the ``receive`` block does.
        """
        return self._connection

    def __repr__(self) -> str:
        return (
            f"<ReceivedBatch {self.queue.address} messages={len(self.messages)} expired={self.expired} "
            f"poisoned={self.poisoned} mode={self.transaction_mode.value}>"
        )

    def send(
        self,
        destination: str | QueueAddress | TableQueue,
        message: OutgoingMessage | bytes | str,
        headers: Mapping[str, str | None] | None = None,
        time_to_be_received: timedelta | None = None,
    ) -> uuid.UUID:
        """Send to ``destination``; atomic with this receive in ``sends_atomic_with_receive`` mode."""
        return self.send_batch(destination, [OutgoingMessage.of(message, headers, time_to_be_received)])[0]

    def send_batch(
        self,
        destination: str | QueueAddress | TableQueue,
        messages: Iterable[OutgoingMessage | bytes | str],
    ) -> list[uuid.UUID]:
        target = (
            destination if isinstance(destination, TableQueue) else self.queue.transport.queue(destination)
        )
        if self.transaction_mode is TransactionMode.SENDS_ATOMIC_WITH_RECEIVE:
            return target._send_on(self._connection, messages, commit=False)
        if self.transaction_mode is TransactionMode.RECEIVE_ONLY and target.dialect.single_writer:
            raise ConfigurationError(
                f"{target.dialect.display_name} has a single writer: a send that commits on its own would "
                "wait for this receive's own write lock. Use transaction_mode='sends_atomic_with_receive'"
            )
        return target.send_batch(messages)

    def send_in_receive_transaction(
        self,
        destination: str | QueueAddress | TableQueue,
        messages: Iterable[OutgoingMessage | bytes | str],
    ) -> list[uuid.UUID]:
        """Send on this receive's connection and transaction in every mode (the pump's moves to the error
        queue, audit copies and forwards: they must commit or roll back with the receive)."""
        target = (
            destination if isinstance(destination, TableQueue) else self.queue.transport.queue(destination)
        )
        return target._send_on(self._connection, messages, commit=False)


class TableQueue:
    """One queue table. Obtain it from :meth:`Transport.queue`; it is cheap and thread-safe."""

    def __init__(self, transport: Transport, address: QueueAddress, error_queue: QueueAddress | None) -> None:
        self.transport = transport
        self.address = address
        self.error_queue = error_queue
        self._statements: _Statements | None = None
        self._recoverable: bool | None = None
        self._row_locks: bool | None = None
        self._bulk_send: bool | None = None

    def __repr__(self) -> str:
        return f"<TableQueue {self.address} on {self.transport.description}>"

    @property
    def name(self) -> str:
        return str(self.address)

    @property
    def dialect(self) -> Dialect:
        """The transport's dialect, read at use: a variant is chosen when the first connection opens."""
        return self.transport.dialect

    @property
    def _sql(self) -> _Statements:
        statements = self._statements
        if statements is None or statements.dialect is not self.transport.dialect:
            statements = self._statements = _Statements(self)
        return statements

    # ---- provisioning --------------------------------------------------------------------------
    @staticmethod
    def _options(options: TableOptions | None, overrides: dict[str, Any]) -> TableOptions:
        if options is not None and overrides:
            raise ConfigurationError("pass either a TableOptions or its fields as keywords, not both")
        try:
            return options or TableOptions(**overrides)
        except (TypeError, ValueError) as error:
            raise ConfigurationError(str(error)) from None

    def create(self, options: TableOptions | None = None, **overrides: Any) -> bool:
        """Create the table and its indexes if missing; safe to run from many processes at once.

        Returns True when this call created the table. Needs DDL rights (the provisioning role).
        """
        options = self._options(options, overrides)
        for attempt in (1, 2):
            try:
                return self._create_once(options)
            except Exception as error:
                cause = error.__cause__ or error
                if attempt == 1 and self.dialect.is_already_exists(cause):
                    log.info("queue %s was created concurrently; checking again", self.address)
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _create_once(self, options: TableOptions) -> bool:
        self._recoverable = self._bulk_send = None
        dialect, address = self.dialect, self.address
        with self.transport.connection(address) as connection:
            cursor = connection.cursor()
            begin_creation(cursor, dialect, address)
            created = not self._exists_on(cursor)
            if created:
                cursor.execute(dialect.create_table(address, options), ())
            for index in dialect.indexes(address, options):
                cursor.execute(*dialect.index_exists(address, index.name))
                if not self._first_value(cursor):
                    cursor.execute(index.create, ())
            if options.body_string and not created:
                cursor.execute(*dialect.column_exists(address, "BodyString"))
                if not self._first_value(cursor):
                    cursor.execute(dialect.add_body_string(address), ())
            connection.commit()
        if created:
            log.info("created queue %s", address)
        return created

    def create_script(self, options: TableOptions | None = None, **overrides: Any) -> str:
        """The DDL that :meth:`create` runs for a new table, as a script a DBA can review and run."""
        options = self._options(options, overrides)
        statements = [self.dialect.create_table(self.address, options)]
        statements += [index.create for index in self.dialect.indexes(self.address, options)]
        return "".join(f"{self.dialect.display_sql(statement)};\n" for statement in statements)

    def _first_value(self, cursor: Any) -> Any:
        rows = self.dialect.fetch_rows(cursor)
        return rows[0][0] if rows else None

    def _exists_on(self, cursor: Any) -> bool:
        cursor.execute(*self.dialect.table_exists(self.address))
        return self._first_value(cursor) is not None

    def exists(self) -> bool:
        with self.transport.connection(self.address) as connection:
            found = self._exists_on(connection.cursor())
            connection.commit()
            return found

    def drop(self) -> None:
        """Drop the table and every message in it. Needs DDL rights."""
        with self.transport.connection(self.address) as connection:
            connection.cursor().execute(self.dialect.drop_table(self.address), ())
            connection.commit()
        log.info("dropped queue %s", self.address)

    def inspect(self, options: TableOptions | None = None, **overrides: Any) -> list[Finding]:
        """Check indexes and column types; log a warning with the fixing statement for each finding."""
        options = self._options(options, overrides)
        with self.transport.connection(self.address) as connection:
            cursor = connection.cursor()
            if not self._exists_on(cursor):
                raise QueueNotFound(f"queue {self.address} does not exist")
            findings = [
                Finding(f.code, f.message, self.dialect.display_sql(f.fix))
                for f in self.dialect.inspect(cursor, self.address, options)
            ]
            connection.commit()
        for finding in findings:
            log.warning("%s Fix: %s", finding.message, finding.fix)
        return findings

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

        A bare body (bytes or str) gets what :class:`OutgoingMessage` would give it (a random Id, the four
        standard headers with one TimeSent for the call, the Id mirrored into CorrelationId) without
        building the object: per message that was most of a batch send's client time.
        """
        items = messages if isinstance(messages, list | tuple) else list(messages)
        ids: list[Any] = new_message_ids(len(items))
        rows: list[Any] = []
        dialect = self.dialect
        send_params, row_id = dialect.send_params, dialect.row_id
        id_as_text = self._ids_bind_as_text
        limit = self.transport.max_body_bytes
        time_sent = ""
        for index, item in enumerate(items):
            kind = type(item)
            if kind is bytes or kind is str:
                body = item if kind is bytes else item.encode("utf-8")  # type: ignore[union-attr]
                message_id = ids[index]
                if len(body) > limit:
                    self._row_params(OutgoingMessage(body, id=message_id))  # raises MessageTooLarge
                text_id = str(message_id)
                time_sent = time_sent or time_sent_now()
                rows.append(
                    send_params(
                        text_id if id_as_text else row_id(message_id),
                        text_id,
                        None,
                        None,
                        default_headers_text(text_id, time_sent),
                        body,
                    )
                )
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
    ) -> uuid.UUID:
        """Send one message (one INSERT, one commit); return its Id."""
        if headers or time_to_be_received:
            outgoing = OutgoingMessage.of(message, headers, time_to_be_received)
            params, message_id = self._row_params(outgoing), outgoing.id
        else:
            rows, ids = self._plain_rows((message,))
            params, message_id = rows[0], ids[0]
        with self.transport.connection(self.address) as connection:
            cursor = shared_cursor(connection)
            with_recoverable = self._has_recoverable(cursor)
            with self._recoverable_guard():
                cursor.execute(self._sql.send_for(with_recoverable), params)
            connection.commit()
        return message_id

    def send_batch(self, messages: Iterable[OutgoingMessage | bytes | str]) -> list[uuid.UUID]:
        """Send many messages atomically with multi-row INSERTs in one transaction; return their Ids."""
        with self.transport.connection(self.address) as connection:
            return self._send_on(connection, messages, commit=True)

    def _send_on(
        self, connection: Any, messages: Iterable[OutgoingMessage | bytes | str], *, commit: bool
    ) -> list[uuid.UUID]:
        rows, ids = self._plain_rows(messages)
        if not rows:
            return []
        cursor = shared_cursor(connection)
        if commit:
            begin = self.dialect.begin_write()
            if begin and len(rows) > self.dialect.send_batch_rows:
                cursor.execute(begin, ())
        with_recoverable = self._has_recoverable(cursor)
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
        if commit:
            connection.commit()
        return ids

    def _has_recoverable(self, cursor: Any) -> bool:
        """Whether the table has the legacy Recoverable column: asked once per queue, then remembered.

        NServiceBus tables lost the column in later versions; sends leave it out where it is gone.
        """
        known = self._recoverable
        if known is not None:
            return known
        cursor.execute(*self.dialect.column_exists(self.address, "Recoverable"))
        if self._first_value(cursor) is not None:
            self._recoverable = True
        elif self._exists_on(cursor):
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
        fits = self._first_value(cursor)
        if not fits and not self._exists_on(cursor):
            return False  # no table: the send reports it; decide once the table exists
        self._bulk_send = bool(fits)
        return self._bulk_send

    def receive_statement(self, cursor: Any) -> str:
        """The receive's ``DELETE ... RETURNING`` text (one parameter: how many) for this role.

        For code that builds on the receive inside its own statement, as the Spark drain's server-side
        move does; ``cursor`` answers the one-time privilege question.
        """
        return self._sql.locking(self._uses_row_locks(cursor)).receive_batch

    def _uses_row_locks(self, cursor: Any) -> bool:
        """Whether receivers here take row locks: asked once per queue, then remembered.

        PostgreSQL grants row locks only to roles with an UPDATE privilege on the table; a role holding
        just SELECT, INSERT and DELETE competes through advisory locks instead (see the dialect).
        """
        known = self._row_locks
        if known is not None:
            return known
        mode = self.transport.lock_mode
        probe = self.dialect.row_lock_probe(self.address) if mode == "auto" else None
        if probe is None:
            self._row_locks = mode != "advisory"
            return self._row_locks
        cursor.execute(*probe)
        allowed = self._first_value(cursor)
        if allowed is None:
            return True  # no table: the statement reports it; decide once the table exists
        self._row_locks = bool(allowed)
        if not self._row_locks:
            log.info("this role may not lock rows of %s; receivers use advisory locks", self.address)
        return self._row_locks

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
    @contextmanager
    def receive(
        self,
        max_messages: int = 1,
        *,
        transaction_mode: TransactionMode | str | None = None,
    ) -> Iterator[ReceivedBatch]:
        """Receive up to ``max_messages`` of the oldest messages no other receiver holds.

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
        with self.transport.connection(self.address) as connection:
            cursor = shared_cursor(connection)
            try:
                begin = self.dialect.begin_write()
                if begin:
                    cursor.execute(begin, ())
                statement = self._sql.locking(self._uses_row_locks(cursor)).receive_batch
                raw = self.dialect.receive_rows(cursor, self.address, statement, max_messages)
                if len(raw) > max_messages:
                    raise SqlQueueError(
                        f"a receive of at most {max_messages} from {self.address} deleted {len(raw)} rows; "
                        "it was rolled back, so every message is still queued. The receive statement does "
                        "not limit its batch on this database: please report it"
                    )
                messages, expired, poison = self._decode(raw)
                if poison:
                    self._move_poison(cursor, poison)
                batch = ReceivedBatch(self, connection, messages, expired, len(poison), mode)
                if mode is TransactionMode.NONE:
                    connection.commit()
            except BaseException:
                # A driver may delete rows and then fail to hand them over: never keep such a DELETE.
                self._rollback_quietly(connection)
                raise
            try:
                yield batch
            except BaseException:
                if mode is TransactionMode.NONE:
                    if messages:
                        log.error(
                            "receive block on %s failed in transaction mode 'none'; %d message(s) were "
                            "already removed: %s",
                            self.address,
                            len(messages),
                            ", ".join(str(m.id) for m in messages),
                        )
                else:
                    self._rollback_quietly(connection)
                raise
            connection.commit()

    def _rollback_quietly(self, connection: Any) -> None:
        """Roll back after a failure in the block; keep the block's own error as the one raised."""
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

    def _decode(self, raw: Sequence[Any]) -> tuple[list[ReceivedMessage], int, list[_Poison]]:
        """Messages from the rows a receive deleted (driver rows in :class:`Row`'s column order), in
        RowVersion order; expired rows counted, unreadable ones set apart as poison."""
        messages: list[ReceivedMessage] = []
        poison: list[_Poison] = []
        expired = 0
        rows = sorted(raw, key=_ROW_VERSION) if len(raw) > 1 else raw
        for row in rows:
            row_id, correlation_id, reply_to_address, expired_flag, text, body, row_version, expires = row
            if expired_flag and _flag(expired_flag):
                expired += 1
                continue
            try:
                headers = decode_headers(text)
                message_id = _parse_id(row_id)
            except HeaderFormatError as error:
                poison.append(_Poison(Row(*row), str(error)))
                continue
            except ValueError:
                poison.append(_Poison(Row(*row), f"the Id {row_id!r} is not a UUID"))
                continue
            messages.append(
                received_message(
                    message_id,
                    headers,
                    body if type(body) is bytes else b"" if body is None else bytes(body),
                    row_version if type(row_version) is int else int(row_version),
                    None if expires is None else as_utc(expires),
                    headers.get("NServiceBus.CorrelationId") or correlation_id,
                    headers.get("NServiceBus.ReplyToAddress") or reply_to_address,
                )
            )
        if expired:
            log.info("dropped %d expired message(s) from %s", expired, self.address)
        return messages, expired, poison

    def _move_poison(self, cursor: Any, poison: list[_Poison]) -> None:
        for item in poison:
            if self.error_queue is None:
                raise HeaderFormatError(
                    f"message {_display_id(item.row.id)} in {self.address} "
                    f"(RowVersion {item.row.row_version}) cannot be read: {item.reason}; "
                    "no error queue is configured, so it was left in the queue"
                )
            log.error(
                "Error receiving message %s from %s: probable message metadata corruption (%s). "
                "Moving it to error queue %s.",
                _display_id(item.row.id),
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
                with_recoverable = error_queue._has_recoverable(cursor)
                with error_queue._recoverable_guard():
                    cursor.execute(
                        error_queue._sql.insert_raw_for(with_recoverable), self.dialect.raw_params(raw)
                    )
            except Exception as error:
                if isinstance(self.dialect.classify(error, self.error_queue), QueueNotFound):
                    raise QueueNotFound(
                        f"error queue {self.error_queue} does not exist, so the unreadable message "
                        f"{_display_id(row.id)} stays in {self.address} and blocks its head; "
                        "create the error queue"
                    ) from error
                raise

    # ---- depth and maintenance -----------------------------------------------------------------
    def _scalar(self, statement: str | Callable[[_Locking], str]) -> int:
        with self.transport.connection(self.address) as connection:
            cursor = shared_cursor(connection)
            if not isinstance(statement, str):
                statement = statement(self._sql.locking(self._uses_row_locks(cursor)))
            cursor.execute(statement, ())
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
            cursor.execute(self._sql.locking(self._uses_row_locks(cursor)).peek_bounds, ())
            rows = self.dialect.fetch_rows(cursor)
            connection.commit()
        oldest, newest = rows[0] if rows else (None, None)
        return (None if oldest is None else int(oldest), None if newest is None else int(newest))

    def count(self) -> int:
        """The exact number of unexpired messages; scans the table, so prefer peek_estimate for polling."""
        return self._scalar(self._sql.count_exact)

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
            with self.transport.connection(self.address) as connection:
                cursor = connection.cursor()
                begin = self.dialect.begin_write()
                if begin:
                    cursor.execute(begin, ())
                statement = self._sql.locking(self._uses_row_locks(cursor)).purge_expired_batch
                cursor.execute(statement, (batch_size,))
                if self.dialect.purge_returns_count():
                    rows = self.dialect.fetch_rows(cursor)
                    deleted = int(rows[0][0]) if rows else 0
                else:
                    deleted = max(cursor.rowcount, 0)
                connection.commit()
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
