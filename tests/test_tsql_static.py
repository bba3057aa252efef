"""Stricter static checks for every T-SQL statement the package renders (see ``tests/tsql_checks.py``).

What is checked, on every statement of every class that renders T-SQL (SqlServerDialect and each subclass,
found through ``__subclasses__()``; a subclass's statements that equal SQL Server's are checked once):

- the queue statements, enumerated as ``tests/test_sqlserver_golden.py`` renders them for its address cases;
- the Spark bridge's statements (``spark/tables.py``: control tables, runs, staging, fill markers, sink
  tables), rendered for the same cases, with golden files in ``tests/golden/spark_bridge/<variant>/``
  (reviewed as the golden test's docstring says; ``SQLQUEUE_UPDATE_GOLDEN=1`` rewrites them);
- both grammars (sqlglot and sqlfluff's ``tsql``), no unparsable section, the same statement count, the
  allow-lists of table hints, data types, dateparts, functions, procedures and statement kinds.

**Clocks, per family of statements.** Queue statements read time from ``GETUTCDATE()`` only, as the
reference does (the queue's ``Expires`` and ``Due`` are ``datetime``; the golden test holds that). The
bridge's bookkeeping statements (its runs table: start, heartbeat, finish, orphan detection) use
``SYSUTCDATETIME()`` only: their columns are ``datetime2`` and are stamped and compared by the same clock.
Bridge statements on queue tables and sink tables (restore, staging, fill markers, sink rows) use no clock
at all: ``Expires`` is copied as it was. Local-time clocks (``GETDATE``, ``SYSDATETIME``,
``SYSDATETIMEOFFSET``, ``CURRENT_TIMESTAMP``) appear nowhere.

The negative self-test at the end feeds the invalid examples of issue 14 to each check and states which
one rejects each.
"""

from __future__ import annotations

import gc
import inspect
import re
from dataclasses import dataclass
from typing import Any

import pytest
import sqlglot
import test_sqlserver_golden as golden
from sqlglot import exp
from tsql_checks import (
    DATA_TYPES,
    DATEPART_FUNCTIONS,
    DATEPARTS,
    FUNCTIONS,
    GOLDEN_ROOT,
    PROCEDURES,
    SYSTEM_VARIABLES,
    TABLE_HINTS,
    FluffTree,
    StaticCheckFailure,
    check_same_statements,
    check_sqlfluff_allow_lists,
    check_sqlglot_allow_lists,
    check_static,
    compare_golden,
    for_sqlglot,
    outside_names_and_literals,
    parse_sqlfluff,
    parse_sqlglot,
    require,
    sqlfluff_names,
    sqlglot_system_variables,
    stale_golden_files,
    tsql_dialect_classes,
    variant_name,
)

from airflow_provider_sqlqueue.dialects.sqlserver import SqlServerDialect
from airflow_provider_sqlqueue.model.address import QueueAddress
from airflow_provider_sqlqueue.spark.staged_runs import staged_runs_listing
from airflow_provider_sqlqueue.spark.tables import (
    ABORTED,
    ACTIVE_STATES,
    COMMITTED,
    DEFAULT_PREFIX,
    PROCESSING,
    READ,
    RECEIVING,
    STREAMING,
    BridgeSql,
    BridgeTables,
    bridge_tables,
    sink_table_ddl,
)

BRIDGE_GOLDEN = GOLDEN_ROOT / "spark_bridge"
RUN_STATES = {RECEIVING, PROCESSING, COMMITTED, ABORTED, READ, STREAMING}
LOCAL_CLOCKS = {"GETDATE", "SYSDATETIME", "SYSDATETIMEOFFSET", "CURRENT_TIMESTAMP"}
# A sink table with every logical type the bridge maps, and column names that need quoting.
SINK_COLUMNS = [
    ("message_id", "string", False),
    ("total ]cost'", "decimal(12,2)", True),
    ("count", "long", True),
    ("n", "int", True),
    ("s", "short", True),
    ("d", "double", True),
    ("f", "float", True),
    ("ok", "boolean", True),
    ("at", "timestamp", True),
    ("day", "date", True),
    ("raw", "binary", True),
    ("doc", "json", True),
]


# ---- the bridge's statements --------------------------------------------------------------------------
@dataclass(frozen=True)
class RenderingTransport:
    """Stands in for a Transport: the bridge reads only its dialect and its resolve (no connection)."""

    dialect: SqlServerDialect

    def resolve(self, address: str | QueueAddress) -> QueueAddress:
        return self.dialect.resolve(QueueAddress.parse(address))


