"""Many queues' depths in one statement: what a shared poller reads each poll for all the triggers it serves.

The statement is composed from each queue's own read-only statements of its dialect, so nothing here knows an
engine: the plain peek of the RowVersion bounds (``peek_bounds_without_row_locks``, two index edges, SELECT
alone), the oldest unexpired row's headers (``oldest_headers``, for the oldest message's age) and, for the
error queues, their bounds again (the ``failed`` gauge). Each sub-statement is a source with named columns
(a derived table where the dialect names its columns, a common table expression on SQLite), and one ``UNION
ALL`` term per queue tags its row with the term's number. An exact count (``count_exact``), only for the
queues whose estimate has reached a watcher's threshold, is a second statement of the same shape.

A statement that fails for one queue (a dropped table, no rights on it) would fail for all: the failing
terms are found by halving the failed group and reading each half again, so one bad queue costs a few
extra statements once, and is then read on its own (:class:`DepthReader` keeps it apart) until it reads
again. A transient failure (a restart, a lost connection) is reported to every queue of the statement.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..model.address import QueueAddress
from ..model.errors import HeaderFormatError, TransientDatabaseError
from . import headers as h

if TYPE_CHECKING:
    from ..dialects.base import Dialect
    from .connection import Transport

__all__ = ["MAX_TERMS", "DepthReader", "QueueLook", "bounds_statement", "exact_statement"]

# UNION ALL terms per statement: SQLite refuses a compound SELECT of more than 500 terms.
MAX_TERMS = 400


@dataclass(frozen=True)
class QueueLook:
    """One queue as a shared poll saw it: the RowVersion bounds of its rows (None when empty), when its
    oldest unexpired message was sent, its error queue's estimate (None: none, or unreadable) and, when a
    watcher's threshold asked for it, the exact count of its unexpired messages."""

    address: QueueAddress
    oldest: int | None
    newest: int | None
    oldest_time_sent: datetime | None = None
    failed: int | None = None
    exact: int | None = None
    error_queue: QueueAddress | None = None

    @property
    def estimate(self) -> int:
        """``newest - oldest + 1``: an upper bound of the messages waiting (gaps and expired rows count)."""
        if self.oldest is None or self.newest is None:
            return 0
        return self.newest - self.oldest + 1


@dataclass(frozen=True)
class Target:
    """A queue to read and the error queue whose estimate its gauges report (None: no error queue)."""

    address: QueueAddress
    error_queue: QueueAddress | None = None


@dataclass
class _Term:
    address: QueueAddress
    is_queue: bool  # a watched queue (bounds and oldest headers) or only an error queue (bounds)
    row: tuple[Any, ...] | None = None
    error: BaseException | None = None


class _Composer:
    """Gathers the sub-statements of one statement over many queues: derived tables where the dialect names
    their columns (PostgreSQL plans common table expressions in time that grows with the square of their
    number, derived tables in time that grows with their number: for a few hundred queues, the planning
    was most of the poll), common table expressions elsewhere (SQLite cannot name a derived table's
    columns)."""

    def __init__(self, transport: Transport) -> None:
        self.derived = transport.dialect.names_derived_columns
        self.tables: list[str] = []
        self.selects: list[str] = []

    def source(self, name: str, columns: str, statement: str) -> str:
        """What a term selects ``FROM`` to read ``statement`` as ``name`` with ``columns``."""
        if self.derived:
            return f"({statement}) AS {name}({columns})"
        self.tables.append(f"{name}({columns}) AS ({statement})")
        return name

    def statement(self) -> str:
        union = " UNION ALL ".join(self.selects)
        return f"WITH {', '.join(self.tables)} {union}" if self.tables else union


def bounds_statement(
    transport: Transport,
    terms: Sequence[tuple[QueueAddress, bool]],
    dialect_of: Callable[[QueueAddress], Dialect] | None = None,
) -> str:
    """One SELECT of ``(term, lo, hi, oldest RowVersion, oldest Headers)`` per term: ``(address, True)`` a
    watched queue, ``(address, False)`` an error queue (its two last columns NULL). ``dialect_of`` gives
    each table's dialect (a layout of its own, :meth:`~.TableQueue.table_dialect`); the transport's by
    default."""
    composer = _Composer(transport)
    for number, (address, is_queue) in enumerate(terms):
        dialect = transport.dialect if dialect_of is None else dialect_of(address)
        bounds = composer.source(
            f"b{number}", "q_lo, q_hi", dialect.without_row_locks("peek_bounds", address)
        )
        if is_queue:
            oldest = composer.source(f"o{number}", "q_rv, q_headers", dialect.sql("oldest_headers", address))
            composer.selects.append(
                f"SELECT {number}, b{number}.q_lo, b{number}.q_hi, o{number}.q_rv, o{number}.q_headers "
                f"FROM {bounds} LEFT JOIN {oldest} ON 1 = 1"
            )
        else:
            composer.selects.append(
                f"SELECT {number}, b{number}.q_lo, b{number}.q_hi, NULL, NULL FROM {bounds}"
            )
    return composer.statement()


def exact_statement(
    transport: Transport,
    addresses: Sequence[QueueAddress],
    dialect_of: Callable[[QueueAddress], Dialect] | None = None,
) -> str:
    """One SELECT of ``(term, count)`` per queue, from each queue's exact count (``dialect_of``: as for
    :func:`bounds_statement`)."""
    composer = _Composer(transport)
    for number, address in enumerate(addresses):
        dialect = transport.dialect if dialect_of is None else dialect_of(address)
        count = composer.source(f"c{number}", "q_count", dialect.sql("count_exact", address))
        composer.selects.append(f"SELECT {number}, c{number}.q_count FROM {count}")
    return composer.statement()


