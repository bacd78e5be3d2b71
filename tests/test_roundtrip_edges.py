"""The round trip (no rules) on the parts of ONNX that are easy to lose: names, attributes of
every kind, subgraphs and their outer references, multiple outputs, old opsets, constants,
metadata. Each test checks the numbers under onnxruntime where the model can run."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.core.pipeline import Options, optimize
from eqsat.errors import UsageError

from .conftest import assert_same_outputs, assert_verified, ops, parse_model, roundtrip


def test_custom_op_keeps_every_attribute_kind():
    t = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "")
    node = helper.make_node(
        "MyOp", ["x"], ["y", "z"], domain="my.domain",
        i=3, f=0.1, s="hello \"world\"\n", ints=[1, -2], floats=[0.5, -1.25], strings=["a", "b"], t=t,
        neg_zero=-0.0, nan=float("nan"),
    )
    g = helper.make_graph(
        [node, helper.make_node("Relu", ["y"], ["r"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("my.domain", 1)])
    out = roundtrip(m)
    onnx.checker.check_model(out)
    my = [n for n in out.graph.node if n.op_type == "MyOp"]
    assert len(my) == 1 and my[0].domain == "my.domain"
    got = {a.name: a for a in my[0].attribute}
    want = {a.name: a for a in node.attribute}
    assert set(got) == set(want)
    for k in want:
        if k == "nan":
            assert np.isnan(got[k].f)
        elif k == "neg_zero":
            assert got[k].f == 0.0 and np.signbit(got[k].f)
        else:
            assert got[k] == want[k], k
    assert [o.name for o in out.graph.output] == ["r", "z"]
    assert {(o.domain, o.version) for o in out.opset_import} == {("", 18), ("my.domain", 1)}


def test_if_subgraphs_read_outer_values_under_their_new_names():
    # w2 duplicates w1: the e-graph merges them, so the name w2 disappears; the else branch
    # reads w2 and an intermediate value (h) from the enclosing graph.
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        agraph (float[3] x, bool c) => (float[3] y) <float[3] w1 = {1.0, 2.0, 3.0}, float[3] w2 = {1.0, 2.0, 3.0}> {
            h = Add(x, w1)
            y = If(c) <
                then_branch = g1 () => (float[3] t) { t = Mul(h, w1) },
                else_branch = g2 () => (float[3] e) { e = Sub(h, w2) }
            >
        }
    """)
    out = roundtrip(m)
    assert len(out.graph.initializer) == 1  # deduplicated
    for c in (True, False):
        assert_same_outputs(m, out, {"x": np.array([1, -2, 3], np.float32), "c": np.array(c)})
        assert_verified(m, out)


def test_loop_body_reads_outer_values():
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        agraph (float[2] x, int64 n) => (float[2] y) {
            k = Mul(x, x)
            t = Constant <value_bool = true> ()
            y = Loop(n, t, x) <body = b (int64 i, bool cin, float[2] acc) => (bool cout, float[2] acc2) {
                cout = Identity(cin)
                acc2 = Add(acc, k)
            }>
        }
    """.replace("value_bool = true", "value = bool {1}"))
    out = roundtrip(m)
    assert "Loop" in ops(out)
    assert_same_outputs(m, out, {"x": np.array([1.5, -2], np.float32), "n": np.array(3, np.int64)})
    assert_verified(m, out)


def test_multi_output_ops_keep_their_outputs():
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        agraph (float[2, 6] x, int64[1] k) => (float[2, 2] a, float[2, 4] b, int64[2, 2] idx) {
            a, b = Split <axis = 1> (x, s)
            v, idx = TopK(a, k)
        }
    """.replace("(x, s)", "(x, sp)").replace("agraph (float[2, 6] x", "agraph (float[2, 6] x").replace(
        "{\n            a, b", "{\n            sp = Constant <value = int64[2] {2, 4}> ()\n            a, b"))
    out = roundtrip(m)
    assert ops(out).count("Split") == 1 and ops(out).count("TopK") == 1
    assert_same_outputs(m, out, {"x": np.arange(12, dtype=np.float32).reshape(2, 6), "k": np.array([2], np.int64)})
    assert_verified(m, out)


