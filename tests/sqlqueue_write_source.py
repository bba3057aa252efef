"""Spark-side helper of tests/test_spark_source_write.py, shipped to the workers with ``addPyFile`` (they
unpickle it by reference): a column that fails in the first attempt of a task."""

from __future__ import annotations

from pyspark import TaskContext
from spark_faults import note_fault

FAIL_AT_ORDER = 4700  # partition 1 of range(5000) in 2 partitions: after 2200 of its 2500 rows


def order_id_failing_in_first_attempt(order_id):  # no type hints: PySpark would read them as a pandas UDF
    context = TaskContext.get()
    if order_id == FAIL_AT_ORDER and context is not None and context.attemptNumber() == 0:
        note_fault("write_failed_once")
        raise RuntimeError(f"injected: the first attempt fails at order {order_id}")
    return order_id