@dataclass(frozen=True)
class BridgeStatement:
    kind: str  # the BridgeSql method (or module function) that rendered it
    name: str  # the '-- name' line of the golden file
    sql: str
    counted: bool = False  # run through BridgeSql.counted: '; SELECT @@ROWCOUNT' appended


# The run-state updates whose changed-row count the drain reads: it runs them only through BridgeSql.counted
# (NOCOUNT ON leaves drivers no row count on SQL Server), so they are rendered, checked and golden that way.
COUNTED_KINDS = {"set_state", "set_state_if_stale", "finish_run", "set_summary_if", "touch_run"}
ROWCOUNT = "SELECT @@ROWCOUNT"


# The kinds stamped by the bridge's own clock (SYSUTCDATETIME()); every other bridge statement has no clock.
BRIDGE_CLOCK_KINDS = {
    "insert_run",
    "restart_run",
    "set_state",
    "set_state_if_stale",
    "heartbeat",
    "finish_run",
    "set_summary",
    "orphans",
    "insert_stream",
    "set_summary_if",
    "touch_run",
    "staged_runs_listing",
}
# BridgeSql members (and names of the dialect's bridge statements) that render no statement of their own,
# or only PostgreSQL's: run_owner_shared and run_takeover are rendered as run_state_shared, create_table as
# create_statements, staged_runs as staged_runs_listing.
BRIDGE_NOT_STATEMENTS = {
    "statement",
    "statements",
    "create_table",
    "staged_runs",
    "run_owner_shared",
    "run_takeover",
    "now",
    "older_than",
    "seconds_since",
    "can_copy",
    "can_move_server_side",
    "stage_rows_per_statement",
    "stage_params",
    "expires_value",
    "rows_per_insert",
    "sink_value",
    "dialect",
    "reads_binary",
}
BRIDGE_POSTGRES_ONLY = {
    "move_to_staging",
    "move_to_stream_staging",
    "move_poison",
    "copy_rows",
    "held_bounds",
    "take_held_window",
    "take_held_batch",
    "lock_timeout",
    "next_row_version",
    "newest_after",
    "held_slice",
    "held_reads_by_index",
    "unreadable_held",
    "held_headers",
    "insert_unreadable",
}


def bridge_prefix(case_name: str, address: QueueAddress) -> str:
    """The control tables' prefix: the default for the plain case, else the case's own (hostile) name."""
    return DEFAULT_PREFIX if case_name == "plain" else address.table[:100]


def render_bridge(case_name: str, address: QueueAddress, dialect: SqlServerDialect) -> list[BridgeStatement]:
    """Every statement the bridge runs on a T-SQL engine, for control tables beside ``address``, with
    ``address`` also as the input queue (restore) and as a sink table."""
    transport: Any = RenderingTransport(dialect)
    tables = bridge_tables(transport, address, bridge_prefix(case_name, address))
    sql = BridgeSql(transport, tables, address)
    out: list[BridgeStatement] = []

    def add(kind: str, text: str, name: str | None = None) -> None:
        out.append(BridgeStatement(kind, name or kind, text))

    def add_counted(kind: str, text: str, name: str | None = None) -> None:
        out.append(BridgeStatement(kind, f"{name or kind} (counted)", sql.counted(text), counted=True))

    for table, text in zip(("runs", "staging", "fill"), sql.create_statements(), strict=True):
        add("create_statements", text, f"create_statements {table}")
    add("get_run", sql.get_run())
    add("insert_run", sql.insert_run())
    add("restart_run", sql.restart_run())
    # As the drain runs them: abort (from receiving or processing; if stale), the end of the receive phase
    # (from receiving) and the commit (from processing), then finish_run.
    add_counted("set_state", sql.set_state(ACTIVE_STATES), "set_state from receiving, processing")
    add_counted("set_state", sql.set_state((RECEIVING,)), "set_state from receiving")
    add_counted("set_state", sql.set_state((PROCESSING,)), "set_state from processing")
    add_counted("set_state_if_stale", sql.set_state_if_stale(ACTIVE_STATES)[0])
    add("heartbeat", sql.heartbeat())
    add_counted("finish_run", sql.finish_run())
    add("set_summary", sql.set_summary())
    add("insert_stream", sql.insert_stream())
    add_counted("set_summary_if", sql.set_summary_if())
    add("delete_staged_through", sql.delete_staged_through())
    add("run_state_shared", sql.run_state_shared())
    add("run_state_shared", sql.run_state_shared("takeover"), "run_state_shared takeover")
    add("orphans", sql.orphans()[0])
    add("stage_rows", sql.stage_rows(1), "stage_rows rows=1")
    add("stage_rows", sql.stage_rows(3), "stage_rows rows=3")
    add("count_part", sql.count_part())
    add("staged_stats", sql.staged_stats())
    add("staged_slice", sql.staged_slice())
    add("delete_staging", sql.delete_staging())
    add("restore", sql.restore(address))
    add("fill_batches_done", sql.fill_batches_done())
    add("insert_fill_marker", sql.insert_fill_marker())
    add("fill_totals", sql.fill_totals())
    add("insert_rows", sql.insert_rows(address, [c for c, _, _ in SINK_COLUMNS], 2), "insert_rows rows=2")
    add("table_columns", sql.table_columns(address))
    add("run_sink", sql.run_sink())
    add_counted("touch_run", sql.touch_run((STREAMING,)))
    add("staged_runs_listing", staged_runs_listing(sql))
    add("staged_runs_listing", staged_runs_listing(sql, of_queue=False), "staged_runs_listing of every queue")
    add("sink_table_ddl", sink_table_ddl(transport, address, SINK_COLUMNS))
    names = [statement.name for statement in out]
    assert len(names) == len(set(names)), "statement names must be unique within a golden file"
    return out


