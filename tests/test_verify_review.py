"""Holes a review of verification found: inputs where a wrong optimized model was written with
exit 0. Each test crafts the input, has a user's unsound rule file make the wrong rewrite on
purpose (or hands verify the wrong program), and checks that it is refused, beside a right
program on the same input that is still verified."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as oh

from eqsat.verification import random_inputs, run, verify
from eqsat.verification.widen import kept, widened

from .conftest import ops, optimize_cli, parse_model
from .test_verify_fp16 import bfloat16, layer_norm

# ---- float16: a rounding the original asks for (a Cast to float16 of a computed value)

# y: the rounding error of x * x (exact in float32) stored in float16, as a float32 value split
# into a float16 part and the rest: `widened` drops the Cast of b to float16 (a computed value),
# so the original's float32 copy, the truth, gives 0
SPLIT = """
    <ir_version: 8, opset_import: ["" : 18]>
    g (float16[64] x) => (float16[64] y) {
        a = Cast <to = 1> (x)
        b = Mul(a, a)
        c = Cast <to = 10> (b)
        d = Cast <to = 1> (c)
        e = Sub(d, b)
        y = Cast <to = 10> (e)
    }"""
DROP_ROUNDING = ("(ruleset bad)\n; Cast(Cast(b, float16), float32) -> b, unsound: drops the rounding to float16\n"
                 "(rewrite (Cast (Cast b rm sat (F16)) rm2 sat2 (F32)) b :when ((= (F32) (dtype b)))"
                 ' :ruleset bad :name "bad-cast-round-trip")\n')


def test_a_dropped_rounding_to_float16_is_refused(capsys, tmp_path):
    # Before: exit 0, written with y = 0 where the original gives x * x's float16 rounding error
    # (up to 0.0019 on the random draw, 100 % of the output): the fp16 runs' difference was
    # excused, the optimized run being exactly the original's float32 copy (which drops the
    # rounding too), and the float32 copies agreed
    m = parse_model(SPLIT)
    rc, err, out = optimize_cli(capsys, tmp_path, m, rules=DROP_ROUNDING)
    assert rc == 1 and out is None, err
    assert "output 'y'" in err
    f = random_inputs(m, {}, 0)
    assert np.abs(run(m, f)["y"]).max() > 1e-4  # what the wrong program gives as 0


def test_a_float16_rounding_changed_to_bfloat16_is_refused():
    # the same rounding done to bfloat16 (8 bits where float16 keeps 11): the float32 copies of
    # both drop either Cast, so only the original's kept copy tells them apart
    m = parse_model(SPLIT)
    bad = parse_model(SPLIT.replace("c = Cast <to = 10> (b)", "c = Cast <to = 16> (b)"))
    v = verify(m, bad)
    assert v.status == "failed", v.detail


def test_a_dropped_rounding_by_cast_like_is_refused():
    # CastLike(b, x), x float16: `widened` makes x float32 and the CastLike rounds nothing; before,
    # the kept copy kept it so too, and dropping its rounding passed
    m = parse_model(SPLIT.replace("c = Cast <to = 10> (b)", "c = CastLike(b, x)"))
    assert verify(m, parse_model(SPLIT.replace("d = Cast <to = 1> (c)", "d = Identity(b)"))).status == "failed"
    assert verify(m, m).status == "passed"


def test_a_dropped_rounding_to_bfloat16_is_refused():
    # bfloat16: onnxruntime runs no bfloat16 kernels, the models are verified as their rounded
    # copies against the float32 copy (`_emulated`), which dropped the rounding of b as well
    m = parse_model(SPLIT.replace("float16[64]", "bfloat16[64]").replace("<to = 10>", "<to = 16>"))
    bad = parse_model(SPLIT.replace("float16[64]", "bfloat16[64]").replace("<to = 10>", "<to = 16>")
                      .replace("d = Cast <to = 1> (c)", "d = Identity(b)"))
    v = verify(m, bad)
    assert v.status == "failed", v.detail
    # before: "not possible" for the right program too (onnxruntime's binding takes no bfloat16
    # arrays, and every op here has a kernel, so the runs failed before any session did)
    v = verify(m, parse_model(SPLIT.replace("float16[64]", "bfloat16[64]").replace("<to = 10>", "<to = 16>")))
    assert v.status == "passed", v.detail


def test_a_layer_norm_fusion_beside_a_rounding_of_a_computed_value_is_verified():
    # the kept copy holds excused differences to it too: the fused LayerNormalization's
    # rounding difference is still excused where the model rounds a computed value elsewhere
    extra = ([oh.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT), oh.make_node("Mul", ["xf", "xf"], ["sq"]),
              oh.make_node("Cast", ["sq"], ["z"], to=TensorProto.FLOAT16)], ["z"])
    m = layer_norm(4.0, extra=[extra])
    assert kept(m) is not None and ops(kept(m)).count("Cast") == ops(widened(m)).count("Cast") + 1
    v = verify(m, layer_norm(4.0, fused=True, extra=[extra]))
    assert v.status == "passed", v.detail
    assert "float32 copies of both agree" in v.detail
    assert verify(bfloat16(m), bfloat16(layer_norm(4.0, fused=True, extra=[extra]))).status == "passed"


def test_kept_copies():
    m = parse_model(SPLIT)
    k = kept(m)
    assert ops(k).count("Cast") == ops(widened(m)).count("Cast") + 2  # b's and e's rounding
    assert all(v.type.tensor_type.elem_type == TensorProto.FLOAT for v in (*k.graph.input, *k.graph.output))
    assert kept(layer_norm(4.0)) is None  # no Cast of a computed value: the widened copy is the truth
    onnx.checker.check_model(k)


# ---- Loops that a condition ends, not a trip count

# z = x plus v = x * x once for each trip past the 11th; the loop runs m trips (an input, drawn in
# [-9, 9]) through its condition, with no trip count (a while loop) or a constant one of 1000
WHILE = """
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[3] x, int64 m) => (float[3] z) {
        v = Mul(x, x)
        zero = Constant <value = int64 {0}> ()
        t = Less(zero, m)
        z = Loop(TRIPS, t, x) <body = b (int64 i, bool c, float[3] acc) => (bool co, float[3] ao) {
                ten = Constant <value = int64 {10}> ()
                one = Constant <value = int64 {1}> ()
                late = Greater(i, ten)
                i1 = Add(i, one)
                co = Less(i1, m)
                w = Add(acc, v)
                ao = Where(late, w, acc)
            }>
    }"""
BAD_SQUARE = '(ruleset bad)\n; Mul(x, x) -> x, unsound\n(rewrite (Mul x x) x :ruleset bad :name "bad-square")\n'


def _while(trips: str) -> onnx.ModelProto:
    body = "" if trips == "" else "big = Constant <value = int64 {1000}> ()\n        "
    return parse_model(WHILE.replace("v = Mul", body + "v = Mul").replace("TRIPS", "big" if trips else ""))


def test_a_value_a_while_loop_reads_only_after_many_trips_is_verified(capsys, tmp_path):
    # Before: exit 0 for both, written with z = x + 2 x where the original gives x + 2 x * x at
    # m = 12 (x = [1, 2, 3]: [2, 4, 6] for [2, 6, 12]): `_loops` forced only Loops whose trip
    # count is computed, and these end by their condition
    for trips in ("", "1000"):
        m = _while(trips)
        rc, err, out = optimize_cli(capsys, tmp_path, m, rules=BAD_SQUARE)
        assert rc == 1 and out is None, (trips, err)
        assert "with every Loop's trip count 20" in err, err
        v = verify(m, m)  # the right program: verified, on the forced trips too
        assert v.status == "passed" and "on every Loop's trip count 20" in v.detail, v.detail


# ---- an If whose branches a rule swaps, negating the condition

IF_AT_5000 = """
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[3] x, int64[1] i) => (float[3] z) {
        k = Constant <value = int64[1] {5000}> ()
        c1 = Equal(i, k)
        COND
        z = If(c) <then_branch = t () => (float[3] zt) {
                zt = THEN(x)
            }, else_branch = e () => (float[3] ze) {
                ze = ELSE(x)
            }>
    }"""


def _if(cond: str, then: str, other: str) -> onnx.ModelProto:
    return parse_model(IF_AT_5000.replace("COND", cond).replace("THEN", then).replace("ELSE", other))


def test_an_if_with_its_branches_swapped_and_its_condition_negated_is_verified():
    # Before: failed (with every If's condition forced true: Sigmoid(x) vs -x): forced true, the
    # original took its then branch and If(Not(c), Sigmoid, Neg) its then branch too, where c true
    # takes Neg in both. The swap without the Not, and the Not without the swap, are still refused
    m = _if("c = Squeeze(c1)", "Neg", "Sigmoid")
    v = verify(m, _if("c0 = Squeeze(c1)\n        c = Not(c0)", "Sigmoid", "Neg"))
    assert v.status == "passed" and "forced true and false" in v.detail, v.detail
    assert verify(m, _if("c = Squeeze(c1)", "Sigmoid", "Neg")).status == "failed"
    v = verify(m, _if("c0 = Squeeze(c1)\n        c = Not(c0)", "Neg", "Sigmoid"))
    assert v.status == "failed", v.detail


# ---- an If in a Loop's body whose condition the body computes from its constants

BODY_CONSTANT_IF = """
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[3] x, int64 m) => (float[3] z) {
        t = Constant <value = bool {1}> ()
        z = Loop(m, t, x) <body = b (int64 i, bool c, float[3] acc) => (bool co, float[3] ao) {
                f = Constant <value = bool {0}> ()
                nf = Not(f)
                co = Identity(c)
                ao = If(nf) <then_branch = tb () => (float[3] tz) { tz = Add(acc, x) },
                             else_branch = eb () => (float[3] ez) { ez = Neg(acc) }>
            }>
    }"""


def test_an_if_a_body_decides_from_its_constants_is_inlined_and_verified(capsys, tmp_path):
    # Before: exit 1 (verification failed with every If's condition forced false): Not(false) is
    # true on every trip and eqsat inlines the then branch, but `_computed` took only the body's
    # Constants for constants, and forcing sent the original alone to the else branch
    m = parse_model(BODY_CONSTANT_IF)
    rc, err, out = optimize_cli(capsys, tmp_path, m)
    assert rc == 0 and out is not None, err
    onnx.checker.check_model(out)
    assert "If" not in str(out.graph)
    f = {"x": np.array([1, 2, 3], np.float32), "m": np.array(4, np.int64)}
    np.testing.assert_allclose(run(out, f)["z"], run(m, f)["z"])
    np.testing.assert_allclose(run(m, f)["z"], 5 * f["x"])


def test_a_branch_that_reads_its_condition_is_forced_consistently():
    # Before: the right Where(c, -x, Sigmoid(x)) -> -x in If(c)'s then branch was refused (with
    # every If's condition forced true: the original's Where read the drawn c, false, where the
    # then branch runs only where c is true). The wrong Where(...) -> Sigmoid(x) is still refused
    where = "n = Neg(x)\n                s = Sigmoid(x)\n                zt = Where(c, n, s)"
    m = parse_model(IF_AT_5000.replace("COND", "c = Squeeze(c1)").replace("zt = THEN(x)", where)
                    .replace("ELSE", "Sigmoid"))
    v = verify(m, _if("c = Squeeze(c1)", "Neg", "Sigmoid"))
    assert v.status == "passed" and "forced true and false" in v.detail, v.detail
    assert verify(m, _if("c = Squeeze(c1)", "Sigmoid", "Sigmoid")).status == "failed"
