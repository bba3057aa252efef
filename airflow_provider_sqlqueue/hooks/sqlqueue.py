"""SqlQueueHook: an Airflow connection as a queue transport.

The hook owns the connection: it reads an Airflow connection of type ``sqlqueue``, ``postgres``, ``sqlite``,
``mssql`` or ``odbc``, turns it into the transport core's URL and hands out queue objects. Operators,
sensors and triggers stay thin and go through it. As a ``DbApiHook`` it also offers ``run``,
``get_records`` and the UI's connection test on the same database.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from functools import cached_property
from typing import Any, Literal

from airflow.providers.common.sql.hooks.sql import DbApiHook
from sqlalchemy.engine import URL

from ..transport import (
    ConfigurationError,
    Finding,
    MessagePump,
    OutgoingMessage,
    PumpStats,
    ReceivedBatch,
    TableOptions,
    TableQueue,
    Transport,
    open_transport,
)
from ..transport.connection import DEFAULT_ODBC_DRIVER, parse_odbc_string

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


class SqlQueueHook(DbApiHook):
    """Queues in the database of an Airflow connection.

    :param str sqlqueue_conn_id: the connection: type ``sqlqueue`` (engine chosen in its extra), or an
        existing ``postgres``, ``sqlite``, ``mssql`` or ``odbc`` connection.
    :param default_schema: schema for queue names without one (overrides the connection's extra).
    :param error_queue: where unreadable rows go (overrides the connection's extra; default ``error``).
    """

    conn_name_attr = "sqlqueue_conn_id"
    default_conn_name = "sqlqueue_default"
    conn_type = "sqlqueue"
    hook_name = "SQL Queue"
    supports_autocommit = False

    def __init__(
        self,
        *args: Any,
        default_schema: str | None = None,
        error_queue: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._default_schema = default_schema
        self._error_queue = error_queue
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

    def _odbc_string(self) -> str:
        conn = self.connection
        extra = self.connection_extra
        if extra.get("odbc_connect"):
            return str(extra["odbc_connect"])
        if conn.conn_type == "odbc":
            from airflow.providers.odbc.hooks.odbc import OdbcHook

            driver = extra.get("odbc_driver") or extra.get("driver") or DEFAULT_ODBC_DRIVER
            return OdbcHook(odbc_conn_id=self.get_conn_id(), driver=driver).odbc_connection_string
        parts = {"DRIVER": extra.get("odbc_driver") or extra.get("driver") or DEFAULT_ODBC_DRIVER}
        server = conn.host or "localhost"
        parts["SERVER"] = f"{server},{conn.port}" if conn.port else server
        if conn.schema:
            parts["DATABASE"] = conn.schema
        if conn.login:
            parts["UID"] = conn.login
        if conn.password:
            parts["PWD"] = conn.password
        for key, value in _options(extra.get("connect_options")).items():
            parts[key.upper()] = value

        def quote(value: str) -> str:
            if any(char in value for char in ";{}=") or value != value.strip():
                return "{" + value.replace("}", "}}") + "}"
            return value

        return ";".join(f"{key}={quote(str(value))}" for key, value in parts.items())

    @property
    def sqlalchemy_url(self) -> URL:
        """The transport URL of the connection (carries the password: never log it; its repr hides it)."""
        conn = self.connection
        engine = self.engine
        if engine == "sqlite":
            path = conn.host or conn.schema
            if not path:
                raise ConfigurationError(
                    f"connection {self.get_conn_id()!r}: put the SQLite queue file's path in Host"
                )
            return URL.create("sqlite", database=path)
        if engine == "postgresql":
            query = {
                key: str(value)
                for key, value in self.connection_extra.items()
                if key in LIBPQ_EXTRAS and isinstance(value, str | int | float)
            }
            query |= _options(self.connection_extra.get("connect_options"))
            return URL.create(
                "postgresql+psycopg",
                username=conn.login or None,
                password=conn.password or None,
                host=conn.host or None,
                port=conn.port or None,
                database=conn.schema or None,
                query=query,
            )
        return URL.create("mssql+pyodbc", query={"odbc_connect": self._odbc_string()})

    def get_uri(self) -> str:
        return self.sqlalchemy_url.render_as_string(hide_password=False)

    def get_transport(self) -> Transport:
        """The transport of this connection, opened once per hook (pooled connections, cached queues)."""
        if self._transport is None:
            extra = self.connection_extra
            error_queue = self._error_queue or extra.get("error_queue") or "error"
            self._transport = open_transport(
                self.sqlalchemy_url,
                default_schema=self._default_schema or extra.get("default_schema") or None,
                error_queue=error_queue,
                lock_mode=extra.get("lock_mode") or "auto",
            )
        return self._transport

    def get_conn(self) -> Any:
        """A new DB-API connection to the queue database (for ``run``/``get_records``); close it after use."""
        return self.get_transport().new_connection()

    def close(self) -> None:
        """Close the pooled connections of this hook's transport."""
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def get_queue(self, queue_name: str) -> TableQueue:
        """The queue at ``queue_name`` (``table@[schema]@[catalog]``)."""
        return self.get_transport().queue(queue_name)

    # ---- queue operations ----------------------------------------------------------------------
    def send(
        self,
        queue_name: str,
        body: bytes | str,
        headers: Mapping[str, str | None] | None = None,
        time_to_be_received: timedelta | None = None,
    ) -> str:
        """Send one message; return its Id."""
        return str(self.get_queue(queue_name).send(body, headers, time_to_be_received))

    def send_batch(self, queue_name: str, messages: Iterable[OutgoingMessage | bytes | str]) -> list[str]:
        """Send many messages in one transaction; return their Ids."""
        return [str(message_id) for message_id in self.get_queue(queue_name).send_batch(messages)]

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

    def provision(
        self,
        queues: Sequence[str],
        options: TableOptions | None = None,
        *,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Create queues idempotently and inspect them, or (``dry_run``) only render their DDL script.

        Returns ``{"created": [...], "existing": [...], "findings": {queue: [finding, ...]}}``, or
        ``{"script": text}`` for a dry run.
        """
        options = options or TableOptions()
        targets = [self.get_queue(name) for name in dict.fromkeys(queues)]
        if dry_run:
            return {"script": "\n".join(queue.create_script(options) for queue in targets)}
        result: dict[str, Any] = {"created": [], "existing": [], "findings": {}}
        for queue in targets:
            created = queue.create(options)
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
        *,
        max_messages: int | None = None,
        max_concurrency: int = 1,
        strategy: str = "monitor",
        transaction_mode: str | None = None,
        timeout: float | None = None,
        **pump_options: Any,
    ) -> PumpStats:
        """Run ``handler`` over ``queue_name`` with a :class:`MessagePump` until ``max_messages`` are handled,
        the queue is empty, or ``timeout`` seconds pass; return the pump's counts."""
        pump = MessagePump(
            self.get_queue(queue_name),
            handler,
            max_concurrency=max_concurrency,
            strategy=strategy,
            transaction_mode=transaction_mode,
            **pump_options,
        )
        return pump.run(max_messages=max_messages, until_empty=True, timeout=timeout)

    # ---- async counterparts for triggers -------------------------------------------------------
    async def aget_transport(self) -> Transport:
        """Resolve the connection without blocking the event loop (lookups may go through the supervisor)."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.get_transport)()

    async def adepth(self, queue_name: str, count_mode: CountMode = "estimate") -> int:
        """``depth`` off the event loop: one query, run in a worker thread."""
        await self.aget_transport()
        return await asyncio.to_thread(self.depth, queue_name, count_mode)
