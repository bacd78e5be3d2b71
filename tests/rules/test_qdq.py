"""rules/qdq.egg: quantized (QDQ) models. DequantizeLinear -> Conv / MatMul / Add / Mul / Sigmoid /
LeakyRelu / GlobalAveragePool / AveragePool / Concat / Gemm -> QuantizeLinear into QLinearConv /
QLinearMatMul / com.microsoft.QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu,
QLinearGlobalAveragePool, QLinearAveragePool, QLinearConcat, QGemm where onnxruntime fuses
(by the consumers of the DQs and of the op, int8 or uint8), a per-tensor
DequantizeLinear moved past Transpose and Reshape (not MaxPool), and DequantizeLinear ->
QuantizeLinear pairs that give their input back. Each rule fires on a minimal model, and
does not fire where it must not (a zero point that differs between the two halves of a pair,
a per-channel axis on the wrong dimension, a bias whose scale is not x_scale * w_scale,
full-range int8 weights that are not constant). At the
end, a float CNN quantized by onnxruntime.quantization.quantize_static, optimized whole.

Tolerance: QLinearConv, QLinearMatMul and QLinearAdd requantize once from the integers,
where the float form rounds a float result, so a fused output may differ from the original
by one quantization step. The models end in a DequantizeLinear (float outputs) and the fused
ones are compared within one step of the output scale (atol = y_scale), both run with
onnxruntime's graph optimizations off (none moved in these tests); the pair removal and the
moves are exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from ..conftest import assert_same_outputs, assert_verified, assert_written, op_list, optimized, parse_model, roundtrip
from ..conftest import check_rewrite as check_any_layout

RNG = np.random.default_rng(0)
X_SCALE, W_SCALE, Y_SCALE = 0.05, 0.02, 0.1

# onnxruntime's uint8 x int8 kernels taken to saturate, whatever this machine's do (conftest)
pytestmark = pytest.mark.usefixtures("portable_weights")


def check_rewrite(model, expect_ops, *args, **opts):
    """conftest.check_rewrite in the NCHW layout (the blocked layout is tested in test_layout.py)."""
    opts.setdefault("layout", "nchw")
    return check_any_layout(model, expect_ops, *args, **opts)


def ints(a) -> str:
    return ", ".join(str(int(v)) for v in np.ravel(a))


def floats(a) -> str:
    return ", ".join(repr(float(v)) for v in np.ravel(a))


def dims(shape) -> str:
    return ", ".join(str(d) for d in shape)


def model(text: str, opset: int = 17) -> onnx.ModelProto:
    """A model from ONNX text, its initializers stored as raw bytes as quantizers write them
    (the text form stores them as typed lists, and the tensor store keys the two forms
    apart, so a folded x_scale * w_scale would not meet the bias scale written in text)."""
    m = parse_model(f'<ir_version: 8, opset_import: ["" : {opset}]>\n' + text)
    for t in m.graph.initializer:
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t), t.name))
    onnx.checker.check_model(m)
    return m


def conv_model(w_scale=W_SCALE, w_axis=0, bias_scale=None, bias=True, cin=2, cout=4, x_type="int8",
               w_max=127, zero_bias=False) -> onnx.ModelProto:
    """x -> Q -> DQ -> Conv(DQ(w), DQ(b)) -> Q -> DQ: a quantize_static-shaped Conv. `w_scale`
    a float (per tensor) or one per channel of `w_axis`; the bias scale is x_scale * w_scale
    in float32 unless `bias_scale` is given (a bias of zeros with `zero_bias`); activations of
    `x_type`, int8 weights in [-w_max, w_max]."""
    w = RNG.integers(-w_max, w_max + 1, (cout, cin, 3, 3))
    ws = np.asarray(w_scale, np.float32)
    w_attr = f"<axis = {w_axis}> " if ws.ndim else ""
    per = f"[{len(ws)}]" if ws.ndim else ""
    inits = [f"int8[{dims(w.shape)}] w = {{{ints(w)}}}", f"float{per} ws = {{{floats(ws)}}}",
             f"int8{per} wz = {{{ints(np.zeros(ws.shape))}}}"]
    body = f"wd = DequantizeLinear {w_attr}(w, ws, wz)\n"
    conv_in = "xd, wd"
    if bias:
        bs = np.float32(X_SCALE) * ws if bias_scale is None else np.asarray(bias_scale, np.float32)
        bs = np.broadcast_to(bs, (cout,))
        b = np.zeros(cout, np.int64) if zero_bias else RNG.integers(-300, 300, cout)
        inits += [f"int32[{cout}] b = {{{ints(b)}}}",
                  f"float[{cout}] bs = {{{floats(bs)}}}"]
        body += "bd = DequantizeLinear <axis = 0> (b, bs)\n"
        conv_in += ", bd"
    return model(f"""
        agraph (float[1, {cin}, 6, 6] x) => (float[1, {cout}, 6, 6] z) <{", ".join(inits)}> {{
            xs = Constant <value = float {{{X_SCALE}}}> ()
            xz = Constant <value = {x_type} {{{3 if x_type == "int8" else 130}}}> ()
            ys = Constant <value = float {{{Y_SCALE}}}> ()
            yz = Constant <value = {x_type} {{{-2 if x_type == "int8" else 125}}}> ()
            xq = QuantizeLinear (x, xs, xz)
            xd = DequantizeLinear (xq, xs, xz)
            {body}
            c = Conv <pads = [1, 1, 1, 1]> ({conv_in})
            yq = QuantizeLinear (c, ys, yz)
            z = DequantizeLinear (yq, ys, yz)
        }}""")


# One quantization step of the output; both models run as written (onnxruntime's own QDQ
# fusion of the original, with its graph optimizations on, moves some outputs by many steps:
# its int8 kernels on AVX2 saturate 16-bit intermediate sums of full-range weights).
ONE_STEP = {"rtol": 0.0, "atol": Y_SCALE * 1.001, "ort_optimize": False}
# the weight's (and the bias's) DequantizeLinear folded into float constants (at every opset)
# (onnxruntime's own optimization then blocks the float Conv, which rounds otherwise than its
# optimization of the original, where the weight's DequantizeLinear keeps it NCHW: ONE_STEP)
UNFUSED_CONV = ["QuantizeLinear", "DequantizeLinear", "Conv", "QuantizeLinear", "DequantizeLinear"]


# ---- the op language: QuantizeLinear and DequantizeLinear are typed ops and come back as written

def test_qdq_ops_round_trip_at_opset_10_and_with_per_channel_axes():
    old = model("""
        agraph (float[2, 4] x) => (float[2, 4] y) <float s = {0.1}, uint8 z = {7}> {
            q = QuantizeLinear (x, s, z)
            y = DequantizeLinear (q, s, z)
        }""", opset=10)
    new = model("""
        agraph (float[4, 3] x) => (float[4, 3] y) <float[4] s = {0.1, 0.2, 0.3, 0.4}, int8[4] z = {0, 1, 2, 3}> {
            q = QuantizeLinear <axis = 0> (x, s, z)
            y = DequantizeLinear <axis = 0> (q, s)
        }""", opset=21)
    for m in (old, new):
        rt = roundtrip(m)
        assert [(n.op_type, [(a.name, a.i) for a in n.attribute], len(n.input)) for n in rt.graph.node] == \
            [(n.op_type, [(a.name, a.i) for a in n.attribute], len(n.input)) for n in m.graph.node]
        assert_same_outputs(m, rt, ort_optimize=False)
        assert_verified(m, rt)


# ---- DQ -> Conv -> Q

def test_conv_without_bias_fuses_into_qlinearconv():
    # int8 activations, 7-bit weights: the pairs are made uint8 first (as onnxruntime's
    # QDQS8ToU8Transformer on CPUs without int8 dot products), then fused
    res = check_rewrite(conv_model(bias=False, w_max=64), ["QuantizeLinear", "QLinearConv", "DequantizeLinear"],
                        fired=["qdq-s8-pair-as-u8", "qdq-conv-no-bias", "qdq-conv-fuse"], **ONE_STEP)
    (node,) = [n for n in res.model.graph.node if n.op_type == "QLinearConv"]
    assert [a.name for a in node.attribute] == ["pads"] and len(node.input) == 8
    types = {t.name: t.data_type for t in res.model.graph.initializer}
    assert types.get(node.input[2]) == types.get(node.input[7]) == onnx.TensorProto.UINT8  # zero points


def test_conv_with_int8_activations_and_full_range_weights_fuses_with_uint8_weights():
    # quantize_static's defaults: the activations are made uint8 and so are the weights, for
    # onnxruntime's exact uint8 x uint8 kernel (its uint8 x int8 one saturates)
    res = check_rewrite(conv_model(bias=False), ["QuantizeLinear", "QLinearConv", "DequantizeLinear"],
                        fired=["qdq-s8-pair-as-u8", "qdq-weight-s8-as-u8", "qdq-conv-fuse"], **ONE_STEP)
    (node,) = [n for n in res.model.graph.node if n.op_type == "QLinearConv"]
    types = {t.name: t.data_type for t in res.model.graph.initializer}
    assert types[node.input[3]] == types[node.input[5]] == onnx.TensorProto.UINT8  # w and its zero point


def test_conv_with_int8_weights_from_an_input_does_not_fuse():
    # a weight that is not a constant cannot be made uint8, and full-range int8 weights would
    # meet onnxruntime's saturating uint8 x int8 kernel
    m = conv_model(bias=False)
    w = next(t for t in m.graph.initializer if t.name == "w")
    m.graph.input.append(onnx.helper.make_tensor_value_info("w", onnx.TensorProto.INT8, list(w.dims)))
    m.graph.initializer.remove(w)
    feeds = {"x": RNG.standard_normal((1, 2, 6, 6)).astype(np.float32),
             "w": RNG.integers(-127, 128, list(w.dims)).astype(np.int8)}
    check_rewrite(m, UNFUSED_CONV + ["DequantizeLinear"], feeds=feeds,
                  not_fired=["qdq-weight-s8-as-u8", "qdq-conv-fuse"])


def test_conv_with_bias_and_per_channel_weights_fuses_into_qlinearconv():
    m = conv_model(w_scale=[0.01, 0.02, 0.015, 0.03], w_max=64)
    res = check_rewrite(m, ["QuantizeLinear", "QLinearConv", "DequantizeLinear"],
                        fired=["qdq-bias-scale-product", "qdq-conv-int32-bias", "qdq-conv-fuse"], **ONE_STEP)
    (node,) = [n for n in res.model.graph.node if n.op_type == "QLinearConv"]
    assert len(node.input) == 9  # the int32 bias, unchanged


def test_conv_with_uint8_activations_fuses_with_7_bit_weights():
    # what quantize_static writes with reduce_range: int8 weights in [-64, 64]
    check_rewrite(conv_model(x_type="uint8", w_max=64), ["QuantizeLinear", "QLinearConv", "DequantizeLinear"],
                  fired=["qdq-exact-kernel-u8s7", "qdq-conv-int32-bias", "qdq-conv-fuse"], **ONE_STEP)


def test_conv_with_uint8_activations_and_full_range_int8_weights_fuses_with_uint8_weights():
    # onnxruntime's uint8 x int8 kernel on AVX2 saturates pairs of products in 16 bits: the
    # weights are made uint8 (exact) for its uint8 x uint8 kernel
    check_rewrite(conv_model(x_type="uint8"), ["QuantizeLinear", "QLinearConv", "DequantizeLinear"],
                  fired=["qdq-weight-s8-as-u8", "qdq-exact-kernel-u8u8", "qdq-conv-int32-bias", "qdq-conv-fuse"],
                  **ONE_STEP)


def test_full_range_int8_weights_stay_int8_where_the_uint8_x_int8_kernel_is_exact(monkeypatch):
    # with int8 dot products (VNNI) onnxruntime's uint8 x int8 kernel sums exactly and runs
    # 2.6x faster than uint8 x uint8: the weights stay as they are
    from eqsat.backends.ort.target import _probe_u8s8

    monkeypatch.setenv("EQSAT_U8S8_EXACT", "1")
    m = conv_model(x_type="uint8")
    res = optimized(m, layout="nchw")
    assert op_list(res.model) == ["QuantizeLinear", "QLinearConv", "DequantizeLinear"]
    matches = res.report["saturation"]["rule_matches"]
    assert matches.get("qdq-exact-kernel-u8s8", 0) > 0 and matches.get("qdq-weight-s8-as-u8", 0) == 0
    (node,) = [n for n in res.model.graph.node if n.op_type == "QLinearConv"]
    types = {t.name: t.data_type for t in res.model.graph.initializer}
    assert types[node.input[3]] == types[node.input[5]] == onnx.TensorProto.INT8  # w and its zero point
    if _probe_u8s8():  # this CPU's kernel is exact: the numbers hold here
        assert_same_outputs(m, res.model, rtol=0.0, atol=Y_SCALE * 1.001, ort_optimize=False)
        assert_verified(m, res)


def test_the_uint8_x_int8_probe_tells_an_exact_kernel_from_a_saturating_one(monkeypatch):
    # the probe's QLinearConv: 64 products of 255 and -128, requantized by 1 / 16000 around 255;
    # exactly -2088960 -> 124, 32 pairs saturated at -32768 -> 189 (numpy's arithmetic here)
    from eqsat.backends.ort.target import _probe_u8s8, u8s8_exact

    exact = np.int64(255) * -128 * 64
    saturated = 32 * max(np.int64(255) * -128 * 2, -32768)
    assert (int(np.round(exact / 16000)) + 255, int(np.round(saturated / 16000)) + 255) == (124, 189)
    assert isinstance(_probe_u8s8(), bool)
    for forced in ("0", "1"):
        monkeypatch.setenv("EQSAT_U8S8_EXACT", forced)
        assert u8s8_exact() is (forced == "1")


def test_conv_bias_with_another_scale_does_not_fuse():
    # the bias is quantized with 2 * x_scale * w_scale: QLinearConv would add it at half its value
    m = conv_model(bias_scale=2 * np.float32(X_SCALE) * np.float32(W_SCALE))
    check_rewrite(m, UNFUSED_CONV,
                  not_fired=["qdq-conv-int32-bias", "qdq-conv-fuse", "qdq-conv-zero-bias"], **ONE_STEP)


def test_conv_with_a_zero_bias_of_another_scale_fuses_without_the_bias():
    # exporters share one int32 bias of zeros among convs whose x_scale * w_scale differ
    # (torchvision's MobileNetV2 through quantize_static): zero at any scale adds nothing
    m = conv_model(bias_scale=2 * np.float32(X_SCALE) * np.float32(W_SCALE), zero_bias=True, w_max=64)
# a requantizing program eqsat optimize does not write: its verification refuses it and retries with
    # fewer requantizing fusions (eqsat.api.finish); this tests the rule's program
    res = check_rewrite(m, ["QuantizeLinear", "QLinearConv", "DequantizeLinear"],
                        fired=["qdq-conv-zero-bias", "qdq-conv-fuse"], not_fired=["qdq-conv-int32-bias"], **ONE_STEP,
                        unverified="requantizing: eqsat optimize retries")
    (node,) = [n for n in res.model.graph.node if n.op_type == "QLinearConv"]
    assert len(node.input) == 8  # no bias
    assert_written(m, res)  # the program eqsat optimize writes instead


def test_conv_weight_per_channel_on_the_input_axis_does_not_fuse():
    # scales along axis 1 (input channels): QLinearConv takes one scale per output channel
    m = conv_model(w_scale=[0.01, 0.02, 0.015, 0.03], w_axis=1, cin=4, cout=4)
    check_rewrite(m, UNFUSED_CONV,
                  not_fired=["qdq-conv-fuse", "qdq-bias-scale-product", "qdq-conv-int32-bias"], **ONE_STEP)


# ---- only where onnxruntime fuses: the consumers of the DQs and of the op (rules/qdq.egg)

def ort_extended_ops(m: onnx.ModelProto) -> list[str]:
    """The ops of `m` after onnxruntime's own ORT_ENABLE_EXTENDED optimization (CPU)."""
    import tempfile  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    import onnxruntime as ort  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as d:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = str(Path(d) / "o.onnx")
        so.log_severity_level = 3
        ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return op_list(onnx.load(str(Path(d) / "o.onnx")))


