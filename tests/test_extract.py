"""extract/: the serialized e-graph, the checker, and the extractors, on hand-made and random
e-graphs."""

from __future__ import annotations

import itertools
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eqsat.extract import (
    EXTRACTORS,
    EGraph,
    ExtractionError,
    check,
    dag_cost,
    get_extractor,
    tree_cost,
)
from eqsat.extract.costs import CostModel


class OpCost(CostModel):
    """Cost from the node's `cost` field (as egglog writes it)."""

    name = "field"

    def node_cost(self, egraph, node):
        return node.cost


def egraph_json(classes: dict[str, list[tuple[str, list[str], float]]], roots: list[str]) -> dict:
    """{class: [(op, child classes, cost)]} -> egraph-serialize JSON."""
    nodes = {}
    first = {}
    for c, ns in classes.items():
        for i, (op, _kids, cost) in enumerate(ns):
            nid = f"{c}.{i}"
            first.setdefault(c, nid)
            nodes[nid] = {"op": op, "eclass": c, "cost": cost, "children": []}
    for c, ns in classes.items():
        for i, (_op, kids, _cost) in enumerate(ns):
            nodes[f"{c}.{i}"]["children"] = [first[k] for k in kids]
    return {"nodes": nodes, "root_eclasses": roots, "class_data": {c: {"type": "Op"} for c in classes}}


# x * 2 == x + x (shared x): the classic e-graph
SMALL = egraph_json(
    {
        "x": [("x", [], 1.0)],
        "two": [("2", [], 1.0)],
        "m": [("mul", ["x", "two"], 5.0), ("add", ["x", "x"], 2.0)],
        "r": [("relu", ["m"], 1.0), ("id", ["r"], 0.5)],  # a self loop, as Identity elimination leaves
    },
    ["r"],
)


def test_tree_greedy_picks_the_cheaper_node_and_passes_the_checker():
    g = EGraph.from_json(SMALL)
    ex = get_extractor("tree-greedy").extract(g, OpCost())
    check(g, ex.choice)
    assert g.nodes[ex.choice["m"]].op == "add"
    assert g.nodes[ex.choice["r"]].op == "relu"
    assert ex.tree_cost == 1 + 2 + 1 + 1  # relu + add + x + x
    assert ex.dag_cost == 1 + 2 + 1  # x once
    assert set(ex.choice) == {"r", "m", "x"}  # only the classes the roots need


def test_checker_rejects_missing_root_open_choice_and_cycles():
    g = EGraph.from_json(SMALL)
    with pytest.raises(ExtractionError, match="root e-class r"):
        check(g, {"m": "m.1", "x": "x.0"})
    with pytest.raises(ExtractionError, match="not closed"):
        check(g, {"r": "r.0", "m": "m.1"})
    with pytest.raises(ExtractionError, match=r"cycle: e-class r is its own descendant: r \(id\) -> r \(id\)"):
        check(g, {"r": "r.1"})
    with pytest.raises(ExtractionError, match="belongs to"):
        check(g, {"r": "m.0"})
    costs = OpCost().costs(g)
    for cost in (dag_cost, tree_cost):  # an unchecked, open choice: the same error, not a KeyError
        with pytest.raises(ExtractionError, match="not closed: e-class x has no chosen node"):
            cost(g, {"r": "r.0", "m": "m.1"}, costs)
        with pytest.raises(ExtractionError, match="not closed: root e-class r has no chosen node"):
            cost(g, {}, costs)


def test_function_tables_are_not_terms():
    data = egraph_json({"x": [("x", [], 1.0)], "s": [("vec-of", [], 1.0), ("shape", ["x"], 1.0)]}, ["x"])
    data["eqsat"] = {"constructors": ["x"]}
    g = EGraph.from_json(data)
    assert g.classes["s"] == []  # neither "vec-of" (not primitive-*) nor "shape" is a constructor
    data["nodes"]["primitive-IVec-1"] = data["nodes"].pop("s.0")
    g = EGraph.from_json(data)
    assert g.classes["s"] == ["primitive-IVec-1"]


def test_no_finite_term_is_an_error():
    g = EGraph.from_json(egraph_json({"a": [("f", ["a"], 1.0)]}, ["a"]))
    with pytest.raises(ExtractionError, match="no finite-cost term"):
        get_extractor("tree-greedy").extract(g, OpCost())


