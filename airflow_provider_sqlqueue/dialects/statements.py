"""Statements as data: each engine's SQL is a table of named statements, read by one renderer.

A dialect's :attr:`~.base.Dialect.statements` maps a statement's name (what it does: ``receive_batch``,
``count_expired``) to its text, so that a DBA reads every statement of an engine in one place and a test can
walk them all. The text holds placeholders for what varies, filled by :meth:`~.base.Dialect.sql`:

- ``{table}``: the quoted, qualified name of the address the statement runs on (``{destination}`` and
  ``{archive}`` for a second table);
- ``{p}``: the parameter marker of the engine's driver (``%s`` for psycopg, ``?`` for pyodbc and sqlite3);
- ``{now}``: the engine's clock, as the queue table keeps time;
- ``{marks}``: as many parameter markers as the caller binds values (``IN`` lists);
- any fragment the engine declares in :attr:`~.base.Dialect.fragments` (a column list, a condition), so
  that statements which differ only there are written once.

:data:`PORTABLE` holds the statements PostgreSQL and SQLite write alike but for the parameter marker and the
clock; each engine's module adds or replaces its own. What stays Python is what is code: choosing a
statement by lock mode or layout, driver glue, error classification and inspection.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["BRIDGE", "PORTABLE", "PORTABLE_FRAGMENTS", "StatementTable", "marks"]

StatementTable = Mapping[str, "str | tuple[str, ...]"]


def marks(placeholder: str, count: int) -> str:
    """``count`` parameter markers, comma-separated (an ``IN`` list the caller binds)."""
    return ", ".join([placeholder] * count)


PORTABLE_FRAGMENTS = {
    # the columns a send writes; tables from newer NServiceBus versions lack Recoverable
    "columns": "Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body",
    "columns_without_recoverable": "Id, CorrelationId, ReplyToAddress, Expires, Headers, Body",
    # what a listing of subscriptions filters on, and how it stops after N rows
    "by_topic": "Topic = {p}",
    "by_endpoint": "Endpoint = {p}",
    "limit": " LIMIT {p}",
}

_ROW = "Id, CorrelationId, ReplyToAddress, Headers, Body, RowVersion, Expires"
_UNEXPIRED = "WHERE Expires IS NULL OR Expires > {now}"

# What the statements every engine writes in its own words must do (a caller asks for each by name,
# ``dialect.sql(name, address)``; ``optional_sql`` where an engine may have none). Parameters in order:
# - receive_batch: DELETE of the oldest rows no receiver holds (how many), returning Row's columns: Id,
#   CorrelationId, ReplyToAddress, Expired, Headers, Body, RowVersion, Expires.
# - receive_batch_after: the same, only rows after a RowVersion (that RowVersion, how many), for engines whose
#   deleted rows linger in the index (transport/queue/low_water.py); none where a receive never walks them.
# - receive_batch_through (and ``_without_row_locks``): only rows up to a RowVersion (that RowVersion, how
#   many), for a Spark stream under Trigger.AvailableNow; none where no caller needs it.
# - peek_estimate: upper bound of the unheld rows, max - min + 1 of RowVersion, at a cost independent of the
#   queue's length; peek_bounds: their oldest and newest RowVersion (NULLs when empty), with its hints.
# - purge_expired_batch: DELETE of up to N expired rows no receiver holds (N); its count through rowcount, or
#   as a row where ``purge_returns_count``.
# - ``<statement>_without_row_locks``: the same work for a role without the rights row locks ask for
#   (PostgreSQL's UPDATE); Dialect.without_row_locks picks it.
# - open_transaction: a batch without parameters that makes sure a transaction is open (for locks it owns);
#   current_catalog: the connection's database, no parameter and no privilege needed, run at most once by a
#   transport (Transport.current_catalog); none where the engine has no catalog (SQLite's schema part names an
#   attached database).
# - set_recoverable_default: statements (no parameters) that give Recoverable its default inside a
#   savepoint, waiting a bounded time for the table's lock; ``set_recoverable_default_failed`` undoes them.
# - vacuum_table: the plain vacuum of one table, outside a transaction; none where the engine gives deleted
#   rows' storage back by itself.
# - create_delayed_table: Headers, Body, Due (UTC, the database clock) and RowVersion. store_delayed: one
#   delayed message (Dialect.store_delayed_params), Due the given time or the database clock plus the delay.
# - create_archive_table: the queue's columns (Recoverable nullable: tables of later NServiceBus versions have
#   none), ErrorRowVersion (the row's RowVersion in the error queue, named so that the archive is not listed
#   as a queue) and ArchivedAt (UTC, the database clock, its default).
# - purge_archive_batch: DELETE of up to N archived rows archived more than S seconds ago by the database
#   clock (Dialect.purge_archive_params); its count as purge_expired_batch's.
# - create_depth_samples_table: the depth history of a schema's queues (transport/depth_samples.py):
#   QueueName (the queue's table name), SampledMinute (the UTC minute, as minutes since the Unix epoch),
#   Messages, MessagesExact and Failed (its error queue's count, NULL when not read), keyed by (QueueName,
#   SampledMinute). record_depth_sample: the insert of one sample unless that key holds one already, safe
#   against concurrent writers of the same key (Dialect.depth_sample_params); purge_depth_samples: DELETE of
#   the samples before a minute; read_depth_samples: the samples from a minute on, by queue then minute.
PORTABLE: StatementTable = {
    "drop_table": "DROP TABLE IF EXISTS {table}",
    # {index} named from the table (Dialect.index_spec) on {on}
    "create_rowversion_index": "CREATE UNIQUE INDEX {index} ON {on} (RowVersion)",
    "create_expires_index": "CREATE INDEX {index} ON {on} (Expires) WHERE Expires IS NOT NULL",
    "create_delayed_index": "CREATE INDEX {index} ON {on} (Due)",
    "create_archive_index": "CREATE INDEX {index} ON {on} (ArchivedAt)",
    # A batching pump's message in the batch's transaction: mark, undo to the mark, forget the mark.
    "savepoint": "SAVEPOINT {name}",
    "rollback_to_savepoint": "ROLLBACK TO SAVEPOINT {name}",
    "release_savepoint": "RELEASE SAVEPOINT {name}",
    # the committed rows not yet expired
    "count_exact": "SELECT count(*) FROM {table} " + _UNEXPIRED,
    # A plain read: no row locks, never waits for receivers; rows a receiver has deleted but not yet
    # committed still show until its transaction commits (PostgreSQL's MVCC, SQLite's WAL reader). The oldest
    # N (parameter) in RowVersion order, for `sqlqueue peek` and `stats`.
    "browse": f"SELECT {_ROW} FROM {{table}} {_UNEXPIRED} ORDER BY RowVersion LIMIT {{p}}",
    # The oldest unexpired row's RowVersion and Headers, no row when none: a gauge's oldest message age,
    # without its body. No lasting locks, as browse.
    "oldest_headers": "SELECT RowVersion, Headers FROM {table} "
    + _UNEXPIRED
    + " ORDER BY RowVersion LIMIT 1",
    # what a purge would delete, by the database clock
    "count_expired": "SELECT count(*) FROM {table} WHERE Expires <= {now}",
    # Failed messages (transport/failed.py), read in keyset pages, moved or deleted row by row; the reads
    # take no lasting locks. A page: the rows after a RowVersion, at most N (Dialect.failed_page_params).
    "failed_page": "SELECT RowVersion, Id, Headers FROM {table} WHERE {after} ORDER BY RowVersion LIMIT {p}",
    # the newest N, newest first: the bounded sample the Queues page groups
    "failed_newest": "SELECT RowVersion, Id, Headers FROM {table} ORDER BY RowVersion DESC LIMIT {p}",
    # the rows of one Id (an error queue may hold a message more than once), oldest first
    "failed_messages": f"SELECT {_ROW} FROM {{table}} WHERE Id = {{p}} ORDER BY RowVersion",
    # the row of one RowVersion, deleted; no row when another session took it first
    "take_failed_row": (
        "DELETE FROM {table} WHERE RowVersion = {p} RETURNING Id, CorrelationId, ReplyToAddress, Headers, "
        "Body"
    ),
    # ---- the delayed table
    # Up to N due rows, oldest Due first: RowVersion and Headers only, so the mover learns each row's
    # destination while the bodies stay on the server (SQL Server's hints lock them until commit).
    "select_due_delayed": "SELECT RowVersion, Headers FROM {table} WHERE Due <= {now} ORDER BY Due LIMIT {p}",
    # the rows of the given RowVersions, which the mover sends to the error queue instead of moving
    "select_delayed_rows": "SELECT Headers, Body, RowVersion FROM {table} WHERE RowVersion IN ({marks})",
    "delete_delayed_rows": "DELETE FROM {table} WHERE RowVersion IN ({marks})",
    # the database clock with the earliest Due (NULL when empty), so that the mover's wait is skew-free
    "next_due_delayed": "SELECT {now}, min(Due) FROM {table}",
    "count_delayed": "SELECT count(*) FROM {table}",
    # ---- the archive beside an error queue
    "count_archive": "SELECT count(*) FROM {table}",
    # One page, newest archived first (no two pages overlap): the Body's size in bytes, the bodies stay on the
    # server. Parameters from Dialect.browse_archive_params.
    "browse_archive": (
        "SELECT Id, CorrelationId, ReplyToAddress, Headers, {body_size}, ErrorRowVersion, ArchivedAt, "
        "Expires FROM {table} ORDER BY ArchivedAt DESC, ErrorRowVersion DESC, Id DESC LIMIT {p} OFFSET {p}"
    ),
    # ---- the depth history (transport/depth_samples.py): the key decides, so the loser of a race inserts
    # nothing instead of failing
    "record_depth_sample": (
        "INSERT INTO {table} (QueueName, SampledMinute, Messages, MessagesExact, Failed) "
        "VALUES ({p}, {p}, {p}, {p}, {p}) ON CONFLICT (QueueName, SampledMinute) DO NOTHING"
    ),
    "purge_depth_samples": "DELETE FROM {table} WHERE SampledMinute < {p}",
    "read_depth_samples": (
        "SELECT QueueName, SampledMinute, Messages, MessagesExact, Failed FROM {table} "
        "WHERE SampledMinute >= {p} ORDER BY QueueName, SampledMinute"
    ),
    # ---- the subscription table: QueueAddress, Endpoint, Topic, keyed by (Endpoint, Topic)
    # The upsert of (endpoint, topic) -> queue address (Dialect.subscribe_params). Where it can race with a
    # subscriber of the same key (an engine that ignores its locking hints), the loser fails with a
    # duplicate key (Dialect.is_duplicate_key) and runs it again.
    "subscribe": (
        "INSERT INTO {table} (Endpoint, Topic, QueueAddress) VALUES ({p}, {p}, {p}) "
        "ON CONFLICT (Endpoint, Topic) DO UPDATE SET QueueAddress = EXCLUDED.QueueAddress"
    ),
    # (endpoint, topic); its count as purge_expired_batch's
    "unsubscribe": "DELETE FROM {table} WHERE Endpoint = {p} AND Topic = {p}",
    # the queues of the subscribers to any of the given topics
    "select_subscribers": "SELECT DISTINCT QueueAddress FROM {table} WHERE Topic IN ({marks})",
    "select_subscriptions": (
        "SELECT QueueAddress, Endpoint, Topic FROM {table}{where} ORDER BY Topic, Endpoint{limit}"
    ),
}

# ---- the Spark bridge's control tables (spark/tables.py): {runs}, {staging} and {fill} are the control
# tables, {bridge_now} the bridge's own clock, {states} a list of run states; run states are literals
_ACTIVE = "('receiving', 'processing')"
_STAGED = "RunId, RowVersion, Id, CorrelationId, ReplyToAddress, Expires, Headers, Body, JobAttempt, Part"

BRIDGE: StatementTable = {
    "bridge_create_table": "CREATE TABLE IF NOT EXISTS {table} ({columns})",
    # An UPDATE as it runs where the drain reads how many rows it changed: the cursor's rowcount tells.
    "bridge_counted": "{statement}",
    "bridge_get_run": "SELECT State, JobAttempt, InputQueue, Summary FROM {runs} WHERE RunId = {p}",
    "bridge_run_sink": "SELECT Sink FROM {runs} WHERE RunId = {p}",
    "bridge_insert_run": (
        "INSERT INTO {runs} (RunId, InputQueue, Sink, State, JobAttempt, StartedAt, HeartbeatAt) "
        "VALUES ({p}, {p}, {p}, 'receiving', 1, {bridge_now}, {bridge_now})"
    ),
    # A stream's row: run id, queue, sink, Summary (its last position, as JSON).
    "bridge_insert_stream": (
        "INSERT INTO {runs} (RunId, InputQueue, Sink, State, JobAttempt, StartedAt, HeartbeatAt, "
        "Summary) VALUES ({p}, {p}, {p}, 'streaming', 1, {bridge_now}, {bridge_now}, {p})"
    ),
    # A new job attempt on a run id: back to receiving after an abort, else keep the state.
    "bridge_restart_run": (
        "UPDATE {runs} SET JobAttempt = JobAttempt + 1, HeartbeatAt = {bridge_now}, Sink = {p}, "
        "State = CASE WHEN State = 'aborted' THEN 'receiving' ELSE State END, "
        "FinishedAt = NULL, Summary = NULL WHERE RunId = {p} AND State <> 'committed'"
    ),
    "bridge_set_state": (
        "UPDATE {runs} SET State = {p}, HeartbeatAt = {bridge_now} WHERE RunId = {p} AND State IN ({states})"
    ),
    # Set a run's heartbeat to now (and so lock its row for the transaction) while it is in one of {states}.
    "bridge_touch_run": (
        "UPDATE {runs} SET HeartbeatAt = {bridge_now} WHERE RunId = {p} AND State IN ({states})"
    ),
    "bridge_heartbeat": (
        f"UPDATE {{runs}} SET HeartbeatAt = {{bridge_now}} WHERE RunId = {{p}} AND State IN {_ACTIVE}"
    ),
    "bridge_finish_run": (
        "UPDATE {runs} SET State = 'committed', FinishedAt = {bridge_now}, Summary = {p} "
        "WHERE RunId = {p} AND State = 'processing'"
    ),
    "bridge_set_summary": "UPDATE {runs} SET FinishedAt = {bridge_now}, Summary = {p} WHERE RunId = {p}",
    # Compare-and-set of a run's Summary (a stream keeps its last position there).
    "bridge_set_summary_if": (
        "UPDATE {runs} SET Summary = {p}, HeartbeatAt = {bridge_now} WHERE RunId = {p} AND Summary = {p}"
    ),
    # A run's State (or a stream's owner, in Summary) read with its row locked to the end of the transaction:
    # shared for the State, for the Summary only against a change of its key, as for an update for a
    # takeover. SQLite serialises writers anyway, so there they are plain reads.
    "bridge_run_state_shared": "SELECT State FROM {runs} WHERE RunId = {p}",
    "bridge_run_owner_shared": "SELECT Summary FROM {runs} WHERE RunId = {p}",
    "bridge_run_takeover": "SELECT Summary FROM {runs} WHERE RunId = {p}",
    # The other active runs of an input queue whose heartbeat is older than N seconds ({older}).
    "bridge_orphans": (
        "SELECT RunId FROM {runs} WHERE InputQueue = {p} AND RunId <> {p} "
        f"AND State IN {_ACTIVE} AND {{older}}"
    ),
    # ---- staging
    "bridge_stage_rows": f"INSERT INTO {{staging}} ({_STAGED}) VALUES {{values}}",
    "bridge_count_part": (
        "SELECT count(*) FROM {staging} WHERE RunId = {p} AND JobAttempt = {p} AND Part = {p}"
    ),
    "bridge_staged_stats": (
        "SELECT count(*), min(RowVersion), max(RowVersion) FROM {staging} WHERE RunId = {p}"
    ),
    "bridge_staged_slice": (
        "SELECT RowVersion, {bridge_id_column}, Headers, Body, Expires FROM {staging} "
        "WHERE RunId = {p} AND RowVersion >= {p} AND RowVersion < {p} ORDER BY RowVersion"
    ),
    "bridge_delete_staging": "DELETE FROM {staging} WHERE RunId = {p}",
    # Drop a stream's staged rows up to a position (its commit(end)).
    "bridge_delete_staged_through": "DELETE FROM {staging} WHERE RunId = {p} AND RowVersion <= {p}",
    # Put a run's staged messages back at the end of {queue}, in their order, Expires kept.
    "bridge_restore": (
        "INSERT INTO {queue} (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body) "
        "SELECT Id, CorrelationId, ReplyToAddress, {true}, Expires, Headers, Body "
        "FROM {staging} WHERE RunId = {p} ORDER BY RowVersion"
    ),
    # The runs that have staged messages, of one input queue ({where}) or of every queue beside these
    # tables: run id, input queue, sink, state, staged messages, lowest and highest RowVersion, seconds since
    # the run started and since its last heartbeat, oldest start first.
    "bridge_staged_runs": (
        "SELECT r.RunId, r.InputQueue, r.Sink, r.State, s.Staged, s.Low, s.High, {started}, {beat} "
        "FROM {runs} r JOIN (SELECT RunId, count(*) AS Staged, min(RowVersion) AS Low, "
        "max(RowVersion) AS High FROM {staging} GROUP BY RunId) s ON s.RunId = r.RunId{where} "
        "ORDER BY r.StartedAt, r.RunId"
    ),
    # ---- fill markers
    "bridge_fill_batches_done": "SELECT Batch FROM {fill} WHERE RunId = {p} AND Part = {p}",
    "bridge_insert_fill_marker": (
        "INSERT INTO {fill} (RunId, Part, Batch, Messages) VALUES ({p}, {p}, {p}, {p})"
    ),
    "bridge_fill_totals": "SELECT count(*), COALESCE(sum(Messages), 0) FROM {fill} WHERE RunId = {p}",
    # ---- sink tables
    # No rows, only the column names of {table} (from the cursor's description).
    "bridge_table_columns": "SELECT * FROM {table} WHERE 1 = 0",
    "bridge_insert_rows": "INSERT INTO {table} ({columns}) VALUES {values}",
}
