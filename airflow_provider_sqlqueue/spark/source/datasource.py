"""``SqlQueueDataSource``: the ``sqlqueue`` format of PySpark's Python Data Source API.

Register it once per session, then read, stream and write queues like any other format::

    spark.dataSource.register(SqlQueueDataSource)
    spark.read.format("sqlqueue").option("queue", "orders").option("run_id", "nightly-1").load()
    spark.readStream.format("sqlqueue").option("queue", "orders").load()
    frame.write.format("sqlqueue").option("queue", "invoices").mode("append").save()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource

from ...transport import ConfigurationError
from .batch import SqlQueueBatchReader
from .options import SourceOptions
from .rows import source_schema
from .stream import SqlQueueStreamReader

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSourceWriter
    from pyspark.sql.types import StructType

__all__ = ["SqlQueueDataSource"]


def _check_schema(schema: StructType) -> None:
    """A schema given with ``.schema(...)`` must be the source's (same names and types, in order): the rows
    are built in that shape on the executors, so another one would fail there, after the messages were
    received into staging."""
    ours = source_schema()
    given = [(field.name, field.dataType) for field in schema.fields]
    if given != [(field.name, field.dataType) for field in ours.fields]:
        raise ConfigurationError(
            "format('sqlqueue') reads have a fixed schema; leave .schema(...) out or give this one: "
            f"{ours.simpleString()} (given: {schema.simpleString()})"
        )


class SqlQueueDataSource(DataSource):
    """Queues as a Spark data source: options ``queue`` and ``url`` (or ``SQLQUEUE_URL``; the password in
    option ``password`` or ``SQLQUEUE_PASSWORD``), and what docs/spark.md lists for each form."""

    @classmethod
    def name(cls) -> str:
        return "sqlqueue"

    def schema(self) -> StructType:
        return source_schema()

    def reader(self, schema: StructType) -> SqlQueueBatchReader:
        options = SourceOptions.parse(self.options)
        _check_schema(schema)
        return SqlQueueBatchReader(options)

    def streamReader(self, schema: StructType) -> SqlQueueStreamReader:
        options = SourceOptions.parse(self.options)
        _check_schema(schema)
        return SqlQueueStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .writer import SqlQueueDataSourceWriter

        return SqlQueueDataSourceWriter(dict(self.options), schema, overwrite)