def bridge_golden_text(
    variant: str, case_name: str, address: QueueAddress, statements: list[BridgeStatement]
) -> str:
    lines = [
        f"-- The Spark bridge's statements on {variant}, beside the queue {address}",
        f"-- (control tables prefixed {bridge_prefix(case_name, address)!r}; the queue is also the sink).",
        "-- Golden file: tests/test_tsql_static.py; SQLQUEUE_UPDATE_GOLDEN=1 rewrites it.",
    ]
    if variant != "sqlserver":
        reference = {s.name: s.sql for s in BRIDGE[("sqlserver", case_name)]}
        statements = [s for s in statements if reference.get(s.name) != s.sql]
        lines.append(f"-- Only the statements that differ from spark_bridge/sqlserver/{case_name}.sql.")
    for statement in statements:
        lines += ["", f"-- {statement.name}", statement.sql]
    return "\n".join(lines) + "\n"


VARIANTS = golden.VARIANTS
BRIDGE = {
    (variant, case): render_bridge(case, address, cls())
    for variant, cls in VARIANTS.items()
    for case in golden.CASES_BY_VARIANT[variant]
    for address in (golden.ADDRESSES[case],)
}


def _changed(variant: str, statement: Any, reference: list[Any]) -> bool:
    """A subclass's statement that SQL Server's does not already cover."""
    return variant == "sqlserver" or all(
        (r.name, r.sql) != (statement.name, statement.sql) for r in reference
    )


QUEUE_STATEMENTS = [
    pytest.param(variant, case, statement, id=f"{variant}:{case}:{statement.name}")
    for variant, rendered in golden.RENDERED_BY_VARIANT.items()
    for case, statements in rendered.items()
    for statement in statements
    if _changed(variant, statement, golden.RENDERED[case])
]
BRIDGE_STATEMENTS = [
    pytest.param(variant, case, statement, id=f"{variant}:{case}:{statement.name}")
    for (variant, case), statements in BRIDGE.items()
    for statement in statements
    if _changed(variant, statement, BRIDGE[("sqlserver", case)])
]


# ---- the bridge's own checks --------------------------------------------------------------------------
def _qualified(table: exp.Table) -> str:
    parts = [table.args.get(key) for key in ("catalog", "db", "this")]
    return ".".join(golden.bracket(part.name) for part in parts if part is not None)


def check_bridge_clock(statement: BridgeStatement, fluff: FluffTree) -> None:
    functions = sqlfluff_names(fluff, "function")
    clocks = functions & ({"GETUTCDATE", "SYSUTCDATETIME"} | LOCAL_CLOCKS)
    if "CURRENT_TIMESTAMP" in outside_names_and_literals(statement.sql).upper():
        clocks.add("CURRENT_TIMESTAMP")
    wanted = {"SYSUTCDATETIME"} if statement.kind in BRIDGE_CLOCK_KINDS else set()
    require(clocks == wanted, f"clocks {sorted(clocks)}, expected {sorted(wanted)} in:\n{statement.sql}")


