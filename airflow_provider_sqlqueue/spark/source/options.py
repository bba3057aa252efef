"""The ``sqlqueue`` data source's options, checked once on the driver, before anything is received.

Spark shows a data source's options in query plans and the UI, and redacts only keys that look secret
(``password``). So the ``url`` option must not hold a password: it comes from the ``password`` option or
from ``SQLQUEUE_PASSWORD``, as the shipped jobs read it; without a ``url`` option the URL comes from
``SQLQUEUE_URL``. The resolved options are pickled to the executors with the readers (plain values only).

A key the readers do not know is an error, as for the writer: a typo (``maxMessagez``) would otherwise
read with the default. A SQLite URL must name a file that exists: opening it would create an empty
database, and the read would fail later for want of a queue, leaving the file behind.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from ...transport import ConfigurationError, Transport, open_transport
from ..config import NO_NEW_FILE, RUN_ID_ENV, url_from_option
from ..tables import DEFAULT_PREFIX, check_run_id

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_MESSAGES_PER_TRIGGER",
    "DEFAULT_RECEIVES_PER_TRIGGER",
    "READ_OPTIONS",
    "UNCOMMITTED_BATCH_POLICIES",
    "SourceOptions",
]

UNCOMMITTED_BATCH_POLICIES = ("fail", "redeliver", "discard")
DEFAULT_BATCH_SIZE = 1000
# Without maxMessagesPerTrigger a micro-batch takes at most this many receives of batchSize messages
# (250,000 messages at the default batch size), so a deep backlog is not staged whole before the first
# batch, and a producer that keeps pace with the receives cannot hold one trigger forever. Each trigger
# also costs Spark a fixed amount (planning, offset and commit logs, task start-up) whatever its size:
# the bound is large enough that this stays a small part of a trigger's work.
DEFAULT_RECEIVES_PER_TRIGGER = 250
DEFAULT_MAX_MESSAGES_PER_TRIGGER = DEFAULT_BATCH_SIZE * DEFAULT_RECEIVES_PER_TRIGGER
# The read forms' options as docs/spark-options.md spells them; keys are matched lower-cased, without
# underscores.
READ_OPTIONS = (
    "queue",
    "url",
    "password",
    "defaultSchema",
    "errorQueue",
    "prefix",
    "runId",
    "maxMessages",
    "receivers",
    "batchSize",
    "partitions",
    "maxMessagesPerTrigger",
    "streamId",
    "onUncommittedBatch",
    "stageAhead",
    "readInPlace",
    "createTables",
    "heldRanges",
    "sliceRows",
    "partitionRows",
)
_KNOWN_KEYS = {name.lower() for name in READ_OPTIONS} | {"path"}  # load("<queue>") passes path
_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no", ""}


def _positive(options: Mapping[str, str], key: str, default: int | None) -> int | None:
    text = options.get(key)
    if text is None or str(text).strip() == "":
        return default
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ConfigurationError(f"option {key} must be a positive integer, not {text!r}") from None
    if value < 1:
        raise ConfigurationError(f"option {key} must be a positive integer, not {text!r}")
    return value


def _choice(options: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (the first by default); ``name`` is the option as the docs spell it."""
    given = options.get(name.lower())
    text = str(given or choices[0]).strip().lower()
    if text not in choices:
        raise ConfigurationError(f"option {name} must be one of {', '.join(choices)}, not {given!r}")
    return text


def _check_keys(options: Mapping[str, str]) -> None:
    for key in options:
        if str(key).lower().replace("_", "") not in _KNOWN_KEYS:
            raise ConfigurationError(
                f"unknown option {key!r} for format('sqlqueue') reads; known: {', '.join(READ_OPTIONS)}"
            )


