"""Static checks shared by the T-SQL tests: which dialect classes render T-SQL, a second grammar, allow-lists.

Neither SQL Server nor sqlglot can be trusted to judge the statements here: no SQL Server runs where the
suite is developed, and sqlglot's T-SQL reader accepts invalid T-SQL (``DELETE ... ORDER BY``, a made-up
table hint, the type ``uniqueidentifer``, the datepart ``milisecond``). So every statement is also

- parsed by **sqlfluff's ``tsql`` dialect**, an independent grammar, which must leave no unparsable
  section and must find as many statements as sqlglot (``INSERT ... RETURNING x`` is one statement to
  sqlglot and two to sqlfluff, the second a call of a procedure named ``RETURNING``);
- held to **allow-lists** on both parse trees: table hints, data types, dateparts, functions, procedures
  and statement kinds. Each list holds only what SQL Server accepts among what the package uses; anything
  else fails with a message naming the offending token. Adding a word to a list is a reviewed change: check
  it against SQL Server's documentation (and the reference's statements), not against the code.

sqlfluff does not read the driver's ``?`` parameters, so they are rewritten to ``@p1``, ``@p2``... (outside
bracketed names and string literals) before sqlfluff parses; sqlglot reads the statement as executed.
"""

from __future__ import annotations

import difflib
import importlib
import os
import pkgutil
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import sqlglot
from sqlfluff.core import FluffConfig, Linter
from sqlfluff.core.parser import BaseSegment
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError

import airflow_provider_sqlqueue.dialects as dialects_package
from airflow_provider_sqlqueue.dialects.sqlserver import SqlServerDialect

GOLDEN_ROOT = Path(__file__).parent / "golden"
UPDATE_GOLDEN = os.environ.get("SQLQUEUE_UPDATE_GOLDEN") == "1"
PACKAGE = "airflow_provider_sqlqueue."

# ---- allow-lists: what SQL Server accepts, among what the package uses --------------------------------
# Table hints (FROM t WITH (...)). NOLOCK and READUNCOMMITTED are valid T-SQL but dirty reads: not listed.
# TABLOCK: the reference's subscribe (MERGE ... WITH (HOLDLOCK, TABLOCK)); SERIALIZABLE: Babelfish's
# form of it (UPDATE and INSERT where missing, which SQL Server would hold the key range for).
TABLE_HINTS = frozenset(
    {"UPDLOCK", "READPAST", "ROWLOCK", "READCOMMITTEDLOCK", "HOLDLOCK", "TABLOCK", "SERIALIZABLE"}
)
# Data types, as written in DDL and CAST.
DATA_TYPES = frozenset(
    {
        "uniqueidentifier",
        "varchar",
        "nvarchar",
        "varbinary",
        "bit",
        "datetime",
        "datetime2",
        "bigint",
        "int",
        "smallint",
        "float",
        "real",
        "date",
        "numeric",
    }
)
# Dateparts of DATEADD and DATEDIFF (SQL Server's full names; the package writes no abbreviations).
DATEPARTS = frozenset({"millisecond", "second"})
DATEPART_FUNCTIONS = frozenset({"DATEADD", "DATEDIFF", "DATEDIFF_BIG", "DATEPART", "DATENAME"})
# Functions, upper-cased. CAST is a keyword to sqlfluff but a function by its syntax.
FUNCTIONS = frozenset(
    {
        "GETUTCDATE",
        "SYSUTCDATETIME",
        "DATEADD",
        "DATEDIFF",
        "OBJECT_ID",
        "COL_LENGTH",
        "ISNULL",
        "DATALENGTH",
        "COALESCE",
        "CAST",
        "COUNT",
        "COUNT_BIG",
        "SUM",
        "MAX",
        "MIN",
        "QUOTENAME",
        "DB_NAME",
        "SERVERPROPERTY",
        "NEWID",
    }
)
# Stored procedures a statement may EXEC.
PROCEDURES = frozenset({"sp_getapplock", "sp_releaseapplock"})
# System variables (@@...): the creation's open_transaction reads @@TRANCOUNT; counted updates and the purge
# @@ROWCOUNT.
SYSTEM_VARIABLES = frozenset({"@@TRANCOUNT", "@@ROWCOUNT"})
# sqlfluff's names of the statements the package writes (a batch-level IF wraps one of them).
STATEMENT_KINDS = frozenset(
    {
        "select_statement",
        "insert_statement",
        "merge_statement",
        "update_statement",
        "delete_statement",
        "with_compound_statement",
        "create_table_statement",
        "create_index_statement",
        "alter_table_statement",
        "drop_table_statement",
        "drop_index_statement",
        "declare_segment",
        "execute_script_statement",
        "set_segment",
        "if_then_statement",
    }
)
# sqlfluff's names of the statements an IF (or its BEGIN ... END block) may hold: the creation's
# open_transaction opens and closes a transaction level and sets a flag; the bridge creates a table if it is
# missing.
INNER_STATEMENT_KINDS = frozenset(
    {"begin_end_block", "transaction_statement", "set_local_variable_segment", "create_table_statement"}
)


