"""The executors' column-by-column build of staged messages (drain reader and data source) gives, row for
row, what the one-row reference function gives, whichever path the TimeSent parse takes."""

from __future__ import annotations

import json
import sqlite3
import uuid
from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from airflow_provider_sqlqueue.model.errors import HeaderFormatError
from airflow_provider_sqlqueue.spark.source.columns import (
    message_row,
    parse_time_sent,
    record_batch,
    staged_columns,
    times_sent_array,
)
from airflow_provider_sqlqueue.spark.source.returned_rows import (
    source_arrow_schema,
    source_schema,
    staged_batches,
)
from airflow_provider_sqlqueue.spark.source.schema import arrow_schema, read_schema

USUAL = ["2026-11-26 19:33:03:067691 Z", "0001-01-01 00:00:00:000000 Z", "2024-02-29 23:59:59:999999 Z"]
UNUSUAL = [
    "2026-02-30 10:00:00:000000 Z",  # the usual form, but no such day
    "2026-11-26 24:00:00:000000 Z",
    "2026-11-26 23:59:60:000000 Z",
    "0000-11-26 19:33:03:067691 Z",  # year 0: Arrow has it, Python's datetime does not
    "2026-11-26T19:33:03:067691 Z",  # any character between date and time
    "+026-11-26 19:33:03:067691 Z",  # int() takes a sign and blanks
    "2026-11-26 19:33:03: 67691 Z",
    "2026-11-26 19:33:03:06769a Z",
    "2026-11-26 19:33:03:067691",
    "yesterday",
]


def _headers(time_sent: str | None, **more: str | None) -> str:
    headers: dict[str, str | None] = {
        "NServiceBus.MessageId": f"m-{uuid.uuid4()}",
        "NServiceBus.ContentType": "application/json",
        "NServiceBus.EnclosedMessageTypes": "Sales.OrderPlaced",
    }
    if time_sent is not None:
        headers["NServiceBus.TimeSent"] = time_sent
    headers.update(more)
    return json.dumps(headers)


def _rows(times: list[str | None]) -> list[tuple]:
    """Staged rows in every form drivers return: Id as text or UUID, RowVersion as int or text, headers as
    text or bytes, body as bytes, memoryview or NULL, Expires as NULL, text, naive or aware datetime."""
    expiries = [
        None,
        "2026-11-21 08:00:01.500",
        datetime(2026, 11, 21, 8, 0, 1),
        datetime(2026, 11, 21, 9, 0, tzinfo=timezone.utc),
    ]
    rows = []
    for index, sent in enumerate(times):
        headers = _headers(sent)
        rows.append(
            (
                index + 1 if index % 3 else str(index + 1),
                uuid.uuid4() if index % 2 else str(uuid.uuid4()),
                headers.encode() if index % 4 == 1 else headers,
                None if index % 5 == 4 else memoryview(b"\xff\x00") if index % 5 == 3 else b'{"a": 1}',
                expiries[index % len(expiries)],
            )
        )
    rows.append((99, "id-no-message-id", json.dumps({"NServiceBus.MessageId": ""}), b"x", None))
    rows.append((100, "id-no-headers", "{}", b"", None))
    return rows


@pytest.mark.parametrize(
    "times",
    [
        [*USUAL, None, "", None],
        [*USUAL, *UNUSUAL, None, ""],
        *([text, USUAL[0]] for text in UNUSUAL),
    ],
    ids=["usual-only", "mixed", *(f"unusual-{i}" for i in range(len(UNUSUAL)))],
)
def test_staged_columns_match_the_one_row_reference(times: list[str | None]) -> None:
    rows = _rows(times)
    schema = arrow_schema(read_schema())
    built = record_batch(staged_columns(rows), schema).to_pylist()
    expected = [{name: message_row(*row)[name] for name in schema.names} for row in rows]
    for row in expected:
        row["headers"] = list(row["headers"].items())
    assert built == expected


