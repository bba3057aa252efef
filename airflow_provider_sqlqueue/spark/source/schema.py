"""The one schema of the messages as Spark sees them: the data source's rows, and the drain's DataFrame as a
part of them (same names, same meaning). PySpark's types only: Spark's planning processes ask a data source
for its schema, and this module imports nothing of the transport, so they do not pay for importing it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = [
    "HEADER_COLUMNS",
    "TEXT_TYPES_PATTERN",
    "arrow_schema",
    "messages_schema",
    "read_schema",
    "source_schema",
]

TEXT_TYPES_PATTERN = "text/|json|xml|csv|yaml"
HEADER_COLUMNS = ("correlation_id", "reply_to_address")  # the source's, not the drain's: one header each


def source_schema() -> StructType:
    """Every column: the ``sqlqueue`` data source's rows."""
    from pyspark.sql.types import (
        BinaryType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            StructField("message_id", StringType(), False),
            StructField("native_id", StringType(), False),
            StructField("row_version", LongType(), False),
            StructField("correlation_id", StringType(), True),
            StructField("reply_to_address", StringType(), True),
            StructField("headers", MapType(StringType(), StringType(), True), False),
            StructField("body", BinaryType(), True),
            StructField("content_type", StringType(), True),
            StructField("message_type", StringType(), True),
            StructField("body_text", StringType(), True),
            StructField("time_sent", TimestampType(), True),
            StructField("expires", TimestampType(), True),
        ]
    )


def messages_schema() -> StructType:
    """The columns of the messages DataFrame a drain's transform receives (``body_json`` is added after)."""
    from pyspark.sql.types import StructType

    return StructType([f for f in source_schema().fields if f.name not in HEADER_COLUMNS])


def read_schema() -> StructType:
    """What the drain's executors read: the messages' columns but ``body_text`` (decoded in Spark)."""
    from pyspark.sql.types import StructType

    return StructType([f for f in messages_schema().fields if f.name != "body_text"])


def arrow_schema(schema: StructType) -> Any:
    """``schema`` as the Arrow schema Spark checks the executors' record batches against."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")
