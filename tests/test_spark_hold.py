"""The drain with ``read_in_place`` on PostgreSQL: the driver holds the messages in the queue under a delete
it leaves uncommitted from phase 1 to the commit, instead of staging them. Every test accounts for every
message exactly, and the staging table stays empty throughout."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import time
import uuid

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs a Java runtime (apt-get install default-jre-headless)", allow_module_level=True)

import test_spark_jobs
from reliability_figures import counted
from test_spark_jobs import (
    FAULT_LOG,
    FAULTS,
    SPARK_SUBMIT_TIMEOUT,
    assert_exactly_once_in_table,
    config,
    drain_args,
    error_queue_headers,
    finish,
    order_ids_in_table,
    rows_of,
    run_state,
    scalar,
    send_orders,
    send_unreadable,
    spark_submit,
    staged,
    table,
)

from airflow_provider_sqlqueue.demo.orders import make_orders
from airflow_provider_sqlqueue.spark import DRAIN_JOB
from airflow_provider_sqlqueue.spark.drain import Drain, load_transform, run_drain
from airflow_provider_sqlqueue.spark.drain.messages import run_messages, source_options, staged_messages
from airflow_provider_sqlqueue.spark.drain.transform import apply_transform
from airflow_provider_sqlqueue.spark.source.batch import plan_tasks, slice_bounds
from airflow_provider_sqlqueue.spark.source.hold import RowHold, consecutive_ranges
from airflow_provider_sqlqueue.spark.source.options import SourceOptions
from airflow_provider_sqlqueue.spark.source.row_batches import row_batches, streams_in_chunks
from airflow_provider_sqlqueue.spark.tables import BridgeSql, bridge_tables
from airflow_provider_sqlqueue.transport import ConfigurationError, HeaderFormatError

POSTGRES = pytest.mark.parametrize("target", ["postgresql"], indirect=True)
pytest_plugins = ["reliability_figures"]  # the figures fixture
spark = test_spark_jobs.spark  # the module's local[2,4] session, as a fixture of this module too
bridge = test_spark_jobs.bridge


def test_ranges_hold_exactly_the_row_versions_and_slices_stay_inside_them() -> None:
    assert consecutive_ranges([]) == []
    assert consecutive_ranges([3, 4, 5, 7, 9, 10]) == [(3, 5), (7, 7), (9, 10)]
    ranges = consecutive_ranges([3, 4])
    assert consecutive_ranges([5, 6, 8], ranges) is ranges  # a hold extends its ranges batch by batch
    assert ranges == [(3, 6), (8, 8)]
    bounds = slice_bounds([(3, 5), (7, 7), (9, 20)], 4)
    assert bounds == [(3, 6), (7, 8), (9, 13), (13, 17), (17, 21)]
    covered = [value for start, end in bounds for value in range(start, end)]
    assert covered == [3, 4, 5, 7, *range(9, 21)]


def test_phase_two_gives_each_task_consecutive_slices_up_to_read_partition_rows() -> None:
    """Tasks have a fixed cost, so phase 2 groups consecutive slices into tasks of ``read_partition_rows``
    (never fewer tasks than ``partitions``, nor more than slices); a slice still bounds what one read
    statement fetches. The drain's settings reach the data source's read as its options, whose plan of
    held ranges reads nothing."""
    from airflow_provider_sqlqueue.spark.drain.config import DrainConfig

    def tasks(count: int, held: list[tuple[int, int]] | None, **options: int) -> int:
        values = {"read_slice_rows": 1000, "read_partition_rows": 5000, **options}
        run = DrainConfig(
            url="postgresql://reader@127.0.0.1:1/none", input_queue="q", sink="table:t", run_id="r", **values
        )
        read = SourceOptions.parse(source_options(run, held))
        assert read.held_ranges == (None if held is None else tuple(held))
        low, high = (held[0][0], held[-1][1]) if held else (1, count)
        return len(plan_tasks(read, count, low, high, read.held_ranges))

    assert tasks(20_000, [(1, 20_000)]) == 4  # held: 20 slices of 1,000, 5 to a task
    assert tasks(20_000, None) == 4  # staged: the same
    assert tasks(20_000, [(1, 20_000)], read_partition_rows=20_000) == 2  # never fewer than partitions
    assert tasks(3_000, [(1, 3_000)], partitions=8) == 3  # nor more than the slices
    assert tasks(20_000, [(1, 20_000)], read_partition_rows=500) == 20  # a task reads at least a slice
    with pytest.raises(ConfigurationError, match="read_partition_rows must be a positive int"):
        tasks(10, None, read_partition_rows=0)


@POSTGRES
def test_row_batches_stream_a_select_in_order_in_batches_of_the_size_asked(target, bridge) -> None:
    """The executors' reads on psycopg stream the rows in chunks when libpq can (17 or later), so a slice
    never sits whole in a worker's memory; the batches are the same either way."""
    import psycopg

    send_orders(bridge, 25)
    statement = f"SELECT RowVersion FROM {table(bridge, 'orders')} WHERE RowVersion >= %s ORDER BY RowVersion"
    with bridge.connection() as connection:
        cursor = connection.cursor(binary=True)
        assert streams_in_chunks(cursor) is (psycopg.pq.version() >= 170000)
        batches = list(row_batches(cursor, statement, (0,), 10))
        cursor.execute("SELECT 1")  # the stream was read to its end: the connection is free again
        connection.commit()
    assert [len(batch) for batch in batches] == [10, 10, 5]
    versions = [int(row[0]) for batch in batches for row in batch]
    assert versions == sorted(versions) and len(set(versions)) == 25


