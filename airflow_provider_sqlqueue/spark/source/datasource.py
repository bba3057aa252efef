"""``SqlQueueDataSource``: the ``sqlqueue`` format of PySpark's Python Data Source API.

Register it once per session, then read, stream and write queues like any other format::

    spark.dataSource.register(SqlQueueDataSource)
    spark.read.format("sqlqueue").option("queue", "orders").option("run_id", "nightly-1").load()
    spark.readStream.format("sqlqueue").option("queue", "orders").load()
    frame.write.format("sqlqueue").option("queue", "invoices").mode("append").save()

Spark starts a Python process of its own for each planning step (creating the data source, planning the
read, running the stream reader) and for each executor's worker, and every one of them imports this module
when it unpickles the class. So it imports the readers and the writer, with the transport and SQLAlchemy,
only in the methods that need them: creating the data source (its options and schema) imports PySpark's
types alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource

from .schema import source_schema

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSourceWriter
    from pyspark.sql.types import StructType

    from .batch import SqlQueueBatchReader
    from .options import SourceOptions
    from .stream import SqlQueueStreamReader

__all__ = ["SqlQueueDataSource"]


def _options(given: Mapping[str, str], schema: StructType) -> SourceOptions:
    """The read's options with the columns its ``.schema(...)`` selects (checked before anything moves)."""
    from .options import SourceOptions
    from .returned_rows import selected_columns

    return replace(SourceOptions.parse(given), columns=selected_columns(schema))


class SqlQueueDataSource(DataSource):
    """Queues as a Spark data source: options ``queue`` and ``url`` (or ``SQLQUEUE_URL``; the password in
    option ``password`` or ``SQLQUEUE_PASSWORD``), and what docs/spark-options.md lists for each form."""

    @classmethod
    def name(cls) -> str:
        return "sqlqueue"

    def schema(self) -> StructType:
        return source_schema()

    def reader(self, schema: StructType) -> SqlQueueBatchReader:
        from .batch import SqlQueueBatchReader

        return SqlQueueBatchReader(_options(self.options, schema))

    def streamReader(self, schema: StructType) -> SqlQueueStreamReader:
        from .stream import SqlQueueStreamReader

        return SqlQueueStreamReader(_options(self.options, schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .writer import SqlQueueDataSourceWriter

        return SqlQueueDataSourceWriter(dict(self.options), schema, overwrite)
