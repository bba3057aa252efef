"""One drain run on the driver: check the sink and the transform, start or resume the run, phase 1 (receive
into staging), phase 2 (transform the staged messages and commit the result with the run), and on any
failure before the commit, abort (the staged messages go back to the input queue)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ...transport import ConfigurationError, PermissionDenied
from ..runs import Runs
from ..source.batch import move_unreadable_held, slice_bounds
from ..source.errors import DrainError
from ..source.heartbeat import Heartbeat
from ..source.hold import HeldRows, RowHold, reason_not_to_hold
from ..source.transactions import (
    begin_write,
    execute,
    execute_counted,
    require_bridge_layout,
    rows_changed,
    table_exists,
)
from ..tables import COMMITTED, PROCESSING, RECEIVING, BridgeSql, bridge_tables, create_bridge_tables
from .config import DrainConfig
from .copy_text import copy_chunks
from .messages import run_messages
from .receive import receive_into_staging
from .sinks import SinkWriter
from .transform import apply_transform, load_transform

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger("airflow_provider_sqlqueue.spark.drain")

__all__ = ["Drain", "run_drain", "summary_json"]


class Drain:
    """One drain run on the driver: the two phases, between the run's bookkeeping and the sink."""

    def __init__(
        self, spark: SparkSession, config: DrainConfig, *, echo: Callable[[str], None] | None = None
    ):
        self.spark = spark
        self.config = config
        self.sink = config.parsed_sink
        self.echo = echo or (lambda text: log.info("%s", text))
        self.transport = config.open(pool_size=2, max_overflow=2)
        self.input = self.transport.queue(config.input_queue)
        self.tables = bridge_tables(self.transport, config.input_queue, config.prefix)
        self.sql = BridgeSql(self.transport, self.tables, self.input.address)
        self.runs = Runs(self.transport, self.sql)
        self.writer = SinkWriter(self.transport, self.sql, config, self.echo)
        self.hold: RowHold | None = None
        self.held_slices: list[tuple[int, int]] = []
        self.summary: dict[str, Any] = {
            "run_id": config.run_id,
            "input_queue": self.input.name,
            "sink": str(self.sink),
            "partitions": config.partitions,
            "batch_size": config.batch_size,
            "max_messages": config.max_messages,
        }

    def close(self) -> None:
        self.transport.close()

    # -- set-up --
    def prepare(self, transform: Callable[[DataFrame], DataFrame]) -> StructType:
        """Check tables and the transform's output before anything is received; create tables if allowed."""
        if self.config.read_in_place is True and self.sql.engine != "postgresql":
            raise ConfigurationError(
                f"read_in_place works on PostgreSQL only, not {self.sql.engine}; "
                "leave it off to stage the messages"
            )
        if not self.input.exists():
            raise ConfigurationError(f"input queue {self.input.name} does not exist; provision it first")
        require_bridge_layout(self.input, "input queue")
        missing = [
            str(t) for t in (self.tables.runs, self.tables.staging) if not table_exists(self.transport, t)
        ]
        if missing and self.config.create_tables:
            try:
                create_bridge_tables(self.transport, self.config.input_queue, self.config.prefix)
            except PermissionDenied as error:
                raise PermissionDenied(
                    f"creating the Spark bridge's tables {', '.join(missing)} was refused; nothing was "
                    f"received. Create them in the provisioning step (ProvisionSparkBridgeOperator) or give "
                    f"this role CREATE on the schema ({error})"
                ) from error
        elif missing:
            raise ConfigurationError(
                f"the Spark bridge's tables {', '.join(missing)} do not exist: create them in the "
                "provisioning step (ProvisionSparkBridgeOperator, create_bridge_tables) or let the job "
                "create them with --create-tables (needs DDL rights)"
            )
        schema = apply_transform(transform, run_messages(self.spark, None), self.config).schema
        self.writer.check(schema)
        return schema

    def start_run(self) -> tuple[str, int]:
        """Register or resume the run; return (state, job attempt)."""
        row = self.runs.start_drain(self.config.run_id, self.input.name, str(self.sink))
        return row.state, row.attempt

    def holds_in_place(self) -> bool:
        """Whether phase 1 holds the messages in place: as ``read_in_place`` asks, or, left unset, on
        PostgreSQL unless a reason to stage is found (logged): staging is then what keeps the run's
        guarantees, or the only way to finish it."""
        if self.config.read_in_place is not None:
            return self.config.read_in_place
        reason = self._reason_to_stage()
        if reason is not None:
            self.echo(f"phase 1 stages the messages: {reason}")
        return reason is None

    def _reason_to_stage(self) -> str | None:
        if self.sql.engine != "postgresql":
            return f"{self.sql.engine} cannot hold them in place"
        if self.config.fail_receive_batch is not None:
            return "the receive drill needs receive tasks"
        if self.runs.staged_stats(self.config.run_id)[0]:
            return f"run {self.config.run_id} has staged messages to finish"
        return reason_not_to_hold(self.transport, self.input)

    # -- phases --
    def hold_in_place(self) -> HeldRows:
        """Phase 1 with ``read_in_place``: hold the messages in the queue under the driver's uncommitted
        delete."""
        if self.runs.staged_stats(self.config.run_id)[0]:
            raise DrainError(
                f"run {self.config.run_id} has messages staged by a run without read_in_place; "
                "re-run it without read_in_place to finish it"
            )
        self.hold = RowHold(self.transport, self.input, self.sql)
        held = self.hold.hold(self.config.batch_size, self.config.max_messages)
        self.held_slices = slice_bounds(held.ranges, self.config.read_slice_rows)
        return held

    def warm_up(self, transform: Callable[[DataFrame], DataFrame]) -> threading.Thread:
        """Run phase 2's plan on an empty slice, in the background, while the driver holds the messages.

        Spark's first job of a kind starts the Python workers and compiles the plan: about 10 s on a small
        machine, which staging spends in phase 1's receive tasks. Holding is the database's work, so this
        overlaps it. A failure here only costs the time it would have saved.
        """
        from pyspark.sql import functions as F

        def run() -> None:
            try:
                self.spark.sparkContext.setJobGroup("sqlqueue-warm-up", "warm up phase 2 while holding")
                result = apply_transform(
                    transform, run_messages(self.spark, self.config, [(0, 0)]), self.config
                )
                chunks = copy_chunks(result) if self.sink.kind == "table" and self.sql.can_copy else None
                if chunks is not None:
                    chunks.agg(F.sum("rows")).collect()
                else:
                    result.count()
            except Exception as error:
                log.info("warming up phase 2 failed (%s); it only costs time", error)

        thread = threading.Thread(target=run, name="sqlqueue-warm-up", daemon=True)
        thread.start()
        return thread

    def _commit_connection(self) -> Any:
        """The commit's connection: the one holding the messages with ``read_in_place``, else a new one."""
        from contextlib import nullcontext

        return nullcontext(self.hold.connection) if self.hold is not None else self.transport.connection()

    def _finish(self, cursor: Any, staged: int, written: int) -> None:
        """Inside the commit's transaction: end the run (with ``read_in_place`` the hold's uncommitted delete
        of the messages commits with it, and the unreadable ones phase 2 found go to the error queue)."""
        run_id, hold = self.config.run_id, self.hold
        if hold is not None:  # the unreadable held messages count as unreadable, not received
            slices = self.held_slices
            unreadable = move_unreadable_held(self.transport, self.sql, run_id, hold, slices, self.echo)
            readable = hold.held.count - unreadable
            self.summary.update(poisoned=unreadable, received=readable, processed=readable)
            staged = 0  # nothing of the run is in staging
        self.summary["written"] = written
        self.runs.commit_in(cursor, run_id, staged, self.summary)

    def receive(self, job_attempt: int) -> list[dict[str, Any]]:
        """Phase 1: receive into staging; return each receive task's counts."""
        limited = self.config.max_messages is not None
        already_staged = self.runs.staged_stats(self.config.run_id)[0] if limited else 0
        return receive_into_staging(self.spark, self.config, job_attempt, already_staged)

    def commit(self, result: DataFrame, staged: int) -> int:
        """Write the result and end the run in one transaction (tables, queues) or after the files."""
        if self.sink.is_file:
            return self._commit_files(result, staged)
        from pyspark import StorageLevel

        columns = result.columns
        # table rows on PostgreSQL: COPY text formatted by the executors, the driver only passes it on
        chunks = copy_chunks(result) if self.sink.kind == "table" and self.sql.can_copy else None
        # compute the result on every core first (toLocalIterator alone runs one partition at a time);
        # if cached blocks are lost Spark recomputes them from the run's staged rows, which do not change
        started = time.monotonic()
        if chunks is not None:
            result = chunks.persist(StorageLevel.MEMORY_AND_DISK)
            computed = int(result.agg({"rows": "sum"}).collect()[0][0] or 0)
        else:
            result = result.persist(StorageLevel.MEMORY_AND_DISK)
            computed = result.count()
        self.summary["compute_seconds"] = round(time.monotonic() - started, 3)
        self.echo(f"phase 2: {computed} result row(s) computed; committing them with the run")
        started = time.monotonic()
        run_id = self.config.run_id
        written = 0
        with self._commit_connection() as connection:
            cursor = connection.cursor()
            begin_write(self.transport, cursor)
            statement = self.sql.counted(self.sql.set_state((PROCESSING,)))
            if rows_changed(self.transport, cursor, statement, (PROCESSING, run_id)) != 1:
                raise DrainError(f"run {run_id} is no longer processing (another job took its messages back)")
            rows = result.toLocalIterator(prefetchPartitions=True)  # computed and persisted already
            if chunks is not None:
                written = self.writer.write_copy_chunks(cursor, columns, rows)
            elif self.sink.kind == "table":
                written = self.writer.write_table(cursor, columns, rows)
            else:
                written = self.writer.write_queue(connection, columns, rows)
            self.summary["write_seconds"] = round(time.monotonic() - started, 3)
            self._finish(cursor, staged, written)
            connection.commit()
        result.unpersist()
        self.summary["commit_seconds"] = round(time.monotonic() - started, 3)
        return written

    def _commit_files(self, result: DataFrame, staged: int) -> int:
        path, written = self.writer.write_files(self.spark, result, staged)
        self.summary["output_path"] = path
        with self._commit_connection() as connection:
            cursor = connection.cursor()
            begin_write(self.transport, cursor)
            statement = self.sql.counted(self.sql.set_state((PROCESSING,)))
            if rows_changed(self.transport, cursor, statement, (PROCESSING, self.config.run_id)) != 1:
                raise DrainError(
                    f"run {self.config.run_id} is no longer processing; {path} may hold rows of messages "
                    "that went back to the queue (readers deduplicate by message id)"
                )
            self._finish(cursor, staged, written)
            connection.commit()
        return written

    def run(self) -> dict[str, Any]:
        """The whole run: both phases and the commit, or the abort; return the run's summary."""
        config = self.config
        started = time.monotonic()
        transform = load_transform(config.transform)
        self.prepare(transform)
        state, job_attempt = self.start_run()
        self.summary["job_attempt"] = job_attempt
        if state != COMMITTED and self.config.read_in_place is None:
            self.config = config = replace(config, read_in_place=self.holds_in_place())
        if state == COMMITTED:
            row = self.runs.row(config.run_id)
            previous = json.loads(row[3]) if row and row[3] else {}
            self.echo(f"run {config.run_id} was committed before: nothing to do")
            return {**previous, "skipped": True, "job_attempt": job_attempt}
        heartbeat = Heartbeat(self.transport, self.sql, config.run_id, config.heartbeat_interval)
        heartbeat.start()
        try:
            self.summary["restored_orphans"] = self.runs.restore_orphans(
                config.run_id, self.input.name, self.input.address, config.orphan_timeout, self.echo
            )
            tasks: list[dict[str, Any]] = []
            held: HeldRows | None = None
            phase1 = time.monotonic()
            if config.read_in_place:
                # a run that was processing when its driver died holds nothing any more: hold anew
                self.echo(
                    f"phase 1: the driver holds the messages of {self.input.name} in place "
                    "(an uncommitted delete)"
                )
                warming = self.warm_up(transform)
                held = self.hold_in_place()
                self.summary["hold_seconds"] = round(time.monotonic() - phase1, 3)
                self._to_processing()
                warming.join()
                # the reads of the held rows note what they found in the run's Summary (the warm-up's not)
                execute(self.transport, self.sql.set_summary(), ("{}", config.run_id))
            elif state == RECEIVING:
                self.echo(f"phase 1: {config.partitions} receiver(s) drain {self.input.name} into staging")
                tasks = self.receive(job_attempt)
                self._to_processing()
            else:
                self.echo(f"run {config.run_id} was already processing: finishing it without receiving more")
            receive_seconds = time.monotonic() - phase1
            if held is not None:
                staged = held.count
                self.summary.update(
                    received=held.count, expired=held.expired, poisoned=0, batches=held.batches
                )
            else:
                staged = self.runs.staged_stats(self.config.run_id)[0]
                self.summary.update(
                    received=sum(t["received"] for t in tasks),
                    expired=sum(t["expired"] for t in tasks),
                    poisoned=sum(t["poisoned"] for t in tasks),
                    batches=sum(t["batches"] for t in tasks),
                )
            self.summary.update(
                read_in_place=held is not None,
                tasks=tasks,
                processed=staged,
                receive_seconds=round(receive_seconds, 3),
            )
            if held is not None:
                self.echo(
                    f"phase 1 done: {held.count} held for the run ({held.expired} expired, taken); "
                    "unreadable ones are set apart as phase 2 reads them"
                )
            else:
                self.echo(
                    f"phase 1 done: {self.summary['received']} received ({self.summary['expired']} expired, "
                    f"{self.summary['poisoned']} unreadable moved to the error queue); "
                    f"{staged} staged for the run"
                )
            phase2 = time.monotonic()
            messages = run_messages(self.spark, config, held.ranges if held is not None else None)
            result = apply_transform(transform, messages, config)
            self.echo(f"phase 2: transform and commit {staged} message(s) to {self.sink}")
            self.summary["process_seconds"] = None
            written = self.commit(result, staged)
            process_seconds = time.monotonic() - phase2
            total = time.monotonic() - started
            self.summary.update(
                written=written,
                state=COMMITTED,
                process_seconds=round(process_seconds, 3),
                seconds=round(total, 3),
                messages_per_second=round(self.summary["processed"] / total, 1) if total > 0 else None,
                skipped=False,
            )
            execute(
                self.transport,
                self.sql.set_summary(),
                (json.dumps(self.summary, default=str), config.run_id),
            )
            return self.summary
        except BaseException as error:
            if self.hold is not None:
                self._release_hold(error)
            moved = None
            try:
                reason = f"{type(error).__name__}: {error}"
                moved = self.runs.abort(config.run_id, reason, self.input.address)
            except Exception as abort_error:
                log.error(
                    "run %s failed (%s) and its staged messages could not be put back (%s); they stay staged "
                    "until the run id is re-run or another job restores them",
                    config.run_id,
                    error,
                    abort_error,
                )
            if moved is not None:
                self.echo(
                    f"run {config.run_id} aborted: {moved} staged message(s) went back to {self.input.name}"
                )
            raise
        finally:
            heartbeat.stopped.set()
            if self.hold is not None:
                self._release_hold(None)

    def _to_processing(self) -> None:
        """End phase 1: the run moves from receiving to processing (or another driver of it moved it)."""
        changed = execute_counted(
            self.transport,
            self.sql.counted(self.sql.set_state((RECEIVING,))),
            (PROCESSING, self.config.run_id),
        )
        if changed != 1 and (self.runs.row(self.config.run_id) or (None,))[0] != PROCESSING:
            # another driver of this run id moving it on is fine (one of the two commits)
            raise DrainError(f"run {self.config.run_id} left the receiving state while receiving")

    def _release_hold(self, error: BaseException | None) -> None:
        hold, self.hold = self.hold, None
        if hold is None:
            return
        try:
            hold.close(error)
        except Exception as close_error:  # the connection is gone: so are its locks
            log.warning("releasing the held messages' connection failed: %s", close_error)


def run_drain(spark: SparkSession, config: DrainConfig, *, echo: Callable[[str], None] | None = None) -> dict:
    """Run one drain on ``spark``; return its summary (also stored in the runs table)."""
    drain = Drain(spark, config, echo=echo)
    try:
        return drain.run()
    finally:
        drain.close()


def summary_json(summary: dict[str, Any]) -> str:
    """The summary as one line of JSON, as the job prints it."""
    return json.dumps(summary, default=str, sort_keys=True)
