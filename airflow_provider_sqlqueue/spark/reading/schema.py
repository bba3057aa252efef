"""The messages' columns as Spark sees them: the drain's DataFrame and the data source's rows share the names
and meaning. PySpark's types only: Spark's planning processes ask a data source for its schema, and this
module imports nothing of the transport, so they do not pay for importing it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["TEXT_TYPES_PATTERN", "messages_schema", "read_schema", "source_schema"]

TEXT_TYPES_PATTERN = "text/|json|xml|csv|yaml"


def messages_schema() -> StructType:
    """The columns of the messages DataFrame a transform receives (``body_json`` is added after)."""
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
            StructField("headers", MapType(StringType(), StringType(), True), False),
            StructField("body", BinaryType(), True),
            StructField("content_type", StringType(), True),
            StructField("message_type", StringType(), True),
            StructField("body_text", StringType(), True),
            StructField("time_sent", TimestampType(), True),
            StructField("expires", TimestampType(), True),
        ]
    )


def read_schema() -> StructType:
    """What the executors read from staging: the messages' columns but ``body_text``."""
    from pyspark.sql.types import StructType

    return StructType([f for f in messages_schema().fields if f.name != "body_text"])


def source_schema() -> StructType:
    """The ``sqlqueue`` data source's columns: :func:`messages_schema` with ``correlation_id`` and
    ``reply_to_address`` (each one header) after ``row_version``."""
    from pyspark.sql.types import StringType, StructField, StructType

    fields = list(messages_schema().fields)
    extra = [
        StructField("correlation_id", StringType(), True),
        StructField("reply_to_address", StringType(), True),
    ]
    return StructType(fields[:3] + extra + fields[3:])
