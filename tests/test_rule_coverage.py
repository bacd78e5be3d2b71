"""Every rewriting rule of the default rules has a test that shows it firing and one where it
must not fire.

A rewriting rule is one that `eqsat rules check` tests (its actions union terms or set a
shape or dtype; the others only derive facts for other rules) and whose ruleset is not
`analysis`. A rule is covered positively when some test passes its name in `fired=` of
`check_rewrite` (tests/conftest.py), negatively when some test passes it in `not_fired=`.
The tests are read, not run: `ast` finds each call of `check_rewrite` or of a test file's
wrapper of it (a function taking `fired` / `not_fired` and passing them on), and reads the
names from string constants, f-strings, lists, names bound to them and pytest parameters.
Every name read must be a rule of the default rules or of examples/ (a misspelt name in
`not_fired` would pass without testing anything), and every argument must be readable.
"""

from __future__ import annotations

import ast
import functools
import itertools
from collections import defaultdict
from pathlib import Path

import pytest

from eqsat.core.rulefiles import default_rule_files
from eqsat.ruletool.check import _has_checks
from eqsat.ruletool.model import read_files

pytestmark = pytest.mark.no_egglog  # calls no egglog (tests/conftest.py's guard)

TESTS = Path(__file__).resolve().parent
KINDS = ("fired", "not_fired")
CHECK = "check_rewrite"
CHECK_POSITIONS = {"fired": 2, "not_fired": 3}  # check_rewrite(model, expect_ops, fired, not_fired)


class Unreadable(Exception):
    """An argument the scan cannot reduce to rule names."""


# ---- the rules


@functools.cache
def _rules():
    return read_files(default_rule_files()).rules


@functools.cache
def rewriting_rules() -> dict[str, list[str]]:
    """Rewriting rule names by rule file name (conv.egg: [...])."""
    out: dict[str, list[str]] = defaultdict(list)
    for r in _rules():
        if r.ruleset != "analysis" and _has_checks(r):
            out[Path(r.path).name].append(r.name)
    return dict(out)


def rule_names() -> set[str]:
    """Every rule name of the default rules and of the shipped examples/*.egg (which tests
    load with rule_files=)."""
    examples = sorted((TESTS.parent / "examples").glob("*.egg"))
    return {r.name for r in read_files(default_rule_files() + examples).rules if r.name}


# ---- the scan


def _call_name(call: ast.Call) -> str | None:
    f = call.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return None


def _params(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]


class Scope:
    """Where a name is bound: a function's parameters (with pytest parameter values), its
    assignments and loops, then the module's."""

    def __init__(self, node: ast.AST, parent: Scope | None, forwarded: set[str] = frozenset()):
        self.parent = parent
        self.forwarded = forwarded  # a wrapper's own fired / not_fired: passed on, not read here
        self.bound: dict[str, list[ast.AST]] = defaultdict(list)
        self.params: set[str] = set()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.params = set(_params(node))
            for p, vals in _parametrized(node).items():
                self.bound[p] += vals
            positional = node.args.posonlyargs + node.args.args
            for d, p in zip(reversed(node.args.defaults), reversed(positional), strict=False):
                self.bound[p.arg].append(d)
        for stmt in node.body:
            for sub in _walk_same_scope(stmt):
                self._bind(sub)

    def _bind(self, n: ast.AST) -> None:
        if isinstance(n, ast.Assign):
            for t in n.targets:
                self._target(t, n.value)
        elif isinstance(n, (ast.AnnAssign, ast.AugAssign)) and n.value is not None:
            self._target(n.target, n.value)
        elif isinstance(n, (ast.For, ast.comprehension)):
            self._target(n.target, _Each(n.iter))

    def _target(self, t: ast.AST, value: ast.AST) -> None:
        if isinstance(t, ast.Name):
            self.bound[t.id].append(value)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for k, e in enumerate(t.elts):
                self._target(e, _Item(value, k))

    def lookup(self, name: str) -> list[ast.AST] | None:
        if name in self.forwarded:
            return []
        if name in self.bound:
            return self.bound[name]
        if name in self.params:
            raise Unreadable(f"parameter {name!r} has no pytest parameter values")
        return self.parent.lookup(name) if self.parent else None


