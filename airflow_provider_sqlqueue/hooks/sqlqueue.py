"""SqlQueueHook: an Airflow connection as a queue transport.

The hook owns the connection: it reads an Airflow connection of type ``sqlqueue``, ``postgres``, ``sqlite``,
``mssql`` or ``odbc``, turns it into the transport core's URL and hands out queue objects. Operators,
sensors and triggers stay thin and go through it. As a ``DbApiHook`` it also offers ``run``,
``get_records`` and the UI's connection test on the same database.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from functools import cached_property
from typing import Any, Literal

try:
    from airflow.providers.common.sql.hooks.sql import DbApiHook
except ImportError as missing:  # the entry point is there without the airflow extra: say so, loudly
    raise ImportError(
        "airflow-provider-sqlqueue is installed without its 'airflow' extra, so its hook, sensor, triggers "
        f"and operators cannot load ({missing}): pip install 'airflow-provider-sqlqueue[airflow]'"
    ) from missing
import sqlalchemy
from sqlalchemy.engine import URL, Engine, make_url

from ..model.address import QueueAddress
from ..transport import (
    ConfigurationError,
    Finding,
    MessagePump,
    OutgoingMessage,
    PublishResult,
    PumpSettings,
    PumpStats,
    ReceivedBatch,
    Subscription,
    SubscriptionSettings,
    TableOptions,
    TableQueue,
    Transport,
    VacuumResult,
    open_transport,
)
from ..transport.connection import DEFAULT_ODBC_DRIVER
from ..transport.depth_samples import RETENTION, DepthSample, DepthSampler
from ..transport.odbc_drivers import reads_port_keyword
from ..transport.odbc_string import (
    driver_manager_refusal,
    names_a_driver,
    odbc_pairs,
    odbc_value,
    parse_odbc_string,
    render_odbc,
)
from .cloud_logins import (
    check_entra_authentication,
    check_iam_extras,
    check_iam_options,
    entra_authentication,
    is_true,
    rds_iam_token,
)
from .connection_url import (
    DRIVER_KEYWORDS,
    DRIVER_SETTING,
    FILE_OPTIONS_SETTING,
    SECRET_ODBC_KEYWORDS,
    SECRET_QUERY_KEYS,
    SecretHidingURL,
    driver_in_extra_allowed,
    file_options_in_extra_allowed,
    libpq_option_refusal,
    odbc_string_sqlalchemy_hands_over,
    percent_decoded_forms,
    reparse_refusal,
    reparsed,
    secret_forms,
)

CountMode = Literal["estimate", "exact"]

ENGINE_BY_CONN_TYPE = {
    "postgres": "postgresql",
    "postgresql": "postgresql",
    "sqlite": "sqlite",
    "mssql": "sqlserver",
    "odbc": "sqlserver",
}
LIBPQ_EXTRAS = {
    "sslmode",
    "sslcert",
    "sslkey",
    "sslrootcert",
    "sslcrl",
    "application_name",
    "connect_timeout",
    "options",
    "target_session_attrs",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "gssencmode",
    "channel_binding",
}
ENGINE_ALIASES = {
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "pg": "postgresql",
    "sqlite": "sqlite",
    "sqlserver": "sqlserver",
    "mssql": "sqlserver",
    "sql server": "sqlserver",
}


def _options(text: str | None) -> dict[str, str]:
    """``key=value;key=value`` driver options from the connection's extra (braces may quote ';')."""
    return {key.lower(): value for key, value in parse_odbc_string(text or "").items()}


def depth_history_retention() -> timedelta | None:
    """How long the triggers and pumps of this Airflow keep depth samples (``[sqlqueue]
    depth_history_retention_hours``, the core's :data:`~..transport.depth_samples.RETENTION` when unset);
    None where it is 0 or less: they sample nothing."""
    from airflow.providers.common.compat.sdk import conf

    default = int(RETENTION / timedelta(hours=1))
    hours = conf.getint("sqlqueue", "depth_history_retention_hours", fallback=default)
    return timedelta(hours=hours) if hours > 0 else None


