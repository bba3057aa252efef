"""What every subcommand shares: exit codes, masking secrets, opening the database, parsing values, and
writing messages out."""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta, timezone
from enum import IntEnum
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from rich.console import Console
from rich.text import Text

if TYPE_CHECKING:
    from rich.progress import Progress

    from ..transport import Transport

URL_ENV = "SQLQUEUE_URL"
CONN_ID_ENV = "SQLQUEUE_CONN_ID"
DEBUG_ENV = "SQLQUEUE_DEBUG"


class Exit(IntEnum):
    """The exit codes scripts can rely on (docs/cli.md lists them)."""

    OK = 0
    ERROR = 1
    USAGE = 2
    QUEUE_MISSING = 3
    UNREACHABLE = 4
    EMPTY = 5
    PERMISSION_DENIED = 6
    FINDINGS = 7
    INTERRUPTED = 130


class CliError(Exception):
    """An expected failure: printed as one line (no traceback), then the command exits with ``code``."""

    def __init__(self, code: Exit, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.hint = hint


# ---- secrets -------------------------------------------------------------------------------------------
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][\w+.-]*://[^:/@\s]*:)(?P<password>[^\s/]*)@")
_KEY_PASSWORD = re.compile(
    r"(?i)\b(?P<key>PWD|PASSWORD)(?P<eq>\s*=\s*)(?P<value>\{(?:[^}]|\}\})*\}|[^;&\s]*)"
)
_MIN_LITERAL = 4  # shorter secrets are masked only where they appear as a URL's or a key's password


class Secrets:
    """Passwords this run knows of, masked in everything the command prints about itself.

    Message bodies and headers are data and printed as they are; errors, log lines and descriptions go
    through :meth:`mask`, which also hides the password of any URL or ``PWD=`` / ``password=`` pair.
    """

    def __init__(self) -> None:
        self._values: set[str] = set()

    def add(self, value: object) -> None:
        text = "" if value is None else str(value)
        if len(text) >= _MIN_LITERAL:
            self._values.update({text, quote(text, safe=""), quote(text)})

    def add_url(self, url: str) -> None:
        """Remember the password of a URL or ODBC connection string (including a nested odbc_connect)."""
        from ..transport.connection import parse_odbc_string

        match = _URL_PASSWORD.search(url)
        if match:
            self.add(unquote(match["password"]))
        for text in (url, unquote(url)):
            for key, value in parse_odbc_string(text.split("?", 1)[-1].replace("&", ";")).items():
                if key.endswith(("PWD", "PASSWORD")):
                    self.add(value)

    def mask(self, text: str) -> str:
        text = _URL_PASSWORD.sub(lambda m: f"{m['head']}***@", text)
        text = _KEY_PASSWORD.sub(lambda m: f"{m['key']}{m['eq']}***", text)
        for value in sorted(self._values, key=len, reverse=True):
            text = text.replace(value, "***")
        return text


SECRETS = Secrets()


class MaskingFilter(logging.Filter):
    """Masks secrets in log records before a handler formats them."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = SECRETS.mask(record.getMessage())
        record.args = None
        return True


# ---- output --------------------------------------------------------------------------------------------
def consoles() -> tuple[Console, Console]:
    """Data to stdout, everything else (progress, notes, errors) to stderr; no markup in either, so
    queue names such as ``orders@[sales]`` print as they are."""
    return (
        Console(markup=False, highlight=False, soft_wrap=True),
        Console(stderr=True, markup=False, highlight=False, soft_wrap=True),
    )


def note(console: Console, text: str, style: str | None = None) -> None:
    console.print(Text(SECRETS.mask(text), style=style or ""))


def fail(console: Console, error: CliError) -> int:
    console.print(Text(f"sqlqueue: {SECRETS.mask(str(error))}", style="bold red"))
    if error.hint:
        console.print(Text(SECRETS.mask(error.hint), style="yellow"))
    return int(error.code)


def silence_stdout() -> None:
    """After the reader of stdout went away (``| head``): send the rest to /dev/null, so that Python's
    final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a real file (tests capture it)
        pass


def body_fields(body: bytes) -> dict[str, str]:
    """A body for JSON: its text if it is UTF-8, else base64, saying which."""
    try:
        return {"body": body.decode("utf-8"), "body_encoding": "utf-8"}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(body).decode("ascii"), "body_encoding": "base64"}


def iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def message_record(queue: str, message: Any) -> dict[str, Any]:
    """One received or browsed message as a JSON-lines record (the same keys for both)."""
    record: dict[str, Any] = {
        "queue": queue,
        "id": str(message.id),
        "row_version": message.row_version,
        "expires": iso(message.expires),
        "headers": message.headers,
        **body_fields(message.body),
    }
    if getattr(message, "header_error", None):
        record["header_error"] = message.header_error
        record["raw_headers"] = message.raw_headers
    return record


def json_line(record: object) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def pretty_message(index: int, message: Any) -> Text:
    """A message for people: a title line, the headers dimmed, then the body (text, or a note)."""
    text = Text()
    title = f"── #{index} · {message.id} · RowVersion {message.row_version}"
    if message.expires is not None:
        title += f" · expires {iso(message.expires)}"
    text.append(title + "\n", style="bold cyan")
    if getattr(message, "header_error", None):
        text.append(f"   unreadable headers ({message.header_error}): {message.raw_headers}\n", style="red")
    for key, value in message.headers.items():
        text.append(f"   {key}: {value}\n", style="dim")
    try:
        body = message.body.decode("utf-8")
    except UnicodeDecodeError:
        preview = message.body[:32].hex(" ")
        body = f"<{len(message.body):,} bytes, not UTF-8: {preview}{' …' if len(message.body) > 32 else ''}>"
    text.append(body if body.endswith("\n") or not body else body + "\n")
    return text


@contextmanager
def output_file(path: str | None) -> Iterator[IO[str] | None]:
    """``--output FILE`` opened for appending (an earlier file is never overwritten), or None for stdout."""
    if path is None or path == "-":
        yield None
        return
    try:
        handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as error:
        raise CliError(Exit.USAGE, f"cannot write {path}: {error.strerror}") from None
    try:
        yield handle
    finally:
        with suppress(OSError):  # data a failed write left buffered; that failure is the one reported
            handle.close()


def write_durably(handle: IO[str] | None, lines: Iterable[str], console: Console | None = None) -> None:
    """Write lines and make sure they are stored (file: flushed and fsynced) before a receive commits."""
    if handle is None:
        stream = sys.stdout
        for line in lines:
            stream.write(line + "\n")
        stream.flush()
        return
    for line in lines:
        handle.write(line + "\n")
    handle.flush()
    os.fsync(handle.fileno())


