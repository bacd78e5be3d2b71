"""Verification's tolerances and allowances against crafted inputs (eqsat/verification): a wrong
program must not pass on slack that a tolerance or the QDQ allowance derives from the inputs or
from onnxruntime's own optimization of the original."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from eqsat.verification import SCALED_FAR, compare, run, verify
from eqsat.verification.qdq import float_folds_withheld

from .conftest import assert_refused, assert_wrong_never_written, parse_model


def _model(nodes, inits: dict[str, np.ndarray], x_shape, y_shape, y_type=TensorProto.FLOAT) -> onnx.ModelProto:
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                      [oh.make_tensor_value_info("y", y_type, y_shape)],
                      [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m)
    return m


def _qdq_tail(src: str, scale: float) -> tuple[list, dict[str, np.ndarray]]:
    """Q -> DQ of `src` at `scale` (zero point 128) into y."""
    return ([oh.make_node("QuantizeLinear", [src, "qs", "qz"], ["q"]),
             oh.make_node("DequantizeLinear", ["q", "qs", "qz"], ["y"])],
            {"qs": np.array(scale, np.float32), "qz": np.array(128, np.uint8)})


def scaled_matmul(s1: float, s2: float, w_scale: float, folded: bool = False) -> onnx.ModelProto:
    """(x * s1) @ W * s2 -> Q -> DQ (step 0.05), or with `folded` x @ W * (s1 * s2) (a
    MatMulScaleFusion without bounds): where x * s1 is subnormal the two differ by far more
    than rounding."""
    w = (np.random.default_rng(0).standard_normal((16, 16)) * w_scale).astype(np.float32)
    tail, consts = _qdq_tail("m", 0.05)
    if folded:
        body = [oh.make_node("MatMul", ["x", "w"], ["b"]), oh.make_node("Mul", ["b", "s"], ["m"])]
        consts |= {"s": np.array(np.float32(s1) * np.float32(s2), np.float32)}
    else:
        body = [oh.make_node("Mul", ["x", "s1"], ["a"]), oh.make_node("MatMul", ["a", "w"], ["b"]),
                oh.make_node("Mul", ["b", "s2"], ["m"])]
        consts |= {"s1": np.array(s1, np.float32), "s2": np.array(s2, np.float32)}
    return _model(body + tail, {"w": w, **consts}, [8, 16], [8, 16])


def scaled_conv(w_scale: float, k: float, step: float, folded: bool = False) -> onnx.ModelProto:
    """Conv(x, W) * k -> Q -> DQ, or with `folded` Conv(x, W * k) (ConvMulFusion, and the
    conv-mul folds of rules/conv.egg)."""
    w = (np.random.default_rng(0).standard_normal((4, 3, 3, 3)) * w_scale).astype(np.float32)
    kk = np.full((1, 4, 1, 1), k, np.float32)
    tail, consts = _qdq_tail("m", step)
    if folded:
        body = [oh.make_node("Conv", ["x", "w"], ["m"], pads=[1, 1, 1, 1])]
        consts |= {"w": (w * kk.reshape(4, 1, 1, 1)).astype(np.float32)}
    else:
        body = [oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), oh.make_node("Mul", ["c", "k"], ["m"])]
        consts |= {"w": w, "k": kk}
    return _model(body + tail, consts, [1, 3, 8, 8], [1, 4, 8, 8])


def _moved(a: onnx.ModelProto, b: onnx.ModelProto, shape) -> int:
    """How many outputs of b differ from a's (onnxruntime, no graph optimizations) on random inputs."""
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    return int(np.count_nonzero(run(a, {"x": x}, optimize=False)["y"] != run(b, {"x": x}, optimize=False)["y"]))


def _unmoved(a: onnx.ModelProto, shape):
    """A check of a written model (assert_wrong_never_written's `right`): it moves no output of `a`."""
    def right(b: onnx.ModelProto) -> None:
        assert _moved(a, b, shape) == 0

    return right


CLIP_DROP = ('(ruleset drop)\n; Clip(x, lo, hi) -> x, unsound\n'
             '(rewrite (Clip x lo hi) x :ruleset drop :name "clip-drop")\n')

