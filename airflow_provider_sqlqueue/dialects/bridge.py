"""What every dialect provides for the Spark bridge's control tables (``spark/tables.py``): the
``<prefix>_runs``, ``<prefix>_staging`` and ``<prefix>_fill`` tables beside an input queue and how the bridge
binds values on the engine. The statements themselves are data: the ``bridge_*`` entries of each engine's
table (``statements.py``'s :data:`~.statements.BRIDGE`, which most engines share but for the parameter marker
and the clock, plus each engine's own), read by :class:`~airflow_provider_sqlqueue.spark.tables.BridgeSql`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from ..model.address import QueueAddress

__all__ = [
    "ABORTED",
    "ACTIVE_STATES",
    "COMMITTED",
    "PROCESSING",
    "READ",
    "RECEIVING",
    "STREAMING",
    "BridgeColumnTypes",
    "BridgeStatements",
]

# The values of a run row's State column, written into the statements as literals: ``receiving`` ->
# ``processing`` -> ``committed``; or ``aborted`` when its messages went back to the queue.
RECEIVING = "receiving"
PROCESSING = "processing"
COMMITTED = "committed"
ABORTED = "aborted"
ACTIVE_STATES = (RECEIVING, PROCESSING)
# The states of the data source's runs (spark/source/): a batch read whose messages Spark was handed and
# that waits for its ack or release, and a stream (never orphaned: its staged rows wait for the query).
READ = "read"
STREAMING = "streaming"

# A converter of a number of seconds to the parameter an "older than" condition binds.
SecondsBinding = Callable[[float], Any]


@dataclass(frozen=True)
class BridgeColumnTypes:
    """The engine's column types of the control tables, one per kind of column they hold."""

    text: str  # Sink, Headers, Summary: unbounded text
    timestamp: str  # StartedAt, HeartbeatAt, FinishedAt: the bridge's own clock
    uuid: str  # a staged message's Id
    blob: str  # a staged message's Body
    integer: str  # attempts, partitions, batches, counts
    key: str  # RunId (at most 200 characters: spark/tables.py's RUN_ID_MAX)
    queue_name: str  # InputQueue: a queue's printed address
    expires: str  # a staged message's Expires, as the queue table stores it (restores copy it back)


class BridgeStatements:
    """What the bridge needs of an engine besides its statements: column types, limits, which of
    PostgreSQL's paths it has (COPY into sink tables, staged rows read in binary, the receive moving its
    rows into staging without leaving the server; the bridge asks before it takes one), and how values bind.
    """

    display_name: ClassVar[str]
    placeholder: ClassVar[str]
    # The engine's column types of the control tables (see BridgeColumnTypes).
    bridge_column_types: ClassVar[BridgeColumnTypes]
    # Rows one staging INSERT carries at most, before :meth:`rows_per_statement` has its say.
    bridge_stage_rows_limit: ClassVar[int]
    # Parameters one sink-table INSERT binds at most (the engine's or its driver's limit, with room).
    bridge_insert_parameters: ClassVar[int]
    # How a number of seconds binds to the ``bridge_older_than`` condition.
    bridge_bind_seconds: ClassVar[SecondsBinding]
    bridge_copies_rows: ClassVar[bool] = False
    bridge_reads_binary: ClassVar[bool] = False
    bridge_moves_server_side: ClassVar[bool] = False

    if TYPE_CHECKING:
        # Provided by Dialect, which this class is a mixin of.
        def sql(self, name: str, address: QueueAddress | None = None, /, **values: str) -> str: ...

        def qualified_name(self, address: QueueAddress) -> str: ...

        def row_id(self, value: Any) -> Any: ...

    def bridge_create_statements(
        self, runs: QueueAddress, staging: QueueAddress, fill: QueueAddress
    ) -> list[str]:
        """Idempotent DDL for the three control tables."""
        types = self.bridge_column_types
        text, ts, integer, key = types.text, types.timestamp, types.integer, types.key
        tables = {
            runs: (
                f"RunId {key} NOT NULL PRIMARY KEY, InputQueue {types.queue_name} NOT NULL, "
                f"Sink {text} NOT NULL, State varchar(20) NOT NULL, JobAttempt {integer} NOT NULL, "
                f"StartedAt {ts} NOT NULL, HeartbeatAt {ts} NOT NULL, FinishedAt {ts} NULL, "
                f"Summary {text} NULL"
            ),
            staging: (
                f"RunId {key} NOT NULL, RowVersion bigint NOT NULL, Id {types.uuid} NOT NULL, "
                "CorrelationId varchar(255) NULL, ReplyToAddress varchar(255) NULL, "
                f"Expires {types.expires} NULL, Headers {text} NOT NULL, Body {types.blob} NULL, "
                f"JobAttempt {integer} NOT NULL, Part {integer} NOT NULL, PRIMARY KEY (RunId, RowVersion)"
            ),
            fill: (
                f"RunId {key} NOT NULL, Part {integer} NOT NULL, Batch {integer} NOT NULL, "
                f"Messages {integer} NOT NULL, PRIMARY KEY (RunId, Part, Batch)"
            ),
        }
        return [
            self.sql("bridge_create_table", address, columns=columns, literal=self._literal(address))
            for address, columns in tables.items()
        ]

    def _literal(self, address: QueueAddress) -> str:
        """The qualified name as the text of a string literal (SQL Server's OBJECT_ID check takes it)."""
        return self.qualified_name(address).replace("'", "''")

    def bridge_staged_runs(self, runs: str, staging: str, *, of_queue: bool = True) -> str:
        """``bridge_staged_runs`` of one input queue (parameter) or (``of_queue`` False) of every queue."""
        return self.sql(
            "bridge_staged_runs",
            runs=runs,
            staging=staging,
            started=self.sql("bridge_seconds_since", column="r.StartedAt"),
            beat=self.sql("bridge_seconds_since", column="r.HeartbeatAt"),
            where=f" WHERE r.InputQueue = {self.placeholder}" if of_queue else "",
        )

    def bridge_expires_value(self, expires: datetime | None) -> Any:
        """A received message's Expires as the queue table stores it (restores copy it back unchanged)."""
        raise NotImplementedError(f"{self.display_name} has no Spark bridge")

    def bridge_sink_value(self, value: Any) -> Any:
        """A sink value (already past the bridge's JSON and bytes conversions) as this engine's driver binds
        it."""
        if isinstance(value, uuid.UUID):
            return self.row_id(value)
        return value
