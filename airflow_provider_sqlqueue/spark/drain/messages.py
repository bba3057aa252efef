"""The messages DataFrame a transform receives: its columns, how one staged row becomes them, and the
executors reading a run's staged rows in RowVersion slices (through Arrow) to build it.

The rows of a run no longer change once phase 2 has begun, so any re-read of a slice returns the same data.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from ..reading.columns import headers_array, message_row, record_batch, staged_columns
from ..reading.row_batches import row_batches
from ..reading.schema import TEXT_TYPES_PATTERN, arrow_schema, messages_schema, read_schema
from ..tables import BridgeSql, bridge_tables
from .config import DrainConfig
from .headers_check import HeadersCheck

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["headers_array", "message_row", "messages_schema", "read_schema", "staged_messages"]


def read_slice(config: DrainConfig, bounds: tuple[int, int], rows_per_chunk: int = 2000) -> Iterator[list]:
    """The run's rows of one RowVersion slice (staged, or held in the queue with ``read_in_place``), as the
    driver returns them, in chunks."""
    start, end = bounds
    with config.open(pool_size=1, max_overflow=0) as transport:
        address = transport.resolve(config.input_queue) if config.read_in_place else None
        sql = BridgeSql(transport, bridge_tables(transport, config.input_queue, config.prefix), address)
        with transport.connection() as connection:
            cursor = connection.cursor(binary=True) if sql.reads_binary else connection.cursor()
            if config.read_in_place:
                cursor.execute(sql.held_reads_by_index(), ())
                statement, params = sql.held_slice(), (start, end)
            else:
                statement, params = sql.staged_slice(), (config.run_id, start, end)
            yield from row_batches(cursor, statement, params, rows_per_chunk)
            connection.commit()


def slice_bounds(ranges: list[tuple[int, int]], rows_per_slice: int) -> list[tuple[int, int]]:
    """Inclusive RowVersion ranges cut into slices (from, to exclusive) of at most ``rows_per_slice``."""
    bounds = []
    for low, high in ranges:
        for start in range(low, high + 1, rows_per_slice):
            bounds.append((start, min(start + rows_per_slice, high + 1)))
    return bounds


def read_slices_arrow(
    config: DrainConfig,
    bounds: Iterable[Any],
    rows_per_batch: int = 2000,
    check: HeadersCheck | None = None,
) -> Iterator[Any]:
    """``mapInArrow`` side: read the slices named in ``bounds`` (batches of lo, hi) as Arrow record batches.

    Arrow carries the rows to the JVM column by column, much cheaper than pickled rows. With ``check``
    (held rows, whose headers nobody read yet), rows with unreadable headers are left out and reported
    through it with each slice read to its end.
    """
    schema = arrow_schema(read_schema())
    for slices in bounds:
        for start, end in zip(slices.column(0).to_pylist(), slices.column(1).to_pylist(), strict=True):
            unreadable: list[int] | None = None if check is None else []
            for rows in read_slice(config, (start, end), rows_per_batch):
                yield record_batch(staged_columns(rows, unreadable), schema)
            if check is not None and unreadable is not None:
                check.record((start, end), unreadable)


def staged_messages(
    spark: SparkSession,
    config: DrainConfig,
    count: int,
    low: int | None,
    high: int | None,
    held: list[tuple[int, int]] | None = None,
    check: HeadersCheck | None = None,
):
    """The run's staged messages as a DataFrame, read in RowVersion slices by the executors; with ``held``
    (``read_in_place``), the rows held in the queue in those inclusive ranges, their unreadable rows left
    out and reported through ``check``."""
    from pyspark.sql import functions as F

    schema = read_schema()
    if count == 0 or low is None or high is None:
        frame = spark.createDataFrame([], schema)
    else:
        if held is not None:
            bounds = slice_bounds(held, config.read_slice_rows)
        else:
            slices = max(config.partitions, math.ceil(count / config.read_slice_rows))
            span = high - low + 1
            slices = min(slices, span)
            edges = [low + (span * i) // slices for i in range(slices)] + [high + 1]
            bounds = [(edges[i], edges[i + 1]) for i in range(slices)]
        # consecutive slices go to one task, up to read_partition_rows rows each
        tasks = max(config.partitions, math.ceil(count / config.read_partition_rows))
        partitions = min(len(bounds), tasks)
        slices_frame = spark.sparkContext.parallelize(bounds, partitions).toDF("lo long, hi long")
        frame = slices_frame.mapInArrow(partial(read_slices_arrow, config, check=check), schema)
    content_type = F.lower(F.coalesce(F.col("content_type"), F.lit("")))
    # decoded in the JVM (invalid UTF-8 becomes U+FFFD): half the data through Python and Arrow
    body_text = F.when(content_type.rlike(TEXT_TYPES_PATTERN), F.col("body").cast("string"))
    frame = frame.withColumn("body_text", body_text).select(*messages_schema().fieldNames())
    return frame.withColumn(
        "body_json", F.when(content_type.contains("json"), F.try_parse_json(F.col("body_text")))
    )
