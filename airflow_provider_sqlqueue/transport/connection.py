"""Opening a transport from a URL: the engine's dialect, a driver connection factory and a small pool.

URLs follow SQLAlchemy's form (parsed with SQLAlchemy's own ``make_url``), so passwords may be
percent-encoded and nothing is split by hand:

- ``sqlite:///relative/queues.db``, ``sqlite:////absolute/queues.db`` (``?timeout=30&synchronous=full``)
- ``postgresql://user:password@host:5432/db`` (``postgresql+psycopg://`` too; any libpq option as a query)
- ``mssql+pyodbc://user:password@host:1433/db?driver=ODBC+Driver+18+for+SQL+Server``,
  ``mssql+pyodbc:///?odbc_connect=<percent-encoded ODBC string>``, or a bare ODBC connection string
  ``DRIVER={...};SERVER=...;DATABASE=...``
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from ..dialects import Dialect, dialect_for_server, get_dialect
from ..model.address import QueueAddress
from ..model.errors import ConfigurationError
from .connection_factory import ConnectionFactory, ask_factory
from .lease import ConnectionLease
from .odbc_string import driver_manager_raw_pairs, odbc_pairs, odbc_value, parse_odbc_string, render_odbc
from .pool import ConnectionPool, PooledConnection
from .publishing import PublishResult, publish
from .queue import TableQueue
from .subscriptions import SubscriptionSettings, SubscriptionStore, subscription_settings

if TYPE_CHECKING:
    from .message import OutgoingMessage

log = logging.getLogger(__name__)

LockMode = Literal["auto", "row", "advisory"]

__all__ = [
    "Transport",
    "odbc_connection_string",
    "odbc_pairs",
    "odbc_value",
    "open_transport",
    "parse_odbc_string",
]

DEFAULT_ODBC_DRIVER = "ODBC Driver 18 for SQL Server"


def odbc_connection_string(url: URL) -> str:
    """Build the ODBC connection string of an ``mssql+pyodbc://`` URL."""
    query = {key: value if isinstance(value, str) else value[-1] for key, value in url.query.items()}
    if "odbc_connect" in query:
        return query.pop("odbc_connect")
    parts: dict[str, str] = {}
    driver = query.pop("driver", DEFAULT_ODBC_DRIVER)
    if (
        url.host
        and url.port is None
        and url.database is None
        and "." not in url.host
        and "\\" not in url.host
    ):
        parts["DSN"] = url.host
    else:
        parts["DRIVER"] = driver
        server = url.host or "localhost"
        parts["SERVER"] = f"{server},{url.port}" if url.port else server
        if url.database:
            parts["DATABASE"] = url.database
    if url.username:
        parts["UID"] = url.username
    if url.password is not None:
        parts["PWD"] = str(url.password)
    parts.update(query)
    return render_odbc((key, str(value)) for key, value in parts.items())