@POSTGRES
def test_a_submitted_in_place_drain_drops_expired_moves_unreadable_and_writes_the_rest_once(
    target, bridge
) -> None:
    orders = bridge.queue("orders")
    orders.send_batch(make_orders(200, short_lived_every=4))  # every 4th lives 2 s
    with bridge.connection() as connection:  # a row written by another system, headers corrupted
        connection.cursor().execute(
            f"INSERT INTO {table(bridge, 'orders')} (Id, Recoverable, Headers, Body) "
            "VALUES (%s, true, %s, %s)",
            (uuid.uuid4(), "<not json", b"{}"),
        )
        connection.commit()
    orders.send_batch(make_orders(100, short_lived_every=None, first_order_id=201))
    time.sleep(2.2)
    drain = spark_submit(DRAIN_JOB, drain_args(target, "run-1", "--read-in-place"), target.url)
    code, output, summary = finish(drain)
    assert code == 0, output[-5000:]
    assert "holds the messages of" in output and summary is not None
    assert summary["read_in_place"] is True and summary["tasks"] == []
    assert summary["expired"] == 50 and summary["poisoned"] == 1
    assert summary["processed"] == summary["written"] == 250
    long_lived = [order for order in range(1, 201) if order % 4 != 0] + list(range(201, 301))
    assert sorted(order_ids_in_table(bridge)) == long_lived
    assert bridge.queue("error").count() == 1 and orders.count() == 0 and staged(bridge) == 0
    assert int(scalar(bridge, f"SELECT count(*) FROM {table(bridge, 'orders')}")) == 0