class _Each(ast.AST):
    """Each element of an iterable (a loop variable)."""

    def __init__(self, of: ast.AST):
        super().__init__()
        self.of = of


class _Item(ast.AST):
    """Element k of each value of a tuple (unpacking)."""

    def __init__(self, of: ast.AST, k: int):
        super().__init__()
        self.of, self.k = of, k


def _walk_same_scope(node: ast.AST):
    """Nodes under `node`, not entering nested functions or classes."""
    yield node
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            yield from _walk_same_scope(child)


def _parametrized(fn: ast.FunctionDef) -> dict[str, list[ast.AST]]:
    """A test's pytest.mark.parametrize values, by parameter name."""
    out: dict[str, list[ast.AST]] = defaultdict(list)
    for d in fn.decorator_list:
        if not (isinstance(d, ast.Call) and _call_name(d) == "parametrize" and len(d.args) >= 2):
            continue
        names_node, values = d.args[0], d.args[1]
        if isinstance(names_node, ast.Constant) and isinstance(names_node.value, str):
            names = [s.strip() for s in names_node.value.split(",") if s.strip()]
        elif isinstance(names_node, (ast.List, ast.Tuple)):
            names = [e.value for e in names_node.elts if isinstance(e, ast.Constant)]
        else:
            continue
        for k, name in enumerate(names):
            out[name].append(_Item(_Each(values), k) if len(names) > 1 else _Each(values))
    return out


