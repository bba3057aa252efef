"""What one drain is asked to do (:class:`DrainConfig`), checked when it is built, before anything runs.

The config is pickled to the executors with the receive and read tasks, so it holds only plain values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...transport import ConfigurationError, Transport, open_transport
from ..config import NO_NEW_FILE, Sink
from ..tables import DEFAULT_PREFIX, check_run_id

__all__ = ["DrainConfig"]


@dataclass(frozen=True)
class DrainConfig:
    """Everything a drain needs; ``url`` holds the credentials and stays out of ``repr``."""

    url: str = field(repr=False)
    input_queue: str
    sink: str
    run_id: str
    transform: str | None = None
    batch_size: int = 1000
    max_messages: int | None = None
    partitions: int = 2
    default_schema: str | None = None
    error_queue: str | None = "error"
    prefix: str = DEFAULT_PREFIX
    create_tables: bool = False
    orphan_timeout: float = 900.0
    heartbeat_interval: float = 30.0
    read_slice_rows: int = 20_000
    """Phase 2: rows per read statement; it bounds what one read holds in a Python worker's memory."""
    read_partition_rows: int = 250_000
    """Phase 2: rows per read task, read in slices of ``read_slice_rows``. Each task has a fixed cost (two
    Python workers' turns, a result partition to fetch), so fewer, larger tasks drain faster; a retried
    task reads its share again."""
    run_id_column: str | None = None
    message_type: str | None = None
    read_in_place: bool | None = None
    """PostgreSQL: hold the messages in the queue under the driver's uncommitted delete instead of staging
    them (``spark/source/hold.py``). ``None`` (the default) holds them on PostgreSQL wherever holding keeps
    what staging keeps, and stages otherwise (:meth:`Drain.holds_in_place`); ``True`` requires holding,
    ``False`` always stages."""
    fail_receive_batch: int | None = None
    """Drill: the first attempt of every receive task raises inside its N-th receive, before the commit."""

    def __post_init__(self) -> None:
        check_run_id(self.run_id)
        if self.read_in_place not in (None, True, False):
            raise ConfigurationError(
                f"read_in_place must be True, False or None (PostgreSQL decides), not {self.read_in_place!r}"
            )
        if self.read_in_place and self.fail_receive_batch is not None:
            raise ConfigurationError("fail_receive_batch drills receive tasks, and read_in_place has none")
        Sink.parse(self.sink)
        for name in ("batch_size", "partitions", "read_slice_rows", "read_partition_rows"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"{name} must be a positive int, not {value!r}")
        if self.max_messages is not None and (
            isinstance(self.max_messages, bool)
            or not isinstance(self.max_messages, int)
            or self.max_messages < 1
        ):
            raise ConfigurationError(
                f"max_messages must be a positive int or None, not {self.max_messages!r}"
            )
        if self.heartbeat_interval <= 0 or self.orphan_timeout < 3 * self.heartbeat_interval:
            raise ConfigurationError(
                "orphan_timeout must be at least three heartbeat intervals "
                f"({self.orphan_timeout} < 3 x {self.heartbeat_interval})"
            )

    @property
    def parsed_sink(self) -> Sink:
        return Sink.parse(self.sink)

    def open(self, **options: Any) -> Transport:
        return open_transport(
            self.url,
            default_schema=self.default_schema,
            error_queue=self.error_queue,
            **{**NO_NEW_FILE, **options},
        )
