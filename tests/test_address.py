"""Queue addresses: the reference's parse and format cases, validation, engine limits, and properties."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_sqlqueue.dialects import get_dialect
from airflow_provider_sqlqueue.transport import InvalidQueueName, QueueAddress

PARSE_CASES = [
    ("my.table", "my.table", None, None),
    ("my.table@[my.schema]", "my.table", "my.schema", None),
    ("my.table@[my.sch@ma]", "my.table", "my.sch@ma", None),
    ("my.table@[my.sch[[]ma]", "my.table", "my.sch[[]ma", None),
    ("my.table@my.schema", "my.table", "my.schema", None),
    ("my.table@[my.schema]@[my.catalog]", "my.table", "my.schema", "my.catalog"),
    ("my.table@[my.schema]@[my.c@talog]", "my.table", "my.schema", "my.c@talog"),
    ("my.table@[my.schema]@[my.c[[]talog]", "my.table", "my.schema", "my.c[[]talog"),
    ("my.table@[my.schema]@my.catalog", "my.table", "my.schema", "my.catalog"),
    ("my.table@my.schema@my.catalog", "my.table", "my.schema", "my.catalog"),
    ("my.table@[]@[my.catalog]", "my.table", None, "my.catalog"),
    ("my.table@[]@my.catalog", "my.table", None, "my.catalog"),
    ("my.table@my]schema", "my.table", "my]schema", None),
    ("my.table@my]]schema", "my.table", "my]]schema", None),
    ("my.table@[my]]schema]", "my.table", "my]schema", None),
    ("my.table@my[schema", "my.table", "my[schema", None),
    ("orders@[sales]@[erp]", "orders", "sales", "erp"),
    ("t@[db@]@[n service.bus&#]", "t", "db@", "n service.bus&#"),
    ("my table]x", "my table]x", None, None),
]


@pytest.mark.parametrize(("text", "table", "schema", "catalog"), PARSE_CASES)
def test_parse_follows_the_reference(text: str, table: str, schema: str | None, catalog: str | None) -> None:
    address = QueueAddress.parse(text)
    assert (address.table, address.schema, address.catalog) == (table, schema, catalog)


FORMAT_CASES = [
    (("my.table", None, None), "my.table"),
    (("my.table", "my.schema", None), "my.table@[my.schema]"),
    (("my.table", "my.schema", "my.catalog"), "my.table@[my.schema]@[my.catalog]"),
    (("my.table", None, "my.catalog"), "my.table@[]@[my.catalog]"),
    (("t", "a]b", None), "t@[a]]b]"),
    (("t", "db@", "n service.bus&#"), "t@[db@]@[n service.bus&#]"),
]


@pytest.mark.parametrize(("parts", "text"), FORMAT_CASES)
def test_format_follows_the_reference(parts: tuple[str, str | None, str | None], text: str) -> None:
    address = QueueAddress(*parts)
    assert str(address) == text
    assert QueueAddress.parse(text) == address


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("bad\x00name", "U+0000"),
        ("line\nbreak", "U+000A"),
        ("tab\there", "U+0009"),
        ("t@[s]@[c]@extra", "after its catalog"),
        ("t@[s\x07]", "U+0007"),
        ("lone\ud800", "surrogate"),
    ],
)
def test_invalid_addresses_say_why(text: str, reason: str) -> None:
    with pytest.raises(InvalidQueueName, match=re.escape(reason)):
        QueueAddress.parse(text)


def test_table_may_not_contain_at_sign() -> None:
    with pytest.raises(InvalidQueueName, match="may not contain '@'"):
        QueueAddress("a@b")


def test_non_string_is_rejected() -> None:
    with pytest.raises(InvalidQueueName, match="must be a string"):
        QueueAddress.parse(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("engine", "limit", "schema"),
    [("sqlserver", 128, "dbo"), ("postgresql", 63, "public"), ("sqlite", 128, None)],
)
def test_engine_identifier_limits_and_default_schema(engine: str, limit: int, schema: str | None) -> None:
    dialect = get_dialect(engine)
    assert dialect.resolve(QueueAddress("q")).schema == schema
    assert dialect.resolve(QueueAddress("x" * limit)).table == "x" * limit
    with pytest.raises(InvalidQueueName, match=f"at most {limit}"):
        dialect.resolve(QueueAddress("x" * (limit + 1)))
    with pytest.raises(InvalidQueueName, match=f"at most {limit}"):
        dialect.resolve(QueueAddress("x" * 300))


def test_postgres_limit_counts_bytes_not_characters() -> None:
    dialect = get_dialect("postgresql")
    dialect.resolve(QueueAddress("é" * 31))  # 62 bytes
    with pytest.raises(InvalidQueueName, match="bytes"):
        dialect.resolve(QueueAddress("é" * 32))  # 64 bytes


def test_catalog_rules_per_engine() -> None:
    with pytest.raises(InvalidQueueName, match="SQLite has none"):
        get_dialect("sqlite").resolve(QueueAddress("q", None, "db"))
    with pytest.raises(InvalidQueueName, match="another database"):
        get_dialect("postgresql").resolve(QueueAddress("q", "s", "other"), current_catalog="mine")
    assert get_dialect("postgresql").resolve(QueueAddress("q", "s", "mine"), current_catalog="mine")
    assert get_dialect("sqlserver").resolve(QueueAddress("q", None, "erp")).catalog == "erp"


def test_derived_object_names_stay_within_limits() -> None:
    dialect = get_dialect("postgresql")
    long_name = dialect.resolve(QueueAddress("é" * 31))
    name = dialect.object_name(long_name, "RowVersion")
    assert len(name.encode()) <= 63
    other = dialect.object_name(dialect.resolve(QueueAddress("é" * 30 + "a")), "RowVersion")
    assert other != name


_name_chars = st.characters(blacklist_categories=("Cc", "Cs"))
_table = st.text(_name_chars, min_size=1, max_size=30).filter(lambda t: t.strip() and "@" not in t)
_part = st.one_of(st.none(), st.text(_name_chars, min_size=1, max_size=30).filter(lambda t: t.strip()))


# The reference's PostgreSQL transport (214c4e8f, Addressing/QueueAddress.cs): split at the first dot outside
# double quotes, each part unquoted ('""' -> '"'), an empty part meaning the default schema.
QUOTED_CASES = [
    ('"public"."billing"', "billing", "public"),
    ('"billing"', "billing", None),
    ('"my ""odd"" schema"."my.table"', "my.table", 'my "odd" schema'),
    ('"s.x"."t"', "t", "s.x"),
    ('""."billing"', "billing", None),
    ('"sch@ma"."Billing"', "Billing", "sch@ma"),
]


@pytest.mark.parametrize(("text", "table", "schema"), QUOTED_CASES)
def test_the_reference_postgresql_form_is_read(text: str, table: str, schema: str | None) -> None:
    address = QueueAddress.parse(text)
    assert (address.table, address.schema, address.catalog) == (table, schema, None)
    assert address == QueueAddress(table, schema)  # the same queue as in this package's form
    assert QueueAddress.parse(str(address)) == address


@pytest.mark.parametrize(
    ("parts", "text"),
    [
        (("billing", "public"), '"public"."billing"'),
        (("billing", None), '"billing"'),
        (('a "b".c', 'x"y'), '"x""y"."a ""b"".c"'),
    ],
)
def test_the_quoted_form_is_written_as_the_reference_writes_it(
    parts: tuple[str, str | None], text: str
) -> None:
    address = QueueAddress(*parts).in_quoted_form()
    assert str(address) == text
    assert str(address.with_table("other")).endswith('"other"')


@pytest.mark.parametrize(
    ("text", "table", "schema"),
    [
        ("public.billing", "public.billing", None),  # unquoted: a dot belongs to the table, as on SQL Server
        ('public."billing"', 'public."billing"', None),
        ('"a"."b"."c"', '"a"."b"."c"', None),
        ('"x"@[dbo]', '"x"', "dbo"),
        ('"x"@[]', '"x"', None),
    ],
)
def test_text_not_exactly_in_the_quoted_form_is_this_packages_form(
    text: str, table: str, schema: str | None
) -> None:
    address = QueueAddress.parse(text)
    assert (address.table, address.schema) == (table, schema)
    assert QueueAddress.parse(str(address)) == address


def test_a_table_named_like_the_quoted_form_is_written_so_that_it_reads_back() -> None:
    address = QueueAddress('"public"."billing"')
    assert str(address) == '"public"."billing"@[]'
    assert QueueAddress.parse(str(address)) == address


@given(_table, _part, _part)
def test_format_then_parse_round_trips(table: str, schema: str | None, catalog: str | None) -> None:
    address = QueueAddress(table, schema, catalog)
    assert QueueAddress.parse(str(address)) == address
    assert QueueAddress.parse(str(address.in_quoted_form())) == address


@given(st.text(max_size=60))
def test_parse_never_crashes(text: str) -> None:
    try:
        address = QueueAddress.parse(text)
    except InvalidQueueName as error:
        assert str(error)
    else:
        assert address.table


@pytest.mark.parametrize(
    ("engine", "variant", "query", "carries_catalog"),
    [
        ("sqlserver", None, "SELECT DB_NAME()", True),
        ("sqlserver", "babelfish", "SELECT DB_NAME()", True),
        ("postgresql", None, "SELECT current_database()", False),
        ("sqlite", None, None, False),
    ],
)
def test_each_engine_names_its_current_database_query_and_whether_addresses_carry_it(
    engine: str, variant: str | None, query: str | None, carries_catalog: bool
) -> None:
    """The reference writes ``table@[schema]@[catalog]`` on SQL Server and no catalog on PostgreSQL; the
    look-up needs no privilege (DB_NAME(), current_database()); SQLite has no catalog to look up."""
    dialect = get_dialect(engine, variant)
    assert dialect.optional_sql("current_catalog") == query
    assert dialect.addresses_carry_catalog is carries_catalog
