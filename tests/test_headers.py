"""The header codec: the .NET-compatible JSON text, both slash forms, and clear errors for non-maps."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_sqlqueue.transport import HeaderFormatError
from airflow_provider_sqlqueue.transport.headers import (
    decode_headers,
    decode_headers_exact,
    edit_headers_text,
    encode_headers,
    format_time_span,
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


# Bytes .NET wrote: the approval files of the reference's DictionarySerializerTests, which NUnit's approval
# step records from the serializer's output on a running .NET (Particular/NServiceBus.SqlServer commit
# 214c4e8f06175186e356677546ea2d8e0f2b0c55, src/NServiceBus.Transport.SqlServer.UnitTests/ApprovalFiles/
# DictionarySerializerTests.*.approved.txt, from #1733 which moved the serializer to System.Text.Json with
# UnsafeRelaxedJsonEscaping; the approval tool's UTF-8 byte order mark left off).
CAPTURED_VECTORS = [
    (
        {"key1": "value1", "key2": "value2", "keyWithNull": None, "keyWithEmpty": ""},
        '{"key1":"value1","key2":"value2","keyWithNull":null,"keyWithEmpty":""}',
    ),
    (
        {
            "key with spaces": "value with spaces",
            "key/with/slashes": "value/with/slashes",
            "key\\with\\backslashes": "value\\with\\backslashes",
            'key"with"quotes': 'value"with"quotes',
            "key'with'apostrophes": "value'with'apostrophes",
            "key&with&ampersand": "value&with&ampersand",
            "key<with>angle": "value<with>angle",
        },
        '{"key with spaces":"value with spaces","key\\/with\\/slashes":"value\\/with\\/slashes",'
        '"key\\\\with\\\\backslashes":"value\\\\with\\\\backslashes","key\\"with\\"quotes":"value\\"with\\"quotes",'
        '"key\'with\'apostrophes":"value\'with\'apostrophes","key&with&ampersand":"value&with&ampersand",'
        '"key<with>angle":"value<with>angle"}',
    ),
    (
        {
            "ümlaut": "äöü",
            "emoji": "🚀",
            "japanese": "こんにちは",
            "arabic": "مرحبا",
            "newline": "line1\r\nline2",
            "tab": "value\twith\ttabs",
        },
        '{"ümlaut":"äöü","emoji":"\\uD83D\\uDE80","japanese":"こんにちは","arabic":"مرحبا",'
        '"newline":"line1\\r\\nline2","tab":"value\\twith\\ttabs"}',
    ),
]
# Derived, not captured (no .NET runtime here): what UnsafeRelaxedJsonEscaping writes by its rules. Its
# encoder writes a BMP character as-is only in the categories L*, M*, N*, P*, S* and Cf, or U+0020 (the
# defined-characters table built by dotnet/runtime's System.Text.Encodings.Web tools/GenDefinedCharList);
# every other one is \uXXXX in upper-case hex: the C1 controls U+007F-U+009F, the no-break space U+00A0,
# U+2028/U+2029, private use (U+E000) and non-characters (U+FFFF). The soft hyphen U+00AD is Cf: as-is.
DERIVED_VECTORS = [
    ({"k": "a\x7fb\x80c\x9fd"}, '{"k":"a\\u007Fb\\u0080c\\u009Fd"}'),
    ({"k": "no\xa0break soft\xadhyphen"}, '{"k":"no\\u00A0break soft\xadhyphen"}'),
    ({"k": "line\u2028para\u2029"}, '{"k":"line\\u2028para\\u2029"}'),
    ({"k": "\ue000\uffff\u3000"}, '{"k":"\\uE000\\uFFFF\\u3000"}'),
    ({"\x85key/": "\u2028"}, '{"\\u0085key\\/":"\\u2028"}'),
]


@pytest.mark.parametrize(("headers", "text"), VECTORS + CAPTURED_VECTORS + DERIVED_VECTORS)
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


# .NET's TimeSpan.ToString() (the constant "c" format, documented as [-][d.]hh:mm:ss[.fffffff]), which
# NServiceBus Core writes into NServiceBus.TimeToBeReceived (ApplyTimeToBeReceivedBehavior:
# timeToBeReceived.ToString()). Derived from the documented format, not captured from .NET.
@pytest.mark.parametrize(
    ("span", "text"),
    [
        (timedelta(seconds=30), "00:00:30"),
        (timedelta(minutes=10), "00:10:00"),
        (timedelta(hours=23, minutes=59, seconds=59), "23:59:59"),
        (timedelta(days=1, hours=2, minutes=3, seconds=4, microseconds=500_000), "1.02:03:04.5000000"),
        (timedelta(microseconds=1), "00:00:00.0000010"),
        (timedelta(days=365 * 50), "18250.00:00:00"),
        (timedelta(seconds=-90), "-00:01:30"),
    ],
)
def test_time_spans_are_written_as_dotnet_writes_them(span: timedelta, text: str) -> None:
    assert format_time_span(span) == text


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


def _outcome(decode, text):  # type: ignore[no-untyped-def]
    try:
        return "map", list(decode(text).items())
    except HeaderFormatError as error:
        return "refused", str(error)


_json_piece = st.sampled_from(
    ['{', '}', '"', ':', ',', ' ', '\\', '\\"', '\\u', 'd800', '00e9', 'null', '1', '[]', '{}', 'a', 'é',
     '\n', '\x00', 'NaN', '\ud800']
)  # fmt: skip


@given(
    st.one_of(
        st.text(max_size=60),
        st.lists(_json_piece, max_size=30).map("".join),
        st.dictionaries(st.text(max_size=6), st.one_of(st.none(), st.text(max_size=6), st.integers())).map(
            json.dumps
        ),
    )
)
def test_the_fast_decoder_agrees_with_the_standard_library(text: str) -> None:
    """msgspec reads the common case; every text must come out as json reads it, map or reason alike."""
    assert _outcome(decode_headers, text) == _outcome(decode_headers_exact, text)


@pytest.mark.parametrize(
    "text",
    ['{"a":"\\ud800"}', '{"\\udc00":"x"}', '{"a":"b","a":"c"}', ' {"a":"b"}\n', '{"a":"x\ty"}', ""],
)
def test_texts_msgspec_reads_differently_are_decided_by_json(text: str) -> None:
    assert _outcome(decode_headers, text) == _outcome(decode_headers_exact, text)


# ---- editing stored text as the reference's Dictionary<string, string> would --------------------------
STORED = '{"b":"1","a":"x/y","c":"Gr\\u00fc\\u00dfe","d":null}'


@pytest.mark.parametrize(
    ("changes", "removed", "expected"),
    [
        ({}, [], STORED),
        ({"z": "/"}, [], '{"b":"1","a":"x/y","c":"Gr\\u00fc\\u00dfe","d":null,"z":"\\/"}'),
        ({"a": "2"}, [], '{"b":"1","a":"2","c":"Gr\\u00fc\\u00dfe","d":null}'),
        ({"F": "q", "G": "r"}, ["a"], '{"b":"1","F":"q","c":"Gr\\u00fc\\u00dfe","d":null,"G":"r"}'),
        # two holes: the one made last is filled first (the dictionary's free list)
        ({"F": "q", "G": "r"}, ["a", "b"], '{"F":"q","G":"r","c":"Gr\\u00fc\\u00dfe","d":null}'),
        ({}, ["d", "missing"], '{"b":"1","a":"x/y","c":"Gr\\u00fc\\u00dfe"}'),
    ],
)
def test_editing_keeps_every_other_member_as_stored(changes: dict, removed: list, expected: str) -> None:
    assert edit_headers_text(STORED, changes, removed) == expected


def test_editing_keeps_whitespace_and_reads_empty_text_as_an_empty_map() -> None:
    spaced = '{ "a" : "1" , "b":"2" }'
    assert edit_headers_text(spaced, {"c": "3", "a": "9"}) == '{ "a":"9" , "b":"2","c":"3" }'
    assert edit_headers_text("", {"c": "3"}) == '{"c":"3"}'
    assert edit_headers_text("{}", {"c": "\u2028"}) == '{"c":"\\u2028"}'


def test_a_header_stored_twice_is_kept_once_with_its_last_value_in_its_first_place() -> None:
    assert edit_headers_text('{"k:1":"1","b":"2","k:1":"3"}', {"c": "4"}) == '{"k:1":"3","b":"2","c":"4"}'


@pytest.mark.parametrize("text", ["[]", '{"a":"1"', '{"a" "1"}', '{"a":"1",}', "<corrupted"])
def test_editing_refuses_text_that_is_not_a_header_object(text: str) -> None:
    with pytest.raises(HeaderFormatError, match="not a JSON object"):
        edit_headers_text(text, {"c": "3"})


_names = st.sampled_from(["a", "b", "c", "d/e", "f\u2028", "NServiceBus.MessageId"])


@given(
    st.dictionaries(_names, st.one_of(st.none(), _header_text), max_size=5),
    st.dictionaries(_names, st.one_of(st.none(), _header_text), max_size=3),
    st.lists(_names, max_size=3),
)
def test_editing_gives_the_map_the_reference_dictionary_would(
    headers: dict, changes: dict, removed: list
) -> None:
    text = encode_headers(headers)
    edited = edit_headers_text(text, changes, removed)
    expected = {key: value for key, value in headers.items() if key not in removed or key in changes}
    expected.update(changes)
    assert decode_headers(edited) == expected
    for key, value in headers.items():
        if key not in changes and key not in removed:
            assert encode_headers({key: value})[1:-1] in edited