class Transport:
    """A database holding queue tables: its dialect, a connection pool and the queues opened on it.

    Thread-safe; open one per process (after a fork, open a new one). Use as a context manager or call
    :meth:`close` to close the pooled connections.
    """

    def __init__(
        self,
        dialect: Dialect,
        connect: Callable[[], Any],
        *,
        description: str,
        database: str | None = None,
        default_schema: str | None = None,
        error_queue: str | None = "error",
        pool_size: int = 5,
        max_overflow: int = 10,
        pool_timeout: float = 30.0,
        max_body_bytes: int | None = None,
        lock_mode: LockMode = "auto",
        subscriptions: SubscriptionSettings | None = None,
    ) -> None:
        self.subscription_settings = subscription_settings(subscriptions)
        if lock_mode not in ("auto", "row", "advisory"):
            raise ConfigurationError(f"lock_mode must be 'auto', 'row' or 'advisory', not {lock_mode!r}")
        if pool_size < 1 or max_overflow < 0:
            raise ConfigurationError(
                f"pool_size must be at least 1 and max_overflow at least 0, not {pool_size} and "
                f"{max_overflow}"
            )
        self.dialect = dialect
        self.lock_mode = lock_mode
        self.description = description
        self.database = database
        self.default_schema = default_schema
        self.error_queue = error_queue
        self.max_body_bytes = min(max_body_bytes or dialect.max_body_bytes, dialect.max_body_bytes)
        self.pool_size = pool_size + max_overflow

        self._variant_known = False
        # The connection string's database wins without a query; else the first connection asks once.
        # SQLite has no catalog (its "database" is the file).
        has_catalog = dialect.optional_sql("current_catalog") is not None
        self._catalog = database if has_catalog else None
        self._catalog_known = database is not None or not has_catalog
        self._catalog_lock = threading.Lock()
        self.catalog_lookups = 0  # current-database queries run: at most one per transport

        def create() -> Any:
            connection = connect()
            try:
                dialect.prepare_connection(connection)
                if not self._variant_known:
                    self.dialect = dialect_for_server(dialect, connection)
                    self._variant_known = True
                if not self._catalog_known:
                    self._look_up_catalog(connection)
            except BaseException:
                connection.close()
                raise
            return connection

        self._create = create
        self._pool = ConnectionPool(
            create,
            self._reset_returned,
            size=pool_size,
            overflow=max_overflow,
            timeout=pool_timeout,
            reset_session=lambda connection, defaults: self.dialect.reset_session(connection, defaults),
            remember_session=lambda connection: self.dialect.session_defaults(connection),
        )
        self._queues: dict[tuple[str, str | None], Any] = {}
        self._subscriptions: SubscriptionStore | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<Transport {self.description}>"

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._pool.dispose()

    def _reset_returned(self, connection: Any) -> None:
        """What a connection coming back to the pool goes through: the dialect's rollback (read at each
        return, since the first connection may switch the dialect to the server's variant)."""
        self.dialect.rollback(connection)

    @property
    def reset_every_session(self) -> bool:
        """Whether every returned connection has its session restored, not only those lent to a handler
        (``PooledConnection.lend_to_user``): a round trip on a server (benchmarks/session_reset_bench.py)."""
        return self._pool.reset_every_session

    @reset_every_session.setter
    def reset_every_session(self, value: bool) -> None:
        self._pool.reset_every_session = bool(value)

    def new_connection(self) -> Any:
        """A new DB-API connection outside the pool, as the pool's but in the driver's transactional mode on
        every engine (SQLite: ``isolation_level="IMMEDIATE"``): what runs on it, and a send given it as
        ``connection=``, commits only with the caller's ``commit()``. The caller closes it."""
        try:
            connection = self._create()
        except Exception as error:
            translated = self.dialect.classify(error)
            if translated is None:
                raise
            raise translated from error
        self.dialect.prepare_handed_out_connection(connection)  # sets attributes: nothing to close after
        return connection

    def _look_up_catalog(self, connection: Any) -> None:
        """Ask a new connection for its current database, once per transport (DB_NAME(),
        current_database(): no privilege needed)."""
        with self._catalog_lock:
            if self._catalog_known:
                return
            query = self.dialect.optional_sql("current_catalog")
            if query is not None:
                cursor = connection.cursor()
                try:
                    cursor.execute(query)
                    rows = self.dialect.fetch_rows(cursor)
                finally:
                    cursor.close()
                connection.rollback()
                self.catalog_lookups += 1
                self._catalog = str(rows[0][0]) if rows and rows[0][0] is not None else None
            self._catalog_known = True

    def current_catalog(self) -> str | None:
        """The database the queues live in: the connection string's, else what the first connection
        answered; None on SQLite, which has no catalog. Connects only if nothing has connected yet."""
        if not self._catalog_known:
            with self.connection():
                pass
        return self._catalog

    def resolve(self, address: str | QueueAddress) -> QueueAddress:
        """Parse an address, fill in the default schema and check it against this engine's limits.

        A catalog equal to the transport's own database is dropped, so ``q@[dbo]@[sales]`` on a transport
        opened on ``sales`` is the same queue as ``q@[dbo]``, under the same two-part SQL name.
        """
        parsed = QueueAddress.parse(address)
        current = self._catalog if self._catalog_known else None
        if (
            parsed.catalog is not None
            and not self._catalog_known
            and self.dialect.optional_sql("current_catalog")
        ):
            current = self.current_catalog()
        resolved = self.dialect.resolve(parsed, self.default_schema, current)
        if resolved.catalog is not None and resolved.catalog == current:
            return QueueAddress(resolved.table, resolved.schema)
        return resolved

    def canonical(self, address: str | QueueAddress) -> QueueAddress:
        """The address as the headers and subscription rows carry it (ReplyToAddress, FailedQ,
        ForwardDestination, QueueAddress), in the form a .NET endpoint on the engine parses: on SQL Server
        always with its catalog (``q@[dbo]@[sales]``), as the reference writes and .NET endpoints in other
        catalogs need; on PostgreSQL ``"public"."q"``, as the reference's PostgreSQL transport writes
        (its parser would take ``q@[public]`` for a table of that name)."""
        resolved = self.resolve(address)
        if self.dialect.addresses_quoted:
            return resolved.in_quoted_form()
        if not self.dialect.addresses_carry_catalog or resolved.catalog is not None:
            return resolved
        catalog = self.current_catalog()
        return resolved if catalog is None else QueueAddress(resolved.table, resolved.schema, catalog)

    def queue(self, address: str | QueueAddress, *, error_queue: str | object | None = ...) -> TableQueue:
        """The queue at ``address`` (``table@[schema]@[catalog]``); InvalidQueueName at once if invalid.

        Poison rows (unparseable headers) move to ``error_queue``, by default the transport's (``error``).
        """
        target = self.error_queue if error_queue is ... else error_queue
        resolved = self.resolve(address)
        key = (str(resolved), None if target is None else str(target))
        with self._lock:
            queue = self._queues.get(key)
            if queue is None:
                error_address = None if target is None else self.resolve(str(target))
                queue = TableQueue(self, resolved, error_address)
                self._queues[key] = queue
        return queue

    def connection(self, address: QueueAddress | None = None) -> AbstractContextManager[PooledConnection]:
        """A pooled DB-API connection, as a context manager; driver errors come out translated into the
        transport's errors.

        A connection that failed in a way that makes it unusable is discarded instead of returned.
        """
        return ConnectionLease(self, self._pool, address)

    # ---- publish/subscribe -----------------------------------------------------------------------
    @property
    def subscriptions(self) -> SubscriptionStore:
        """The subscription table of native publish/subscribe (see :mod:`.subscriptions`), at the place
        and with the cache the transport was opened with (``subscriptions=SubscriptionSettings(...)``);
        one store per transport, so every publish shares its lookup cache."""
        store = self._subscriptions
        if store is None:
            with self._lock:
                store = self._subscriptions
                if store is None:
                    store = self._subscriptions = SubscriptionStore(self, self.subscription_settings)
        return store

    def publish(
        self,
        topic: str | type,
        message: OutgoingMessage | bytes | str,
        headers: Mapping[str, str | None] | None = None,
        *,
        base_topics: Iterable[str] = (),
        time_to_be_received: timedelta | None = None,
        connection: Any = None,
    ) -> PublishResult:
        """Send ``message`` once to each distinct queue subscribed to ``topic`` (a string, or a class and
        its bases) or to one of ``base_topics``, all in one transaction; with ``connection`` in that
        connection's transaction, uncommitted (as :meth:`TableQueue.send`). Nothing is sent, and that is
        logged, when nobody subscribed. See :mod:`.publishing`."""
        return publish(
            self,
            topic,
            message,
            headers,
            base_topics=base_topics,
            time_to_be_received=time_to_be_received,
            connection=connection,
        )


