"""Each queue's depth over time, kept in the queue database by what already polls it.

The triggers' shared poll (:mod:`.shared_poll`) and a pump's monitoring peek (:mod:`.pump`) read every
queue's depth anyway; a :class:`DepthSampler` beside each turns those reads into a history, so the Queues
page can show whether a queue drains for the times nobody looked, not only while its page was open. A
sample costs no read of its own: it is the depth the poll already read (a trigger's poll also gives its error
queue's estimate, ``Failed``; a pump's peek gives none).

**Where.** One table per schema, :data:`DEPTH_SAMPLES_TABLE` beside the queues it samples (in their schema
and catalog, named as the Spark bridge's tables are), made only when asked, where queues are provisioned
(``sqlqueue create --depth-history``, or the DDL of ``sqlqueue script --depth-history``): a deployment that
never asks pays one catalog query per writer and table every :data:`PURGE_EVERY`. Its columns: QueueName
(the queue's table name), SampledMinute (the UTC minute, as minutes since the Unix epoch: an integer every
engine and driver binds alike), Messages, MessagesExact and Failed, keyed by (QueueName, SampledMinute).

**How bounded.** At most one sample a queue a minute: a sampler writes a queue at most once in a minute of its
own clock, and the insert adds nothing where the key holds a sample already, however many triggerers and
pumps sample at once (each engine's ``record_depth_sample``). A sampler deletes the samples older than its
retention (``[sqlqueue] depth_history_retention_hours``, :data:`RETENTION` by default) at most every
:data:`PURGE_EVERY`. So a table holds at most one row a queue a minute of the retention: 1,440 a queue a day.

**Never in the way.** Sampling must not fail a trigger, a sensor or a pump. A sampler asks the catalog whether
its table exists before its first insert (so an absent table costs no failed statement in the server's log)
and, while it is absent, again at most every :data:`PURGE_EVERY`, so a table created later is found without
a restart; its absence is the default, so it is logged once at INFO, not as a warning. A role that may not
write an existing table gets one warning per table and sampler, and that table is not sampled again by it;
a transient failure skips the minute; anything else is logged once and stops that table's sampling too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from ..model.address import QueueAddress
from ..model.errors import TransientDatabaseError
from .queue.provisioning import create_side_table, table_exists
from .roles import DepthHistoryTransport

__all__ = [
    "DEPTH_SAMPLES_TABLE",
    "PURGE_EVERY",
    "RETENTION",
    "DepthSample",
    "DepthSampleTable",
    "DepthSampler",
    "depth_samples_address",
    "history_points",
    "minute_of",
]

log = logging.getLogger(__name__)

DEPTH_SAMPLES_TABLE = "sqlqueue_depth_samples"
# The declared default of [sqlqueue] depth_history_retention_hours (get_provider_info; a test holds the two
# equal): the core cannot read Airflow's configuration, its callers on the Airflow side pass the setting.
RETENTION = timedelta(hours=24)
PURGE_EVERY = timedelta(minutes=10)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def minute_of(seconds: float) -> int:
    """The UTC minute of a Unix time, as minutes since the epoch (what SampledMinute holds)."""
    return int(seconds // 60)


def depth_samples_address(transport: DepthHistoryTransport, queue: QueueAddress) -> QueueAddress:
    """The history table of ``queue``'s schema (and catalog): where its samples go."""
    return transport.resolve(QueueAddress(DEPTH_SAMPLES_TABLE, queue.schema, queue.catalog))


@dataclass(frozen=True)
class DepthSample:
    """One queue's depth in one minute: ``messages`` (counted where ``exact``, else the estimate) and its
    error queue's count where the writer read it (``failed``)."""

    queue: str
    minute: int
    messages: int
    exact: bool
    failed: int | None

    @property
    def at(self) -> datetime:
        return _EPOCH + timedelta(minutes=self.minute)


def _changed_rows(cursor: Any, dialect: Any) -> int:
    """How many rows the last INSERT or DELETE changed: its count as a row where the engine's statement
    selects it (``purge_returns_count``), else the cursor's rowcount."""
    if dialect.purge_returns_count():
        rows = dialect.fetch_rows(cursor)
        return int(rows[0][0]) if rows else 0
    return max(cursor.rowcount, 0)


