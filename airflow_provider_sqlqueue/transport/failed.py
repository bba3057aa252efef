"""Failed messages in an error queue: list them in groups, show one, retry them to where they failed, or
delete them (into the error queue's archive table by default, see :mod:`.archive`).

A message the pump gives up on lands in the error queue with NServiceBus's failure headers
(:mod:`.recoverability`): ``NServiceBus.FailedQ`` names the queue it failed in, the
``NServiceBus.ExceptionInfo.*`` headers say why and ``NServiceBus.TimeOfFailure`` when. The headers are
parsed here in Python, the same on every engine; the error table is read with read-only keyset pages by
RowVersion, so an error queue of any size is never loaded at once.

A retry moves each message back to its ``FailedQ`` queue in one transaction per batch (DELETE from the
error queue returning the row, INSERT into the source, same connection), so a process that dies mid-retry
leaves every message in exactly one of the two tables. The Id column and the ``NServiceBus.MessageId``
header stay as they were; the failure headers are removed as ServiceControl's retry removes them
(``NServiceBus.Retries*``, ``NServiceBus.FailedQ``, ``NServiceBus.TimeOfFailure``,
``NServiceBus.ExceptionInfo.*``, ``NServiceBus.Timeout.Expire``), every other header stays byte for byte.
A message whose ``FailedQ`` is missing or unreadable, or whose source queue does not exist, is refused and
left where it is; the rest are retried.

::

    from airflow_provider_sqlqueue.transport import open_transport
    from airflow_provider_sqlqueue.transport.failed import FailureFilter, failed_groups, retry_failed

    with open_transport("sqlite:///queues.db") as transport:
        for group in failed_groups(transport.queue("error")):
            print(group.key, group.failed_queue, group.exception_type, group.count)
        result = retry_failed(transport.queue("error"), FailureFilter(failed_queue="orders"))
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ..model.address import QueueAddress
from ..model.errors import ConfigurationError, HeaderFormatError, InvalidQueueName, QueueNotFound
from . import headers as h
from .archive import ErrorArchive
from .browse import BrowsedMessage, _query, canonical_id, column_text
from .queue.received_rows import as_utc

if TYPE_CHECKING:
    from .connection import Transport
    from .queue import TableQueue

__all__ = [
    "RETRY_REMOVED_PREFIXES",
    "FailedGroup",
    "FailedRow",
    "FailedSample",
    "FailureFilter",
    "FailureOutcome",
    "Refusal",
    "delete_failed",
    "failed_groups",
    "failed_rows",
    "failed_sample",
    "retry_failed",
    "show_failed",
]

EXCEPTION_TYPE = h.EXCEPTION_TYPE
EXCEPTION_MESSAGE = h.EXCEPTION_MESSAGE
STACK_TRACE = f"{h.EXCEPTION_INFO_PREFIX}StackTrace"
# The header names (prefixes) ServiceControl's retry takes out of a failed message before it sends it back.
RETRY_REMOVED_PREFIXES = (
    h.DELAYED_RETRIES,
    h.FAILED_QUEUE,
    h.TIME_OF_FAILURE,
    h.EXCEPTION_INFO_PREFIX,
    "NServiceBus.Timeout.Expire",
)
PAGE_SIZE = 500
MAX_BATCH = 10_000
MAX_SAMPLE = 100_000


@dataclass(frozen=True)
class FailedRow(h.FailureHeaders):
    """One row of an error queue as the grouping reads it: no body."""

    row_version: int
    id: str
    headers: dict[str, str | None]
    raw_headers: str
    header_error: str | None

    @property
    def group_key(self) -> str:
        return group_key(self.failed_queue, self.exception_type, self.exception_message)


def group_key(failed_queue: str | None, exception_type: str | None, exception_message: str | None) -> str:
    """A short stable name of a group, to pick it on a command line (the same on every run and engine)."""
    text = "\x00".join(part or "" for part in (failed_queue, exception_type, exception_message))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


@dataclass
class FailedGroup:
    """Failed messages that share the queue they failed in and their exception's type and message."""

    key: str
    failed_queue: str | None
    exception_type: str | None
    exception_message: str | None
    count: int = 0
    first_failure: datetime | None = None
    last_failure: datetime | None = None

    def add(self, row: FailedRow) -> None:
        self.count += 1
        moment = row.time_of_failure
        if moment is not None:
            if self.first_failure is None or moment < self.first_failure:
                self.first_failure = moment
            if self.last_failure is None or moment > self.last_failure:
                self.last_failure = moment