@POSTGRES
def test_a_hold_in_small_batches_keeps_ranges_sets_rows_apart_as_it_goes_and_a_rollback_restores_all(
    target, bridge, caplog
) -> None:
    """Batches of 7 over 61 rows: the held ranges run on across batch edges and skip exactly the expired rows,
    which the hold deletes; it does not read headers, so the unreadable row is held. Another connection's
    read of the held headers finds it, moving it copies it to the error queue in the hold's transaction, and
    rolling the hold back puts every row back where it was and empties the error queue again."""
    orders = bridge.queue("orders")
    orders.send_batch(make_orders(30, short_lived_every=5))  # orders 5, 10, ... expire after 2 s
    with bridge.connection() as connection:
        connection.cursor().execute(
            f"INSERT INTO {table(bridge, 'orders')} (Id, Recoverable, Headers, Body) "
            "VALUES (%s, true, %s, %s)",
            (uuid.uuid4(), "[1, 2]", b"{}"),  # JSON, but not a header map
        )
        connection.commit()
    orders.send_batch(make_orders(30, short_lived_every=None, first_order_id=31))
    time.sleep(2.2)
    queue_table = table(bridge, "orders")
    versions = sorted(int(row[0]) for row in rows_of(bridge, f"SELECT RowVersion FROM {queue_table}"))
    expired = {
        int(row[0]) for row in rows_of(bridge, f"SELECT RowVersion FROM {queue_table} WHERE Expires < now()")
    }
    (unreadable,) = (
        int(row[0])
        for row in rows_of(bridge, f"SELECT RowVersion FROM {queue_table} WHERE Headers = '[1, 2]'")
    )
    unexpired = [version for version in versions if version not in expired]
    assert len(expired) == 6 and len(unexpired) == 55 and unreadable in unexpired
    hold = RowHold(bridge, orders, BridgeSql(bridge, bridge_tables(bridge, "orders"), orders.address))
    try:
        with caplog.at_level(logging.INFO, logger="airflow_provider_sqlqueue.spark.drain"):
            held = hold.hold(batch_size=7, max_messages=None)
        assert "starts over" not in caplog.text  # nothing contended: one plain DELETE per window
        hold.cursor.execute("SHOW lock_timeout", ())
        assert hold.cursor.fetchone()[0] == "0"  # the hold's 1 s wait is put back for the commit
        assert held.batches == 9 and held.count == 55 and held.expired == 6
        assert held.ranges == consecutive_ranges(unexpired) and len(held.ranges) == 7
        assert held.low == versions[0] and held.high == versions[-1]
        slices = slice_bounds(held.ranges, 4)
        with caplog.at_level(logging.ERROR, logger="airflow_provider_sqlqueue.spark"):
            assert hold.unreadable_in(slices) == {unreadable}
            assert hold.unreadable_in([s for s in slices if not s[0] <= unreadable < s[1]]) == set()
            hold.move_unreadable([unreadable])
        assert f"Error receiving message {unreadable} from" in caplog.text
        hold.cursor.execute(f"SELECT Headers, Body FROM {table(bridge, 'error')}", ())
        assert [(headers, bytes(body)) for headers, body in hold.cursor.fetchall()] == [("[1, 2]", b"{}")]
    finally:
        hold.close()
    assert bridge.queue("error").count() == 0  # count() leaves the expired rows out: read the table
    assert sorted(int(row[0]) for row in rows_of(bridge, f"SELECT RowVersion FROM {queue_table}")) == versions


