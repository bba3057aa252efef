"""The header codec: the .NET-compatible JSON text, both slash forms, and clear errors for non-maps."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_sqlqueue.transport import HeaderFormatError
from airflow_provider_sqlqueue.transport.headers import (
    decode_headers,
    encode_headers,
    format_timestamp,
    parse_timestamp,
)

VECTORS = [
    ({}, "{}"),
    ({"key1": "value1", "keyWithNull": None}, '{"key1":"value1","keyWithNull":null}'),
    ({"a/b": "c/d"}, '{"a\\/b":"c\\/d"}'),
    ({"k": "äöü 漢字"}, '{"k":"äöü 漢字"}'),
    ({"k": "😀"}, '{"k":"\\uD83D\\uDE00"}'),
    ({"k": "line\nbreak\ttab\x1f"}, '{"k":"line\\nbreak\\ttab\\u001F"}'),
    ({"k": 'quote " back \\ slash'}, '{"k":"quote \\" back \\\\ slash"}'),
    ({"k": "\\u0041"}, '{"k":"\\\\u0041"}'),
]


@pytest.mark.parametrize(("headers", "text"), VECTORS)
def test_encoding_matches_the_reference_bytes(headers: dict, text: str) -> None:
    assert encode_headers(headers) == text
    assert decode_headers(text) == headers


def test_both_slash_forms_are_read() -> None:
    assert decode_headers('{"url":"http://x/y"}') == {"url": "http://x/y"}
    assert decode_headers('{"url":"http:\\/\\/x\\/y"}') == {"url": "http://x/y"}


def test_empty_text_is_an_empty_map() -> None:
    assert decode_headers("") == {}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (None, "NULL"),
        ("<corrupted headers", "not valid JSON"),
        ('["a", "b"]', "JSON object"),
        ('{"a": 1}', "non-string"),
        ('{"a": {"b": "c"}}', "non-string"),
        ('{"a": "b"', "not valid JSON"),
        (b"\xff\xfe", "UTF-8"),
        # the short path of decode_headers: text after one JSON value, a bare word, a later non-string value
        ('{"a":"b"} x', "not valid JSON"),
        ("x", "not valid JSON"),
        ('{"a":"b","n":1}', "'n' has a non-string"),
        (b"\xff", "UTF-8"),
    ],
)
def test_non_maps_are_refused_with_the_reason(text: str | bytes | None, reason: str) -> None:
    with pytest.raises(HeaderFormatError, match=reason):
        decode_headers(text)


def test_encoding_refuses_non_string_values() -> None:
    with pytest.raises(HeaderFormatError, match="string or None"):
        encode_headers({"count": 3})  # type: ignore[dict-item]
    with pytest.raises(HeaderFormatError, match="names must be strings"):
        encode_headers({3: "x"})  # type: ignore[dict-item]
    with pytest.raises(HeaderFormatError, match="surrogate"):
        encode_headers({"k": "\ud800"})


def test_timestamp_format() -> None:
    moment = datetime(2026, 11, 21, 23, 5, 7, 123456, tzinfo=timezone.utc)
    assert format_timestamp(moment) == "2026-11-21 23:05:07:123456 Z"
    assert parse_timestamp("2026-11-21 23:05:07:123456 Z") == moment


_header_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@given(st.dictionaries(_header_text, st.one_of(st.none(), _header_text), max_size=8))
def test_codec_round_trips_any_header_map(headers: dict) -> None:
    text = encode_headers(headers)
    assert "/" not in text.replace("\\/", "")
    assert not any(ord(char) < 0x20 or 0xD800 <= ord(char) <= 0xDFFF for char in text)
    assert all(ord(char) < 0x10000 for char in text)
    assert decode_headers(text) == headers
    assert json.loads(text) == headers


@given(st.text(max_size=80))
def test_decoding_never_crashes(text: str) -> None:
    try:
        value = decode_headers(text)
    except HeaderFormatError:
        return
    assert isinstance(value, dict)
