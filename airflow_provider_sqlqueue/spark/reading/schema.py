"""The messages' columns as Spark sees them (the drain's DataFrame and the data source's rows share the names
and meaning), and how one staged row becomes them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...transport.headers import CONTENT_TYPE, ENCLOSED_MESSAGE_TYPES, TIME_SENT, decode_headers
from ...transport.queue import as_utc
from .columns import parse_time_sent

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["TEXT_TYPES_PATTERN", "message_row", "messages_schema", "read_schema"]

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


def message_row(row_version: Any, native_id: Any, headers_text: Any, body: Any, expires: Any) -> tuple:
    """One staged row as the columns of :func:`read_schema` (``body_text`` is derived in Spark)."""
    if isinstance(headers_text, bytes | bytearray | memoryview):
        headers_text = bytes(headers_text).decode("utf-8")
    headers = decode_headers(headers_text)
    body_bytes = None if body is None else bytes(body)
    content_type = headers.get(CONTENT_TYPE)
    time_sent = parse_time_sent(headers.get(TIME_SENT))
    native = str(native_id)
    return (
        headers.get("NServiceBus.MessageId") or native,
        native,
        int(row_version),
        headers,
        body_bytes,
        content_type,
        headers.get(ENCLOSED_MESSAGE_TYPES),
        time_sent,
        as_utc(expires),
    )
