"""The `no_egglog` marker's guard (tests/conftest.py): while a marked test runs, every public
name of `egglog.bindings` raises, so a marked test that comes to use egglog fails in the
egglog-13 pass (the egglog-14 pass of `make test` leaves marked tests out)."""

from __future__ import annotations

import pytest

from .conftest import parse_model, refuse_egglog, roundtrip

MODEL = """<ir_version: 8, opset_import: ["": 17]>
g (float[2, 8] x) => (float[2, 8] y) { y = Relu(x) }"""


def _chain(e: BaseException | None) -> str:
    out = []
    while e is not None:
        out.append(str(e))
        e = e.__cause__ or e.__context__
    return " / ".join(out)


def test_the_guard_makes_an_e_graph_round_trip_fail():
    m = parse_model(MODEL)
    roundtrip(m)  # runs without the guard
    with pytest.MonkeyPatch.context() as mp:
        refuse_egglog(mp)
        with pytest.raises(BaseException) as info:  # noqa: B017 - eqsat may wrap what egglog's stand-in raised
            roundtrip(m)
    assert "marked no_egglog called egglog" in _chain(info.value), _chain(info.value)
    roundtrip(m)  # and the bindings are back


@pytest.mark.no_egglog
def test_a_marked_test_runs_under_the_guard():
    import egglog.bindings as b

    with pytest.raises(AssertionError, match="marked no_egglog called egglog"):
        b.EGraph()


def _egglog_facing() -> set[str]:
    """egglog, and each module of eqsat (eqsat/, extract/ as eqsat.extract) whose source imports it."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = {"egglog"}
    for top, pkg in (("eqsat", "eqsat"), ("extract", "eqsat.extract")):
        for f in (root / top).rglob("*.py"):
            if re.search(r"^\s*(from|import) egglog\b", f.read_text(), re.M):
                parts = f.relative_to(root / top).with_suffix("").parts
                out.add(".".join((pkg, *(parts[:-1] if parts[-1] == "__init__" else parts))))
    return out


def _imports(tree) -> set[str]:
    import ast

    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return out


def test_egglog_incidental_modules_hold_no_egglog_facing_test():
    """Each module that conftest.EGGLOG_INCIDENTAL leaves out of the egglog-14 pass exists, is
    a top-level test module (not tests/rules, tests/egg, nor the round-trip suite), holds no
    rule test, and imports neither egglog nor a module of eqsat that imports it."""
    import ast
    from pathlib import Path

    from .conftest import EGGLOG_INCIDENTAL

    here = Path(__file__).resolve().parent
    facing = _egglog_facing()
    assert {"egglog", "eqsat.core.saturate", "eqsat.core.rulefiles", "eqsat.lang.terms"} <= facing, facing
    names = [n for mods in EGGLOG_INCIDENTAL.values() for n in mods]
    assert len(names) == len(set(names)) and "test_roundtrip_onnx_suite.py" not in names
    for name in names:
        text = (here / name).read_text()
        tree = ast.parse(text)
        calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        keywords = {k.arg for n in ast.walk(tree) if isinstance(n, ast.Call) for k in n.keywords}
        assert not calls & {"check_rewrite", "rules_check", "assert_one_unsound"}, (name, calls)
        assert not keywords & {"fired", "not_fired"}, name
        bad = [m for m in _imports(tree) if any(m == f or m.startswith(f + ".") for f in facing)]
        assert not bad, f"{name} imports {bad}, which call egglog"


def test_the_egglog_incidental_marker_follows_the_table(request):
    """The marker is on exactly the tests of the modules in the table (this run's items)."""
    from .conftest import EGGLOG_INCIDENTAL

    names = {n for mods in EGGLOG_INCIDENTAL.values() for n in mods}
    items = request.session.items
    assert items
    for item in items:
        marked = item.get_closest_marker("egglog_incidental") is not None
        assert marked == (item.path.name in names and item.path.parent.name == "tests"), item.nodeid
