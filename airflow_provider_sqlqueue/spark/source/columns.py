"""Staged rows as the messages' columns, built column by column for Arrow on the executors.

The drain's reader and the ``sqlqueue`` data source hand Spark Arrow record batches of the staged messages.
Building one tuple per row first and transposing cost more than the read itself (a Python call per field,
and ``datetime`` objects for every ``TimeSent``). Here the header JSON texts go through msgspec's decoder in
one ``map`` (row by row through :func:`decode_headers` when one is not a ``str`` it reads); every other
column is one pass over the rows, and the ``TimeSent`` texts in their usual form are parsed by Arrow in one
call. Rows in any other form are parsed exactly as :func:`parse_time_sent` parses one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from operator import itemgetter
from typing import Any

from ...model.errors import HeaderFormatError
from ...transport.headers import (
    CONTENT_TYPE,
    CORRELATION_ID,
    ENCLOSED_MESSAGE_TYPES,
    MESSAGE_ID,
    REPLY_TO_ADDRESS,
    TIME_SENT,
    decode_headers,
    parse_timestamp,
    read_header_map,
)
from ...transport.queue import as_utc
from .schema import TEXT_TYPES_PATTERN

__all__ = [
    "headers_array",
    "message_row",
    "parse_time_sent",
    "record_batch",
    "staged_columns",
    "times_sent_array",
]

# NServiceBus.TimeSent as NServiceBus writes it (yyyy-MM-dd HH:mm:ss:ffffff Z), all digits
_USUAL_TIME_SENT = r"^\d{4}-\d\d-\d\d.\d\d:\d\d:\d\d:\d{6} Z$"


def parse_time_sent(text: str | None) -> datetime | None:
    """``NServiceBus.TimeSent`` (``yyyy-MM-dd HH:mm:ss:ffffff Z``) as an aware UTC datetime, None when it is
    missing or unreadable; parsed without strptime's cost."""
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


