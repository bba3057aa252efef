"""A table sink's rows as PostgreSQL ``COPY`` text, formatted by the executors.

The commit writes every result row on the driver, inside the run's transaction (that is what makes a table
sink exactly once). Turning each row into a Python ``Row`` on the driver and formatting it there cost more
than anything else the commit does; here Spark formats each row as one line of ``COPY ... FROM STDIN``
text in the JVM, the executors join each Arrow batch of lines into one chunk, and the driver only passes the
chunks on. Columns whose type has no text form here (maps, arrays, structs, variants, intervals) keep
the row-by-row path, which stores them as JSON text.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructField

__all__ = ["COPY_CHUNK_SCHEMA", "copy_chunks", "copy_text_column"]

COPY_CHUNK_SCHEMA = "rows long, data binary"

# COPY's text format: a backslash and the three characters that end a field or a row are escaped
_ESCAPES = (("\\", "\\\\"), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"))


def copy_text_column(field: StructField) -> Column | None:
    """``field`` as its COPY text (``\\N`` for NULL), or None when its type has no text form here.

    Each form is what PostgreSQL's input function reads back as the value psycopg would have sent:
    timestamps carry their offset (a ``timestamp`` column keeps the session's wall-clock time, a
    ``timestamptz`` column the instant), floats are widened to double first (the value Python would hold),
    bytes are ``bytea`` hex.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    column = F.col("`" + field.name.replace("`", "``") + "`")
    kind = field.dataType
    text: Column
    if isinstance(kind, T.StringType):
        text = column
        for plain, escaped in _ESCAPES:
            text = F.replace(text, F.lit(plain), F.lit(escaped))
    elif isinstance(
        kind,
        T.LongType | T.IntegerType | T.ShortType | T.ByteType | T.DoubleType | T.DecimalType | T.DateType,
    ):
        text = column.cast("string")
    elif isinstance(kind, T.FloatType):
        text = column.cast("double").cast("string")
    elif isinstance(kind, T.BooleanType):
        text = F.when(column, F.lit("t")).when(~column, F.lit("f"))
    elif isinstance(kind, T.TimestampNTZType):
        text = F.date_format(column, "yyyy-MM-dd HH:mm:ss.SSSSSS")
    elif isinstance(kind, T.TimestampType):
        text = F.date_format(column, "yyyy-MM-dd HH:mm:ss.SSSSSSxxx")
    elif isinstance(kind, T.BinaryType):
        text = F.concat(F.lit("\\\\x"), F.lower(F.hex(column)))
    else:
        return None
    return F.coalesce(text, F.lit("\\N"))


def _join_lines(batches: Iterable[Any]) -> Iterator[Any]:
    """``mapInArrow`` side: each Arrow batch of lines (each ending in a newline) becomes one chunk of COPY
    text and its row count, joined by Arrow without a Python object per line."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for batch in batches:
        lines = batch.column(0)
        if len(lines) == 0:
            continue
        whole = pa.ListArray.from_arrays(pa.array([0, len(lines)], pa.int32()), lines)
        data = pc.binary_join(whole, "").cast(pa.binary())
        yield pa.RecordBatch.from_arrays([pa.array([len(lines)], pa.int64()), data], names=["rows", "data"])


def copy_chunks(result: DataFrame) -> DataFrame | None:
    """``result`` as chunks of COPY text lines (columns ``rows``, ``data``; UTF-8), in ``result``'s column
    order; None when a column's type has no text form here."""
    from pyspark.sql import functions as F

    texts = [copy_text_column(field) for field in result.schema.fields]
    if not texts or any(text is None for text in texts):
        return None
    lines = result.select(F.concat(F.concat_ws("\t", *texts), F.lit("\n")).alias("line"))
    return lines.mapInArrow(_join_lines, COPY_CHUNK_SCHEMA)