class StaticCheckFailure(AssertionError):
    """A statement failed one of the static checks."""


def require(condition: object, message: str) -> None:
    if not condition:
        raise StaticCheckFailure(message)


# ---- which classes render T-SQL -----------------------------------------------------------------------
@cache
def _import_dialect_modules() -> None:
    """Import every module of the dialects package, so that a subclass in a module of its own is known."""
    for module in pkgutil.iter_modules(dialects_package.__path__, dialects_package.__name__ + "."):
        importlib.import_module(module.name)


def tsql_dialect_classes() -> list[type[SqlServerDialect]]:
    """SqlServerDialect, then every subclass of it (recursively) that the package defines, by name."""
    _import_dialect_modules()
    found: list[type[SqlServerDialect]] = []
    pending = [SqlServerDialect]
    while pending:
        cls = pending.pop()
        if cls not in found and (cls is SqlServerDialect or cls.__module__.startswith(PACKAGE)):
            found.append(cls)
        pending.extend(cls.__subclasses__())
    return [SqlServerDialect, *sorted(found[1:], key=lambda cls: (cls.__module__, cls.__qualname__))]


def variant_name(cls: type[SqlServerDialect]) -> str:
    """The golden folder of a dialect class: ``sqlserver`` for the reference, else from the class name
    (``BabelfishDialect`` -> ``babelfish``)."""
    if cls is SqlServerDialect:
        return "sqlserver"
    stem = cls.__name__.removesuffix("Dialect") or cls.__name__
    return re.sub(r"(?<!^)(?=[A-Z])", "_", stem).lower()


# ---- golden files -------------------------------------------------------------------------------------
def compare_golden(path: Path, rendered: str) -> None:
    """Equal to the golden file, or (``SQLQUEUE_UPDATE_GOLDEN=1``) written to it."""
    if UPDATE_GOLDEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered, encoding="utf-8", newline="\n")
        return
    relative = path.relative_to(GOLDEN_ROOT.parent)
    assert path.exists(), f"{relative} is missing: run with SQLQUEUE_UPDATE_GOLDEN=1, then review it"
    golden = path.read_text(encoding="utf-8")
    if rendered != golden:
        diff = "".join(
            difflib.unified_diff(
                golden.splitlines(keepends=True),
                rendered.splitlines(keepends=True),
                str(relative),
                "rendered",
            )
        )
        pytest.fail(f"statements differ from the golden file (SQLQUEUE_UPDATE_GOLDEN=1 rewrites it):\n{diff}")


def stale_golden_files(folder: Path, expected: set[str]) -> list[str]:
    """Golden files in ``folder`` without a case; deleted under ``SQLQUEUE_UPDATE_GOLDEN=1``."""
    stale = sorted({path.stem for path in folder.glob("*.sql")} - expected)
    if UPDATE_GOLDEN:
        for name in stale:
            (folder / f"{name}.sql").unlink()
        return []
    return stale


# ---- the second grammar: sqlfluff ---------------------------------------------------------------------
# A bracketed name (']' doubled inside), a string literal ('' inside), or a '?' parameter.
_TOKENS = re.compile(r"\[(?:[^\]]|\]\])*\]|N?'(?:[^']|'')*'|\?")


