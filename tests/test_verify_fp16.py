"""Verification of float16 and bfloat16 models (eqsat.verification.widen): a program that
rounds at other places than the original (a fused LayerNormalization) is verified where it is
as close to the float32 result as the original, and a wrong program is still refused: one wrong
in float32, one that overflows in float16 where the original does not, one whose folded
constant float16 cannot hold. bfloat16 models, which onnxruntime's CPU provider does not run,
are verified as float32 copies and as those copies rounding each op's result to bfloat16."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from eqsat.verification import random_inputs, run, verify
from eqsat.verification.widen import HALF_ERROR_FACTOR, rounded, widened, widened_feeds

from .conftest import ops, run_cli

H = TensorProto.FLOAT16


def _model(nodes, inits: dict[str, np.ndarray], outputs=("y",), d: int = 64) -> onnx.ModelProto:
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", H, ["B", d])],
                      [oh.make_tensor_value_info(o, H, ["B", d]) for o in outputs],
                      [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m)
    return m


def layer_norm(offset: float, d: int = 64, fused: bool = False, extra=()) -> onnx.ModelProto:
    """LayerNorm(x + offset) over the last axis of float16 [B, d], as the chain an exporter
    writes (ReduceMean, Sub, Pow, ReduceMean, Add eps, Sqrt, Div, Mul, Add) or, `fused`, one
    LayerNormalization. The row's mean is about `offset`: onnxruntime runs the chain in float32
    from x + offset to y, while its LayerNormalization takes x + offset rounded to float16
    (steps of 2 ** -8 at 4), as the specification rounds every op of the chain. `extra`: more
    (nodes, output names) appended."""
    rng = np.random.default_rng(0)
    inits = {"off": np.array(offset, np.float16), "g": (1 + 0.1 * rng.standard_normal(d)).astype(np.float16),
             "b": (0.1 * rng.standard_normal(d)).astype(np.float16)}
    nodes = [oh.make_node("Add", ["x", "off"], ["a"])]
    if fused:
        nodes.append(oh.make_node("LayerNormalization", ["a", "g", "b"], ["y"], axis=-1,
                                  epsilon=float(np.float16(1e-5))))
    else:
        inits |= {"two": np.array(2, np.float16), "eps": np.array(1e-5, np.float16)}
        nodes += [oh.make_node("ReduceMean", ["a"], ["m"], axes=[-1]), oh.make_node("Sub", ["a", "m"], ["c"]),
                  oh.make_node("Pow", ["c", "two"], ["p"]), oh.make_node("ReduceMean", ["p"], ["v"], axes=[-1]),
                  oh.make_node("Add", ["v", "eps"], ["ve"]), oh.make_node("Sqrt", ["ve"], ["s"]),
                  oh.make_node("Div", ["c", "s"], ["n"]), oh.make_node("Mul", ["n", "g"], ["gn"]),
                  oh.make_node("Add", ["gn", "b"], ["y"])]
    outputs = ["y"]
    for more, names in extra:
        nodes += more
        outputs += names
    return _model(nodes, inits, outputs, d)


def _distance(model: onnx.ModelProto, truth: onnx.ModelProto, seed: int) -> float:
    """The largest |model - truth| (truth: a float32 copy) of output y on random inputs."""
    f = random_inputs(model, {"B": 2}, seed)
    a = run(model, f, optimize=False)["y"].astype(np.float64)
    return float(np.abs(a - run(truth, widened_feeds(f), optimize=False)["y"]).max())


def _written(m, tmp_path, capsys):
    """`eqsat optimize` of `m` with a report (tmp_path/r.json): exit 0, and the model written,
    which onnx.checker accepts."""
    onnx.save(m, tmp_path / "m.onnx")
    rc, _, err = run_cli(capsys, "optimize", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx",
                         "--report", tmp_path / "r.json", "-q")
    assert rc == 0, err
    out = onnx.load(tmp_path / "o.onnx")
    onnx.checker.check_model(out)
    return out


def test_a_correct_layer_norm_fusion_in_float16_is_verified(tmp_path, capsys):
    # Before: exit 1, nothing written ("verification failed ... max abs diff 0.00155 (random
    # inputs, seed 0)"): eqsat's LayerNormalization rounds x + 4 to float16, which onnxruntime's
    # run of the original chain does not, and the two float16 runs were compared with each other.
    m = layer_norm(4.0)
    out = _written(m, tmp_path, capsys)
    assert ops(out) == ["Add", "LayerNormalization"]
    truth = widened(m)
    for seed in range(3):  # as close to the float32 result as the specification's run of the original
        assert _distance(out, truth, seed) <= HALF_ERROR_FACTOR * _distance(rounded(m), truth, seed)
        f = random_inputs(m, {"B": 2}, seed)
        assert np.abs(run(out, f)["y"].astype(np.float32) - run(m, f)["y"]).max() < 0.01
    assert "float16 rounding" in (tmp_path / "r.json").read_text()


def test_the_fused_layer_norm_is_verified_by_the_library_call_too():
    v = verify(layer_norm(4.0), layer_norm(4.0, fused=True))
    assert v.status == "passed", v.detail
    assert "float32 copies of both agree" in v.detail


def test_a_layer_norm_with_the_wrong_epsilon_in_float16_is_refused_by_its_float32_copies():
    # epsilon 2e-5 for 1e-5: at the floats times 0.0001 the row's variance is about 1e-8, and
    # the two float16 runs are within twice the original's distance from the float32 result
    # (x * 0.0001 + 4 rounded to float16 keeps little of x); the float32 copies differ by 30 %
    m = layer_norm(4.0)
    bad = layer_norm(4.0, fused=True)
    bad.graph.node[1].attribute[1].f = 2e-5
    v = verify(m, bad)
    assert v.status == "failed" and "float32 copies differ too" in v.detail, v.detail
    bad.graph.node[1].attribute[1].f = 1e-3  # beyond the bound in float16 too
    v = verify(m, bad)
    assert v.status == "failed" and "each op's result rounded" in v.detail, v.detail


def test_a_layer_norm_without_its_bias_in_float16_is_refused():
    # 0.1 standard deviation off: beyond any float16 rounding, and wrong in float32 too
    m = layer_norm(4.0)
    bad = layer_norm(4.0, fused=True)
    bad.graph.node[1].input[2] = ""
    v = verify(m, bad)
    assert v.status == "failed", v.detail


SQUARE = [oh.make_node("Mul", ["x", "x"], ["xx"])]
ABS = ([oh.make_node("Abs", ["x"], ["z"])], ["z"])
# |x| as Sqrt(x * x): right in float32; x * x overflows float16 for |x| > 256
HIDDEN_SQUARE_ROOT = ([*SQUARE, oh.make_node("Sqrt", ["xx"], ["z"])], ["z"])


def test_a_program_that_overflows_in_float16_only_is_refused_beside_a_rounding_difference():
    # The fused LayerNormalization's difference is excused (float16 rounding), and the float32
    # copies agree, where Sqrt(x * x) is |x|; onnxruntime runs Mul -> Sqrt in float32 (no
    # overflow in either float16 run), but
    # with each op rounded to float16 (`rounded`), as the specification and a float16 kernel
    # run it, x * x is inf at the floats times 1023.
    m = layer_norm(4.0, extra=[ABS])
    bad = layer_norm(4.0, fused=True, extra=[HIDDEN_SQUARE_ROOT])
    assert verify(m, layer_norm(4.0, fused=True, extra=[ABS])).status == "passed"
    v = verify(m, bad)
    assert v.status == "failed" and "each op's result rounded to float16" in v.detail, v.detail
    assert "output 'z'" in v.detail


def test_a_program_that_overflows_in_float16_only_is_refused_alone():
    # no rounding difference elsewhere: the runs with each op rounded are compared in every
    # verification of a float16 model (before: passed, neither onnxruntime run overflows)
    m = _model(*ABS[:1], {}, ABS[1])
    v = verify(m, _model(*HIDDEN_SQUARE_ROOT[:1], {}, HIDDEN_SQUARE_ROOT[1]))
    assert v.status == "failed" and "each op's result rounded to float16" in v.detail, v.detail


def test_an_overflow_onnxruntime_shows_in_float16_is_refused():
    # x * x goes through Concat, which onnxruntime runs in float16: inf at the floats times 1023,
    # where |x| and the float32 copies are finite
    m = _model(*ABS[:1], {}, ABS[1])
    shown = [*SQUARE, oh.make_node("Concat", ["xx", "xx"], ["cc"], axis=0),
             oh.make_node("Split", ["cc"], ["s0", "s1"], axis=0), oh.make_node("Sqrt", ["s0"], ["z"])]
    v = verify(m, _model(shown, {}, ["z"]))
    assert v.status == "failed", v.detail


def test_a_fold_done_in_float32_and_stored_in_float16_is_refused():
    # (x * 1e-4) * 1e-4 folded as x * (1e-4 * 1e-4): 1e-8 is 0 in float16 (its smallest
    # subnormal is 6e-8), so the optimized model is 0 where the original is x * 1e-8, 1e-5 at
    # the floats times 1023; the float32 copy keeps the stored 0
    c = np.array(1e-4, np.float16)
    m = _model([oh.make_node("Mul", ["x", "c"], ["t"]), oh.make_node("Mul", ["t", "c"], ["y"])], {"c": c})
    folded = np.array(np.float32(c) * np.float32(c), np.float16)
    assert folded == 0
    v = verify(m, _model([oh.make_node("Mul", ["x", "k"], ["y"])], {"k": folded}))
    assert v.status == "failed", v.detail


def test_widened_and_rounded_copies():
    m = layer_norm(4.0)
    w = widened(m)
    assert {t.data_type for t in w.graph.initializer} == {TensorProto.FLOAT}
    assert w.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    r = rounded(m)
    assert ops(r).count("Cast") == 2 * len(m.graph.node)
    f = random_inputs(m, {"B": 2}, 0)
    # rounded: each op's float16 result; the output is float16's values, as float32
    y = run(r, widened_feeds(f), optimize=False)["y"]
    assert np.array_equal(y, y.astype(np.float16).astype(np.float32))


def bfloat16(m: onnx.ModelProto) -> onnx.ModelProto:
    """`m` (float16 initializers, input and outputs) in bfloat16."""
    for i, t in enumerate(m.graph.initializer):
        a = numpy_helper.to_array(t).astype(np.float32)
        m.graph.initializer[i].CopyFrom(oh.make_tensor(t.name, TensorProto.BFLOAT16, a.shape, a.ravel().tolist()))
    for v in (*m.graph.input, *m.graph.output):
        v.type.tensor_type.elem_type = TensorProto.BFLOAT16
    onnx.checker.check_model(m)
    return m


def test_a_bfloat16_layer_norm_fusion_is_verified(tmp_path, capsys):
    # Before: exit 1, nothing written ("verification not possible ... onnxruntime cannot run the
    # original: ... Could not find an implementation for Add(14)"): no bfloat16 kernels
    m = bfloat16(layer_norm(4.0))
    out = _written(m, tmp_path, capsys)
    assert ops(out) == ["Add", "LayerNormalization"]
    assert "each op's result rounded to bfloat16" in (tmp_path / "r.json").read_text()
    truth, f = widened(m), widened_feeds(random_inputs(layer_norm(4.0), {"B": 2}, 0))
    t = run(truth, f, optimize=False)["y"]
    got, own = (run(rounded(x), f, optimize=False)["y"] for x in (out, m))
    assert np.abs(got - t).max() <= HALF_ERROR_FACTOR * np.abs(own - t).max()


def test_a_wrong_bfloat16_program_is_refused():
    m = bfloat16(_model(*ABS[:1], {}, ABS[1]))
    v = verify(m, bfloat16(_model([oh.make_node("Relu", ["x"], ["z"])], {}, ["z"])))
    assert v.status == "failed" and "float32 copies differ too" in v.detail, v.detail
    bad = bfloat16(layer_norm(4.0, fused=True))
    bad.graph.node[1].input[2] = ""
    assert verify(bfloat16(layer_norm(4.0)), bad).status == "failed"


def test_a_float16_model_with_a_random_op_is_verified_as_before():
    # its nodes run in stages with stand-ins (eqsat.verification.standins): no float32 copies,
    # which would draw their own random values
    g = oh.make_graph([oh.make_node("RandomNormalLike", ["x"], ["r"]), oh.make_node("Add", ["x", "r"], ["y"])], "g",
                      [oh.make_tensor_value_info("x", H, ["B", 64])], [oh.make_tensor_value_info("y", H, ["B", 64])])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    v = verify(m, m)
    assert v.status == "passed" and "float16 rounding" not in v.detail and v.not_verified, v.detail


def cast_weight_conv(seed: int) -> onnx.ModelProto:
    """Relu(Conv(x, Cast(W))) in float16, W a float32 Constant cast to float16 at run time
    (eqsat folds the Cast into a float16 initializer; onnxruntime runs the original's Conv on
    W unrounded: it drops the Cast to float16 before its float32 Conv)."""
    w = np.random.default_rng(seed).standard_normal((4, 3, 3, 3)).astype(np.float32)
    g = oh.make_graph([oh.make_node("Constant", [], ["w32"], value=numpy_helper.from_array(w)),
                       oh.make_node("Cast", ["w32"], ["w"], to=H), oh.make_node("Conv", ["x", "w"], ["c"]),
                       oh.make_node("Relu", ["c"], ["y"])], "g",
                      [oh.make_tensor_value_info("x", H, [1, 3, 8, 8])],
                      [oh.make_tensor_value_info("y", H, [1, 4, 6, 6])])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 18)], ir_version=8)
    onnx.checker.check_model(m)
    return m


def test_a_float16_conv_whose_cast_weight_eqsat_folds_is_verified(tmp_path, capsys):
    # Before (and with float32 copies that dropped the Cast's rounding): exit 1, nothing written
    # ("output 'y': 1 of 144 values differ ... max abs diff 0.184 (on floats times 100; seed 1)"),
    # the unchanged program with its weights rounded once, as the Cast does
    m = cast_weight_conv(1)
    onnx.save(m, tmp_path / "m.onnx")
    rc, _, err = run_cli(capsys, "optimize", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "-q")
    assert rc == 0, err
    out = onnx.load(tmp_path / "o.onnx")
    onnx.checker.check_model(out)
    assert ops(out) == ["Conv", "Relu"]
    f = widened_feeds({"x": (np.random.default_rng(2).standard_normal((1, 3, 8, 8)) * 100).astype(np.float16)})
    spec = run(rounded(m), f, optimize=False)["y"]  # the original with its Cast's rounding
    assert np.abs(run(out, {"x": f["x"].astype(np.float16)})["y"].astype(np.float32) - spec).max() \
        <= 2 * np.abs(spec).max() * 2.0 ** -11