def _enable_wal(connection: Any, timeout: float) -> None:
    """Switch the file to WAL once; SQLite answers "locked" at once, without waiting, while another
    connection holds a transaction, so retry within the busy timeout."""
    import sqlite3

    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            if connection.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                return
            connection.execute("PRAGMA journal_mode=WAL").fetchall()
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error).lower() or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)


def _check_sqlite_file(connection: Any, path: Path) -> None:
    """Refuse a factory's SQLite connection on another file than the URL's: its queues would be others."""
    rows = connection.execute("PRAGMA database_list").fetchall()
    opened = next((str(row[2]) for row in rows if row[1] == "main"), "")
    if not opened or Path(opened).resolve() != path.resolve():
        raise ConfigurationError(
            f"the transport's connection factory returned a SQLite connection on {opened or 'no file'!r}, "
            f"not on the URL's file {str(path)!r}"
        )


def sqlite_uri(path: Path, mode: str) -> str:
    """``path`` as a SQLite URI filename with ``mode`` (``rw`` opens an existing file only, ``rwc`` creates
    it): absolute and percent-quoted, since a ``?``, ``#`` or ``%`` in a file name would otherwise end the
    path or change it, and after ``file://`` (an empty authority) so that a path beginning ``//`` stays
    one."""
    from urllib.parse import quote

    return f"file://{quote(str(path.absolute()), safe='/')}?mode={mode}"