def for_sqlfluff(sql: str) -> str:
    """The statement as sqlfluff can lex it.

    Each ``?`` parameter becomes ``@p1``, ``@p2``...; each bracketed name that holds a bracket
    (``[my[table]``, ``[my]]table]``: valid T-SQL, but sqlfluff's T-SQL lexer takes no bracket inside a
    bracketed name) becomes a stand-in ``[name_1]``. The names' quoting is held by sqlglot and by the
    identifier checks; sqlfluff judges the grammar around them.
    """
    parameters = iter(range(1, 1_000_000))
    names = iter(range(1, 1_000_000))

    def replace(match: re.Match[str]) -> str:
        token = match.group()
        if token == "?":
            return f"@p{next(parameters)}"
        if token.startswith("[") and ("[" in token[1:-1] or "]" in token[1:-1]):
            return f"[name_{next(names)}]"
        return token

    return _TOKENS.sub(replace, sql)


def parameter_count(sql: str) -> int:
    return sum(1 for match in _TOKENS.finditer(sql) if match.group() == "?")


@cache
def _linter() -> Linter:
    return Linter(config=FluffConfig(overrides={"dialect": "tsql"}))


@dataclass(frozen=True)
class FluffTree:
    sql: str  # the text sqlfluff parsed (parameters named)
    tree: BaseSegment

    def find(self, *types: str) -> Iterator[BaseSegment]:
        return self.tree.recursive_crawl(*types)

    def statements(self) -> list[BaseSegment]:
        """The top-level statements; an IF's inner statement is part of the IF."""
        found = []
        for batch in self.tree.recursive_crawl("batch", recurse_into=False):
            for statement in batch.recursive_crawl("statement", recurse_into=False):
                found.append(statement)
        return found


def parse_sqlfluff(sql: str) -> FluffTree:
    """Parse with sqlfluff's T-SQL grammar; a parse error or any unparsable section fails."""
    text = for_sqlfluff(sql)
    parsed = _linter().parse_string(text)
    problems = [violation.desc() for violation in parsed.violations]
    require(parsed.tree is not None and not problems, f"sqlfluff (tsql) cannot parse {problems}:\n{sql}")
    tree = FluffTree(text, parsed.tree)
    unparsable = [segment.raw for segment in tree.find("unparsable")]
    require(not unparsable, f"sqlfluff (tsql) found unparsable sections {unparsable} in:\n{sql}")
    return tree


def _code(segment: BaseSegment) -> list[BaseSegment]:
    return [child for child in segment.segments if child.is_code and not child.is_meta]


def _name(raw: str) -> str:
    return raw[1:-1].replace("]]", "]") if raw.startswith("[") else raw


def check_sqlfluff_allow_lists(tree: FluffTree, sql: str) -> None:
    """Statement kinds, procedures, table hints, data types, functions and dateparts on sqlfluff's tree."""
    for statement in tree.statements():
        kinds = [child.get_type() for child in _code(statement)]
        require(
            len(kinds) == 1 and kinds[0] in STATEMENT_KINDS,
            f"statement kind {kinds} is not one the package writes (sqlfluff) in:\n{sql}",
        )
    for block in tree.find("if_then_statement", "begin_end_block"):
        for inner in block.recursive_crawl("statement", recurse_into=False):
            if inner is block:
                continue
            kinds = [child.get_type() for child in _code(inner)]
            require(
                len(kinds) == 1 and kinds[0] in INNER_STATEMENT_KINDS,
                f"statement kind {kinds} inside IF or BEGIN ... END is not one the package writes in:\n{sql}",
            )
    for variable in tree.find("system_variable"):
        require(
            variable.raw.upper() in SYSTEM_VARIABLES,
            f"system variable {variable.raw!r} is not allowed (sqlfluff) in:\n{sql}",
        )
    for execute in tree.find("execute_script_statement"):
        procedures = [_name(ref.raw) for ref in execute.recursive_crawl("object_reference")][:1]
        require(
            procedures and procedures[0] in PROCEDURES,
            f"procedure {procedures} is not allowed (sqlfluff) in:\n{sql}",
        )
    for hint in tree.find("query_hint_segment"):
        require(
            hint.raw.upper() in TABLE_HINTS, f"table hint {hint.raw!r} is not allowed (sqlfluff) in:\n{sql}"
        )
    for data_type in tree.find("data_type"):
        name = _name(_code(data_type)[0].raw).lower()
        require(name in DATA_TYPES, f"data type {name!r} is not allowed (sqlfluff) in:\n{sql}")
    for function in tree.find("function"):
        [name_segment] = [child for child in _code(function) if child.is_type("function_name")]
        name = _name(name_segment.raw).upper()
        require(name in FUNCTIONS, f"function {name!r} is not allowed (sqlfluff) in:\n{sql}")
        if name in DATEPART_FUNCTIONS:
            arguments = next(function.recursive_crawl("bracketed"))
            first = next(c for c in _code(arguments) if not c.is_type("start_bracket")).raw.lower()
            require(first in DATEPARTS, f"datepart {first!r} is not allowed (sqlfluff) in:\n{sql}")