def test_old_opset_forms_of_typed_ops_come_back_in_their_opset():
    # opset 9: Slice-1 and Pad-2 and Clip-6 take attributes; Squeeze/Unsqueeze-1, ReduceMean-1 too.
    m = parse_model("""
        <ir_version: 4, opset_import: ["" : 9]>
        agraph (float[1, 4, 6] x) => (float[4, 1] y, float[1, 6, 10] p, float[1, 4, 6] c, float[1, 4, 1] r) {
            s = Slice <starts = [1], ends = [3], axes = [2]> (x)
            q = Squeeze <axes = [0]> (s)
            u = Unsqueeze <axes = [2]> (q)
            y = ReduceMean <axes = [1, 2], keepdims = 0> (u)
            p = Pad <pads = [0, 1, 2, 0, 1, 2], value = 0.5> (x)
            c = Clip <min = -0.5, max = 0.5> (x)
            r = ReduceMean <axes = [2]> (x)
        }
    """.replace("float[4, 1] y", "float[4] y"))
    out = roundtrip(m)
    assert ops(out) == ops(m)
    for n in out.graph.node:
        assert len(n.input) == 1, f"{n.op_type} must keep its opset-9 form (attributes, one input)"
    assert_same_outputs(m, out)
    assert_verified(m, out)


def test_opset_13_squeeze_and_split_take_inputs_and_keep_them():
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 13]>
        agraph (float[1, 4, 6] x) => (float[4, 2] a, float[4, 4] b) {
            ax = Constant <value = int64[1] {0}> ()
            q = Squeeze(x, ax)
            sp = Constant <value = int64[2] {2, 4}> ()
            a, b = Split <axis = 1> (q, sp)
        }
    """)
    out = roundtrip(m)
    assert_same_outputs(m, out)
    assert_verified(m, out)
    assert [n.op_type for n in out.graph.node] == ["Squeeze", "Split"]


def test_names_with_odd_characters_survive():
    names = ['in "quoted"', "back\\slash", "new\nline", "tab\there", "ünïcødé ✓", "emoji 😀", "ctl\x01"]
    nodes, prev = [], names[0]
    for n in names[1:]:
        nodes.append(helper.make_node("Relu", [prev], [n], name=f"node {n}"))
        prev = n
    g = helper.make_graph(nodes, "odd names", [helper.make_tensor_value_info(names[0], TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    out = roundtrip(m)
    assert out.graph.input[0].name == names[0] and out.graph.output[0].name == names[-1]
    assert {o for n in out.graph.node for o in n.output} == set(names[1:])
    assert_same_outputs(m, out)
    assert_verified(m, out)


def test_symbolic_dimensions_stay_symbolic(tmp_path):
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        agraph (float[batch, seq, 8] x, float[batch, seq, 8] z) => (float[batch, seq, 8] y) {
            a = Relu(x)
            y = Add(a, z)
        }
    """)
    path = tmp_path / "e.json"
    res = optimize(m, Options(default_rules=False, save_egraph=path))
    assert res.model.graph.output[0] == m.graph.output[0]
    data = json.loads(path.read_text())
    shapes = [cd["shape"] for cd in data["class_data"].values() if "shape" in cd]
    assert shapes and all(s[2] == 8 and s[0] < 0 and s[1] < 0 for s in shapes)
    assert len({tuple(s) for s in shapes}) == 1  # batch and seq are the same symbols everywhere
    assert set(data["eqsat"]["dims"].values()) == {"batch", "seq"}