def _require_sqlite_file(url: str) -> None:
    """Refuse a SQLite URL whose database file does not exist (SQLite would create it empty)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return
    database = parsed.database
    if not parsed.drivername.startswith("sqlite") or parsed.query.get("odbc_connect"):
        return
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    if not os.path.exists(database):
        raise ConfigurationError(
            f"the SQLite database {database} does not exist: the data source reads queues that were "
            "provisioned, and does not create a database"
        )


def _ranges(text: Any) -> tuple[tuple[int, int], ...] | None:
    """``heldRanges``: JSON ``[[low, high], ...]``, inclusive RowVersion ranges an application holds."""
    if text is None or str(text).strip() == "":
        return None
    try:
        ranges = tuple((int(low), int(high)) for low, high in json.loads(str(text)))
    except (TypeError, ValueError):
        ranges = ()
    if not ranges or any(low > high for low, high in ranges):
        raise ConfigurationError(
            f"option heldRanges must be JSON [[low, high], ...] of inclusive RowVersion ranges, not {text!r}"
        )
    return ranges


def _flag(options: Mapping[str, str], key: str) -> bool:
    text = str(options.get(key, "")).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigurationError(f"option {key} must be true or false, not {options.get(key)!r}")


@dataclass(frozen=True)
class SourceOptions:
    """What one ``spark.read`` / ``spark.readStream`` of ``format("sqlqueue")`` asks for.

    ``url`` holds the credentials and stays out of ``repr``. ``columns`` is what a ``.schema(...)``
    selects: each column's name and whether the read lets it be null (None: every column, as the source
    declares them).
    """

    url: str = field(repr=False)
    queue: str
    default_schema: str | None = None
    error_queue: str | None = "error"
    prefix: str = DEFAULT_PREFIX
    run_id: str | None = None
    stream_id: str | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    max_messages: int | None = None
    receivers: int = 1
    partitions: int = 2
    max_messages_per_trigger: int | None = None
    on_uncommitted_batch: str = "fail"
    stage_ahead: bool = False
    read_in_place: bool | None = None
    create_tables: bool = False
    held_ranges: tuple[tuple[int, int], ...] | None = None
    slice_rows: int = 20_000
    partition_rows: int = 250_000
    columns: tuple[tuple[str, bool], ...] | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], environ: Mapping[str, str] | None = None) -> SourceOptions:
        """Build from Spark's options and the environment. Keys are Spark's camelCase (``runId``,
        ``maxMessagesPerTrigger``) in any case, or snake_case (``run_id``): underscores are ignored. Any
        other key is an error, and so is a SQLite URL whose file does not exist."""
        env = os.environ if environ is None else environ
        _check_keys(options)
        lowered = {str(key).lower().replace("_", ""): value for key, value in options.items()}
        queue = str(lowered.get("queue") or lowered.get("path") or "").strip()
        if not queue:
            raise ConfigurationError('the sqlqueue data source needs option("queue", <the input queue>)')
        password = lowered.get("password")
        url = url_from_option(lowered.get("url"), None if password is None else str(password), env)
        run_id = lowered.get("runid") or env.get(RUN_ID_ENV) or None  # the environment's: from Airflow
        if run_id is not None:
            check_run_id(str(run_id))
        stream_id = str(lowered.get("streamid") or f"stream:{queue}")
        check_run_id(stream_id)
        error_queue = lowered.get("errorqueue", "error")
        parsed = cls(
            url=url,
            queue=queue,
            default_schema=lowered.get("defaultschema") or None,
            error_queue=error_queue or None,
            prefix=str(lowered.get("prefix") or DEFAULT_PREFIX),
            run_id=None if run_id is None else str(run_id),
            stream_id=stream_id,
            batch_size=_positive(lowered, "batchsize", DEFAULT_BATCH_SIZE) or DEFAULT_BATCH_SIZE,
            max_messages=_positive(lowered, "maxmessages", None),
            receivers=_positive(lowered, "receivers", 1) or 1,
            partitions=_positive(lowered, "partitions", 2) or 2,
            max_messages_per_trigger=_positive(lowered, "maxmessagespertrigger", None),
            on_uncommitted_batch=_choice(lowered, "onUncommittedBatch", UNCOMMITTED_BATCH_POLICIES),
            stage_ahead=_flag(lowered, "stageahead"),
            read_in_place=None if lowered.get("readinplace") is None else _flag(lowered, "readinplace"),
            create_tables=_flag(lowered, "createtables"),
            held_ranges=_ranges(lowered.get("heldranges")),
            slice_rows=_positive(lowered, "slicerows", 20_000) or 20_000,
            partition_rows=_positive(lowered, "partitionrows", 250_000) or 250_000,
        )
        _require_sqlite_file(url)
        return parsed

    @property
    def trigger_limit(self) -> int:
        """The most messages one micro-batch takes: ``maxMessagesPerTrigger``, else
        ``batchSize * DEFAULT_RECEIVES_PER_TRIGGER``."""
        if self.max_messages_per_trigger is not None:
            return self.max_messages_per_trigger
        return self.batch_size * DEFAULT_RECEIVES_PER_TRIGGER

    def open(self, **options: Any) -> Transport:
        return open_transport(
            self.url,
            default_schema=self.default_schema,
            error_queue=self.error_queue,
            **{**NO_NEW_FILE, **options},
        )
