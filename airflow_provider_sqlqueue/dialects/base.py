"""What every engine's dialect provides: quoting, validation, statement text and error classification.

A dialect holds all SQL text of its engine, named by what each statement does. It imports nothing from the
transport above it except the error types and the address value, so the transport composes dialects and
never the other way round. Statements use the parameter style of the engine's DB-API driver.

The text of the statements is data (``statements.py`` and each engine's table), asked for by name with
:meth:`Dialect.sql`; ``statements.py`` says what each must do. What stays here is code: choosing a statement
by lock mode or layout, building parameters, driver glue, error classification and inspection. The Spark
bridge's are declared in ``bridge.py``.
"""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, Literal

from ..model.address import QueueAddress
from ..model.errors import InvalidQueueName, SqlQueueError
from .bridge import BridgeStatements
from .index_spec import IndexSpec
from .statements import StatementTable, marks
from .transaction_state import TransactionStates

Layout = Literal["clustered", "heap"]
ColumnLayout = Literal["sqlserver-transport", "postgresql-transport"]
StorageParameters = tuple[tuple[str, str], ...]

# The subscription table's column width, the reference's: longer values would fail its INSERT, so they are
# refused up front.
SUBSCRIPTION_COLUMN_LENGTH = 200

_STORAGE_PARAMETER_NAME = re.compile(r"(toast\.)?[a-z][a-z0-9_]*")
_STORAGE_PARAMETER_VALUE = re.compile(r"[A-Za-z0-9_.+-]+")


def storage_parameters(given: Mapping[str, Any] | Sequence[tuple[str, Any]]) -> StorageParameters:
    """``given`` as validated ``(name, value)`` pairs. DDL cannot bind values, so a name must be a plain
    lower-case word (``toast.`` allowed) and a value a number, a boolean or a plain word."""
    pairs = list(given.items()) if isinstance(given, Mapping) else list(given)
    result = []
    for pair in pairs:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise ValueError(f"storage_parameters takes a mapping of name to value, not {given!r}")
        name, value = pair
        if not isinstance(name, str) or not _STORAGE_PARAMETER_NAME.fullmatch(name):
            raise ValueError(f"storage parameter name {name!r} is not a plain lower-case name")
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int | float) and not isinstance(value, bool):
            text = repr(value)
        elif isinstance(value, str) and _STORAGE_PARAMETER_VALUE.fullmatch(value):
            text = value
        else:
            raise ValueError(
                f"storage parameter {name} takes a number, a boolean or a plain word, not {value!r}"
            )
        result.append((name, text))
    names = [name for name, _ in result]
    if len(set(names)) != len(names):
        raise ValueError(f"storage_parameters names a parameter twice: {names}")
    return tuple(result)


@dataclass(frozen=True)
class TableOptions:
    """How a queue table is created.

    ``layout`` and ``unicode_headers`` matter on SQL Server only: ``clustered`` is the seeds' clustered
    RowVersion index, ``heap`` the reference's later non-clustered RowVersion index with a filtered Expires
    index; ``unicode_headers=False`` gives the seeds' ``varchar(max)`` Headers. ``body_string`` adds the
    human-readable computed ``BodyString`` column on every engine.

    ``storage_parameters`` matter on PostgreSQL only: the table's ``WITH (...)`` storage parameters. None
    (the default) gives the dialect's ``default_storage_parameters`` (on PostgreSQL autovacuum then vacuums
    the table after every 1,000 dead rows, at a quarter of the server's throttling, so a drained table's
    storage comes back by itself);
    a mapping replaces them, ``{}`` creates the table with none. Other engines have none and ignore them.

    ``column_layout`` names the columns a new table gets: ``sqlserver-transport`` (the NServiceBus SQL
    Server transport's, on every engine) or, on PostgreSQL, ``postgresql-transport`` (NServiceBus.Transport.
    PostgreSql's: Id, Expires, Headers, Body, Seq). An existing table is used in whichever layout it has.
    """

    layout: Layout = "clustered"
    unicode_headers: bool = True
    body_string: bool = False
    storage_parameters: StorageParameters | Mapping[str, Any] | None = None
    column_layout: ColumnLayout = "sqlserver-transport"

    def __post_init__(self) -> None:
        if self.layout not in ("clustered", "heap"):
            raise ValueError(f"layout must be 'clustered' or 'heap', not {self.layout!r}")
        if self.column_layout not in ("sqlserver-transport", "postgresql-transport"):
            raise ValueError(
                "column_layout must be 'sqlserver-transport' or 'postgresql-transport', "
                f"not {self.column_layout!r}"
            )
        if self.storage_parameters is not None:
            object.__setattr__(self, "storage_parameters", storage_parameters(self.storage_parameters))