def with_second_reader(m: onnx.ModelProto, value: str, shape: list[int]) -> onnx.ModelProto:
    """`m` with one more node reading `value` (of `shape`): r = Relu(value), a graph output."""
    from onnx import TensorProto, helper  # noqa: PLC0415

    m = onnx.ModelProto.FromString(m.SerializeToString())
    m.graph.node.append(helper.make_node("Relu", [value], ["r"]))
    m.graph.output.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, shape))
    return m


def fused(ops: list[str]) -> int:
    return sum(op.endswith(("QLinearConv", "QLinearMatMul", "QLinearAdd", "QLinearMul")) for op in ops)


def test_conv_with_an_int8_dq_read_twice_does_not_fuse_as_onnxruntime():
    # onnxruntime on a CPU without int8 dot products (AVX2) fuses int8 activations only after
    # turning a Q -> DQ pair into uint8 (QDQS8ToU8Transformer), and only a pair whose DQ has
    # one consumer: ResNet-50's block inputs, read by a conv and the residual Add, stay Conv
    m = with_second_reader(conv_model(bias=False), "xd", [1, 2, 6, 6])
    res = check_rewrite(m, UNFUSED_CONV + ["Relu"], not_fired=["qdq-conv-fuse"], **ONE_STEP)
    assert fused(op_list(res.model)) == 0 <= fused(ort_extended_ops(m))