def missing_sqlite_file(path: Path) -> ConfigurationError:
    """The error of opening a SQLite queue file that is not there, where creating it is not allowed."""
    return ConfigurationError(
        f"the SQLite queue database {str(path.absolute())!r} does not exist, and only provisioning creates "
        "it: create the queues first (ProvisionQueuesOperator, SqlQueueHook.provision or `sqlqueue create`; "
        "without Airflow, open_transport(url, create_missing_file=True) and queue.create()), or correct the "
        "path"
    )


def _sqlite_connector(
    url: URL, factory: ConnectionFactory | None, create_missing_file: bool = True
) -> tuple[Callable[[], Any], str]:
    import sqlite3

    database = url.database
    if not database or database == ":memory:":
        raise ConfigurationError(
            "an in-memory SQLite database is private to one connection and cannot hold queues shared "
            "between receivers; give a file, e.g. sqlite:///queues.db"
        )
    path = Path(database)
    if not path.parent.exists():
        raise ConfigurationError(f"the folder of the SQLite queue file {path} does not exist")
    timeout = float(url.query.get("timeout", 30))  # type: ignore[arg-type]
    synchronous = str(url.query.get("synchronous", "full")).upper()
    if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise ConfigurationError(f"synchronous must be off, normal, full or extra, not {synchronous!r}")
    uri = sqlite_uri(path, "rwc" if create_missing_file else "rw")

    def connect() -> Any:
        arguments, supplied = (
            (None, None) if factory is None else ask_factory(factory, "sqlite3", sqlite3.Connection)
        )
        wait = float((arguments or {}).get("timeout", timeout))
        if supplied is None:
            try:
                connection = sqlite3.connect(
                    uri, timeout=wait, isolation_level=None, check_same_thread=False, uri=True
                )
            except sqlite3.OperationalError:
                if not create_missing_file and not path.exists():
                    raise missing_sqlite_file(path) from None
                raise
        else:
            connection = supplied
        try:
            if supplied is not None:
                _check_sqlite_file(connection, path)
                connection.isolation_level = None
            _enable_wal(connection, wait)
            connection.execute(f"PRAGMA synchronous={synchronous}")
            # A receive's DELETE of a batch copies every page it changes into the statement journal, which
            # SQLite moves to a temporary file past 64 KiB: a file created and unlinked per batch, and a
            # write to it for each page a message's savepoint then changes. Kept in memory, it costs a copy.
            connection.execute("PRAGMA temp_store=MEMORY")
        except BaseException:
            connection.close()
            raise
        return connection

    return connect, str(path)