# ---- the same lists on sqlglot's tree -----------------------------------------------------------------
_NAME = r"\[(?:[^\]]|\]\])*\]"
_DELETE_OUTPUT_WHERE = re.compile(
    rf"DELETE FROM (?P<table>(?:{_NAME}\.)*{_NAME})(?P<hints> WITH \([A-Z, ]+\))? (?P<output>OUTPUT .+?) "
    r"(?P<where>WHERE .*)",
    re.DOTALL,
)
_OUTPUT_INTO = re.compile(rf" INTO (?:{_NAME}\.)*{_NAME} \([^()]*\)$")
# Words that open (BEGIN of a block, CASE) or close (END) a nesting level; BEGIN TRAN[SACTION] opens none.
_NESTING = re.compile(r"\bBEGIN\b(?!\s+TRAN)|\bCASE\b|\bEND\b|;", re.IGNORECASE)
# The first word of the statement an IF runs (its condition holds none of them outside parentheses).
_STATEMENT_START = re.compile(
    r"\b(?:BEGIN|COMMIT|ROLLBACK|SET|CREATE|ALTER|DROP|INSERT|UPDATE|DELETE|SELECT|EXEC|DECLARE)\b",
    re.IGNORECASE,
)


def _masked(sql: str) -> str:
    """The text with bracketed names and string literals blanked (same length), so words in them do not
    count as keywords."""
    return _TOKENS.sub(lambda match: match.group() if match.group() == "?" else " " * len(match.group()), sql)


def split_batch(sql: str) -> list[str]:
    """The top-level statements of a batch, split at ``;`` outside names, literals, ``BEGIN ... END`` blocks
    and ``CASE ... END``."""
    masked = _masked(sql)
    parts: list[str] = []
    depth = start = 0
    for match in _NESTING.finditer(masked):
        word = match.group().upper()
        if word == ";":
            if depth == 0:
                parts.append(sql[start : match.start()].strip())
                start = match.end()
        elif word == "END":
            depth -= 1
            require(depth >= 0, f"END without BEGIN or CASE in:\n{sql}")
        else:
            depth += 1
    require(depth == 0, f"BEGIN or CASE without END in:\n{sql}")
    tail = sql[start:].strip()
    return [part for part in [*parts, tail] if part]


def split_if(statement: str) -> tuple[str, list[str]] | None:
    """``IF <condition> <statement>`` or ``IF <condition> BEGIN <statements> END`` as (condition, the
    statements it runs); None for a statement that is not an IF."""
    if not re.match(r"IF\s", statement, re.IGNORECASE):
        return None
    masked = _masked(statement)
    depth = 0
    for index, char in enumerate(masked):
        depth += {"(": 1, ")": -1}.get(char, 0)
        match = _STATEMENT_START.match(masked, index) if depth == 0 and index > 2 else None
        if match is not None and masked[index - 1].isspace():
            condition = statement[3:index].strip()
            body = statement[index:].strip()
            block = re.fullmatch(r"BEGIN\s(?!\s*TRAN)(?P<inner>.*)\bEND", body, re.IGNORECASE | re.DOTALL)
            inner = split_batch(block["inner"]) if block else [body]
            require(condition and inner, f"IF without a condition or a statement:\n{statement}")
            return condition, inner
    raise StaticCheckFailure(f"IF without a statement to run:\n{statement}")


