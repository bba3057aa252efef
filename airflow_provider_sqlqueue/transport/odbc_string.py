"""ODBC connection strings as the driver manager reads them, and values written so that it reads them back.

pyodbc hands a connection string to unixODBC as UTF-16 (``SQLDriverConnectW``). What follows was read in
unixODBC 2.3.11 (Debian 12's), ``DriverManager/SQLDriverConnectW.c`` (``__parse_connection_string_w``) and
``DriverManager/SQLDriverConnect.c`` (``__get_attr``, ``__append_pair``, ``__parse_connection_string_ex``,
``__handle_attr_extensions_cs``):

- before parsing, each UTF-16 unit is cut to its low byte (``unicode_to_ansi_copy`` without a connection,
  so without iconv): ``U+013B`` is read as ``;``, ``U+013D`` as ``=``, ``U+017B``/``U+017D`` as ``{``/``}``,
  and a unit whose low byte is 0 (``U+0100``) ends the string there;
- a pair starts after any run of white space and ``;``; its keyword is everything up to the next ``=``
  (``;`` included); a value in braces ends at the first ``}`` not followed by another (``}}`` is one
  ``}``), and whatever follows the closing brace starts the next pair, with no ``;`` needed; an unbraced
  value runs to the next ``;``;
- a keyword given twice keeps its first place and its last value, compared without case;
- the driver manager itself acts on ``DRIVER`` (a library path or an odbcinst.ini name), ``DSN`` and
  ``FILEDSN`` (which name the driver through a file), ``SAVEFILE`` (a file it writes) and ``DMEnvAttr``,
  ``DMConnAttr``, ``DMStmtAttr`` (attributes it sets, a trace file or translation library among them).

:func:`render_odbc` writes pairs so that this reading gives them back exactly, and refuses a value it cannot
write that way; :func:`driver_manager_refusal` says why a whole string, as the driver manager reads it, is
not one whose library the caller chose.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from ..model.errors import ConfigurationError

__all__ = [
    "DRIVER_MANAGER_KEYWORDS",
    "DRIVER_MANAGER_READ",
    "driver_manager_pairs",
    "driver_manager_raw_pairs",
    "driver_manager_refusal",
    "names_a_driver",
    "odbc_pairs",
    "odbc_value",
    "parse_odbc_string",
    "reduced",
    "render_odbc",
]

DRIVER_MANAGER_READ = "unixODBC 2.3.11"
# Keywords the driver manager acts on itself: it loads a library (DRIVER, or one a DSN or file DSN names),
# writes a file (SAVEFILE) or sets attributes of its own (a trace file, a translation library).
DRIVER_MANAGER_KEYWORDS = ("DRIVER", "DSN", "FILEDSN", "SAVEFILE", "DMENVATTR", "DMCONNATTR", "DMSTMTATTR")
_C_SPACE = " \t\n\v\f\r"  # isspace() in the C locale
_BRACED_WHEN = ";={}"
# A keyword is written as it is, never braced: one of these characters only.
_KEYWORD_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_ .-")


@dataclass(frozen=True)
class _Pair:
    key: str  # as the driver manager reads it (low bytes)
    value: str
    raw_key: str  # the same characters as the caller wrote them
    raw_value: str


def _units(text: str) -> list[int]:
    encoded = text.encode("utf-16-le", "surrogatepass")
    return [encoded[index] | encoded[index + 1] << 8 for index in range(0, len(encoded), 2)]


def _text(units: list[int]) -> str:
    return b"".join(unit.to_bytes(2, "little") for unit in units).decode("utf-16-le", "surrogatepass")


def reduced(text: str) -> str:
    """``text`` as the driver manager parses it: each UTF-16 unit cut to its low byte, up to the first 0."""
    low = bytes(unit & 0xFF for unit in _units(text))
    return low.split(b"\0", 1)[0].decode("latin-1")


def _upper(key: str) -> str:
    """A keyword as ``strcasecmp`` compares it: only ASCII letters fold."""
    return key.encode("latin-1").upper().decode("latin-1")


def _read(text: str) -> list[_Pair]:
    units = _units(text)
    low = [unit & 0xFF for unit in units]
    if 0 in low:
        end = low.index(0)
        units, low = units[:end], low[:end]
    chars = "".join(map(chr, low))
    pairs: list[_Pair] = []
    index, length = 0, len(chars)
    while True:
        while index < length and (chars[index] in _C_SPACE or chars[index] == ";"):
            index += 1
        equals = chars.find("=", index)
        if index >= length or equals == -1:
            return pairs
        key_start, index = index, equals + 1
        key = (key_start, equals)
        if index < length and chars[index] == "{":
            index += 1
            kept: list[int] = []
            while index < length and (chars[index] != "}" or chars[index + 1 : index + 2] == "}"):
                if chars[index] == "}":
                    index += 1
                kept.append(index)
                index += 1
            if index < length:
                index += 1  # the closing brace; what follows starts the next pair
        else:
            semicolon = chars.find(";", index)
            end = length if semicolon == -1 else semicolon
            kept = list(range(index, end))
            index = end
        pairs.append(
            _Pair(
                key=chars[key[0] : key[1]],
                value="".join(chars[at] for at in kept),
                raw_key=_text(units[key[0] : key[1]]),
                raw_value=_text([units[at] for at in kept]),
            )
        )


def driver_manager_pairs(text: str) -> list[tuple[str, str]]:
    """Every ``keyword=value`` of ``text`` as the driver manager reads it, in order, repeats kept."""
    return [(pair.key, pair.value) for pair in _read(text)]


def driver_manager_refusal(
    text: str, drivers: Collection[str], *, driver_required: bool = True
) -> str | None:
    """Why the driver manager, reading ``text``, would do more than load the library the caller chose (one
    of ``drivers``): a keyword it acts on itself (a DSN, a file, its own attributes), another or a second
    DRIVER, any keyword twice (the last one wins), or (``driver_required``) no DRIVER at all; None when it
    would not. A fragment the caller adds its own DRIVER to is checked with ``driver_required=False``."""
    chosen = {reduced(driver) for driver in drivers}
    seen: set[str] = set()
    for key, value in driver_manager_pairs(text):
        name = _upper(key)
        if name in seen:
            return f"sets {name}= twice as {DRIVER_MANAGER_READ} reads it (the last one wins)"
        seen.add(name)
        if name == "DRIVER" and value in chosen:
            continue
        if name in DRIVER_MANAGER_KEYWORDS:
            return f"sets {name}= as {DRIVER_MANAGER_READ}'s driver manager reads it"
    if driver_required and "DRIVER" not in seen:
        return f"names no DRIVER as {DRIVER_MANAGER_READ}'s driver manager reads it"
    return None


def names_a_driver(text: str) -> bool:
    """Whether ``text`` sets DRIVER, read either way (:func:`driver_manager_pairs`, :func:`odbc_pairs`)."""
    return any(_upper(key) == "DRIVER" for key, _ in driver_manager_pairs(text)) or any(
        key == "DRIVER" for key, _ in odbc_pairs(text)
    )


def odbc_value(value: str, what: str = "a value") -> str:
    """``value`` written as a connection string's value that the driver manager and the driver read back
    as it is: braced (``}`` doubled) where its reduced form holds ``;``, ``=``, ``{`` or ``}`` or starts or
    ends with white space. Refused (``what`` names the field, never the value) where no writing can hold it:
    a character the driver manager reads as ``}`` or as the string's end but the driver does not."""
    for unit in _units(value):
        if unit == 0 or (unit > 0xFF and unit & 0xFF in (0, ord("}"))):
            read_as = "the string's end" if unit & 0xFF == 0 else "'}'"
            raise ConfigurationError(
                f"{what} holds a character that {DRIVER_MANAGER_READ}'s ODBC driver manager reads as "
                f"{read_as} (it keeps only the low byte of each UTF-16 unit, so U+{unit:04X} would end the "
                "value early): no ODBC connection string can carry it; change it"
            )
    low = reduced(value)
    if any(char in low for char in _BRACED_WHEN) or low != low.strip(_C_SPACE) or value != value.strip():
        return "{" + value.replace("}", "}}") + "}"
    return value