UNBOUNDED_SCALE_OUT = """(ruleset red)
; MatMul(a * s, b) * t -> MatMul(a, b) * (s * t), unsound where a * s leaves float32's normal range
(rewrite (Mul (MatMul (Mul a s) b) t) (Mul (MatMul a b) (Mul s t)) :ruleset red :name "red-scale-out")
"""


def test_qdq_allowance_does_not_take_onnxruntimes_matmul_scale_fusion_at_extreme_scales(tmp_path, capsys):
    # (x * 1e-44) @ W * 1e38 before a Q of step 0.05: x * 1e-44 is subnormal (7 levels), and
    # onnxruntime's MatMulScaleFusion makes the two scales one alpha of 1e-6, moving 102 of 128
    # outputs by up to 9 steps. The allowance measured against it took a rule file's unbounded
    # scale-out (the same fold) and `eqsat optimize --rules` wrote it with exit 0 (103 of 128
    # outputs off, by up to 0.45)
    m, wrong = scaled_matmul(1e-44, 1e38, 1e6), scaled_matmul(1e-44, 1e38, 1e6, folded=True)
    assert _moved(m, wrong, (8, 16)) > 64
    assert float_folds_withheld(m) == ["MatMulScaleFusion"]
    assert_wrong_never_written(capsys, tmp_path, m, wrong, rules=UNBOUNDED_SCALE_OUT)


def test_qdq_allowance_keeps_onnxruntimes_matmul_scale_fusion_at_moderate_scales():
    # scales within [2^-16, 2^16] (rules/matmul.egg's own bound for a scale joining an alpha):
    # the fusion is a rounding change, and the allowance still measures by it
    m = scaled_matmul(0.5, 4.0, 0.3)
    assert float_folds_withheld(m) == []
    assert verify(m, scaled_matmul(0.5, 4.0, 0.3, folded=True)).status == "passed"


def test_qdq_allowance_does_not_take_onnxruntimes_conv_mul_fusion_over_subnormal_weights(tmp_path, capsys):
    # Conv(x, W ~ 1e-44) * 1e38 before a Q of step 1e-7: the products x * W are subnormal, and
    # onnxruntime's ConvMulFusion (W * 1e38 ~ 1e-6, normal) moves 201 of 256 outputs by up to 6
    # steps. With the allowance measured against it, the default rules' own conv-mul fold was
    # written with exit 0 (196 of 256 outputs off by up to 6 steps)
    m, folded = scaled_conv(1e-44, 1e38, 1e-7), scaled_conv(1e-44, 1e38, 1e-7, folded=True)
    assert _moved(m, folded, (1, 3, 8, 8)) > 128
    assert float_folds_withheld(m) == ["ConvMulFusion"]
    assert_wrong_never_written(capsys, tmp_path, m, folded, right=_unmoved(m, (1, 3, 8, 8)))


def test_qdq_allowance_keeps_onnxruntimes_conv_mul_fusion_at_ordinary_weights():
    m = scaled_conv(0.3, 2.0, 0.05)
    assert float_folds_withheld(m) == []
    assert verify(m, scaled_conv(0.3, 2.0, 0.05, folded=True)).status == "passed"