def test_usual_times_sent_take_arrows_path_and_unusual_ones_each_parse_alone() -> None:
    usual = times_sent_array([*USUAL, None, ""])
    assert usual.to_pylist() == [parse_time_sent(text) for text in USUAL] + [None, None]
    assert usual.to_pylist()[0] == datetime(2026, 11, 26, 19, 33, 3, 67691, tzinfo=timezone.utc)
    for text in UNUSUAL:
        assert times_sent_array([USUAL[0], text]).to_pylist() == [
            parse_time_sent(USUAL[0]),
            parse_time_sent(text),
        ], text
    assert parse_time_sent("2026-02-30 10:00:00:000000 Z") is None
    assert parse_time_sent("2026-11-26T19:33:03:067691 Z") is not None


def test_unreadable_headers_in_staging_raise_instead_of_passing_through() -> None:
    with pytest.raises(HeaderFormatError):
        staged_columns([(1, "id", "[1, 2]", b"", None)])


def test_unreadable_headers_of_held_rows_are_left_out_and_reported_by_row_version() -> None:
    """Rows held in place have not had their headers read: the unreadable ones drop out of the columns, in
    any position and any form (bytes included), and only their RowVersions are reported."""
    rows = _rows([*USUAL, None, ""])
    broken = [
        (7001, "id-a", "[1, 2]", b"", None),
        (7002, "id-b", b"<not json", b"", None),
        (7003, "id-c", None, b"", None),
        (7004, "id-d", '{"NServiceBus.MessageId": 5}', b"", None),
    ]
    mixed = [broken[0], *rows[:3], broken[1], broken[2], *rows[3:], broken[3]]
    unreadable: list[int] = []
    schema = arrow_schema(read_schema())
    built = record_batch(staged_columns(mixed, unreadable), schema).to_pylist()
    assert unreadable == [7001, 7002, 7003, 7004]
    assert built == record_batch(staged_columns(rows), schema).to_pylist()
    assert staged_columns(rows, unreadable)["row_version"] == [int(row[0]) for row in rows]
    assert unreadable == [7001, 7002, 7003, 7004]  # readable rows add nothing


def test_the_sources_batches_match_its_one_row_reference_through_a_real_cursor() -> None:
    rows = _rows([*USUAL, *UNUSUAL[:3], None])
    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE TABLE staged (RowVersion, Id, Headers, Body, Expires)")
    connection.executemany(
        "INSERT INTO staged VALUES (?, ?, ?, ?, ?)",
        [
            (
                int(version),
                str(native),
                headers,
                None if body is None else bytes(body),
                None if expires is None else str(expires),
            )
            for version, native, headers, body, expires in rows
        ],
    )
    statement = "SELECT RowVersion, Id, Headers, Body, Expires FROM staged WHERE RowVersion >= ? ORDER BY 1"
    batches = list(staged_batches(connection.cursor(), statement, (0,), rows_per_batch=4))
    assert [batch.num_rows for batch in batches] == [4, 4, 1]
    assert all(batch.schema == source_arrow_schema() for batch in batches)
    built = [row for batch in batches for row in batch.to_pylist()]
    stored = connection.execute(statement, (0,)).fetchall()
    expected = [message_row(*row) for row in stored]
    for row in expected:
        row["headers"] = list(row["headers"].items())
    assert built == expected
    assert [row["body_text"] for row in built][:2] == ['{"a": 1}', '{"a": 1}']


_STAGED = "SELECT RowVersion, Id, Headers, Body, Expires FROM staged WHERE RowVersion >= ? ORDER BY 1"


def _staged_cursor(rows: list[tuple]) -> sqlite3.Cursor:
    """A real SQLite table of staged rows (RowVersion, Id, Headers, Body, Expires) and a cursor on it."""
    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE TABLE staged (RowVersion, Id, Headers, Body, Expires)")
    connection.executemany("INSERT INTO staged VALUES (?, ?, ?, ?, ?)", rows)
    return connection.cursor()


