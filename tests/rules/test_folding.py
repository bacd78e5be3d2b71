"""Constant folding (eqsat/oracle/fold.py): what folds, and what it refuses, with the reason
in the report."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from ..conftest import assert_same_outputs, assert_verified, check_rewrite, optimized, parse_model

H = '<ir_version: 8, opset_import: ["" : 18]>'


def test_weight_arithmetic_folds_into_one_constant():
    m = parse_model(H + """
        agraph (float[2, 3] x) => (float[2, 3] y) <float[3] a = {1.0, 2.0, 3.0}, float[3] b = {4.0, 5.0, 6.0}> {
            s = Sqrt(b)
            t = Mul(a, s)
            u = Transpose <perm = [0]> (t)
            y = Add(x, u)
        }""")
    res = check_rewrite(m, ["Add"])
    assert res.report["oracle"]["folded"] >= 1
    (c,) = [t for t in res.model.graph.initializer]
    assert np.allclose(numpy_helper.to_array(c), np.array([1, 2, 3]) * np.sqrt([4, 5, 6]))


def test_random_ops_are_never_folded():
    m = parse_model(H + """
        agraph (float[3] x) => (float[3] y) <float[3] a = {1.0, 2.0, 3.0}> {
            r = RandomUniformLike(a)
            y = Add(x, r)
        }""")
    res = optimized(m)
    assert [n.op_type for n in res.model.graph.node] == ["RandomUniformLike", "Add"]
    assert res.report["oracle"]["fold_refused"] == {"RandomUniformLike: random op": 1}


def _expand_model(rows: int) -> onnx.ModelProto:
    return parse_model(H + f"""
        agraph (float[{rows}, 1024] x) => (float[{rows}, 1024] y) {{
            one = Constant <value = float {{1.0}}> ()
            shape = Constant <value = int64[2] {{{rows}, 1024}}> ()
            big = Expand(one, shape)
            y = Add(x, big)
        }}""")


def test_a_blow_up_over_the_fold_limit_is_refused():
    m = _expand_model(512)  # a 2 MiB constant from a 4-byte scalar
    res = optimized(m)
    assert "Expand" in [n.op_type for n in res.model.graph.node]
    (why,) = res.report["oracle"]["fold_refused"]
    assert why == "Expand: result of 2097152 bytes is over the fold limit and larger than its inputs"
    assert_same_outputs(m, res.model)
    assert_verified(m, res)
    res = optimized(m, fold_limit=4 << 20)  # --fold-limit 4 MiB
    assert [n.op_type for n in res.model.graph.node] == ["Add"]
    assert_same_outputs(m, res.model)
    assert_verified(m, res)


def test_a_big_result_no_larger_than_its_inputs_folds():
    w = np.arange(600 * 1024, dtype=np.float32).reshape(600, 1024)  # 2.3 MiB
    g = helper.make_graph(
        [helper.make_node("Transpose", ["w"], ["wt"]), helper.make_node("MatMul", ["x", "wt"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 1024])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 600])],
        [numpy_helper.from_array(w, "w")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    res = check_rewrite(m, ["MatMul"])
    assert res.report["oracle"]["fold_refused"] == {}


def test_initializers_that_are_graph_inputs_are_never_folded():
    m = parse_model(H + """
        agraph (float[3] x, float[3] b) => (float[3] y) <float[3] b = {1.0, 2.0, 3.0}, float[3] c = {1.0, 1.0, 1.0}> {
            d = Add(b, c)
            y = Mul(x, d)
        }""")
    res = check_rewrite(m, ["Add", "Mul"], feeds={"x": np.ones(3, np.float32)})
    assert res.report["oracle"]["folded"] == 0


def test_mixed_dtypes_are_refused(tmp_path):
    # A wrong user rule drops a Cast, which would add float16 to float32; the folder refuses.
    rules = tmp_path / "bad.egg"
    rules.write_text("(ruleset bad)\n(rewrite (Add (Cast x rm sat t) y) (Add x y) :ruleset bad :name \"drop-cast\")\n")
    m = parse_model(H + """
        agraph (float[2] x) => (float[2] y) <float16[2] h = {15360, 16384}, float[2] f = {1.0, 2.0}> {
            c = Cast <to = 1> (h)
            s = Add(c, f)
            y = Mul(x, s)
        }""")
    res = optimized(m, rule_files=[rules])
    assert res.report["oracle"]["fold_refused"] == {"Add: mixed dtypes F16, F32": 1}


@pytest.mark.parametrize("a, op, b", [(2**62, "Mul", 4), (2**63 - 1, "Add", 1), (-(2**63), "Sub", 1)])
def test_int64_scalar_overflow_wraps_as_the_runtime_does(a, op, b):
    # egglog's checked i64 arithmetic stopped the run ("call of primitive * failed; check the
    # --rules files", with no --rules file given): the fold rules now leave such magnitudes
    # to the oracle, which wraps as onnxruntime does
    m = parse_model(H + f"""
        agraph (int64[2] x) => (int64[2] y) {{
            a = Constant <value = int64 {{{a}}}> ()
            b = Constant <value = int64 {{{b}}}> ()
            c = {op}(a, b)
            y = Add(x, c)
        }}""")
    res = optimized(m)
    assert_same_outputs(m, res.model)
    assert_verified(m, res)


# ---- folding computes what onnxruntime computes: onnx's reference evaluator differs from it
# on some inputs, and where they disagree nothing is folded


@pytest.mark.parametrize("const, op, probe", [
    # log(softmax) underflows: the reference gives -inf, onnxruntime -1000
    ("float[2] c = {1000.0, 0.0}", "l = LogSoftmax(c)", -2000.0),
    # NaN in an ArgMax: the reference takes the NaN's index 1, onnxruntime 2
    ("float[1, 3] c = {1.0, nan, 3.0}", "a = ArgMax <axis = 1, keepdims = 0> (c)\n l = Cast <to = 1> (a)", 1.5),
    # the same behind a Div, which the check once left to the reference with all it reaches
    ("float[1, 3] c = {2.0, nan, 6.0}, float two = {2.0}",
     "d = Div(c, two)\n a = ArgMax <axis = 1, keepdims = 0> (d)\n l = Cast <to = 1> (a)", 1.5),
    # an int32 sum that overflows: the reference wraps to -2^31, onnxruntime gives 2^31 - 1;
    # behind an integer Div, which onnxruntime is not given (SIGFPE): the reference's quotient
    ("int32[2] c = {2147483647, 1}, int32 one = {1}",
     "d = Div(c, one)\n r = ReduceSum <keepdims = 1> (d)\n l = Cast <to = 1> (r)", 0.0),
])
def test_a_constant_the_reference_evaluator_gets_wrong_is_not_folded(const, op, probe):
    # y = x < the constant: random normal inputs never see the difference, x = probe does
    m = parse_model(H + f"""
        agraph (float[4] x) => (bool[4] y) <{const}, int64[1] i = {{-1}}> {{
            {op}
            s = Gather(l, i)
            y = Less(x, s)
        }}""")
    res = optimized(m)
    x = np.array([probe, 0.0, -1.0, 2.5], np.float32)
    assert_same_outputs(m, res.model, {"x": x}, ort_optimize=False)
    assert_verified(m, res)
    refused = res.report["oracle"]["fold_refused"]
    assert any("onnxruntime" in why for why in refused), refused


def test_a_constant_both_evaluators_agree_on_folds_to_onnxruntimes_value():
    # Range in float32: the reference computes start + i * delta, onnxruntime adds delta up
    # (0.70000005): both within rounding, and the folded constant is onnxruntime's
    m = parse_model(H + """
        agraph (float[10] x) => (float[10] y) {
            a = Constant <value = float {0.0}> ()
            b = Constant <value = float {1.0}> ()
            d = Constant <value = float {0.1}> ()
            r = Range(a, b, d)
            y = Add(x, r)
        }""")
    res = check_rewrite(m, ["Add"], rtol=0, atol=0, ort_optimize=False)
    (c,) = res.model.graph.initializer
    from eqsat.verification import run
    ort_range = run(parse_model(H + """
        agraph (float[1] z) => (float[10] r) {
            a = Constant <value = float {0.0}> ()
            b = Constant <value = float {1.0}> ()
            d = Constant <value = float {0.1}> ()
            r = Range(a, b, d)
        }"""), {"z": np.zeros(1, np.float32)}, optimize=False)["r"]
    assert numpy_helper.to_array(c).tobytes() == ort_range.tobytes()


def test_an_integer_division_by_zero_beside_a_checked_fold_leaves_the_check():
    # onnxruntime refuses an int64 division by a constant 0 (and stops the process, SIGFPE, on
    # INT64_MIN / -1): a Div or Mod is left to the reference, so the batch beside it still
    # runs under onnxruntime, and the LogSoftmax it disagrees on stays
    m = parse_model(H + """
        agraph (float[2] x, int64[1] k) => (float[2] y, int64[1] z) <float[2] c = {1000.0, 0.0},
                                                                    int64[1] a = {7}, int64[1] b = {0}> {
            l = LogSoftmax(c)
            y = Add(x, l)
            q = Div(a, b)
            z = Add(k, q)
        }""")
    res = optimized(m)
    assert "LogSoftmax" in [n.op_type for n in res.model.graph.node]


@pytest.mark.parametrize("opset", [13, 17, 19])
def test_a_constant_weights_dequantize_folds_at_every_opset(opset):
    """DequantizeLinear of a constant int8 weight folds into its float32 values, with the
    model at opset 13 or 17 too (onnx's reference evaluator implements the op only from
    opset 19: the fold failed there, and a float Conv left between quantized ops, whose
    input DQ two nodes read, kept dequantizing its weight on every run)."""
    w = np.arange(-12, 12, dtype=np.int8).reshape(2, 3, 2, 2)
    inits = [numpy_helper.from_array(w, "wq"), numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(np.array(3, np.int8), "z")]
    nodes = [helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["w"]),
             helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[2, 2])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 5, 5])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2, 4, 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    res = check_rewrite(m, ["Conv"])
    assert not any("DequantizeLinear" in k for k in res.report["oracle"]["fold_refused"])
    (c,) = res.model.graph.initializer
    np.testing.assert_array_equal(numpy_helper.to_array(c), (w.astype(np.float32) - 3) * np.float32(0.05))


def test_a_dequantize_of_a_runtime_value_is_not_folded():
    """DequantizeLinear of the graph's input has no constant to fold (opset 17)."""
    m = parse_model('<ir_version: 8, opset_import: ["" : 17]>' + """
        agraph (int8[4] x) => (float[4] y) <float s = {0.5}, int8 z = {1}> {
            y = DequantizeLinear(x, s, z)
        }""")
    res = check_rewrite(m, ["DequantizeLinear"], feeds={"x": np.array([-128, -1, 0, 127], np.int8)})
    assert res.report["oracle"]["fold_refused"] == {}


def test_a_value_onnxruntime_lacks_leaves_the_rest_of_its_fold_batch_checked():
    # one fold batch: Tan in double (onnxruntime has no kernel) beside a ReduceMax over a NaN,
    # where the reference gives NaN and onnxruntime 2. The batch's session failed as a whole,
    # which left the ReduceMax to the reference, unchecked
    from onnx.reference import ReferenceEvaluator

    from eqsat.oracle.fold import _onnxruntime_values

    m = parse_model(H + """
        agraph () => (double[2] t, float[3] r) <double[2] c = {1.0, 2.0},
                                                  float[2, 3] n = {nan, 1.0, 2.0, 3.0, 4.0, nan}> {
            t = Tan(c)
            a = Constant <value = int64[1] {0}> ()
            r = ReduceMax <keepdims = 0> (n, a)
        }""")
    ref = ReferenceEvaluator(m)
    values = ref.run(None, {}, intermediate=True)
    tan, rmax = _onnxruntime_values(m, values)
    assert tan is None  # onnxruntime cannot run it: the reference's value stands
    assert rmax is not None and rmax[2] == 2.0 and np.isnan(values["r"][2])
