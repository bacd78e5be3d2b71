"""Declared shapes and types are not facts (eqsat.core.shapes.infer_types): a model's graph
outputs and value_info may declare shapes or element types that contradict what its nodes
compute (onnxruntime only warns about a shape), and rules guarded by `(shape x)` facts
rewrote by them: Expand(x[1], s) declared float[1] became Identity, right only for s = [1].
Every model here declares something its computation does not give; it is optimized with the
default rules (no verification: the Python API) and run on inputs that show the difference,
with onnxruntime's optimizations off; the outputs must be the original's (or eqsat refuses).
The graph's inputs are the contract with the caller and stay facts."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from eqsat.core.shapes import infer_types
from eqsat.errors import EqsatError
from eqsat.verification import compare, run, verify

from .conftest import optimized, parse_model

H = '<ir_version: 8, opset_import: ["" : 17]>\n'


def _same_or_refused(text: str, feeds: dict[str, np.ndarray]) -> onnx.ModelProto | None:
    """Optimize `text`; unless eqsat refuses, the result must compute the original's outputs on `feeds`."""
    m = parse_model(text)
    try:
        out = optimized(m).model
    except EqsatError:
        return None
    expected = run(m, feeds, optimize=False)
    bad = compare(expected, run(out, feeds, optimize=False), 1e-5, 1e-6)
    assert not bad, "; ".join(map(str, bad)) + " ops after: " + ", ".join(n.op_type for n in out.graph.node)
    return out


def _i64(*v):
    return np.array(v, np.int64)


def _f32(*v):
    return np.array(v, np.float32)


