"""The rows the ``sqlqueue`` data source returns: the drain's messages columns (same names, same meaning),
plus the correlation id and reply-to address, built on the executors from the staged rows and handed to
Spark as Arrow record batches (column by column, as the drain's reader does: far cheaper than tuples)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ...transport.headers import CORRELATION_ID, REPLY_TO_ADDRESS
from ..drain.columns import record_batch, staged_columns
from ..drain.messages import TEXT_TYPES_PATTERN, message_row, messages_schema
from ..row_batches import row_batches

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["source_arrow_schema", "source_row", "source_schema", "staged_batches"]

ROWS_PER_BATCH = 2000

_TEXT = re.compile(TEXT_TYPES_PATTERN)


def source_schema() -> StructType:
    """``messages_schema()`` with ``correlation_id`` and ``reply_to_address`` after ``row_version``."""
    from pyspark.sql.types import StringType, StructField, StructType

    fields = list(messages_schema().fields)
    extra = [
        StructField("correlation_id", StringType(), True),
        StructField("reply_to_address", StringType(), True),
    ]
    return StructType(fields[:3] + extra + fields[3:])


def source_row(row_version: Any, native_id: Any, headers_text: Any, body: Any, expires: Any) -> tuple:
    """One staged row (RowVersion, Id, Headers, Body, Expires) as the columns of :func:`source_schema`."""
    (message_id, native, position, headers, body_bytes, content_type, message_type, time_sent, expiry) = (
        message_row(row_version, native_id, headers_text, body, expires)
    )
    body_text = None
    if body_bytes is not None and _TEXT.search((content_type or "").lower()):
        body_text = body_bytes.decode("utf-8", errors="replace")
    return (
        message_id,
        native,
        position,
        headers.get(CORRELATION_ID),
        headers.get(REPLY_TO_ADDRESS),
        headers,
        body_bytes,
        content_type,
        message_type,
        body_text,
        time_sent,
        expiry,
    )


def source_arrow_schema() -> Any:
    """:func:`source_schema` as the Arrow schema Spark checks a data source's record batches against."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(source_schema(), timezone="UTC")


def staged_batches(
    cursor: Any,
    statement: str,
    params: tuple,
    rows_per_batch: int = ROWS_PER_BATCH,
    unreadable: list[int] | None = None,
) -> Iterator[Any]:
    """Run a staged-slice SELECT and yield its rows as Arrow record batches of :func:`source_arrow_schema`,
    each row what :func:`source_row` makes of it, built column by column. With ``unreadable`` (rows held in
    place, whose headers nobody read yet), rows whose headers are not a header map are left out and their
    RowVersions appended to it."""
    schema = source_arrow_schema()
    for rows in row_batches(cursor, statement, params, rows_per_batch):
        columns = staged_columns(rows, unreadable)
        if not columns["row_version"]:
            continue
        maps = columns["headers"]
        columns["correlation_id"] = [headers.get(CORRELATION_ID) for headers in maps]
        columns["reply_to_address"] = [headers.get(REPLY_TO_ADDRESS) for headers in maps]
        columns["body"], columns["body_text"] = body_columns(columns["body"], columns["content_type"])
        yield record_batch(columns, schema)


def body_columns(bodies: list[bytes | None], content_types: list[str | None]) -> tuple[Any, Any]:
    """The ``body`` and ``body_text`` Arrow arrays: the text where the content type is a text type, decoded
    by Arrow when every such body is UTF-8, else body by body with replacement characters (as
    :func:`source_row` does)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    body = pa.array(bodies, pa.binary())
    types = pc.utf8_lower(pa.array(content_types, pa.string()))
    texts = pc.fill_null(pc.match_substring_regex(types, TEXT_TYPES_PATTERN), False)
    try:
        return body, pc.if_else(texts, body.cast(pa.string()), None)
    except pa.ArrowInvalid:  # a body that is not UTF-8
        decoded = [
            data.decode("utf-8", errors="replace") if data is not None and text else None
            for data, text in zip(bodies, texts.to_pylist(), strict=True)
        ]
        return body, pa.array(decoded, pa.string())