@POSTGRES
def test_a_hold_crosses_wide_gaps_skips_another_receivers_rows_and_takes_rows_sent_while_it_holds(
    target, bridge, caplog
) -> None:
    """The hold reads the queue window by window: a gap of 500 deleted RowVersions (one jump), rows another
    receiver holds and rows sent after it began are all met. Until it commits, other connections still see
    every row it took; its own no longer does."""
    orders = bridge.queue("orders")
    send_orders(bridge, 600)
    queue_table = table(bridge, "orders")
    versions = sorted(int(row[0]) for row in rows_of(bridge, f"SELECT RowVersion FROM {queue_table}"))
    gone = versions[50:550]  # 500 RowVersions: 71 windows of 7
    with bridge.connection() as connection:
        connection.cursor().execute(f"DELETE FROM {queue_table} WHERE RowVersion = ANY(%s)", (gone,))
        connection.commit()
    sent_while_holding: list[int] = []

    class SendingHold(RowHold):
        def _take(self, rows: list) -> None:
            super()._take(rows)
            if not sent_while_holding:
                send_orders(bridge, 5, first_order_id=1001)
                sent_while_holding.extend(
                    int(row[0])
                    for row in rows_of(
                        bridge, f"SELECT RowVersion FROM {queue_table} WHERE RowVersion > {versions[-1]}"
                    )
                )

    hold = SendingHold(bridge, orders, BridgeSql(bridge, bridge_tables(bridge, "orders"), orders.address))
    try:
        with orders.receive(max_messages=3) as batch:  # another receiver holds the three oldest
            assert len(batch) == 3
            with caplog.at_level(logging.INFO, logger="airflow_provider_sqlqueue.spark.drain"):
                held = hold.hold(batch_size=7, max_messages=None)
        assert "the hold starts over, skipping them" in caplog.text  # the plain DELETE waited 1 s
        assert len(sent_while_holding) == 5
        assert held.ranges == [(versions[3], versions[49]), (versions[550], sent_while_holding[-1])]
        assert held.count == 47 + 50 + 5 and held.expired == 0
        assert int(scalar(bridge, f"SELECT count(*) FROM {queue_table}")) == 102  # the take is not committed
        hold.cursor.execute(f"SELECT count(*) FROM {queue_table}", ())
        assert hold.cursor.fetchone()[0] == 0
    finally:
        hold.close()
    assert int(scalar(bridge, f"SELECT count(*) FROM {queue_table}")) == 102  # rolled back: all queued


@POSTGRES
def test_a_plain_hold_jumps_a_stretch_of_deleted_row_versions_in_one_statement(target, bridge) -> None:
    orders = bridge.queue("orders")
    send_orders(bridge, 100)
    queue_table = table(bridge, "orders")
    versions = sorted(int(row[0]) for row in rows_of(bridge, f"SELECT RowVersion FROM {queue_table}"))
    with bridge.connection() as connection:
        connection.cursor().execute(
            f"DELETE FROM {queue_table} WHERE RowVersion = ANY(%s)", (versions[10:90],)
        )
        connection.commit()
    hold = RowHold(bridge, orders, BridgeSql(bridge, bridge_tables(bridge, "orders"), orders.address))
    statements: list[str] = []

    class CountingCursor:
        def __init__(self, cursor) -> None:
            self._cursor = cursor

        def execute(self, statement, params=None):
            statements.append(statement)
            return self._cursor.execute(statement, params)

        def __getattr__(self, name: str):
            return getattr(self._cursor, name)

    hold.cursor = CountingCursor(hold.cursor)
    try:
        held = hold.hold(batch_size=5, max_messages=None)
        assert held.ranges == [(versions[0], versions[9]), (versions[90], versions[99])]
    finally:
        hold.close()
    windows = [text for text in statements if text.startswith("DELETE")]
    assert len(windows) == 2 + 1 + 2  # two windows, the empty one after them, then one jump to the rest
    assert orders.count() == 20


@POSTGRES
def test_a_hold_that_reaches_the_queue_end_reads_each_index_entry_once(target, bridge) -> None:
    """At the end of the queue a hold looks for rows sent meanwhile. Below the last window lie the rows it
    deleted, which its own transaction no longer sees: a search from either end of the index would step
    through each of them again (about 0.4 s for 300,000 rows here), so it reads only above the last."""
    orders = bridge.queue("orders")
    send_orders(bridge, 2000)
    hold = RowHold(bridge, orders, BridgeSql(bridge, bridge_tables(bridge, "orders"), orders.address))
    try:
        assert hold.hold(batch_size=100, max_messages=None).count == 2000
        hold.cursor.execute(
            "SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(indexrelid)), 0) FROM pg_index "
            "WHERE indrelid = %s::regclass",
            (table(bridge, "orders"),),
        )
        (entries_read,) = hold.cursor.fetchone()
    finally:
        hold.close()
    assert 2000 <= entries_read < 2100, entries_read
    assert orders.count() == 2000


