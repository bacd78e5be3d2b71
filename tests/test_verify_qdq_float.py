"""eqsat.verification.qdq_float: QuantizeLinear and DequantizeLinear written as float ops compute
what onnxruntime's kernels compute for them (codes equal, dequantized values equal), over the
code types, zero points present or not, per-tensor and per-axis scales, float16 scales; and a
node it cannot write is named, never written wrong."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx.parser import parse_model

from eqsat.verification import run
from eqsat.verification.qdq_float import NotWritable, as_float_ops

RNG = np.random.default_rng(0)


def _qdq(op_lines: str, x_type: str, y_type: str, consts: dict[str, np.ndarray], opset: int = 17,
         shape=(2, 3, 4, 5)) -> onnx.ModelProto:
    dims = ", ".join(map(str, shape))
    m = parse_model(f"""
        <ir_version: 10, opset_import: ["" : {opset}]>
        g ({x_type}[{dims}] x) => ({y_type}[{dims}] y) {{
            {op_lines}
        }}""")
    m.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    onnx.checker.check_model(m, full_check=True)
    return m


def _same(m: onnx.ModelProto, x: np.ndarray) -> None:
    written = as_float_ops(m, {n.output[0] for n in m.graph.node})
    assert not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in written.graph.node)
    onnx.checker.check_model(written, full_check=True)
    want, got = run(m, {"x": x}, optimize=False)["y"], run(written, {"x": x}, optimize=False)["y"]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


CODES = {"uint8": np.uint8, "int8": np.int8, "uint16": np.uint16, "int16": np.int16}


@pytest.mark.parametrize("code", sorted(CODES))
@pytest.mark.parametrize("zero", [True, False], ids=["zero-point", "no-zero-point"])
def test_quantize_then_dequantize_per_tensor(code, zero):
    info = np.iinfo(CODES[code])
    z = np.array((info.min + info.max) // 2 + 3, CODES[code])
    body = ("q = QuantizeLinear(x, s, z)\n y = DequantizeLinear(q, s, z)" if zero
            else "q = QuantizeLinear(x, s)\n y = DequantizeLinear(q, s)")
    consts = {"s": np.array(0.037, np.float32)} | ({"z": z} if zero else {})
    opset = 21 if info.bits == 16 else 17  # 16-bit codes: opset 21
    m = _qdq(body, "float", "float", consts, opset)
    # beyond the range both ways (saturation), and exact ties of a power-of-two scale
    x = (RNG.standard_normal((2, 3, 4, 5)) * 0.037 * info.max * 0.7).astype(np.float32)
    _same(m, x)
    tie = _qdq(body, "float", "float", {"s": np.array(0.25, np.float32)} | ({"z": z} if zero else {}), opset)
    _same(tie, ((RNG.integers(-40, 40, (2, 3, 4, 5)) + 0.5) * 0.25).astype(np.float32))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_per_axis_scales_and_zero_points(axis):
    n = (2, 3, 4, 5)[axis]
    consts = {"s": (RNG.random(n) * 0.05 + 0.01).astype(np.float32),
              "z": RNG.integers(-20, 20, n).astype(np.int8)}
    m = _qdq(f"q = QuantizeLinear <axis = {axis}> (x, s, z)\n y = DequantizeLinear <axis = {axis}> (q, s, z)",
             "float", "float", consts)
    _same(m, RNG.standard_normal((2, 3, 4, 5)).astype(np.float32) * 3)


def test_dequantize_of_int32_and_float16_scales():
    m = _qdq("y = DequantizeLinear(x, s, z)", "int32", "float",
             {"s": np.array(1.5e-7, np.float32), "z": np.array(7, np.int32)})
    _same(m, RNG.integers(-2 ** 30, 2 ** 30, (2, 3, 4, 5)).astype(np.int32))
    half = _qdq("y = DequantizeLinear(x, s, z)", "int16", "float16",
                {"s": np.array(0.0123, np.float16), "z": np.array(-5, np.int16)}, opset=21)
    _same(half, RNG.integers(-2 ** 15, 2 ** 15, (2, 3, 4, 5)).astype(np.int16))


def test_a_one_element_scale_is_per_tensor():
    m = _qdq("q = QuantizeLinear(x, s, z)\n y = DequantizeLinear(q, s, z)", "float", "float",
             {"s": np.array([0.02], np.float32), "z": np.array([128], np.uint8)})
    _same(m, RNG.standard_normal((2, 3, 4, 5)).astype(np.float32))


def test_output_dtype_without_a_zero_point_and_4_bit_codes():
    m = _qdq("q = QuantizeLinear <output_dtype = 3> (x, s)\n y = DequantizeLinear(q, s)", "float", "float",
             {"s": np.array(0.02, np.float32)}, opset=21)
    _same(m, RNG.standard_normal((2, 3, 4, 5)).astype(np.float32))
    q4 = _qdq("q = QuantizeLinear(x, s, z)\n y = DequantizeLinear(q, s, z)", "float", "float",
              {"s": np.array(0.3, np.float32), "z": numpy_helper.to_array(
                  onnx.helper.make_tensor("z", onnx.TensorProto.INT4, [], [1]))}, opset=21)
    _same(q4, RNG.standard_normal((2, 3, 4, 5)).astype(np.float32))


@pytest.mark.parametrize("case", ["float8", "blocked", "opset-10"])
def test_what_it_cannot_write_is_named(case):
    if case == "float8":
        m = _qdq("y = QuantizeLinear(x, s, z)", "float", "float8e4m3fn",
                 {"s": np.array(0.5, np.float32),
                  "z": numpy_helper.to_array(onnx.helper.make_tensor("z", onnx.TensorProto.FLOAT8E4M3FN, [], [0]))},
                 opset=19)
        why = "codes of type FLOAT8E4M3FN"
    elif case == "blocked":
        m = _qdq("y = DequantizeLinear <axis = 3, block_size = 5> (x, s)", "int8", "float",
                 {"s": np.ones((2, 3, 4, 1), np.float32)}, opset=21)
        why = "blocked scales"
    else:
        m = _qdq("y = QuantizeLinear(x, s)", "float", "uint8", {"s": np.array(0.5, np.float32)}, opset=10)
        why = "opset 10"
    with pytest.raises(NotWritable, match=why):
        as_float_ops(m, {"y"})


def test_only_the_named_nodes_are_written():
    m = _qdq("q = QuantizeLinear(x, s, z)\n y = DequantizeLinear(q, s, z)", "float", "float",
             {"s": np.array(0.02, np.float32), "z": np.array(128, np.uint8)})
    written = as_float_ops(m, {"q"})
    assert [n.op_type for n in written.graph.node].count("DequantizeLinear") == 1
    assert "QuantizeLinear" not in [n.op_type for n in written.graph.node]
    assert len(m.graph.node) == 2  # the input model is not changed


@pytest.mark.parametrize("code", sorted(CODES))
def test_nan_quantizes_to_what_onnxruntimes_kernel_gives(code):
    # onnxruntime's kernels give NaN the codes' lowest value (-128 for int8), where Cast(NaN)
    # gives 0: the written form once moved a reference run by 64 steps
    info = np.iinfo(CODES[code])
    m = _qdq("y = QuantizeLinear(x, s, z)", "float", code,
             {"s": np.array(0.05, np.float32), "z": np.array((info.min + info.max) // 2, CODES[code])},
             21 if info.bits == 16 else 17)
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    x[0, 1] = np.nan
    x[1, 2, 3] = np.inf
    x[1, 0, 0] = -np.inf
    _same(m, x)
