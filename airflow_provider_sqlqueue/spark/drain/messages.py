"""The messages DataFrame a transform receives: the run's messages read with ``spark.read.format("sqlqueue")``
(the data source reads the staged rows of the run, or the rows the driver holds in the queue), their body
decoded as text and JSON in the JVM."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..config import split_credentials
from ..source.columns import headers_array, message_row
from ..source.schema import TEXT_TYPES_PATTERN, messages_schema, read_schema
from .config import DrainConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "headers_array",
    "message_row",
    "messages_schema",
    "read_schema",
    "run_messages",
    "source_options",
    "staged_messages",
]


def source_options(config: DrainConfig, held: Sequence[tuple[int, int]] | None = None) -> dict[str, str]:
    """The ``sqlqueue`` read of the drain's run (with ``held``: of the ranges the driver holds), its
    password in the ``password`` option, which Spark redacts in plans and the UI."""
    url, password = split_credentials(config.url)
    options = {
        "queue": config.input_queue,
        "url": url,
        "runId": config.run_id,
        "prefix": config.prefix,
        "errorQueue": config.error_queue or "",
        "partitions": str(config.partitions),
        "sliceRows": str(config.read_slice_rows),
        "partitionRows": str(config.read_partition_rows),
    }
    if password is not None:
        options["password"] = password
    if config.default_schema:
        options["defaultSchema"] = config.default_schema
    if held is not None:
        options["heldRanges"] = json.dumps([list(pair) for pair in held])
    return options


def run_messages(
    spark: SparkSession, config: DrainConfig | None, held: Sequence[tuple[int, int]] | None = None
) -> DataFrame:
    """The run's messages (staged, or with ``held`` the rows held in those inclusive ranges, their unreadable
    ones left out and noted in the run's row) as the transform's DataFrame; with no ``config``, an empty one
    of the same columns."""
    from pyspark.sql import functions as F

    from ..source.datasource import SqlQueueDataSource

    if config is None:
        frame = spark.createDataFrame([], read_schema())
    else:
        spark.dataSource.register(SqlQueueDataSource)
        reader = spark.read.format("sqlqueue").schema(read_schema())
        frame = reader.options(**source_options(config, held)).load()
    content_type = F.lower(F.coalesce(F.col("content_type"), F.lit("")))
    # decoded in the JVM (invalid UTF-8 becomes U+FFFD): half the data through Python and Arrow
    body_text = F.when(content_type.rlike(TEXT_TYPES_PATTERN), F.col("body").cast("string"))
    frame = frame.withColumn("body_text", body_text).select(*messages_schema().fieldNames())
    return frame.withColumn(
        "body_json", F.when(content_type.contains("json"), F.try_parse_json(F.col("body_text")))
    )


def staged_messages(
    spark: SparkSession,
    config: DrainConfig,
    count: int,
    low: int | None = None,
    high: int | None = None,
    held: Sequence[tuple[int, int]] | None = None,
    check: object = None,
) -> DataFrame:
    """Deprecated: :func:`run_messages`, the run read with ``spark.read.format("sqlqueue")``."""
    import warnings

    warnings.warn(
        "staged_messages is deprecated: use run_messages(spark, config, held_ranges), which reads the run "
        'with spark.read.format("sqlqueue")',
        DeprecationWarning,
        stacklevel=2,
    )
    return run_messages(spark, config if count else None, held)
