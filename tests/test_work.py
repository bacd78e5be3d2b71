"""The work report and bound (extract/work.py): the input program recorded in the e-graph,
its FLOPs and contractions beside the output's, and the ILP's bound applied only where the
whole input program was matched."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from eqsat.core.pipeline import Options, optimize, saturate
from eqsat.extract import EGraph
from eqsat.extract.schema import EGraphFormatError

from .conftest import rule_test_profile

RNG = np.random.default_rng(0)


def convs(n: int = 3, c: int = 16) -> onnx.ModelProto:
    """n 3x3 convs of c channels with Relu, 14x14."""
    nodes, inits, x = [], [], "x"
    for i in range(n):
        inits.append(numpy_helper.from_array((RNG.standard_normal((c, c, 3, 3)) * 0.1).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        x = f"r{i}"
    g = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, c, 14, 14])],
                          [helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, [1, c, 14, 14])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_the_report_gives_the_input_and_output_work():
    res = optimize(convs(), Options(layout="nchw"))
    w = res.report["work"]
    flops = 3 * 2 * 16 * 14 * 14 * 16 * 9  # each conv: 2 x outputs x (input channels x kernel)
    assert w["input"]["contractions"] == w["output"]["contractions"] == 3
    assert w["input"]["flops"] >= flops and w["output"]["flops"] >= flops
    assert w["input"]["ops"] == 6 and w["output"]["ops"] == 3  # Conv + Relu fused
    assert w["more"] == []


def test_eqsat_s_own_blocked_output_optimized_again_is_bounded_by_its_own_convs(block):
    # its com.microsoft.nchwc.Conv nodes are the e-graph's NchwcConv: the input program is
    # matched whole, its 4 convolutions bound the output's (before the match by constructor
    # name, they counted 0 and the ILP fell back to solving without the bound)
    first = optimize(convs(4, 32), Options())
    if not any(n.domain == "com.microsoft.nchwc" for n in first.model.graph.node):
        pytest.skip("onnxruntime has no NCHWc kernels here")
    again = optimize(first.model, Options())
    st = saturate(first.model, Options())
    assert st.egraph.meta["input_complete"] is True
    assert again.report["work"]["input"]["contractions"] == again.report["work"]["output"]["contractions"] == 4
    assert not any("no program within" in n for n in again.report["extraction"]["notes"])
    assert not any("does more" in w for w in again.report["warnings"])


def test_a_saved_e_graph_records_the_input_program(tmp_path):
    path = tmp_path / "g.json"
    optimize(convs(), Options(layout="nchw", save_egraph=path))
    data = json.loads(path.read_text())
    assert data["eqsat"]["input_complete"] is True
    g = EGraph.from_json(data)
    assert [g.nodes[n].op for n in g.meta["input_nodes"]].count("Conv") == 3
    data["eqsat"]["input_complete"] = "yes"
    with pytest.raises(EGraphFormatError, match="input_complete"):
        EGraph.from_json(data)


def test_each_input_node_counts_even_where_it_shares_an_e_class():
    # Identity(MatMul(x, w)): the Identity's e-class is the MatMul's; counted per e-class the
    # MatMul was lost (ConvNeXt's input counted 23 of its 59 contractions, and the ILP found
    # no program within that bound)
    w = numpy_helper.from_array((RNG.standard_normal((8, 8)) * 0.3).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Identity", ["m"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 8])], [w])
    res = optimize(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), Options())
    w = res.report["work"]
    assert w["input"]["contractions"] == w["output"]["contractions"] == 1
    assert not any("no program within" in n for n in res.report["extraction"]["notes"])


def test_a_node_with_several_outputs_is_matched_through_its_output_projection():
    # Resize (optional inputs) is carried with Out(op, 0) in its output's e-class: matched
    # through it, the input program is whole and bounds the extraction
    m = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
        agraph (float[1, 16, 14, 14] x) => (float[1, 16, 28, 28] y) {
            roi = Constant <value = float[0] {}> ()
            sc = Constant <value = float[4] {1.0, 1.0, 2.0, 2.0}> ()
            y = Resize <mode = "nearest"> (x, roi, sc)
        }""")
    st = saturate(m, Options())
    assert st.egraph.meta["input_complete"] is True


