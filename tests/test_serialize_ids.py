"""The saved e-graph names its nodes the same way in every process: egglog interns primitive
leaves (strings, integers) per process, so a model saturated after another one in the same
process used to get other ids and another digest than in a fresh process, and a choice file or
program set made in one was refused in the other."""

from __future__ import annotations

import subprocess
import sys

from eqsat import api
from eqsat.extract import EGraph

from .conftest import parse_model

FIRST = """<ir_version: 8, opset_import: ["" : 17]>
agraph (float[2, 3] a, float[2, 3] b) => (float[2, 3] y) {
    s = Add(a, b)
    y = Relu(s)
}"""

SECOND = """<ir_version: 8, opset_import: ["" : 17]>
agraph (float[4, 8] x, float[8, 4] w) => (float[4, 4] z) {
    m = MatMul(x, w)
    k = Constant <value = float {2.0}> ()
    z = Mul(m, k)
}"""

FRESH = """
import sys
from eqsat import api
from eqsat.extract import EGraph
api.optimize(sys.argv[1], save_egraph=sys.argv[2], verify=False)
print(EGraph.from_json(sys.argv[2]).digest())
"""


def test_an_e_graph_saved_second_in_a_process_has_the_digest_of_a_fresh_process(tmp_path):
    import onnx

    onnx.save(parse_model(FIRST), tmp_path / "first.onnx")
    onnx.save(parse_model(SECOND), tmp_path / "second.onnx")
    api.optimize(tmp_path / "first.onnx", save_egraph=tmp_path / "first.json", verify=False)
    api.optimize(tmp_path / "second.onnx", save_egraph=tmp_path / "here.json", verify=False)
    here = EGraph.from_json(tmp_path / "here.json")
    fresh = subprocess.run([sys.executable, "-c", FRESH, str(tmp_path / "second.onnx"), str(tmp_path / "fresh.json")],
                           capture_output=True, text=True, check=True).stdout.split()[-1]
    assert here.digest() == fresh
    assert sorted(here.nodes) == sorted(EGraph.from_json(tmp_path / "fresh.json").nodes)