def biased_conv(b: float, c: float, folded: bool = False) -> onnx.ModelProto:
    """Conv(x, W, b) + c -> Q -> DQ (step 0.05), or with `folded` Conv(x, W, b + c) (ConvAddFusion,
    and the conv-add folds of rules/conv.egg)."""
    w = (np.random.default_rng(0).standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    tail, consts = _qdq_tail("m", 0.05)
    if folded:
        body = [oh.make_node("Conv", ["x", "w", "b"], ["m"], pads=[1, 1, 1, 1])]
        consts |= {"b": np.full(4, np.float32(b) + np.float32(c), np.float32)}
    else:
        body = [oh.make_node("Conv", ["x", "w", "b"], ["cc"], pads=[1, 1, 1, 1]),
                oh.make_node("Add", ["cc", "c"], ["m"])]
        consts |= {"b": np.full(4, b, np.float32), "c": np.full((1, 4, 1, 1), c, np.float32)}
    return _model(body + tail, {"w": w, **consts}, [1, 3, 8, 8], [1, 4, 8, 8])


def test_qdq_allowance_does_not_take_onnxruntimes_conv_add_fusion_of_cancelling_constants(tmp_path, capsys):
    # Conv(x, W, 1e8) + (-1e8) before a Q of step 0.05: the original's Conv + 1e8 rounds to 8,
    # and onnxruntime's ConvAddFusion (one bias of 0) moves 252 of 256 outputs by up to 73 steps.
    # With the allowance measured against it, the default rules' own conv-add fold was written
    # with exit 0 (253 of 256 outputs off by up to 3.65)
    m, folded = biased_conv(1e8, -1e8), biased_conv(1e8, -1e8, folded=True)
    assert _moved(m, folded, (1, 3, 8, 8)) > 128
    assert float_folds_withheld(m) == ["ConvAddFusion"]
    assert_wrong_never_written(capsys, tmp_path, m, folded, right=_unmoved(m, (1, 3, 8, 8)))
    # constants that do not cancel: a rounding change, measured by
    assert float_folds_withheld(biased_conv(0.5, 0.25)) == []
    assert float_folds_withheld(biased_conv(0.0, 0.0)) == []


def test_qdq_allowance_does_not_take_onnxruntimes_conv_bn_fusion_of_cancelling_constants():
    # BatchNormalization(Conv(x, W), mean 1e8, bias 1e8) before a Q: the original's Conv - 1e8
    # rounds to 8, a fold into one bias of 0 does not. onnxruntime 1.32's ConvBNFusion left this
    # one unfused (its own optimization moved nothing), so no program passed on it; the guard
    # is the same as for ConvAddFusion, for the BatchNormalizations it does fold
    w = (np.random.default_rng(0).standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    tail, consts = _qdq_tail("m", 0.05)
    bn = {"sc": np.ones(4, np.float32), "be": np.full(4, 1e8, np.float32), "mu": np.full(4, 1e8, np.float32),
          "va": np.ones(4, np.float32)}
    body = [oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            oh.make_node("BatchNormalization", ["c", "sc", "be", "mu", "va"], ["m"])]
    m = _model(body + tail, {"w": w, **bn, **consts}, [1, 3, 8, 8], [1, 4, 8, 8])
    assert float_folds_withheld(m) == ["ConvBNFusion"]
    folded = _model([oh.make_node("Conv", ["x", "w"], ["m"], pads=[1, 1, 1, 1])] + tail,
                    {"w": (w / np.sqrt(1 + 1e-5)).astype(np.float32), **consts}, [1, 3, 8, 8], [1, 4, 8, 8])
    assert _moved(m, folded, (1, 3, 8, 8)) > 128
    assert verify(m, folded).status == "failed"
    bn["be"], bn["mu"] = np.full(4, 0.5, np.float32), np.full(4, 0.25, np.float32)
    assert float_folds_withheld(_model(body + tail, {"w": w, **bn, **consts}, [1, 3, 8, 8], [1, 4, 8, 8])) == []


SMALL_BESIDE_LARGE = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[64] x) => (float[128] y) <float t = {{1e-6}}> {{
        {body}
        u = Mul(s, t)
        y = Concat <axis = 0> (x, u)
    }}"""


@pytest.mark.xfail(strict=True, reason="open: the absolute tolerance of an output is 1e-4 times its largest magnitude "
                                       "(up to 1), so elements of 1e-6 beside elements of 1 pass with any value within "
                                       "1e-4: Sin negated in the small half of the output passes every run")
def test_small_elements_beside_large_ones_are_not_hidden_by_the_outputs_absolute_tolerance():
    # y = Concat(x, Sin(x) * 1e-6) and a user's unsound Sin(x) -> x: at x times 100 the small
    # half was off by up to 3.3e-4 on values of about 1e-6, within the output's atol (1e-4 of
    # its largest magnitude, capped at 1, widened by the scaled run), and `eqsat optimize
    # --rules` wrote it with exit 0 (the large floats, compared by value since, catch that
    # one: 2e9 for sin(2e15) * 1e-6); Sin negated passes every run
    m = parse_model(SMALL_BESIDE_LARGE.format(body="s = Sin(x)"))
    wrong = parse_model(SMALL_BESIDE_LARGE.format(body="t = Sin(x)\n s = Neg(t)"))
    assert verify(m, m).status == "passed"
    assert verify(m, wrong).status == "failed"


OFFSET_LAYER_NORM = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[4, 64] x) => (uint8[4, 64] y) <float s = {{0.01}}, uint8 z = {{128}}, float eps = {{1e-5}},
                                           float two = {{2.0}}, float off = {{1e6}}, float[64] ga = {{{ones}}},
                                           float[64] be = {{{zeros}}}> {{
        xo = Add(x, off)
        {body}
        y = QuantizeLinear(n, s, z)
    }}"""
LAYER_NORM_PRIMITIVES = """m = ReduceMean <axes = [-1]> (xo)
        d = Sub(xo, m)
        p = Pow(d, two)
        v = ReduceMean <axes = [-1]> (p)
        e = Add(v, eps)
        r = Sqrt(e)
        q = Div(d, r)
        g = Mul(q, ga)
        n = Add(g, be)"""


def test_qdq_allowance_does_not_take_onnxruntimes_layer_norm_kernel_on_rows_of_a_large_mean(tmp_path, capsys):
    # LayerNorm in primitives over x + 1e6 before a Q of step 0.01: onnxruntime's LayerNormFusion
    # runs its LayerNormalization kernel, whose variance loses the rows' spread beside their mean
    # (the primitives subtract the mean first), moving up to 150 of 256 codes by up to 7. With
    # the allowance measured against it, the default rules' own LayerNorm fusion was written with
    # exit 0, as far off
    ones, zeros = ", ".join(["1.0"] * 64), ", ".join(["0.0"] * 64)
    m = parse_model(OFFSET_LAYER_NORM.format(ones=ones, zeros=zeros, body=LAYER_NORM_PRIMITIVES))
    fused = parse_model(OFFSET_LAYER_NORM.format(
        ones=ones, zeros=zeros, body="n = LayerNormalization <axis = -1, epsilon = 0.00001> (xo, ga, be)"))
    assert _moved(m, fused, (4, 64)) > 16
    assert_wrong_never_written(capsys, tmp_path, m, fused, right=_unmoved(m, (4, 64)))


CLIP_BESIDE_A_CONSTANT = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[64] x) => (float[65] y) <float lo = {{-1000.0}}, float hi = {{1000.0}}, float[1] big = {{{big}}}> {{
        {body}
        y = Concat <axis = 0> (c, big)
    }}"""


def test_one_large_element_does_not_widen_the_far_runs_tolerance_for_every_other(tmp_path, capsys):
    # Clip(x, -1000, 1000) beside a constant 1e30 in one output, and a user's unsound
    # Clip(x, lo, hi) -> x: only the floats times 10000 reach the Clip's bounds, where the
    # tolerance was at least 256 float steps of the output's largest magnitude: 3e25, for every
    # element. `eqsat optimize --rules` wrote the dropped Clip with exit 0 (3455 for 1000)
    for big in ("1.0", "1e30"):
        m = parse_model(CLIP_BESIDE_A_CONSTANT.format(big=big, body="c = Clip(x, lo, hi)"))
        dropped = parse_model(CLIP_BESIDE_A_CONSTANT.format(big=big, body="c = Identity(x)"))
        assert verify(m, m).status == "passed"
        v = verify(m, dropped)
        assert v.status == "failed" and ("floats times 10000" in v.detail or "large floats" in v.detail), v.detail
    # the floats times 10000 alone (the large ones are compared by value since): the Clip's
    # elements move by nothing under a nudge, the constant's floor does not reach them
    e = np.array([1000.0, -1000.0, 2.0, 1e30], np.float32)
    a = np.array([3455.8, -1000.0, 2.0, 1e30], np.float32)
    nudged = {"y": np.array([0.0, 0.0, 2.0 ** -12 * 2, 0.0])}
    assert compare({"y": e}, {"y": a}, None, None, scaled=SCALED_FAR, noise={"y": 0.0}) == []
    assert compare({"y": e}, {"y": a}, None, None, scaled=SCALED_FAR, noise={"y": 0.0}, sensitivity=nudged) != []
    assert_refused(capsys, tmp_path, m, rules=CLIP_DROP)


TINY_OUTPUT = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[64] x) => (float[64] y) <float t = {{1e-30}}> {{
        {body}
        y = Mul(s, t)
    }}"""