def _reference(cursor: sqlite3.Cursor, names: list[str]) -> list[dict]:
    """Each stored row as :func:`message_row` makes it, only ``names``, the headers as item pairs."""
    rows = []
    for stored in cursor.execute(_STAGED, (0,)).fetchall():
        row = message_row(*stored)
        row["headers"] = list(row["headers"].items())
        rows.append({name: row[name] for name in names})
    return rows


_PRINTABLE = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
_CONTENT_TYPES = [None, "", "application/json", "Text/Plain", "application/octet-stream", "application/xml"]


@st.composite
def _odd_staged_row(draw: st.DrawFn, version: int) -> tuple:
    """A staged row as another system might have written it: any header value null or missing, the
    message id empty, unusual TimeSents, headers stored as text or as bytes, bodies that are not UTF-8,
    Expires as SQLite keeps it (text, naive or with an offset)."""
    headers: dict[str, str | None] = draw(st.dictionaries(_PRINTABLE, st.none() | _PRINTABLE, max_size=2))
    for key, values in (
        ("NServiceBus.MessageId", st.none() | st.just("") | _PRINTABLE),
        ("NServiceBus.ContentType", st.sampled_from(_CONTENT_TYPES)),
        ("NServiceBus.EnclosedMessageTypes", st.none() | _PRINTABLE),
        ("NServiceBus.TimeSent", st.sampled_from([None, "", *USUAL, *UNUSUAL])),
        ("NServiceBus.CorrelationId", st.none() | _PRINTABLE),
        ("NServiceBus.ReplyToAddress", st.none() | _PRINTABLE),
    ):
        if draw(st.booleans()):
            headers[key] = draw(values)
    text = json.dumps(headers, ensure_ascii=draw(st.booleans()))
    body = draw(st.none() | st.binary(max_size=8) | _PRINTABLE.map(str.encode))
    expires = draw(st.sampled_from([None, "2026-11-21 08:00:01.500", "2026-11-21T09:00:00+02:00"]))
    return (version, f"native-{version}", text.encode() if draw(st.booleans()) else text, body, expires)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_sources_batches_equal_its_one_row_reference_on_odd_rows_for_any_columns(
    data: st.DataObject,
) -> None:
    """Whatever the rows hold, every column (the default) and any columns a ``.schema`` names are, value for
    value, what :func:`message_row` gives: the batch-wide paths (headers decoded in one pass, body_text read
    from the body's own bytes) fall back, or agree, wherever a row is odd."""
    rows = [data.draw(_odd_staged_row(version)) for version in range(1, data.draw(st.integers(1, 7)) + 1)]
    cursor = _staged_cursor(rows)
    full = source_schema()
    names = data.draw(st.none() | st.lists(st.sampled_from(full.names), min_size=1, unique=True))
    columns = None if names is None else tuple((name, full[name].nullable) for name in names)
    batches = list(staged_batches(cursor, _STAGED, (0,), rows_per_batch=3, columns=columns))
    built = [row for batch in batches for row in batch.to_pylist()]
    assert built == _reference(cursor, names or full.names)


def test_header_columns_named_without_the_headers_map_are_read_from_each_message() -> None:
    """``correlation_id`` and ``reply_to_address`` named without ``headers`` (once a batch of empty
    columns Arrow refused) hold each message's values."""
    rows = [
        (1, "a", _headers(USUAL[0], **{"NServiceBus.CorrelationId": "c-1"}), b"{}", None),
        (2, "b", _headers(None, **{"NServiceBus.ReplyToAddress": "replies@db"}), b"{}", None),
    ]
    cursor = _staged_cursor(rows)
    names = ["reply_to_address", "message_id", "correlation_id"]
    columns = tuple((name, source_schema()[name].nullable) for name in names)
    built = [
        row for batch in staged_batches(cursor, _STAGED, (0,), columns=columns) for row in batch.to_pylist()
    ]
    assert built == _reference(cursor, names)
    assert [(row["correlation_id"], row["reply_to_address"]) for row in built] == [
        ("c-1", None),
        (None, "replies@db"),
    ]