@pytest.mark.parametrize("name", sorted(EXTRACTORS))
def test_deep_reuse_past_float_range_still_extracts(name):
    # c_i = add(c_{i-1}, c_{i-1}): the tree cost doubles per level, 2^1100 overflows a
    # float (as a 10k-node transformer's original terms did); every extractor still finds the
    # chain, the tree cost saturates instead of becoming infinite, the DAG cost is exact
    depth = 1100
    classes = {"c0": [("x", [], 1.0)]}
    for i in range(1, depth + 1):
        classes[f"c{i}"] = [("add", [f"c{i - 1}", f"c{i - 1}"], 1.0)]
    g = EGraph.from_json(egraph_json(classes, [f"c{depth}"]))
    ex = get_extractor(name).extract(g, OpCost())
    check(g, ex.choice)
    assert len(ex.choice) == depth + 1
    assert ex.dag_cost == depth + 1
    assert math.isfinite(ex.tree_cost) and ex.tree_cost >= 1e300


def test_registry_says_which_extractors_are_optimal():
    assert "tree-greedy" in EXTRACTORS and EXTRACTORS["tree-greedy"].optimal is False
    assert EXTRACTORS["ilp"].optimal is True
    # exact only for the layouts it fixed from the greedy answer
    assert EXTRACTORS["ilp-fixed-layouts"].optimal is False
    with pytest.raises(KeyError, match="unknown extractor"):
        get_extractor("nope")


def test_the_earlier_name_ilp_layouts_is_the_ilp():
    """ilp-layouts chose the layouts with everything else before ilp did; old command lines
    get the ILP, and the name is not listed as an extractor of its own."""
    ex = get_extractor("ilp-layouts")
    assert type(ex).name == "ilp" and ex.fix_layouts is False
    assert "ilp-layouts" not in EXTRACTORS


@st.composite
def random_egraphs(draw):
    n = draw(st.integers(1, 6))
    names = [f"c{i}" for i in range(n)]
    classes = {}
    for c in names:
        k = draw(st.integers(1, 3))
        classes[c] = [
            (f"op{j}", draw(st.lists(st.sampled_from(names), max_size=2)), float(draw(st.integers(1, 9))))
            for j in range(k)
        ]
    return egraph_json(classes, ["c0"])


def brute_force(g: EGraph, costs: dict[str, float], measure) -> float:
    best = math.inf
    cls = [c for c in g.classes if g.classes[c]]
    for pick in itertools.product(*(g.classes[c] for c in cls)):
        choice = dict(zip(cls, pick, strict=True))
        try:
            check(g, choice)
        except ExtractionError:
            continue
        best = min(best, measure(g, choice, costs))
    return best


@settings(max_examples=150, deadline=None)
@given(random_egraphs())
def test_every_extractor_passes_the_checker_on_random_egraphs(data):
    g = EGraph.from_json(data)
    cost = OpCost()
    costs = cost.costs(g)
    optimum = brute_force(g, costs, tree_cost)
    dag_optimum = brute_force(g, costs, dag_cost)
    for name in EXTRACTORS:
        if math.isinf(optimum):
            with pytest.raises(ExtractionError):
                get_extractor(name).extract(g, cost)
            continue
        ex = get_extractor(name).extract(g, cost)
        check(g, ex.choice)
        assert ex.dag_cost == pytest.approx(dag_cost(g, ex.choice, costs))
        assert ex.dag_cost <= ex.tree_cost + 1e-9
        if name == "tree-greedy":
            assert ex.tree_cost == pytest.approx(optimum)  # bottom-up greedy is tree-optimal
        if EXTRACTORS[name].optimal:
            assert ex.dag_cost == pytest.approx(dag_optimum)
        assert ex.dag_cost >= dag_optimum - 1e-9  # nobody beats the optimum


