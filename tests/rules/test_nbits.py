"""rules/nbits.egg: MatMul(A, DequantizeLinear(W int4/uint4 [K, N], scale [K/b, N], zero point,
axis=0, block_size=b)), as a weight-only quantizer writes it at opset 21, becomes
com.microsoft.MatMulNBits with the weight and zero points packed (target ort). It fires with
and without zero points, signed and unsigned, on one block and several, an odd number of
blocks (a zero-point byte half used), A of rank 2 and 3; it does not fire where MatMulNBits
cannot express the DequantizeLinear: K not a multiple of the block, a block size that is not a
power of 2 or is below 16, blocks along N (axis 1), a weight that is no constant, 8-bit
blocked weights, target onnx. float16 fuses too.

MatMulNBits dequantizes the codes to float as the DequantizeLinear does and multiplies in float
(accuracy level 0): the outputs are compared within 1e-5 relative, with onnxruntime's own
optimizations off, and also against the product computed in float64 from the quantized codes;
onnxruntime's own fusion of the original (accuracy level 4, A quantized to int8) is farther from
that product."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.oracle.nbits import pack_weight, pack_zero_point

from ..conftest import check_rewrite, op_list, run

RNG = np.random.default_rng(0)
FUSED = ["com.microsoft.MatMulNBits"]
# both models as written: onnxruntime's own optimizations fuse the original into MatMulNBits with
# accuracy_level 4 (A quantized to int8), which moves outputs by about 1e-2 relative
TIGHT = {"rtol": 1e-5, "atol": 1e-6, "ort_optimize": False}
INT4, UINT4 = TensorProto.INT4, TensorProto.UINT4


def nbits_model(k=64, n=8, block=32, wtype=UINT4, zero_point=True, a_shape=(2, 3), axis=0,
                constant=True, ftype=TensorProto.FLOAT) -> onnx.ModelProto:
    """y = MatMul(a, DequantizeLinear(w, s, z, axis, block_size)), a [*a_shape, k], w [k, n] of
    `wtype` (a graph input where not `constant`), s and z [ceil(k/block), n] (axis 0) or
    [k, ceil(n/block)] (axis 1)."""
    lo, hi = {INT4: (-8, 8), UINT4: (0, 16), TensorProto.INT8: (-128, 128)}[wtype]
    sshape = [-(-k // block), n] if axis in (0, -2) else [k, -(-n // block)]
    fnp = helper.tensor_dtype_to_np_dtype(ftype)
    inits = [numpy_helper.from_array(RNG.uniform(0.01, 0.05, sshape).astype(fnp), "s")]
    nodes, dq_in = [], ["w", "s"]
    inputs = [helper.make_tensor_value_info("a", ftype, [*a_shape, k])]
    if constant:
        inits.append(helper.make_tensor("w", wtype, [k, n], RNG.integers(lo, hi, (k, n)).ravel().tolist()))
    else:  # computed at run time: the codes come in as int8 (onnxruntime's Python API takes no 4-bit arrays)
        inputs.append(helper.make_tensor_value_info("wi", TensorProto.INT8, [k, n]))
        nodes.append(helper.make_node("Cast", ["wi"], ["w"], to=wtype))

    if zero_point:
        inits.append(helper.make_tensor("z", wtype, sshape, RNG.integers(lo, hi, sshape).ravel().tolist()))
        dq_in.append("z")
    nodes += [helper.make_node("DequantizeLinear", dq_in, ["wd"], axis=axis, block_size=block),
              helper.make_node("MatMul", ["a", "wd"], ["y"])]
    g = helper.make_graph(nodes, "nbits", inputs, [helper.make_tensor_value_info("y", ftype, [*a_shape, n])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.checker.check_model(m, full_check=True)
    return m


def dequantized(m: onnx.ModelProto) -> np.ndarray:
    """The weight the model's DequantizeLinear computes (axis 0), in float64."""
    t = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in m.graph.initializer}
    block = next(a.i for a in m.graph.node[0].attribute if a.name == "block_size")
    z = np.repeat(t["z"], block, 0) if "z" in t else 0.0
    return (t["w"] - z) * np.repeat(t["s"], block, 0)


# ---- fires