@POSTGRES
def test_held_slices_are_read_along_the_index_whatever_the_planner_estimates(target, bridge) -> None:
    """Without statistics of the rows a slice holds, PostgreSQL left to itself sorts the slice (a bitmap
    heap scan, then a sort that spills to disk); the readers' transaction walks the index."""
    orders = bridge.queue("orders")
    queue_table = table(bridge, "orders")
    with bridge.connection() as connection:
        connection.cursor().execute(f"ALTER TABLE {queue_table} SET (autovacuum_enabled = false)", ())
        connection.commit()
    send_orders(bridge, 20_000, body_bytes=1024)
    low, high = rows_of(bridge, f"SELECT min(RowVersion), max(RowVersion) FROM {queue_table}")[0]
    sql = BridgeSql(bridge, bridge_tables(bridge, "orders"), orders.address)

    def plan(by_index: bool) -> str:
        with bridge.connection() as connection:
            cursor = connection.cursor()
            if by_index:
                cursor.execute(sql.held_reads_by_index(), ())
            cursor.execute("EXPLAIN " + sql.held_slice(), (int(low), int(high) + 1))
            text = "\n".join(row[0] for row in cursor.fetchall())
            connection.rollback()
        return text

    assert "Sort" in plan(by_index=False)  # the trap is there on this server
    walked = plan(by_index=True)
    assert "Index Scan" in walked and "Sort" not in walked and "Seq Scan" not in walked, walked


@POSTGRES
@pytest.mark.parametrize("contended", [False, True], ids=["plain-delete", "skip-locked"])
def test_a_hold_stops_at_max_messages_exactly(target, bridge, contended: bool) -> None:
    orders = bridge.queue("orders")
    send_orders(bridge, 50)
    queue_table = table(bridge, "orders")
    versions = sorted(int(row[0]) for row in rows_of(bridge, f"SELECT RowVersion FROM {queue_table}"))
    hold = RowHold(bridge, orders, BridgeSql(bridge, bridge_tables(bridge, "orders"), orders.address))
    try:
        if contended:
            with orders.receive(max_messages=3) as batch:
                held = hold.hold(batch_size=7, max_messages=20)
            assert len(batch) == 3 and held.ranges == [(versions[3], versions[22])]
        else:
            held = hold.hold(batch_size=7, max_messages=20)
            assert held.ranges == [(versions[0], versions[19])]
        assert held.count == 20
    finally:
        hold.close()
    assert orders.count() == (47 if contended else 50)


@POSTGRES
def test_held_rows_are_skipped_by_receivers_and_a_row_committed_late_inside_them_stays_queued(
    spark, target, bridge
) -> None:
    """A send that took its RowVersion before the hold but commits after it lands between held rows: the
    hold's ranges leave it out, the executors never read it, the commit does not delete it."""
    orders = bridge.queue("orders")
    send_orders(bridge, 100)
    with bridge.connection() as slow_sender:
        cursor = slow_sender.cursor()
        cursor.execute(
            f"INSERT INTO {table(bridge, 'orders')} (Id, Recoverable, Headers, Body) "
            "VALUES (%s, true, %s, %s) RETURNING RowVersion",
            (uuid.uuid4(), json.dumps({"NServiceBus.MessageId": "late"}), b'{"order_id": 999}'),
        )
        late_version = int(cursor.fetchone()[0])
        send_orders(bridge, 100, first_order_id=101)  # committed, after the late row's RowVersion
        run = config(target, read_in_place=True)
        drain = Drain(spark, run)
        try:
            transform = load_transform(run.transform)
            drain.prepare(transform)
            drain.start_run()
            held = drain.hold_in_place()
            assert held.count == 200 and len(held.ranges) == 2
            assert all(not low <= late_version <= high for low, high in held.ranges)
            with orders.receive(max_messages=10) as batch:  # every committed row is held
                assert len(batch) == 0
            slow_sender.commit()  # the late row is now queued, inside the span of the held rows
            drain._to_processing()
            messages = run_messages(spark, run, held.ranges)
            written = drain.commit(apply_transform(transform, messages, run), held.count)
        finally:
            drain._release_hold(None)
            drain.close()
    assert written == 200 and run_state(bridge, "run-1") == "committed"
    assert sorted(order_ids_in_table(bridge)) == list(range(1, 201))
    with orders.receive(max_messages=10) as batch:
        assert [message.headers["NServiceBus.MessageId"] for message in batch] == ["late"]
    assert staged(bridge) == 0