def check_bridge_counted(statement: BridgeStatement, trees: list[exp.Expression], fluff: FluffTree) -> None:
    """``@@ROWCOUNT`` (and a second statement) only in the counted run-state updates: the UPDATE, then
    ``SELECT @@ROWCOUNT`` and nothing else."""
    sql = statement.sql
    require(
        statement.counted == (statement.kind in COUNTED_KINDS),
        f"{statement.kind} must {'' if statement.kind in COUNTED_KINDS else 'not '}be counted:\n{sql}",
    )
    kinds = [_statement_kind(segment) for segment in fluff.statements()]
    variables = sqlglot_system_variables(trees)
    if statement.counted:
        require(sql.endswith(f"; {ROWCOUNT}"), f"the count is not the last statement:\n{sql}")
        require(
            kinds == ["update_statement", "select_statement"]
            and [type(tree) for tree in trees] == [exp.Update, exp.Select]
            and trees[1].sql(dialect="tsql") == ROWCOUNT
            and variables == ["@@ROWCOUNT"],
            f"not one UPDATE followed by {ROWCOUNT} (sqlfluff: {kinds}):\n{sql}",
        )
    else:
        require(len(trees) == len(kinds) == 1, f"more than one statement (sqlfluff: {kinds}):\n{sql}")
        require(not variables, f"system variables {variables} outside the counted updates:\n{sql}")


def _statement_kind(segment: Any) -> str:
    [kind] = [child.get_type() for child in segment.segments if child.is_code and not child.is_meta]
    return kind


def check_bridge_names(
    statement: BridgeStatement, trees: list[exp.Expression], address: QueueAddress, tables: BridgeTables
) -> None:
    """Every table is one of the bridge's or the queue, bracket-quoted; names in N'...' are the quoted
    name of the table the same statement creates; no other string but the run states."""
    sql = statement.sql
    allowed = {golden.expected_qualified_name(a) for a in (tables.runs, tables.staging, tables.fill, address)}
    for tree in trees:
        for table in tree.find_all(exp.Table):
            parts = [table.args.get(key) for key in ("catalog", "db", "this")]
            unquoted = [part.name for part in parts if part is not None and not part.quoted]
            require(not unquoted, f"unquoted name parts {unquoted} in:\n{sql}")
            require(_qualified(table) in allowed, f"table {_qualified(table)} is not the bridge's in:\n{sql}")
        created = [_qualified(create.this.this) for create in tree.find_all(exp.Create)]
        for national in tree.find_all(exp.National):
            require(
                national.this == "U" or [national.this] == created,
                f"N'{national.this}' is neither 'U' nor the quoted name of the table created in:\n{sql}",
            )
        if isinstance(tree, exp.IfBlock):
            lookup = tree.this.this
            require(
                isinstance(tree.this, exp.Is)
                and isinstance(lookup, exp.ObjectId)
                and lookup.expression.this == "U"
                and len(created) == 1,
                f"not IF OBJECT_ID(N'<the table>', N'U') IS NULL CREATE TABLE <the table>:\n{sql}",
            )
        strings = {lit.this for lit in tree.find_all(exp.Literal) if lit.is_string}
        require(strings <= RUN_STATES, f"string literals {sorted(strings - RUN_STATES)} in:\n{sql}")
    outside = outside_names_and_literals(sql)
    for part in (address.table, address.schema, address.catalog, tables.runs.table):
        if part:
            require(part not in outside, f"{part!r} appears outside brackets and literals in:\n{sql}")


# ---- tests --------------------------------------------------------------------------------------------
def test_the_reference_class_comes_first() -> None:
    classes = tsql_dialect_classes()
    assert classes[0] is SqlServerDialect and variant_name(SqlServerDialect) == "sqlserver"
    assert list(VARIANTS.values()) == classes


@pytest.mark.parametrize(("variant", "case_name", "statement"), QUEUE_STATEMENTS)
def test_queue_statement_passes_both_grammars_and_the_allow_lists(
    variant: str, case_name: str, statement: golden.Statement
) -> None:
    trees, _ = check_static(statement.sql)
    if variant == "sqlserver":
        assert len(trees) == len(statement.types)


@pytest.mark.parametrize(("variant", "case_name"), sorted(BRIDGE))
def test_bridge_golden_file(variant: str, case_name: str) -> None:
    address = golden.ADDRESSES[case_name]
    text = bridge_golden_text(variant, case_name, address, BRIDGE[(variant, case_name)])
    compare_golden(BRIDGE_GOLDEN / variant / f"{case_name}.sql", text)


def test_no_stale_bridge_golden_files() -> None:
    folders = {path.name for path in BRIDGE_GOLDEN.iterdir() if path.is_dir()}
    assert folders <= set(VARIANTS), (
        f"bridge golden folders without a dialect class: {folders - set(VARIANTS)}"
    )
    for variant in VARIANTS:
        stale = stale_golden_files(BRIDGE_GOLDEN / variant, set(golden.CASES_BY_VARIANT[variant]))
        assert not stale, f"bridge golden files of {variant} without a case: {stale}"