@dataclass(frozen=True)
class FailureFilter:
    """Which failed messages an operation takes: all that match every given field (none given: all).

    ``group`` is a :attr:`FailedGroup.key`; ``ids`` are message Ids (the Id column).
    """

    failed_queue: str | None = None
    exception_type: str | None = None
    exception_message: str | None = None
    group: str | None = None
    ids: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if self.ids is not None:
            canonical = []
            for value in self.ids:
                try:
                    canonical.append(str(uuid.UUID(str(value))))
                except ValueError:
                    raise ConfigurationError(
                        f"message Id {value!r} is not a UUID; copy it from 'sqlqueue failed list --messages'"
                    ) from None
            object.__setattr__(self, "ids", tuple(canonical))

    def matches(self, row: FailedRow, canonical: Callable[[str], str] = str) -> bool:
        """Whether ``row`` is selected; ``canonical`` spells queue names alike (``orders`` and
        ``orders@[public]`` are one queue) before ``failed_queue`` is compared."""
        if self.ids is not None and row.id not in self.ids:
            return False
        if self.group is not None and row.group_key != self.group:
            return False
        if self.failed_queue is not None and (
            row.failed_queue is None or canonical(row.failed_queue) != canonical(self.failed_queue)
        ):
            return False
        if self.exception_type is not None and row.exception_type != self.exception_type:
            return False
        return self.exception_message is None or row.exception_message == self.exception_message


@dataclass(frozen=True)
class Refusal:
    """A message a retry left in the error queue: its Id, why, and whether its source queue is missing."""

    id: str
    reason: str
    missing_queue: bool = False


@dataclass
class FailureOutcome:
    """What a retry or delete did: the Ids moved (or deleted) and the messages refused."""

    done: list[str] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    batches: int = 0
    # A retry's messages per queue they went back to (its lineage's outputs, whatever the selection).
    queues: dict[str, int] = field(default_factory=dict)
    # Where a retry limited by ``max_rows`` stopped: the last RowVersion it read, the newest it would read,
    # and whether rows may remain between the two (call again with ``after=read_to, up_to=up_to``).
    read_to: int | None = None
    up_to: int | None = None
    more: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "done": list(self.done),
            "refused": [
                {"id": r.id, "reason": r.reason, "missing_queue": r.missing_queue} for r in self.refused
            ],
            "batches": self.batches,
        }


def _require(queue: TableQueue, error: Exception) -> None:
    if isinstance(error, QueueNotFound) or not queue.exists():
        raise QueueNotFound(f"error queue {queue.address} does not exist") from error


def _failed_row(row_version: Any, message_id: Any, raw_headers: Any) -> FailedRow:
    raw = column_text(raw_headers)
    try:
        headers, problem = dict(h.decode_headers(raw)), None
    except HeaderFormatError as error:
        headers, problem = {}, str(error)
    return FailedRow(int(row_version), canonical_id(message_id), headers, raw, problem)


def failed_rows(
    error_queue: TableQueue, page_size: int = PAGE_SIZE, up_to: int | None = None, after: int = 0
) -> Iterator[FailedRow]:
    """Every row of ``error_queue`` (Id and headers, no body) in RowVersion order, read in keyset pages
    of ``page_size`` rows, each page its own short read-only statement; with ``up_to`` only the rows up
    to that RowVersion, with ``after`` only those after that one."""
    dialect = error_queue.resolved_dialect()
    statement = dialect.sql("failed_page", error_queue.address)
    while True:
        try:
            rows = _query(error_queue, statement, dialect.failed_page_params(after, page_size))
        except Exception as error:
            _require(error_queue, error)
            raise
        for row_version, message_id, raw_headers in rows:
            if up_to is not None and int(row_version) > up_to:
                return
            yield _failed_row(row_version, message_id, raw_headers)
        if len(rows) < page_size:
            return
        after = int(rows[-1][0])


def _canonical_names(transport: Transport) -> Callable[[str], str]:
    """A queue name as the transport writes it in headers (a name that is no address stays as given)."""

    @lru_cache(maxsize=1024)
    def canonical(name: str) -> str:
        try:
            return str(transport.canonical(name))
        except (InvalidQueueName, ValueError):
            return name

    return canonical