def _time_sent(raw: Any) -> datetime | None:
    if raw is None:
        return None
    if isinstance(raw, bytes | bytearray | memoryview):
        raw = bytes(raw).decode("utf-8", errors="replace")
    try:
        headers = h.decode_headers(str(raw))
    except HeaderFormatError:
        return None
    return h.timestamp_or_none(dict(headers).get(h.TIME_SENT))


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass
class DepthReader:
    """Reads the looks of many queues of one transport, a few statements for all of them (see the module).

    Not thread-safe: one poller calls it from one thread at a time. ``statements`` counts what it ran.
    """

    transport: Transport
    statements: int = 0
    apart: set[QueueAddress] = field(default_factory=set)  # read alone until they read again

    def read(
        self, targets: Iterable[Target], exact_for: dict[QueueAddress, int] | None = None
    ) -> dict[QueueAddress, QueueLook | BaseException]:
        """Each target's look, or the error that reading it raised. ``exact_for`` maps a queue to the
        estimate from which its exact count is read too (0: always)."""
        targets = list(dict.fromkeys(targets))
        terms: dict[QueueAddress, _Term] = {}
        for target in targets:
            terms.setdefault(target.address, _Term(target.address, True)).is_queue = True
            if target.error_queue is not None:
                terms.setdefault(target.error_queue, _Term(target.error_queue, False))
        self._run_bounds(list(terms.values()))
        looks: dict[QueueAddress, QueueLook | BaseException] = {}
        for target in targets:
            looks[target.address] = self._look(target, terms)
        wanted = [
            address
            for address, look in looks.items()
            if isinstance(look, QueueLook)
            and address in (exact_for or {})
            and look.estimate >= exact_for[address]  # type: ignore[index]
        ]
        if wanted:
            counted = self._run_exact(wanted)
            for address in wanted:
                count = counted[address]
                look = looks[address]
                assert isinstance(look, QueueLook)
                looks[address] = count if isinstance(count, BaseException) else _with_exact(look, count)
        return looks

    def _look(self, target: Target, terms: dict[QueueAddress, _Term]) -> QueueLook | BaseException:
        term = terms[target.address]
        if term.error is not None:
            return term.error
        assert term.row is not None
        _, lo, hi, _rv, raw_headers = term.row
        failed = None
        if target.error_queue is not None:
            error_term = terms[target.error_queue]
            if error_term.row is not None:
                _, elo, ehi, _, _ = error_term.row
                failed = 0 if elo is None or ehi is None else int(ehi) - int(elo) + 1
        return QueueLook(
            target.address, _int(lo), _int(hi), _time_sent(raw_headers), failed, None, target.error_queue
        )

    # ---- the bounds, in chunks, with failures isolated ---------------------------------------------
    def _run_bounds(self, terms: list[_Term]) -> None:
        together = [t for t in terms if t.address not in self.apart]
        for start in range(0, len(together), MAX_TERMS):
            self._bounds_group(together[start : start + MAX_TERMS])
        for term in terms:
            if term.address in self.apart:
                self._bounds_group([term])

    def _bounds_group(self, group: list[_Term]) -> None:
        if not group:
            return
        terms = [(t.address, t.is_queue) for t in group]
        address = group[0].address if len(group) == 1 else None
        try:
            rows = self._query(
                lambda dialect_of: bounds_statement(self.transport, terms, dialect_of), address
            )
        except TransientDatabaseError as error:
            for term in group:
                term.error = error
            return
        except Exception as error:
            if len(group) == 1:
                group[0].error = error
                self.apart.add(group[0].address)
                return
            middle = len(group) // 2
            self._bounds_group(group[:middle])
            self._bounds_group(group[middle:])
            return
        for row in rows:
            group[int(row[0])].row = tuple(row)
        if len(group) == 1:
            self.apart.discard(group[0].address)

    # ---- exact counts, the same way ----------------------------------------------------------------
    def _run_exact(self, addresses: list[QueueAddress]) -> dict[QueueAddress, int | BaseException]:
        counted: dict[QueueAddress, int | BaseException] = {}
        for start in range(0, len(addresses), MAX_TERMS):
            self._exact_group(addresses[start : start + MAX_TERMS], counted)
        return counted

    def _exact_group(
        self, group: list[QueueAddress], counted: dict[QueueAddress, int | BaseException]
    ) -> None:
        try:
            rows = self._query(
                lambda dialect_of: exact_statement(self.transport, group, dialect_of),
                group[0] if len(group) == 1 else None,
            )
        except TransientDatabaseError as error:
            counted.update(dict.fromkeys(group, error))
            return
        except Exception as error:
            if len(group) == 1:
                counted[group[0]] = error
                return
            middle = len(group) // 2
            self._exact_group(group[:middle], counted)
            self._exact_group(group[middle:], counted)
            return
        for row in rows:
            counted[group[int(row[0])]] = int(row[1] or 0)

    def _query(
        self, compose: Callable[[Callable[[QueueAddress], Dialect]], str], address: QueueAddress | None
    ) -> list[Any]:
        """Run the statement ``compose`` makes from each table's dialect, as its columns say (asked once
        per queue, on this connection, where the engine meets more than one layout)."""
        self.statements += 1
        with self.transport.connection(address) as connection:
            cursor = connection.cursor()

            def dialect_of(table: QueueAddress) -> Dialect:
                return self.transport.queue(table).table_dialect(cursor)

            statement = compose(dialect_of)
            cursor.execute(statement, ())
            rows = self.transport.dialect.fetch_rows(cursor)
            connection.commit()
        return rows


def _with_exact(look: QueueLook, count: int) -> QueueLook:
    return QueueLook(
        look.address, look.oldest, look.newest, look.oldest_time_sent, look.failed, count, look.error_queue
    )
