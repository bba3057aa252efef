"""A queue table's lifecycle: create it (idempotently, from many processes at once), script its DDL for a
DBA, check it exists, inspect its indexes and column types, drop it.

These need DDL rights, or only read the catalog; the send and receive paths never run them, except the
existence check that tells a missing table from another failure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ...dialects import dialect_for_layout, dialect_for_table
from ...dialects.base import Dialect, Finding, TableOptions
from ...dialects.index_spec import IndexSpec
from ...model.address import QueueAddress
from ...model.errors import ConfigurationError, PermissionDenied, QueueNotFound, TransientDatabaseError

if TYPE_CHECKING:
    from ..roles import ConnectingTransport, ProvisioningTransport

__all__ = [
    "begin_creation",
    "create_side_table",
    "create_table",
    "drop_table",
    "first_value",
    "inspect_table",
    "table_exists",
    "table_exists_on",
    "table_options",
    "table_script",
]

# The log lines keep the name they had before the split: airflow_provider_sqlqueue.transport.queue
# (the command line's inspect silences it while it prints the findings itself).
log = logging.getLogger(__package__)


def table_options(options: TableOptions | None, overrides: dict[str, Any]) -> TableOptions:
    """``options``, or a :class:`TableOptions` made of the keyword ``overrides``; not both."""
    if options is not None and overrides:
        raise ConfigurationError("pass either a TableOptions or its fields as keywords, not both")
    try:
        return options or TableOptions(**overrides)
    except (TypeError, ValueError) as error:
        raise ConfigurationError(str(error)) from None


def first_value(cursor: Any, dialect: Dialect) -> Any:
    """The first column of the first row the last statement returned, or None."""
    rows = dialect.fetch_rows(cursor)
    return rows[0][0] if rows else None


def table_exists_on(cursor: Any, dialect: Dialect, address: QueueAddress) -> bool:
    """Whether the table at ``address`` exists, asked on an open cursor (inside its transaction)."""
    cursor.execute(*dialect.table_exists(address))
    return first_value(cursor, dialect) is not None


def begin_creation(
    cursor: Any, dialect: Any, address: QueueAddress, current_catalog: str | None = None
) -> None:
    """Start a write transaction and take the lock that serialises creators of the same table.

    ``current_catalog`` is the transport's database where it is known; else the lock's name asks for it.
    """
    begin = dialect.begin_write()
    if begin:
        cursor.execute(begin, ())
    opening = dialect.optional_sql("open_transaction")
    if opening:
        cursor.execute(opening)  # no parameters: a plain batch, never a procedure call
    catalog = current_catalog
    query = None if address.catalog or catalog else dialect.optional_sql("current_catalog")
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


def create_table(
    transport: ProvisioningTransport,
    address: QueueAddress,
    options: TableOptions,
    *,
    add_missing_indexes: bool = False,
) -> bool:
    """Create the table and its indexes if missing; True when this call created the table.

    On a table that already exists, a missing index is only reported (a warning with its statement) unless
    ``add_missing_indexes``: building an index on a table that receivers are using blocks them while it
    builds (SQL Server builds it offline), so that is a step to choose, not a side effect of provisioning.
    """
    return create_racing(
        transport.dialect,
        lambda: _create_once(transport, address, options, add_missing_indexes),
        f"queue {address}",
    )


def create_racing(dialect: Dialect, create_once: Callable[[], bool], what: str) -> bool:
    """``create_once()``, run once more when another process created the same table between its check and
    its ``CREATE`` (the engine's "already exists"): the second run finds the table. Its result: whether
    this call created it."""
    try:
        return create_once()
    except Exception as error:
        if not dialect.is_already_exists(error.__cause__ or error):
            raise
    log.info("%s was created concurrently; checking again", what)
    return create_once()


def create_side_table(
    transport: ProvisioningTransport,
    address: QueueAddress,
    create: str,
    what: str,
    indexes: Sequence[IndexSpec] = (),
) -> bool:
    """Create a table beside the queues (the delayed table, an error queue's archive, the subscriptions, the
    depth history) with ``create`` and any of ``indexes`` it lacks, in one transaction holding the
    creators' lock (:func:`begin_creation`), run once more when another process won the race
    (:func:`create_racing`). ``what`` names the table in the log. True when this call created it."""
    dialect = transport.dialect

    def create_once() -> bool:
        with transport.connection(address) as connection:
            cursor = connection.cursor()
            begin_creation(cursor, dialect, address, transport.current_catalog())
            created = not table_exists_on(cursor, dialect, address)
            if created:
                cursor.execute(create, ())
            for index in indexes:
                cursor.execute(*dialect.index_exists(address, index.name))
                if not dialect.fetch_rows(cursor):
                    cursor.execute(index.create, ())
            connection.commit()
        if created:
            log.info("created %s", what)
        return created

    return create_racing(dialect, create_once, what)


def _create_once(
    transport: ProvisioningTransport, address: QueueAddress, options: TableOptions, add_missing_indexes: bool
) -> bool:
    dialect = transport.dialect
    left: list[str] = []
    with transport.connection(address) as connection:
        cursor = connection.cursor()
        begin_creation(cursor, dialect, address, transport.current_catalog())
        created = not table_exists_on(cursor, dialect, address)
        if created:
            dialect = layout_dialect(dialect, options)
            cursor.execute(dialect.create_table(address, options), ())
        else:  # an existing table keeps its layout, whatever the options ask for
            dialect = dialect_for_table(dialect, cursor, address) or dialect
        for index in dialect.indexes(address, options):
            if not created:
                cursor.execute(*dialect.index_exists(address, index.name))
                if first_value(cursor, dialect):
                    continue
                if not add_missing_indexes:
                    left.append(dialect.display_sql(index.create))
                    continue
                log.warning("adding the missing index %s to the existing queue %s", index.name, address)
            cursor.execute(index.create, ())
        if options.body_string and not created:
            cursor.execute(*dialect.column_exists(address, "BodyString"))
            if not first_value(cursor, dialect):
                cursor.execute(dialect.sql("add_body_string", address), ())
        if not created:
            _give_recoverable_its_default(cursor, dialect, address)
        connection.commit()
    if created:
        log.info("created queue %s", address)
    for statement in left:
        log.warning(
            "queue %s exists without the index this statement makes; create() left it out because building "
            "it blocks the receivers using the table. Run it in a quiet window, or ask for it (create(..., "
            "add_missing_indexes=True), `sqlqueue create --add-missing-indexes`, or the provision operator's "
            "add_missing_indexes=True): %s",
            address,
            statement,
        )
    return created


def _give_recoverable_its_default(cursor: Any, dialect: Dialect, address: QueueAddress) -> None:
    """Give an existing table's Recoverable column the default a new table has, where the engine's reference
    INSERT leaves the column out (PostgreSQL): a catalog change, made last in the creation's transaction.
    When open transactions hold the table past the dialect's bounded wait, it is undone and logged with its
    statement; the next create() tries again."""
    check = dialect.recoverable_default_missing(address)
    if check is None:
        return
    cursor.execute(*check)
    if not first_value(cursor, dialect):
        return
    statements = dialect.sql_list("set_recoverable_default", address)
    try:
        for statement in statements:
            cursor.execute(statement, ())
    except Exception as error:
        refused = dialect.classify(error, address)
        if not isinstance(refused, TransientDatabaseError | PermissionDenied):
            raise
        cursor.execute(dialect.sql("set_recoverable_default_failed"), ())
        alter = next(dialect.display_sql(text) for text in statements if text.startswith("ALTER"))
        why = (
            "this role may not alter the table (its owner may)"
            if isinstance(refused, PermissionDenied)
            else "open transactions held the table; run it when receivers are idle, or call create() again"
        )
        log.warning(
            "queue %s has a Recoverable column without a default, so .NET PostgreSQL endpoints cannot send "
            "to it; create() left it: %s: %s",
            address,
            why,
            alter,
        )
        return
    log.info("gave the Recoverable column of queue %s its default (true)", address)


def layout_dialect(dialect: Dialect, options: TableOptions) -> Dialect:
    """The dialect that creates a new table in the options' ``column_layout``; ConfigurationError where the
    engine has no such layout."""
    try:
        return dialect_for_layout(dialect, options.column_layout)
    except ValueError as error:
        raise ConfigurationError(str(error)) from None


def table_script(dialect: Dialect, address: QueueAddress, options: TableOptions) -> str:
    """The DDL that :func:`create_table` runs for a new table, as a script a DBA can review and run."""
    dialect = layout_dialect(dialect, options)
    statements = [dialect.create_table(address, options)]
    statements += [index.create for index in dialect.indexes(address, options)]
    return "".join(f"{dialect.display_sql(statement)};\n" for statement in statements)


def table_exists(transport: ConnectingTransport, address: QueueAddress) -> bool:
    with transport.connection(address) as connection:
        found = table_exists_on(connection.cursor(), transport.dialect, address)
        connection.commit()
        return found


def drop_table(transport: ConnectingTransport, address: QueueAddress) -> None:
    with transport.connection(address) as connection:
        connection.cursor().execute(transport.dialect.sql("drop_table", address), ())
        connection.commit()
    log.info("dropped queue %s", address)


def inspect_table(
    transport: ConnectingTransport, address: QueueAddress, options: TableOptions
) -> list[Finding]:
    """Check indexes and column types; log a warning with the fixing statement for each finding."""
    dialect = transport.dialect
    with transport.connection(address) as connection:
        cursor = connection.cursor()
        if not table_exists_on(cursor, dialect, address):
            raise QueueNotFound(f"queue {address} does not exist")
        dialect = dialect_for_table(dialect, cursor, address) or dialect
        findings = [
            Finding(f.code, f.message, dialect.display_sql(f.fix))
            for f in dialect.inspect(cursor, address, options)
        ]
        connection.commit()
    for finding in findings:
        log.warning("%s Fix: %s", finding.message, finding.fix)
    return findings