def _selected(
    error_queue: TableQueue,
    selection: FailureFilter | None,
    *,
    bounded: bool = False,
    after: int = 0,
    up_to: int | None = None,
    max_rows: int | None = None,
    progress: FailureOutcome | None = None,
) -> Iterator[FailedRow]:
    """The selected rows; ``bounded``: only those there when it starts (up to ``up_to`` when given), so
    that a retry or delete ends even while the pump keeps moving messages (perhaps the ones just retried)
    into the error queue. ``max_rows``: read no more than that many rows after ``after``, selected or not,
    and note in ``progress`` where the reading stopped. A selection by ``ids`` looks those rows up by Id
    instead of reading the error queue page by page."""
    canonical = _canonical_names(error_queue.transport)
    if selection is not None and selection.ids is not None:
        for row in _rows_with_ids(error_queue, selection.ids):
            if selection.matches(row, canonical):
                yield row
        return
    if bounded and up_to is None:
        try:
            _oldest, up_to = error_queue.peek_bounds()
        except Exception as error:
            _require(error_queue, error)
            raise
        if up_to is None:
            return
    if progress is not None:
        progress.up_to = up_to
    page_size = PAGE_SIZE if max_rows is None else min(PAGE_SIZE, max_rows)
    for read, row in enumerate(failed_rows(error_queue, page_size, up_to=up_to, after=after), 1):
        if progress is not None:
            progress.read_to = row.row_version
        if selection is None or selection.matches(row, canonical):
            yield row
        if max_rows is not None and read >= max_rows:
            if progress is not None:
                progress.more = up_to is None or row.row_version < up_to
            return


def _rows_with_ids(error_queue: TableQueue, ids: Sequence[str]) -> Iterator[FailedRow]:
    """The rows of ``error_queue`` whose Id is one of ``ids`` (a message may be there more than once), by
    one lookup per Id rather than a read of every header."""
    dialect = error_queue.resolved_dialect()
    statement = dialect.sql("failed_messages", error_queue.address)
    for wanted in ids:
        try:
            rows = _query(error_queue, statement, (dialect.row_id(uuid.UUID(wanted)),))
        except Exception as error:
            _require(error_queue, error)
            raise
        for message_id, _correlation, _reply_to, raw_headers, _body, row_version, _expires in rows:
            yield _failed_row(row_version, message_id, raw_headers)


def failed_groups(error_queue: TableQueue, selection: FailureFilter | None = None) -> list[FailedGroup]:
    """The failed messages of ``error_queue`` grouped by FailedQ, exception type and message, largest
    group first."""
    groups: dict[str, FailedGroup] = {}
    for row in _selected(error_queue, selection):
        key = row.group_key
        group = groups.get(key)
        if group is None:
            group = groups[key] = FailedGroup(
                key, row.failed_queue, row.exception_type, row.exception_message
            )
        group.add(row)
    return sorted(groups.values(), key=lambda g: (-g.count, g.failed_queue or "", g.key))


@dataclass(frozen=True)
class FailedSample:
    """The groups of the newest ``limit`` rows of an error queue: ``read`` rows were grouped, and ``more``
    says the error queue holds older rows that were not read."""

    groups: list[FailedGroup]
    read: int
    limit: int
    more: bool