@POSTGRES
def test_the_deprecated_staged_messages_warns_and_reads_what_run_messages_reads(
    spark, target, bridge
) -> None:
    """``staged_messages``, the drain's old reader, says to use ``run_messages`` and returns the same rows;
    reading deletes nothing: the released hold leaves every message queued."""
    send_orders(bridge, 60)
    run = config(target, read_in_place=True)
    drain = Drain(spark, run)
    try:
        drain.prepare(load_transform(run.transform))
        drain.start_run()
        held = drain.hold_in_place()
        drain._to_processing()
        current = sorted(row["message_id"] for row in run_messages(spark, run, held.ranges).collect())
        with pytest.warns(DeprecationWarning, match="use run_messages"):
            deprecated = staged_messages(spark, run, held.count, held=held.ranges)
        assert sorted(row["message_id"] for row in deprecated.collect()) == current
    finally:
        drain._release_hold(None)
        drain.close()
    assert len(current) == 60 and bridge.queue("orders").count() == 60


@POSTGRES
def test_phase_two_sets_apart_the_unreadable_held_rows_it_reads_and_the_commit_moves_them(
    spark, target, bridge
) -> None:
    """The hold reads no headers; the executors leave the unreadable rows out of the messages and report
    them, so the commit moves them to the error queue without reading any slice again."""
    send_orders(bridge, 150)
    send_unreadable(bridge, "<not json")
    send_orders(bridge, 150, first_order_id=151)
    send_unreadable(bridge, '{"NServiceBus.MessageId": 7}')
    echoed: list[str] = []
    summary = run_drain(spark, config(target, read_in_place=True, read_slice_rows=50), echo=echoed.append)
    assert not any("left" in line and "unread" in line for line in echoed), echoed
    assert any("2 held message(s) with unreadable headers moved" in line for line in echoed), echoed
    assert summary["poisoned"] == 2 and summary["expired"] == 0
    assert summary["received"] == summary["processed"] == summary["written"] == 300
    assert sorted(order_ids_in_table(bridge)) == list(range(1, 301))
    assert error_queue_headers(bridge) == ["<not json", '{"NServiceBus.MessageId": 7}']
    assert int(scalar(bridge, f"SELECT count(*) FROM {table(bridge, 'orders')}")) == 0
    assert staged(bridge) == 0


@POSTGRES
@pytest.mark.parametrize(("transform", "written"), [("first_orders", 3), ("no_orders", 0)])
def test_held_slices_a_transform_leaves_unread_have_their_headers_checked_before_the_commit(
    spark, target, bridge, transform: str, written: int
) -> None:
    """A transform that needs only a few rows (a limit) may leave slices unread, and one that needs none
    (``limit(0)``) reads no slice: the driver reads the headers of every slice no read task noted as read to
    its end, so the unreadable rows there still reach the error queue when the hold commits."""
    send_orders(bridge, 150)
    send_unreadable(bridge, "[1, 2]")
    send_orders(bridge, 150, first_order_id=151)
    send_unreadable(bridge, "")  # an empty string is an empty header map: readable
    send_unreadable(bridge, '{"NServiceBus.MessageId": null, "x": [1]}')
    echoed: list[str] = []
    run = config(target, read_in_place=True, read_slice_rows=50, transform=f"spark_faults.{transform}")
    summary = run_drain(spark, run, echo=echoed.append)
    if transform == "no_orders":
        assert any("left 7 slice(s)" in line and "unread" in line for line in echoed), echoed
    assert summary["written"] == written and summary["poisoned"] == 2
    assert summary["received"] == summary["processed"] == 301
    assert error_queue_headers(bridge) == ["[1, 2]", '{"NServiceBus.MessageId": null, "x": [1]}']
    assert int(scalar(bridge, f"SELECT count(*) FROM {table(bridge, 'orders')}")) == 0