def test_conv_with_an_int8_dq_read_once_fuses_as_onnxruntime():
    m = conv_model(bias=False, w_max=64)
    res = check_rewrite(m, ["QuantizeLinear", "QLinearConv", "DequantizeLinear"],
                        fired=["qdq-s8-pair-as-u8", "qdq-conv-fuse"], **ONE_STEP)
    assert fused(op_list(res.model)) == 1 <= fused(ort_extended_ops(m))


def test_conv_with_its_int8_output_pair_read_twice_does_not_fuse():
    # the output Q -> DQ pair is not turned into uint8 when the DQ has two consumers
    m = with_second_reader(conv_model(bias=False), "z", [1, 4, 6, 6])
    res = check_rewrite(m, UNFUSED_CONV + ["Relu"], not_fired=["qdq-conv-fuse"], **ONE_STEP)
    assert fused(op_list(res.model)) == 0 <= fused(ort_extended_ops(m))


def test_conv_with_a_uint8_dq_read_twice_fuses_as_onnxruntime():
    # uint8: onnxruntime copies a shared DQ for each consumer (EnsureUniqueDQForNodeUnit) and fuses
    m = with_second_reader(conv_model(x_type="uint8", w_max=64, bias=False), "xd", [1, 2, 6, 6])
    res = check_rewrite(m, ["QuantizeLinear", "DequantizeLinear", "Relu", "QLinearConv", "DequantizeLinear"],
                        fired=["qdq-conv-fuse"], **ONE_STEP)
    assert fused(op_list(res.model)) == 1 <= fused(ort_extended_ops(m))


def test_conv_whose_output_has_another_reader_does_not_fuse():
    # the Conv's output is read by the Q and by a Relu: onnxruntime does not fuse, nor eqsat
    m = with_second_reader(conv_model(x_type="uint8", w_max=64, bias=False), "c", [1, 4, 6, 6])
    res = check_rewrite(m, UNFUSED_CONV + ["Relu"], not_fired=["qdq-conv-fuse"], **ONE_STEP)
    assert fused(op_list(res.model)) == 0 == fused(ort_extended_ops(m))


# ---- DQ -> MatMul -> Q

def matmul_model(b_scale=W_SCALE, b_axis=1, b_max=64) -> onnx.ModelProto:
    """uint8 activations times int8 weights in [-b_max, b_max]."""
    b = RNG.integers(-b_max, b_max + 1, (8, 5))
    bsc = np.asarray(b_scale, np.float32)
    shp = f"[{len(bsc)}]" if bsc.ndim else ""
    attr = f"<axis = {b_axis}> " if bsc.ndim else ""
    zeros = ints(np.zeros(bsc.shape))
    return model(f"""
        agraph (float[3, 8] x) => (float[3, 5] z)
            <int8[8, 5] b = {{{ints(b)}}}, float{shp} bs = {{{floats(bsc)}}}, int8{shp} bz = {{{zeros}}}> {{
            xs = Constant <value = float {{{X_SCALE}}}> ()
            xz = Constant <value = uint8 {{128}}> ()
            ys = Constant <value = float {{{Y_SCALE}}}> ()
            yz = Constant <value = uint8 {{120}}> ()
            xq = QuantizeLinear (x, xs, xz)
            xd = DequantizeLinear (xq, xs, xz)
            bd = DequantizeLinear {attr}(b, bs, bz)
            c = MatMul (xd, bd)
            yq = QuantizeLinear (c, ys, yz)
            z = DequantizeLinear (yq, ys, yz)
        }}""")


def test_matmul_fuses_into_qlinearmatmul():
    check_rewrite(matmul_model(), ["QuantizeLinear", "QLinearMatMul", "DequantizeLinear"],
                  fired=["qdq-matmul-fuse"], **ONE_STEP)


def test_matmul_with_full_range_int8_weights_fuses_with_uint8_weights():
    check_rewrite(matmul_model(b_max=127), ["QuantizeLinear", "QLinearMatMul", "DequantizeLinear"],
                  fired=["qdq-weight-s8-as-u8", "qdq-matmul-fuse"], **ONE_STEP)


@pytest.mark.parametrize("axis, rule", [(1, "qdq-matmul-weight-per-column"), (-1, "qdq-matmul-weight-per-column-last")])
def test_matmul_with_per_column_weights_fuses_as_onnxruntime(axis, rule):
    # one scale per output column, as onnxruntime's quantizer writes with per_channel=True and
    # QLinearMatMul takes its b (onnxruntime 1.32 fuses it too)
    m = matmul_model(b_scale=RNG.uniform(0.01, 0.03, 5), b_axis=axis)
    res = check_rewrite(m, ["QuantizeLinear", "QLinearMatMul", "DequantizeLinear"], fired=[rule, "qdq-matmul-fuse"],
                        **ONE_STEP)
    assert fused(op_list(res.model)) == 1 == fused(ort_extended_ops(m))


def test_matmul_with_full_range_per_column_weights_fuses_with_uint8_weights():
    # full-range int8 weights meet the exact uint8 x uint8 kernel, as per tensor
    m = matmul_model(b_scale=RNG.uniform(0.01, 0.03, 5), b_max=127)
    check_rewrite(m, ["QuantizeLinear", "QLinearMatMul", "DequantizeLinear"],
                  fired=["qdq-matmul-weight-per-column", "qdq-weight-s8-as-u8", "qdq-matmul-fuse"], **ONE_STEP)


def test_matmul_with_per_row_weights_does_not_fuse():
    # scales along b's rows (axis 0, its input dimension K): QLinearMatMul has no such form
    m = matmul_model(b_scale=RNG.uniform(0.01, 0.03, 8), b_axis=0)
    check_rewrite(m, ["QuantizeLinear", "DequantizeLinear", "MatMul", "QuantizeLinear", "DequantizeLinear"],
                  not_fired=["qdq-matmul-fuse"])


# ---- DQ -> Add / Mul -> Q (com.microsoft.QLinearAdd / QLinearMul, target ort)

def add_model(a_type="int8", b_type="int8", op="Add") -> onnx.ModelProto:
    """a, b -> Q -> DQ -> `op` (b broadcast along the rows) -> Q -> DQ."""
    zp = {"int8": -3, "uint8": 128}
    return model(f"""
        agraph (float[2, 3, 4] x, float[4] y) => (float[2, 3, 4] z) {{
            sa = Constant <value = float {{0.03}}> ()
            za = Constant <value = {a_type} {{{zp[a_type]}}}> ()
            sb = Constant <value = float {{0.07}}> ()
            zb = Constant <value = {b_type} {{{zp[b_type] + 2}}}> ()
            sc = Constant <value = float {{0.05}}> ()
            zc = Constant <value = {a_type} {{{zp[a_type] - 1}}}> ()
            xq = QuantizeLinear (x, sa, za)
            xd = DequantizeLinear (xq, sa, za)
            yq = QuantizeLinear (y, sb, zb)
            yd = DequantizeLinear (yq, sb, zb)
            c = {op} (xd, yd)
            cq = QuantizeLinear (c, sc, zc)
            z = DequantizeLinear (cq, sc, zc)
        }}""")


QUANTIZED_INPUTS = ["QuantizeLinear", "QuantizeLinear", "DequantizeLinear"]
# onnxruntime's binary QDQ selector fuses Add and Mul alike
BINARY = [("Add", "com.microsoft.QLinearAdd", "qdq-add-fuse"), ("Mul", "com.microsoft.QLinearMul", "qdq-mul-fuse")]


@pytest.mark.parametrize("op, fused_op, rule", BINARY)
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_add_and_mul_fuse_into_their_qlinear_forms(dtype, op, fused_op, rule):
    m = add_model(dtype, dtype, op)
    check_rewrite(m, QUANTIZED_INPUTS + [fused_op], fired=[rule, "qdq-scalar-params-dq", "qdq-scalar-params-q"],
                  rtol=0.0, atol=0.05 * 1.001, ort_optimize=False)
    assert fused_op in ort_extended_ops(m)


