"""Arithmetic in the default rules never stops a run and never reads a symbol as a size.

egglog's i64 arithmetic is checked, and `vec-get`/`vec-set` check their index: a primitive
that fails in a rule's query only drops that match, one that fails in its actions stops the
whole run (`egglog failed while running the rules`, exit 1). Sizes, attributes and pads
come from the model, which may hold anything an int64 holds (a zero-size weight of shape
[0, 2^62] has no data to check), and a symbolic dimension is an id <= -2^40
(eqsat.core.shapes.SYM_BASE). So every rule computes in its query, and an action only uses what
the query bound; a rule that reads a dimension as a size guards that it is one (>= 0),
as `shape-reshape-regroup` does. Each family is reached by a model that stopped the run
(or was rewritten wrong) before."""

from __future__ import annotations

import onnx
import pytest
from egglog import bindings as b
from onnx import TensorProto as T
from onnx import helper

from eqsat.core.pipeline import Options, saturate
from eqsat.core.rulefiles import default_rule_files
from eqsat.ruletool.model import read_files
from eqsat.ruletool.sexp import SList, Sym, show

from .conftest import assert_same_outputs, assert_verified, optimized, parse_model

BIG = 1 << 62
I64_MIN = -(1 << 63)
# primitives that cannot fail, whatever their arguments
NEVER_FAIL = {"vec-of", "vec-empty", "vec-length", "vec-append", "vec-push", "max", "min",
              "ordering-max", "ordering-min", "not", "and", "or"}
ACTION_WORDS = {"let", "union", "set", "delete", "subsume", "panic"}


def matches(model: onnx.ModelProto, **opts) -> dict[str, int]:
    """Saturate (no extraction or verification): the rule match counts."""
    return saturate(model, Options(**opts)).report["saturation"]["rule_matches"]


def model(nodes, inputs, outputs, inits=(), opsets=(("", 17),)) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets], ir_version=8)


def vi(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, T.FLOAT, shape)


# ---- the class: no action of a default rule calls a primitive that can fail

def _fallible_calls(x, declared: set[str], out: list) -> None:
    if isinstance(x, SList) and x and isinstance(x[0], Sym):
        head = str(x[0])
        if head not in declared and head not in NEVER_FAIL and head not in ACTION_WORDS:
            out.append(show(x))
            return
        for y in x[1:]:
            _fallible_calls(y, declared, out)


def test_no_default_rule_action_calls_a_primitive_that_can_fail():
    prog = read_files(default_rule_files())
    declared = set(prog.ctors) | set(prog.relations) | set(prog.functions)
    bad = []
    for r in prog.rules:
        calls: list = []
        for a in r.actions:
            _fallible_calls(a, declared, calls)
        bad += [f"{r.where} {r.name}: {c}" for c in calls]
    assert not bad, f"{len(bad)} calls (bind them in the query instead):\n" + "\n".join(bad)


def test_egglog_drops_a_match_whose_query_fails_and_stops_on_an_action_that_fails():
    # what the rules above rely on (egglog 13 and 14 alike)
    facts = "(relation R (i64)) (relation S (i64)) (R 4611686018427387904) (R 3)\n"
    eg = b.EGraph()
    eg.run_program(*eg.parse_program(facts + "(rule ((R x) (= y (* x 4))) ((S y))) (run 1)\n"
                                             "(check (S 12)) (fail (check (S y) (< y 0)))"))
    eg = b.EGraph()
    with pytest.raises(Exception, match=r"call of primitive \* failed"):
        eg.run_program(*eg.parse_program(facts + "(rule ((R x)) ((S (* x 4)))) (run 1)"))


# ---- cleanup: Transpose(Transpose(x, p), q) composes p[q[i]]

def test_transpose_compose_with_a_perm_out_of_range_does_not_stop_the_run():
    # before: `(vec-get p (vec-get q 1))` failed in the action, exit 1 (a fault of the rules)
    m = model([helper.make_node("Transpose", ["x"], ["a"], perm=[1, 0]),
               helper.make_node("Transpose", ["a"], ["y"], perm=[0, 5])],
              [vi("x", [2, 3])], [vi("y", [2, 3])])
    assert matches(m).get("transpose-compose-2", 0) == 0