def _postgres_connector(
    url: URL, connect_timeout: int, factory: ConnectionFactory | None
) -> tuple[Callable[[], Any], str | None]:
    try:
        import psycopg
    except ImportError as error:  # pragma: no cover - depends on the installed extras
        raise ConfigurationError(
            "PostgreSQL queues need psycopg 3: pip install 'airflow-provider-sqlqueue[postgres]'"
        ) from error
    options: dict[str, Any] = {
        key: value if isinstance(value, str) else value[-1] for key, value in url.query.items()
    }
    options.setdefault("connect_timeout", connect_timeout)
    for key, value in (
        ("host", url.host),
        ("port", url.port),
        ("user", url.username),
        ("password", url.password),
        ("dbname", url.database),
    ):
        if value is not None:
            options.setdefault(key, str(value))

    def connect() -> Any:
        if factory is None:
            return psycopg.connect(**options)
        arguments, supplied = ask_factory(factory, "psycopg", psycopg.Connection)
        return supplied if arguments is None else psycopg.connect(**{**options, **arguments})

    dbname = options.get("dbname")
    # A dbname holding '=' or a URI is a connection string libpq expands; without one, libpq's default
    # (PGDATABASE, the user name, a service file) is the server's to say: current_database() is asked.
    if dbname is not None and ("=" in str(dbname) or "://" in str(dbname)):
        dbname = None
    return connect, dbname


def _sqlserver_connector(
    odbc: str, connect_timeout: int, factory: ConnectionFactory | None
) -> tuple[Callable[[], Any], str | None]:
    try:
        import pyodbc
    except ImportError as error:  # pragma: no cover - depends on the installed extras
        raise ConfigurationError(
            "SQL Server queues need pyodbc: pip install 'airflow-provider-sqlqueue[mssql]'"
        ) from error
    parts = parse_odbc_string(odbc)
    database = parts.get("DATABASE") or parts.get("INITIAL CATALOG")

    def connect() -> Any:
        if factory is None:
            return pyodbc.connect(odbc, autocommit=False, timeout=connect_timeout)
        arguments, supplied = ask_factory(factory, "pyodbc", pyodbc.Connection)
        if arguments is None:
            return supplied
        return pyodbc.connect(_odbc_with(odbc, arguments), autocommit=False, timeout=connect_timeout)

    return connect, database


def _odbc_with(odbc: str, arguments: Mapping[str, Any]) -> str:
    """``odbc`` with the keywords of ``arguments`` set: each replaces every pair of its keyword (compared
    without case). The rest is kept as the driver manager reads it, and the result is checked to read back
    as these pairs (:func:`~.odbc_string.render_odbc`), so a factory's value (a token, a secret) cannot add
    a keyword."""
    replaced = {str(key).upper() for key in arguments}
    kept = [(key, value) for key, value in driver_manager_raw_pairs(odbc) if key.upper() not in replaced]
    names = {str(key): f"the connection factory's {key}" for key in arguments}
    return render_odbc([*kept, *((str(key), str(value)) for key, value in arguments.items())], names)