def check_bridge_statement(variant: str, case_name: str, statement: BridgeStatement) -> None:
    address = golden.ADDRESSES[case_name]
    trees, fluff = check_static(statement.sql)
    check_bridge_clock(statement, fluff)
    check_bridge_counted(statement, trees, fluff)
    transport: Any = RenderingTransport(VARIANTS[variant]())
    check_bridge_names(
        statement, trees, address, bridge_tables(transport, address, bridge_prefix(case_name, address))
    )


@pytest.mark.parametrize(("variant", "case_name", "statement"), BRIDGE_STATEMENTS)
def test_bridge_statement_passes_static_checks(
    variant: str, case_name: str, statement: BridgeStatement
) -> None:
    check_bridge_statement(variant, case_name, statement)


def _broken(case_name: str, name: str, old: str, new: str) -> tuple[str, BridgeStatement]:
    model = next(s for s in BRIDGE[("sqlserver", case_name)] if s.name == name)
    assert old in model.sql, f"{name} no longer holds {old!r}: update BROKEN_BRIDGE"
    return case_name, BridgeStatement(model.kind, model.name, model.sql.replace(old, new), model.counted)


BROKEN_BRIDGE = [
    pytest.param(
        *_broken(
            "plain",
            "heartbeat",
            "('receiving', 'processing')",
            "('receiving', 'processing'); SELECT @@ROWCOUNT",
        ),
        r"more than one statement",
        id="rowcount-outside-the-counted-updates",
    ),
    pytest.param(
        *_broken("plain", "finish_run (counted)", "SELECT @@ROWCOUNT", "SELECT @@IDENTITY"),
        r"system variable '@@IDENTITY' is not allowed",
        id="other-system-variable",
    ),
    pytest.param(
        *_broken("plain", "set_state from processing (counted)", "; SELECT @@ROWCOUNT", ""),
        r"the count is not the last statement",
        id="counted-without-the-count",
    ),
    pytest.param(
        *_broken(
            "plain",
            "set_state from processing (counted)",
            "; SELECT @@ROWCOUNT",
            "; SELECT 1; SELECT @@ROWCOUNT",
        ),
        r"not one UPDATE followed by SELECT @@ROWCOUNT",
        id="count-and-more",
    ),
    pytest.param(
        *_broken("plain", "heartbeat", "SYSUTCDATETIME()", "GETUTCDATE()"),
        r"clocks \['GETUTCDATE'\]",
        id="clock",
    ),
    pytest.param(
        *_broken("plain", "restore", " WHERE", ", SYSUTCDATETIME() WHERE"), "clocks", id="restore-clock"
    ),
    pytest.param(
        *_broken("plain", "insert_run", "SYSUTCDATETIME()", "SYSDATETIME()"),
        "function 'SYSDATETIME'",
        id="local",
    ),
    pytest.param(
        *_broken("everything_at_once", "create_statements runs", "''z''", "'z'"),
        "sqlglot could not parse",
        id="quote-undoubled",
    ),
    pytest.param(
        *_broken("plain", "create_statements fill", "N'[dbo].[sqlqueue_spark_fill]'", "N'[dbo].[orders]'"),
        "neither 'U' nor the quoted name",
        id="lookup-of-another-table",
    ),
    pytest.param(
        *_broken("plain", "get_run", "[dbo].[sqlqueue_spark_runs]", "dbo.sqlqueue_spark_runs"),
        "unquoted name parts",
        id="unquoted",
    ),
    pytest.param(
        *_broken("plain", "get_run", "RunId = ?", "RunId = 'r1'"), "string literals", id="value-inline"
    ),
    pytest.param(
        *_broken("plain", "run_state_shared", "HOLDLOCK, ROWLOCK", "HOLDLOCK, NOLOCK"),
        "NOLOCK",
        id="dirty-read",
    ),
]


@pytest.mark.parametrize(("case_name", "statement", "reason"), BROKEN_BRIDGE)
def test_bridge_checks_reject_broken_statements(
    case_name: str, statement: BridgeStatement, reason: str
) -> None:
    with pytest.raises(StaticCheckFailure, match=reason):
        check_bridge_statement("sqlserver", case_name, statement)