def failed_sample(error_queue: TableQueue, limit: int = 1000) -> FailedSample:
    """The failed-message groups of at most the newest ``limit`` rows of ``error_queue`` (headers only,
    one statement of ``limit + 1`` rows), largest group first: a bounded cost however long the queue."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SAMPLE:
        raise ConfigurationError(f"limit must be an int between 1 and {MAX_SAMPLE:,}, not {limit!r}")
    dialect = error_queue.resolved_dialect()
    try:
        rows = _query(error_queue, dialect.sql("failed_newest", error_queue.address), (limit + 1,))
    except Exception as error:
        _require(error_queue, error)
        raise
    groups: dict[str, FailedGroup] = {}
    for row_version, message_id, raw_headers in rows[:limit]:
        raw = column_text(raw_headers)
        try:
            headers, problem = dict(h.decode_headers(raw)), None
        except HeaderFormatError as error:
            headers, problem = {}, str(error)
        row = FailedRow(int(row_version), canonical_id(message_id), headers, raw, problem)
        group = groups.get(row.group_key)
        if group is None:
            group = groups[row.group_key] = FailedGroup(
                row.group_key, row.failed_queue, row.exception_type, row.exception_message
            )
        group.add(row)
    ordered = sorted(groups.values(), key=lambda g: (-g.count, g.failed_queue or "", g.key))
    return FailedSample(ordered, min(len(rows), limit), limit, len(rows) > limit)


def show_failed(error_queue: TableQueue, message_id: str) -> list[BrowsedMessage]:
    """The rows of ``error_queue`` with this Id (usually one), headers and body as stored."""
    try:
        wanted = uuid.UUID(str(message_id))
    except ValueError:
        raise ConfigurationError(
            f"message Id {message_id!r} is not a UUID; copy it from 'sqlqueue failed list --messages'"
        ) from None
    dialect = error_queue.resolved_dialect()
    try:
        rows = _query(
            error_queue, dialect.sql("failed_messages", error_queue.address), (dialect.row_id(wanted),)
        )
    except Exception as error:
        _require(error_queue, error)
        raise
    found = []
    for message_id_value, _correlation, _reply_to, raw_headers, body, row_version, expires in rows:
        raw = column_text(raw_headers)
        try:
            headers, problem = dict(h.decode_headers(raw)), None
        except HeaderFormatError as error:
            headers, problem = {}, str(error)
        found.append(
            BrowsedMessage(
                id=canonical_id(message_id_value),
                headers=headers,
                body=b"" if body is None else bytes(body),
                row_version=int(row_version),
                expires=as_utc(expires),
                raw_headers=raw,
                header_error=problem,
            )
        )
    return found


def retry_headers_text(raw_headers: str, headers: dict[str, str | None]) -> str:
    """The stored header text without the failure headers; every other member exactly as stored."""
    removed = [key for key in headers if key.startswith(RETRY_REMOVED_PREFIXES)]
    return h.edit_headers_text(raw_headers, None, removed)


def _check_batch_size(batch_size: int) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BATCH:
        raise ConfigurationError(f"batch_size must be an int between 1 and {MAX_BATCH:,}, not {batch_size!r}")


def _check_max_rows(max_rows: int | None) -> None:
    if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1):
        raise ConfigurationError(f"max_rows must be a positive int, not {max_rows!r}")


def _batches(rows: Iterator[FailedRow], size: int) -> Iterator[list[FailedRow]]:
    batch: list[FailedRow] = []
    for row in rows:
        batch.append(row)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def retry_failed(
    error_queue: TableQueue,
    selection: FailureFilter | None = None,
    batch_size: int = 100,
    *,
    max_rows: int | None = None,
    after: int = 0,
    up_to: int | None = None,
) -> FailureOutcome:
    """Move the selected failed messages back to their ``FailedQ`` queues, ``batch_size`` per transaction.

    Refused (left in the error queue, reported in :attr:`FailureOutcome.refused`): a message without a
    readable ``FailedQ`` header, or whose source queue does not exist. A message another session moved
    or deleted meanwhile is skipped.

    With ``max_rows``, one step of a long retry: read at most that many rows of the error queue after
    RowVersion ``after`` and no newer than ``up_to`` (default: the newest row now), retry the selected ones
    among them, and say in the outcome where it stopped (``read_to``, ``up_to``, ``more``), so a caller
    such as the Queues page resumes with ``after=outcome.read_to, up_to=outcome.up_to``.
    """
    _check_batch_size(batch_size)
    _check_max_rows(max_rows)
    transport = error_queue.transport
    sources: dict[str, TableQueue | tuple[str, bool]] = {}

    def source_of(row: FailedRow) -> TableQueue | tuple[str, bool]:
        if row.header_error is not None:
            return f"its headers cannot be read ({row.header_error}); fix or delete it", False
        name = row.failed_queue
        if name is None:
            return (
                f"it has no {h.FAILED_QUEUE} header, so the queue it came from is unknown; delete it",
                False,
            )
        known = sources.get(name)
        if known is None:
            try:
                queue = transport.queue(QueueAddress.parse(name), error_queue=None)
            except (InvalidQueueName, ValueError) as error:
                known = f"its {h.FAILED_QUEUE} {name!r} is not a queue address ({error})", False
            else:
                if transport.canonical(queue.address) == transport.canonical(error_queue.address):
                    known = f"its {h.FAILED_QUEUE} is this error queue itself", False
                elif queue.exists():
                    known = queue
                else:
                    known = f"its source queue {name} does not exist; create it, then retry", True
            sources[name] = known
        return known

    outcome = FailureOutcome()
    dialect = error_queue.resolved_dialect()
    take = dialect.sql("take_failed_row", error_queue.address)
    selected = _selected(
        error_queue, selection, bounded=True, after=after, up_to=up_to, max_rows=max_rows, progress=outcome
    )
    for batch in _batches(selected, batch_size):
        moves: list[tuple[FailedRow, TableQueue]] = []
        for row in batch:
            source = source_of(row)
            if isinstance(source, tuple):
                reason, missing = source
                text = f"message {row.id} stays in {error_queue.address}: {reason}"
                outcome.refused.append(Refusal(row.id, text, missing))
            else:
                moves.append((row, source))
        if not moves:
            continue
        moved, into = [], []
        with transport.connection(error_queue.address) as connection:
            cursor = connection.cursor()
            begin = dialect.begin_write()
            if begin:
                cursor.execute(begin, ())
            for row, source in moves:
                cursor.execute(take, (row.row_version,))
                taken = dialect.fetch_rows(cursor)
                if not taken:
                    continue  # another session retried or deleted it meanwhile
                message_id, correlation_id, reply_to, raw_headers, body = taken[0]
                headers_text = retry_headers_text(column_text(raw_headers), row.headers)
                source.insert_raw(cursor, (message_id, correlation_id, reply_to, headers_text, body))
                moved.append(row.id)
                into.append(str(source.address))
            connection.commit()
        outcome.done.extend(moved)
        for name in into:
            outcome.queues[name] = outcome.queues.get(name, 0) + 1
        outcome.batches += 1
    return outcome


def delete_failed(
    error_queue: TableQueue,
    selection: FailureFilter | None = None,
    batch_size: int = 100,
    *,
    permanent: bool = False,
    max_rows: int | None = None,
    after: int = 0,
    up_to: int | None = None,
) -> FailureOutcome:
    """Delete the selected failed messages, ``batch_size`` per transaction: moved into the error queue's
    archive table (:mod:`.archive`, created here if missing), or with ``permanent`` deleted for good.

    Each row moves by one server-side statement in its batch's transaction, so at every commit it is in
    exactly one of the two tables; a batch that fails leaves both as they were. Where the archive is
    missing and this role may not create it, PermissionDenied names the fix and nothing is deleted.

    ``max_rows``, ``after`` and ``up_to`` make it one step of a long delete, as for :func:`retry_failed`.
    """
    _check_batch_size(batch_size)
    _check_max_rows(max_rows)
    outcome = FailureOutcome()
    dialect = error_queue.resolved_dialect()
    archive = None
    if permanent:
        take = [dialect.sql("take_failed_row", error_queue.address)]
    else:
        try:
            archive = ErrorArchive.of(error_queue)
            archive.ensure()
        except Exception as error:
            _require(error_queue, error)
            raise
    selected = _selected(
        error_queue, selection, bounded=True, after=after, up_to=up_to, max_rows=max_rows, progress=outcome
    )
    for batch in _batches(selected, batch_size):
        deleted = []
        with error_queue.transport.connection(error_queue.address) as connection:
            cursor = connection.cursor()
            begin = dialect.begin_write()
            if begin:
                cursor.execute(begin, ())
            if archive is not None:
                with_recoverable = error_queue.has_recoverable(cursor)
                take = dialect.archive_failed_row(error_queue.address, archive.address, with_recoverable)
            for row in batch:
                for statement in take:
                    cursor.execute(statement, (row.row_version,))
                if _taken(dialect, cursor, counted=archive is not None):
                    deleted.append(row.id)
            connection.commit()
        outcome.done.extend(deleted)
        outcome.batches += 1
    return outcome


def _taken(dialect: Any, cursor: Any, *, counted: bool) -> bool:
    """Whether the last statement took its row (another session may have taken it first)."""
    rows = dialect.fetch_rows(cursor)
    if counted and dialect.purge_returns_count():
        return bool(rows and int(rows[0][0]))
    return bool(rows)