class DepthSampleTable:
    """The history table at ``address`` (from :func:`depth_samples_address`): its creation, one sample's
    insert-if-absent, the purge by age and the read of a window."""

    def __init__(self, transport: DepthHistoryTransport, address: QueueAddress) -> None:
        self.transport = transport
        self.address = address

    def __repr__(self) -> str:
        return f"<DepthSampleTable {self.address}>"

    # ---- provisioning --------------------------------------------------------------------------
    def create(self) -> bool:
        """Create the table if missing (safe from many processes at once; needs the right to create a table
        in the schema); True when this call created it."""
        return create_side_table(
            self.transport,
            self.address,
            self.transport.dialect.sql("create_depth_samples_table", self.address),
            f"the depth history {self.address}",
        )

    def create_script(self) -> str:
        """The table's DDL as a script a DBA can review and run."""
        dialect = self.transport.dialect
        return f"{dialect.display_sql(dialect.sql('create_depth_samples_table', self.address))};\n"

    def exists(self) -> bool:
        return table_exists(self.transport, self.address)

    # ---- writing -------------------------------------------------------------------------------
    def record(self, sample: DepthSample) -> bool:
        """Insert ``sample`` unless its queue and minute hold one already (another writer's); True when this
        call inserted it."""
        dialect = self.transport.dialect
        params = dialect.depth_sample_params(
            sample.queue, sample.minute, sample.messages, sample.exact, sample.failed
        )
        try:
            with self.transport.connection(self.address) as connection:
                cursor = connection.cursor()
                begin = dialect.begin_write()
                if begin:
                    cursor.execute(begin, ())
                cursor.execute(dialect.sql("record_depth_sample", self.address), params)
                inserted = _changed_rows(cursor, dialect) == 1
                connection.commit()
        except Exception as error:
            if dialect.is_duplicate_key(error.__cause__ or error):
                return False  # a concurrent writer of the same minute won where the engine ignores the hints
            raise
        return inserted

    def purge(self, before_minute: int) -> int:
        """Delete the samples of minutes before ``before_minute``; how many."""
        dialect = self.transport.dialect
        with self.transport.connection(self.address) as connection:
            cursor = connection.cursor()
            begin = dialect.begin_write()
            if begin:
                cursor.execute(begin, ())
            cursor.execute(dialect.sql("purge_depth_samples", self.address), (before_minute,))
            deleted = _changed_rows(cursor, dialect)
            connection.commit()
        return deleted

    # ---- reading -------------------------------------------------------------------------------
    def read(self, since_minute: int) -> dict[str, list[DepthSample]]:
        """Every queue's samples from ``since_minute`` on, oldest first: {table name: samples}. A SELECT
        alone, so a role that may only read the table can run it."""
        dialect = self.transport.dialect
        with self.transport.connection(self.address) as connection:
            cursor = connection.cursor()
            cursor.execute(dialect.sql("read_depth_samples", self.address), (since_minute,))
            rows = dialect.fetch_rows(cursor)
            connection.commit()
        samples: dict[str, list[DepthSample]] = {}
        for queue, minute, messages, exact, failed in rows:
            samples.setdefault(str(queue), []).append(
                DepthSample(
                    str(queue),
                    int(minute),
                    int(messages),
                    bool(exact),
                    None if failed is None else int(failed),
                )
            )
        return samples