def times_sent_array(texts: Sequence[str | None]) -> Any:
    """``TimeSent`` texts as an Arrow ``timestamp[us, UTC]`` array, each value what :func:`parse_time_sent`
    gives for it.

    When every text is missing, empty or in the usual form (digits, year 0001 or later), Arrow parses them
    all at once; a batch with any other text, or one that Arrow refuses (a 30 February), is parsed text by
    text instead.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    moment = pa.timestamp("us", tz="UTC")
    strings = pa.array(texts, pa.string())
    usual = pc.fill_null(
        pc.and_(
            pc.match_substring_regex(strings, _USUAL_TIME_SENT),
            pc.invert(pc.starts_with(strings, "0000")),
        ),
        False,
    )
    absent = pc.fill_null(pc.equal(strings, ""), True)
    if pc.all(pc.or_(usual, absent)).as_py() is not False:
        iso = pc.binary_join_element_wise(
            pc.utf8_slice_codeunits(strings, 0, 10),
            pc.binary_join_element_wise(
                pc.utf8_slice_codeunits(strings, 11, 19), pc.utf8_slice_codeunits(strings, 20, 26), "."
            ),
            " ",
        )
        try:
            return pc.cast(pc.if_else(usual, iso, None), pa.timestamp("us")).cast(moment)
        except pa.ArrowInvalid:
            pass
    return pa.array([parse_time_sent(text) for text in texts], moment)


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


def _header_maps(texts: list[Any]) -> list[dict[str, str | None]]:
    """Every row's header map, when every text is a ``str`` that msgspec's typed decoder reads: what
    :func:`decode_headers` returns for each, without its Python call per row. ValueError (or TypeError)
    otherwise, and the caller decodes row by row."""
    if not set(map(type, texts)) <= {str}:
        raise TypeError("headers that are not all str")
    return list(map(read_header_map, texts))


def _readable(
    rows: Sequence[Sequence[Any]], unreadable: list[int]
) -> tuple[list[Sequence[Any]], list[dict[str, str | None]]]:
    """The rows whose headers read as a header map, with their maps; the others' RowVersions go to
    ``unreadable``."""
    kept: list[Sequence[Any]] = []
    maps: list[dict[str, str | None]] = []
    for row in rows:
        try:
            maps.append(decode_headers(_text(row[2])))
        except HeaderFormatError:
            unreadable.append(int(row[0]))
        else:
            kept.append(row)
    return kept, maps


def _text(value: Any) -> Any:
    return bytes(value).decode("utf-8") if isinstance(value, bytes | bytearray | memoryview) else value


def staged_columns(
    rows: Sequence[Sequence[Any]],
    unreadable: list[int] | None = None,
    wanted: Collection[str] | None = None,
    header_columns: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Staged rows (RowVersion, Id, Headers, Body, Expires) as the messages' columns, by name: Python lists,
    the decoded ``headers`` maps, and ``time_sent`` already an Arrow array. With ``wanted``, only those
    columns (and ``row_version``, which says whether any row is left) are built. ``header_columns`` adds
    columns of one header each (column name: header name), built when wanted.

    Without ``unreadable``, :class:`~airflow_provider_sqlqueue.model.errors.HeaderFormatError` if a row's
    headers cannot be read (staging holds only rows whose headers were read when they were received). With
    it (rows held in place, whose headers nobody read yet), such rows are left out and their RowVersions
    appended to it.
    """
    try:
        maps = _header_maps(list(map(itemgetter(2), rows)))
    except (ValueError, TypeError):  # decoded again row by row: decode_headers decides, and says why
        try:
            maps = [decode_headers(_text(row[2])) for row in rows]
        except HeaderFormatError:
            if unreadable is None:
                raise
            rows, maps = _readable(rows, unreadable)
    natives: list[str] = []  # built once, for message_id and native_id alike

    def native_ids() -> list[str]:
        if not natives and rows:
            natives.extend(
                native if type(native) is str else str(native) for native in (row[1] for row in rows)
            )
        return natives

    builders: dict[str, Callable[[], Any]] = {
        "message_id": lambda: [
            headers.get(MESSAGE_ID) or native for headers, native in zip(maps, native_ids(), strict=True)
        ],
        "native_id": native_ids,
        "headers": lambda: maps,
        "body": lambda: [
            body if body is None or type(body) is bytes else bytes(body) for body in (row[3] for row in rows)
        ],
        "content_type": lambda: [headers.get(CONTENT_TYPE) for headers in maps],
        "message_type": lambda: [headers.get(ENCLOSED_MESSAGE_TYPES) for headers in maps],
        "time_sent": lambda: times_sent_array([headers.get(TIME_SENT) for headers in maps]),
        "expires": lambda: [None if value is None else as_utc(value) for value in (row[4] for row in rows)],
    }
    for name, key in (header_columns or {}).items():
        builders[name] = lambda key=key: [headers.get(key) for headers in maps]
    columns = {
        "row_version": [value if type(value) is int else int(value) for value in (row[0] for row in rows)]
    }
    for name, build in builders.items():
        if wanted is None or name in wanted:
            columns[name] = build()
    return columns


def record_batch(columns: dict[str, Any], schema: Any) -> Any:
    """The named columns as an Arrow record batch of ``schema`` (the ``headers`` maps as an Arrow map)."""
    import pyarrow as pa

    arrays = []
    for field in schema:
        values = columns[field.name]
        if field.name == "headers":
            arrays.append(headers_array(values))
        elif isinstance(values, pa.Array):
            arrays.append(values)
        else:
            arrays.append(pa.array(values, type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def message_row(
    row_version: Any, native_id: Any, headers_text: Any, body: Any, expires: Any
) -> dict[str, Any]:
    """One staged row (RowVersion, Id, Headers, Body, Expires) as every column of the one schema
    (:func:`~.schema.source_schema`), by name, one value at a time: the reference the column-by-column
    builders are held to."""
    if isinstance(headers_text, bytes | bytearray | memoryview):
        headers_text = bytes(headers_text).decode("utf-8")
    headers = decode_headers(headers_text)
    body_bytes = None if body is None else bytes(body)
    content_type = headers.get(CONTENT_TYPE)
    native = str(native_id)
    body_text = None
    if body_bytes is not None and re.search(TEXT_TYPES_PATTERN, (content_type or "").lower()):
        body_text = body_bytes.decode("utf-8", errors="replace")
    return {
        "message_id": headers.get(MESSAGE_ID) or native,
        "native_id": native,
        "row_version": int(row_version),
        "correlation_id": headers.get(CORRELATION_ID),
        "reply_to_address": headers.get(REPLY_TO_ADDRESS),
        "headers": headers,
        "body": body_bytes,
        "content_type": content_type,
        "message_type": headers.get(ENCLOSED_MESSAGE_TYPES),
        "body_text": body_text,
        "time_sent": parse_time_sent(headers.get(TIME_SENT)),
        "expires": as_utc(expires),
    }