@POSTGRES
def test_unreadable_held_rows_without_an_error_queue_stop_the_run_before_it_commits(
    spark, target, bridge
) -> None:
    """Nowhere to move the unreadable row: the commit refuses, the hold rolls back, and every message,
    the unreadable one included, is still queued; no result row was written."""
    send_orders(bridge, 100)
    send_unreadable(bridge, "[1, 2]")
    with pytest.raises(HeaderFormatError, match="no error queue"):
        run_drain(spark, config(target, read_in_place=True, error_queue=None))
    assert run_state(bridge, "run-1") == "aborted"
    assert int(scalar(bridge, f"SELECT count(*) FROM {table(bridge, 'orders')}")) == 101
    assert order_ids_in_table(bridge) == [] and staged(bridge) == 0
    assert error_queue_headers(bridge) == []


@POSTGRES
def test_a_failed_in_place_run_leaves_every_message_queued_and_its_rerun_finishes(
    spark, target, bridge
) -> None:
    send_orders(bridge, 300)
    FAULT_LOG.unlink(missing_ok=True)
    with pytest.raises(Exception, match="injected"):
        run_drain(spark, config(target, read_in_place=True, transform="spark_faults.always_fails"))
    assert run_state(bridge, "run-1") == "aborted"
    assert bridge.queue("orders").count() == 300 and order_ids_in_table(bridge) == []
    summary = run_drain(spark, config(target, read_in_place=True))
    assert summary["job_attempt"] == 2 and summary["written"] == 300
    assert sorted(order_ids_in_table(bridge)) == list(range(1, 301))
    assert bridge.queue("orders").count() == 0 and staged(bridge) == 0


@POSTGRES
def test_a_python_worker_killed_mid_transform_rereads_the_held_rows_and_writes_each_once(
    spark, target, bridge, figures
) -> None:
    """The worker of partition 0's first attempt SIGKILLs itself mid-partition; the retried task reads the
    same held rows from the queue table again (nobody else can change them), and the table gets each message
    once. The unreadable row in partition 0 is reported by the attempt that finished, and moved once."""
    send_unreadable(bridge, "[1, 2]")
    sent = send_orders(bridge, 1000)
    FAULT_LOG.unlink(missing_ok=True)
    summary = run_drain(spark, config(target, read_in_place=True, transform="spark_faults.killed_once"))
    kills = FAULT_LOG.read_text().count("killed_once") if FAULT_LOG.exists() else 0
    assert kills >= 1, "no Python worker was killed"
    assert summary["read_in_place"] is True and summary["tasks"] == []
    assert summary["state"] == "committed" and summary["written"] == summary["processed"] == 1000
    assert summary["poisoned"] == 1 and error_queue_headers(bridge) == ["[1, 2]"]
    assert_exactly_once_in_table(bridge, sent)
    assert int(scalar(bridge, f"SELECT count(*) FROM {table(bridge, 'orders')}")) == 0
    expected = sorted(json.loads(m.body)["order_id"] for m in sent)
    figures(
        engine=target.engine,
        sink="table",
        read_in_place=True,
        messages=1000,
        faults_injected=kills,
        **counted(expected, order_ids_in_table(bridge)),
    )


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_in_place_is_refused_off_postgresql_before_anything_is_received(spark, target, bridge) -> None:
    send_orders(bridge, 20)
    with pytest.raises(ConfigurationError, match="PostgreSQL only"):
        run_drain(spark, config(target, read_in_place=True))
    assert bridge.queue("orders").count() == 20 and order_ids_in_table(bridge) == []
    with pytest.raises(ConfigurationError, match="fail_receive_batch"):
        config(target, read_in_place=True, fail_receive_batch=1)


