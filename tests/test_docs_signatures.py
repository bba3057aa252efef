"""The reference pages' signatures are the code's (inspect.signature).

- The parameter tables (``| Parameter | Default | Meaning |``) of the operator, sensor and trigger pages:
  every row names a parameter of the class of the section it is in (the nearest heading that names a
  class), its default is the code's, and every parameter of the class's own ``__init__`` has a row.
- The calls in the Python blocks of those pages and of docs/hook.md: every call of a documented class, or
  of a method of ``hook``, binds to the real signature (no unknown keyword, no extra positional argument;
  an operator's other keywords must be BaseOperator's). A call written as a signature (its positional
  arguments named as the parameters, e.g. ``hook.send(queue_name, body, headers=None)``, or only keywords
  with the code's defaults) lists every parameter, with the code's defaults.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")

import airflow_provider_sqlqueue
from airflow_provider_sqlqueue.hooks.sqlqueue import SqlQueueHook

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
PAGES = sorted(
    {
        *DOCS.glob("operators*.md"),
        DOCS / "hook.md",
        DOCS / "sensor.md",
        DOCS / "triggers.md",
        DOCS / "spark.md",
    }
)
FENCE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
HEADING = re.compile(r"^#{1,4} (.+?)\s*$")
TABLE_HEAD = re.compile(r"^\| *Parameter *\| *Default *\|")
ROW = re.compile(r"^\| *((?:`[A-Za-z_][A-Za-z0-9_]*`(?: */ *)?)+) *\| *([^|]*?) *\|")
KEYWORD_ONLY_MARK = "KEYWORD_ONLY_MARK"
UNSET = object()


def documented_classes() -> dict[str, type]:
    """The Airflow surface's public classes by name: operators, sensors, triggers, the hook."""
    found: dict[str, type] = {}
    for area in ("operators", "sensors", "triggers", "hooks"):
        package = importlib.import_module(f"{airflow_provider_sqlqueue.__name__}.{area}")
        for module_info in pkgutil.iter_modules(package.__path__):
            if module_info.name.startswith("_"):
                continue
            module = importlib.import_module(f"{package.__name__}.{module_info.name}")
            for name, value in vars(module).items():
                if (
                    inspect.isclass(value)
                    and value.__module__ == module.__name__
                    and not name.startswith("_")
                ):
                    found[name] = value
    return found


CLASSES = documented_classes()


def base_operator_parameters() -> set[str]:
    from airflow.sdk import BaseOperator

    return set(inspect.signature(BaseOperator.__init__).parameters)


def inherited_parameters(cls: type) -> set[str]:
    """What the class's ``**kwargs`` reach: the parameters of every ``__init__`` up its bases (an operator
    that extends the Spark provider's passes ``conn_id`` and ``conf`` on), and BaseOperator's."""
    names = base_operator_parameters()
    for base in cls.__mro__:
        if "__init__" in vars(base) and base is not object:
            names |= set(inspect.signature(base.__init__).parameters)
    return names - {"self", "args", "kwargs"}


def own_parameters(cls: type) -> dict[str, inspect.Parameter]:
    signature = inspect.signature(cls.__init__)
    return {
        name: parameter
        for name, parameter in signature.parameters.items()
        if name != "self" and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
    }