class SqlQueueHook(DbApiHook):
    """Queues in the database of an Airflow connection.

    :param str sqlqueue_conn_id: the connection: type ``sqlqueue`` (engine chosen in its extra), or an
        existing ``postgres``, ``sqlite``, ``mssql`` or ``odbc`` connection.
    :param default_schema: schema for queue names without one (overrides the connection's extra).
    :param error_queue: where unreadable rows go (overrides the connection's extra; default ``error``).
    :param driver: SQL Server: the ODBC driver (a name from odbcinst.ini, or a library path). SQL operators
        pass it as ``hook_params={"driver": ...}``. A connection's own ``odbc_driver``/``driver`` extra, or
        ``DRIVER``/``DSN``/``FILEDSN`` in its ``connect_options`` or ``odbc_connect``, is refused unless
        ``[providers.odbc] allow_driver_in_extra`` is true, as the odbc provider does.
    """

    conn_name_attr = "sqlqueue_conn_id"
    default_conn_name = "sqlqueue_default"
    conn_type = "sqlqueue"
    hook_name = "SQL Queue"
    supports_autocommit = False
    # The driver when neither the hook nor (where allowed) the connection names one; a deployment may set it
    # in airflow_local_settings.py, as with OdbcHook.default_driver.
    default_odbc_driver: str = DEFAULT_ODBC_DRIVER

    def __init__(
        self,
        *args: Any,
        default_schema: str | None = None,
        error_queue: str | None = None,
        driver: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._default_schema = default_schema
        self._error_queue = error_queue
        self._driver = driver
        self._transport: Transport | None = None

    # ---- connection ----------------------------------------------------------------------------
    @cached_property
    def engine(self) -> str:
        """``sqlserver``, ``postgresql`` or ``sqlite``, from the connection type or its ``engine`` extra."""
        conn = self.connection
        if conn.conn_type == self.conn_type:
            name = str(self.connection_extra.get("engine") or "").strip().lower()
            if not name:
                host = conn.host or ""
                if conn.port or conn.login or not host.endswith((".db", ".sqlite", ".sqlite3", ".db3")):
                    raise ConfigurationError(
                        f"connection {self.get_conn_id()!r} does not say which engine it is: choose "
                        "sqlserver, postgresql or sqlite in its Engine field (extra 'engine')"
                    )
                name = "sqlite"  # a bare queue file path, e.g. /var/lib/queues/queues.db
            if name not in ENGINE_ALIASES:
                raise ConfigurationError(
                    f"connection {self.get_conn_id()!r}: engine {name!r} is not one of sqlserver, "
                    "postgresql, sqlite"
                )
            return ENGINE_ALIASES[name]
        engine = ENGINE_BY_CONN_TYPE.get(conn.conn_type or "")
        if engine is None:
            raise ConfigurationError(
                f"connection {self.get_conn_id()!r} has type {conn.conn_type!r}; SqlQueueHook takes "
                "sqlqueue, postgres, sqlite, mssql or odbc connections"
            )
        return engine

    @property
    def placeholder(self) -> str:  # type: ignore[override]
        return "%s" if self.engine == "postgresql" else "?"

    def _driver_refused(self, what: str) -> ConfigurationError:
        return ConfigurationError(
            f"connection {self.get_conn_id()!r}: {what}. An ODBC driver is a shared library that the workers "
            f"and the triggerer load, so a connection may choose it only when {DRIVER_SETTING} is True in "
            "the Airflow configuration (AIRFLOW__PROVIDERS_ODBC__ALLOW_DRIVER_IN_EXTRA=True). Otherwise "
            "remove it from the connection and pass the driver to the hook: SqlQueueHook(driver=...) or "
            "hook_params={'driver': ...}"
        )

    @cached_property
    def odbc_driver(self) -> str:
        """The ODBC driver for SQL Server: the hook's ``driver``; else the connection's ``odbc_driver`` or
        ``driver`` extra where ``[providers.odbc] allow_driver_in_extra`` is true; else
        ``default_odbc_driver``. An extra that names another driver without that setting is refused."""
        if self._driver:
            return self._driver.strip().removeprefix("{").removesuffix("}").strip()
        default = self.default_odbc_driver
        for key, value in self.connection_extra.items():
            if key.lower() not in ("odbc_driver", "driver") or not value:
                continue
            named = str(value).strip().removeprefix("{").removesuffix("}").strip()
            if named == default:
                continue
            if not driver_in_extra_allowed():
                raise self._driver_refused(f"its extra {key!r} names the ODBC driver {named!r}")
            return named
        return default

    def _check_driver_keywords(self, odbc: str, where: str, *, driver_required: bool = True) -> None:
        """Refuse DRIVER, DSN, FILEDSN, SAVEFILE (or another keyword the driver manager acts on, or any
        keyword twice) in ``odbc`` unless it is the driver the hook chose: read as unixODBC's driver manager
        reads it and as the drivers read it (:mod:`~airflow_provider_sqlqueue.transport.odbc_string`), in
        ``odbc`` as it is and in each of its percent-decoded forms (see :func:`percent_decoded_forms`), so
        that no consumer that decodes it, as SQLAlchemy 2.0 does, finds a driver the check did not see.
        ``driver_required`` False: ``odbc`` is a fragment the hook adds its DRIVER to."""
        if driver_in_extra_allowed():
            return
        chosen = {self.odbc_driver, *percent_decoded_forms(self.odbc_driver)}
        decoded = " once percent-decoded (as SQLAlchemy 2.0's pyodbc dialect decodes odbc_connect)"
        for form, how in [(odbc, ""), *((text, decoded) for text in percent_decoded_forms(odbc))]:
            for key, value in odbc_pairs(form):
                if key in DRIVER_KEYWORDS and not (key == "DRIVER" and value in chosen):
                    raise self._driver_refused(f"{where} sets {key}={how}")
            why = driver_manager_refusal(form, chosen, driver_required=driver_required)
            if why is not None:
                raise self._driver_refused(f"{where} {why}{how}")

    def _odbc_string(self) -> str:
        conn = self.connection
        extra = self.connection_extra
        if extra.get("odbc_connect"):
            raw = str(extra["odbc_connect"])
            self._check_driver_keywords(raw, "its odbc_connect", driver_required=False)
            if names_a_driver(raw):
                return raw
            return f"DRIVER={odbc_value(self.odbc_driver, 'the ODBC driver')};{raw}"
        if conn.conn_type == "odbc":
            from airflow.providers.odbc.hooks.odbc import OdbcHook

            built = OdbcHook(odbc_conn_id=self.get_conn_id(), driver=self.odbc_driver).odbc_connection_string
            self._check_driver_keywords(built, "its extras (which OdbcHook writes into the ODBC string)")
            return built
        field = f"connection {self.get_conn_id()!r}: its"
        options = _options(extra.get("connect_options"))
        fields = {key.upper(): f"{field} connect_options {key}" for key in options}
        self._check_driver_keywords(
            render_odbc(options.items(), fields), "its connect_options", driver_required=False
        )
        parts = {"DRIVER": self.odbc_driver}
        server = conn.host or "localhost"
        if conn.port and reads_port_keyword(self.odbc_driver):
            parts["SERVER"], parts["PORT"] = server, str(conn.port)  # FreeTDS does not read SERVER=host,port
        else:
            parts["SERVER"] = f"{server},{conn.port}" if conn.port else server
        if conn.schema:
            parts["DATABASE"] = conn.schema
        if conn.login:
            parts["UID"] = conn.login
        if conn.password:
            parts["PWD"] = conn.password
        for key, value in options.items():
            parts[key.upper()] = value
        if extra.get("authentication"):
            parts["AUTHENTICATION"] = entra_authentication(extra["authentication"], self.get_conn_id())
        fields |= {
            "DRIVER": "the hook's ODBC driver",
            "SERVER": f"{field} Host or Port field",
            "PORT": f"{field} Port field",
            "DATABASE": f"{field} Schema field",
            "UID": f"{field} Login field",
            "PWD": f"{field} Password field",
            "AUTHENTICATION": f"{field} authentication extra",
        }
        built = render_odbc(((key, str(value)) for key, value in parts.items()), fields)
        self._check_driver_keywords(built, "its Host, Schema, Login or Password")
        return built

    def _sqlite_path(self) -> str:
        """The queue file of a SQLite connection; refused where the connection looks like a server's.

        A server name in Host with the engine left at SQLite would otherwise become a file of that name in
        the working directory of whichever worker runs the task, and sends would "succeed" into it.
        """
        conn = self.connection
        path = conn.host or conn.schema
        conn_id = self.get_conn_id()
        choose = (
            "for a database server choose the engine sqlserver or postgresql (the Engine field, extra "
            "'engine'); for SQLite put the queue file's absolute path in Host and leave Port, Login and "
            "Password empty"
        )
        if not path:
            raise ConfigurationError(f"connection {conn_id!r} has no SQLite queue file: {choose}")
        server_fields = [
            name
            for name, value in (("Port", conn.port), ("Login", conn.login), ("Password", conn.password))
            if value
        ]
        if server_fields:
            raise ConfigurationError(
                f"connection {conn_id!r} is SQLite but sets {', '.join(server_fields)}, which a SQLite "
                f"file does not take: {choose}"
            )
        if not os.path.isabs(path):
            raise ConfigurationError(
                f"connection {conn_id!r} is SQLite with the relative path {path!r}, which would name a "
                f"different file in each worker's working directory: {choose}"
            )
        return path

    @property
    def sqlalchemy_url(self) -> SecretHidingURL:
        """The transport URL of the connection. It carries the password: its ``str`` and ``repr`` hide it in
        every place it can sit, and each form of it (raw, ODBC-quoted, URL-encoded) is registered with
        Airflow's secrets masker, so a log line of ``get_uri()`` shows ``***`` too."""
        url = self._build_url()
        self._mask_secrets(url)
        return url

    def _mask_secrets(self, url: URL) -> None:
        from airflow.sdk.log import mask_secret

        secrets = [self.connection.password or ""]
        for key, value in url.query.items():
            values = (value,) if isinstance(value, str) else tuple(value)
            if key.lower() in SECRET_QUERY_KEYS:
                secrets += values
            elif key.lower() == "odbc_connect":
                secrets += [v for text in values for k, v in odbc_pairs(text) if k in SECRET_ODBC_KEYWORDS]
        for secret in filter(None, secrets):
            for form in secret_forms(secret):
                mask_secret(form)

    def _build_url(self) -> SecretHidingURL:
        conn = self.connection
        engine = self.engine
        if engine == "sqlite":
            return SecretHidingURL.create("sqlite", database=self._sqlite_path())
        if engine == "postgresql":
            query = {
                key: str(value)
                for key, value in self.connection_extra.items()
                if key in LIBPQ_EXTRAS and isinstance(value, str | int | float)
            }
            query |= _options(self.connection_extra.get("connect_options"))
            self._check_libpq_options(query)
            iam = self._iam_login()
            if iam:
                check_iam_options(query, self.get_conn_id())
            url = SecretHidingURL.create(
                "postgresql+psycopg",
                username=conn.login or None,
                password=None if iam else conn.password or None,
                host=conn.host or None,
                port=conn.port or None,
                database=conn.schema or None,
                query=query,
            )
            # get_uri(), create_engine of it and the Spark jobs parse its text again: the same URL must come
            # back, with no option the checks above did not see (connection_url.reparse_refusal)
            why = reparse_refusal(url)
            if why is not None:
                raise ConfigurationError(f"connection {self.get_conn_id()!r}: {why}")
            self._check_libpq_options(reparsed(url).query)
            return url
        url = SecretHidingURL.create("mssql+pyodbc", query={"odbc_connect": self._odbc_string()})
        # What SQLAlchemy itself makes of the URL, and of its rendering parsed back, is what
        # create_engine(hook.sqlalchemy_url) or create_engine(hook.get_uri()) would hand the driver manager.
        how = f"its ODBC string, as SQLAlchemy {sqlalchemy.__version__} hands it to the driver manager,"
        for form in (url, make_url(url.render_as_string(hide_password=False))):
            self._check_driver_keywords(odbc_string_sqlalchemy_hands_over(form), how)
        odbc = str(url.query["odbc_connect"])
        for text in (odbc, *percent_decoded_forms(odbc)):  # as the driver check reads it
            check_entra_authentication(odbc_pairs(text), self.get_conn_id())
        return url

    def _check_libpq_options(self, options: Mapping[str, str]) -> None:
        """Refuse a libpq option from the connection's extras that writes a file, reads settings or
        passwords from one, or loads an OpenSSL engine, unless the deployment allows it."""
        if file_options_in_extra_allowed():
            return
        for key, value in options.items():
            why = libpq_option_refusal(key, value)
            if why is not None:
                raise ConfigurationError(
                    f"connection {self.get_conn_id()!r}: its extras set {key}=, which {why}. Whoever edits "
                    "a connection may not choose files or libraries on the workers and the triggerer unless "
                    f"{FILE_OPTIONS_SETTING} is True in the Airflow configuration "
                    "(AIRFLOW__SQLQUEUE__ALLOW_FILE_OPTIONS_IN_EXTRA=True)"
                )

    def get_uri(self) -> str:
        """The connection as a SQLAlchemy URL string, password included (registered with the masker).

        For SQL Server it is refused where the installed SQLAlchemy (2.0) would percent-decode its
        ``odbc_connect`` into another string than the one the hook checked and the transport uses (a ``%``
        escape or a ``+`` in a password, say): ``create_engine`` of it would log in with a changed password
        or worse. :meth:`get_sqlalchemy_engine` has no such limit: it connects through the transport.
        A SQLite file is named as a ``mode=rw`` URI: an engine made from it opens the file only if it
        exists (only provisioning creates one).
        """
        if self.engine == "sqlite":
            return self._sqlite_existing_only_url().render_as_string(hide_password=False)
        url = self.sqlalchemy_url
        odbc = url.query.get("odbc_connect")
        if isinstance(odbc, str) and odbc_string_sqlalchemy_hands_over(url) != odbc:
            raise ConfigurationError(
                f"connection {self.get_conn_id()!r}: its ODBC string holds a '%' escape or a '+' that "
                f"SQLAlchemy {sqlalchemy.__version__} would decode in odbc_connect, so an engine made "
                "from get_uri() would connect with another string than the one checked; use "
                "hook.get_sqlalchemy_engine() (or SQLAlchemy 2.1, which does not decode it)"
            )
        return url.render_as_string(hide_password=False)

    def get_sqlalchemy_engine(self, engine_kwargs: dict[str, Any] | None = None) -> Engine:
        """A SQLAlchemy engine on the connection's database (also behind ``inspector`` and the SQL
        operators' lineage).

        For SQL Server each connection comes from the transport's own connect (``creator``): pyodbc gets the
        ODBC string the hook built and checked, exactly; SQLAlchemy parses no connection string, so neither
        its percent-decoding of ``odbc_connect`` (2.0) nor anything else can slip a driver in. PostgreSQL
        engines take :attr:`sqlalchemy_url` (psycopg loads no driver named by it), except an ``iam``
        connection, whose connections come from the transport too (each with a new token). A SQLite engine
        takes the file as a ``mode=rw`` URI, so it opens the file only if it exists, as the transport does:
        only provisioning creates one.
        """
        options = dict(engine_kwargs or {})
        if self.engine == "sqlite":
            from pathlib import Path

            from ..transport.connection import missing_sqlite_file

            path = Path(self._sqlite_path())
            if not path.exists():
                raise missing_sqlite_file(path)
            return sqlalchemy.create_engine(self._sqlite_existing_only_url(), **options)
        if self.engine != "sqlserver" and not self._iam_login():
            return sqlalchemy.create_engine(self.sqlalchemy_url, **options)
        if "creator" in options:
            raise ConfigurationError(
                "SqlQueueHook.get_sqlalchemy_engine connects SQL Server and IAM logins through the hook's "
                "transport; engine_kwargs cannot replace its creator"
            )
        transport = self.get_transport()  # builds and checks the ODBC string now, before any engine exists
        drivername = "mssql+pyodbc" if self.engine == "sqlserver" else "postgresql+psycopg"
        return sqlalchemy.create_engine(URL.create(drivername), creator=transport.new_connection, **options)

    def _sqlite_existing_only_url(self) -> URL:
        """The SQLite file as SQLAlchemy URL of a ``mode=rw`` URI: opened only if it exists."""
        from pathlib import Path

        from ..transport.connection import sqlite_uri

        existing_only = sqlite_uri(Path(self._sqlite_path()), "rw")
        return URL.create("sqlite", database=existing_only, query={"uri": "true"})

    @cached_property
    def dialect_name(self) -> str:
        """SQLAlchemy's name of the engine (``mssql``, ``postgresql``, ``sqlite``), without a URL."""
        return {"sqlserver": "mssql", "postgresql": "postgresql", "sqlite": "sqlite"}[self.engine]

    def get_transport(self) -> Transport:
        """The transport of this connection, opened once per hook (pooled connections, cached queues).

        A SQLite connection opens its file only if it exists: each connection otherwise fails with a
        ConfigurationError naming the path, since only provisioning (:meth:`create_database_file`) may
        create one, lest whoever may edit a connection make files wherever the process may write."""
        if self._transport is None:
            extra = self.connection_extra
            error_queue = self._error_queue or extra.get("error_queue") or "error"
            self._transport = open_transport(
                self.sqlalchemy_url,
                default_schema=self._default_schema or extra.get("default_schema") or None,
                error_queue=error_queue,
                lock_mode=extra.get("lock_mode") or "auto",
                connect=self._iam_connect_arguments if self._iam_login() else None,
                subscriptions=self._subscription_settings(),
                create_missing_file=False,
            )
        return self._transport

    def create_database_file(self) -> bool:
        """Create the SQLite queue file of this connection if it is missing (an empty database in WAL mode);
        True if this call created it. Only provisioning calls it (:meth:`provision`, so also
        ``ProvisionQueuesOperator``, and ``sqlqueue create --conn-id``); a server has no file: False."""
        if self.engine != "sqlite" or os.path.exists(self._sqlite_path()):
            return False
        creating = open_transport(self.sqlalchemy_url, pool_size=1, create_missing_file=True)
        with creating, creating.connection():
            pass
        return True

    def _subscription_settings(self) -> SubscriptionSettings:
        """Where the subscription table is (extra ``subscription_table``, an address such as
        ``SubscriptionRouting@[dbo]``) and how long a publish trusts its lookup (extra
        ``subscription_cache_seconds``); the reference's defaults otherwise."""
        extra = self.connection_extra
        table = QueueAddress.parse(str(extra.get("subscription_table") or "SubscriptionRouting"))
        seconds = extra.get("subscription_cache_seconds")
        try:
            cache_seconds = 5.0 if seconds in (None, "") else float(seconds)
        except (TypeError, ValueError):
            raise ConfigurationError(
                f"connection {self.get_conn_id()!r}: subscription_cache_seconds must be a number of seconds, "
                f"not {seconds!r}"
            ) from None
        return SubscriptionSettings(table.table, table.schema, table.catalog, cache_seconds)

    def _iam_login(self) -> bool:
        """Whether a PostgreSQL connection logs in with an RDS IAM token (its extra ``iam``)."""
        if self.engine != "postgresql" or not is_true(self.connection_extra.get("iam", False)):
            return False
        conn = self.connection
        check_iam_extras(self.connection_extra, conn.login, conn.host, self.get_conn_id())
        return True

    def get_iam_token(self) -> str:
        """The password of each new connection of an ``iam`` connection: an RDS IAM token for its Login at
        its Host and Port, signed with the AWS connection ``aws_conn_id`` (default ``aws_default``).
        Called once per new connection, since a token expires after 15 minutes; a subclass may override
        it to fetch the password elsewhere."""
        conn, extra = self.connection, self.connection_extra
        aws_conn_id = str(extra.get("aws_conn_id") or "aws_default")
        return rds_iam_token(aws_conn_id, str(conn.host), int(conn.port or 5432), str(conn.login))

    def _iam_connect_arguments(self) -> dict[str, str]:
        """The transport's connection factory for an ``iam`` connection: a new token, masked in logs."""
        from airflow.sdk.log import mask_secret

        token = self.get_iam_token()
        mask_secret(token)
        return {"password": token}

    def get_conn(self) -> Any:
        """A new DB-API connection to the queue database, outside the transport's pool: close it after use.

        It is not in autocommit mode: what runs on it, and what :meth:`send` and :meth:`send_batch` write
        on it (``connection=``), commits when you call ``commit()``, all together, and not at all if you
        roll back or close it without committing. (The transport's own SQLite connections begin their
        transactions explicitly; this one begins ``IMMEDIATE`` before its first write, as Python's sqlite3
        does by default, so the write lock is taken at once instead of upgraded from a read.)
        """
        connection = self.get_transport().new_connection()
        if self.engine == "sqlite":
            connection.isolation_level = "IMMEDIATE"
        return connection

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """A :meth:`get_conn` connection in an open transaction: it commits when the block ends, rolls back
        if the block raises, and is closed either way. Everything run on it, DDL included (which SQLite
        would otherwise commit at once), and every send given it as ``connection=``, commits together."""
        connection = self.get_conn()
        try:
            begin = self.get_transport().dialect.begin_write()
            if begin:
                cursor = connection.cursor()
                cursor.execute(begin)
                cursor.close()
            yield connection
            connection.commit()
        except BaseException:
            try:
                connection.rollback()
            except Exception as error:  # the block's error is the one to report
                self.log.warning("rolling back after a failed transaction failed too: %s", error)
            raise
        finally:
            connection.close()

    def close(self) -> None:
        """Close the pooled connections of this hook's transport."""
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def get_queue(self, queue_name: str) -> TableQueue:
        """The queue at ``queue_name`` (``table@[schema]@[catalog]``)."""
        return self.get_transport().queue(queue_name)

    # ---- OpenLineage ---------------------------------------------------------------------------
    def openlineage_namespace(self) -> str:
        """The OpenLineage dataset namespace of this connection's database, as the naming spec has it:
        ``postgres://{host}:{port}`` and ``mssql://{host}:{port}`` (default ports filled in). The spec has no
        entry for SQLite; a SQLite database is a local file, so its namespace is ``sqlite://`` followed by
        the file's absolute path."""
        engine = self.engine
        if engine == "sqlite":
            return f"sqlite://{os.path.abspath(self._sqlite_path())}"
        if engine == "postgresql":
            conn = self.connection
            return f"postgres://{conn.host or 'localhost'}:{conn.port or 5432}"
        server = parse_odbc_string(self._odbc_string()).get("SERVER") or "localhost"
        server = server.split(":", 1)[1] if server.lower().startswith(("tcp:", "np:", "lpc:")) else server
        host, _, port = server.partition(",")
        host = host.split("\\", 1)[0].strip() or "localhost"  # a named instance: its host
        if host in (".", "(local)"):
            host = "localhost"
        return f"mssql://{host}:{port.strip() or 1433}"

    def openlineage_dataset_name(self, queue_name: str) -> str:
        """The OpenLineage dataset name of a queue (or any table) of this connection:
        ``{database}.{schema}.{table}`` on PostgreSQL and SQL Server, ``{schema}.{table}`` on SQLite (the
        schema of a SQLite table is its attached database, ``main`` by default)."""
        transport = self.get_transport()
        address = transport.resolve(queue_name)
        if self.engine == "sqlite":
            return f"{address.schema or 'main'}.{address.table}"
        database = address.catalog or self._current_database()
        return f"{database}.{address.schema}.{address.table}"

    def _current_database(self) -> str:
        """The transport's current database, looked up at most once per transport (see Transport)."""
        return self.get_transport().current_catalog() or ""

    def get_openlineage_database_info(self, connection: Any) -> Any:
        """For the common-sql operators' SQL parser: where this connection's tables are in OpenLineage."""
        from airflow.providers.openlineage.sqlparser import DatabaseInfo

        namespace = self.openlineage_namespace()
        scheme, _, authority = namespace.partition("://")
        database = None if self.engine == "sqlite" else self._current_database()
        return DatabaseInfo(scheme=scheme, authority=authority, database=database)

    def get_openlineage_database_dialect(self, connection: Any) -> str:
        return {"postgresql": "postgres", "sqlserver": "mssql", "sqlite": "sqlite"}[self.engine]

    def get_openlineage_default_schema(self) -> str | None:
        return self.get_transport().resolve("probe").schema or ("main" if self.engine == "sqlite" else None)

    # ---- queue operations ----------------------------------------------------------------------
    def send(
        self,
        queue_name: str,
        body: OutgoingMessage | bytes | str,
        headers: Mapping[str, str | None] | None = None,
        time_to_be_received: timedelta | None = None,
        *,
        connection: Any = None,
    ) -> str:
        """Send one message; return its Id.

        With ``connection`` (from :meth:`get_conn`, a SQLAlchemy ``Connection`` of
        :meth:`get_sqlalchemy_engine`, or another connection of the same driver to the same database) the
        message is written in that connection's transaction and nothing is committed: it is sent when you
        commit, together with what else you wrote on the connection, and not at all if you roll back. Do
        not forget to commit; close the connection after use.
        """
        queue = self.get_queue(queue_name)
        return str(queue.send(body, headers, time_to_be_received, connection=connection))

    def send_batch(
        self, queue_name: str, messages: Iterable[OutgoingMessage | bytes | str], *, connection: Any = None
    ) -> list[str]:
        """Send many messages in one transaction; return their Ids. With ``connection``, in that
        connection's transaction, uncommitted (see :meth:`send`)."""
        sent = self.get_queue(queue_name).send_batch(messages, connection=connection)
        return [str(message_id) for message_id in sent]

    @contextmanager
    def receive(
        self, queue_name: str, max_messages: int = 1, transaction_mode: str | None = None
    ) -> Iterator[ReceivedBatch]:
        """Receive up to ``max_messages``: commit when the block ends, roll back if it raises."""
        with self.get_queue(queue_name).receive(max_messages, transaction_mode=transaction_mode) as batch:
            yield batch

    def depth(self, queue_name: str, count_mode: CountMode = "estimate") -> int:
        """Messages waiting: ``estimate`` (max - min + 1, cheap at any length) or ``exact`` (a count)."""
        target = self.get_queue(queue_name)
        if count_mode == "estimate":
            return target.peek_estimate()
        if count_mode == "exact":
            return target.count()
        raise ConfigurationError(f"count_mode must be 'estimate' or 'exact', not {count_mode!r}")

    def sample_depth(self, queue_name: str, messages: int, exact: bool) -> DepthSample | None:
        """Offer ``messages``, a depth just read, to the queue's depth history (one sample a queue a minute,
        where ``sqlqueue create --depth-history`` made its table and ``[sqlqueue]
        depth_history_retention_hours`` is above 0), as the triggers' polls and the pumps' peeks do; the
        sample offered, or None. Never raises: a history must not fail what read the depth."""
        queue = self.get_queue(queue_name)
        return DepthSampler(queue.transport, depth_history_retention()).sample(queue.address, messages, exact)

    def purge_expired(
        self,
        queue_name: str,
        batch_size: int = 10_000,
        max_batches: int | None = None,
        max_seconds: float | None = None,
    ) -> int:
        """Delete expired messages in batches; return how many."""
        return self.get_queue(queue_name).purge_expired(
            batch_size, max_batches=max_batches, max_seconds=max_seconds
        )

    def vacuum(self, queue_name: str) -> VacuumResult:
        """A plain ``VACUUM`` of a PostgreSQL queue table, giving a drained table's space back now instead
        of at autovacuum's next look; needs the table's owner. Elsewhere nothing runs (``ran`` False)."""
        return self.get_queue(queue_name).vacuum()

    def staged_runs(self, queue_name: str, prefix: str | None = None) -> list[dict[str, Any]]:
        """The Spark data source's runs of ``queue_name`` with staged messages (taken out of the queue and
        not acknowledged), oldest first, as dicts: run_id, queue, kind, state, messages, low, high,
        age_seconds, idle_seconds (see ``spark/staged_runs.py``)."""
        from ..spark.staged_runs import staged_runs
        from ..spark.tables import DEFAULT_PREFIX

        runs = staged_runs(self.get_transport(), queue_name, prefix or DEFAULT_PREFIX)
        return [staged.as_dict() for staged in runs]

    def staged_runs_beside(
        self, queue_names: Sequence[str], prefix: str | None = None
    ) -> list[dict[str, Any]]:
        """:meth:`staged_runs` of every queue whose runs are in the bridge tables beside any of
        ``queue_names`` (one read per schema): what the Queues page shows."""
        from ..spark.staged_runs import staged_runs_beside
        from ..spark.tables import DEFAULT_PREFIX

        runs = staged_runs_beside(self.get_transport(), queue_names, prefix or DEFAULT_PREFIX)
        return [staged.as_dict() for staged in runs]

    def bridge_table_names(self, queue_names: Sequence[str], prefix: str | None = None) -> dict[str, str]:
        """The Spark bridge's control tables beside ``queue_names`` (name: what it is), which have a queue
        table's columns but are not queues: what the Queues page lists apart."""
        from ..spark.tables import DEFAULT_PREFIX, bridge_tables

        found: dict[str, str] = {}
        for name in queue_names:
            tables = bridge_tables(self.get_transport(), name, prefix or DEFAULT_PREFIX)
            found[str(tables.runs)] = "Spark bridge: runs"
            found[str(tables.staging)] = "Spark bridge: staging"
            found[str(tables.fill)] = "Spark bridge: fill"
        return found

    def end_staged_run(
        self, queue_name: str, run_id: str, action: Literal["release", "ack"], prefix: str | None = None
    ) -> int:
        """Release (back to the end of the queue) or acknowledge (delete) the staged messages of a batch
        read or a stream of the Spark data source; return how many (0 when the run was ended that way
        before)."""
        from ..spark.staged_runs import end_staged_run
        from ..spark.tables import DEFAULT_PREFIX

        return end_staged_run(self.get_transport(), queue_name, run_id, action, prefix or DEFAULT_PREFIX)

    def provision(
        self,
        queues: Sequence[str],
        options: TableOptions | None = None,
        *,
        dry_run: bool = False,
        add_missing_indexes: bool = False,
    ) -> dict[str, Any]:
        """Create queues idempotently and inspect them, or (``dry_run``) only render their DDL script.

        Indexes missing from queues that already exist are reported as findings, and built only with
        ``add_missing_indexes`` (building one blocks the receivers using the table).

        Returns ``{"created": [...], "existing": [...], "findings": {queue: [finding, ...]}}``, or
        ``{"script": text}`` for a dry run. A SQLite connection's missing file is created here (not by a dry
        run), the one use of the hook that may create it.
        """
        options = options or TableOptions()
        if not dry_run:
            self.create_database_file()
        targets = [self.get_queue(name) for name in dict.fromkeys(queues)]
        if dry_run:
            return {"script": "\n".join(queue.create_script(options) for queue in targets)}
        result: dict[str, Any] = {"created": [], "existing": [], "findings": {}}
        for queue in targets:
            created = queue.create(options, add_missing_indexes=add_missing_indexes)
            result["created" if created else "existing"].append(queue.name)
            findings: list[Finding] = queue.inspect(options)
            if findings:
                result["findings"][queue.name] = [
                    {"code": f.code, "message": f.message, "fix": f.fix} for f in findings
                ]
        return result

    def consume(
        self,
        queue_name: str,
        handler: Callable[..., Any] | str,
        settings: PumpSettings | Mapping[str, Any] | None = None,
        *,
        max_messages: int | None = None,
        timeout: float | None = None,
        **options: Any,
    ) -> PumpStats:
        """Run ``handler`` over ``queue_name`` with a :class:`MessagePump` until ``max_messages`` are handled,
        the queue is empty, or ``timeout`` seconds pass; return the pump's counts. ``settings`` and
        ``options`` are the pump's (:class:`PumpSettings`, e.g. ``max_concurrency=4, batch_size=50``; see
        "Batch size" in docs/concurrency.md), or its ``error_queue`` / ``audit_queue``."""
        queue = self.get_queue(queue_name)
        options.setdefault("depth_sampler", DepthSampler(queue.transport, depth_history_retention()))
        pump = MessagePump(queue, handler, settings, **options)
        return pump.run(max_messages=max_messages, until_empty=True, timeout=timeout)

    # ---- publish/subscribe ---------------------------------------------------------------------
    def subscribe(
        self, queue_name: str, topic: str, endpoint: str | None = None, *, connection: Any = None
    ) -> Subscription:
        """Subscribe ``queue_name`` to ``topic`` under the name ``endpoint`` (default: the queue's table
        name, as an endpoint subscribes its primary queue). An upsert: subscribing the same endpoint and
        topic again moves it to the queue given. With ``connection`` it joins that connection's
        transaction, uncommitted (see :meth:`send`)."""
        transport = self.get_transport()
        name = endpoint or transport.resolve(queue_name).table
        return transport.subscriptions.subscribe(name, topic, queue_name, connection=connection)

    def unsubscribe(self, endpoint: str, topic: str, *, connection: Any = None) -> bool:
        """Remove ``endpoint``'s subscription to ``topic``; True when there was one."""
        return self.get_transport().subscriptions.unsubscribe(endpoint, topic, connection=connection)

    def subscriptions(
        self, topic: str | None = None, *, endpoint: str | None = None, limit: int | None = None
    ) -> list[Subscription]:
        """The subscriptions (of one topic, of one endpoint), ordered by topic and endpoint; the first
        ``limit`` of them when given."""
        return self.get_transport().subscriptions.list(topic, endpoint=endpoint, limit=limit)

    def publish(
        self,
        topic: str,
        body: OutgoingMessage | bytes | str,
        headers: Mapping[str, str | None] | None = None,
        *,
        base_topics: Iterable[str] = (),
        time_to_be_received: timedelta | None = None,
        connection: Any = None,
    ) -> PublishResult:
        """Send one copy of the message to each queue subscribed to ``topic`` or to one of
        ``base_topics``, all in one transaction (nothing, logged, when nobody subscribed); return the
        Id and the queues. With ``connection`` it is written in that connection's transaction,
        uncommitted (see :meth:`send`)."""
        return self.get_transport().publish(
            topic,
            body,
            headers,
            base_topics=base_topics,
            time_to_be_received=time_to_be_received,
            connection=connection,
        )

    # ---- async counterparts for triggers -------------------------------------------------------
    async def aget_transport(self) -> Transport:
        """Resolve the connection without blocking the event loop (lookups may go through the supervisor)."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.get_transport)()

    async def aclose(self) -> None:
        """``close`` off the event loop: closing pooled connections waits on the network (a PostgreSQL or
        SQL Server goodbye, a dead server's timeout), which must not stall the triggerer's other triggers."""
        await asyncio.to_thread(self.close)
