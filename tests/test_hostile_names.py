"""Hostile queue names: each is handled safely (round trip in its own table) or refused with a clear error,
and no other table is ever touched."""

from __future__ import annotations

import pytest
import rawsql

from airflow_provider_sqlqueue.transport import InvalidQueueName, QueueNotFound, SqlQueueError, Transport

HOSTILE_NAMES = [
    "]",
    "a]b",
    "a]]b",
    "[x]",
    "'",
    "o'reilly",
    '"',
    'say "hi"',
    "x;--",
    "x]; DROP TABLE sentinel;--",
    "x'); DELETE FROM sentinel;--",
    'x"; DROP TABLE "sentinel',
    "a@b",
    "a@[b]@[c]",
    "@",
    "with space",
    "  leading and trailing  ",
    "/* comment */",
    "-- comment",
    "tab\tname",
    "new\nline",
    "nul\x00name",
    "",
    "   ",
    "x" * 300,
    "\uff33\uff25\uff2c\uff25\uff23\uff34",  # full-width SELECT
    "s\u0435ntinel",  # Cyrillic ie: a look-alike of the sentinel table
    "名前",
    "😀",
    "%s",
    "?",
    "$1",
    "\\",
    ".",
    "a.b.c",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=[repr(n)[:30] for n in HOSTILE_NAMES])
def test_hostile_name_round_trips_or_is_refused(transport: Transport, target, name: str) -> None:
    sentinel = transport.queue("sentinel")
    sentinel.create()
    sentinel.send(b"canary")
    before = rawsql.user_tables(transport, target.schema)
    try:
        queue = transport.queue(name)
    except InvalidQueueName as error:
        assert str(error), "the refusal says why"
    else:
        try:
            queue.create()
        except (QueueNotFound, SqlQueueError) as error:
            # e.g. 'a@b' names schema 'b', which does not exist: a clear error, nothing created
            assert "b" in str(error) or "schema" in str(error).lower() or "database" in str(error).lower()
        else:
            sent = queue.send(b"payload", headers={"name": name})
            with queue.receive() as batch:
                assert [m.id for m in batch] == [sent]
                assert batch[0].headers["name"] == name
            tables = rawsql.user_tables(transport, target.schema)
            if target.babelfish:  # its sys.tables reads names back in lower case
                assert queue.address.table.lower() in tables
            else:
                assert queue.address.table in tables
            queue.drop()
    assert rawsql.user_tables(transport, target.schema) == before
    assert [row[2] for row in rawsql.all_rows(sentinel)] == [b"canary"]
