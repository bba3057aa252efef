"""The package's import structure: no cycles, imports point down the layers, no runtime use of the examples.
A module holds one idea whatever its length: there is no line cap.

The graph is read from the source with ``ast`` (nothing is imported), and it counts every import statement:
at module level, inside functions (a deferred import is still a dependency, and deferring one to dodge a
cycle is exactly what these checks forbid) and under ``if TYPE_CHECKING:``. Type-only imports count for
every rule. For the layer rules, a type from a higher layer ties the lower one to it just the same. For the
cycle rule too: a type-only import never runs, so it cannot make an import order fail, but a circle of them
still ties two modules to each other (neither can change, be read or be reused without the other) and hides a
missing seam. A part that names its owner's class (a queue typed with its ``Transport``) says instead what it
needs of it, as a narrow ``typing.Protocol`` in a module beneath both (``transport/roles.py``,
``transport/queue/roles.py``, ``transport/pump/roles.py``).

``from pkg import name`` is an edge to ``pkg.name`` when that is a module of the package, else to ``pkg``.
Importing ``a.b.c`` is not counted as importing the package ``a.b`` (its ``__init__`` re-exports its own
children, so every such edge would be a cycle of no meaning).

Layers, lowest first (see docs/architecture.md): model <- dialects <- transport <- spark <- {handlers,
hooks, cli} <- the Airflow surface {triggers, sensors, queues, operators}. The core (model, dialects,
transport, handlers) imports neither Airflow nor PySpark; spark/ imports no Airflow.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "airflow_provider_sqlqueue"
PACKAGE_DIR = Path(__file__).resolve().parent.parent / PACKAGE

# The demo and test-support modules: the runtime package must not import them. Matched by name so the rule
# holds wherever they live (airflow_provider_sqlqueue/demo/ or the top level).
EXAMPLE_PACKAGE = "demo"
EXAMPLE_MODULE_NAMES = {"demo", "testing"}

CORE_LAYERS = {"model", "dialects", "transport", "handlers"}
# For each layer, the layers it may import besides itself.
ALLOWED: dict[str, set[str]] = {
    "model": set(),
    "dialects": {"model"},
    "transport": {"model", "dialects"},
    "handlers": {"model", "transport"},
    # The hook also lists and ends the Spark data source's staged runs (spark/staged_runs.py, no PySpark).
    "hooks": {"model", "dialects", "transport", "spark"},
    "spark": {"model", "dialects", "transport"},
    # The command line reads an Airflow connection through the hook when Airflow is installed, and lists
    # and ends staged runs through spark/staged_runs.py.
    "cli": {"model", "dialects", "transport", "hooks", "spark"},
    # The Airflow side of metrics: the deployment's metrics backend fed with the core's figures.
    "metrics": {"model", "transport"},
    "triggers": {"model", "dialects", "transport", "hooks", "metrics"},
    # A sensor in poke mode sends the gauges its trigger sends when deferred.
    "sensors": {"model", "dialects", "transport", "hooks", "triggers", "metrics"},
    "queues": {"model", "dialects", "transport", "hooks", "triggers"},
    "operators": {"model", "dialects", "transport", "handlers", "hooks", "triggers", "spark", "metrics"},
    # The Airflow plugin (the Queues page): a web app over the hook and the core, its settings' defaults
    # read from the provider's declaration of them (get_provider_info's config section).
    "plugins": {"model", "dialects", "transport", "hooks", "root"},
    # The package's __init__ and get_provider_info (the Airflow entry point) import nothing below them.
    "root": set(),
}
FORBIDDEN_EXTERNAL: dict[str, set[str]] = {
    **{layer: {"airflow", "pyspark"} for layer in CORE_LAYERS},
    "spark": {"airflow"},
}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str  # a module of the package, or a top-level external name
    line: int
    type_only: bool


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _type_only_nodes(tree: ast.AST) -> set[ast.AST]:
    nodes: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for statement in node.body:
                nodes.update(ast.walk(statement))
    return nodes


def _target(name: str) -> str:
    """The package module ``name`` is (itself or its nearest enclosing module), or its external root."""
    if not (name == PACKAGE or name.startswith(PACKAGE + ".")):
        return name.split(".")[0]
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports_of(module: str) -> list[Import]:
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    type_only = _type_only_nodes(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            names = [
                f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source
                for alias in node.names
            ]
        for name in dict.fromkeys(names):
            found.append(Import(module, _target(name), node.lineno, node in type_only))
    return found


IMPORTS: dict[str, list[Import]] = {module: imports_of(module) for module in MODULES}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "get_provider_info":
        return "root"
    return parts[1]


def is_example(module: str) -> bool:
    parts = module.split(".")[1:]
    return EXAMPLE_PACKAGE in parts or bool(parts and parts[-1] in EXAMPLE_MODULE_NAMES)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for following in sorted(graph.get(node, ())):
            if state.get(following) == 1:
                return [*path[path.index(following) :], following]
            if following not in state:
                cycle = visit(following)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_graph_sees_imports_inside_functions_and_relative_ones() -> None:
    edges = {(i.imported, i.type_only) for i in IMPORTS[f"{PACKAGE}.cli._support"]}
    assert (f"{PACKAGE}.hooks.sqlqueue", False) in edges  # imported inside a function
    assert (f"{PACKAGE}.transport", True) in edges  # under TYPE_CHECKING
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_between_modules() -> None:
    graph = {
        module: {i.imported for i in imports if i.imported in MODULES and i.imported != module}
        for module, imports in IMPORTS.items()
    }
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_imports_point_down_the_layers() -> None:
    wrong = []
    for module, imports in IMPORTS.items():
        layer = layer_of(module)
        if is_example(module) or layer not in ALLOWED:
            continue
        for found in imports:
            if found.imported in MODULES:
                target = layer_of(found.imported)
                if target != layer and target not in ALLOWED[layer] and not is_example(found.imported):
                    wrong.append(f"{module}:{found.line} ({layer}) imports {found.imported} ({target})")
            elif found.imported in FORBIDDEN_EXTERNAL.get(layer, ()):
                wrong.append(f"{module}:{found.line} ({layer}) imports {found.imported}")
    assert wrong == [], "imports against the layers:\n" + "\n".join(wrong)


def test_every_layer_is_known() -> None:
    unknown = {layer_of(module) for module in MODULES if not is_example(module)} - set(ALLOWED)
    assert unknown == set(), (
        f"modules in layers test_layering.py does not know: {unknown}; add them to ALLOWED"
    )


def test_runtime_package_imports_no_example_module() -> None:
    wrong = [
        f"{module}:{found.line} imports {found.imported}"
        for module, imports in IMPORTS.items()
        if not is_example(module)
        for found in imports
        if found.imported in MODULES and is_example(found.imported)
    ]
    assert wrong == [], "the runtime package imports demo, example or test modules:\n" + "\n".join(wrong)


def test_the_data_source_never_imports_the_drain() -> None:
    """The drain job is an application of the data source (it reads format("sqlqueue"), and its phase 1
    holds or receives with the source's parts): spark/drain/ imports spark/source/, never the other way,
    not even through a module between them (spark/runs.py, which both use)."""
    source, drain = f"{PACKAGE}.spark.source", f"{PACKAGE}.spark.drain"
    reached: dict[str, str] = {}  # module -> the source module it is reached from
    pending = [module for module in MODULES if module.startswith(source)]
    reached.update((module, module) for module in pending)
    while pending:
        module = pending.pop()
        for found in IMPORTS[module]:
            if found.imported in MODULES and found.imported not in reached:
                reached[found.imported] = reached[module]
                pending.append(found.imported)
    crossing = sorted(f"{start} -> {module}" for module, start in reached.items() if module.startswith(drain))
    assert not crossing, crossing
    drain_uses_source = any(
        found.imported.startswith(source)
        for module, imports in IMPORTS.items()
        if module.startswith(drain)
        for found in imports
    )
    assert drain_uses_source, "the drain no longer reads through the data source"


ARCHITECTURE = PACKAGE_DIR.parent / "docs" / "architecture.md"


def test_the_architecture_page_names_only_modules_that_exist_and_every_package() -> None:
    """docs/architecture.md is checked against the code: every module or folder it names in backticks
    exists (in the package, or at the top of the repository), and every subpackage is named on it."""
    import re

    text = ARCHITECTURE.read_text(encoding="utf-8")
    named = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_/]*(?:\.py|/))`", text))
    files = {path.relative_to(PACKAGE_DIR).as_posix() for path in PACKAGE_DIR.rglob("*.py")}
    folders = {
        path.relative_to(PACKAGE_DIR).as_posix() + "/" for path in PACKAGE_DIR.rglob("*") if path.is_dir()
    }
    known = files | folders
    missing = sorted(
        name
        for name in named
        if not (PACKAGE_DIR.parent / name).exists()
        and not any(item == name or item.endswith("/" + name) for item in known)
    )
    assert not missing, f"docs/architecture.md names what does not exist: {missing}"
    packages = {
        path.parent.relative_to(PACKAGE_DIR).as_posix()
        for path in PACKAGE_DIR.rglob("__init__.py")
        if path.parent != PACKAGE_DIR and "__pycache__" not in path.parts
    }
    layers = {layer for layer in ALLOWED if layer != "root"}
    mentions = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_./]*)`", text))
    forms = {
        mention.removeprefix(f"{PACKAGE}.").removesuffix("/").removesuffix(".py") for mention in mentions
    }
    unnamed = sorted(
        name for name in packages | layers if name not in forms and name.rsplit("/", 1)[-1] not in forms
    )
    assert not unnamed, f"docs/architecture.md does not name these packages or layers: {unnamed}"