def sqlglot_batch(sql: str) -> tuple[str, list[int] | None]:
    """The text sqlglot reads, and how many of sqlglot's statements each top-level statement became (None
    where the text is unchanged).

    sqlglot 30 reads ``IF ... BEGIN ... END`` (and an IF followed by more statements) as one IfBlock that
    swallows the rest of the batch, so in a batch of several statements each IF becomes its condition, as
    ``SELECT 1 WHERE <condition>``, followed by the statements it runs, each on its own. A lone IF (the
    bridge's ``IF OBJECT_ID(...) IS NULL CREATE TABLE``) stays as written. sqlfluff reads the exact text.
    """
    parts = split_batch(sql)
    ifs = [split_if(part) for part in parts]
    if len(parts) < 2 or not any(ifs):
        return for_sqlglot(sql), None
    texts: list[str] = []
    shape: list[int] = []
    for part, split in zip(parts, ifs, strict=True):
        if split is None:
            texts.append(part)
            shape.append(1)
            continue
        condition, inner = split
        require(not any(split_if(statement) for statement in inner), f"nested IF in:\n{sql}")
        texts += [f"SELECT 1 WHERE {condition}", *inner]
        shape.append(1 + len(inner))
    return "; ".join(texts), shape


def for_sqlglot(sql: str) -> str:
    """The statement as sqlglot 30 can read it.

    sqlglot rejects the valid ``DELETE FROM t OUTPUT ... WHERE ...`` (the form Babelfish runs for the
    receive; a table hint may follow ``t``) and reads the equivalent ``DELETE t OUTPUT ... FROM t WHERE ...``
    (the hint on the FROM): only that shape is
    rewritten, for sqlglot alone (sqlfluff reads the statement as executed). sqlglot also rejects a
    qualified ``OUTPUT ... INTO [schema].[table] (columns)`` target (the delayed mover's), so that clause
    is left out of its text; the mover's checker holds the INTO clause on the text. Batches with IF are
    split by :func:`sqlglot_batch`.
    """
    match = _DELETE_OUTPUT_WHERE.fullmatch(sql)
    if match is None:
        return sql
    output = _OUTPUT_INTO.sub("", match["output"])
    return f"DELETE {match['table']} {output} FROM {match['table']}{match['hints'] or ''} {match['where']}"


def parse_sqlglot(sql: str) -> list[exp.Expression]:
    """Parse with sqlglot's T-SQL reader; a parse error, an empty statement or an opaque Command fails."""
    try:
        trees = sqlglot.parse(sqlglot_batch(sql)[0], read="tsql", error_level=ErrorLevel.RAISE)
    except SqlglotError as error:
        raise StaticCheckFailure(f"sqlglot could not parse the statement: {error}\n{sql}") from error
    require(trees and all(tree is not None for tree in trees), f"empty statement in:\n{sql}")
    for tree in trees:
        command = tree.find(exp.Command)
        require(command is None, f"sqlglot fell back to an opaque Command ({command!r}) for:\n{sql}")
    return trees


def _nodes(trees: list[exp.Expression], kind: type[exp.Expression]) -> list[Any]:
    return [node for tree in trees for node in tree.find_all(kind)]


# sqlglot's type for each allowed name, as its T-SQL reader builds it (uniqueidentifier -> UUID...).
_SQLGLOT_TYPES = {exp.DataType.build(name, dialect="tsql").this: name for name in DATA_TYPES}


def sqlglot_type_name(data_type: exp.DataType) -> str | None:
    """The allowed T-SQL name of a type node, or None."""
    return _SQLGLOT_TYPES.get(data_type.this)


def _sqlglot_type_words(data_type: exp.DataType) -> str:
    if data_type.this == exp.DataType.Type.USERDEFINED:
        return str(data_type.args.get("kind")).lower()
    return data_type.this.name.lower()