def test_extract_runs_on_a_saved_egraph_without_egglog_or_onnx(tmp_path):
    import subprocess
    import sys

    from eqsat.core.pipeline import Options, optimize
    from eqsat.demo import build_model

    path = tmp_path / "e.json"
    res = optimize(build_model(), Options(save_egraph=path))
    code = f"""
import sys
from eqsat.extract import EGraph, check, get_extractor
from eqsat.extract.costs import NodeCount
g = EGraph.from_json({str(path)!r})
ex = get_extractor("tree-greedy").extract(g, NodeCount())
check(g, ex.choice)
assert not any(m == "egglog" or m.startswith(("egglog.", "onnx")) for m in sys.modules), sorted(sys.modules)
import importlib.util
assert importlib.util.find_spec("extract") is None, "a top-level package named extract is installed"
print(len(g.roots), len(ex.choice), round(ex.dag_cost, 3))
"""
    # a checkout's root on PYTHONPATH (running a worktree's tests) makes its extract/ folder
    # importable as a top-level package: not an installed one, so left out here
    import os
    from pathlib import Path

    keep = [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if e and not ((Path(e) / "extract").is_dir() and (Path(e) / "eqsat").is_dir())]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(keep)}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    roots, chosen, cost = p.stdout.split()
    # leaves cost ~0, and so do NCHWc reorders (extract/costs/node_count.py: not ops)
    ops = sum(n.op_type not in ("ReorderInput", "ReorderOutput") for n in res.model.graph.node)
    assert roots == "1" and int(chosen) > ops and ops <= float(cost) < ops + 1


def test_ilp_finds_the_shared_dag_that_greedy_misses():
    """A residual sum feeds LayerNorm and a MatMul. SkipLayerNormalization computes the
    LayerNorm and, as its 4th output, the sum itself: taking it for both is cheapest, but
    tree greedy chooses each class alone and keeps the Add as well; so does DAG greedy, whose
    reuse pass (extract/reuse.py) then finds a local improvement, not the optimum: the
    LayerNorm on the Add it computes anyway, without SkipLayerNormalization."""
    data = egraph_json(
        {
            "a": [("a", [], 0.001)],
            "b": [("b", [], 0.001)],
            "w": [("w", [], 0.001)],
            "skip": [("SkipLayerNormalization", ["a", "b"], 6.0)],
            "sum": [("Add", ["a", "b"], 3.0), ("Out3", ["skip"], 0.001)],
            "ln": [("LayerNormalization", ["sum"], 5.0), ("Out0", ["skip"], 0.001)],
            "mm": [("MatMul", ["sum", "w"], 10.0)],
        },
        ["ln", "mm"],
    )
    g = EGraph.from_json(data)
    greedy = {n: get_extractor(n).extract(g, OpCost()) for n in ("tree-greedy", "dag-greedy")}
    ilp = get_extractor("ilp").extract(g, OpCost())
    check(g, ilp.choice)
    assert g.nodes[ilp.choice["sum"]].op == "Out3" and g.nodes[ilp.choice["ln"]].op == "Out0"
    assert ilp.dag_cost == pytest.approx(16.005)  # SkipLayerNormalization + MatMul + leaves
    assert greedy["tree-greedy"].dag_cost == pytest.approx(19.004)  # SkipLayerNormalization and the Add
    dag = greedy["dag-greedy"]
    check(g, dag.choice)
    assert dag.dag_cost == pytest.approx(18.003)  # Add, LayerNormalization, MatMul
    assert g.nodes[dag.choice["ln"]].op == "LayerNormalization" and g.nodes[dag.choice["sum"]].op == "Add"
    assert dag.notes == ["reuse pass: 1 e-class(es) switched to a value the program computes anyway"]


def test_ilp_pays_for_the_value_nodes_it_needs():
    """Value classes (integers, attributes) are not decisions, but the DAG cost pays their
    nodes once: a cost model may charge them (the CostModel contract), and the ILP then picks
    the term whose attributes are cheaper, as the DAG cost says (it once left them out of its
    objective and answered 6.0 here, while both greedy extractors found 2.5)."""
    data = egraph_json(
        {
            "x": [("x", [], 0.5)],
            "big": [("big-attr", [], 4.0)],
            "small": [("small-attr", [], 0.5)],
            "r": [("ConvA", ["x", "big"], 1.0), ("ConvB", ["x", "small"], 1.5)],
        },
        ["r"],
    )
    for c in ("big", "small"):
        data["class_data"][c] = {"type": "i64"}
    g = EGraph.from_json(data)
    found = {n: get_extractor(n).extract(g, OpCost()) for n in ("tree-greedy", "dag-greedy", "ilp")}
    check(g, found["ilp"].choice)
    assert g.nodes[found["ilp"].choice["r"]].op == "ConvB"
    assert found["ilp"].dag_cost == pytest.approx(2.5) == found["dag-greedy"].dag_cost