@pytest.mark.xfail(strict=True, reason="open: an output whose values all lie below sqrt(float32's smallest "
                                       "normal) (1.1e-19) has an absolute tolerance of 1e-4 of that (1e-23), the "
                                       "floor kept for the remains of underflow; a normal output of 1e-30 passes "
                                       "any values of its size")
def test_an_output_of_small_normal_values_is_held_to_them():
    # y = Sin(x) * 1e-30 computed as -Sin(x) * 1e-30: every run passes
    m = parse_model(TINY_OUTPUT.format(body="s = Sin(x)"))
    assert verify(m, m).status == "passed"
    assert verify(m, parse_model(TINY_OUTPUT.format(body="t = Sin(x)\n s = Neg(t)"))).status == "failed"


LABELS = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[4, 16] x) => (uint8[4] y, uint8[4, 16] q) <float s = {0.05}, uint8 z = {128}> {
        q = QuantizeLinear(x, s, z)
        d = DequantizeLinear(q, s, z)
        i = ArgMax <axis = 1, keepdims = 0> (d)
        y = Cast <to = 2> (i)
    }"""


def test_qdq_allowance_takes_an_index_cast_to_uint8_as_an_index():
    # a class map: ArgMax over quantized scores, Cast to uint8 (a segmentation model's labels).
    # Its dtype is a quantized code's, and the allowance measured it as a distance: where
    # onnxruntime's own optimization turned label 200 into 6, any label from 6 to 394 passed.
    # An output is codes only where a QuantizeLinear makes it (through ops that move codes)
    from eqsat.verification import Mismatch
    from eqsat.verification.qdq import QdqAllowance, code_outputs

    m = parse_model(LABELS)
    assert code_outputs(m) == {"q"}
    allowance = QdqAllowance(m, (None, None))
    assert allowance.codes == {"q"} and allowance.quantized == {"y", "q"}
    expected, own = {"y": np.array([200, 3, 7, 1], np.uint8)}, {"y": np.array([6, 3, 7, 1], np.uint8)}
    allowance._own = lambda f: own
    still = allowance.filter([Mismatch("y", "differs")], expected, {"y": np.array([100, 3, 7, 1], np.uint8)}, {})
    assert len(still) == 1 and still[0].requantized
    assert allowance.filter([Mismatch("y", "differs")], expected, {"y": own["y"].copy()}, {}) == []


def test_the_large_values_are_compared_by_value_where_both_are_finite(tmp_path, capsys):
    # Clip(x, -1e12, 1e12) and a user's unsound Clip(x, lo, hi) -> x: only the run with +-2e15
    # among the floats reaches the bounds, and it compared finiteness alone: `eqsat optimize
    # --rules` wrote the Identity with exit 0 (2e15 for 1e12)
    text = """<ir_version: 8, opset_import: ["" : 17]>
        g (float[64] x) => (float[64] y) <float lo = {-1e12}, float hi = {1e12}> { %s }"""
    m, dropped = parse_model(text % "y = Clip(x, lo, hi)"), parse_model(text % "y = Identity(x)")
    assert verify(m, m).status == "passed"
    v = verify(m, dropped)
    assert v.status == "failed" and "large floats" in v.detail, v.detail
    # and beside a constant 1e30 in the same output (no floor from the output's largest value)
    beside = """<ir_version: 8, opset_import: ["" : 17]>
        g (float[64] x) => (float[65] y) <float lo = {-1e12}, float hi = {1e12}, float[1] big = {1e30}> {
            %s
            y = Concat <axis = 0> (c, big) }"""
    m2 = parse_model(beside % "c = Clip(x, lo, hi)")
    assert verify(m2, m2).status == "passed"
    assert verify(m2, parse_model(beside % "c = Identity(x)")).status == "failed"
    assert_refused(capsys, tmp_path, m, rules=CLIP_DROP)


def test_the_floats_times_100_allow_rounding_at_the_outputs_magnitude_where_the_original_moves_as_much():
    # ResNet-50, optimized with its residual Add fused into the shortcut's Conv rather than the
    # main branch's (a tie that the hash seed broke): one logit of 3.18 among logits up to
    # about 400 on the floats times 100 was 0.015 from the original's, and eqsat optimize
    # refused the correct program (exit 1) in one run of six; the run's tolerance came from
    # the random draw's differences alone, where the far run's also allows 256 steps of the
    # output's largest magnitude, where a nudge of the inputs moves the original as much
    rng = np.random.default_rng(0)
    e = (rng.standard_normal((1, 1000)) * 100).astype(np.float32)
    e[0, 0], e[0, 1] = 400.0, 3.1950684
    moves = np.full(e.shape, 0.1)
    rounded = e.copy()
    rounded[0, 1] = 3.1799316
    assert not compare({"y": e}, {"y": rounded}, None, None, scaled=True, noise={"y": 1e-6},
                       sensitivity={"y": moves})
    wrong = e.copy()
    wrong[0, 1] = -3.1950684  # a sign lost is no rounding
    assert compare({"y": e}, {"y": wrong}, None, None, scaled=True, noise={"y": 1e-6}, sensitivity={"y": moves})
    stiff = np.zeros(e.shape)  # where the nudge moves the original nothing, no rounding is allowed
    assert compare({"y": e}, {"y": rounded}, None, None, scaled=True, noise={"y": 1e-6}, sensitivity={"y": stiff})


def _logits_off_by_rounding():
    """EfficientNet-B1's logits on the large floats (up to 2070), one of 0.8437 off by 0.0019 as onnxruntime's own
    optimizations leave it, where the random draw's logits were 3.4e-14 and differed by 2.8e-20."""
    rng = np.random.default_rng(0)
    e = (rng.standard_normal((1, 1000)) * 300).astype(np.float32)
    e[0, 0], e[0, 660] = 2070.1843, 0.84373474
    a = e.copy()
    a[0, 660] = 0.8418579
    return e, a