def test_every_bridge_statement_is_rendered() -> None:
    """A new BridgeSql statement fails here until render_bridge (and so the checks) covers it."""
    transport: Any = RenderingTransport(SqlServerDialect())
    members = {name for name, _ in inspect.getmembers(BridgeSql) if not name.startswith("_")}
    members |= BridgeSql(transport, bridge_tables(transport, "orders")).statements()
    statements = BRIDGE[("sqlserver", "plain")]
    rendered = {statement.kind for statement in statements} - {"sink_table_ddl", "staged_runs_listing"}
    rendered |= {"counted"} if any(statement.counted for statement in statements) else set()
    assert members - BRIDGE_NOT_STATEMENTS - BRIDGE_POSTGRES_ONLY == rendered
    for cls in VARIANTS.values():
        transport = RenderingTransport(cls())
        sql = BridgeSql(transport, bridge_tables(transport, "orders"))
        assert not sql.can_copy and not sql.can_move_server_side, f"{cls.__name__} takes a PostgreSQL path"


def test_abort_of_a_stale_run_is_the_state_change_plus_the_heartbeat_condition() -> None:
    """drain.abort(stale=True) runs set_state_if_stale: the same update, only for a stale heartbeat."""
    transport: Any = RenderingTransport(SqlServerDialect())
    sql = BridgeSql(transport, bridge_tables(transport, "orders"))
    statement, bind = sql.set_state_if_stale(ACTIVE_STATES)
    assert (
        statement == sql.set_state(ACTIVE_STATES) + " AND HeartbeatAt < DATEADD(second, -?, SYSUTCDATETIME())"
    )
    assert bind(90.7) == 90


def test_allow_lists_hold_only_what_is_used() -> None:
    """Each allow-list is what the statements use (plus names reserved below), so it cannot grow stale."""
    # Named by issue 14 for quoting names on the server; drop it here once a statement uses it.
    reserved = {"QUOTENAME"}
    used: dict[str, set[str]] = {
        "hints": set(),
        "types": set(),
        "functions": set(),
        "dateparts": set(),
        "variables": set(),
    }
    texts = [
        s.sql for rendered in golden.RENDERED_BY_VARIANT.values() for ss in rendered.values() for s in ss
    ]
    texts += [s.sql for statements in BRIDGE.values() for s in statements]
    for sql in dict.fromkeys(texts):
        fluff = parse_sqlfluff(sql)
        used["hints"] |= sqlfluff_names(fluff, "query_hint_segment")
        used["types"] |= {name.lower() for name in sqlfluff_names(fluff, "data_type")}
        used["functions"] |= sqlfluff_names(fluff, "function")
        used["variables"] |= {segment.raw.upper() for segment in fluff.find("system_variable")}
        for function in fluff.find("function"):
            if sqlfluff_names(FluffTree(fluff.sql, function), "function") & DATEPART_FUNCTIONS:
                used["dateparts"] |= set(re.findall(r"\(\s*(\w+)\s*,", function.raw.lower())[:1])
    assert used["hints"] == TABLE_HINTS
    assert used["types"] == DATA_TYPES
    assert used["functions"] | reserved == FUNCTIONS
    assert used["dateparts"] == DATEPARTS
    assert used["variables"] == SYSTEM_VARIABLES
    assert {"sp_getapplock", "sp_releaseapplock"} == PROCEDURES


# ---- a subclass added later is picked up --------------------------------------------------------------
# A receive as Babelfish's table writes it, as a variant's statement table would override SQL Server's.
_BABELFISH_LIKE_RECEIVE = (
    "DELETE FROM {table} OUTPUT deleted.[Id], CASE WHEN deleted.[Expires] IS NULL OR deleted.[Expires] > "
    "GETUTCDATE() THEN 0 ELSE 1 END AS [Expired], deleted.[Headers], deleted.[Body], deleted.[RowVersion] "
    "WHERE [RowVersion] IN (SELECT TOP(?) [RowVersion] FROM {table} WITH (UPDLOCK, READPAST, ROWLOCK) "
    "ORDER BY [RowVersion])"
)


def _babelfish_like_receive(dialect: SqlServerDialect, address: QueueAddress) -> str:
    return _BABELFISH_LIKE_RECEIVE.format(table=dialect.qualified_name(address))