def _each(node: ast.AST, scope: Scope) -> list[ast.AST]:
    """The element expressions of an iterable expression."""
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        out = []
        for e in node.elts:
            out += _each(e.value, scope) if isinstance(e, ast.Starred) else [e]
        return out
    if isinstance(node, ast.Dict):
        return [k for k in node.keys if k is not None]
    call = node if isinstance(node, ast.Call) else None
    method = call.func.attr if call and isinstance(call.func, ast.Attribute) else None
    if method in ("keys", "items"):
        keys = _each(node.func.value, scope)
        if method == "keys":
            return keys
        vals = _values(node.func.value, scope)
        return [ast.Tuple(elts=[k, v]) for k, v in zip(keys, vals, strict=True)]
    if call and _call_name(call) in ("list", "tuple", "sorted", "set") and call.args:
        return _each(node.args[0], scope)
    if isinstance(node, ast.Name):
        bound = scope.lookup(node.id)
        if bound is None:
            raise Unreadable(f"name {node.id!r} is not bound in the test file")
        return [e for b in bound for e in _each(b, scope)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _each(node.left, scope) + _each(node.right, scope)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _each(node.left, scope)
    if isinstance(node, ast.IfExp):
        return _each(node.body, scope) + _each(node.orelse, scope)
    raise Unreadable(f"cannot iterate over {ast.unparse(node)!r}")


def _tuples(node: ast.AST, scope: Scope) -> list[ast.AST]:
    """The tuple values an expression can hold (to unpack)."""
    if isinstance(node, _Each):
        return [t for e in _each(node.of, scope) for t in _tuples(e, scope)]
    if isinstance(node, ast.Name):
        return [t for b in scope.lookup(node.id) or [] for t in _tuples(b, scope)]
    return [node]


def _tuple_elements(node: ast.AST, scope: Scope) -> list[ast.AST]:
    if isinstance(node, ast.Call) and _call_name(node) == "param":  # pytest.param(a, b, id=...)
        return list(node.args)
    return _each(node, scope)


def _values(node: ast.AST, scope: Scope) -> list[ast.AST]:
    if isinstance(node, ast.Dict):
        return list(node.values)
    if isinstance(node, ast.Name):
        return [v for b in scope.lookup(node.id) or [] for v in _values(b, scope)]
    raise Unreadable(f"cannot read the values of {ast.unparse(node)!r}")


def _strings(node: ast.AST, scope: Scope) -> set[str]:
    """Every string an argument can hold, read as a rule name or a collection of them."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str):
            return {node.value}
        if node.value is None:
            return set()
        raise Unreadable(f"{node.value!r} is not a rule name")
    if isinstance(node, _Each):
        return set().union(*(_strings(e, scope) for e in _each(node.of, scope)))
    if isinstance(node, _Item):
        out: set[str] = set()
        for t in _tuples(node.of, scope):
            elts = _tuple_elements(t, scope)
            if node.k < len(elts):
                out |= _strings(elts[node.k], scope)
        return out
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append([str(v.value)])
            elif isinstance(v, ast.FormattedValue):
                parts.append(sorted(_strings(v.value, scope)))
            else:
                raise Unreadable(f"cannot read {ast.unparse(node)!r}")
        return {"".join(p) for p in itertools.product(*parts)}
    if isinstance(node, ast.IfExp):
        return _strings(node.body, scope) | _strings(node.orelse, scope)
    if isinstance(node, ast.Name):
        bound = scope.lookup(node.id)
        if bound is None:
            raise Unreadable(f"name {node.id!r} is not bound in the test file")
        return set().union(*(_strings(b, scope) for b in bound))
    return set().union(*(_strings(e, scope) for e in _each(node, scope)))


def _wrappers(tree: ast.Module, known: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """A module's wrappers of check_rewrite: functions that pass their own `fired` /
    `not_fired` parameter on, as that bare name, to check_rewrite or another wrapper;
    name -> {kind: positional index}."""
    known = dict(known)
    fns = [fn for fn in tree.body if isinstance(fn, ast.FunctionDef)]
    changed = True
    while changed:  # a wrapper of a wrapper
        changed = False
        for fn in fns:
            ps = _params(fn)
            if fn.name in known or not set(KINDS) & set(ps):
                continue
            calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and _call_name(n) in known]
            for call in calls:
                passed = [kw.value for kw in call.keywords if kw.arg in KINDS]
                ks = known[_call_name(call)].values()
                passed += [call.args[k] for k in ks if k < len(call.args)]
                if any(isinstance(v, ast.Name) and v.id in KINDS and v.id in ps for v in passed):
                    known[fn.name] = {k: ps.index(k) for k in KINDS if k in ps}
                    changed = True
                    break
    return {k: v for k, v in known.items() if k != CHECK}


def scan_source(src: str, path: str, shared: dict[str, dict[str, int]] | None = None):
    """The rule names a test module passes in fired / not_fired: ({kind: {name: [where]}},
    [unreadable argument: where and why])."""
    tree = ast.parse(src, path)
    calls = {CHECK: CHECK_POSITIONS, **(shared or {})}
    calls.update(_wrappers(tree, calls))
    found: dict[str, dict[str, list[str]]] = {k: defaultdict(list) for k in KINDS}
    problems: list[str] = []

    def visit(node: ast.AST, scope: Scope) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                forwarded = set(KINDS) & set(_params(child)) if child.name in calls else set()
                visit(child, Scope(child, scope, forwarded))
                continue
            if isinstance(child, ast.Call) and _call_name(child) in calls:
                positions = calls[_call_name(child)]
                args = {kw.arg: kw.value for kw in child.keywords if kw.arg in KINDS}
                for kind, k in positions.items():
                    if kind not in args and k < len(child.args):
                        args[kind] = child.args[k]
                for kind, value in args.items():
                    where = f"{path}:{value.lineno}"
                    try:
                        for name in _strings(value, scope):
                            found[kind][name].append(where)
                    except Unreadable as e:
                        problems.append(f"{where}: {kind}={ast.unparse(value)}: {e}")
            visit(child, scope)

    visit(tree, Scope(tree, None))
    return found, problems


def scan_tests(root: Path = TESTS):
    """scan_source over every test module under `root`, with conftest.py's wrappers shared."""
    conftest = root / "conftest.py"
    shared = {}
    if conftest.is_file():
        tree = ast.parse(conftest.read_text(encoding="utf-8"))
        shared = _wrappers(tree, {CHECK: CHECK_POSITIONS})
    found: dict[str, dict[str, list[str]]] = {k: defaultdict(list) for k in KINDS}
    problems: list[str] = []
    for p in sorted(root.rglob("*.py")):
        f, pr = scan_source(p.read_text(encoding="utf-8"), str(p.relative_to(root.parent)), shared)
        for kind in KINDS:
            for name, where in f[kind].items():
                found[kind][name] += where
        problems += pr
    return found, problems


@pytest.fixture(scope="module")
def scanned():
    return scan_tests()


# ---- the scan reads what tests write


SAMPLE = '''
import pytest
from .conftest import check_rewrite

NEG = ["n-module"]

def check(model, ops, fired=(), not_fired=(), **kw):
    return check_rewrite(model, ops, fired, not_fired, **kw)

@pytest.mark.parametrize("side, rules", [("a", ["p-a"]), pytest.param("b", ["p-b"], id="b")])
def test_params(side, rules):
    check_rewrite(m, [], fired=rules, not_fired=[f"f-{side}", *NEG])

@pytest.mark.parametrize("bias", [True, False])
def test_ifexp(bias):
    acts = {"d-one": "Relu", "d-two": "Tanh"}
    check_rewrite(m, [], fired=list(acts) + ["c-lit" if bias else "c-other"])
    check(m, [], ["w-pos"], not_fired=("w-kw",))
    check_rewrite(m, [], None, ["pos-neg"])

@pytest.mark.parametrize("fired", ["t-param"])
def test_named_fired(fired):
    check_rewrite(m, [], fired=["t-lit", fired])

def test_loop():
    for rule, form in {"l-one": "Relu", "l-two": "Tanh"}.items():
        check_rewrite(m, [], not_fired=[rule])
'''


def test_the_scan_reads_every_form_tests_use():
    found, problems = scan_source(SAMPLE, "sample.py")
    assert problems == []
    assert sorted(found["fired"]) == ["c-lit", "c-other", "d-one", "d-two", "p-a", "p-b", "t-lit",
                                     "t-param", "w-pos"]
    assert sorted(found["not_fired"]) == ["f-a", "f-b", "l-one", "l-two", "n-module", "pos-neg",
                                         "w-kw"]


def test_the_scan_reports_what_it_cannot_read():
    src = "def test_x(names):\n    check_rewrite(m, [], fired=names, not_fired=[compute()])\n"
    found, problems = scan_source(src, "sample.py")
    assert len(problems) == 2 and all(p.startswith("sample.py:2: ") for p in problems)


def test_rewriting_rules_are_the_ones_rules_check_tests():
    rules = rewriting_rules()
    names = [n for ns in rules.values() for n in ns]
    assert len(names) == len(set(names)) and all(names)
    assert "analysis.egg" not in rules and "lang.egg" not in rules
    assert "conv-bn-fold" in rules["conv.egg"]
    assert "conv-const-tensor" not in rules["conv.egg"]  # ruleset analysis
    assert "neg-neg" in rules["algebra.egg"] and "splat-scalar" not in rules["algebra.egg"]
    assert "pad-contraction-source" in rules["contraction.egg"]  # sets shapes: checked


# ---- the suite


def test_every_argument_is_readable(scanned):
    _, problems = scanned
    assert not problems, "fired / not_fired the coverage scan cannot read:\n" + "\n".join(problems)


def test_every_name_in_fired_and_not_fired_is_a_rule(scanned):
    found, _ = scanned
    known = rule_names()
    bad = sorted(f"{where[0]}: {kind}: {name!r}"
                 for kind in KINDS for name, where in found[kind].items() if name not in known)
    assert not bad, "not a rule of the default rules or examples/:\n" + "\n".join(bad)


@pytest.mark.parametrize("egg", sorted(rewriting_rules()))
def test_every_rewriting_rule_is_shown_firing_and_not_firing(egg, scanned):
    found, _ = scanned
    rules = rewriting_rules()[egg]
    missing = {kind: [r for r in rules if r not in found[kind]] for kind in KINDS}
    assert not any(missing.values()), (
        f"rules/{egg}: {len(missing['fired'])} of {len(rules)} rewriting rules in no fired=: "
        f"{', '.join(missing['fired']) or '-'}; {len(missing['not_fired'])} in no not_fired=: "
        f"{', '.join(missing['not_fired']) or '-'}")