# Each: (model, inputs that show the difference). The declared shapes are wrong for them.
CASES = {
    # the reproducer: the declared output float[1] made Expand(x, s) an Expand to x's own shape
    "expand-declared-output": (H + "g (float[1] x, int64[1] s) => (float[1] y) { y = Expand(x, s) }",
                               {"x": _f32(2), "s": _i64(3)}),
    # the same on an intermediate value: its value_info declared float[1]
    "expand-declared-value-info": (H + """
        g (float[1] x, int64[1] s) => (float[?] y) <float[1] t> { t = Expand(x, s)  y = Add(t, t) }""",
                                   {"x": _f32(2), "s": _i64(3)}),
    # a Reshape declared to keep x's shape: "reshape-noop" dropped it
    "reshape-declared-value-info": (H + """
        g (float[2, 3] x, int64[2] s) => (float[?, ?] y) <float[2, 3] t> { t = Reshape(x, s)  y = Relu(t) }""",
                                    {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 2, "s": _i64(3, 2)}),
    # a Slice declared to take all of x: "slice-noop" dropped it
    "slice-declared-value-info": (H + """
        g (float[4] x, int64[1] e) => (float[?] y) <float[4] t> {
            b = Constant <value = int64[1] {0}> ()
            t = Slice(x, b, e)
            y = Relu(t)
        }""", {"x": _f32(0, 1, 2, 3), "e": _i64(2)}),
    "slice-declared-output": (H + """
        g (float[4] x, int64[1] e) => (float[4] y) { b = Constant <value = int64[1] {0}> ()  y = Slice(x, b, e) }""",
                              {"x": _f32(0, 1, 2, 3), "e": _i64(2)}),
    # Tile and Concat have no rule that such a declaration enables today; kept as guards
    "tile-declared-value-info": (H + """
        g (float[1] x, int64[1] r) => (float[?] y) <float[1] t> { t = Tile(x, r)  y = Relu(t) }""",
                                 {"x": _f32(2), "r": _i64(3)}),
    "concat-declared-value-info": (H + """
        g (float[2] x, float[1] z, int64[1] s) => (float[?] y) <float[0] e> {
            e = Expand(z, s)
            y = Concat <axis = 0> (x, e)
        }""", {"x": _f32(0, 1), "z": _f32(5), "s": _i64(2)}),
    # a static dimension declared where the computation gives the input's symbolic one:
    # Shape(t) folded to the declared [4]
    "static-dim-declared-for-a-symbolic-one": (H + """
        g (float[n] x) => (int64[1] y) <float[4] t> { t = Relu(x)  y = Shape(t) }""", {"x": _f32(0, 1, 2)}),
    "static-dim-declared-output-for-a-symbolic-one": (H + """
        g (float[n] x) => (float[4] t, int64[1] y) { t = Relu(x)  y = Shape(t) }""", {"x": _f32(0, 1, 2)}),
    # a rank declared where the computation's rank comes from an input's length
    "rank-declared-value-info": (H + """
        g (float[2, 3] x, int64[1] s) => (int64[?] y) <float[2, 3] t> { t = Reshape(x, s)  y = Shape(t) }""",
                                 {"x": np.zeros((2, 3), np.float32), "s": _i64(6)}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_declared_shape_the_computation_contradicts_rewrites_nothing(name):
    text, feeds = CASES[name]
    _same_or_refused(text, feeds)


def test_expand_to_a_declared_output_shape_keeps_the_expand():
    text, feeds = CASES["expand-declared-output"]
    out = _same_or_refused(text, feeds)
    assert out is not None and [n.op_type for n in out.graph.node] == ["Expand"]
    # the graph output keeps its declared type: the caller's contract is the model's, not eqsat's
    assert out.graph.output[0] == parse_model(text).graph.output[0]


def test_a_declared_element_type_the_computation_contradicts_is_not_a_fact():
    # t = Cast(x, int64) declared float: "cast-same-type" took Cast(t, float) for a no-op
    # and wrote y = Cast(x, int64) under the float output (onnxruntime refuses the original,
    # so verification was not possible and the model was written)
    m = parse_model(H + """
        g (float[2] x) => (float[2] y) <float[2] t> { t = Cast <to = 7> (x)  y = Cast <to = 1> (t) }""")
    types, warning = infer_types(m)
    assert types["t"].elem == onnx.TensorProto.INT64
    assert warning and "'t'" in warning
    out = optimized(m).model
    from onnx.reference import ReferenceEvaluator

    feeds = {"x": _f32(1.5, -2.5)}
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    got = ReferenceEvaluator(out).run(None, feeds)[0]
    assert got.dtype == want.dtype == np.float32 and got.tolist() == want.tolist()


# ---- what infer_types makes of declarations


RESHAPED_TO_6 = H + """
    g (float[2, 3] x) => (float[?] y) <float[2, 3] t> {
        s = Constant <value = int64[1] {6}> ()
        t = Reshape(x, s)
        n = Neg(t)
        y = Relu(n)
    }"""


def test_a_contradicted_declaration_is_dropped_with_a_warning():
    m = parse_model(RESHAPED_TO_6)
    types, warning = infer_types(m)
    assert types["t"].dims == (6,)
    assert warning and "'t'" in warning and "declared" in warning


def test_a_declared_only_shape_is_not_a_fact():
    # inference knows y's rank from s's length, not its size: the declared 1 is not taken,
    # and it is no contradiction either (s may hold [1]): no warning
    m = parse_model(CASES["expand-declared-output"][0])
    types, warning = infer_types(m)
    assert types["y"].elem == onnx.TensorProto.FLOAT
    assert types["y"].dims is None or not isinstance(types["y"].dims[0], int)
    assert warning is None


def test_consistent_declarations_and_input_dims_are_kept():
    m = parse_model(H + """
        g (float[batch, 4] x) => (float[batch, 4] y) <float[batch, 4] t> { t = Relu(x)  y = Neg(t) }""")
    types, warning = infer_types(m)
    assert warning is None
    assert types["x"].dims == ("batch", 4) and types["t"].dims == ("batch", 4) and types["y"].dims == ("batch", 4)


def test_declared_output_symbols_are_not_taken_for_input_symbols():
    # y declared [n], x's own dimension: Expand(x[n], s) became Identity; with n = 1 and
    # s = [3] the original gives 3 values. The declaration relates y to n, the computation does not
    text = H + "g (float[n] x, int64[1] s) => (float[n] y) { y = Expand(x, s) }"
    m = parse_model(text)
    types, _ = infer_types(m)
    assert types["y"].dims is None or types["y"].dims[0] != "n"
    out = optimized(m).model
    feeds = {"x": _f32(1), "s": _i64(3)}
    assert not compare(run(m, feeds, optimize=False), run(out, feeds, optimize=False))


# ---- verification: sizes of 2 and more


def test_verification_draws_sizes_of_2_and_more_so_a_wrong_noop_fails():
    # Expand(x[1], s) -> x is right for s = [1] only: sizes drawn 0 or 1 passed it whenever
    # they drew 1 (seed 0 does); a size of 2 or 3 never does
    m = parse_model(CASES["expand-declared-output"][0])
    wrong = parse_model(H + "g (float[1] x, int64[1] s) => (float[1] y) { y = Identity(x) }")
    v = verify(m, wrong)
    assert v.status == "failed" and "sizes of 2 and 3" in v.detail, v.detail
    v = verify(m, m)
    assert v.status == "passed" and "sizes of 2 and 3" in v.detail, v.detail


def test_sizes_of_2_and_more_the_original_refuses_are_left_out():
    # Slice axes drawn 2 or 3 are beyond x's rank: the original refuses them, not eqsat's fault
    m = parse_model(H + """
        g (float[2, 2] x, int64[1] a) => (float[?, ?] y) {
            b = Constant <value = int64[1] {0}> ()
            e = Constant <value = int64[1] {1}> ()
            y = Slice(x, b, e, a)
        }""")
    v = verify(m, m)
    assert v.status == "passed", v.detail
    assert "not on sizes of 2 and 3, sizes of 4 to 9 (the original does not run on them)" in v.detail, v.detail



def test_a_long_size_input_keeps_its_draw():
    # 2 or 3 at each of 64 axes of a ConstantOfShape would ask for 2^64 elements
    from eqsat.verification.feeds import LARGE_SIZES_MAX, Feeds

    m = parse_model(H + """
        g (int64[64] s, int64[2] t) => (float[?] y, float[?, ?] z) {
            y = ConstantOfShape(s)
            z = ConstantOfShape(t)
        }""")
    feeds = Feeds(m)
    f = feeds.draw({}, 0)
    big = feeds.with_large_sizes(f, 0)
    assert LARGE_SIZES_MAX < 64 and big["s"].tolist() == f["s"].tolist()
    assert set(big["t"].tolist()) <= {2, 3}

# ---- a custom op's output: no inference gives its shape, its declaration is all there is


def _custom_model(body: bool) -> onnx.ModelProto:
    """z = my.ops.Mystery(x), declared float[1] in value_info (a declaration no inference can
    check); then Shape(z), in the main graph or in an If branch."""
    from onnx import TensorProto as TP
    from onnx import helper as h

    shape_of_z = [h.make_node("Shape", ["z"], ["s_out"])]
    if body:
        then_g = h.make_graph([*shape_of_z], "then", [], [h.make_tensor_value_info("s_out", TP.INT64, [1])])
        else_g = h.make_graph([h.make_node("Shape", ["x"], ["e_out"])], "else", [],
                              [h.make_tensor_value_info("e_out", TP.INT64, [1])])
        nodes = [h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    else:
        nodes = [h.make_node("Shape", ["z"], ["y"])]
    g = h.make_graph([h.make_node("Mystery", ["x"], ["z"], domain="my.ops"), *nodes], "g",
                     [h.make_tensor_value_info("c", TP.BOOL, []), h.make_tensor_value_info("x", TP.FLOAT, [3])],
                     [h.make_tensor_value_info("y", TP.INT64, [1])],
                     value_info=[h.make_tensor_value_info("z", TP.FLOAT, [1])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18), h.make_opsetid("my.ops", 1)])
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize("body", [False, True], ids=["main-graph", "if-branch"])
def test_a_custom_ops_declared_size_is_not_folded(body):
    # Shape(z) became the constant [1], the declared size, whatever Mystery computes
    out = optimized(_custom_model(body)).model
    g = out.graph
    if body:
        the_if = next(n for n in g.node if n.op_type == "If")
        g = next(a.g for a in the_if.attribute if a.name == "then_branch")
    assert [n.op_type for n in g.node if n.op_type in ("Shape", "Constant")] == ["Shape"], onnx.printer.to_text(out)


# ---- a body's formal inputs: their declared shapes are not checked either


def _loop_model() -> onnx.ModelProto:
    """v doubles in length each iteration (Concat(v, v)), its body input declared float[1];
    the body also outputs Shape(v) per iteration."""
    from onnx import TensorProto as TP
    from onnx import helper as h

    vi = h.make_tensor_value_info
    body = h.make_graph([h.make_node("Identity", ["cond_in"], ["cond_out"]),
                         h.make_node("Concat", ["v_in", "v_in"], ["v_out"], axis=0),
                         h.make_node("Shape", ["v_in"], ["s_out"])], "body",
                        [vi("i", TP.INT64, []), vi("cond_in", TP.BOOL, []), vi("v_in", TP.FLOAT, [1])],
                        [vi("cond_out", TP.BOOL, []), vi("v_out", TP.FLOAT, [None]), vi("s_out", TP.INT64, [1])])
    g = h.make_graph([h.make_node("Loop", ["trip", "", "x"], ["v", "s"], body=body)], "g",
                     [vi("trip", TP.INT64, []), vi("x", TP.FLOAT, [1])],
                     [vi("v", TP.FLOAT, [None]), vi("s", TP.INT64, [None, 1])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m)
    return m


def test_a_loops_carried_value_declared_one_size_may_grow():
    # Shape(v_in) was folded to the declared [1]: s came out [[1], [1], [1]], not [[1], [2], [4]]
    m = _loop_model()
    out = optimized(m).model
    feeds = {"trip": np.array(3, np.int64), "x": _f32(1)}
    expected = run(m, feeds, optimize=False)
    assert expected["s"].tolist() == [[1], [2], [4]]
    assert not compare(expected, run(out, feeds, optimize=False))



def test_a_contradicted_value_info_is_not_written_and_the_outputs_keep_theirs():
    # t declared float[2, 3] is computed [6] (a constant target): the optimized model keeps
    # no such declaration; a graph output keeps its declared type, the caller's contract
    m = parse_model(RESHAPED_TO_6)
    m.graph.value_info.append(onnx.helper.make_tensor_value_info("n", onnx.TensorProto.FLOAT, [6]))
    res = optimized(m)
    assert sorted(vi.name for vi in res.model.graph.value_info) in (["n"], [])
    assert "t" not in {vi.name for vi in res.model.graph.value_info}
    assert list(res.model.graph.output) == list(m.graph.output)
    assert "'t' declared float[2, 3], computed float[6]" in " ".join(res.report["warnings"])


def test_onnxruntimes_fused_ops_are_sized_as_the_ops_they_fuse():
    # an onnxruntime-optimized model: FusedConv, FusedGemm and FusedMatMul, which no inference
    # knows, were sized by their declarations alone; now as Conv, Gemm and MatMul on the same
    # inputs, and a FusedMatMul with a transpose not at all
    from onnx import TensorProto as TP
    from onnx import helper as h
    from onnx import numpy_helper as nh

    vi = h.make_tensor_value_info
    inits = [nh.from_array(np.ones((2, 2, 1, 1), np.float32), "w"), nh.from_array(np.ones((32, 5), np.float32), "g"),
             nh.from_array(np.ones((5, 3), np.float32), "k")]
    nodes = [h.make_node("FusedConv", ["x", "w"], ["c"], domain="com.microsoft", activation="Relu"),
             h.make_node("Flatten", ["c"], ["f"]),
             h.make_node("FusedGemm", ["f", "g"], ["e"], domain="com.microsoft", activation="Relu"),
             h.make_node("FusedMatMul", ["e", "k"], ["y"], domain="com.microsoft", alpha=2.0),
             h.make_node("FusedMatMul", ["k", "k"], ["z"], domain="com.microsoft", transA=1)]
    g = h.make_graph(nodes, "g", [vi("x", TP.FLOAT, [1, 2, 4, 4])],
                     [vi("y", TP.FLOAT, [1, 9]), vi("z", TP.FLOAT, [3, 3])],
                     inits, value_info=[vi("c", TP.FLOAT, [1, 2, 9, 9])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)], ir_version=8)
    types, warning = infer_types(m)
    assert (types["c"].dims, types["e"].dims, types["y"].dims) == ((1, 2, 4, 4), (1, 5), (1, 3))
    assert "z" not in types or types["z"].dims is None
    assert warning and "'c' declared float[1, 2, 9, 9], computed float[1, 2, 4, 4]" in warning
    assert "'y' declared float[1, 9], computed float[1, 3]" in warning


def test_the_onnx_wheels_expand_model_declared_to_keep_its_input_shape():
    # onnx's own test model simple/test_expand_shape_model1: Expand(X[1, 3, 1], shape) declared
    # float[1, 3, 1] came out as Identity, wrong for shape = [1, 4] ((1, 3, 4) expected)
    import os

    from eqsat.verification.conformance import data_root

    m = onnx.load(os.path.join(data_root(), "simple", "test_expand_shape_model1", "model.onnx"))
    out = optimized(m).model
    feeds = {"X": np.ones((1, 3, 1), np.float32), "shape": _i64(1, 4)}
    expected = run(m, feeds, optimize=False)
    assert expected["Y"].shape == (1, 3, 4)
    assert not compare(expected, run(out, feeds, optimize=False))
