"""The import graph of the eqsat package is acyclic.

Every .py file under eqsat/ and extract/ (installed as eqsat.extract, pyproject.toml
package-dir) is a node, named by its module (a package by its `__init__`: eqsat.plan). An
edge a -> b is an import written in a of the eqsat module b:

- anywhere in the file: at module level and inside functions, methods and branches alike, as
  an import inside a function is only a deferred edge and a cycle through one is still a
  cycle (it merely fails later, at the call);
- except inside `if TYPE_CHECKING:` (its `else:` branch counts): those never run;
- relative imports resolved against the importing module's package (`from .base import X` in
  eqsat.extract.costs.roofline is eqsat.extract.costs.base);
- `from P import name` is an edge to the submodule P.name when that module exists
  (`from eqsat import calibrate` -> eqsat.backends.ort.calibrate), otherwise to P itself (`from eqsat import
  __version__` -> eqsat); an import of a package is an edge to its `__init__`; a dotted name
  that is not a module is taken at its longest prefix that is one.

The parents of an imported module are not edges: `import eqsat.extract.costs.roofline` runs
eqsat/__init__ and eqsat.extract/__init__ first, but so does every import of anything in the
package, and Python has already run (or is running) them when a submodule executes, so
counting them would put every package __init__ that imports a submodule on a cycle with all
of it and say nothing. An explicit import of a package is an edge, though, including a
submodule's import of its own parent (`from . import DEFAULT`, were eqsat.extract.costs.roofline
to write it, is an edge to eqsat.extract.costs): that one reads a name out of a half-run
__init__ when the __init__ imports the submodule, which is the cycle this test exists to catch. A module's import
of itself is not an edge.

Imports by string (importlib.import_module, the lazy `__getattr__` of eqsat and eqsat.plan)
are not seen. On failure each cycle is printed as `a -> b -> a`: a shortest cycle through each
module that is on any, so every module on a cycle appears (not every cycle: run it again after
breaking some).
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

import pytest

pytestmark = pytest.mark.no_egglog  # calls no egglog (tests/conftest.py's guard)

ROOT = Path(__file__).resolve().parent.parent
# Source folder -> the package it is installed as.
PACKAGES = {"eqsat": "eqsat", "extract": "eqsat.extract"}

# Edges on a cycle still, each to be broken next: left out of the graph; each must still be an
# edge on a cycle (test_not_yet_broken_is_not_stale), so that the set shrinks. Empty: the
# import graph is acyclic.
NOT_YET_BROKEN: set[tuple[str, str]] = set()


def _modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (its file, whether it is a package's __init__)."""
    found = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            is_init = parts[-1] == "__init__"
            if is_init:
                parts.pop()
            found[".".join([package, *parts])] = (path, is_init)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    """`TYPE_CHECKING` or `typing.TYPE_CHECKING`."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every Import and ImportFrom node of the tree outside `if TYPE_CHECKING:` bodies."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _as_module(name: str, modules) -> str | None:
    """The longest prefix of the dotted name that is one of our modules, or None."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _targets(node, module: str, is_init: bool, modules) -> set[str]:
    """The eqsat modules an import statement in `module` imports (see the module docstring)."""
    if isinstance(node, ast.Import):
        bases = [alias.name for alias in node.names]
        return {m for m in (_as_module(b, modules) for b in bases) if m}
    if node.level:
        package = module.split(".")
        if not is_init:
            package.pop()
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    else:
        base = node.module
    if not (base == "eqsat" or base.startswith("eqsat.")):
        return set()
    found = set()
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        target = submodule if submodule in modules else _as_module(base, modules)
        if target:
            found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the eqsat modules it imports, for every module of the package."""
    modules = _modules()
    graph = {}
    for module, (path, is_init) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        targets = set()
        for node in _imports(tree):
            targets |= _targets(node, module, is_init, modules)
        targets.discard(module)
        graph[module] = targets
    return graph


def _components(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components (the ILP extractor's Tarjan) of more than one node or
    with a self-loop."""
    from eqsat.extract.ilp import _sccs

    full = {m: set(graph.get(m, ())) for m in set(graph).union(*graph.values())}
    return [set(c) for c in _sccs(full) if len(c) > 1 or c[0] in full[c[0]]]


def _shortest_cycle(graph: dict[str, set[str]], start: str, within: set[str]) -> list[str]:
    """A shortest cycle start -> ... -> start inside the component (breadth first)."""
    previous = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph.get(node, ())):
            if child not in within:
                continue
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return [*reversed(path), start]
            if child not in previous:
                previous[child] = node
                queue.append(child)
    raise AssertionError(f"{start} is on no cycle")


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles of the graph, each as [a, b, ..., a]: a shortest one through every module that is
    on any; none when the graph is acyclic. Rotated to start at their least module, deduplicated."""
    cycles = []
    for component in _components(graph):
        for start in sorted(component):
            cycle = _shortest_cycle(graph, start, component)[:-1]
            first = cycle.index(min(cycle))
            cycle = cycle[first:] + cycle[:first]
            cycle.append(cycle[0])
            if cycle not in cycles:
                cycles.append(cycle)
    return sorted(cycles)


def _without(graph: dict[str, set[str]], edges) -> dict[str, set[str]]:
    return {a: {b for b in targets if (a, b) not in edges} for a, targets in graph.items()}


def test_import_graph_is_acyclic():
    cycles = find_cycles(_without(import_graph(), NOT_YET_BROKEN))
    assert not cycles, "import cycles (break one edge of each):\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles)


def test_not_yet_broken_is_not_stale():
    graph = import_graph()
    stale = []
    for a, b in sorted(NOT_YET_BROKEN):
        others = _without(graph, NOT_YET_BROKEN - {(a, b)})
        on_cycle = any({a, b} <= component for component in _components(others))  # b reaches a back
        if b not in graph.get(a, ()) or not on_cycle:
            stale.append(f"{a} -> {b}")
    assert not stale, "no longer an edge on a cycle: take them out of NOT_YET_BROKEN:\n" + "\n".join(stale)


def test_cycle_finder_reports_a_hand_made_cycle():
    graph = {"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": set(), "e": {"e"}, "f": {"g"}, "g": set()}
    assert find_cycles(graph) == [["a", "b", "c", "a"], ["e", "e"]]
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_graph_sees_every_kind_of_import():
    """The edges this test relies on: function-level, relative, package and `from P import submodule`."""
    graph = import_graph()
    assert "eqsat.extract" in graph and "eqsat.extract.costs.roofline" in graph
    # eqsat/cli/main.py: `from eqsat import __version__` (a name, not a module) at module level.
    assert "eqsat" in graph["eqsat.cli.main"]
    # eqsat/cli/optimize.py: `from eqsat.limits import Limits` inside _limits.
    assert "eqsat.limits" in graph["eqsat.cli.optimize"]
    # eqsat/cli/main.py: the command modules, imported by name (importlib) in build_parser.
    assert "eqsat.cli.optimize" not in graph["eqsat.cli.main"]
    # extract/costs/__init__.py imports its submodules relatively.
    assert "eqsat.extract.costs.roofline" in graph["eqsat.extract.costs"]
    # extract/ilp.py: `from .base import ...` (one level up, inside eqsat.extract).
    assert "eqsat.extract.base" in graph["eqsat.extract.ilp"]
    # eqsat/cli/plan.py: `from onnx import ModelProto` under TYPE_CHECKING is no edge, and
    # nothing outside the package is a node.
    assert all(t.startswith("eqsat") for targets in graph.values() for t in targets)