def test_initializers_that_are_inputs_stay_overridable_and_duplicates_merge():
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        agraph (float[3] x, float[3] bias) => (float[3] y) <float[3] bias = {1.0, 2.0, 3.0},
            float[3] a = {5.0, 6.0, 7.0}, float[3] b = {5.0, 6.0, 7.0}> {
            s = Add(x, a)
            t = Add(s, b)
            y = Add(t, bias)
        }
    """)
    out = roundtrip(m)
    assert [i.name for i in out.graph.input] == ["x", "bias"]
    names = [t.name for t in out.graph.initializer]
    assert "bias" in names and len(names) == 2  # bias kept as input default; a and b merged
    x = np.array([1, 2, 3], np.float32)
    assert_same_outputs(m, out, {"x": x})
    assert_same_outputs(m, out, {"x": x, "bias": np.array([9, 9, 9], np.float32)})
    assert_verified(m, out)


def test_ir3_model_constants_stay_valid():
    m = parse_model("""
        <ir_version: 3, opset_import: ["" : 8]>
        agraph (float[3] x, float[3] w) => (float[3] y) <float[3] w = {1.0, 2.0, 3.0}> {
            c = Constant <value = float[3] {0.5, 0.5, 0.5}> ()
            s = Mul(x, w)
            y = Add(s, c)
        }
    """)
    out = roundtrip(m)
    assert out.ir_version == 3
    assert {t.name for t in out.graph.initializer} == {"w"}  # IR 3: every initializer is an input
    assert "Constant" in ops(out)
    assert_same_outputs(m, out, {"x": np.array([1, 2, 3], np.float32)})
    assert_verified(m, out)


def test_outputs_that_are_inputs_constants_or_shared():
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        agraph (float[3] x) => (float[3] same, float[3] r1, float[3] r2, float[2] k, float[3] other) {
            same = Identity(x)
            r1 = Relu(x)
            r2 = Relu(x)
            k = Constant <value = float[2] {1.0, -0.0}> ()
            other = Identity(x)
        }
    """)
    out = roundtrip(m)
    assert [o.name for o in out.graph.output] == ["same", "r1", "r2", "k", "other"]
    assert_same_outputs(m, out)
    assert_verified(m, out)
    k = [n for n in out.graph.node if "k" in n.output][0]
    assert np.signbit(numpy_helper.to_array(k.attribute[0].t)[1])  # -0.0 stays -0.0


def test_scalar_constants_keep_shape_dtype_sign_and_nan():
    m = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        agraph (float[2] x, float16[2] h) => (float[2] a, float[2] b, float[2] c, float16[2] d, float[1, 2] e) {
            z = Constant <value = float {0.0}> ()
            nz = Constant <value = float {-0.0}> ()
            nan = Constant <value = float {nan}> ()
            one = Constant <value = float[1, 1] {1.0}> ()
            tenth = Constant <value = float {0.1}> ()
            hf = Cast <to = 10> (tenth)
            a = Div(x, z)
            b = Div(x, nz)
            c = Add(x, nan)
            d = Mul(h, hf)
            e = Mul(x, one)
            d2 = Mul(h, h16)
        }
    """.replace("float16[2] d,", "float16[2] d, float16[2] d2,"))
    m.graph.initializer.append(numpy_helper.from_array(np.array(0.1, np.float16), "h16"))
    onnx.checker.check_model(m)
    out = roundtrip(m)
    assert_same_outputs(m, out, {"x": np.array([1, -1], np.float32), "h": np.array([3, 5], np.float16)})
    assert_verified(m, out)


def test_model_metadata_is_kept():
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18, "local" : 1], producer_name: "me", producer_version: "1.2",
         model_version: 7, doc_string: "the model">
        agraph (float[3] x) => (float[3] y) {
            y = local.Twice(x)
        }
        <domain: "local", opset_import: ["" : 18]>
        Twice (a) => (b) { b = Add(a, a) }
    """)
    m.graph.doc_string = "the graph"
    m.graph.node[0].doc_string = "a call"
    helper.set_model_props(m, {"author": "eqsat", "license": "MIT"})
    out = roundtrip(m)
    for f in ("ir_version", "producer_name", "producer_version", "model_version", "doc_string"):
        assert getattr(out, f) == getattr(m, f), f
    assert out.graph.doc_string == "the graph"
    assert out.graph.node[0].doc_string == "a call"
    assert {p.key: p.value for p in out.metadata_props} == {"author": "eqsat", "license": "MIT"}
    assert [f.name for f in out.functions] == ["Twice"]
    assert_same_outputs(m, out)
    assert_verified(m, out)


