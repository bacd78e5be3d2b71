"""E-graph files and choice files are checked field by field: a malformed one is one line
naming the field (`FILE: nodes["12"].cost: expected a number >= 0, got "x"`), exit 2, never
a traceback, and never accepted with a cost no extractor can use (NaN, negative)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import onnx
import pytest

from eqsat.cli.main import main
from eqsat.extract import EGraph
from eqsat.extract.schema import EGraphFormatError

from .conftest import one_error, parse_model, run_cli

pytestmark = pytest.mark.no_egglog  # calls no egglog (tests/conftest.py's guard)

MODEL = """<ir_version: 8, opset_import: ["": 17]>
g (float[B, 8] x, float[B, 8] z) => (float[B, 8] y) {
  a = Relu(x)
  b = Add(a, z)
  y = Sigmoid(b)
}"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict:
    """The e-graph `eqsat optimize --save-egraph` wrote for a three-node model, as JSON."""
    d = tmp_path_factory.mktemp("schema")
    model, egraph = d / "m.onnx", d / "m.egraph.json"
    onnx.save(parse_model(MODEL), str(model))
    assert main(["optimize", str(model), "-o", str(d / "o.onnx"), "--save-egraph", str(egraph), "-q"]) == 0
    return json.loads(egraph.read_text())


def first_node(d: dict) -> str:
    return next(iter(d["nodes"]))


def first_class(d: dict) -> str:
    return d["nodes"][first_node(d)]["eclass"]


def an_op_node(d: dict) -> str:
    return next(k for k, n in d["nodes"].items() if n["op"] == "Relu")