def test_the_large_values_allow_the_far_floor_where_the_original_moves_as_much():
    # `eqsat optimize` refused torchvision's EfficientNet-B1 (exit 1) on the large floats: its
    # tolerance there came from the random draw's differences, 1e17 times smaller than its outputs
    e, a = _logits_off_by_rounding()
    large = dict(finite_free="values", scaled=2.6e15, noise={"y": 2.8e-20})
    assert compare({"y": e}, {"y": a}, None, None, **large) != []
    moved = {"y": np.full(e.shape, 0.13)}
    assert compare({"y": e}, {"y": a}, None, None, **large, sensitivity=moved) == []
    # where a nudge does not move the original (a saturated Clip), no floor: still refused
    still = {"y": np.where(np.arange(1000) == 660, 0.0, 0.13)[None]}
    assert compare({"y": e}, {"y": a}, None, None, **large, sensitivity=still) != []


def test_the_large_values_run_nudges_the_original_only_where_it_differs():
    # _edge_runs on a model whose outputs stand for EfficientNet-B1's: the optimized model is off by rounding on the
    # large floats alone, where the original moves by 0.13 under a nudge of its inputs
    from eqsat.verification import _edge_runs
    from eqsat.verification.feeds import Feeds

    m = parse_model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[1, 1000] x) => (float[1, 1000] y) { y = Identity(x) }""")
    e, a = _logits_off_by_rounding()
    last: list[np.ndarray] = []

    def ref(f, sizes):
        x = f["x"]
        large = bool(np.abs(x).max() > 1e14)
        before = last[-1] if last else None  # the nudge comes right after the large floats' own run
        nudged = large and before is not None and np.abs(before).max() > 1e14 and not np.array_equal(x, before)
        last.append(x)
        if not large:
            return {"y": np.full((1, 1000), 1e-14, np.float32)}
        return {"y": e + np.float32(0.13) if nudged else e}

    def opt(f, sizes):
        return {"y": a if np.abs(f["x"]).max() > 1e14 else np.full((1, 1000), 1e-14, np.float32)}

    out = _edge_runs(m, Feeds(m), ref, opt, {}, True, None, 1, None, None, noise={"y": 2.8e-20})
    assert isinstance(out, str) and "large floats" in out, out
