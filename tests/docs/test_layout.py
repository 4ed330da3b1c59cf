"""The package's layout, read from its source: labkit's modules import one another without a cycle.

Every import counts, wherever it is written (module level, inside a function, under
``TYPE_CHECKING``): an import inside a function that dodges a cycle is still a cycle, only
one that shows up later, at run time. The graph is built with :mod:`ast`, so nothing is
imported to check it.
"""

from __future__ import annotations

import ast
import builtins
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "labkit"

#: Groups of modules that still import one another, each sorted. The test fails if one
#: disappears (remove it here) or a new one appears (break it): the list only ever shrinks.
#: It is empty: the last pair, engines <-> explorer, was broken by letting only the explorer
#: import the engines (see test_the_engines_import_nothing_of_the_lessons_machinery).
KNOWN_CYCLES: set[tuple[str, ...]] = set()


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


@functools.cache
def _parsed(path: Path) -> ast.Module:
    """A module's tree, parsed once a test process: a dozen tests read every module (about 0.4 s each time)."""
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    """For each labkit module, the labkit modules it imports anywhere in its text."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = _parsed(path)
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                # ``from . import store`` names a module; ``from .store import connect`` names its member.
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target != "labkit":
                    graph[name].add(target)
    return graph


def cycle_groups(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """Every group of two or more modules that import one another (directly or not), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: set[tuple[str, ...]] = set()

    def visit(node: str) -> None:  # Tarjan's algorithm; the graph is small enough to recurse
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.add(tuple(sorted(group)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def shortest_cycle(graph: dict[str, set[str]], group: tuple[str, ...]) -> list[str]:
    """One shortest import cycle through the group's first module, to name in a failure."""
    start, members = group[0], set(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph[node] & members):
                if succ == start:
                    return paths[node] + [start]
                if succ not in paths:
                    paths[succ] = paths[node] + [succ]
                    following.append(succ)
        frontier = following
    raise AssertionError(f"{group} is not a cycle")


#: The core: the source text's components (coordinator, provider adapter, contract, store and its
#: evidence record, receipts, recovery, crash points, invariants, status) and what they stand on.
#: They import one another and nothing else of labkit.
CORE = {
    "labkit.assessments", "labkit.children", "labkit.clock", "labkit.contract", "labkit.coordinator",
    "labkit.crashpoints", "labkit.database", "labkit.errors", "labkit.evidence", "labkit.invariants",
    "labkit.jsontext", "labkit.typed", "labkit.provider", "labkit.rabbitmq", "labkit.receipts", "labkit.recovery", "labkit.redaction",
    "labkit.report", "labkit.rules", "labkit.schema", "labkit.status", "labkit.steps", "labkit.store",
}
#: The later lessons' mechanisms (08-13): they may import the core and one another.
MECHANISMS = {
    "labkit.effects", "labkit.evaluation", "labkit.leases", "labkit.pool", "labkit.retention", "labkit.ticket_client",
    "labkit.ticket_store", "labkit.versioning", "labkit.worker",
}


def test_the_graph_sees_imports_at_every_level():
    graph = import_graph()
    assert "labkit.store" in graph["labkit.coordinator"]  # module level
    assert "labkit.lab.ticket_service" in graph["labkit.cli"]  # inside a function


def test_a_cycle_is_found_and_named():
    graph = {"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": {"b"}, "e": {"a"}}
    assert cycle_groups(graph) == {("a", "b", "c", "d")}
    assert shortest_cycle(graph, ("a", "b", "c", "d")) == ["a", "b", "c", "a"]


def test_no_import_cycle_in_labkit():
    graph = import_graph()
    found = cycle_groups(graph)
    new = sorted(found - KNOWN_CYCLES)
    gone = sorted(KNOWN_CYCLES - found)
    assert not new, "import cycles in labkit: " + "; ".join(" -> ".join(shortest_cycle(graph, group)) for group in new)
    assert not gone, "these known cycles are gone: remove them from KNOWN_CYCLES: " + "; ".join(map(str, gone))


def test_the_schema_imports_nothing_from_labkit():
    assert import_graph()["labkit.schema"] == set()


def test_the_errors_import_nothing_from_labkit():
    """Every module raises them, so labkit.errors must stand below every module."""
    assert import_graph()["labkit.errors"] == set()


def test_store_imports_no_later_lesson():
    later = {"labkit.effects", "labkit.leases", "labkit.receipts", "labkit.retention", "labkit.versioning"}
    assert not import_graph()["labkit.store"] & later


#: The command line and the package's entry points: they may import every layer.
ENTRY_POINTS = {"labkit", "labkit.__main__", "labkit.cli"}


def _lab(name: str) -> bool:
    return name == "labkit.lab" or name.startswith("labkit.lab.")


def test_only_the_entry_points_and_the_lab_import_the_lab():
    """labkit.lab holds what only teaches or measures; the workflow, its mechanisms and the engines never need it."""
    graph = import_graph()
    assert {"labkit.lab.explorer", "labkit.lab.exercises", "labkit.lab.naive", "labkit.lab.workspace"} <= set(graph)
    reached = {name: sorted(filter(_lab, graph[name])) for name in sorted(graph) if not _lab(name) and name not in ENTRY_POINTS}
    assert not {name: lab for name, lab in reached.items() if lab}


def test_the_engines_import_nothing_of_the_lessons_machinery():
    """The explorer picks an engine and hands it a broken variant; an engine never reaches back into the lab."""
    graph = import_graph()
    engines = {name for name in graph if name == "labkit.engines" or name.startswith("labkit.engines.")}
    assert engines >= {"labkit.engines", "labkit.engines.base", "labkit.engines.labkit", "labkit.engines.dbos"}
    reached = {name: sorted(filter(_lab, graph[name])) for name in sorted(engines)}
    assert not any(reached.values()), reached


def test_the_mechanisms_that_talk_to_the_lab_import_nothing_from_it():
    """The ticket client, the leased worker and the work pool serve the lab's service and
    measurements, never the other way round: the client never loads the server it talks to."""
    graph = import_graph()
    lab = {name for name in graph if name == "labkit.lab" or name.startswith("labkit.lab.")}
    assert {"labkit.lab.ticket_service", "labkit.lab.locks", "labkit.lab.races"} <= lab
    for mechanism in ("labkit.ticket_client", "labkit.worker", "labkit.pool"):
        seen, frontier = set(), [mechanism]
        while frontier:  # everything the mechanism imports, directly or not
            frontier = [target for name in frontier for target in graph[name] if target not in seen]
            seen.update(frontier)
        assert not seen & lab, (mechanism, sorted(seen & lab))
def test_the_core_imports_only_the_core():
    graph = import_graph()
    assert CORE <= set(graph), sorted(CORE - set(graph))
    reached = {name: sorted(graph[name] - CORE) for name in sorted(CORE) if graph[name] - CORE}
    assert not reached, f"core modules importing beyond the core: {reached}"


def test_the_mechanisms_import_only_the_core_and_one_another():
    graph = import_graph()
    assert MECHANISMS <= set(graph), sorted(MECHANISMS - set(graph))
    allowed = CORE | MECHANISMS
    reached = {name: sorted(graph[name] - allowed) for name in sorted(MECHANISMS) if graph[name] - allowed}
    assert not reached, f"mechanisms importing the lab or the entry points: {reached}"


def _late_labkit_imports(path: Path) -> list[str]:
    """The labkit imports of a module written inside a function or under ``if TYPE_CHECKING``."""
    found = []
    for node in ast.walk(_parsed(path)):
        late = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or (
            isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        )
        if not late:
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.ImportFrom) and (inner.level > 0 or (inner.module or "").startswith("labkit")):
                found.append(f"{path.name}:{inner.lineno}")
    return found


def test_the_core_imports_nothing_late():
    """No import inside a function, nor one only for type checking, dodges a cycle in the core."""
    modules = _modules()
    late = [where for name in sorted(CORE) for where in _late_labkit_imports(modules[name])]
    assert not late, late
    assert _late_labkit_imports(modules["labkit.cli"])  # the check sees one where there is one (the bench, loaded on demand)


#: The only modules that import part of labkit inside a function, each saying why in a comment:
#: the entry point imports the command with Ctrl-C held back; the command line loads each
#: command's own modules (the bench, the explorer, the engines, the ticket service and its client,
#: the pool, the evaluation, retention) only for that command, so a `run` starts without them;
#: the temporal engine loads its workflow's module (which imports the Temporal SDK at its top,
#: as the SDK wants) only in a worker.
LOADED_ON_DEMAND = {"labkit.__main__", "labkit.cli", "labkit.engines.temporal"}


def test_no_module_but_the_entry_points_imports_labkit_late():
    modules = _modules()
    late = {name: _late_labkit_imports(path) for name, path in sorted(modules.items()) if name not in LOADED_ON_DEMAND}
    assert not {name: found for name, found in late.items() if found}
    for name in sorted(LOADED_ON_DEMAND):
        source = modules[name].read_text(encoding="utf-8").splitlines()
        for where in _late_labkit_imports(modules[name]):
            line = int(where.rpartition(":")[2])
            nearby = " ".join(source[line - 4:line])
            assert "#" in nearby, f"{where}: a late import says why in a comment"


#: Exceptions of the core and the mechanisms that are not errors labkit raises to its caller:
#: the strict JSON reader's finding, which the evidence contract turns into EvidenceRejected.
NOT_RAISED_OUT = {"labkit.jsontext.JsonProblem"}


def _exception_classes(path: Path, exception_names: set[str]) -> list[str]:
    """The module's top-level classes whose base is one of ``exception_names``."""
    tree = _parsed(path)
    return [
        node.name for node in tree.body
        if isinstance(node, ast.ClassDef) and any(ast.unparse(base) in exception_names for base in node.bases)
    ]


def test_every_error_of_the_core_and_the_mechanisms_is_defined_in_labkit_errors():
    """One file lists every refusal of the workflow and its mechanisms (the lab's and the engines'
    own stay beside them). A class is an exception if its base is a builtin one or one of
    labkit.errors'."""
    modules = _modules()
    errors = modules["labkit.errors"]
    builtin = {name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)}
    defined = {node.name for node in _parsed(errors).body if isinstance(node, ast.ClassDef)}
    assert {"LabError", "StaleLease", "ScorerReadRefused"} <= defined  # the check reads the right file
    elsewhere = [
        f"{name}.{cls}"
        for name in sorted((CORE | MECHANISMS) - {"labkit.errors"})
        for cls in _exception_classes(modules[name], builtin | defined)
    ]
    assert sorted(set(elsewhere) - NOT_RAISED_OUT) == [], "define these in labkit/errors.py"
    assert sorted(NOT_RAISED_OUT - set(elsewhere)) == [], "gone: remove them from NOT_RAISED_OUT"