@dataclass(frozen=True)
class Finding:
    """One result of inspecting a queue table: what is wrong and the statement that fixes it."""

    code: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.message} Fix: {self.fix}"


@dataclass(frozen=True)
class TableStorage:
    """What a queue table takes on disk and what deleted rows left in it, with the maintenance that calls
    for. PostgreSQL's figures only: elsewhere ``applicable`` is False and ``note`` says why nothing is to be
    scheduled. A figure this role may not read is None, and ``note`` says which and why."""

    applicable: bool
    note: str = ""
    storage_parameters: StorageParameters | None = None
    live_tuples: int | None = None
    dead_tuples: int | None = None
    last_vacuum: datetime | None = None
    last_autovacuum: datetime | None = None
    table_bytes: int | None = None
    index_bytes: int | None = None
    advice: tuple[str, ...] = ()


@dataclass(frozen=True)
class Row:
    """A deleted queue row as every dialect returns it."""

    id: Any
    correlation_id: str | None
    reply_to_address: str | None
    expired: bool
    headers: Any
    body: bytes | None
    row_version: int
    expires: Any


def short_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]


class Dialect(BridgeStatements, TransactionStates, ABC):
    """One database engine's SQL. Subclasses are stateless; the transport caches rendered statements."""

    name: ClassVar[str]
    display_name: ClassVar[str]
    default_schema: ClassVar[str | None]
    # A session whose request for a lock was refused must be closed, not reused (see BabelfishDialect).
    refused_lock_spoils_session = False
    # Whether a receive skips rows other receivers hold (READPAST, SKIP LOCKED). Where the hints are accepted
    # but not honoured, a receive can come back empty while messages are queued (MessagePump._drained).
    skips_held_rows: ClassVar[bool] = True
    variant: ClassVar[str | None] = None  # a named variant of the engine, e.g. "babelfish" for SQL Server
    # Whether the addresses this engine's headers carry (ReplyToAddress, FailedQ, ForwardDestination) name
    # the catalog: the reference's SQL Server form always does, its PostgreSQL form never does.
    addresses_carry_catalog: ClassVar[bool] = False
    # Whether the reference's transport on this engine writes addresses ``"schema"."table"`` (its PostgreSQL
    # transport) instead of ``table@[schema]@[catalog]``.
    addresses_quoted: ClassVar[bool] = False
    # Whether the subscription table's text columns count UTF-16 code units (SQL Server's nvarchar, where a
    # character outside the Basic Multilingual Plane takes two) rather than characters.
    subscription_columns_count_utf16: ClassVar[bool] = False
    # The columns of the queue tables this dialect's statements read and write: the NServiceBus SQL Server
    # transport's (``sqlserver-transport``, on every engine), or another layout an engine also meets
    # (PostgreSQL's ``postgresql-transport``, see postgres_reference.py).
    layout: ClassVar[str] = "sqlserver-transport"
    max_identifier_length: ClassVar[int]
    identifier_length_in_bytes: ClassVar[bool] = False
    max_body_bytes: ClassVar[int]
    send_batch_rows: ClassVar[int]
    placeholder: ClassVar[str]
    single_writer: ClassVar[bool] = False
    # Whether a derived table names its columns after its alias (``FROM (SELECT ...) AS b(lo, hi)``). Where it
    # does, a statement over many queues joins derived tables instead of common table expressions, which
    # PostgreSQL plans in time that grows with the square of their number (transport/depth_reads.py).
    names_derived_columns: ClassVar[bool] = True
    # The storage parameters (``WITH (...)``) a new queue table gets unless TableOptions names its own.
    default_storage_parameters: ClassVar[StorageParameters] = ()

    # ---- names ---------------------------------------------------------------------------------
    @abstractmethod
    def quote(self, identifier: str) -> str:
        """Quote one identifier so that any character in it is taken literally."""

    def resolve(
        self,
        address: QueueAddress,
        default_schema: str | None = None,
        current_catalog: str | None = None,
    ) -> QueueAddress:
        """Fill in the default schema and check the engine's limits (InvalidQueueName if they fail)."""
        schema = address.schema or default_schema or self.default_schema
        resolved = QueueAddress(address.table, schema, address.catalog)
        self.check_names(resolved, current_catalog)
        for kind, value in (
            ("queue", resolved.table),
            ("schema", resolved.schema),
            ("catalog", resolved.catalog),
        ):
            if value is None:
                continue
            length = len(value.encode("utf-8")) if self.identifier_length_in_bytes else len(value)
            if length > self.max_identifier_length:
                unit = "bytes of UTF-8" if self.identifier_length_in_bytes else "characters"
                raise InvalidQueueName(
                    f"{kind} name {value[:40]!r}... is {length} {unit} long; {self.display_name} "
                    f"identifiers are at most {self.max_identifier_length} {unit}"
                )
        return resolved

    def check_names(self, resolved: QueueAddress, current_catalog: str | None) -> None:
        """Raise InvalidQueueName for a name of ``resolved`` that this engine cannot hold or reach, other
        than by its length (:meth:`resolve` checks that); ``current_catalog``: the connected database."""

    def display_sql(self, sql: str) -> str:
        """A statement as a person would run it by hand (undoing driver-specific escaping)."""
        return sql

    def rows_per_statement(self, statement: Callable[[int], str], rows: int) -> int:
        """How many rows, up to ``rows``, one multi-row statement ``statement(n)`` may carry on this engine:
        all of them, unless the engine limits a statement's text (see BabelfishDialect)."""
        return rows

    @abstractmethod
    def qualified_name(self, address: QueueAddress) -> str:
        """The quoted, schema- (and catalog-) qualified table name of a resolved address."""

    def object_name(self, address: QueueAddress, suffix: str) -> str:
        """A name for an index or lock derived from the table, kept within the engine's identifier limit."""
        name = f"{address.table}_{suffix}"
        size = len(name.encode("utf-8")) if self.identifier_length_in_bytes else len(name)
        if size <= self.max_identifier_length:
            return name
        tail = f"~{short_hash(str(address))}_{suffix}"
        head = address.table
        while True:
            candidate = head + tail
            size = len(candidate.encode("utf-8")) if self.identifier_length_in_bytes else len(candidate)
            if size <= self.max_identifier_length:
                return candidate
            head = head[:-1]

    # ---- statements as data (statements.py) -----------------------------------------------------
    # This engine's named statements, the fragments they share, and its clock as the queue tables keep
    # time: what the placeholders of statements.py are filled with.
    statements: ClassVar[StatementTable]
    fragments: ClassVar[Mapping[str, str]] = {}
    clock: ClassVar[str]

    def sql(
        self, name: str, address: QueueAddress | None = None, /, rows: int | None = None, **values: str
    ) -> str:
        """Statement ``name`` of this engine, its placeholders filled: ``{table}`` from ``address``,
        ``{marks}`` as ``rows`` parameter markers, the rest from ``values`` and :attr:`fragments`."""
        texts = self.sql_list(name, address, rows, **values)
        if len(texts) != 1:
            raise TypeError(f"{self.display_name}'s {name} is {len(texts)} statements: use sql_list")
        return texts[0]

    def sql_list(
        self, name: str, address: QueueAddress | None = None, /, rows: int | None = None, **values: str
    ) -> list[str]:
        """Statement ``name`` as :meth:`sql` renders it, as a list: some are several statements where the
        engine cannot do in one what others do (SQLite cannot insert what a DELETE returns)."""
        template = self.statements.get(name)
        if template is None:
            raise NotImplementedError(f"{self.display_name} has no statement {name!r}")
        filled = {"p": self.placeholder, "now": self.clock}
        filled.update({key: text.format_map(filled) for key, text in self.fragments.items()}, **values)
        if address is not None:
            filled["table"] = self.qualified_name(address)
        if rows is not None:
            filled["marks"] = marks(self.placeholder, rows)
        return [text.format_map(filled) for text in ((template,) if isinstance(template, str) else template)]

    def fragment(self, name: str) -> str:
        """Fragment ``name`` of this engine's statements, its parameter marker and clock filled."""
        return self.fragments[name].format(p=self.placeholder, now=self.clock)

    def optional_sql(self, name: str, address: QueueAddress | None = None, /, **values: str) -> str | None:
        """:meth:`sql`, or None where this engine has no statement ``name``."""
        return self.sql(name, address, **values) if name in self.statements else None

    # ---- provisioning --------------------------------------------------------------------------
    @abstractmethod
    def create_table(self, address: QueueAddress, options: TableOptions) -> str: ...

    @abstractmethod
    def indexes(self, address: QueueAddress, options: TableOptions) -> list[IndexSpec]: ...

    @abstractmethod
    def lock_for_create(
        self, address: QueueAddress, current_catalog: str | None = None
    ) -> tuple[str, Sequence[Any]] | None:
        """A statement that serialises concurrent creators of the same queue inside the transaction.

        ``current_catalog`` is the connection's database (its statement ``current_catalog``), which names the
        lock where the address has no catalog of its own, so that every creator of the table agrees on it.
        """

    @abstractmethod
    def table_exists(self, address: QueueAddress) -> tuple[str, Sequence[Any]]:
        """A query whose first row's first value is not NULL exactly when the table exists."""

    @abstractmethod
    def index_exists(self, address: QueueAddress, index_name: str) -> tuple[str, Sequence[Any]]: ...

    @abstractmethod
    def column_exists(self, address: QueueAddress, column: str) -> tuple[str, Sequence[Any]]: ...

    def recoverable_default_missing(self, address: QueueAddress) -> tuple[str, Sequence[Any]] | None:
        """A query whose first row exists when the table has a Recoverable column without a default, which
        the reference's INSERT on this engine does not write; None where its INSERT writes the column."""
        return None

    def table_layout(self, cursor: Any, address: QueueAddress) -> str | None:
        """The layout (:attr:`layout`) of the existing table at ``address``, read from the catalog where
        the engine meets more than one; None when there is no table to tell."""
        return self.layout

    def begin_write(self) -> str | None:
        """A statement that starts a write transaction, where the driver does not start one itself."""
        return None

    def begin_read(self) -> str | None:
        """A statement that starts a transaction whose reads share one snapshot, where the driver does not
        start one itself."""
        return None

    # ---- runtime -------------------------------------------------------------------------------
    def send(self, address: QueueAddress, with_recoverable: bool = True) -> str:
        """INSERT of one message; parameters from :meth:`send_params`."""
        return self.send_batch(address, 1, with_recoverable)

    def send_batch(self, address: QueueAddress, rows: int, with_recoverable: bool = True) -> str:
        """A multi-row INSERT of ``rows`` messages; parameters are the rows' :meth:`send_params` chained.
        Tables from newer NServiceBus versions lack Recoverable: the fragments ``*_without_recoverable``."""
        shape = "" if with_recoverable else "_without_recoverable"
        return self._insert(address, shape, ", ".join([self.fragment("send_row" + shape)] * rows))

    def send_params(
        self,
        message_id: Any,
        correlation_id: str | None,
        reply_to_address: str | None,
        time_to_be_received: timedelta | None,
        headers: str,
        body: bytes,
    ) -> tuple[Any, ...]:
        """One message's parameters of :meth:`send_batch`, the time to be received as this engine binds it
        (:meth:`expires_params`)."""
        expires = self.expires_params(time_to_be_received)
        return (message_id, correlation_id, reply_to_address, *expires, headers, body)

    def expires_params(self, time_to_be_received: timedelta | None) -> tuple[Any, ...]:
        """The parameters of a send's Expires, which the database clock adds to (fragment ``send_row``)."""
        return (time_to_be_received,)

    def bulk_send_check(self, address: QueueAddress) -> tuple[str, Sequence[Any]] | None:
        """A query whose first value says whether :meth:`bulk_send` can write this table (None: never)."""
        return None

    def bulk_send(
        self, cursor: Any, address: QueueAddress, rows: Sequence[Sequence[Any]], with_recoverable: bool
    ) -> bool:
        """Write ``rows`` (:meth:`send_params` tuples) faster than multi-row INSERTs, in the cursor's
        transaction; False, having written nothing, where this engine, driver or batch has no such way."""
        return False

    def insert_raw(self, address: QueueAddress, with_recoverable: bool = True) -> str:
        """INSERT of a row exactly as it was read (poison rows to the error queue); see :meth:`raw_params`."""
        shape = "" if with_recoverable else "_without_recoverable"
        return self._insert(address, shape, self.fragment("raw_row" + shape))

    def _insert(self, address: QueueAddress, shape: str, values: str) -> str:
        columns = self.fragment("columns" + shape)
        channel = self.wake_up_channel(address) or ""
        return self.sql("insert", address, columns=columns, values=values, channel=channel)

    def raw_params(self, row: Row) -> tuple[Any, ...]:
        return (row.id, row.correlation_id, row.reply_to_address, row.headers, row.body)

    def receive_rows(
        self,
        cursor: Any,
        address: QueueAddress,
        statement: str,
        max_messages: int,
        after: int | None = None,
    ) -> list[Any]:
        """Run the receive (``statement`` is statement ``receive_batch``, or ``receive_batch_after``
        with ``after``) and return the deleted rows."""
        cursor.execute(statement, (max_messages,) if after is None else (after, max_messages))
        return self.received_rows(self.fetch_rows(cursor))

    def received_rows(self, rows: list[Any]) -> list[Any]:
        """The receive's rows as :class:`Row` takes them, where the statement cannot return them so."""
        return rows

    # Read-only browsing for tools (``sqlqueue peek`` and ``stats``): plain SELECTs that delete nothing.

    def queue_tables(self, schema: str | None) -> tuple[str, Sequence[Any]]:
        """Query listing (schema, table) of the tables in ``schema`` shaped like queue tables."""
        raise NotImplementedError(f"{self.display_name} cannot list queue tables")

    # Failed-message management (``transport.failed``): read in keyset pages, move or delete row by row.

    def failed_page_params(self, after: int, size: int) -> tuple[Any, ...]:
        return (after, size)

    def purge_returns_count(self) -> bool:
        """True when the purge statement returns its count as a row instead of through rowcount."""
        return False

    # Engines whose row locks ask for more than the runtime rights (PostgreSQL wants UPDATE) also have
    # ``<statement>_without_row_locks``: the same work with locks that need no table privilege.
    def row_lock_probe(self, address: QueueAddress) -> tuple[str, Sequence[Any]] | None:
        """Query answering whether this role may take row locks on the table (NULL when it is missing)."""
        return None

    def without_row_locks(self, name: str, address: QueueAddress) -> str:
        """Statement ``name`` (``receive_batch``, ``peek_estimate``, ``peek_bounds``,
        ``purge_expired_batch``) as a role without row-lock rights runs it: its ``_without_row_locks``
        form where the engine has one, else the statement itself."""
        own = f"{name}_without_row_locks"
        return self.sql(own if own in self.statements else name, address)

    @abstractmethod
    def inspect(self, cursor: Any, address: QueueAddress, options: TableOptions) -> list[Finding]:
        """Check the indexes and column types of an existing table; never raises for a finding."""

    def missing_indexes(self, address: QueueAddress, options: TableOptions, first: set[str]) -> list[Finding]:
        """A finding for each index of :meth:`indexes` whose column (``rowversion``, ``expires``) leads none
        of the table's indexes (``first``: their first columns, lower case)."""
        findings = []
        for spec in self.indexes(address, options):
            column = "rowversion" if spec.name.endswith("RowVersion") else "expires"
            if column not in first:
                purpose = (
                    "receiving and peeking read the oldest rows through it"
                    if column == "rowversion"
                    else "purging expired messages finds them through it"
                )
                message = f"Queue table {address} has no index on {column} ({purpose})."
                findings.append(Finding(f"missing_{column}_index", message, spec.create))
        return findings

    # ---- storage: what deleted rows leave behind (PostgreSQL's vacuum) -------------------------
    # Why a queue table on this engine needs no scheduled vacuum; empty where it may (PostgreSQL).
    storage_note: ClassVar[str] = ""

    def table_storage(self, cursor: Any, address: QueueAddress) -> TableStorage:
        """Storage figures and maintenance advice for an existing table, read from the catalog and the
        statistics views; never raises for what the role may not read."""
        return TableStorage(applicable=False, note=self.storage_note)

    def vacuum_check(self, address: QueueAddress) -> tuple[str, Sequence[Any]] | None:
        """Query returning (may this role vacuum the table, its size in bytes with indexes); None where
        the engine has no ``vacuum_table`` statement."""
        return None

    def rowversion_index_is_clustered(self, cursor: Any, address: QueueAddress) -> bool | None:
        """Whether RowVersion leads a clustered index (SQL Server's ``clustered`` layout), read from the
        catalog; None where the engine has no such choice or its catalog cannot tell."""
        return None

    # ---- delayed delivery (the ``<endpoint>.Delayed`` table) -----------------------------------

    def delayed_indexes(self, address: QueueAddress) -> list[IndexSpec]:
        """The index on Due that the mover and the next-due query read through."""
        return [self.index_spec(address, "Due", "create_delayed_index")]

    @abstractmethod
    def store_delayed_params(
        self, headers: str, body: bytes, deliver_at: datetime | None, delay: timedelta | None
    ) -> tuple[Any, ...]:
        """Parameters of statement ``store_delayed``: exactly one of ``deliver_at`` (aware UTC) and
        ``delay``."""

    def move_delayed_rows(
        self,
        address: QueueAddress,
        destination: QueueAddress,
        rows: int,
        with_recoverable: bool,
        delayed_layout: str = "sqlserver-transport",
    ) -> list[str]:
        """Statements that move the delayed rows whose RowVersions are the ``rows`` parameters (each
        statement takes the same ones) into ``destination`` without leaving the server: Headers and Body
        exactly as stored, a new Id (as the reference's ``NEWID()``), CorrelationId, ReplyToAddress and
        Expires NULL, inserted in Due order where the engine keeps an INSERT's order. More than one
        statement only where the engine cannot insert what a DELETE returns; their row counts must
        then agree, or another writer took some of the rows. From a delayed table of ``delayed_layout``
        ``postgresql-transport`` the parameters are its rows' Ids, and each message keeps its row's Id."""
        shape = "" if with_recoverable else "_without_recoverable"
        return self.sql_list(
            "move_delayed_rows" if delayed_layout == "sqlserver-transport" else "move_reference_delayed_rows",
            address,
            rows,
            destination=self.qualified_name(destination),
            columns=self.fragment("columns" + shape),
            recoverable=self.fragment("true") + ", " if with_recoverable else "",
        )

    @abstractmethod
    def try_lock_delayed_mover(self, address: QueueAddress) -> tuple[str, Sequence[Any]] | None:
        """Try, without waiting, to take the session-level lock that elects the one mover of a delayed
        table; the first value of the first row is >= 0 when granted. None where the engine's write lock
        already lets only one mover run at a time (each move then starts with :meth:`begin_write`)."""

    @abstractmethod
    def unlock_delayed_mover(self, address: QueueAddress) -> tuple[str, Sequence[Any]] | None:
        """Release the lock of :meth:`try_lock_delayed_mover` (closing the session releases it too)."""

    def index_spec(self, address: QueueAddress, column: str, statement: str) -> IndexSpec:
        """The index on ``column`` that ``statement`` creates: named from the table (within the engine's
        identifier limit) unless the engine's name for it is fixed (fragment ``<column>_index``)."""
        name = self.fragments.get(f"{column}_index") or self.object_name(address, column)
        index, on = self.index_names(address, name)
        return IndexSpec(name, self.sql(statement, index=index, on=on))

    def index_names(self, address: QueueAddress, name: str) -> tuple[str, str]:
        """``{index}`` and ``{on}`` of an index's DDL: its quoted name and its table (SQLite names the
        schema with the index instead)."""
        return self.quote(name), self.qualified_name(address)

    # ---- the archive beside an error queue (``transport/archive.py``) ----------------------------

    def archive_indexes(self, address: QueueAddress) -> list[IndexSpec]:
        """The index on ArchivedAt that the purge by age reads through."""
        return [self.index_spec(address, "ArchivedAt", "create_archive_index")]

    def archive_failed_row(
        self, address: QueueAddress, archive: QueueAddress, with_recoverable: bool = True
    ) -> list[str]:
        """Statements that move the error-queue row whose RowVersion is the parameter (each statement takes
        it) into ``archive`` without leaving the server, in the caller's transaction. The last one returns
        how many rows it moved as :meth:`purge_returns_count` says: one row holding the count, or (where
        that is False) one row per row moved. Nothing moves when another session took the row first."""
        shape = "" if with_recoverable else "_without_recoverable"
        return self.sql_list(
            "archive_failed_row",
            address,
            archive=self.qualified_name(archive),
            recoverable=self.fragment("archived_recoverable" + shape),
        )

    def restore_archived(
        self, address: QueueAddress, archive: QueueAddress, with_recoverable: bool = True
    ) -> list[str]:
        """The reverse of :meth:`archive_failed_row`: statements that move the archived rows whose Id is the
        parameter (each statement takes it; a message archived twice has two rows) from ``archive`` back
        into the error queue ``address`` without leaving the server, in the caller's transaction. Each gets
        a new RowVersion; Id, CorrelationId, ReplyToAddress, Expires, Headers and Body as archived, and
        Recoverable where the error queue has the column. The last statement returns one row holding how
        many rows moved (0 when the Id is not archived, or another session restored it first)."""
        shape = "" if with_recoverable else "_without_recoverable"
        return self.sql_list(
            "restore_archived",
            address,
            archive=self.qualified_name(archive),
            columns=self.fragment("columns" + shape),
            recoverable=self.fragment("restored_recoverable") + ", " if with_recoverable else "",
        )

    def browse_archive_params(self, offset: int, size: int) -> tuple[Any, ...]:
        return (size, offset)

    def purge_archive_params(self, older_than_seconds: int, size: int) -> tuple[Any, ...]:
        return (older_than_seconds, size)

    # ---- the depth history of a schema's queues (``transport/depth_samples.py``) ------------------
    def depth_sample_params(
        self, queue_name: str, minute: int, messages: int, exact: bool, failed: int | None
    ) -> tuple[Any, ...]:
        """record_depth_sample's parameters: one sample of ``queue_name`` (a table name) at ``minute``."""
        return (queue_name, minute, messages, exact, failed)

    # ---- native publish/subscribe (``transport/subscriptions.py``) -------------------------------
    # The subscription table has the reference's three columns, QueueAddress, Endpoint and Topic
    # (SUBSCRIPTION_COLUMN_LENGTH characters each, all NOT NULL), keyed by (Endpoint, Topic): one row per
    # subscribing endpoint and topic, naming the queue that endpoint receives the topic's events in.
    def create_subscription_table(self, address: QueueAddress) -> str:
        """DDL of the subscription table: QueueAddress, Endpoint, Topic, primary key (Endpoint, Topic)."""
        return self.sql("create_subscription_table", address, width=str(SUBSCRIPTION_COLUMN_LENGTH))

    def subscribe_params(self, endpoint: str, topic: str, queue_address: str) -> tuple[Any, ...]:
        return (endpoint, topic, queue_address)

    def select_subscriptions(
        self, address: QueueAddress, by_topic: bool, by_endpoint: bool, limited: bool = False
    ) -> str:
        """QueueAddress, Endpoint, Topic of every row (or of one topic, one endpoint), ordered by Topic then
        Endpoint; with ``limited`` the first N only. Parameters from :meth:`select_subscriptions_params`."""
        wanted = ((self.fragment("by_topic"), by_topic), (self.fragment("by_endpoint"), by_endpoint))
        conditions = [text for text, given in wanted if given]
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        limit = self.fragment("limit") if limited else ""
        return self.sql("select_subscriptions", address, where=where, limit=limit)

    def select_subscriptions_params(self, filters: tuple[str, ...], limit: int | None) -> tuple[Any, ...]:
        """The listing's parameters: the topic and endpoint filtered on (those given), then the limit."""
        return filters if limit is None else (*filters, limit)

    def is_duplicate_key(self, error: BaseException) -> bool:
        """True when a statement failed on a primary key or unique index (a concurrent subscriber won)."""
        return False

    # ---- push wake-up -------------------------------------------------------------------------
    def wake_up_channel(self, address: QueueAddress) -> str | None:
        """The channel a committed send to ``address`` notifies, or None where the engine has no push
        notification (receivers poll)."""
        return None

    def notify_statement(self, address: QueueAddress) -> str | None:
        """A statement that notifies the queue's receivers when its transaction commits (for writes that
        cannot carry the notification themselves, such as a bulk copy or the delayed mover's move)."""
        return None

    def listen_statement(self, address: QueueAddress) -> str | None:
        """The statement a wake-up listener runs on its own connection to hear sends to ``address``."""
        return None

    def wait_for_notification(self, connection: Any, timeout: float) -> bool:
        """Block on a listening connection until a notification arrives (True) or ``timeout`` passes."""
        raise NotImplementedError(f"{self.display_name} has no push notification")

    # ---- savepoints: one message of a batch inside the batch's transaction ----------------------
    # Whether a batching pump releases each message's savepoint (with the next message's mark) or lets the
    # next nest inside it until the batch's commit. SQLite writes a nested savepoint's pages to its
    # statement journal again at every level (slower than a release and a mark, measured); PostgreSQL
    # runs a SAVEPOINT alone faster than a RELEASE and a SAVEPOINT (benchmarks/pump_savepoint_bench.py).
    releases_message_savepoints: ClassVar[bool] = True

    def savepoint(self, name: str) -> str:
        """Mark a savepoint in the open transaction (a batching pump's message, before its handler's
        writes)."""
        return self.sql("savepoint", name=self.quote(name))

    def rollback_to_savepoint(self, name: str) -> str:
        """Undo what ran since :meth:`savepoint`, keeping the transaction; fails where the transaction
        is gone (the engine rolled it back), which the caller takes as the whole transaction's failure."""
        return self.sql("rollback_to_savepoint", name=self.quote(name))

    def release_savepoint(self, name: str) -> str | None:
        """Forget the savepoint, keeping its work in the transaction; None where the engine has no
        statement for it (the savepoint then ends with the transaction)."""
        return self.optional_sql("release_savepoint", name=self.quote(name))

    # ---- driver glue ---------------------------------------------------------------------------
    # The DB-API connection class of this dialect's driver as "module.Class": a caller's connection of
    # another class is refused before a statement in this dialect's parameter style runs on it.
    driver_connection_class: ClassVar[str] = ""
    # What a pyodbc connection's SQL_DBMS_NAME says for this engine (pyodbc reaches several engines).
    odbc_dbms_name: ClassVar[str | None] = None
    # SQLAlchemy's dialect for this engine and driver (wrapping a transport connection for a handler);
    # None where SQLAlchemy has none.
    sqlalchemy_dialect: ClassVar[str | None] = None

    def row_id(self, value: Any) -> Any:
        """Convert a uuid.UUID to what the driver binds for the Id column."""
        return value

    def prepare_connection(self, connection: Any) -> None:
        """Session settings run once per new connection."""
        return None

    def rollback(self, connection: Any) -> None:
        """Roll back the connection's transaction (also what the pool runs when a connection returns)."""
        connection.rollback()

    def prepare_handed_out_connection(self, connection: Any) -> None:
        """Put a new connection the package hands to a caller (``Transport.new_connection``) into the
        DB-API's ordinary transactional mode, where its statements commit only with ``commit()``: the
        transport's own connections may run otherwise (SQLite's begin their transactions explicitly).
        Nothing to do where :meth:`prepare_connection` already turned autocommit off."""
        return None

    def session_defaults(self, connection: Any) -> Any:
        """What :meth:`reset_session` restores that only the connection itself can tell (read once, on
        each new pooled connection after :meth:`prepare_connection`); None where the reset restores fixed
        values or the session's own defaults."""
        return None

    def reset_session(self, connection: Any, defaults: Any) -> None:
        """Restore the session of a pooled connection, just rolled back, to what :meth:`prepare_connection`
        set up (``defaults`` is what :meth:`session_defaults` read): code the package does not own (a
        handler) may have changed its isolation level, search path, role, timeouts or ``SET`` options, which
        would otherwise stay with the connection into every later send and receive. Leaves no transaction
        open. Nothing here: a dialect with session state restores it."""
        return None

    def server_variant(self, connection: Any) -> str | None:
        """The name of the variant of this dialect the server behind ``connection`` needs, or None for this
        dialect itself (asked once per transport, on its first connection; see
        :func:`airflow_provider_sqlqueue.dialects.dialect_for_server`)."""
        return None

    @abstractmethod
    def classify(self, error: BaseException, address: QueueAddress | None = None) -> SqlQueueError | None:
        """Translate a driver error into the transport's errors, or None if it is not the driver's."""

    def is_connection_lost(self, error: BaseException) -> bool:
        """True when the connection that raised this can no longer be used."""
        return False

    def is_recoverable_column_error(self, error: BaseException) -> bool:
        """True when an INSERT failed because the table's Recoverable column appeared or went away."""
        text = " ".join(str(arg) for arg in getattr(error, "args", ())).lower()
        return "recoverable" in text and any(
            marker in text
            for marker in (
                "no column",
                "does not exist",
                "not-null",
                "not null",
                "invalid column",
                "null into",
            )
        )

    def is_already_exists(self, error: BaseException) -> bool:
        """True for "object already exists" errors that a concurrent creator can cause despite the lock."""
        return False

    def is_deadlock(self, error: BaseException) -> bool:
        """True when the driver error chose this statement as a deadlock victim (retried, never counted
        as a failure by circuit breakers)."""
        return False

    def fetch_rows(self, cursor: Any) -> list[Any]:
        """Fetch the current result set's rows and drain any further result sets, so late errors surface."""
        rows = cursor.fetchall() if cursor.description is not None else []
        return rows


def fetch_over_odbc(cursor: Any) -> list[Any]:
    """The rows of the first result set that has any (a batch's SET or DECLARE answer none) and the other
    result sets drained, so that an error the server raises late surfaces here (pyodbc)."""
    while cursor.description is None:
        if not cursor.nextset():
            return []
    rows = cursor.fetchall()
    while cursor.nextset():
        pass
    return rows  # type: ignore[no-any-return]


def timedelta_to_seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()