@pytest.mark.parametrize("bad", [-1.0, 0.0, float("nan"), None, "1"])
def test_a_cost_that_breaks_the_contract_is_named(bad):
    """Every extractor gets its costs through CostModel.costs, which checks the contract: a
    negative cost made tree greedy loop, NaN gave a wrong error or a NaN answer, None a bare
    TypeError."""
    class Broken(CostModel):
        name = "broken"

        def node_cost(self, egraph, node):
            return bad if node.op == "add" else 1.0

    g = EGraph.from_json(SMALL)
    for name in EXTRACTORS:
        with pytest.raises(ValueError, match=rf"cost model broken: node m\.1 \(add in e-class m\) costs "
                                             rf"{re.escape(repr(bad))}"):
            get_extractor(name).extract(g, Broken())


def test_a_saved_egraph_says_what_made_it_and_measured_needs_its_timings(tmp_path):
    """--save-egraph records the resolved hardware profile, target, layout and rules (its
    facts and ops depend on them); the measured cost model refuses an e-graph saved without
    timings instead of silently pricing it as the roofline does."""
    from eqsat.backends.ort.target import hardware_profile
    from eqsat.core.pipeline import Options, saturate
    from eqsat.demo import build_model
    from eqsat.extract.costs import make_cost_model

    path = tmp_path / "g.json"
    saturate(build_model(), Options(save_egraph=path))
    g = EGraph.from_json(path)
    s = g.meta["settings"]
    from eqsat.backends.ort.target import nchwc_block

    assert s["hardware"] == hardware_profile("cpu") and s["target"] == "ort"
    assert s["layout"] == ("nchwc" if nchwc_block() else "nchw")  # the layout in effect
    assert s["default_rules"] is True and s["rules"] == []
    with pytest.raises(ValueError, match="no measured op times"):
        make_cost_model("measured", s["hardware"]).costs(g)
    assert get_extractor("ilp").extract(g, make_cost_model("roofline", s["hardware"])).dag_cost > 0


def test_a_saved_egraph_names_a_profile_file_by_its_absolute_path(tmp_path, monkeypatch):
    """`--hardware my.json` was saved as "my.json", which `eqsat extract` then looked for in
    whatever folder it ran from."""
    import shutil

    from eqsat.core.pipeline import Options, saturate
    from eqsat.demo import build_model
    from eqsat.extract.costs.roofline import HARDWARE_DIR

    monkeypatch.chdir(tmp_path)
    shutil.copy(HARDWARE_DIR / "cpu-avx2.json", tmp_path / "my.json")
    saturate(build_model(), Options(hardware="my.json", save_egraph=tmp_path / "g.json"))
    assert EGraph.from_json(tmp_path / "g.json").meta["settings"]["hardware"] == str(tmp_path / "my.json")


def test_an_egraph_from_a_newer_writer_is_refused():
    from eqsat.core.serialize import FORMAT as WRITTEN
    from eqsat.extract.egraph import FORMAT as READ

    assert WRITTEN == READ  # bump both together
    data = dict(SMALL, eqsat={"format": READ + 1})
    with pytest.raises(ValueError, match=f"e-graph format {READ + 1} is newer than this reader's"):
        EGraph.from_json(data)


def test_a_registered_cost_model_gets_the_profile_and_dims_when_it_takes_them(monkeypatch):
    from eqsat.extract.costs import COST_MODELS, make_cost_model

    class Aware(CostModel):
        name = "aware"

        def __init__(self, hardware, dims):
            self.hardware, self.dims = hardware, dims

        def node_cost(self, egraph, node):
            return 1.0

    class Plain(OpCost):
        name = "plain"

    monkeypatch.setitem(COST_MODELS, "aware", Aware)
    monkeypatch.setitem(COST_MODELS, "plain", Plain)
    m = make_cost_model("aware", "h200", {"batch": 4})
    assert (m.hardware, m.dims) == ("h200", {"batch": 4})
    assert isinstance(make_cost_model("plain", "h200", {"batch": 4}), Plain)
