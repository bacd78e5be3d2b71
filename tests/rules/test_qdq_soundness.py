"""rules/qdq.egg against crafted models: rewrites that must not change what a model computes
on inputs verification may not draw. Verification fed integers in [-9, 9] (quantized codes now
span their type, eqsat/verification/feeds.py), and its QDQ allowance accepted what
onnxruntime's own optimizer also changes (its QDQFinalCleanupTransformer removes DQ -> Q pairs
where they are no identity; now left out of the allowance's run), so a rewrite wrong only for
larger codes was written with exit 0 unless the rule's guard refused it. Each test optimizes a
model and compares it with the original under onnxruntime with its graph optimizations off
(each model as written), exactly, on inputs chosen to show the difference.

- qdq-dq-q-cancel: Q(DQ(y, s, z), s, z) is y only where DQ's float result carries y - z
  exactly enough: a float32 scale (a float16 one rounds (y - z) * s to 11 bits: int16 codes
  above 2048 come back moved, and it overflows to inf at 65504: int8 codes come back
  saturated), and a constant scale so small that (y - z) * s cannot overflow float32 (the
  guard also asks for a normal scale: onnxruntime's denormals-as-zero option would make a
  subnormal one 0). A scale computed at run time has no known range: the pair stays.
- qdq-conv-zero-bias: an int32 bias of zeros adds nothing only at a finite scale (0 * inf
  is NaN); that model was refused by verification, not written, but the fusion was wasted.
- the requantizing fusions (qdq-requant-scale): QLinearAdd, QLinearConcat and QLinearConv with
  a huge, zero or subnormal scale compute what the float form does not (it overflows to inf or
  underflows to 0 and Q saturates; the fused ratio of scales is 1 or inf), and verification's
  allowance took it, as onnxruntime's own fusion computes the same: written with exit 0.
- qdq-scalar-params: QLinearAdd, QLinearMul and QLinearAveragePool take scalar scales and zero
  points only; with ones of shape [1] the fused model did not load, and the whole model was
  refused (exit 1)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ..conftest import assert_same_outputs, assert_verified, op_list, optimized

CANCEL = "qdq-dq-q-cancel"

# onnxruntime's uint8 x int8 kernels taken to saturate, whatever this machine's do (conftest)
pytestmark = pytest.mark.usefixtures("portable_weights")


def pair_model(ytype: int, scale: np.ndarray, zero_point: int = 0, axis: int | None = None,
               scale_input: bool = False) -> onnx.ModelProto:
    """out = QuantizeLinear(DequantizeLinear(y, s, z), s, z), y [2, 8] of `ytype`, s `scale`
    (its numpy type; per tensor, or along `axis`), z `zero_point` of y's type (s a graph input
    with `scale_input`)."""
    np_t = helper.tensor_dtype_to_np_dtype(ytype)
    s = np.asarray(scale)
    z = np.full(s.shape, zero_point, np_t)
    inits = [numpy_helper.from_array(z, "z")]
    inputs = [helper.make_tensor_value_info("y", ytype, [2, 8])]
    if scale_input:
        inputs.append(helper.make_tensor_value_info("s", helper.np_dtype_to_tensor_dtype(s.dtype), list(s.shape)))
    else:
        inits.append(numpy_helper.from_array(s, "s"))
    attrs = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node("DequantizeLinear", ["y", "s", "z"], ["d"], **attrs),
             helper.make_node("QuantizeLinear", ["d", "s", "z"], ["out"], **attrs)]
    g = helper.make_graph(nodes, "pair", inputs, [helper.make_tensor_value_info("out", ytype, [2, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.checker.check_model(m, full_check=True)
    return m


def full_range(ytype: int) -> np.ndarray:
    """y [2, 8]: the type's extremes and values well beyond verification's [-9, 9]."""
    info = np.iinfo(helper.tensor_dtype_to_np_dtype(ytype))
    lo, hi = int(info.min), int(info.max)
    vals = [lo, hi, lo + 1, hi - 1, 0, 1, -1 if lo < 0 else 2, 9, 60, 100, hi // 2 + 1, lo // 2, 2049,
            3001, 30001, -3001]
    return np.clip(np.array(vals, np.int64), lo, hi).astype(info.dtype).reshape(2, 8)


def check_pair(m: onnx.ModelProto, cancels: bool, feeds: dict | None = None) -> None:
    res = optimized(m, target="ort")
    fired = res.report["saturation"]["rule_matches"].get(CANCEL, 0) > 0
    assert fired == cancels, f"{CANCEL} fired: {fired}; ops {op_list(res.model)}"
    ytype = m.graph.input[0].type.tensor_type.elem_type
    feeds = feeds or {"y": full_range(ytype)}
    assert_same_outputs(m, res.model, feeds, ort_optimize=False)
    assert_verified(m, res)


@pytest.mark.parametrize("ytype, scale", [
    # (y - z) * s overflows float32 for |y - z| > 50: Q saturates the inf, y does not
    (TensorProto.INT8, np.float32(6.8e36)),
    (TensorProto.UINT16, np.float32(1e34)),
    # per channel: one channel's scale overflows
    (TensorProto.INT8, np.array([0.1, 6.8e36], np.float32)),
    # float16 scales: 11 bits (int16 codes above 2048 round) and 65504 at most (int8 * 1000 overflows)
    (TensorProto.INT16, np.float16(1.0)),
    (TensorProto.INT8, np.float16(1000.0)),
], ids=["int8-huge", "uint16-huge", "int8-per-channel-huge", "int16-float16",
        "int8-float16-overflow"])
def test_dq_q_pair_whose_float_form_is_not_exact_stays(ytype, scale):
    m = pair_model(ytype, scale, axis=0 if np.ndim(scale) else None)
    # the original differs from y on these inputs: the pair is no identity here
    check_pair(m, cancels=False)


def test_dq_q_pair_with_a_scale_computed_at_run_time_stays():
    # the scale is fed: 6.8e36 makes the pair saturate; verification draws standard normal scales
    m = pair_model(TensorProto.INT8, np.float32(0.1), scale_input=True)
    y = full_range(TensorProto.INT8)
    check_pair(m, cancels=False, feeds={"y": y, "s": np.array(6.8e36, np.float32)})


@pytest.mark.parametrize("ytype, scale, zero_point", [
    (TensorProto.INT8, np.float32(0.05), 3),
    (TensorProto.UINT16, np.float32(1e-30), 100),
    (TensorProto.INT16, np.float32(1e30), -5),
    (TensorProto.INT8, np.array([0.1, 0.2], np.float32), -7),
], ids=["int8", "uint16-tiny", "int16-large", "int8-per-channel"])
def test_dq_q_pair_with_an_exact_float32_scale_still_cancels(ytype, scale, zero_point):
    m = pair_model(ytype, scale, zero_point, axis=0 if np.ndim(scale) else None)
    check_pair(m, cancels=True)


# ---- qdq-conv-zero-bias: a bias of zeros adds nothing only where its scale is finite


def test_conv_with_a_zero_bias_of_infinite_scale_keeps_the_bias():
    # DQ(0, inf) is 0 * inf = NaN in every channel: the float Conv's outputs are all NaN and
    # QuantizeLinear makes them its lowest code, where a QLinearConv without the bias computed
    # the convolution (verification refused that model: every output differed)
    from .test_qdq import conv_model

    m = conv_model(bias_scale=1.0, zero_bias=True, w_max=64)
    (bs,) = [t for t in m.graph.initializer if t.name == "bs"]
    bs.CopyFrom(numpy_helper.from_array(np.full(bs.dims, np.inf, np.float32), "bs"))
    res = optimized(m, target="ort")  # written: no verification failure
    assert res.report["saturation"]["rule_matches"].get("qdq-conv-zero-bias", 0) == 0
    assert_same_outputs(m, res.model, ort_optimize=False)
    assert_verified(m, res)


# ---- requantizing fusions: every scale in [2^-60, 2^30] (qdq-requant-scale)


def requant_model(op: str, x_scale: float, y_scale: float) -> onnx.ModelProto:
    """uint8 codes a, b -> DQ(a, x_scale, 128), DQ(b, x_scale, 128) -> `op` -> Q(y_scale, 128): Add
    or Concat of the two, Conv of a by a uint8 1x1 filter of DQ(w, 0.02, 128) (b unused then), and
    Sigmoid of a. The codes are graph inputs, so any code can be fed; the output is the uint8 code."""
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for v, n in ((x_scale, "s"), (y_scale, "ys"))]
    inits.append(numpy_helper.from_array(np.array(128, np.uint8), "z"))
    shape, nodes = [1, 4, 2, 2], [helper.make_node("DequantizeLinear", ["a", "s", "z"], ["ad"]),
                                  helper.make_node("DequantizeLinear", ["b", "s", "z"], ["bd"])]
    out_shape = list(shape)
    if op == "Conv":
        w = np.random.default_rng(0).integers(60, 197, (4, 4, 1, 1)).astype(np.uint8)
        inits += [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(0.02, np.float32), "ws")]
        nodes += [helper.make_node("DequantizeLinear", ["w", "ws", "z"], ["wd"]),
                  helper.make_node("Conv", ["ad", "wd"], ["c"])]
    elif op == "Concat":
        nodes.append(helper.make_node("Concat", ["ad", "bd"], ["c"], axis=1))
        out_shape[1] *= 2
    elif op == "Sigmoid":
        nodes.append(helper.make_node("Sigmoid", ["ad"], ["c"]))
    else:
        nodes.append(helper.make_node(op, ["ad", "bd"], ["c"]))
    nodes.append(helper.make_node("QuantizeLinear", ["c", "ys", "z"], ["y"]))
    g = helper.make_graph(nodes, "requant", [helper.make_tensor_value_info(n, TensorProto.UINT8, shape) for n in "ab"],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, out_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                          ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    return m


REQUANT_RULES = {"Add": "qdq-add-fuse", "Concat": "qdq-concat-fuse", "Conv": "qdq-conv-fuse",
                 "Sigmoid": "qdq-sigmoid-fuse"}


def every_code() -> dict:
    """a and b: uint8 codes over the whole range, b reversed."""
    a = np.arange(0, 256, 16, dtype=np.uint8).reshape(1, 4, 2, 2)
    return {"a": a, "b": a[:, ::-1].copy()}


@pytest.mark.parametrize("op, x_scale, y_scale", [
    # the float form overflows ((a - 128) * 6.8e36 is inf beyond 50 codes) and Q saturates; the
    # fused kernels' ratio x_scale / y_scale is 1: QLinearAdd, QLinearConcat and QLinearConv gave
    # other codes (up to 191 apart)
    ("Add", 6.8e36, 6.8e36), ("Concat", 6.8e36, 6.8e36), ("Conv", 6.8e36, 6.8e36),
    # a zero output scale: Q(y / 0) saturates each sign; QLinearAdd's ratio is inf (255 for 0)
    ("Add", 0.05, 0.0),
    # subnormal scales: the float form's products underflow to 0; QLinearConv's ratio is 1 (128 for 0)
    ("Conv", 1e-45, 1e-45),
], ids=["add-huge", "concat-huge", "conv-huge", "add-zero-output-scale", "conv-subnormal"])
def test_requantizing_fusion_with_a_scale_out_of_range_does_not_fuse(op, x_scale, y_scale):
    m = requant_model(op, x_scale, y_scale)
    res = optimized(m, target="ort")
    assert res.report["saturation"]["rule_matches"].get(REQUANT_RULES[op], 0) == 0, op_list(res.model)
    assert_same_outputs(m, res.model, every_code(), ort_optimize=False)
    assert_verified(m, res)


@pytest.mark.parametrize("op", sorted(REQUANT_RULES))
def test_requantizing_fusion_with_scales_in_range_still_fuses(op):
    # the edges of the range: 2^-60 and 2^30
    m = requant_model(op, 2.0 ** -60, 2.0 ** -60)
    res = optimized(m, target="ort")
    assert res.report["saturation"]["rule_matches"].get(REQUANT_RULES[op], 0) > 0, op_list(res.model)
    m = requant_model(op, 0.05, 2.0 ** 30 if op != "Sigmoid" else 0.004)
    res = optimized(m, target="ort")
    assert res.report["saturation"]["rule_matches"].get(REQUANT_RULES[op], 0) > 0, op_list(res.model)


# ---- one-element scales and zero points of shape [1]: QLinearAdd, QLinearMul and
# QLinearAveragePool take scalars only


def one_element_model(op: str) -> onnx.ModelProto:
    """uint8 codes a, b [1, 4, 2, 2] -> DQ -> `op` (Add or Mul of both, AveragePool of a) -> Q, each
    scale and zero point a tensor of shape [1] (one element, as some exporters write them)."""
    params = ((0.05, np.float32, "s"), (128, np.uint8, "z"), (0.1, np.float32, "ys"), (120, np.uint8, "yz"))
    inits = [numpy_helper.from_array(np.array([v], t), n) for v, t, n in params]
    nodes = [helper.make_node("DequantizeLinear", ["a", "s", "z"], ["ad"]),
             helper.make_node("DequantizeLinear", ["b", "s", "z"], ["bd"])]
    if op == "AveragePool":
        nodes.append(helper.make_node("AveragePool", ["ad"], ["c"], kernel_shape=[2, 2], pads=[1, 1, 0, 0]))
    else:
        nodes.append(helper.make_node(op, ["ad", "bd"], ["c"]))
    nodes.append(helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["y"]))
    codes = [helper.make_tensor_value_info(n, TensorProto.UINT8, [1, 4, 2, 2]) for n in ("a", "b", "y")]
    g = helper.make_graph(nodes, "one", codes[:2], codes[2:], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                          ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    return m


@pytest.mark.parametrize("op, rule", [("Add", "qdq-add-fuse"), ("Mul", "qdq-mul-fuse"),
                                      ("AveragePool", "qdq-average-pool-fuse")])
def test_scales_of_shape_one_do_not_fuse_into_ops_that_take_scalars(op, rule):
    # onnxruntime's QLinearAdd / QLinearMul / QLinearAveragePool refuse a scale or zero point of
    # shape [1] ("Scale and Zero-point must be a scalar") when the model loads, so the fused
    # model did not run and verification refused the whole model (exit 1, nothing written).
    # onnxruntime's own selectors leave Add and Mul unfused there (its AveragePool fusion builds
    # the same unloadable node)
    m = one_element_model(op)
    res = optimized(m, target="ort")
    assert res.report["saturation"]["rule_matches"].get(rule, 0) == 0, op_list(res.model)
    assert_same_outputs(m, res.model, every_code(), ort_optimize=False)
    assert_verified(m, res)