# (what to break, the field the error names, what it expects): each a field eqsat reads
CASES = [
    (lambda d: d["nodes"][first_node(d)].__setitem__("cost", "x"),
     lambda d: f'nodes["{first_node(d)}"].cost', 'a number >= 0, got "x"'),
    (lambda d: d["nodes"][first_node(d)].__setitem__("cost", math.nan),
     lambda d: f'nodes["{first_node(d)}"].cost', "a number >= 0, got NaN"),
    (lambda d: d["nodes"][first_node(d)].__setitem__("cost", -1),
     lambda d: f'nodes["{first_node(d)}"].cost', "a number >= 0, got -1"),
    (lambda d: d["nodes"][first_node(d)].__setitem__("cost", True),
     lambda d: f'nodes["{first_node(d)}"].cost', "a number >= 0, got true"),
    (lambda d: d["nodes"][first_node(d)].__setitem__("eclass", 3),
     lambda d: f'nodes["{first_node(d)}"].eclass', "a string"),
    (lambda d: d["nodes"][first_node(d)].__setitem__("op", 3),
     lambda d: f'nodes["{first_node(d)}"].op', "a string"),
    (lambda d: d["nodes"][first_node(d)].pop("op"),
     lambda d: f'nodes["{first_node(d)}"].op', "a string, got nothing"),
    (lambda d: d["nodes"][first_node(d)].__setitem__("children", "ab"),
     lambda d: f'nodes["{first_node(d)}"].children', "a list of node ids"),
    (lambda d: d["nodes"][an_op_node(d)].__setitem__("children", ["nope"]),
     lambda d: f'nodes["{an_op_node(d)}"].children[0]', 'the id of a node in "nodes", got "nope"'),
    (lambda d: d["nodes"][first_node(d)].__setitem__("subsumed", "no"),
     lambda d: f'nodes["{first_node(d)}"].subsumed', "true or false"),
    (lambda d: d["nodes"].__setitem__(first_node(d), "x"),
     lambda d: f'nodes["{first_node(d)}"]', "an object"),
    (lambda d: d.__setitem__("nodes", []), lambda d: "nodes", "an object"),
    (lambda d: d.__setitem__("class_data", 3), lambda d: "class_data", "an object"),
    # without class_data the roofline indexed a node's inputs it could not type (IndexError;
    # found by tests/fuzz)
    (lambda d: d.pop("class_data"), lambda d: "class_data", "an object (e-class -> its type, shape and dtype), "
     "as eqsat writes it, got nothing"),

    (lambda d: d["class_data"].__setitem__(first_class(d), 3),
     lambda d: f'class_data["{first_class(d)}"]', "an object"),
    (lambda d: d["class_data"].__setitem__(first_class(d), {"type": 3}),
     lambda d: f'class_data["{first_class(d)}"].type', "a string"),
    (lambda d: d["class_data"].__setitem__(first_class(d), {"shape": "ab"}),
     lambda d: f'class_data["{first_class(d)}"].shape', "a list of integers"),
    (lambda d: d["class_data"].__setitem__(first_class(d), {"shape": [1, 2.5]}),
     lambda d: f'class_data["{first_class(d)}"].shape[1]', "an integer, got 2.5"),
    (lambda d: d["class_data"].__setitem__(first_class(d), {"dtype": 3}),
     lambda d: f'class_data["{first_class(d)}"].dtype', "a string"),
    # a padded weight's kept elements (extract/work.py): a share of them must be a number
    (lambda d: d["class_data"].__setitem__(first_class(d), {"unpadded_elements": -4}),
     lambda d: f'class_data["{first_class(d)}"].unpadded_elements', "a number > 0"),
    (lambda d: d.__setitem__("root_eclasses", "Op-1"), lambda d: "root_eclasses", "a list of e-class names"),
    (lambda d: d.__setitem__("eqsat", [1]), lambda d: "eqsat", "an object"),
    (lambda d: d["eqsat"].__setitem__("format", "x"), lambda d: "eqsat.format", "an integer >= 1"),
    (lambda d: d["eqsat"].__setitem__("format", 0), lambda d: "eqsat.format", "an integer >= 1"),
    (lambda d: d["eqsat"].__setitem__("constructors", 3), lambda d: "eqsat.constructors", "a list of strings"),
    (lambda d: d["eqsat"].__setitem__("functions", [3]), lambda d: "eqsat.functions[0]", "a string"),
    (lambda d: d["eqsat"].__setitem__("forbidden", "Gelu"), lambda d: "eqsat.forbidden", "a list of strings"),
    (lambda d: d["eqsat"].__setitem__("roots", "Op-1"), lambda d: "eqsat.roots", "a list of e-class names"),
    (lambda d: d["eqsat"].__setitem__("roots", ["Op-999999"]),
     lambda d: "eqsat.roots[0]", 'an e-class of the e-graph, got "Op-999999"'),
    (lambda d: d["eqsat"].__setitem__("outputs", {}), lambda d: "eqsat.outputs", "a list of strings"),
    (lambda d: d["eqsat"].__setitem__("dims", [1]), lambda d: "eqsat.dims", "an object"),
    (lambda d: d["eqsat"].__setitem__("dims", {"a": "B"}),
     lambda d: 'eqsat.dims["a"]', "a key that is a (negative) integer"),
    (lambda d: d["eqsat"].__setitem__("dims", {"-1": 3}), lambda d: 'eqsat.dims["-1"]', "a dimension name"),
    (lambda d: d["eqsat"].__setitem__("value_class", {"0": 1}),
     lambda d: 'eqsat.value_class["0"]', "an e-class name"),
    (lambda d: d["eqsat"].__setitem__("node_weight", {first_node(d): "x"}),
     lambda d: f'eqsat.node_weight["{first_node(d)}"]', 'a number > 0, got "x"'),
    (lambda d: d["eqsat"].__setitem__("measured_us", [1]), lambda d: "eqsat.measured_us", "an object"),
    (lambda d: d["eqsat"].__setitem__("measured_us", {first_node(d): -3}),
     lambda d: f'eqsat.measured_us["{first_node(d)}"]', "a number >= 0, got -3"),
    (lambda d: d["eqsat"].__setitem__("measured_us", {first_node(d): math.inf}),
     lambda d: f'eqsat.measured_us["{first_node(d)}"]', "a number >= 0, got Infinity"),
    (lambda d: d["eqsat"].__setitem__("settings", "x"), lambda d: "eqsat.settings", "an object"),
    (lambda d: d["eqsat"]["settings"].__setitem__("hardware", 3),
     lambda d: "eqsat.settings.hardware", "a hardware profile's name or path"),
    (lambda d: d["eqsat"]["settings"].__setitem__("dims", {"B": "x"}),
     lambda d: 'eqsat.settings.dims["B"]', 'an integer > 0, got "x"'),
    (lambda d: d["eqsat"]["settings"].__setitem__("dims", ["B"]), lambda d: "eqsat.settings.dims", "an object"),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_a_malformed_egraph_file_names_the_field(capsys, tmp_path, saved, case):
    breaks, field, expected = CASES[case]
    d = copy.deepcopy(saved)
    where = field(d)  # before the change: the node it names may be the one removed
    breaks(d)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    for model in ("node-count", "roofline", "measured"):
        rc, out, err = run_cli(capsys, "extract", path, "--cost-model", model)
        line = one_error(err)
        assert rc == 2 and out == "", err
        assert line.startswith(f"eqsat: error: {path}: {where}: expected {expected}"), line
    with pytest.raises(EGraphFormatError, match=f"^{_re(where)}: expected {_re(expected)}"):
        EGraph.from_json(d)  # the Python API says the same


def _re(s: str) -> str:
    import re

    return re.escape(s)


def test_a_well_formed_file_still_extracts(capsys, tmp_path, saved):
    path = tmp_path / "good.json"
    d = copy.deepcopy(saved)
    d["eqsat"]["measured_us"] = {an_op_node(d): 1.5}
    path.write_text(json.dumps(d))
    for model in ("node-count", "roofline", "measured"):
        rc, out, err = run_cli(capsys, "extract", path, "--cost-model", model)
        assert rc == 0 and "DAG cost" in out, err


@pytest.mark.parametrize("content, field, expected", [
    ('{"choice": {"a": "b"}, "dims": {"B": "x"}}', 'dims["B"]', 'an integer > 0, got "x"'),
    ('{"choice": {"a": "b"}, "dims": {"B": 0}}', 'dims["B"]', "an integer > 0, got 0"),
    ('{"choice": {"a": "b"}, "dims": [1]}', "dims", "an object"),
    ('{"choice": {"a": "b"}, "format": 0}', "format", "an integer >= 1"),
])
def test_a_malformed_choice_file_names_the_field(capsys, tmp_path, saved, content, field, expected):
    egraph = tmp_path / "g.json"
    egraph.write_text(json.dumps(saved))
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    rc, _, err = run_cli(capsys, "extract", egraph, "--check", bad, "--cost-model", "roofline")
    line = one_error(err)
    assert rc == 2 and line.startswith(f"eqsat: error: {bad}: {field}: expected {expected}"), line


def test_validation_checks_the_file_path_too(tmp_path, saved):
    d = copy.deepcopy(saved)
    d["nodes"][first_node(d)]["cost"] = "x"
    p = Path(tmp_path / "bad.json")
    p.write_text(json.dumps(d))
    with pytest.raises(EGraphFormatError, match="cost: expected a number >= 0"):
        EGraph.from_json(p)
