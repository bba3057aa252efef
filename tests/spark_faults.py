"""Transforms for the Spark bridge's failure tests (shipped to executors with addPyFile / --py-files).

Faults are keyed on Spark's own task attempt number, so a retried task behaves; nothing here is shared
state between attempts.
"""

from __future__ import annotations

import os
import signal
import time

from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType

from airflow_provider_sqlqueue.spark.transforms import order_rows

FAIL_AFTER_ROWS = 150  # the failing task has handled this many rows, i.e. a few receive batches
FAULT_LOG_ENV = "SQLQUEUE_SPARK_FAULT_LOG"  # a file the faults append a line to, so tests see they happened


FAULT_LOG_PROPERTY = "sqlqueue.tests.fault_log"  # the same path as a local property of the driver's jobs


def note_fault(event: str) -> None:
    """Append ``event`` to the fault log: the path the driver set as a local property of its jobs (what a
    test's session set, even when an earlier module of the same process started the JVM and its Python
    workers with another environment), else the environment's (spark-submit runs)."""
    context = TaskContext.get()
    path = context.getLocalProperty(FAULT_LOG_PROPERTY) if context is not None else None
    path = path or os.environ.get(FAULT_LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"{event} pid={os.getpid()}\n")


def _order_id_failing_once(order_id):  # no type hints: PySpark would read them as a pandas UDF
    context = TaskContext.get()
    if context is not None and context.attemptNumber() == 0 and context.partitionId() == 0:
        _order_id_failing_once.seen = getattr(_order_id_failing_once, "seen", 0) + 1  # type: ignore[attr-defined]
        if _order_id_failing_once.seen > FAIL_AFTER_ROWS:  # type: ignore[attr-defined]
            _order_id_failing_once.seen = 0  # type: ignore[attr-defined]
            raise RuntimeError("injected: partition 0 fails in its first attempt after some batches")
    return order_id


def _always_fail(order_id):
    raise RuntimeError(f"injected: the transform cannot handle order {order_id}")


def fails_once(messages: DataFrame) -> DataFrame:
    """order_rows, but the first attempt of partition 0 raises after some rows: Spark's retry succeeds."""
    checked = F.udf(_order_id_failing_once, LongType())
    return order_rows(messages).withColumn("order_id", checked(F.col("order_id")))


def always_fails(messages: DataFrame) -> DataFrame:
    """order_rows whose every attempt raises: the job aborts."""
    broken = F.udf(_always_fail, LongType())
    return order_rows(messages).withColumn("order_id", broken(F.col("order_id")))


_calls = {"count": 0}


def hangs_on_driver(messages: DataFrame) -> DataFrame:
    """The first call (the job's check on an empty frame) passes; the second hangs the driver.

    Tests kill the job while it hangs, as a driver killed in phase 2 would be.
    """
    _calls["count"] += 1
    if _calls["count"] >= 2:
        print(f"hangs_on_driver: pid {os.getpid()} hanging", flush=True)
        time.sleep(600)
    return order_rows(messages)


def _order_id_killing_once(order_id):
    """The first attempt of partition 0 kills its own Python worker (SIGKILL) after some rows."""
    context = TaskContext.get()
    if context is not None and context.attemptNumber() == 0 and context.partitionId() == 0:
        _order_id_killing_once.seen = getattr(_order_id_killing_once, "seen", 0) + 1  # type: ignore[attr-defined]
        if _order_id_killing_once.seen > FAIL_AFTER_ROWS:  # type: ignore[attr-defined]
            note_fault("killed_once")
            os.kill(os.getpid(), signal.SIGKILL)
    return order_id


def killed_once(messages: DataFrame) -> DataFrame:
    """order_rows, but the Python worker of partition 0's first attempt dies by SIGKILL mid-partition (no
    exception, no cleanup): Spark sees a crashed worker and retries the task."""
    checked = F.udf(_order_id_killing_once, LongType())
    return order_rows(messages).withColumn("order_id", checked(F.col("order_id")))


def _order_id_slowly(order_id):
    """Each row takes a few milliseconds; the first row of each Python worker notes its pid."""
    if not getattr(_order_id_slowly, "noted", False):
        _order_id_slowly.noted = True  # type: ignore[attr-defined]
        note_fault("slow_rows")
    time.sleep(0.004)
    return order_id


def slow_rows(messages: DataFrame) -> DataFrame:
    """order_rows at a few milliseconds a row, so a test can kill an executor while partitions run."""
    slowed = F.udf(_order_id_slowly, LongType())
    return order_rows(messages).withColumn("order_id", slowed(F.col("order_id")))


def first_orders(messages: DataFrame) -> DataFrame:
    """Only the first few orders: Spark reads the slices it needs for them, not every slice."""
    return order_rows(messages).limit(3)


def no_orders(messages: DataFrame) -> DataFrame:
    """No order at all: Spark reads no slice of the messages."""
    return order_rows(messages).limit(0)