# ---- analysis: the shape of FusedMatMul(a, b, transB)

@pytest.mark.parametrize("tb", [2, 5, I64_MIN + 1])
def test_fused_matmul_shape_with_a_transpose_flag_other_than_0_or_1(tb):
    # before: 3 - tb indexed b's shape out of range (5) or overflowed (-2^63 + 1): exit 1;
    # transB = 2 (onnxruntime: transposed) read dim 1, the heads, as the columns
    m = model([helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft", transB=tb)],
              [vi("a", [1, 2, 3, 4]), vi("b", [1, 2, 5, 4])], [vi("y", [1, 2, 3, 5])],
              opsets=(("", 17), ("com.microsoft", 1)))
    assert matches(m).get("shape-fused-matmul-same-batch", 0) == 0


# ---- matmul: Gemm's and FusedMatMul's transpose flags, the merged weights' widths

GEMM_T = """<ir_version: 8, opset_import: ["" : 17]>
agraph (float[2, 3] a, float[3, 4] b) => (float[2, 4] y) {{
    t = Transpose <perm = [1, 0]> (a)
    y = Gemm <transA = {}> (t, b)
}}"""


def test_gemm_transpose_flag_2_is_not_flipped():
    # transA = 2 is transposed (onnxruntime reads any nonzero value so): before, 1 - 2 = -1
    # still transposed, a^T b for a b, and the optimized model failed verification
    m = parse_model(GEMM_T.format(2))
    res = optimized(m)
    assert res.report["saturation"]["rule_matches"].get("gemm-transpose-a", 0) == 0
    assert_same_outputs(m, res.model, rtol=1e-5, atol=1e-6)
    assert_verified(m, res)


def test_gemm_transpose_flag_that_overflows_does_not_stop_the_run():
    # before: 1 - (-2^63) overflowed in gemm-transpose-a's action, exit 1
    assert matches(parse_model(GEMM_T.format(I64_MIN))).get("gemm-transpose-a", 0) == 0


def test_fused_matmul_fold_transpose_flag_2_is_not_flipped():
    # before: transB = 2 became -1, still transposed: a wrong model (verification failed)
    m = parse_model("""<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
agraph (float[2, 3] a, float[3, 4] b) => (float[2, 4] y) {
    t = Transpose <perm = [1, 0]> (b)
    y = com.microsoft.FusedMatMul <transB = 2> (a, t)
}""")
    res = optimized(m)
    assert res.report["saturation"]["rule_matches"].get("fused-matmul-fold-transpose-b", 0) == 0
    assert_same_outputs(m, res.model, rtol=1e-5, atol=1e-6)
    assert_verified(m, res)


def test_merged_matmul_widths_that_overflow_do_not_stop_the_run():
    # zero-size weights [0, 2^62] and [0, 2^62 + 1]: before, n1 + n2 overflowed in
    # matmul-group-2's action, exit 1 (h200: the profile where merging pays)
    w1 = helper.make_tensor("w1", T.FLOAT, [0, BIG], [])
    w2 = helper.make_tensor("w2", T.FLOAT, [0, BIG + 1], [])
    m = model([helper.make_node("MatMul", ["x", "w1"], ["y1"]), helper.make_node("MatMul", ["x", "w2"], ["y2"])],
              [vi("x", [0, 0])], [vi("y1", [0, BIG]), vi("y2", [0, BIG + 1])], [w1, w2])
    got = matches(m, hardware="h200")
    assert got.get("matmul-weight-candidate", 0) == 2 and got.get("matmul-group-2", 0) == 0


# ---- conv: Pad folded into the Conv's pads

def test_conv_pads_that_overflow_do_not_stop_the_run():
    # before: (+ (vec-get cx 0) (vec-get pp 2)) = 2^62 + 2^62 overflowed in the action: exit 1
    m = parse_model(f"""<ir_version: 8, opset_import: ["" : 17]>
agraph (float[1, 1, 0] x) => (float[1, 1, N] y) <float[1, 1, 1] w = {{1.0}}> {{
    p = Constant <value = int64[6] {{0, 0, {BIG}, 0, 0, 0}}> ()
    xp = Pad(x, p)
    y = Conv <pads = [{BIG}, 0]> (xp, w)
}}""")
    assert matches(m).get("conv-pad-1d", 0) == 0


# ---- attention: the fused op's hidden size n * dv

def test_attention_hidden_size_that_overflows_does_not_stop_the_run():
    # 2^32 heads of 2^31 over 0 positions: before, (* n dv) overflowed in attention-mha's action
    n, d = 1 << 32, 1 << 31
    m = model([helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Softmax", ["s"], ["p"], axis=-1),
               helper.make_node("MatMul", ["p", "v"], ["y"])],
              [vi("q", [1, n, 0, d]), vi("kt", [1, n, d, 0]), vi("v", [1, n, 0, d])], [vi("y", [1, n, 0, d])])
    got = matches(m, hardware="h200")
    assert got.get("attention-core", 0) == 1 and got.get("attention-mha", 0) == 0


def test_attention_repeat_kv_with_symbolic_heads_runs():
    # nk and g symbolic: nk * g overflows in the query, which only drops the match
    m = model([helper.make_node("Unsqueeze", ["x", "ax"], ["u"]), helper.make_node("Expand", ["u", "s5"], ["ex"]),
               helper.make_node("Reshape", ["ex", "s4"], ["y"])],
              [vi("x", ["B", "H", "S", 4]), helper.make_tensor_value_info("s5", T.INT64, [5]),
               helper.make_tensor_value_info("s4", T.INT64, [4])], [vi("y", ["B", "HG", "S", 4])],
              [helper.make_tensor("ax", T.INT64, [1], [2])])
    m.graph.value_info.append(vi("ex", ["B", "H", "G", "S", 4]))
    assert matches(m).get("attention-repeat-kv", 0) == 0


# ---- layout: channels padded to the block, channels read as multiples of the block

def test_padded_output_channels_that_overflow_do_not_stop_the_run(blocked):
    # O = 2^63 - 1 output channels of a zero-size filter: before, O rounded up to the block
    # overflowed in nchwc-pad-no-bias's action, exit 1
    o = (1 << 63) - 1
    m = model([helper.make_node("Conv", ["x", "w"], ["y"])], [vi("x", [1, 0, 2, 2])], [vi("y", [1, o, 2, 2])],
              [helper.make_tensor("w", T.FLOAT, [o, 0, 1, 1], [])])
    got = matches(m)
    assert got.get("nchwc-candidate-conv", 0) == 1 and got.get("nchwc-pad-no-bias", 0) == 0


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool"])
def test_symbolic_channels_are_not_a_multiple_of_the_block(blocked, op):
    # C's id -2^40 is a multiple of every block: before, the pooling went blocked with a
    # ReorderOutput of channels = -2^40
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]} if op in ("MaxPool", "AveragePool") else {}
    out = [1, "C", 4, 4] if attrs else [1, "C", 1, 1]
    m = model([helper.make_node(op, ["x"], ["y"], **attrs)], [vi("x", [1, "C", 8, 8])], [vi("y", out)])
    got = matches(m)
    # no blocked rewrite; the facts of which pools have a non-empty output are no rewrite
    assert not any(k.startswith("nchwc-") and not k.startswith("nchwc-pool-nonempty") for k in got), got


def test_symbolic_depthwise_input_channels_are_not_a_multiple_of_the_block(blocked):
    # a depthwise conv of 3 groups whose input's channels are symbolic: before,
    # nchwc-conv-depthwise read the symbol as a multiple of the block
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], group=3, kernel_shape=[1, 1])],
              [vi("x", [1, "C", 4, 4])], [vi("y", [1, 3, 4, 4])],
              [helper.make_tensor("w", T.FLOAT, [3, 1, 1, 1], [1.0, 2.0, 3.0])])
    assert matches(m).get("nchwc-conv-depthwise", 0) == 0
