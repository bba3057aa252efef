"""The rows the ``sqlqueue`` data source returns: the drain's messages columns (same names, same meaning),
plus the correlation id and reply-to address, built on the executors from the staged rows and handed to
Spark as Arrow record batches (column by column, as the drain's reader does: far cheaper than tuples)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ...transport import ConfigurationError
from ...transport.headers import CORRELATION_ID, REPLY_TO_ADDRESS
from .columns import record_batch, staged_columns
from .row_batches import row_batches
from .schema import TEXT_TYPES_PATTERN, arrow_schema, source_schema

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = [
    "selected_columns",
    "source_arrow_schema",
    "source_columns",
    "source_schema",
    "staged_batches",
]

ROWS_PER_BATCH = 2000

# the source's columns beyond the drain's, each one header
_HEADER_COLUMNS = {"correlation_id": CORRELATION_ID, "reply_to_address": REPLY_TO_ADDRESS}


def source_columns(*names: str) -> StructType:
    """The source's schema with only ``names``, in that order: ``readStream.format("sqlqueue")
    .schema(source_columns("message_id", "body_text"))`` builds and hands Spark only those columns."""
    from pyspark.sql.types import StructType

    schema = source_schema()
    unknown = [name for name in names if name not in schema.names]
    if unknown:
        raise ConfigurationError(
            f"the sqlqueue source has no column {', '.join(unknown)}; it has {schema.names}"
        )
    return StructType([schema[name] for name in names])


def source_arrow_schema(columns: Sequence[tuple[str, bool]] | None = None) -> Any:
    """:func:`source_schema` (or the ``columns`` a read selects: name and whether it may be null, in that
    order) as the Arrow schema Spark checks a data source's record batches against."""
    from pyspark.sql.types import StructField, StructType

    schema = source_schema()
    if columns is not None:
        schema = StructType(
            [StructField(name, schema[name].dataType, nullable) for name, nullable in columns]
        )
    return arrow_schema(schema)


def staged_batches(
    cursor: Any,
    statement: str,
    params: tuple,
    rows_per_batch: int = ROWS_PER_BATCH,
    unreadable: list[int] | None = None,
    columns: Sequence[tuple[str, bool]] | None = None,
) -> Iterator[Any]:
    """Run a staged-slice SELECT and yield its rows as Arrow record batches of :func:`source_arrow_schema`,
    each row what :func:`~.columns.message_row` makes of it, built column by column; with
    ``columns`` (a ``.schema`` naming some of the source's columns), only those are built and handed to
    Spark. With ``unreadable`` (rows held in place, whose headers nobody read yet), rows whose headers are
    not a header map are left out and their RowVersions appended to it."""
    schema = source_arrow_schema(columns)
    wanted = set(schema.names)
    if "body_text" in wanted:
        wanted |= {"body", "content_type"}
    for rows in row_batches(cursor, statement, params, rows_per_batch):
        built = staged_columns(rows, unreadable, wanted, _HEADER_COLUMNS)
        if not built["row_version"]:
            continue
        if "body_text" in wanted:
            built["body"], built["body_text"] = body_columns(built["body"], built["content_type"])
        yield record_batch(built, schema)


def selected_columns(given: StructType) -> tuple[tuple[str, bool], ...] | None:
    """The columns a ``.schema(...)`` given to a read selects, each name with whether the read lets it be
    null: None for the source's own schema, else the given fields in their order, each one of
    :func:`source_schema`'s with the same type. Spark hands a Python data source every column it builds (no
    column pruning), so a schema naming only the columns a job reads spares the executors building and
    shipping the others (the body twice, the headers map).

    :class:`~airflow_provider_sqlqueue.transport.ConfigurationError` for any other schema, and for a column
    declared not null that the source may leave null, at planning, before anything is received."""
    ours = source_schema()
    if [(f.name, f.dataType, f.nullable) for f in given.fields] == [
        (f.name, f.dataType, f.nullable) for f in ours.fields
    ]:
        return None
    names = [field.name for field in given.fields]
    known = {field.name: field for field in ours.fields}
    wrong = [
        f"{field.name} {field.dataType.simpleString()}"
        for field in given.fields
        if field.name not in known or known[field.name].dataType != field.dataType
    ]
    problem = ""
    if not names:
        problem = "it names no column"
    elif wrong:
        problem = f"not the source's: {', '.join(wrong)}"
    elif len(set(names)) != len(names):
        problem = "it names a column twice"
    else:
        not_null = [field.name for field in given.fields if not field.nullable and known[field.name].nullable]
        if not_null:
            problem = f"{', '.join(not_null)} may be null"
    if problem:
        raise ConfigurationError(
            "a .schema(...) for format('sqlqueue') names some of the source's columns with their types "
            f"({problem}); the source's schema is {ours.simpleString()} (given: {given.simpleString()})"
        )
    return tuple((field.name, field.nullable) for field in given.fields)


def body_columns(bodies: list[bytes | None], content_types: list[str | None]) -> tuple[Any, Any]:
    """The ``body`` and ``body_text`` Arrow arrays: the text where the content type is a text type, decoded
    by Arrow when every such body is UTF-8, else body by body with replacement characters (as
    :func:`~.columns.message_row` does).

    When every body there is has a text type (the usual batch), ``body_text`` is the ``body`` column's own
    offsets and bytes read as text, its nulls where the body is null: Arrow checks the bytes are UTF-8 and
    copies none of them (a cast, then a masked copy, cost two copies of every body)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    body = pa.array(bodies, pa.binary())
    types = pc.utf8_lower(pa.array(content_types, pa.string()))
    texts = pc.fill_null(pc.match_substring_regex(types, TEXT_TYPES_PATTERN), False)
    shown = pc.and_(texts, body.is_valid())
    _, offsets, data = body.buffers()
    aligned = data is not None and body.offset == shown.offset == 0
    if aligned and pc.sum(shown).as_py() == len(body) - body.null_count:
        text = pa.Array.from_buffers(pa.string(), len(body), [shown.buffers()[1], offsets, data])
        try:
            text.validate(full=True)
            return body, text
        except pa.ArrowInvalid:  # a body that is not UTF-8
            pass
    try:
        return body, pc.if_else(texts, body.cast(pa.string()), None)
    except pa.ArrowInvalid:  # a body that is not UTF-8
        decoded = [
            data.decode("utf-8", errors="replace") if data is not None and text else None
            for data, text in zip(bodies, texts.to_pylist(), strict=True)
        ]
        return body, pa.array(decoded, pa.string())