class DepthSampler:
    """Turns a poller's depth reads into samples: at most one a queue a minute, the purge now and then.

    One per poller (a triggerer's shared poll of one connection, a pump), used from one thread at a time or
    several (a lock guards its bookkeeping). :meth:`sample` never raises.

    :param retention: how long samples are kept; None or zero: sample nothing.
    :param clock: Unix time in seconds (for tests).
    """

    def __init__(
        self,
        transport: DepthHistoryTransport,
        retention: timedelta | None = RETENTION,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.transport = transport
        self.retention = retention
        self._clock = clock
        self._lock = threading.Lock()
        self._last_minute: dict[QueueAddress, int] = {}  # the minute each queue was last sampled
        self._tables: dict[QueueAddress, DepthSampleTable] = {}
        self._off: set[QueueAddress] = set()  # tables this sampler stopped writing, each warned about once
        self._present: set[QueueAddress] = set()  # tables the catalog showed
        self._absent_until: dict[QueueAddress, float] = {}  # absent tables: when to ask the catalog again
        self._purged_at: dict[QueueAddress, float] = {}
        self.written = 0  # samples this sampler inserted (another writer may have had the minute first)

    @property
    def enabled(self) -> bool:
        return self.retention is not None and self.retention > timedelta(0)

    def sample(
        self, queue: QueueAddress, messages: int, exact: bool, failed: int | None = None
    ) -> DepthSample | None:
        """Record ``queue``'s depth as read now, unless this sampler wrote it in this minute already or its
        table is off; the sample offered to the table, or None when none was."""
        if not self.enabled:
            return None
        now = self._clock()
        minute = minute_of(now)
        with self._lock:
            if self._last_minute.get(queue) == minute:
                return None
            try:
                table = self._table(queue)
            except Exception as error:  # an address the engine refuses as a table's neighbour
                log.debug("no depth history for %s: %s", queue, error)
                self._last_minute[queue] = minute
                return None
            if table.address in self._off:
                return None
            self._last_minute[queue] = minute
        if not self._table_present(table, now):
            return None
        sample = DepthSample(queue.table, minute, int(messages), bool(exact), failed)
        try:
            if table.record(sample):
                self.written += 1
            self._purge_now_and_then(table, now)
        except TransientDatabaseError as error:
            log.debug("depth sample of %s skipped this minute: %s", queue, error)
        except Exception as error:
            with self._lock:
                self._off.add(table.address)
            log.warning(
                "not sampling queue depths into %s any more: %s: %s. The Queues page shows the depth it "
                "reads itself; create the table with the provisioning role (`sqlqueue create "
                "--depth-history`, or the DDL of `sqlqueue script --depth-history`) and grant this role "
                "INSERT and DELETE on it",
                table.address,
                type(error).__name__,
                error,
            )
        return sample

    def _table_present(self, table: DepthSampleTable, now: float) -> bool:
        """Whether ``table`` exists, from the catalog the first time and, while it is absent, again every
        :data:`PURGE_EVERY`; never raises (a failed check counts as absent until the next)."""
        with self._lock:
            if table.address in self._present:
                return True
            recheck = self._absent_until.get(table.address)
            if recheck is not None and now < recheck:
                return False
            self._absent_until[table.address] = now + PURGE_EVERY.total_seconds()
        try:
            found = table.exists()
        except Exception as error:
            log.debug("depth history %s not checked: %s", table.address, error)
            return False
        if not found:
            if recheck is None:
                log.info(
                    "no depth history table %s, so queue depths are not sampled into it (looked again "
                    "every %s). The Queues page shows the depth it reads itself; `sqlqueue create "
                    "--depth-history` makes the table",
                    table.address,
                    PURGE_EVERY,
                )
            return False
        with self._lock:
            self._present.add(table.address)
            self._absent_until.pop(table.address, None)
        return True

    def _table(self, queue: QueueAddress) -> DepthSampleTable:
        address = depth_samples_address(self.transport, queue)
        table = self._tables.get(address)
        if table is None:
            table = self._tables[address] = DepthSampleTable(self.transport, address)
        return table

    def _purge_now_and_then(self, table: DepthSampleTable, now: float) -> None:
        assert self.retention is not None
        with self._lock:
            last = self._purged_at.get(table.address)
            if last is not None and now - last < PURGE_EVERY.total_seconds():
                return
            self._purged_at[table.address] = now
        deleted = table.purge(minute_of(now - self.retention.total_seconds()))
        if deleted:
            log.debug(
                "purged %d depth sample(s) older than %s from %s", deleted, self.retention, table.address
            )


def history_points(samples: list[DepthSample]) -> list[dict[str, Any]]:
    """Samples as the Queues page draws them: {at, messages, exact, failed}, oldest first."""
    return [
        {
            "at": sample.at.isoformat().replace("+00:00", "Z"),
            "messages": sample.messages,
            "exact": sample.exact,
            "failed": sample.failed,
        }
        for sample in samples
    ]
