"""extraction-gym interchange: `eqsat export-egraph --format gym` writes files that gym's
checker and extractors accept (checked with extract/gym_port.py, a port of gym's Rust,
which cannot be built here), and `eqsat extract` reads gym's own files."""

from __future__ import annotations

import json

import onnx
import pytest

from eqsat.demo import build_model
from eqsat.extract import EGraph, check
from eqsat.extract import gym_port as gp

from .conftest import parse_model, run_cli

pytestmark = pytest.mark.no_egglog  # calls no egglog (tests/conftest.py's guard)

MODELS = {
    "demo-cnn": build_model,
    "matmul-add-relu": lambda: parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        agraph (float[2, 8] x) => (float[2, 4] y)
        <float[8, 4] w = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6,
                          1.7, 1.8, 1.9, 2.0, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6, 2.7, 2.8, 2.9, 3.0, 3.1, 3.2},
         float[4] b = {1.0, 2.0, 3.0, 4.0}>
        { m = MatMul(x, w)  a = Add(m, b)  y = Relu(a) }
    """),
    "transposes-and-shared": lambda: parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        agraph (float[3, 5] x) => (float[3, 5] y, float[5, 3] z)
        { t = Transpose<perm = [1, 0]>(x)  u = Transpose<perm = [1, 0]>(t)  i = Identity(u)
          r = Relu(i)  s = Relu(r)  y = Add(s, i)  z = Transpose<perm = [1, 0]>(y) }
    """),
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict:
    """Each model's saved e-graph, from `eqsat optimize --save-egraph`."""
    from eqsat.cli.main import main

    out = {}
    for name, build in MODELS.items():
        d = tmp_path_factory.mktemp(name)
        onnx.save(build(), str(d / "m.onnx"))
        rc = main([str(x) for x in ("optimize", d / "m.onnx", "-o", d / "o.onnx", "--save-egraph",
                                     d / "m.egraph.json", "-q", "--no-verify")])
        assert rc == 0
        out[name] = d / "m.egraph.json"
    return out


@pytest.mark.parametrize("cost_model", ["roofline", "node-count"])
def test_every_export_passes_gyms_check_with_both_extractors(capsys, tmp_path, saved, cost_model):
    for name, egraph in saved.items():
        gym = tmp_path / f"{name}.gym.json"
        rc, out, err = run_cli(capsys, "export-egraph", egraph, "--format", "gym", "--cost-model", cost_model,
                               "-o", gym)
        assert rc == 0, err
        assert f"costs under {cost_model}" in out
        data = json.loads(gym.read_text())
        assert set(data) == {"nodes", "root_eclasses", "class_data"}
        assert all(set(n) == {"op", "children", "eclass", "cost"} and n["cost"] > 0 for n in data["nodes"].values())
        saved_graph = EGraph.from_json(egraph)
        ctors = set(saved_graph.meta["constructors"])
        assert data["root_eclasses"] == list(dict.fromkeys(saved_graph.meta["roots"]))
        g = gp.GymEGraph(data)
        for extractor, run in gp.EXTRACTORS.items():
            choice = run(g)
            gp.check(g, choice)  # gym's result.check, ported
            for r in g.root_eclasses:  # a term, never an analysis table such as a Value handle
                nid = choice[r]
                assert nid.startswith("primitive-") or g.nodes[nid].op in ctors, (name, extractor, g.nodes[nid])
            assert gp.dag_cost(g, choice) <= gp.tree_cost(g, choice) + 1e-9
            # ids are eqsat's: the choice is one on the saved e-graph, and eqsat's checker agrees
            check(saved_graph, choice)


def test_the_raw_saved_file_is_what_gym_got_wrong(saved):
    """Why the export exists: read as it is, the saved file lets gym's bottom-up choose a
    Value handle (an analysis table) as the root."""
    g = gp.GymEGraph(json.loads(saved["demo-cnn"].read_text()))
    choice = gp.bottom_up(g)
    assert g.nodes[choice[g.root_eclasses[0]]].op == "Value"


def test_no_subsumed_node_and_no_forbidden_constructor_is_exported(capsys, tmp_path, saved):
    raw = json.loads(saved["demo-cnn"].read_text())
    subsumed = {nid for nid, n in raw["nodes"].items() if n.get("subsumed")}
    forbidden = set(raw["eqsat"]["forbidden"])
    assert subsumed, "the demo's e-graph holds subsumed nodes (rules/layout.egg's plain NCHWc Conv)"
    assert any(n["op"] in forbidden for n in raw["nodes"].values()), "and forbidden ones (ReorderFilter)"
    gym = tmp_path / "demo.gym.json"
    assert run_cli(capsys, "export-egraph", saved["demo-cnn"], "--format", "gym", "-o", gym)[0] == 0
    nodes = json.loads(gym.read_text())["nodes"]
    assert not subsumed & set(nodes)
    assert not {n["op"] for n in nodes.values()} & forbidden
    functions = set(raw["eqsat"]["functions"])
    assert not {n["op"] for n in nodes.values()} & functions  # no analysis table (shape, dtype, Value)
    for n in nodes.values():  # no dangling child: each names a kept node
        assert all(c in nodes for c in n["children"])


