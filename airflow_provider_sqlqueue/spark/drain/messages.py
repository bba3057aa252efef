"""The messages DataFrame a transform receives: its columns, how one staged row becomes them, and the
executors reading a run's staged rows in RowVersion slices (through Arrow) to build it.

The rows of a run no longer change once phase 2 has begun, so any re-read of a slice returns the same data.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from functools import partial
from typing import TYPE_CHECKING, Any

from ...transport.headers import (
    CONTENT_TYPE,
    ENCLOSED_MESSAGE_TYPES,
    TIME_SENT,
    decode_headers,
    parse_timestamp,
)
from ...transport.queue import as_utc
from ..tables import BridgeSql, bridge_tables
from .config import DrainConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

__all__ = ["headers_array", "message_row", "messages_schema", "read_schema", "staged_messages"]

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


def _time_sent(text: str | None) -> datetime | None:
    """``NServiceBus.TimeSent`` (``yyyy-MM-dd HH:mm:ss:ffffff Z``), parsed without strptime's cost."""
    if not text:
        return None
    try:
        if len(text) == 28 and text[4] == "-" and text[19] == ":" and text.endswith(" Z"):
            return datetime(
                int(text[0:4]),
                int(text[5:7]),
                int(text[8:10]),
                int(text[11:13]),
                int(text[14:16]),
                int(text[17:19]),
                int(text[20:26]),
                tzinfo=timezone.utc,
            )
        return parse_timestamp(text)
    except ValueError:
        return None


def message_row(row_version: Any, native_id: Any, headers_text: Any, body: Any, expires: Any) -> tuple:
    """One staged row as the columns of :func:`read_schema` (``body_text`` is derived in Spark)."""
    if isinstance(headers_text, bytes | bytearray | memoryview):
        headers_text = bytes(headers_text).decode("utf-8")
    headers = decode_headers(headers_text)
    body_bytes = None if body is None else bytes(body)
    content_type = headers.get(CONTENT_TYPE)
    time_sent = _time_sent(headers.get(TIME_SENT))
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


def read_slice(config: DrainConfig, bounds: tuple[int, int]) -> Iterator[tuple]:
    start, end = bounds
    with config.open(pool_size=1, max_overflow=0) as transport:
        sql = BridgeSql(transport, bridge_tables(transport, config.input_queue, config.prefix))
        with transport.connection() as connection:
            cursor = connection.cursor(binary=True) if sql.reads_binary else connection.cursor()
            cursor.execute(sql.staged_slice(), (config.run_id, start, end))
            while True:
                rows = cursor.fetchmany(2000)
                if not rows:
                    break
                for row in rows:
                    yield message_row(*row)
            connection.commit()


def _arrow_schema() -> Any:
    import pyarrow as pa

    moment = pa.timestamp("us", tz="UTC")
    return pa.schema(
        [
            ("message_id", pa.string()),
            ("native_id", pa.string()),
            ("row_version", pa.int64()),
            ("headers", pa.map_(pa.string(), pa.string())),
            ("body", pa.binary()),
            ("content_type", pa.string()),
            ("message_type", pa.string()),
            ("time_sent", moment),
            ("expires", moment),
        ]
    )


def headers_array(maps: Iterable[dict[str, str | None]]) -> Any:
    """The headers column as an Arrow map built from flat key and value lists: a list of item pairs per
    row (what ``pa.array`` takes for a map) cost more per message than reading and decoding it."""
    import pyarrow as pa

    keys: list[str] = []
    values: list[str | None] = []
    offsets = [0]
    total = 0
    for headers in maps:
        keys.extend(headers)
        values.extend(headers.values())
        total += len(headers)
        offsets.append(total)
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()), pa.array(keys, pa.string()), pa.array(values, pa.string())
    )


def read_slices_arrow(
    config: DrainConfig, bounds: Iterable[Any], rows_per_batch: int = 2000
) -> Iterator[Any]:
    """``mapInArrow`` side: read the slices named in ``bounds`` (batches of lo, hi) as Arrow record batches.

    Arrow carries the rows to the JVM column by column, much cheaper than pickled rows.
    """
    import pyarrow as pa

    schema = _arrow_schema()
    width = len(schema)

    def batch(rows: list[tuple]) -> Any:
        columns = list(zip(*rows, strict=True))
        arrays = []
        for index in range(width):
            values = columns[index]
            if index == 3:
                arrays.append(headers_array(values))
            else:
                arrays.append(pa.array(values, type=schema.field(index).type))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    for record_batch in bounds:
        for start, end in zip(
            record_batch.column(0).to_pylist(), record_batch.column(1).to_pylist(), strict=True
        ):
            pending: list[tuple] = []
            for row in read_slice(config, (start, end)):
                pending.append(row)
                if len(pending) == rows_per_batch:
                    yield batch(pending)
                    pending = []
            if pending:
                yield batch(pending)


def staged_messages(spark: SparkSession, config: DrainConfig, count: int, low: int | None, high: int | None):
    """The run's staged messages as a DataFrame, read in RowVersion slices by the executors."""
    from pyspark.sql import functions as F

    schema = read_schema()
    if count == 0 or low is None or high is None:
        frame = spark.createDataFrame([], schema)
    else:
        slices = max(config.partitions, math.ceil(count / config.read_slice_rows))
        span = high - low + 1
        slices = min(slices, span)
        edges = [low + (span * i) // slices for i in range(slices)] + [high + 1]
        bounds = [(edges[i], edges[i + 1]) for i in range(slices)]
        slices_frame = spark.sparkContext.parallelize(bounds, len(bounds)).toDF("lo long, hi long")
        frame = slices_frame.mapInArrow(partial(read_slices_arrow, config), schema)
    content_type = F.lower(F.coalesce(F.col("content_type"), F.lit("")))
    # decoded in the JVM (invalid UTF-8 becomes U+FFFD): half the data through Python and Arrow
    body_text = F.when(content_type.rlike(TEXT_TYPES_PATTERN), F.col("body").cast("string"))
    frame = frame.withColumn("body_text", body_text).select(*messages_schema().fieldNames())
    return frame.withColumn(
        "body_json", F.when(content_type.contains("json"), F.try_parse_json(F.col("body_text")))
    )