@pytest.mark.parametrize("op, fused_op, rule", BINARY)
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_add_and_mul_with_a_dq_read_twice_fuse_only_as_onnxruntime(dtype, op, fused_op, rule):
    # int8: the shared input's pair stays int8 while the other becomes uint8 in onnxruntime,
    # and the op is not fused (ResNet-50's residual Adds); uint8: the DQ is copied and fused
    m = with_second_reader(add_model(dtype, dtype, op), "xd", [2, 3, 4])
    if dtype == "int8":
        res = check_rewrite(m, QUANTIZED_INPUTS + ["DequantizeLinear"] * 2 + [op, "QuantizeLinear", "Relu"],
                            not_fired=[rule], ort_optimize=False)
    else:
        res = check_rewrite(m, QUANTIZED_INPUTS + [fused_op, "DequantizeLinear", "Relu"],
                            fired=[rule], rtol=0.0, atol=0.05 * 1.001, ort_optimize=False)
    assert fused(op_list(res.model)) <= fused(ort_extended_ops(m))


@pytest.mark.parametrize("op, fused_op, rule", BINARY)
def test_add_and_mul_of_int8_and_uint8_fuse_once_the_int8_pairs_are_uint8(op, fused_op, rule):
    m = add_model("int8", "uint8", op)
    res = check_rewrite(m, QUANTIZED_INPUTS + [fused_op], fired=["qdq-s8-pair-as-u8", rule],
                        rtol=0.0, atol=0.05 * 1.001, ort_optimize=False)
    assert fused(op_list(res.model)) == 1 == fused(ort_extended_ops(m))


@pytest.mark.parametrize("op, fused_op, rule", BINARY)
def test_add_and_mul_are_not_fused_for_target_onnx(op, fused_op, rule):
    check_rewrite(add_model(op=op), QUANTIZED_INPUTS + ["DequantizeLinear"] * 2 + [op, "QuantizeLinear"],
                  not_fired=[rule], target="onnx", ort_optimize=False)


def test_mul_whose_output_scale_differs_from_its_dq_is_still_one_requantization():
    # the output's own scale and zero point (not the inputs') go to QLinearMul: a product of
    # 0.03 and 0.07 steps requantized at 0.05 (the test above); here at another zero point
    m = add_model("uint8", "uint8", "Mul")
    zc = next(n for n in m.graph.node if n.output[0] == "zc")
    zc.attribute[0].t.CopyFrom(onnx.helper.make_tensor("value", onnx.TensorProto.UINT8, [], [40]))
    res = check_rewrite(m, QUANTIZED_INPUTS + ["com.microsoft.QLinearMul"], fired=["qdq-mul-fuse"],
                        rtol=0.0, atol=0.05 * 1.001, ort_optimize=False)
    mul = next(n for n in res.model.graph.node if n.op_type == "QLinearMul")
    assert mul.domain == "com.microsoft" and len(mul.input) == 8


# ---- DequantizeLinear moved past Transpose and Reshape

MOVES = ["qdq-dq-past-transpose", "qdq-dq-past-reshape"]


def data_movement_model(scale="float {0.05}", zero_point="int8 {3}", per_channel=False) -> onnx.ModelProto:
    """x -> Q -> DQ, then MaxPool, Reshape and Transpose, each followed by the same Q -> DQ
    (per_channel: `scale` along axis 1 for the first pair, 0.05 and 3 per tensor after)."""
    text = f"""
        agraph (float[1, 4, 6, 6] x) => (float[1, 4, 3, 3] z, float[4, 36] r, float[1, 6, 6, 4] tt) {{
            s = Constant <value = {scale}> ()
            zp = Constant <value = {zero_point}> ()
            sh = Constant <value = int64[2] {{4, 36}}> ()
            xq = QuantizeLinear <axis = 1> (x, s, zp)
            xd = DequantizeLinear <axis = 1> (xq, s, zp)
            p = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (xd)
            pq = QuantizeLinear (p, s, zp)
            z = DequantizeLinear (pq, s, zp)
            rr = Reshape (xd, sh)
            rq = QuantizeLinear (rr, s, zp)
            r = DequantizeLinear (rq, s, zp)
            t = Transpose <perm = [0, 2, 3, 1]> (xd)
            tq = QuantizeLinear (t, s, zp)
            tt = DequantizeLinear (tq, s, zp)
        }}"""
    if per_channel:
        head, tail = text.split("p = MaxPool", 1)
        tail = tail.replace("s, zp)", "so, zo)")
        text = head + """so = Constant <value = float {0.05}> ()
            zo = Constant <value = int8 {3}> ()
            p = MaxPool""" + tail
    return model(text)


UNMOVED = ["QuantizeLinear", "DequantizeLinear", "MaxPool", "Reshape", "Transpose"] + \
    ["QuantizeLinear", "DequantizeLinear"] * 3


def test_dq_moves_past_transpose_and_reshape_and_the_pairs_after_them_cancel():
    # each output DQ(Q(op(DQ(xq)))) is op(DQ(xq)) exactly: the op's result is on the grid
    # already; the MaxPool's pair stays (onnxruntime's int8 MaxPool is the slower one)
    check_rewrite(data_movement_model(), ["QuantizeLinear", "DequantizeLinear", "MaxPool", "QuantizeLinear",
                                          "DequantizeLinear", "Reshape", "Transpose"],
                  fired=MOVES + ["qdq-dq-q-cancel"], rtol=0.0, atol=0.0, ort_optimize=False)


def test_per_channel_dq_does_not_move():
    # a per-channel DQ along axis 1: a Transpose or Reshape moves the channels elsewhere
    m = data_movement_model("float[4] {0.05, 0.1, 0.02, 0.07}", "int8[4] {3, 0, 1, 2}", per_channel=True)
    check_rewrite(m, UNMOVED, not_fired=MOVES, rtol=0.0, atol=0.0, ort_optimize=False)


# ---- DQ -> Q pairs

def pair_model(q_zero_point: int = 3, q_axis: int = 1, per_channel: bool = False) -> onnx.ModelProto:
    """y (int8) -> DQ(s, 3) -> Q(s, q_zero_point) -> DQ(0.5, 0): the pair cancels only where
    the Q's zero point and axis are the DQ's."""
    if per_channel:
        sc = "float[4] s = {0.1, 0.2, 0.3, 0.4}, int8[4] z = {3, 3, 3, 3}, "
        qz = f"int8[4] qz = {{{ints([q_zero_point] * 4)}}}"
    else:
        sc = "float s = {0.1}, int8 z = {3}, "
        qz = f"int8 qz = {{{q_zero_point}}}"
    q_attr = f"<axis = {q_axis}> " if per_channel else ""
    return model(f"""
        agraph (int8[4, 4, 3] y) => (float[4, 4, 3] out) <{sc}{qz}, float s2 = {{0.5}}> {{
            d = DequantizeLinear <axis = 1> (y, s, z)
            q = QuantizeLinear {q_attr}(d, s, qz)
            out = DequantizeLinear (q, s2)
        }}""")


def wide_int8_feeds(m: onnx.ModelProto) -> dict:
    return {"y": RNG.integers(-128, 128, (4, 4, 3)).astype(np.int8)}


def test_dq_q_pair_with_the_same_parameters_cancels():
    m = pair_model()
    check_rewrite(m, ["DequantizeLinear"], fired=["qdq-dq-q-cancel"], feeds=wide_int8_feeds(m), rtol=0, atol=0)


def test_per_channel_dq_q_pair_on_the_same_axis_cancels():
    m = pair_model(per_channel=True)
    check_rewrite(m, ["DequantizeLinear"], fired=["qdq-dq-q-cancel"], feeds=wide_int8_feeds(m), rtol=0, atol=0)


def test_dq_q_pair_with_another_zero_point_stays():
    m = pair_model(q_zero_point=4)
    check_rewrite(m, ["DequantizeLinear", "QuantizeLinear", "DequantizeLinear"], not_fired=["qdq-dq-q-cancel"],
                  feeds=wide_int8_feeds(m), rtol=0, atol=0)


def test_per_channel_dq_q_pair_on_another_axis_stays():
    m = pair_model(per_channel=True, q_axis=0)  # DQ scales rows of axis 1, Q of axis 0
    check_rewrite(m, ["DequantizeLinear", "QuantizeLinear", "DequantizeLinear"], not_fired=["qdq-dq-q-cancel"],
                  feeds=wide_int8_feeds(m), rtol=0, atol=0)


# ---- end to end: a float CNN quantized by onnxruntime, then optimized by eqsat