def progress_bar(console: Console) -> Progress:
    """A progress bar on stderr, drawn only on a terminal and cleared when done."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )


def print_json(record: object) -> None:
    sys.stdout.write(json_line(record) + "\n")
    sys.stdout.flush()


# ---- values --------------------------------------------------------------------------------------------
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)", re.IGNORECASE)
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration(text: str) -> timedelta:
    """``90`` (seconds), ``90s``, ``15m``, ``2h``, ``1d``, ``1h30m`` or ``HH:MM:SS`` as a timedelta."""
    value = text.strip().lower()
    try:
        if re.fullmatch(r"\d+(\.\d+)?", value):
            seconds = float(value)
        elif re.fullmatch(r"\d+:\d{1,2}:\d{1,2}(\.\d+)?", value):
            hours, minutes, secs = value.split(":")
            seconds = int(hours) * 3600 + int(minutes) * 60 + float(secs)
        elif value and _DURATION_PART.sub("", value).strip() == "":
            seconds = sum(float(n) * _UNITS[u.lower()] for n, u in _DURATION_PART.findall(value))
        else:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: use seconds (90), 90s, 15m, 2h, 1d, 1h30m or HH:MM:SS"
        ) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration must be positive")
    return timedelta(seconds=seconds)


def header(text: str) -> tuple[str, str]:
    """``-H key=value`` as a pair (the value may be empty and may contain '=')."""
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not a header: write -H key=value")
    return key.strip(), value


def positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
    return value


# ---- the database --------------------------------------------------------------------------------------
def database_choice(args: argparse.Namespace) -> tuple[str, str] | None:
    """``("url", URL)`` or ``("conn_id", ID)`` from the options, then the environment; None if neither."""
    url, conn_id = getattr(args, "url", None), getattr(args, "conn_id", None)
    if url and conn_id:
        raise CliError(Exit.USAGE, "give either --url or --conn-id, not both")
    if url:
        return "url", url
    if conn_id:
        return "conn_id", conn_id
    env_url, env_conn = os.environ.get(URL_ENV), os.environ.get(CONN_ID_ENV)
    if env_url and env_conn:
        raise CliError(Exit.USAGE, f"both {URL_ENV} and {CONN_ID_ENV} are set: unset one, or pass --url")
    if env_url:
        return "url", env_url
    if env_conn:
        return "conn_id", env_conn
    return None


def open_database(args: argparse.Namespace, *, may_create_file: bool = False) -> Transport:
    """The transport of ``--url`` / ``--conn-id`` (or the environment's), with its passwords registered for
    masking. Nothing connects here. Only ``may_create_file`` (``sqlqueue create``) lets a SQLite URL or
    connection create its missing file; otherwise the transport's first connection (``probe``) refuses it,
    the one check the hook, the Queues page and the triggers share (``create_missing_file`` of
    ``open_transport``)."""
    from ..transport import open_transport

    choice = database_choice(args)
    if choice is None:
        raise CliError(
            Exit.USAGE,
            "which database? give --url URL or --conn-id ID",
            f"or set {URL_ENV} (keeps the password out of the process list) or {CONN_ID_ENV}",
        )
    kind, value = choice
    schema = getattr(args, "schema", None)
    if kind == "conn_id":
        return _open_airflow_connection(value, schema, may_create_file)
    SECRETS.add_url(value)
    return open_transport(value, default_schema=schema, create_missing_file=may_create_file)


def _open_airflow_connection(conn_id: str, schema: str | None, may_create_file: bool) -> Transport:
    try:
        from ..hooks.sqlqueue import SqlQueueHook
    except ImportError as error:
        raise CliError(
            Exit.USAGE,
            f"--conn-id needs Apache Airflow, which cannot be imported ({error})",
            "pip install 'airflow-provider-sqlqueue[airflow]', or pass the database as --url",
        ) from None
    hook = SqlQueueHook(sqlqueue_conn_id=conn_id, default_schema=schema)
    try:
        connection = hook.connection
    except Exception as error:
        if "notfound" in type(error).__name__.lower() or "isn't defined" in str(error):
            raise CliError(
                Exit.USAGE,
                f"the Airflow connection {conn_id!r} is not defined",
                f"add it in Airflow, or set AIRFLOW_CONN_{conn_id.upper()} to its URI or JSON",
            ) from None
        raise
    SECRETS.add(connection.password)
    extra = hook.connection_extra or {}
    if extra.get("odbc_connect"):
        SECRETS.add_url(str(extra["odbc_connect"]))
    if may_create_file:
        hook.create_database_file()
    transport = hook.get_transport()
    return transport


def probe(transport: Transport) -> None:
    """Connect once, so that an unreachable database is told apart from a failing statement."""
    from ..transport import ConfigurationError, PermissionDenied

    try:
        with transport.connection():
            pass
    except PermissionDenied as error:
        raise CliError(
            Exit.PERMISSION_DENIED, f"cannot connect to {transport.description}: {error}"
        ) from None
    except ConfigurationError as error:  # e.g. a SQLite file that does not exist: the error names its fix
        raise CliError(Exit.UNREACHABLE, f"cannot connect to {transport.description}: {error}") from None
    except Exception as error:
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CliError(
            Exit.UNREACHABLE,
            f"cannot connect to {transport.description}: {detail}",
            "check the host, port, database name, credentials and that the server is running",
        ) from None


def now() -> datetime:
    return datetime.now(timezone.utc)


@contextmanager
def connected(args: argparse.Namespace, *, may_create_file: bool = False) -> Iterator[Transport]:
    """The database of the command line, reachable (probed), closed when the command ends."""
    transport = open_database(args, may_create_file=may_create_file)
    try:
        probe(transport)
        yield transport
    finally:
        transport.close()


def existing_queue(transport: Transport, name: str) -> Any:
    """The queue ``name``, or a :class:`CliError` saying how to create it."""
    queue = transport.queue(name)
    if not queue.exists():
        raise CliError(
            Exit.QUEUE_MISSING,
            f"queue {queue.address} does not exist in {transport.description}",
            f"create it with: sqlqueue create {name} (needs DDL rights), or check --schema",
        )
    return queue
