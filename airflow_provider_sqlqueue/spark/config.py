"""What the shipped jobs read from their command line and environment, without Airflow or Spark.

Credentials never travel on a command line: the job reads the queue database's URL from ``SQLQUEUE_URL``
(without its password) and the password from ``SQLQUEUE_PASSWORD``. Everything else (queue names, sink,
transform, sizes) is an ordinary argument.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from ..transport import ConfigurationError
from ..transport.odbc_string import parse_odbc_string, render_odbc

__all__ = [
    "NO_NEW_FILE",
    "PASSWORD_ENV",
    "RUN_ID_ENV",
    "URL_ENV",
    "Sink",
    "join_credentials",
    "safe_path_part",
    "split_credentials",
    "url_from_environment",
    "url_from_option",
]

URL_ENV = "SQLQUEUE_URL"
PASSWORD_ENV = "SQLQUEUE_PASSWORD"
# A batch read's runId when the read gives none: set by SqlQueueSparkApplicationOperator from the task
# instance, so every try of the task reads the same staged messages.
RUN_ID_ENV = "SQLQUEUE_RUN_ID"

# How the jobs and the data source open a queue database: a SQLite URL naming no file fails instead of
# creating one, since only provisioning creates a queue database (``sqlqueue create``,
# ``ProvisionQueuesOperator``), and the URL may come from an Airflow connection.
NO_NEW_FILE = {"create_missing_file": False}

SINK_KINDS = ("table", "queue", "parquet", "json")


def _odbc_join(parts: dict[str, str]) -> str:
    """The pairs written back as one connection string, checked to read back as them as the driver manager
    reads it (a password from the environment cannot add a keyword)."""
    return render_odbc(parts.items(), {"PWD": f"the password ({PASSWORD_ENV})"})


def _is_odbc_string(text: str) -> bool:
    return "://" not in text and "=" in text


def _without_password(url: URL, query: dict | None = None) -> URL:
    return URL.create(
        url.drivername,
        username=url.username,
        password=None,
        host=url.host,
        port=url.port,
        database=url.database,
        query=url.query if query is None else query,
    )


def split_credentials(url: str | URL) -> tuple[str, str | None]:
    """``(url without its password, password or None)``; the URL is rendered as text.

    Handles SQLAlchemy URLs (``postgresql://user:pw@host/db``), ``mssql+pyodbc:///?odbc_connect=...``
    and bare ODBC connection strings (``...;PWD=...``).
    """
    if isinstance(url, str) and _is_odbc_string(url):
        parts = parse_odbc_string(url)
        password = parts.pop("PWD", None)
        return _odbc_join(parts), password
    parsed = url if isinstance(url, URL) else make_url(url)
    odbc = parsed.query.get("odbc_connect")
    if odbc is not None:
        odbc_text = odbc if isinstance(odbc, str) else odbc[-1]
        stripped, password = split_credentials(odbc_text)
        query = dict(parsed.query) | {"odbc_connect": stripped}
        return _without_password(parsed, query).render_as_string(hide_password=False), password
    password = None if parsed.password is None else str(parsed.password)
    return _without_password(parsed).render_as_string(hide_password=False), password


def join_credentials(url: str, password: str | None) -> str:
    """The inverse of :func:`split_credentials`."""
    if not password:
        return url
    if _is_odbc_string(url):
        return _odbc_join(parse_odbc_string(url) | {"PWD": password})
    try:
        parsed = make_url(url)
    except ArgumentError as error:
        raise ConfigurationError(f"{URL_ENV} is not a database URL: {error}") from None
    odbc = parsed.query.get("odbc_connect")
    if odbc is not None:
        odbc_text = odbc if isinstance(odbc, str) else odbc[-1]
        query = dict(parsed.query) | {"odbc_connect": join_credentials(odbc_text, password)}
        return parsed.set(query=query).render_as_string(hide_password=False)
    return parsed.set(password=password).render_as_string(hide_password=False)


def url_from_environment(environ: dict[str, str] | None = None) -> str:
    """The queue database's full URL from ``SQLQUEUE_URL`` and ``SQLQUEUE_PASSWORD``."""
    env = os.environ if environ is None else environ
    url = env.get(URL_ENV)
    if not url:
        raise ConfigurationError(
            f"set {URL_ENV} to the queue database's URL (and {PASSWORD_ENV} to its password); the job "
            "takes no credentials on its command line"
        )
    return join_credentials(url, env.get(PASSWORD_ENV) or None)


def url_from_option(
    url: str | None, password: str | None = None, environ: Mapping[str, str] | None = None
) -> str:
    """The full URL for the ``sqlqueue`` data source, from its ``url`` and ``password`` options.

    Spark shows a data source's options in query plans and its UI, and redacts only the values of keys
    that look secret (``password``), so a URL holding a password is refused. No URL: ``SQLQUEUE_URL``, as
    the shipped jobs read it. The password: the ``password`` option, else ``SQLQUEUE_PASSWORD``.
    """
    env = os.environ if environ is None else environ
    if url:
        try:
            stripped, embedded = split_credentials(url)
        except (ArgumentError, ValueError):
            raise ConfigurationError(
                "the url option is not a database URL or ODBC connection string"
            ) from None
        if embedded:
            raise ConfigurationError(
                "option url holds a password, and Spark shows options in query plans: give the URL "
                f"without it and the password in option password or {PASSWORD_ENV}"
            )
    else:
        stripped = env.get(URL_ENV) or ""
        if not stripped:
            raise ConfigurationError(
                f"set option url (without its password) or {URL_ENV} to the queue database's URL"
            )
    return join_credentials(stripped, password or env.get(PASSWORD_ENV) or None)


@dataclass(frozen=True)
class Sink:
    """Where a drain's results go: ``table:<name>``, ``queue:<address>``, ``parquet:<path>``, ``json:<path>``.

    Tables and queues are in the queue database (so that results, the commit marker and the end of the
    staged messages commit in one transaction); files go to any path Spark can write.
    """

    kind: str
    target: str

    @classmethod
    def parse(cls, text: str) -> Sink:
        kind, separator, target = text.partition(":")
        kind = kind.strip().lower()
        if not separator or kind not in SINK_KINDS or not target.strip():
            raise ConfigurationError(
                f"sink {text!r} is not one of table:<name>, queue:<address>, parquet:<path>, json:<path>"
            )
        return cls(kind, target.strip())

    @property
    def is_file(self) -> bool:
        return self.kind in ("parquet", "json")

    def __str__(self) -> str:
        return f"{self.kind}:{self.target}"


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_path_part(run_id: str) -> str:
    """A run id as one path segment: kept if it is made of ``[A-Za-z0-9._-]``, else cleaned and hashed."""
    cleaned = _UNSAFE.sub("_", run_id)
    if cleaned == run_id and not run_id.startswith("."):
        return run_id
    return f"{cleaned.lstrip('.')}-{hashlib.sha1(run_id.encode()).hexdigest()[:8]}"