def test_a_subclass_defined_later_is_enumerated_rendered_and_checked() -> None:
    """A subclass in the package (here a probe with a Babelfish-style receive) gets its golden file of
    differing statements and the static checks, with no edit to the tests; a broken override fails."""

    class ProbeDialect(SqlServerDialect):
        statements = {**SqlServerDialect.statements, "receive_batch": _BABELFISH_LIKE_RECEIVE}

    ProbeDialect.__module__ = "airflow_provider_sqlqueue.dialects.probe"
    try:
        assert ProbeDialect in tsql_dialect_classes() and variant_name(ProbeDialect) == "probe"
        address = golden.ADDRESSES["ci_special_characters"]
        rendered = golden.render("ci_special_characters", address, ProbeDialect())
        [changed] = golden.differing("ci_special_characters", rendered)
        assert changed.name == "receive_batch" and changed.sql == _babelfish_like_receive(
            ProbeDialect(), address
        )
        text = golden.variant_golden_text("probe", "ci_special_characters", rendered)
        assert "\n-- receive_batch\n" in text and "\n-- send\n" not in text
        check_static(changed.sql)
        bridge = render_bridge("ci_special_characters", address, ProbeDialect())
        assert [s.sql for s in bridge] == [s.sql for s in BRIDGE[("sqlserver", "ci_special_characters")]]
        with pytest.raises(StaticCheckFailure, match=r"DELETE \.\.\. ORDER BY"):
            check_static(changed.sql.split(" WHERE ")[0] + " ORDER BY [RowVersion]")
    finally:
        del ProbeDialect
        gc.collect()
    assert all(cls.__name__ != "ProbeDialect" for cls in tsql_dialect_classes())


def test_sqlglot_still_needs_the_delete_output_rewrite() -> None:
    """When sqlglot reads ``DELETE FROM t OUTPUT ... WHERE`` itself, drop tsql_checks.for_sqlglot."""
    receive = _babelfish_like_receive(SqlServerDialect(), golden.ADDRESSES["everything_at_once"])
    with pytest.raises(sqlglot.errors.ParseError):
        sqlglot.parse(receive, read="tsql", error_level=sqlglot.ErrorLevel.RAISE)
    [delete] = parse_sqlglot(receive)
    assert isinstance(delete, exp.Delete) and delete.args["where"] is not None
    assert for_sqlglot(golden.RENDERED["plain"][0].sql) == golden.RENDERED["plain"][0].sql


def test_sqlglot_still_needs_the_output_into_rewrite() -> None:
    """When sqlglot reads a qualified ``OUTPUT ... INTO [schema].[table] (columns)`` target, keep the INTO
    clause in tsql_checks.for_sqlglot's text (the delayed mover's checker holds it on the text meanwhile)."""
    move = next(s.sql for s in golden.RENDERED["plain"] if s.kind == "move_delayed_rows")
    match = re.fullmatch(r"DELETE FROM (\S+) (OUTPUT .+?) (WHERE .*)", move)
    assert match is not None
    with pytest.raises(sqlglot.errors.ParseError):
        sqlglot.parse(
            f"DELETE {match[1]} {match[2]} FROM {match[1]} {match[3]}",
            read="tsql",
            error_level=sqlglot.ErrorLevel.RAISE,
        )
    [delete] = parse_sqlglot(move)
    assert isinstance(delete, exp.Delete) and len(delete.args["returning"].expressions) == 7


def test_sqlglot_still_needs_the_if_split() -> None:
    """sqlglot reads the creation's IF ... BEGIN ... END (open_transaction) as one IfBlock that swallows the
    rest of the batch; when it reads each statement itself, drop tsql_checks.sqlglot_batch's split."""
    opening = next(s.sql for s in golden.RENDERED["plain"] if s.kind == "open_transaction")
    trees = sqlglot.parse(opening, read="tsql", error_level=sqlglot.ErrorLevel.RAISE)
    assert [type(tree) for tree in trees] == [exp.Declare, exp.IfBlock]
    assert [type(tree) for tree in parse_sqlglot(opening)] == list(golden.OPEN_TRANSACTION_TYPES)
    # The lock's batch has no IF and is read as written.
    lock = next(s.sql for s in golden.RENDERED["plain"] if s.kind == "lock_for_create")
    assert for_sqlglot(lock) == lock
    assert [type(tree) for tree in parse_sqlglot(lock)] == list(golden.LOCK_TYPES)
    # A lone IF (the bridge's IF OBJECT_ID(...) IS NULL CREATE TABLE) is read as written.
    create = next(s.sql for s in BRIDGE[("sqlserver", "plain")] if s.name == "create_statements runs")
    assert [type(tree) for tree in parse_sqlglot(create)] == [exp.IfBlock]


@pytest.mark.parametrize(
    ("sql", "pattern"),
    [
        ("IF @@TRANCOUNT = 0 BEGIN DELETE FROM [dbo].[t]; END; SELECT 1", "inside IF or BEGIN ... END"),
        ("IF @@TRANCOUNT = 0 BEGIN BEGIN TRANSACTION; SELECT 1", "BEGIN or CASE without END"),
        ("DECLARE @x int; IF @@SPID = 0 SET @x = 1; SELECT @x", "system variable '@@SPID'"),
        ("IF @@TRANCOUNT = 0 BEGIN IF 1 = 1 SET @x = 1; END; SELECT 1", "nested IF"),
    ],
)
def test_batches_with_if_are_held_to_the_same_lists(sql: str, pattern: str) -> None:
    with pytest.raises(StaticCheckFailure, match=pattern):
        check_static(sql)