# ---- parameter tables -------------------------------------------------------------------------------------
def parameter_tables() -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(page, class name, rows) for every parameter table, the class being that of the nearest heading."""
    tables = []
    for page in PAGES:
        current: str | None = None
        rows: list[tuple[str, str]] | None = None
        lines = FENCE.sub("", page.read_text(encoding="utf-8")).splitlines()
        for line in [*lines, ""]:
            heading = HEADING.match(line)
            if heading:
                named = [word for word in re.findall(r"[A-Za-z_]+", heading.group(1)) if word in CLASSES]
                current = named[0] if named else current
            if rows is not None:
                row = ROW.match(line)
                if row:
                    rows.extend((name, row.group(2)) for name in re.findall(r"`(\w+)`", row.group(1)))
                    continue
                if not line.startswith("|"):
                    tables.append((str(page.relative_to(REPO)), current or "?", rows))
                    rows = None
            if TABLE_HEAD.match(line):
                rows = []
    return tables


TABLES = parameter_tables()


def shown_default(text: str) -> Any:
    """A Default cell as a value: ``required`` is no default; a Python literal is itself; any other text
    (a word such as ``sqlqueue_default``) is the string."""
    text = text.strip().strip("`").strip()
    if text == "required":
        return inspect.Parameter.empty
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text if re.fullmatch(r"[A-Za-z0-9_.@\[\]-]+", text) else UNSET


def test_the_pages_have_parameter_tables_of_documented_classes() -> None:
    classes = {name for _, name, _ in TABLES}
    assert "?" not in classes, [(page, rows[:1]) for page, name, rows in TABLES if name == "?"]
    assert {"SendMessageOperator", "ConsumeMessagesOperator", "QueueSensor"} <= classes


@pytest.mark.parametrize("class_name", sorted({name for _, name, _ in TABLES}))
def test_a_parameter_table_is_the_classs_signature(class_name: str) -> None:
    cls = CLASSES[class_name]
    parameters = own_parameters(cls)
    accepted = set(parameters) | inherited_parameters(cls)
    shown: dict[str, str] = {}
    problems = []
    for page, name, rows in TABLES:
        if name != class_name:
            continue
        for parameter, default in rows:
            shown[parameter] = default
            if parameter not in accepted:
                problems.append(f"{page}: {class_name} has no parameter {parameter!r}")
                continue
            value = shown_default(default)
            real = parameters[parameter].default if parameter in parameters else UNSET
            if value is not UNSET and real is not UNSET and not _same(value, real):
                problems.append(
                    f"{page}: {class_name}({parameter}=...) defaults to {real!r}, not {default!r}"
                )
    missing = sorted(set(parameters) - set(shown))
    if missing:
        problems.append(f"{class_name}'s parameters without a row: {missing}")
    assert not problems, "\n".join(problems)


def _same(shown: Any, real: Any) -> bool:
    if shown is inspect.Parameter.empty or real is inspect.Parameter.empty:
        return shown is real
    if real is None:
        return True  # resolved when the task runs (e.g. from PumpSettings): the page shows the outcome
    if isinstance(real, str | bool | int | float | tuple | list | dict):
        return shown == real or (isinstance(real, tuple | list) and list(shown or []) == list(real))
    return str(shown) == str(getattr(real, "value", real))


# ---- calls in the Python blocks ---------------------------------------------------------------------------
def documented_calls() -> list[tuple[str, str, ast.Call]]:
    """(page, callee, call) for every call of a documented class or of ``hook.<method>`` in a Python block;
    a bare ``*`` among a signature's arguments (not Python) is read as a marker."""
    calls = []
    for page in PAGES:
        for block in FENCE.findall(page.read_text(encoding="utf-8")):
            source = re.sub(r"(?<=[(,])(\s*)\*(?=\s*,)", rf"\1{KEYWORD_ONLY_MARK}=...", block)
            tree = ast.parse(source)
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                callee = node.func
                if isinstance(callee, ast.Name) and callee.id in CLASSES:
                    calls.append((str(page.relative_to(REPO)), callee.id, node))
                elif (
                    isinstance(callee, ast.Attribute)
                    and isinstance(callee.value, ast.Name)
                    and callee.value.id == "hook"
                ):
                    calls.append((str(page.relative_to(REPO)), f"hook.{callee.attr}", node))
    return calls


CALLS = documented_calls()


def target_of(callee: str) -> tuple[Any, bool]:
    """The function a documented call calls, and whether it is an operator's or sensor's constructor."""
    if callee.startswith("hook."):
        return getattr(SqlQueueHook, callee.removeprefix("hook.")), False
    cls = CLASSES[callee]
    from airflow.sdk import BaseOperator

    return cls.__init__, issubclass(cls, BaseOperator)


def accepted_through_kwargs(callee: str) -> set[str] | None:
    """The keywords an operator's ``**kwargs`` accept (None: any, as a hook method's options)."""
    if callee.startswith("hook."):
        return None
    cls = CLASSES[callee]
    from airflow.sdk import BaseOperator

    return inherited_parameters(cls) if issubclass(cls, BaseOperator) else None


def written_as_signature(call: ast.Call, parameters: list[inspect.Parameter]) -> bool:
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = [arg.id if isinstance(arg, ast.Name) else None for arg in call.args]
    if names and names[0] is not None and positional and names[0] == positional[0].name:
        return True
    if call.args or not call.keywords:
        return False
    defaults = {p.name: p.default for p in parameters}
    matched = 0
    for keyword in call.keywords:
        if keyword.arg is None or not isinstance(keyword.value, ast.Constant):
            return False
        if keyword.arg not in defaults:
            continue  # taken by **kwargs (the hook's connection id goes to DbApiHook)
        if defaults[keyword.arg] != keyword.value.value:
            return False
        matched += 1
    return matched > 0