def open_transport(
    url: str | URL,
    *,
    default_schema: str | None = None,
    error_queue: str | None = "error",
    pool_size: int = 5,
    max_overflow: int = 10,
    connect_timeout: int = 10,
    max_body_bytes: int | None = None,
    lock_mode: LockMode = "auto",
    connect: ConnectionFactory | None = None,
    subscriptions: SubscriptionSettings | None = None,
    create_missing_file: bool = True,
) -> Transport:
    """Open the database at ``url`` (a string or a SQLAlchemy ``URL``) for queues.

    Nothing connects until the first operation. ``connect`` is a connection factory the pool calls for each
    new connection, so a credential that rotates or expires (an IAM token, a renewed password) is read
    anew: it returns connect arguments merged over the URL's (``{"password": token}`` for PostgreSQL,
    ``{"PWD": secret}`` for ODBC) or a ready connection of the URL's driver; the URL still says the engine
    and where ("Credentials that change" in the Concepts page says what a factory may return).

    ``lock_mode`` says how PostgreSQL receivers skip each other's messages: ``"row"`` (``FOR UPDATE SKIP
    LOCKED``, needs an UPDATE privilege), ``"advisory"`` (advisory locks, needs only SELECT, INSERT and
    DELETE) or ``"auto"`` (row locks where the role may take them); other engines ignore it.

    ``subscriptions`` says where the publish/subscribe table is and how long a publish caches its lookup
    (:class:`~.subscriptions.SubscriptionSettings`; by default ``SubscriptionRouting``, 5 seconds).

    ``create_missing_file`` says whether a SQLite URL naming no existing file creates it (the default: the
    caller wrote the path, and ``queue.create()`` on this transport is how the core provisions). With False
    the file is opened only if it exists, else every connection fails with a ConfigurationError naming the
    path: the Airflow hook opens so except when provisioning, since whoever may edit a connection should not
    be able to make files wherever a worker or the API server may write. Other engines ignore it.
    """
    if connect is not None and not callable(connect):
        kind = type(connect).__name__
        raise ConfigurationError(f"connect must be a callable that takes no arguments, not a {kind}")
    if isinstance(url, URL):
        parsed = url
        text = ""
    elif not isinstance(url, str) or not url.strip():
        raise ConfigurationError("a transport needs a database URL, e.g. sqlite:///queues.db")
    else:
        text = url.strip()
    if text and "://" not in text and "=" in text:
        odbc = text[5:] if text.lower().startswith("odbc:") else text
        dialect = get_dialect("sqlserver")
        driver_connect, database = _sqlserver_connector(odbc, connect_timeout, connect)
        description = _odbc_description("sqlserver", odbc, database)
    else:
        if text:
            try:
                parsed = make_url(text)
            except ArgumentError as error:
                raise ConfigurationError(f"cannot parse the transport URL: {error}") from None
        dialect, driver_connect, database, description = _from_url(
            parsed, connect_timeout, connect, create_missing_file
        )
    return Transport(
        dialect,
        driver_connect,
        description=description,
        database=database,
        default_schema=default_schema,
        error_queue=error_queue,
        pool_size=pool_size,
        max_overflow=max_overflow,
        max_body_bytes=max_body_bytes,
        lock_mode=lock_mode,
        subscriptions=subscriptions,
    )


def _odbc_description(engine: str, odbc: str, database: str | None) -> str:
    """Where an ODBC transport points, without anything secret from the connection string."""
    server = parse_odbc_string(odbc).get("SERVER", "?")
    return f"{engine} {server}/{database or ''} over ODBC"


def _from_url(
    parsed: URL, connect_timeout: int, factory: ConnectionFactory | None, create_missing_file: bool = True
) -> tuple[Dialect, Callable[[], Any], str | None, str]:
    """The dialect, connection factory, current database and a password-free description of a URL."""
    backend = parsed.get_backend_name()
    driver = parsed.get_driver_name() if "+" in parsed.drivername else None
    if driver == "pyodbc" and backend in ("sqlite", "postgresql", "postgres"):
        from ..dialects.odbc import PostgresOverOdbc, SqliteOverOdbc

        odbc = odbc_connection_string(parsed)
        connect, database = _sqlserver_connector(odbc, connect_timeout, factory)
        dialect: Dialect = SqliteOverOdbc() if backend == "sqlite" else PostgresOverOdbc()
        return dialect, connect, database, _odbc_description(dialect.name, odbc, database)
    if backend == "sqlite":
        connect, database = _sqlite_connector(parsed, factory, create_missing_file)
        return get_dialect("sqlite"), connect, database, parsed.render_as_string(hide_password=True)
    if backend in ("postgresql", "postgres"):
        if driver not in (None, "psycopg"):
            raise ConfigurationError(f"PostgreSQL queues use psycopg 3; the URL asks for {driver!r}")
        connect, database = _postgres_connector(parsed, connect_timeout, factory)
        return get_dialect("postgresql"), connect, database, parsed.render_as_string(hide_password=True)
    if backend == "mssql":
        if driver not in (None, "pyodbc"):
            raise ConfigurationError(f"SQL Server queues use pyodbc; the URL asks for {driver!r}")
        odbc = odbc_connection_string(parsed)
        connect, database = _sqlserver_connector(odbc, connect_timeout, factory)
        return get_dialect("sqlserver"), connect, database, _odbc_description("sqlserver", odbc, database)
    raise ConfigurationError(
        f"unsupported database {backend!r}; use sqlite:///file.db, postgresql://... or mssql+pyodbc://..."
    )