# ---- negative self-test: issue 14's invalid examples -------------------------------------------------
def _plain(name: str) -> str:
    return next(s.sql for s in golden.RENDERED["plain"] if s.name == name)


# Each example, and what each check says: a message pattern, or None where that check accepts it.
INVALID = [
    pytest.param(
        _plain("purge_expired_batch").split(";")[0] + " ORDER BY [RowVersion]",
        {"sqlglot": r"DELETE \.\.\. ORDER BY is not T-SQL", "sqlfluff": "unparsable section: 'ORDER BY"},
        id="DELETE-ORDER-BY",
    ),
    pytest.param(
        _plain("send") + " RETURNING [RowVersion]",
        {
            "sqlglot": None,
            "sqlfluff": r"procedure \['RETURNING'\] is not allowed",
            "count": "sqlfluff reads 2",
        },
        id="INSERT-RETURNING",
    ),
    pytest.param(
        _plain("peek_estimate").replace("READCOMMITTEDLOCK", "FOOBAR"),
        {
            "sqlglot": "table hint 'FOOBAR' is not allowed",
            "sqlfluff": r"unparsable section: 'WITH \(READPAST, FOOBAR\)'",
        },
        id="hint-FOOBAR",
    ),
    pytest.param(
        _plain("create_table unicode_headers=True body_string=False").replace(
            "uniqueidentifier", "uniqueidentifer"
        ),
        {"sqlglot": "data type 'uniqueidentifer'", "sqlfluff": "data type 'uniqueidentifer'"},
        id="type-uniqueidentifer",
    ),
    pytest.param(
        _plain("send").replace("millisecond", "milisecond"),
        {"sqlglot": "datepart 'milisecond'", "sqlfluff": "datepart 'milisecond'"},
        id="datepart-milisecond",
    ),
]


def _outcome(check: Any, sql: str) -> str | None:
    try:
        check(sql)
    except StaticCheckFailure as error:
        return str(error)
    return None


def _sqlglot_stage(sql: str) -> None:
    check_sqlglot_allow_lists(parse_sqlglot(sql), sql)


def _sqlfluff_stage(sql: str) -> None:
    check_sqlfluff_allow_lists(parse_sqlfluff(sql), sql)


def _count_stage(sql: str) -> None:
    check_same_statements(parse_sqlglot(sql), parse_sqlfluff(sql), sql)


@pytest.mark.parametrize(("sql", "expected"), INVALID)
def test_the_stricter_checks_reject_issue_14s_examples(sql: str, expected: dict[str, str | None]) -> None:
    golden.parse_tsql(sql)  # the first grammar alone reads every one of them
    stages = {"sqlglot": _sqlglot_stage, "sqlfluff": _sqlfluff_stage, "count": _count_stage}
    for stage, pattern in expected.items():
        message = _outcome(stages[stage], sql)
        if pattern is None:
            assert message is None, f"{stage} now rejects it too: {message}"
        else:
            assert message is not None and re.search(pattern, message), f"{stage}: {message}"
    with pytest.raises(StaticCheckFailure):
        check_static(sql)


@pytest.mark.parametrize(
    ("sql", "pattern"),
    [
        ("SELECT GETDATE() FROM [dbo].[t]", "function 'GETDATE' is not allowed"),
        ("SELECT count_big(*) FROM [dbo].[t] WITH (NOLOCK)", "table hint 'NOLOCK' is not allowed"),
        ("SELECT CAST(? AS text)", "data type 'text' is not allowed"),
        ("EXEC sp_executesql ?", r"procedure \['sp_executesql'\] is not allowed"),
        ("TRUNCATE TABLE [dbo].[t]", "statement kind"),
        ("SELECT DATEADD(ms, ?, GETUTCDATE())", "datepart 'ms' is not allowed"),
    ],
)
def test_the_allow_lists_name_the_offending_token(sql: str, pattern: str) -> None:
    with pytest.raises(StaticCheckFailure, match=pattern):
        check_static(sql)


def test_the_unbroken_originals_pass() -> None:
    """The examples above fail because of what was broken, not because the originals do."""
    for name in (
        "purge_expired_batch",
        "send",
        "peek_estimate",
        "create_table unicode_headers=True body_string=False",
    ):
        check_static(_plain(name))