def test_unsorted_graph_is_written_in_topological_order():
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        agraph (float[3] x) => (float[3] y) {
            a = Relu(x)
            y = Neg(a)
        }
    """)
    nodes = list(m.graph.node)
    del m.graph.node[:]
    m.graph.node.extend(reversed(nodes))
    out = roundtrip(m)
    assert ops(out) == ["Relu", "Neg"]
    assert_same_outputs(parse_model(onnx.printer.to_text(out)), out)


def test_typed_op_with_an_unexpected_attribute_is_carried_opaque():
    node = helper.make_node("Relu", ["x"], ["y"], foo=1)  # not a Relu attribute
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    res = optimize(m, Options(default_rules=False))
    assert res.report["opaque"] == {"Relu: attribute foo": 1}
    assert res.model.graph.node[0].attribute[0].name == "foo"


def test_float_attributes_are_exact():
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        agraph (float[1, 2, 2, 2] x, float[2] s, float[2] b, float[2] mu, float[2] var) => (float[1, 2, 2, 2] y) {
            y = BatchNormalization <epsilon = 0.001> (x, s, b, mu, var)
        }
    """)
    out = roundtrip(m)
    assert out.graph.node[0].attribute[0].f == m.graph.node[0].attribute[0].f


def test_a_float_attribute_beyond_float32_is_refused_not_written_as_inf(tmp_path):
    # a rule that computes an attribute in f64 past float32's range: decoding refuses it
    # (an OptimizeError, exit 1), where it wrote alpha = inf
    from eqsat.errors import OptimizeError

    rules = tmp_path / "big.egg"
    rules.write_text('(rewrite (LeakyRelu (Relu x) a) (LeakyRelu x (* a 1.0e40)) :ruleset fusion :name "big-alpha")\n')
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        agraph (float[4] x) => (float[4] y) {
            r = Relu(x)
            y = LeakyRelu <alpha = 0.5> (r)
        }
    """)
    with pytest.raises(OptimizeError, match="alpha.*float32"):
        optimize(m, Options(rule_files=[rules], default_rules=False, cost_model="node-count"))


def test_garbage_collector_is_paused_while_optimizing_and_restored_after():
    import gc

    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        agraph (float[3] x) => (float[3] y) {
            a = Relu(x)
            y = Identity(a)
        }""")
    seen = []
    assert gc.isenabled()
    optimize(m, Options(), progress=lambda _msg: seen.append(gc.isenabled()))
    assert seen and not any(seen)  # off in every phase that reported progress
    assert gc.isenabled()
    gc.disable()  # a caller's choice is kept
    try:
        optimize(m, Options())
        assert not gc.isenabled()
    finally:
        gc.enable()
    bad = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        agraph (float[3] x) => (float[3] y) { y = Relu(x) }""")
    with pytest.raises(UsageError, match="unknown extractor"):
        optimize(bad, Options(extractor="no-such-extractor"))
    assert gc.isenabled()  # also after an error


def test_model_shell_copies_the_header_and_no_graph():
    from eqsat.io.modelio import model_shell

    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18], producer_name: "p", producer_version: "1", domain: "d",
         model_version: 3, doc_string: "doc">
        agraph (float[3] x) => (float[3] y) { y = Relu(x) }""")
    onnx.helper.set_model_props(m, {"k": "v"})
    s = model_shell(m, {"com.microsoft": 1})
    assert (s.ir_version, s.producer_name, s.producer_version, s.domain, s.model_version) == (8, "p", "1", "d", 3)
    assert [(o.domain, o.version) for o in s.opset_import] == [("", 18), ("com.microsoft", 1)]
    assert not s.graph.node and not s.doc_string and not s.metadata_props  # a working copy
    full = model_shell(m, full=True)
    assert full.doc_string == "doc" and [(p.key, p.value) for p in full.metadata_props] == [("k", "v")]
