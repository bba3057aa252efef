"""Queue addresses in the reference transport's canonical forms: ``table@[schema]@[catalog]`` (its SQL
Server transport, and this package on every engine) and ``"schema"."table"`` (its PostgreSQL transport).

The table part is everything up to the first ``@`` and is never quoted (it may hold spaces, ``.``, ``[`` and
``]``). Schema and catalog are either bare or bracket-delimited with ``]`` doubled; only the bracketed form
may contain ``@``. An empty schema in front of a catalog is written ``@[]``. Parsing follows the reference
scan: a part ends at the first ``@`` that is outside brackets, where "outside" means the part is bare or an
odd number of ``]`` has been seen since its opening ``[``.

The reference's PostgreSQL transport (NServiceBus.Transport.PostgreSql, Particular/NServiceBus.SqlServer
214c4e8f, ``Addressing/QueueAddress.cs`` and ``CanonicalQueueAddress.cs``) writes every address it stores
or sends (subscription rows, ``NServiceBus.ReplyToAddress``, ``NServiceBus.FailedQ``) as both parts
double-quoted, ``"`` doubled inside, joined by a dot: ``"public"."billing"``. Its parser splits at the
first dot outside quotes and unquotes each part; a part left empty means the default schema. An address
that is exactly that form is read that way here, a schema part and a table part each quoted
(``"public"."billing"``) or the table alone (``"billing"``); any other text is this package's form, so a
dot in an unquoted name stays part of the table (``Sales.Delayed``), as on SQL Server. A table whose name
is itself in the quoted form is written with an empty schema part (``"x"@[]``), which reads back the same.

Engine rules (identifier length, whether schemas or catalogs exist) are checked by each dialect; this module
only rejects what no engine can take. Filling in the catalog (the transport's current database, for the
addresses SQL Server headers carry) is the transport's job: see ``Transport.canonical``.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

from .errors import InvalidQueueName

__all__ = ["QueueAddress"]


def _check_characters(kind: str, value: str) -> None:
    if not value or not value.strip():
        raise InvalidQueueName(f"{kind} name is empty or only white space")
    for position, char in enumerate(value):
        category = unicodedata.category(char)
        if category == "Cc":
            raise InvalidQueueName(
                f"{kind} name {value!r} contains the control character U+{ord(char):04X} at position "
                f"{position}; names may not contain NUL, line breaks or other control characters"
            )
        if category == "Cs":
            raise InvalidQueueName(
                f"{kind} name {value!r} contains a lone surrogate at position {position}; "
                "it is not valid Unicode text"
            )


# A double-quoted identifier, ``"`` doubled inside; the quoted form is one, or two joined by a dot.
_QUOTED_PART = r'"((?:[^"]|"")*)"'
_QUOTED_FORM = re.compile(rf"(?:{_QUOTED_PART}\.)?{_QUOTED_PART}", re.DOTALL)


def _double_quote(part: str) -> str:
    return '"' + part.replace('"', '""') + '"'


def _parse_quoted(address: str) -> tuple[str | None, str] | None:
    """(schema, table) of the reference's PostgreSQL form; None when the text is not in that form."""
    match = _QUOTED_FORM.fullmatch(address)
    if match is None:
        return None
    schema, table = (None if part is None else part.replace('""', '"') for part in match.groups())
    return (schema if schema and schema.strip() else None), table  # type: ignore[return-value]


def _quote(part: str) -> str:
    return "[" + part.replace("]", "]]") + "]"


def _unquote(part: str | None) -> str | None:
    if part is None:
        return None
    if len(part) >= 2 and part.startswith("[") and part.endswith("]"):
        part = part[1:-1].replace("]]", "]")
    return part if part.strip() else None


def _next_part(text: str) -> tuple[str, str]:
    """Split off the next schema or catalog part; return (part, rest after its separator)."""
    bracketed = text.startswith("[")
    closing_brackets = 0
    for index in range(1, len(text)):
        char = text[index]
        if char == "@" and (not bracketed or closing_brackets % 2 == 1):
            return text[:index], text[index + 1 :]
        if char == "]":
            closing_brackets += 1
    return text, ""


@dataclass(frozen=True)
class QueueAddress:
    """A queue's table, with an optional schema and catalog (database); ``str()`` gives the canonical form."""

    table: str
    schema: str | None = None
    catalog: str | None = None
    # Written as the reference's PostgreSQL transport writes addresses, "schema"."table" (read that way, or
    # made so by Transport.canonical on PostgreSQL); not part of the address's identity.
    quoted: bool = field(default=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.table, str):
            raise InvalidQueueName(f"queue name must be a string, not {type(self.table).__name__}")
        _check_characters("queue", self.table)
        if "@" in self.table:
            raise InvalidQueueName(
                f"queue table name {self.table!r} may not contain '@': it separates the table from the "
                "schema in an address (table@[schema]@[catalog])"
            )
        for kind, value in (("schema", self.schema), ("catalog", self.catalog)):
            if value is not None:
                if not isinstance(value, str):
                    raise InvalidQueueName(f"{kind} name must be a string, not {type(value).__name__}")
                _check_characters(kind, value)

    @classmethod
    def parse(cls, address: str | QueueAddress) -> QueueAddress:
        """Parse ``table@[schema]@[catalog]``, or the reference's PostgreSQL ``"schema"."table"``; raise
        :class:`InvalidQueueName` saying why if it is neither."""
        if isinstance(address, QueueAddress):
            return address
        if not isinstance(address, str):
            raise InvalidQueueName(f"queue address must be a string, not {type(address).__name__}")
        quoted = _parse_quoted(address) if address.startswith('"') else None
        if quoted is not None:
            return cls(quoted[1], quoted[0], quoted=True)
        first_at = address.find("@")
        if first_at == -1:
            return cls(address)
        table = address[:first_at]
        schema, rest = _next_part(address[first_at + 1 :])
        catalog = None
        if rest:
            catalog, rest = _next_part(rest)
        if rest:
            raise InvalidQueueName(
                f"queue address {address!r} has text after its catalog part ({rest!r}); "
                "the form is table@[schema]@[catalog], with '@' inside brackets only"
            )
        return cls(table, _unquote(schema), _unquote(catalog))

    def __str__(self) -> str:
        if self.quoted and self.catalog is None:
            if self.schema is None:
                return _double_quote(self.table)
            return f"{_double_quote(self.schema)}.{_double_quote(self.table)}"
        if self.schema is None and self.catalog is None and _QUOTED_FORM.fullmatch(self.table):
            return self.table + "@[]"  # it would read as the quoted form
        text = ""
        for part in (self.catalog, self.schema):
            if part is not None:
                text = "@" + _quote(part) + text
            elif text:
                text = "@[]" + text
        return self.table + text

    def with_table(self, table: str) -> QueueAddress:
        """The same schema and catalog with another table, e.g. an endpoint's error or delayed queue."""
        return QueueAddress(table, self.schema, self.catalog, quoted=self.quoted)

    def in_quoted_form(self) -> QueueAddress:
        """The same address, written as the reference's PostgreSQL transport writes: ``"schema"."table"``."""
        return QueueAddress(self.table, self.schema, self.catalog, quoted=True)