# Two rows at most (a decode step's): reading the weight decides the time, where six rows of
# these small weights are priced by their arithmetic alone, the same fused or folded (a tie)
@pytest.mark.parametrize("case, rules", [
    # uint4 with zero points, 2 blocks, A of rank 3
    (dict(wtype=UINT4, zero_point=True, k=64, block=32, a_shape=(1, 2)), ["nbits-matmul-fuse", "nbits-zero-point"]),
    # int4 without zero points (MatMulNBits' default 8 is the offset), 4 blocks
    (dict(wtype=INT4, zero_point=False, k=64, block=16, a_shape=(1,)), ["nbits-matmul-fuse"]),
    # int4 with zero points, 3 blocks: half of each column's last zero-point byte
    (dict(wtype=INT4, zero_point=True, k=48, block=16, a_shape=(2, 1)), ["nbits-matmul-fuse", "nbits-zero-point"]),
    # uint4 without zero points: packed zeros
    (dict(wtype=UINT4, zero_point=False, k=32, block=32, a_shape=(2,)),
     ["nbits-matmul-fuse", "nbits-zero-point-uint4-absent"]),
    # axis -2, A of rank 4
    (dict(wtype=UINT4, zero_point=True, k=128, n=5, block=64, axis=-2, a_shape=(1, 2, 3)),
     ["nbits-matmul-fuse", "nbits-zero-point"]),
], ids=["uint4-zp-rank3", "int4-no-zp", "int4-zp-odd-blocks", "uint4-no-zp", "uint4-axis-2-rank4"])
def test_blocked_4bit_weight_fuses_into_matmulnbits(case, rules):
    m = nbits_model(**case)
    res = check_rewrite(m, FUSED, fired=rules, **TIGHT)
    a = RNG.standard_normal([*case["a_shape"], case["k"]]).astype(np.float32)
    y = run(res.model, {"a": a}, False)["y"]
    want = a.astype(np.float64) @ dequantized(m)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    # no farther from it than onnxruntime's own fusion of the original (ORT_ENABLE_ALL)
    assert np.abs(y - want).max() <= np.abs(run(m, {"a": a}, True)["y"] - want).max()
    node = res.model.graph.node[0]
    attrs = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    assert attrs == {"K": case["k"], "N": case.get("n", 8), "block_size": case["block"]}  # bits 4 is the default
    assert len([i for i in node.input if i]) == (3 if case["wtype"] == INT4 and not case["zero_point"] else 4)


def test_float16_weight_fuses_into_matmulnbits():
    # float16 A and scales: MatMulNBits' CPU kernel dequantizes and accumulates in float32, the
    # float16 MatMul rounds otherwise; both are within float16's precision of the float64 product.
    # One row (a decode step), where reading the weight decides the time; on six rows of a 64 x 8
    # weight the roofline prices the product's arithmetic, the same either way: a tie
    m = nbits_model(k=256, n=64, wtype=UINT4, ftype=TensorProto.FLOAT16, a_shape=(1, 1))
    res = check_rewrite(m, FUSED, fired=["nbits-matmul-fuse", "nbits-zero-point"], rtol=1e-2, atol=1e-2,
                        ort_optimize=False)
    a = RNG.standard_normal((1, 1, 256)).astype(np.float16)
    want = a.astype(np.float64) @ dequantized(m)
    for model in (m, res.model):
        y = run(model, {"a": a}, False)["y"].astype(np.float64)
        assert np.abs(y - want).max() <= 2e-3 * np.abs(want).max()


def test_packing_is_low_nibble_first_and_offsets_int4_by_8():
    w = np.array([[-8, 7], [1, -1], [0, 3], [2, 2]], np.int8).astype("int4")  # [K=4, N=2]
    # column 0: codes 0, 9, 8, 10 -> bytes 0x90, 0xA8; column 1: 15, 7, 11, 10 -> 0x7F, 0xAB
    assert pack_weight(w, 2).tolist() == [[[0x90], [0xA8]], [[0x7F], [0xAB]]]
    assert pack_weight(np.array([[1], [2]], "uint4"), 2).tolist() == [[[0x21]]]  # uint4: as it is
    z = np.array([[1, 2], [3, 4], [5, 6]], "uint4")  # [blocks=3, N=2]: per column, padded to 2 bytes
    assert pack_zero_point(z, 3, 2).tolist() == [[0x31, 0x05], [0x42, 0x06]]
    assert pack_zero_point(np.array([0], np.uint8), 3, 2).tolist() == [[0, 0], [0, 0]]


# ---- does not fire

FOLDED = ["MatMul"]  # the DequantizeLinear of a small constant weight is folded into a float weight
# none of them: no packed zero points are built either
NBITS_RULES = ["nbits-weight", "nbits-matmul-fuse", "nbits-zero-point", "nbits-zero-point-uint4-absent"]


@pytest.mark.parametrize("case", [
    dict(k=40, block=16),              # K not a multiple of the block: a short last block
    dict(k=48, block=24),              # block size not a power of 2
    dict(k=32, block=8),               # block size below 16
    dict(k=32, n=32, block=16, axis=1),  # blocks along N, not K
    dict(wtype=TensorProto.INT8, block=32),  # 8-bit blocked weights: left as they are
], ids=["unaligned-k", "block-not-power-of-2", "block-below-16", "axis-1", "int8"])
def test_dequantize_matmulnbits_cannot_express_is_not_fused(case):
    m = nbits_model(**case)
    check_rewrite(m, (FOLDED, ["DequantizeLinear", "MatMul"]), not_fired=NBITS_RULES, **TIGHT)


def test_weight_that_is_no_constant_is_not_fused():
    m = nbits_model(constant=False)
    w = RNG.integers(0, 16, (64, 8)).astype(np.int8)
    a = RNG.standard_normal((2, 3, 64)).astype(np.float32)
    check_rewrite(m, ["Cast", "DequantizeLinear", "MatMul"], not_fired=NBITS_RULES, feeds={"a": a, "wi": w},
                  **TIGHT)


def test_not_fused_for_target_onnx():
    res = check_rewrite(nbits_model(), FOLDED, not_fired=NBITS_RULES, target="onnx", **TIGHT)
    assert "com.microsoft.MatMulNBits" not in op_list(res.model)