def test_a_node_whose_child_class_lost_every_node_is_dropped_to_a_fixpoint():
    from eqsat.extract.gym import to_gym

    # r: f(a) | leaf; a: g(b); b: only a table row, which is not a term. g goes, so f goes.
    data = {"nodes": {
        "f": {"op": "F", "eclass": "r", "children": ["g"]},
        "leaf": {"op": "L", "eclass": "r", "children": []},
        "g": {"op": "G", "eclass": "a", "children": ["t"]},
        "t": {"op": "table", "eclass": "b", "children": []}},
        "root_eclasses": ["r"], "class_data": {c: {"type": "Op"} for c in "rab"},
        "eqsat": {"constructors": ["F", "L", "G"], "functions": ["table"], "roots": ["r"]}}
    g = EGraph.from_json(data)
    out = to_gym(g, {nid: 1.0 for nid in g.nodes})
    assert list(out["nodes"]) == ["leaf"] and out["root_eclasses"] == ["r"]


CRAFTED = {  # a cycle (a -> b -> a) and zero costs, as in Tensat's e-graphs
    "nodes": {
        "r0": {"op": "root", "eclass": "r", "children": ["a0"], "cost": 1.0},
        "a0": {"op": "g", "eclass": "a", "children": ["b0"], "cost": 0.0},
        "a1": {"op": "y", "eclass": "a", "children": [], "cost": 3.0},
        "b0": {"op": "h", "eclass": "b", "children": ["a0"], "cost": 0.0},
        "b1": {"op": "x", "eclass": "b", "children": [], "cost": 0.0},
    },
    "root_eclasses": ["r"],
}


def test_extract_reads_a_gym_file_with_a_cycle_and_zero_costs(capsys, tmp_path):
    path = tmp_path / "crafted.json"
    path.write_text(json.dumps(CRAFTED))
    for extractor in ("ilp", "dag-greedy", "tree-greedy"):
        choice = tmp_path / f"{extractor}.json"
        rc, out, err = run_cli(capsys, "extract", path, "--extractor", extractor, "-o", choice)
        assert rc == 0, err
        assert f"{extractor}" in out and "under file-costs" in out and "DAG cost 1," in out
        picked = json.loads(choice.read_text())["choice"]
        assert picked == {"r": "r0", "a": "a0", "b": "b1"}
        check(EGraph.from_json(path), picked)  # eqsat's checker: rooted, closed, acyclic
        rc, out, err = run_cli(capsys, "extract", path, "--check", choice)
        assert rc == 0 and "valid for" in out, err
    g = gp.GymEGraph(CRAFTED)  # gym itself, ported, agrees
    for run in gp.EXTRACTORS.values():
        c = run(g)
        gp.check(g, c)
        assert gp.dag_cost(g, c) == 1.0


def test_file_costs_allow_zero_where_eqsats_models_may_not():
    from eqsat.extract.costs import CostModelError, FileCosts, make_cost_model
    from eqsat.extract.costs.base import check_costs

    g = EGraph.from_json(CRAFTED)
    costs = make_cost_model("file-costs").costs(g)
    assert costs["a0"] == 0.0 and isinstance(make_cost_model("file-costs"), FileCosts)
    with pytest.raises(CostModelError, match="costs must be finite and > 0"):
        check_costs(g, costs, "eqsat's contract")


def test_a_gym_file_with_a_dangling_child_is_refused_in_one_line(capsys, tmp_path):
    bad = json.loads(json.dumps(CRAFTED))
    bad["nodes"]["a0"]["children"] = ["nope"]
    path = tmp_path / "dangling.json"
    path.write_text(json.dumps(bad))
    rc, out, err = run_cli(capsys, "extract", path)
    assert rc == 2 and out == ""
    assert err.strip() == (f'eqsat: error: {path}: nodes["a0"].children[0]: expected the id of a node in "nodes", '
                           'got "nope"')
    with pytest.raises(gp.GymError, match="nope"):  # gym would panic on it too
        gp.bottom_up(gp.GymEGraph(bad))


def test_gyms_checker_refuses_what_gym_refuses():
    g = gp.GymEGraph(CRAFTED)
    with pytest.raises(gp.GymError, match="root e-class r is not chosen"):
        gp.check(g, {})
    with pytest.raises(gp.GymError, match="cycles"):
        gp.check(g, {"r": "r0", "a": "a0", "b": "b0"})
    with pytest.raises(gp.GymError, match="has no chosen node"):
        gp.check(g, {"r": "r0", "a": "a0"})
    with pytest.raises(gp.GymError, match="belongs to"):
        gp.check(g, {"r": "r0", "a": "b1", "b": "b1"})