@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_left_unset_postgresql_holds_in_place_and_stages_where_a_session_timeout_could_end_the_hold(
    spark, target, bridge
) -> None:
    """``read_in_place`` left unset: PostgreSQL holds the messages, SQLite stages them; on PostgreSQL a
    session timeout that could end the held transaction makes the drain stage instead, saying why. Every
    message reaches the table once either way."""
    sent = send_orders(bridge, 200)
    echoed: list[str] = []
    summary = run_drain(spark, config(target, run_id="unset-1"), echo=echoed.append)
    held = target.engine == "postgresql"
    assert summary["read_in_place"] is held and (summary["tasks"] == []) is held, summary
    assert summary["written"] == 200
    assert_exactly_once_in_table(bridge, sent)
    if not held:
        assert "phase 1 stages the messages: sqlite cannot hold them in place" in echoed
        return
    database = scalar(bridge, "SELECT current_database()")
    more = send_orders(bridge, 100, first_order_id=1001)
    scalar(bridge, f"""ALTER DATABASE "{database}" SET idle_in_transaction_session_timeout = '10min'""")
    try:
        summary = run_drain(spark, config(target, run_id="unset-2"), echo=echoed.append)
    finally:
        scalar(bridge, f'ALTER DATABASE "{database}" RESET idle_in_transaction_session_timeout')
    assert summary["read_in_place"] is False and len(summary["tasks"]) == 2 and summary["written"] == 100
    assert any("idle_in_transaction_session_timeout 10min could end" in line for line in echoed), echoed
    assert_exactly_once_in_table(bridge, sent + more)


@pytest.mark.slow
@POSTGRES
def test_a_driver_killed_while_holding_leaves_every_message_queued_and_the_rerun_finishes(
    target, bridge, figures
) -> None:
    """SIGKILL the whole spark-submit (driver, JVM, Python workers) in phase 2, while the driver holds the
    messages: its connection goes and the locks with it, so every message is queued again in its place and
    none is in the output. A re-run of the run id drains them all once into the table."""
    sent = send_orders(bridge, 500)
    args = drain_args(target, "killed", "--read-in-place")
    args[args.index("--transform") + 1] = "spark_faults.hangs_on_driver"
    process = spark_submit(DRAIN_JOB, args, target.url, py_files=FAULTS)
    deadline = time.monotonic() + SPARK_SUBMIT_TIMEOUT
    while run_state(bridge, "killed") != "processing":
        assert process.poll() is None, process.communicate()[0][-5000:]
        assert time.monotonic() < deadline, "the job never held the messages"
        time.sleep(0.05)
    time.sleep(1)
    with bridge.queue("orders").receive(max_messages=10) as batch:  # all 500 are held
        assert len(batch) == 0
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)
    assert process.returncode == -signal.SIGKILL
    queued_after_kill = bridge.queue("orders").count()
    assert queued_after_kill == 500 and order_ids_in_table(bridge) == [] and staged(bridge) == 0
    code, output, summary = finish(
        spark_submit(DRAIN_JOB, drain_args(target, "killed", "--read-in-place"), target.url)
    )
    assert code == 0, output[-5000:]
    assert summary["job_attempt"] == 2 and summary["received"] == summary["written"] == 500
    expected = sorted(json.loads(m.body)["order_id"] for m in sent)
    order_ids = order_ids_in_table(bridge)
    assert sorted(order_ids) == expected, "lost or duplicated"
    assert bridge.queue("orders").count() == 0 and staged(bridge) == 0
    figures(
        engine=target.engine,
        sink="table",
        killed_in="processing (read in place)",
        messages=500,
        faults_injected=1,
        queued_when_killed=queued_after_kill,
        **counted(expected, order_ids),
    )