def test_flops_on_padded_channels_are_declared_and_not_more_work(blocked):
    """Three blocked convs whose middle one has 1.5 blocks of output channels, computed padded
    to 2 (rules/layout.egg): the output's FLOPs exceed the input's by the padding alone, which
    the report gives as padding_flops (the padded share of that conv's and its reader's
    filters), so it warns of no extra work."""
    c, odd = 2 * blocked, blocked + blocked // 2
    nodes, inits = [], []
    for i, (ci, co) in enumerate([(c, c), (c, odd), (odd, c)]):
        inits.append(numpy_helper.from_array((RNG.standard_normal((co, ci, 3, 3)) * 0.1).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("Conv", ["x" if i == 0 else f"r{i - 1}", f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, c, 28, 28])],
                          [helper.make_tensor_value_info("r2", onnx.TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    # cpu.json's figures at this machine's block: on the AVX2 profile the third conv may stay NCHW
    res = optimize(m, Options(hardware=rule_test_profile()))
    assert "com.microsoft.nchwc" in {n.domain for n in res.model.graph.node}
    w = res.report["work"]
    pad = 2 * 28 * 28 * 9 * (c * (c - odd) + (c - odd) * c)  # the zero filter rows of conv 1, columns of conv 2
    assert w["output"]["padding_flops"] == pytest.approx(pad)
    relus = 28 * 28 * (c + odd + c)  # an element each, fused into the convs
    assert w["output"]["flops"] - pad == pytest.approx(w["input"]["flops"] - relus)
    assert w["input"]["padding_flops"] == 0 and w["more"] == []
    assert not any("more flops" in x for x in res.report["warnings"])


def test_the_ilp_says_when_a_cheaper_greedy_answer_breaks_the_work_bound():
    """Where a greedy answer costs less than the ILP's, the notes say why: here it computes the
    product twice (2 contractions against the input's 1), which the work bound refuses."""
    from eqsat.extract import EGraph
    from eqsat.extract.base import Extraction
    from eqsat.extract.ilp import ILP

    nodes = {"r": {"op": "Add", "cost": 1.0, "eclass": "R", "children": ["a", "b"]},
             "a": {"op": "MatMul", "cost": 10.0, "eclass": "A", "children": ["x", "x"]},
             "b": {"op": "MatMul", "cost": 10.0, "eclass": "B", "children": ["x", "x"]},
             "b2": {"op": "Relu", "cost": 30.0, "eclass": "B", "children": ["a"]},
             "x": {"op": "Input", "cost": 1.0, "eclass": "X", "children": []}}
    g = EGraph.from_json({"nodes": nodes, "root_eclasses": ["R"]})
    g.meta.update(input_nodes=["r", "a", "b2", "x"], input_complete=True)
    greedy = Extraction({"R": "r", "A": "a", "B": "b", "X": "x"}, "dag-greedy", 22.0, 22.0, 0.0, [])
    note = ILP._why_greedy_cheaper(g, greedy, 1)
    assert "computes 2 contractions, more than the input's 1" in note
    assert "layouts" in ILP._why_greedy_cheaper(g, greedy, 2)


def test_attention_over_fewer_keys_than_queries_counts_the_keys():
    # SegFormer reduces its keys and values by its sequence-reduction ratio: attention's FLOPs
    # took the queries' length for the keys', so its MultiHeadAttention fusion was reported
    # as "more flops than the input" (1.97e7 -> 2.22e7) and priced as that much work
    q, kv = (helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s) for n, s in
             (("q", [1, 64, 32]), ("kv", [1, 16, 32])))
    mha = helper.make_node("MultiHeadAttention", ["q", "kv", "kv"], ["y"], domain="com.microsoft", num_heads=2)
    g = helper.make_graph([mha], "g", [q, kv], [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT,
                                                                             [1, 64, 32])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    w = optimize(m, Options(layout="nchw")).report["work"]
    assert w["input"]["flops"] == 4 * (64 * 32) * 16  # QK^T and AV: 2 x 2 x queries' elements x keys
