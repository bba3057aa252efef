"""Spark-side helpers of tests/test_spark_source_write.py, shipped to the workers with ``addPyFile`` (they
unpickle these by reference): a write-only ``sqlqueue`` data source, for as long as the package's own data
source is not there, and a column that fails in the first attempt of a task."""

from __future__ import annotations

from pyspark import TaskContext
from pyspark.sql.datasource import DataSource
from spark_faults import note_fault

from airflow_provider_sqlqueue.spark.source.writer import SqlQueueDataSourceWriter

FAIL_AT_ORDER = 4700  # partition 1 of range(5000) in 2 partitions: after 2200 of its 2500 rows


class WriteOnlySqlQueueSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "sqlqueue"

    def writer(self, schema, overwrite):
        return SqlQueueDataSourceWriter(dict(self.options), schema, overwrite)


def order_id_failing_in_first_attempt(order_id):  # no type hints: PySpark would read them as a pandas UDF
    context = TaskContext.get()
    if order_id == FAIL_AT_ORDER and context is not None and context.attemptNumber() == 0:
        note_fault("write_failed_once")
        raise RuntimeError(f"injected: the first attempt fails at order {order_id}")
    return order_id