def render_odbc(pairs: Iterable[tuple[str, str]], fields: Mapping[str, str] | None = None) -> str:
    """``KEY=value;...`` of ``pairs``, checked: the driver manager's reading (:func:`driver_manager_pairs`)
    and this package's (:func:`odbc_pairs`) of the string both give back exactly these pairs, or it is
    refused with the field (``fields[KEY]``, else the keyword) named."""
    wanted = [(str(key), str(value)) for key, value in pairs]
    names = fields or {}
    for key, _ in wanted:
        if not key or not set(key) <= _KEYWORD_CHARACTERS or key != key.strip():
            raise ConfigurationError(
                f"{names.get(key, 'an ODBC keyword')} is not a keyword an ODBC connection string can hold "
                "(letters, digits, '_', '.', '-' and inner spaces only)"
            )
    text = ";".join(
        f"{key}={odbc_value(value, names.get(key, f'the value of {key}'))}" for key, value in wanted
    )
    read = driver_manager_pairs(text)
    ours = odbc_pairs(text)
    for index, (key, value) in enumerate(wanted):
        if (
            index >= len(read)
            or read[index] != (reduced(key), reduced(value))
            or index >= len(ours)
            or ours[index] != (key.upper(), value)
        ):
            raise ConfigurationError(
                f"{names.get(key, f'the value of {key}')} would not reach the ODBC driver manager as "
                f"written ({DRIVER_MANAGER_READ} reads the connection string differently): change it"
            )
    if len(read) != len(wanted) or len(ours) != len(wanted):
        raise ConfigurationError(
            f"the ODBC connection string would hold other pairs than {', '.join(k for k, _ in wanted)} "
            f"as {DRIVER_MANAGER_READ} reads it: change the values"
        )
    return text