def check_sqlglot_allow_lists(trees: list[exp.Expression], sql: str) -> None:
    """Table hints, data types, dateparts and unknown functions on sqlglot's tree, plus what sqlglot reads
    but SQL Server rejects (``DELETE ... ORDER BY``)."""
    for hint in _nodes(trees, exp.WithTableHint):
        for word in hint.expressions:
            require(
                word.name.upper() in TABLE_HINTS,
                f"table hint {word.name!r} is not allowed (sqlglot) in:\n{sql}",
            )
    for data_type in _nodes(trees, exp.DataType):
        require(
            sqlglot_type_name(data_type) is not None,
            f"data type {_sqlglot_type_words(data_type)!r} is not allowed (sqlglot) in:\n{sql}",
        )
    for node in _nodes(trees, exp.DateAdd) + _nodes(trees, exp.DateDiff):
        unit = node.unit.name.lower() if node.unit is not None else None
        require(unit in DATEPARTS, f"datepart {unit!r} is not allowed (sqlglot) in:\n{sql}")
    for function in _nodes(trees, exp.Anonymous):
        name = function.name.upper()
        require(name in FUNCTIONS, f"function {name!r} is not allowed (sqlglot) in:\n{sql}")
    for variable in sqlglot_system_variables(trees):
        require(
            variable in SYSTEM_VARIABLES, f"system variable {variable!r} is not allowed (sqlglot) in:\n{sql}"
        )
    for delete in _nodes(trees, exp.Delete):
        require(delete.args.get("order") is None, f"DELETE ... ORDER BY is not T-SQL (sqlglot) in:\n{sql}")
        require(delete.args.get("limit") is None, f"DELETE ... LIMIT is not T-SQL (sqlglot) in:\n{sql}")


def sqlglot_system_variables(trees: list[exp.Expression]) -> list[str]:
    """``@@NAME`` as sqlglot reads it: a parameter of a parameter."""
    return [
        f"@@{node.this.name.upper()}"
        for node in _nodes(trees, exp.Parameter)
        if isinstance(node.this, exp.Parameter)
    ]


def check_same_statements(trees: list[exp.Expression], fluff: FluffTree, sql: str) -> None:
    """Both grammars split the text into the same number of statements, with the same parameters (an IF
    that sqlglot reads split, see :func:`sqlglot_batch`, counts as its condition plus its statements)."""
    statements = fluff.statements()
    _, shape = sqlglot_batch(sql)
    expected = len(trees) if shape is None else len(shape)
    require(
        len(statements) == expected,
        f"sqlfluff reads {len(statements)} statement(s), sqlglot {expected}: {[s.raw for s in statements]}",
    )
    require(
        shape is None or sum(shape) == len(trees),
        f"sqlglot reads {len(trees)} statement(s) where the split gives {sum(shape or [])}:\n{sql}",
    )
    in_text = parameter_count(sql)
    in_tree = len(_nodes(trees, exp.Placeholder))
    named = sum(1 for node in fluff.find("parameter") if re.fullmatch(r"@p[0-9]+", node.raw))
    require(
        in_text == in_tree == named,
        f"'?' parameters: {in_text} in the text, {in_tree} to sqlglot, {named} to sqlfluff:\n{sql}",
    )


def check_static(sql: str) -> tuple[list[exp.Expression], FluffTree]:
    """Both grammars, both sets of allow-lists, the same statements and parameters to both."""
    trees = parse_sqlglot(sql)
    check_sqlglot_allow_lists(trees, sql)
    fluff = parse_sqlfluff(sql)
    check_sqlfluff_allow_lists(fluff, sql)
    check_same_statements(trees, fluff, sql)
    return trees, fluff


# ---- small readers shared by the tests ----------------------------------------------------------------
def sqlfluff_names(tree: FluffTree, segment_type: str) -> set[str]:
    """Upper-cased names of one kind of segment: ``function`` (its name), ``data_type`` (the type's first
    word), ``query_hint_segment`` (the hint)."""
    names = set()
    for segment in tree.find(segment_type):
        if segment_type == "function":
            [name] = [child for child in _code(segment) if child.is_type("function_name")]
        else:
            name = _code(segment)[0] if _code(segment) else segment
        names.add(_name(name.raw).upper())
    return names


def outside_names_and_literals(sql: str) -> str:
    """The text with bracketed names and string literals blanked out."""
    return _TOKENS.sub(lambda match: "?" if match.group() == "?" else " ", sql)