def call_problems(page: str, callee: str, call: ast.Call) -> list[str]:
    function, _ = target_of(callee)
    parameters = [p for p in inspect.signature(function).parameters.values() if p.name != "self"]
    by_name = {p.name: p for p in parameters}
    where = f"{page}: {ast.unparse(call)[:120]}"
    marker = any(keyword.arg == KEYWORD_ONLY_MARK for keyword in call.keywords)
    args = call.args
    if any(isinstance(arg, ast.Starred) for arg in args):
        return []
    problems = []
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    takes_more = any(p.kind == p.VAR_POSITIONAL for p in parameters)
    if len(args) > len(positional) and not takes_more:
        problems.append(f"{where}: {len(args)} positional arguments, {callee} takes {len(positional)}")
    takes_any = any(p.kind == p.VAR_KEYWORD for p in parameters)
    through_kwargs = accepted_through_kwargs(callee)
    named = [k for k in call.keywords if k.arg not in (None, KEYWORD_ONLY_MARK)]
    for keyword in named:
        if keyword.arg in by_name and by_name[keyword.arg].kind != inspect.Parameter.POSITIONAL_ONLY:
            continue
        if takes_any and (through_kwargs is None or keyword.arg in through_kwargs):
            continue
        problems.append(f"{where}: {callee} has no parameter {keyword.arg!r}")
    if written_as_signature(call, parameters) or marker:
        problems += signature_problems(where, callee, call, args, marker, parameters)
    return problems


def signature_problems(
    where: str,
    callee: str,
    call: ast.Call,
    args: list[ast.expr],
    marked: bool,
    parameters: list[inspect.Parameter],
) -> list[str]:
    problems = []
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for arg, parameter in zip(args, positional, strict=False):
        if isinstance(arg, ast.Name) and arg.id != parameter.name:
            problems.append(f"{where}: {callee}'s parameter is {parameter.name!r}, not {arg.id!r}")
    listed = {p.name for p in positional[: len(args)]}
    for keyword in call.keywords:
        if keyword.arg is None:
            listed |= {p.name for p in parameters if p.kind == p.VAR_KEYWORD}
            continue
        if keyword.arg == KEYWORD_ONLY_MARK:
            continue
        listed.add(keyword.arg)
        real = next((p.default for p in parameters if p.name == keyword.arg), UNSET)
        known = real is not UNSET and real is not inspect.Parameter.empty
        if known and isinstance(keyword.value, ast.Constant) and keyword.value.value != real:
            problems.append(f"{where}: {callee}({keyword.arg}=...) defaults to {real!r}")
    kinds = [inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY]
    if marked:
        kinds += [inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD]
    elif not args:
        kinds.append(inspect.Parameter.KEYWORD_ONLY)
    missing = [p.name for p in parameters if p.kind in kinds and p.name not in listed]
    if missing:
        problems.append(f"{where}: the signature leaves out {missing}")
    return problems


def test_the_pages_have_calls_to_check() -> None:
    callees = {callee for _, callee, _ in CALLS}
    assert {"SqlQueueHook", "hook.send", "hook.end_staged_run", "SendMessageOperator"} <= callees, callees


@pytest.mark.parametrize("page", sorted({page for page, _, _ in CALLS}))
def test_every_documented_call_binds_to_the_real_signature(page: str) -> None:
    problems = [
        problem for p, callee, call in CALLS if p == page for problem in call_problems(p, callee, call)
    ]
    assert not problems, "\n".join(problems)


def test_the_checks_catch_a_left_out_parameter_and_an_unknown_one() -> None:
    def problems_of(source: str) -> list[str]:
        (call,) = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)]
        callee = ast.unparse(call.func)
        return call_problems("x.md", callee, call)

    assert problems_of(
        'SqlQueueHook(sqlqueue_conn_id="sqlqueue_default", default_schema=None, error_queue=None)'
    )
    assert problems_of("hook.end_staged_run(queue_name, run_id, action)")
    assert problems_of('SendMessageOperator(task_id="t", queue_name="q", body="x", priority_level=3)')
    assert not problems_of('SendMessageOperator(task_id="t", queue_name="q", body="x", retries=3)')
