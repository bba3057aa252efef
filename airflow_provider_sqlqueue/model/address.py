"""Queue addresses in the reference transport's canonical form ``table@[schema]@[catalog]``.

The table part is everything up to the first ``@`` and is never quoted (it may hold spaces, ``.``, ``[`` and
``]``). Schema and catalog are either bare or bracket-delimited with ``]`` doubled; only the bracketed form
may contain ``@``. An empty schema in front of a catalog is written ``@[]``. Parsing follows the reference
scan: a part ends at the first ``@`` that is outside brackets, where "outside" means the part is bare or an
odd number of ``]`` has been seen since its opening ``[``.

Engine rules (identifier length, whether schemas or catalogs exist) are checked by each dialect; this module
only rejects what no engine can take. Filling in the catalog (the transport's current database, for the
addresses SQL Server headers carry) is the transport's job: see ``Transport.canonical``.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

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
        """Parse ``table@[schema]@[catalog]``; raise :class:`InvalidQueueName` saying why if it is not one."""
        if isinstance(address, QueueAddress):
            return address
        if not isinstance(address, str):
            raise InvalidQueueName(f"queue address must be a string, not {type(address).__name__}")
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
        text = ""
        for part in (self.catalog, self.schema):
            if part is not None:
                text = "@" + _quote(part) + text
            elif text:
                text = "@[]" + text
        return self.table + text

    def with_table(self, table: str) -> QueueAddress:
        """The same schema and catalog with another table, e.g. an endpoint's error or delayed queue."""
        return QueueAddress(table, self.schema, self.catalog)
