"""Graphs at the edge of what computes anything: no outputs (refused, exit 2), outputs that
are graph inputs or constants, an output listed twice (optimized, and still right), and
e-graphs with no roots (each extractor answers the empty choice)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.cli.main import main
from eqsat.extract import EGraph, check, get_extractor
from eqsat.extract.costs import make_cost_model

from .conftest import assert_same_outputs, one_error, parse_model, run_cli

V = helper.make_tensor_value_info


def model_of(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def no_outputs() -> onnx.ModelProto:
    return model_of([helper.make_node("Relu", ["x"], ["y"])], [V("x", TensorProto.FLOAT, [2, 3])], [])


@pytest.mark.parametrize("command", [["optimize", "-o", "m.opt.onnx", "-q"],
                                     ["compare-costs", "-q", "--samples", "1", "--runs", "1"],
                                     ["plan", "-o", "p.json", "-q"], ["plan", "--execute", "-o", "p.json", "-q"]])
def test_a_model_with_no_outputs_is_refused_up_front(capsys, tmp_path, monkeypatch, command):
    # optimize and compare-costs: a traceback from scipy's milp; plan: a plan of dead values,
    # and with --execute onnxruntime's "At least one output should be requested"
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "m.onnx"
    onnx.save(no_outputs(), str(src))
    rc, _, err = run_cli(capsys, command[0], src, *command[1:])
    line = one_error(err)
    assert rc == 2 and line == ("eqsat: error: the model's graph has no outputs: it computes nothing observable; "
                                "list the values it should compute as graph outputs"), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]  # nothing left behind


def test_the_python_api_refuses_it_too():
    from eqsat.core.pipeline import Options, optimize, saturate
    from eqsat.errors import InputError

    with pytest.raises(InputError, match="has no outputs"):
        optimize(no_outputs(), Options())
    with pytest.raises(InputError, match="has no outputs"):
        saturate(no_outputs(), Options())


def _siblings() -> dict[str, onnx.ModelProto]:
    x = V("x", TensorProto.FLOAT, [2, 3])
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    const = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.ones((2, 3), np.float32)))
    return {
        "outputs are graph inputs": model_of([], [x], [V("x", TensorProto.FLOAT, [2, 3])]),
        "output is a Constant": model_of([const], [x], [V("c", TensorProto.FLOAT, [2, 3])]),
        "output is an initializer": model_of([], [x], [V("w", TensorProto.FLOAT, [2, 3])], [w]),
        "output listed twice": model_of([helper.make_node("Relu", ["x"], ["y"])], [x],
                                        [V("y", TensorProto.FLOAT, [2, 3])] * 2),
        "an input and a computed output": model_of([helper.make_node("Neg", ["x"], ["y"])], [x],
                                                   [V("x", TensorProto.FLOAT, [2, 3]),
                                                    V("y", TensorProto.FLOAT, [2, 3])]),
    }


@pytest.mark.parametrize("name", list(_siblings()))
def test_outputs_that_compute_little_are_optimized_and_right(capsys, tmp_path, name):
    m = _siblings()[name]
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(m, str(src))
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "-q", "--require-verification")
    assert rc == 0, err
    opt = onnx.load(str(out))
    assert [o.name for o in opt.graph.output] == [o.name for o in m.graph.output]
    assert_same_outputs(m, opt, rtol=0, atol=0)


@pytest.fixture(scope="module")
def rootless(tmp_path_factory) -> dict:
    """A saved e-graph with its roots taken away."""
    d = tmp_path_factory.mktemp("rootless")
    src, egraph = d / "m.onnx", d / "g.json"
    onnx.save(parse_model("""<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3] x) => (float[2, 3] y) { a = Relu(x)
 y = Sigmoid(a) }"""), str(src))
    assert main(["optimize", str(src), "-o", str(d / "o.onnx"), "--save-egraph", str(egraph), "-q"]) == 0
    data = json.loads(egraph.read_text())
    data["eqsat"]["roots"], data["root_eclasses"] = [], []
    return data


@pytest.mark.parametrize("extractor", ["ilp", "dag-greedy", "tree-greedy"])
@pytest.mark.parametrize("cost", ["node-count", "roofline"])
def test_every_extractor_answers_an_egraph_with_no_roots(rootless, extractor, cost):
    g = EGraph.from_json(rootless)
    assert g.roots == [] and g.nodes
    ex = get_extractor(extractor).extract(g, make_cost_model(cost, "cpu", {}))
    check(g, ex.choice)
    assert ex.choice == {} and ex.dag_cost == 0 and ex.tree_cost == 0


def test_extract_refuses_a_file_with_no_roots(capsys, tmp_path, rootless):
    path = tmp_path / "g.json"
    path.write_text(json.dumps(rootless))
    rc, _, err = run_cli(capsys, "extract", path)
    assert rc == 2 and one_error(err) == (f"eqsat: error: {path}: the e-graph names no roots (the model it was "
                                          "saved from has no outputs); `eqsat optimize --save-egraph` writes them")