def driver_manager_raw_pairs(text: str) -> list[tuple[str, str]]:
    """The pairs of :func:`driver_manager_pairs`, each as the caller wrote its characters: what a string
    re-written with one keyword replaced keeps of the rest."""
    return [(pair.raw_key, pair.raw_value) for pair in _read(text)]


def odbc_pairs(text: str) -> list[tuple[str, str]]:
    """Every ``KEY=value`` of an ODBC connection string in order, keys upper-cased, values stripped,
    duplicates kept, read as the drivers read the characters themselves (no reduction to bytes).

    A pair ends at the first ``;`` outside braces, a key at its ``=``; a braced value may hold ``;`` and
    ``}}`` stands for ``}``. A fragment without ``=`` is no pair, so ``A;DRIVER=x`` yields ``DRIVER``.
    Security checks read a string both this way and as the driver manager does
    (:func:`driver_manager_pairs`), and refuse what either finds.
    """
    pairs: list[tuple[str, str]] = []
    index = 0
    length = len(text)
    while index < length:
        semicolon = text.find(";", index)
        equals = text.find("=", index)
        if equals == -1:
            break
        if semicolon != -1 and semicolon < equals:  # a fragment without a value
            index = semicolon + 1
            continue
        key = text[index:equals].strip().upper()
        index = equals + 1
        if index < length and text[index] == "{":
            value_chars = []
            index += 1
            while index < length:
                if text[index] == "}":
                    if index + 1 < length and text[index + 1] == "}":
                        value_chars.append("}")
                        index += 2
                        continue
                    index += 1
                    break
                value_chars.append(text[index])
                index += 1
            value = "".join(value_chars)
            semicolon = text.find(";", index)
            index = length if semicolon == -1 else semicolon + 1
        else:
            semicolon = text.find(";", index)
            end = length if semicolon == -1 else semicolon
            value = text[index:end].strip()
            index = end + 1
        if key:
            pairs.append((key, value))
    return pairs


def parse_odbc_string(text: str) -> dict[str, str]:
    """Split ``KEY=value;KEY={va;lue}`` into a dict with upper-case keys (braced values may hold ';')."""
    return dict(odbc_pairs(text))