def float_cnn() -> onnx.ModelProto:
    """Conv -> Relu -> Conv -> Add (a residual block) with seeded random weights."""
    from onnx import TensorProto, helper  # noqa: PLC0415

    rng = np.random.default_rng(1)

    def init(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "r1"], ["y"])]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
                          [init("w1", 8, 3, 3, 3), init("b1", 8), init("w2", 8, 8, 3, 3, scale=0.1), init("b2", 8)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def quantized_cnn(tmp_path, **quant_options) -> str:
    """float_cnn() quantized by onnxruntime.quantization.quantize_static in QDQ form, calibrated
    on eight seeded random inputs; returns the path."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static  # noqa: PLC0415

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(2)
            self.feeds = iter([{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.feeds, None)

    onnx.save(float_cnn(), tmp_path / "float.onnx")
    quantize_static(str(tmp_path / "float.onnx"), str(tmp_path / "qdq.onnx"), Reader(),
                    quant_format=QuantFormat.QDQ, **quant_options)
    return str(tmp_path / "qdq.onnx")


def _quant_types():
    from onnxruntime.quantization import QuantType  # noqa: PLC0415

    return QuantType


@pytest.mark.parametrize("per_channel, activations, reduce_range", [
    (False, "QInt8", False),   # quantize_static's defaults (onnxruntime 1.32)
    (False, "QUInt8", True),   # uint8 activations, 7-bit int8 weights (onnxruntime's advice on AVX2)
    (True, "QUInt8", True),
    (True, "QInt8", False),    # int8 activations, full-range int8 weights
])
def test_quantized_cnn_fuses_as_onnxruntime_and_is_no_farther_from_the_qdq_model_than_onnxruntimes_own(
        tmp_path, per_channel, activations, reduce_range):
    # uint8 activations: fused whole, as onnxruntime fuses them. int8 activations: the first
    # conv's output pair is read by the second conv and by the Add, so onnxruntime (on a CPU
    # without int8 dot products) keeps every op in float (rules/qdq.egg), and so does eqsat
    import eqsat  # noqa: PLC0415
    from eqsat.verification import run  # noqa: PLC0415

    qt = _quant_types()
    path = quantized_cnn(tmp_path, per_channel=per_channel, reduce_range=reduce_range,
                         activation_type=getattr(qt, activations), weight_type=qt.QInt8)
    qdq = onnx.load(path)
    res = eqsat.optimize(path)  # verified against the QDQ model as written (raises if not)
    if activations == "QUInt8":
        whole = ["QuantizeLinear", "QLinearConv", "QLinearConv", "com.microsoft.QLinearAdd", "DequantizeLinear"]
        assert sorted(op_list(res.model)) == sorted(whole), op_list(res.model)
    else:
        assert fused(op_list(res.model)) == 0, op_list(res.model)
    assert fused(op_list(res.model)) <= fused(ort_extended_ops(qdq))
    onnx.checker.check_model(res.model)
    y_scale = float(numpy_helper.to_array(next(t for t in qdq.graph.initializer if t.name == "y_scale")))
    for seed in range(3):
        feeds = {"x": np.random.default_rng(10 + seed).standard_normal((1, 3, 16, 16)).astype(np.float32)}
        as_written = run(qdq, feeds, optimize=False)["y"]
        ort_own = run(qdq, feeds, optimize=True)["y"]  # onnxruntime's own QDQ fusions
        ours = run(res.model, feeds, optimize=False)["y"]
        ort_distance = float(np.abs(ort_own - as_written).max())
        # eqsat's result is no farther from the model as written than onnxruntime's own
        # optimization is, with one quantization step for rounding the requantization
        assert float(np.abs(ours - as_written).max()) <= max(ort_distance, y_scale * 1.001)


def test_quantized_cnn_with_full_range_uint8_x_int8_fuses_with_uint8_weights(tmp_path):
    # uint8 activations and int8 weights over the full range, which onnxruntime's AVX2 kernels
    # sum with 16-bit saturation: eqsat fuses with the weights made uint8 (exact sums), within
    # one quantization step of the model as written
    import eqsat  # noqa: PLC0415
    from eqsat.verification import run  # noqa: PLC0415

    qt = _quant_types()
    path = quantized_cnn(tmp_path, activation_type=qt.QUInt8, weight_type=qt.QInt8)
    qdq = onnx.load(path)
    res = eqsat.optimize(path)
    assert op_list(res.model).count("QLinearConv") == 2, op_list(res.model)
    assert res.report.verification.status == "passed"
    y_scale = float(numpy_helper.to_array(next(t for t in qdq.graph.initializer if t.name == "y_scale")))
    feeds = {"x": np.random.default_rng(10).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    moved = np.abs(run(res.model, feeds, optimize=False)["y"] - run(qdq, feeds, optimize=False)["y"]).max()
    assert moved <= y_scale * 1.001


def test_conv_after_a_transpose_whose_int8_output_two_convs_read_does_not_fuse():
    # x -> Q -> DQ -> Transpose -> Q -> DQ -> (Conv, Conv): the first pair is made uint8 and its
    # DQ moves past the Transpose into the DQ the convs read, but onnxruntime keeps the
    # Transpose's output int8 (its DQ is read twice) and both convs in float
    w1, w2 = RNG.integers(-64, 65, (2, 4, 2, 3, 3))
    m = model(f"""
        agraph (float[1, 2, 6, 6] x) => (float[1, 4, 6, 6] z1, float[1, 4, 6, 6] z2)
                <int8[4, 2, 3, 3] w1 = {{{ints(w1)}}}, int8[4, 2, 3, 3] w2 = {{{ints(w2)}}}, float ws = {{0.02}},
                 int8 wz = {{0}}> {{
            s = Constant <value = float {{0.05}}> ()
            zp = Constant <value = int8 {{3}}> ()
            ys = Constant <value = float {{0.1}}> ()
            yz = Constant <value = int8 {{-2}}> ()
            xq = QuantizeLinear (x, s, zp)
            xd = DequantizeLinear (xq, s, zp)
            p = Transpose <perm = [0, 1, 3, 2]> (xd)
            pq = QuantizeLinear (p, s, zp)
            pd = DequantizeLinear (pq, s, zp)
            wd1 = DequantizeLinear (w1, ws, wz)
            wd2 = DequantizeLinear (w2, ws, wz)
            c1 = Conv <pads = [1, 1, 1, 1]> (pd, wd1)
            c2 = Conv <pads = [1, 1, 1, 1]> (pd, wd2)
            q1 = QuantizeLinear (c1, ys, yz)
            z1 = DequantizeLinear (q1, ys, yz)
            q2 = QuantizeLinear (c2, ys, yz)
            z2 = DequantizeLinear (q2, ys, yz)
        }}""")
    res = optimized(m, layout="nchw")
    assert fused(op_list(res.model)) == 0 == fused(ort_extended_ops(m)), op_list(res.model)
    matches = res.report["saturation"]["rule_matches"]
    assert matches.get("qdq-s8-pair-as-u8", 0) > 0 and matches.get("qdq-dq-past-transpose", 0) > 0, sorted(matches)
    assert_same_outputs(m, res.model, ort_optimize=False)
    assert_verified(m, res)


def test_int8_pair_whose_q_has_another_reader_stays_int8():
    # onnxruntime converts a Q -> DQ pair to uint8 only where the Q is read by that DQ alone
    m = model("""
        agraph (float[2, 4] x) => (float[2, 4] y, int8[2, 4] q) {
            s = Constant <value = float {0.05}> ()
            z = Constant <value = int8 {3}> ()
            q = QuantizeLinear (x, s, z)
            d = DequantizeLinear (q, s, z)
            y = Relu (d)
        }""")
    check_rewrite(m, ["QuantizeLinear", "DequantizeLinear", "Relu"], not_fired=["qdq-s8-pair-as-u8"],
                  ort_optimize=False)


def chain_matmul_model(second_reader: bool = False) -> onnx.ModelProto:
    """BERT's attention input as quantize_static writes it, int8: x -> Q -> DQ -> Reshape -> Q ->
    DQ -> Transpose -> Q -> DQ -> MatMul(DQ(w)) -> Q -> DQ, one scale and zero point for the three
    pairs; with `second_reader`, the last DQ is also read by a Relu (a graph output)."""
    w = RNG.integers(-64, 65, (3, 5))
    m = model(f"""
        agraph (float[2, 4, 6] x) => (float[2, 2, 4, 5] z)
                <int8[3, 5] w = {{{ints(w)}}}, float ws = {{0.02}}, int8 wz = {{0}}, int64[4] sh = {{2, 4, 2, 3}}> {{
            s = Constant <value = float {{0.05}}> ()
            zp = Constant <value = int8 {{3}}> ()
            ys = Constant <value = float {{0.1}}> ()
            yz = Constant <value = int8 {{-2}}> ()
            xq = QuantizeLinear (x, s, zp)
            xd = DequantizeLinear (xq, s, zp)
            re = Reshape (xd, sh)
            rq = QuantizeLinear (re, s, zp)
            rd = DequantizeLinear (rq, s, zp)
            t = Transpose <perm = [0, 2, 1, 3]> (rd)
            tq = QuantizeLinear (t, s, zp)
            td = DequantizeLinear (tq, s, zp)
            wd = DequantizeLinear (w, ws, wz)
            c = MatMul (td, wd)
            cq = QuantizeLinear (c, ys, yz)
            z = DequantizeLinear (cq, ys, yz)
        }}""")
    return with_second_reader(m, "td", [2, 2, 4, 3]) if second_reader else m


def test_matmul_after_reshape_and_transpose_pairs_fuses_as_onnxruntime():
    # onnxruntime makes each of the three int8 pairs uint8 (each Q read by its DQ alone, each DQ
    # once), drops the pairs around the Reshape and the Transpose and fuses the MatMul. In the
    # e-graph the DQs after the first cancel into the moved DQs' e-classes, whose use counts then
    # add to 2: qdq-pair-once records the input model's counts before any union
    m = chain_matmul_model()
    res = check_rewrite(m, ["QuantizeLinear", "Reshape", "Transpose", "QLinearMatMul", "DequantizeLinear"],
                        fired=["qdq-pair-once", "qdq-s8-pair-as-u8", "qdq-dq-past-reshape", "qdq-dq-past-transpose",
                               "qdq-dq-q-cancel", "qdq-matmul-fuse"], **ONE_STEP)
    assert fused(op_list(res.model)) == 1 == fused(ort_extended_ops(m))


def test_matmul_after_reshape_and_transpose_pairs_whose_last_dq_is_read_twice_does_not_fuse():
    # the last DQ is also read by a Relu: onnxruntime copies it, its Q then has two readers and
    # the pair stays int8, so the MatMul stays in float; the DQ's e-class gets no qdq-pair-once
    m = chain_matmul_model(second_reader=True)
    res = optimized(m, layout="nchw")
    ops = op_list(res.model)
    assert fused(ops) == 0 == fused(ort_extended_ops(m)), ops
    assert "MatMul" in ops
    assert res.report["saturation"]["rule_matches"].get("qdq-matmul-fuse", 0) == 0
    onnx.checker.check_model(res.model)
    assert_same_outputs(m, res.model, ort_optimize=False)
    assert_verified(m, res)


# ---- DQ -> Sigmoid / GlobalAveragePool -> Q (target ort)

def unary_model(op: str, shape: str, out_shape: str, second_reader: bool = False, opset: int = 17) -> onnx.ModelProto:
    """x -> Q -> DQ -> op -> Q -> DQ, uint8 per tensor; with `second_reader`, the op's float
    output is also a graph output."""
    extra_out = f", float{out_shape} r" if second_reader else ""
    extra_node = "r = Identity (c)" if second_reader else ""
    return model(f"""
        agraph (float{shape} x) => (float{out_shape} z{extra_out}) {{
            xs = Constant <value = float {{0.05}}> ()
            xz = Constant <value = uint8 {{128}}> ()
            ys = Constant <value = float {{0.004}}> ()
            yz = Constant <value = uint8 {{3}}> ()
            xq = QuantizeLinear (x, xs, xz)
            xd = DequantizeLinear (xq, xs, xz)
            c = {op} (xd)
            {extra_node}
            yq = QuantizeLinear (c, ys, yz)
            z = DequantizeLinear (yq, ys, yz)
        }}""", opset)


UNARY = [("Sigmoid", "[2, 3, 5]", "[2, 3, 5]", "com.microsoft.QLinearSigmoid", ["qdq-sigmoid-fuse"]),
         ("GlobalAveragePool", "[1, 4, 5, 5]", "[1, 4, 1, 1]", "com.microsoft.QLinearGlobalAveragePool",
          ["qdq-global-average-pool-fuse"]),
         ("LeakyRelu <alpha = 0.2>", "[2, 3, 5]", "[2, 3, 5]", "com.microsoft.QLinearLeakyRelu",
          ["qdq-leaky-relu-fuse"]),
         ("AveragePool <kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [2, 2], count_include_pad = 1>",
          "[1, 4, 7, 7]", "[1, 4, 4, 4]", "com.microsoft.QLinearAveragePool", ["qdq-average-pool-fuse"]),
         ("AveragePool <kernel_shape = [2, 2], ceil_mode = 1, strides = [2, 2]>",
          "[1, 4, 7, 7]", "[1, 4, 4, 4]", "com.microsoft.QLinearAveragePool", ["qdq-average-pool-fuse"])]


@pytest.mark.parametrize("op, shape, out_shape, fused_op, rules", UNARY)
def test_unary_ops_fuse_into_their_qlinear_forms(op, shape, out_shape, fused_op, rules):
    m = unary_model(op, shape, out_shape)
    res = check_rewrite(m, ["QuantizeLinear", fused_op, "DequantizeLinear"], fired=rules,
                        rtol=0.0, atol=0.004 * 1.001, ort_optimize=False)
    assert fused(op_list(res.model)) == 0 and fused_op.split(".")[-1] in " ".join(ort_extended_ops(m))


@pytest.mark.parametrize("op, shape, out_shape, fused_op, rules", UNARY)
def test_unary_ops_read_twice_do_not_fuse(op, shape, out_shape, fused_op, rules):
    # the float output has another reader: onnxruntime keeps the op (and so does eqsat)
    m = unary_model(op, shape, out_shape, second_reader=True)
    res = check_rewrite(m, ["QuantizeLinear", "DequantizeLinear", op.split()[0], "QuantizeLinear", "DequantizeLinear"],
                        not_fired=rules, ort_optimize=False)
    assert fused_op not in op_list(res.model)


def test_dilated_average_pool_is_not_fused():
    # com.microsoft.QLinearAveragePool has no dilations (AveragePool has them since opset 19)
    m = unary_model("AveragePool <kernel_shape = [2, 2], dilations = [2, 2]>", "[1, 4, 7, 7]", "[1, 4, 5, 5]",
                    opset=19)
    check_rewrite(m, ["QuantizeLinear", "DequantizeLinear", "AveragePool", "QuantizeLinear", "DequantizeLinear"],
                  not_fired=["qdq-average-pool-fuse"], ort_optimize=False)


@pytest.mark.parametrize("attrs, out_shape", [
    ("kernel_shape = [2, 2], strides = [3, 3], ceil_mode = 1, count_include_pad = 1", "[1, 4, 3, 3]"),
    ("kernel_shape = [2, 2], strides = [2, 2], auto_pad = \"VALID\", ceil_mode = 1, count_include_pad = 1",
     "[1, 4, 4, 4]"),
    ("kernel_shape = [3, 3], strides = [2, 2], pads = [1, 1, 0, 0], ceil_mode = 1, count_include_pad = 1",
     "[1, 4, 4, 4]"),
    # any nonzero ceil_mode is on for onnxruntime
    ("kernel_shape = [2, 2], strides = [3, 3], ceil_mode = -1, count_include_pad = 1", "[1, 4, 3, 3]")])
def test_average_pool_with_ceil_mode_and_count_include_pad_is_not_fused(attrs, out_shape):
    # where ceil_mode adds a window past the end, onnxruntime's float AveragePool and its
    # com.microsoft.QLinearAveragePool count that window's divisor apart (42 to 87 output steps
    # off); onnxruntime's own fusion does the same, so verification's QDQ allowance passed it
    m = unary_model(f"AveragePool <{attrs}>", "[1, 4, 7, 7]", out_shape)
    check_rewrite(m, ["QuantizeLinear", "DequantizeLinear", "AveragePool", "QuantizeLinear", "DequantizeLinear"],
                  not_fired=["qdq-average-pool-fuse"], ort_optimize=False)


def test_sigmoid_is_not_fused_for_target_onnx():
    m = unary_model("Sigmoid", "[2, 3, 5]", "[2, 3, 5]")
    check_rewrite(m, ["QuantizeLinear", "DequantizeLinear", "Sigmoid", "QuantizeLinear", "DequantizeLinear"],
                  not_fired=["qdq-sigmoid-fuse"], target="onnx", ort_optimize=False)


# ---- DQ -> Softmax -> Q: examples/qdq_softmax.egg (not a default rule: onnxruntime's
# QLinearSoftmax ran slower than the unfused form, benchmarks/results/qdq.md)

SOFTMAX_RULES = [str(Path(__file__).resolve().parents[2] / "examples" / "qdq_softmax.egg")]
UNFUSED_SOFTMAX = ["QuantizeLinear", "DequantizeLinear", "Softmax", "QuantizeLinear", "DequantizeLinear"]


def test_softmax_fuses_into_qlinearsoftmax_with_the_example_rules():
    m = unary_model("Softmax", "[2, 3, 5]", "[2, 3, 5]")
    res = check_rewrite(m, ["QuantizeLinear", "com.microsoft.QLinearSoftmax", "DequantizeLinear"],
                        fired=["qdq-softmax-fuse"], rule_files=SOFTMAX_RULES, rtol=0.0, atol=0.004 * 1.001,
                        ort_optimize=False)
    assert "com.microsoft.QLinearSoftmax" in ort_extended_ops(m)
    assert [a.i for a in res.model.graph.node[1].attribute if a.name == "opset"] == [13]


def test_softmax_is_not_fused_by_the_default_rules():
    m = unary_model("Softmax", "[2, 3, 5]", "[2, 3, 5]")
    check_rewrite(m, UNFUSED_SOFTMAX, not_fired=["qdq-softmax-fuse"], ort_optimize=False)


def test_softmax_read_twice_is_not_fused():
    m = unary_model("Softmax", "[2, 3, 5]", "[2, 3, 5]", second_reader=True)
    check_rewrite(m, UNFUSED_SOFTMAX, not_fired=["qdq-softmax-fuse"], rule_files=SOFTMAX_RULES,
                  ort_optimize=False)


def test_softmax_before_opset_13_is_not_fused():
    # Softmax before opset 13 flattens the tensor from its axis; qdq-softmax-fuse writes only
    # the opset-13 form
    m = unary_model("Softmax", "[2, 3, 5]", "[2, 3, 5]", opset=12)
    check_rewrite(m, UNFUSED_SOFTMAX, not_fired=["qdq-softmax-fuse"], rule_files=SOFTMAX_RULES, ort_optimize=False)


# ---- DQ -> Concat -> Q (com.microsoft.QLinearConcat, target ort)

def concat_model(a_type="uint8", b_type="uint8", y_type="uint8", b_zero_point=None, b_per_channel=False,
                 second_reader=False) -> onnx.ModelProto:
    """x, y -> Q -> DQ -> Concat(axis 1) -> Q -> DQ, each input at its own scale and zero point;
    `b_per_channel`: y's pair per channel (axis 1); `second_reader`: x's DQ also read by a Relu."""
    zp = {"int8": 3, "uint8": 128, "uint16": 30000}
    zb = zp[b_type] + 2 if b_zero_point is None else b_zero_point
    if b_per_channel:
        inits, consts, ax = f"<float[3] sb = {{0.07, 0.05, 0.06}}, {b_type}[3] zb = {{{zb}, {zb}, {zb}}}>", "", \
            "<axis = 1> "
    else:
        inits, ax = "", ""
        consts = f"sb = Constant <value = float {{0.07}}> ()\n zb = Constant <value = {b_type} {{{zb}}}> ()"
    extra, extra_out = ("r = Relu (xd)", ", float[2, 3, 4] r") if second_reader else ("", "")
    return model(f"""
        agraph (float[2, 3, 4] x, float[2, 3, 4] y) => (float[2, 6, 4] z{extra_out}) {inits} {{
            sa = Constant <value = float {{0.03}}> ()
            za = Constant <value = {a_type} {{{zp[a_type]}}}> ()
            {consts}
            sc = Constant <value = float {{0.05}}> ()
            zc = Constant <value = {y_type} {{{zp[y_type] - 1}}}> ()
            xq = QuantizeLinear (x, sa, za)
            xd = DequantizeLinear (xq, sa, za)
            yq = QuantizeLinear {ax}(y, sb, zb)
            yd = DequantizeLinear {ax}(yq, sb, zb)
            {extra}
            c = Concat <axis = 1> (xd, yd)
            cq = QuantizeLinear (c, sc, zc)
            z = DequantizeLinear (cq, sc, zc)
        }}""", opset=21 if "uint16" in (a_type, b_type, y_type) else 17)


CONCAT_RULES = ["qdq-concat-quantized-input", "qdq-concat-fuse"]
CONCAT_STEP = {"rtol": 0.0, "atol": 0.05 * 1.001, "ort_optimize": False}


def concat_fusions(ops: list[str]) -> int:
    return sum(op.endswith("QLinearConcat") for op in ops)


@pytest.mark.parametrize("types", [("uint8", "uint8", "uint8"), ("int8", "int8", "int8"), ("int8", "uint8", "uint8"),
                                   ("uint8", "uint8", "int8")])
def test_concat_fuses_into_qlinearconcat(types):
    # int8 pairs read once become uint8 first (qdq-s8-pair-as-u8), as onnxruntime's
    # QDQS8ToU8Transformer: onnxruntime fuses each of these
    m = concat_model(*types)
    res = check_rewrite(m, QUANTIZED_INPUTS + ["com.microsoft.QLinearConcat"], fired=CONCAT_RULES, **CONCAT_STEP)
    assert concat_fusions(op_list(res.model)) == 1 == concat_fusions(ort_extended_ops(m))
    (node,) = [n for n in res.model.graph.node if n.op_type == "QLinearConcat"]
    assert node.domain == "com.microsoft" and len(node.input) == 8
    assert [(a.name, a.i) for a in node.attribute] == [("axis", 1)]


def test_concat_of_a_uint8_dq_read_twice_fuses_as_onnxruntime():
    m = concat_model(second_reader=True)
    res = check_rewrite(m, QUANTIZED_INPUTS + ["com.microsoft.QLinearConcat", "DequantizeLinear", "Relu"],
                        fired=CONCAT_RULES, **CONCAT_STEP)
    assert concat_fusions(op_list(res.model)) == 1 == concat_fusions(ort_extended_ops(m))


UNFUSED_CONCAT = ["QuantizeLinear", "DequantizeLinear"] * 3 + ["Concat"]


@pytest.mark.parametrize("case", ["int8 dq read twice", "per-channel input", "uint16 input"])
def test_concat_does_not_fuse_where_onnxruntime_does_not(case):
    # int8 x read twice: its pair stays int8 while y's becomes uint8, the types differ; a
    # per-channel DQ; a 16-bit input (onnxruntime's selector takes 8 bits only)
    m = {"int8 dq read twice": lambda: concat_model("int8", "int8", "int8", second_reader=True),
         "per-channel input": lambda: concat_model(b_per_channel=True),
         "uint16 input": lambda: concat_model(b_type="uint16")}[case]()
    expect = UNFUSED_CONCAT + (["Relu"] if case == "int8 dq read twice" else [])
    res = check_rewrite(m, expect, not_fired=["qdq-concat-fuse"], ort_optimize=False)
    assert concat_fusions(op_list(res.model)) == 0 == concat_fusions(ort_extended_ops(m))


def test_concat_whose_output_has_another_reader_does_not_fuse():
    m = with_second_reader(concat_model(), "c", [2, 6, 4])
    res = check_rewrite(m, UNFUSED_CONCAT + ["Relu"], not_fired=["qdq-concat-fuse"], ort_optimize=False)
    assert concat_fusions(op_list(res.model)) == 0 == concat_fusions(ort_extended_ops(m))


def test_concat_is_not_fused_for_target_onnx():
    check_rewrite(concat_model(), UNFUSED_CONCAT, not_fired=["qdq-concat-fuse"], target="onnx", ort_optimize=False)


# ---- DQ -> Gemm -> Q (com.microsoft.QGemm, target ort)

# B's and the bias's DequantizeLinear folded into float constants
UNFUSED_GEMM = ["QuantizeLinear", "DequantizeLinear", "Gemm", "QuantizeLinear", "DequantizeLinear"]

def gemm_model(a_type="int8", b_max=64, trans_b=1, alpha=None, bias="int32", bias_scale=None, b_per_channel=False,
               second_reader=False, b_axis=None) -> onnx.ModelProto:
    """x -> Q -> DQ -> Gemm(DQ(b), DQ(c)) -> Q -> DQ as quantize_static writes a classifier:
    int8 B in [-b_max, b_max] ([N, K] with transB, else [K, N]), per tensor or `b_per_channel`
    (one scale per output: along `b_axis`, by default B's N axis), an int32 bias at
    a_scale * b_scale (`bias_scale` another), or `bias` None."""
    k, n = 8, 5
    b = RNG.integers(-b_max, b_max + 1, (n, k) if trans_b else (k, n))
    a_scale = np.float32(0.03)
    b_axis = (0 if trans_b else 1) if b_axis is None else b_axis
    bs = RNG.uniform(0.01, 0.03, b.shape[b_axis]).astype(np.float32) if b_per_channel else np.float32(0.02)
    shp, attr = (f"[{len(bs)}]", f"<axis = {b_axis}> ") if b_per_channel else ("", "")
    inits = [f"int8[{dims(b.shape)}] b = {{{ints(b)}}}", f"float{shp} bs = {{{floats(bs)}}}",
             f"int8{shp} bz = {{{ints(np.zeros(np.shape(bs)))}}}"]
    body, gemm_in = "", "ad, bd"
    if bias == "int32":
        cs = np.broadcast_to(a_scale * bs if bias_scale is None else np.float32(bias_scale), (n,)) \
            if np.size(bs) in (1, n) else np.full(n, a_scale * 0.02, np.float32)
        inits += [f"int32[{n}] c = {{{ints(RNG.integers(-3000, 3000, n))}}}", f"float[{n}] cs = {{{floats(cs)}}}",
                  f"int32[{n}] cz = {{{ints(np.zeros(n))}}}"]
        body, gemm_in = "cd = DequantizeLinear <axis = 0> (c, cs, cz)", "ad, bd, cd"
    attrs = [f"transB = {trans_b}"] + ([f"alpha = {alpha}"] if alpha is not None else [])
    zp = {"int8": -3, "uint8": 128}
    extra, extra_out = ("r = Relu (ad)", ", float[3, 8] r") if second_reader else ("", "")
    return model(f"""
        agraph (float[3, {k}] x) => (float[3, {n}] z{extra_out}) <{", ".join(inits)}> {{
            sa = Constant <value = float {{{floats(a_scale)}}}> ()
            za = Constant <value = {a_type} {{{zp[a_type]}}}> ()
            sy = Constant <value = float {{0.05}}> ()
            zy = Constant <value = {a_type} {{{zp[a_type] + 5}}}> ()
            aq = QuantizeLinear (x, sa, za)
            ad = DequantizeLinear (aq, sa, za)
            bd = DequantizeLinear {attr}(b, bs, bz)
            {body}
            {extra}
            g = Gemm <{", ".join(attrs)}> ({gemm_in})
            gq = QuantizeLinear (g, sy, zy)
            z = DequantizeLinear (gq, sy, zy)
        }}""")


GEMM_STEP = {"rtol": 0.0, "atol": 0.05 * 1.001, "ort_optimize": False}
FUSED_GEMM = ["QuantizeLinear", "com.microsoft.QGemm", "DequantizeLinear"]


def gemm_fusions(ops: list[str]) -> int:
    return sum(op.endswith("QGemm") for op in ops)


@pytest.mark.parametrize("opts", [{}, {"a_type": "uint8"}, {"bias": None}, {"trans_b": 0}, {"b_per_channel": True},
                                  {"trans_b": 0, "b_per_channel": True}, {"b_max": 127}],
                         ids=["int8", "uint8", "no-bias", "transB-0", "per-output-B", "per-column-B-transB-0",
                              "full-range-B"])
def test_gemm_fuses_into_qgemm(opts):
    m = gemm_model(**opts)
    rules = ["qdq-gemm-fuse"] + (["qdq-gemm-no-bias"] if opts.get("bias", "int32") is None
                                 else ["qdq-gemm-bias-scale-product", "qdq-gemm-int32-bias"])
    res = check_rewrite(m, FUSED_GEMM, fired=rules, **GEMM_STEP)
    assert gemm_fusions(op_list(res.model)) == 1 == gemm_fusions(ort_extended_ops(m))
    (node,) = [n for n in res.model.graph.node if n.op_type == "QGemm"]
    assert node.domain == "com.microsoft" and len(node.input) == 9
    assert ({a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}.get("transB", 0)
            == opts.get("trans_b", 1))
    if opts.get("bias", "int32") is None:
        assert node.input[6] == ""


def test_gemm_with_b_scales_along_its_input_axis_does_not_fuse():
    # transB 0, B [K, N] with one scale per row (K, axis 0): QGemm's B has no such form
    m = gemm_model(trans_b=0, b_per_channel=True, b_axis=0, bias=None)
    check_rewrite(m, UNFUSED_GEMM, not_fired=["qdq-gemm-fuse"], **GEMM_STEP)


def test_gemm_with_a_bias_at_another_scale_does_not_fuse():
    # onnxruntime fuses it (its selector does not read the bias's scale, and QGemm adds the int32
    # values at a_scale * b_scale): eqsat does not change the results so
    m = gemm_model(bias_scale=0.5)
    res = check_rewrite(m, UNFUSED_GEMM,
                        not_fired=["qdq-gemm-fuse", "qdq-gemm-int32-bias"], ort_optimize=False)
    assert gemm_fusions(op_list(res.model)) == 0 < gemm_fusions(ort_extended_ops(m))


@pytest.mark.parametrize("case", ["alpha 2", "int8 dq read twice"])
def test_gemm_does_not_fuse_where_onnxruntime_does_not(case):
    m = gemm_model(alpha=2.0) if case == "alpha 2" else gemm_model(second_reader=True)
    expect = [*UNFUSED_GEMM]
    expect += ["Relu"] if case == "int8 dq read twice" else []
    # alpha 2: not even the bias scale's product is built
    not_fired = ["qdq-gemm-fuse"] + (["qdq-gemm-bias-scale-product"] if case == "alpha 2" else [])
    res = check_rewrite(m, expect, not_fired=not_fired, ort_optimize=False)
    assert gemm_fusions(op_list(res.model)) == 0 == gemm_fusions(ort_extended_ops(m))


def test_gemm_is_not_fused_for_target_onnx():
    check_rewrite(gemm_model(), UNFUSED_GEMM,
                  not_fired=["qdq-gemm-fuse"], target="onnx", ort_optimize=False)


def concat_inputs_model(inputs: str, n: int) -> onnx.ModelProto:
    """x, y, w -> Q -> DQ (uint8, x and w at one zero point, y and w at one scale), then
    Concat(`inputs`) of n values along axis 1 -> Q -> DQ; x's and w's pairs only where read."""
    pairs = {"xd": "xq = QuantizeLinear (x, sa, za)\n xd = DequantizeLinear (xq, sa, za)",
             "yd": "yq = QuantizeLinear (y, sb, zb)\n yd = DequantizeLinear (yq, sb, zb)",
             "wd": "wq = QuantizeLinear (w, sb, za)\n wd = DequantizeLinear (wq, sb, za)"}
    body = "\n".join(p for name, p in pairs.items() if name in inputs)
    return model(f"""
        agraph (float[2, 3, 4] x, float[2, 3, 4] y, float[2, 3, 4] w) => (float[2, {3 * n}, 4] z) {{
            sa = Constant <value = float {{0.03}}> ()
            za = Constant <value = uint8 {{128}}> ()
            sb = Constant <value = float {{0.07}}> ()
            zb = Constant <value = uint8 {{130}}> ()
            sc = Constant <value = float {{0.05}}> ()
            zc = Constant <value = uint8 {{127}}> ()
            {body}
            c = Concat <axis = 1> ({inputs})
            cq = QuantizeLinear (c, sc, zc)
            z = DequantizeLinear (cq, sc, zc)
        }}""")


@pytest.mark.parametrize("inputs, fuses", [("xd, yd, wd", True), ("xd, yd, xd", True), ("xd, yd, w", False)],
                         ids=["three-dqs", "one-dq-twice", "a-float-input"])
def test_concat_fuses_only_where_every_input_is_a_dq(inputs, fuses):
    # onnxruntime fuses three DQs, and one DQ read twice by the Concat; not a float input
    m = concat_inputs_model(inputs, 3)
    n_pairs = len({v for v in inputs.split(", ") if v.endswith("d")})
    if fuses:
        res = check_rewrite(m, ["QuantizeLinear"] * n_pairs + ["com.microsoft.QLinearConcat", "DequantizeLinear"],
                            fired=CONCAT_RULES, **CONCAT_STEP)
        (node,) = [n for n in res.model.graph.node if n.op_type == "QLinearConcat"]
        assert len(node.input) == 2 + 3 * 3
    else:
        res = check_rewrite(m, ["QuantizeLinear", "DequantizeLinear"] * (n_pairs + 1) + ["Concat"],
                            not_fired=["qdq-concat-fuse"], ort_optimize=False)
    assert concat_fusions(op_list(res.model)) == int(fuses) == concat_fusions(ort_extended_ops(m))
