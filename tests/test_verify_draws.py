"""Verification's draws reach the values where a wrong program differs (eqsat/verification/feeds.py and
the edge cases of eqsat/verification/__init__.py): each test pairs a model with a program that is wrong
only on values the draws once never held, and checks that verification refuses it and passes the
original against itself."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest

from eqsat.verification import verify
from eqsat.verification.feeds import Feeds

from .conftest import parse_model

H18 = '<ir_version: 8, opset_import: ["" : 18]>\n'


def _refused_and_passed(right: str, wrong: str, why: str):
    m = parse_model(H18 + right)
    v = verify(m, parse_model(H18 + wrong))
    assert v.status == "failed" and why in v.detail, v.detail
    ok = verify(m, m)
    assert ok.status == "passed", ok.detail
    return v


def test_a_scalar_condition_takes_both_values():
    # a scalar bool drew False at seed 0 and at seed 1 (the edge cases' seed): Where(c, a, b)
    # taken for b passed every run
    _refused_and_passed("g (bool c, float[2, 3] a, float[2, 3] b) => (float[2, 3] y) { y = Where(c, a, b) }",
                        "g (bool c, float[2, 3] a, float[2, 3] b) => (float[2, 3] y) { y = Identity(b) }",
                        "booleans and masks negated")


@pytest.mark.parametrize("n, name, value, taken, why", [
    # a mask (by its name) is 0 or 1: a scalar one drew 1 in every run, so Where(mask == 1, -x, x)
    # taken for -x passed
    (1, "mask", 1, "Neg(x)", "booleans and masks negated"),
    # a general integer is drawn in [-9, 9]: a scalar one was 0 about one draw in 19, and its
    # extremes are the type's minimum and maximum, so Where(n == 0, -x, x) taken for x passed
    (3, "n", 0, "Identity(x)", "zeros among the floats and integers"),
], ids=["mask", "general"])
def test_a_scalar_integer_takes_the_value_a_where_tests(n, name, value, taken, why):
    sig = f"g (float[{n}] x, int64 {name}) => (float[{n}] y)"
    _refused_and_passed(f"""{sig} {{
                               z = Constant <value = int64 {{{value}}}> ()
                               c = Equal({name}, z)
                               m = Neg(x)
                               y = Where(c, m, x) }}""",
                        f"{sig} {{ y = {taken} }}", why)


@pytest.mark.parametrize("op", [
    ("float[4, 5] x, int64[4, 5] i", "float[4, 5] y", "y = GatherElements <axis = 1> (x, {i})"),
    ("float[4, 5] x, int64[1, 5] i, float[1, 5] u", "float[4, 5] y", "y = ScatterElements <axis = 0> (x, {i}, u)"),
    ("int64[6] i", "float[6, 4] y", """d = Constant <value = int64 {4}> ()
                                        v = Constant <value = float[2] {0.0, 1.0}> ()
                                        y = OneHot({i}, d, v)"""),
])
def test_an_index_takes_negative_values_where_its_op_allows_them(op):
    # GatherElements, ScatterElements and OneHot take indices in [-n, n); drawn in [0, n)
    # (OneHot's in [0, 2), its depth unread), |i| taken for i passed
    ins, outs, body = op
    right = f"g ({ins}) => ({outs}) {{ {body.replace('{i}', 'i')} }}"
    wrong = f"g ({ins}) => ({outs}) {{ a = Abs(i)\n {body.replace('{i}', 'a')} }}"
    v = _refused_and_passed(right, wrong, "")
    assert v.inputs.startswith("i an index in [-"), v.inputs  # |i| is out of range or another element


@pytest.mark.parametrize("op", [
    ("float[20, 3] x, int64[6, 1] i", "float[6, 3] y", "y = GatherND(x, {i})"),
    ("float[2, 20, 3] x, int64[2, 6, 1] i", "float[2, 6, 3] y", "y = GatherND <batch_dims = 1> (x, {i})"),
    ("float[20, 3] x, int64[6, 1] i, float[6, 3] u", "float[20, 3] y", "y = ScatterND(x, {i}, u)"),
    ("float[20, 3] x, int64[6, 1] i, float[6, 3] u", "float[20, 3] y",
     "y = ScatterND <reduction = \"add\"> (x, {i}, u)"),
], ids=["gathernd", "gathernd-batch-dims", "scatternd", "scatternd-add"])
def test_an_nd_index_spans_its_table_from_the_end_too(op):
    # GatherND's and ScatterND's indices were drawn as sizes (0 to 3, one -1): Min(i, 3) taken for
    # i passed on a table of 20 rows; they take [-n, n) along the axes they index (after batch_dims)
    ins, outs, body = op
    right = f"g ({ins}) => ({outs}) {{ {body.replace('{i}', 'i')} }}"
    wrong = f"""g ({ins}) => ({outs}) {{ t = Constant <value = int64 {{3}}> ()
                                          a = Min(i, t)
                                          {body.replace('{i}', 'a')} }}"""
    v = _refused_and_passed(right, wrong, "")
    assert v.inputs.startswith("i an index in [-20, 20)"), v.inputs


def test_a_one_hot_index_spans_the_depth():
    m = parse_model(H18 + """g (int64[6] i) => (float[6, 4] y) {
                                 d = Constant <value = int64 {4}> ()
                                 v = Constant <value = float[2] {0.0, 1.0}> ()
                                 y = OneHot(i, d, v) }""")
    assert "i an index in [-4, 4)" in Feeds(m).describe()


@pytest.mark.parametrize("op", [
    ("float[6] x, int64[1] s", "float[n] y", "e = Constant <value = int64[1] {100}> ()\n y = Slice(x, {s}, e)"),
    ("float[2, 3] x, int64[1] s", "float[a, b, c] y", "y = Unsqueeze(x, {s})"),
    ("float[2, 3, 4] x, int64[1] s", "float[a, b] y", "y = ReduceSum <keepdims = 0> (x, {s})"),
])
def test_a_size_takes_negative_values(op):
    # starts, axes and Reshape targets may be negative (from the end; -1 infers a size); sizes
    # drawn in {0, 1} and {2, 3}: |s| taken for s passed
    ins, outs, body = op
    right = f"g ({ins}) => ({outs}) {{ {body.replace('{s}', 's')} }}"
    wrong = f"g ({ins}) => ({outs}) {{ a = Abs(s)\n {body.replace('{s}', 'a')} }}"
    _refused_and_passed(right, wrong, "sizes of -1")


def test_a_symbolic_dimension_takes_size_1():
    # Squeeze without axes drops every dimension of size 1: taken for Identity, right for n = 0, 2, 3, ...
    _refused_and_passed("g (float[n, 3] x) => (float[m, 3] y) { y = Squeeze(x) }",
                        "g (float[n, 3] x) => (float[m, 3] y) { y = Identity(x) }",
                        "symbolic sizes of 1")


def test_an_unsound_user_rule_on_a_scalar_condition_is_not_written(tmp_path):
    # eqsat optimize --rules with (rewrite (Where c a b) b) wrote the model with exit 0
    src, out, rules = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "bad.egg"
    onnx.save(parse_model(H18 + "g (bool c, float[2, 3] a, float[2, 3] b) => (float[2, 3] y) { y = Where(c, a, b) }"),
              str(src))
    rules.write_text('(rewrite (Where c a b) b :ruleset fusion :name "bad-where")\n')
    proc = subprocess.run([sys.executable, "-m", "eqsat", "optimize", str(src), "-o", str(out), "-q",
                           "--rules", str(rules)], capture_output=True, text=True)
    assert proc.returncode == 1 and not out.exists(), proc.stderr
    assert "(on booleans and masks negated; seed 0)" in proc.stderr, proc.stderr


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8"])
def test_a_mask_takes_values_beyond_0_and_1(dtype):
    # masks (attention_mask by its name) were drawn 0 or 1, negated 1 - m: an unsound user rule
    # that took Min(mask, 1) for the mask was written with exit 0; the original runs on any mask
    sig = f"g (float[2, 6] x, {dtype}[2, 6] attention_mask) => (float[2, 6] y)"
    _refused_and_passed(f"""{sig} {{ one = Constant <value = {dtype} {{1}}> ()
                                     c = Min(attention_mask, one)
                                     f = Cast <to = 1> (c)
                                     y = Mul(x, f) }}""",
                        f"{sig} {{ f = Cast <to = 1> (attention_mask)\n y = Mul(x, f) }}", "masks beyond 0 and 1")


def test_the_negated_draw_keeps_the_random_draws_integers():
    m = parse_model(H18 + "g (bool[4] c, int64[4] mask, int64[4] n) => (int64[4] y) { y = Add(mask, n) }")
    f = Feeds(m)
    a = f.draw(None, 0)
    b = f.with_flags_negated(a)
    assert np.array_equal(b["c"], ~a["c"]) and np.array_equal(b["mask"], 1 - a["mask"])
    assert np.array_equal(b["n"], a["n"])


def test_a_symbolic_dimension_takes_size_1_alone_where_all_at_1_do_not_run():
    # a 3-wide convolution over m does not take m = 1; n = 1 alone still shows the Squeeze
    conv = "k = Constant <value = float[1, 1, 3] {1.0, 2.0, 1.0}> ()\n z = Conv(w, k)"
    sig = "g (float[n, 3] x, float[1, 1, m] w) => (float[a, 3] y, float[1, 1, b] z)"
    right = f"{sig} {{ y = Squeeze(x)\n {conv} }}"
    _refused_and_passed(right, f"{sig} {{ y = Identity(x)\n {conv} }}", "on n=1 (symbolic sizes n=1, m=3)")
    m = parse_model(H18 + right)
    ok = verify(m, m)
    assert "symbolic size n=0, n=1; not on symbolic size m=0, m=1 (the original does not run on them)" in ok.detail, \
        ok.detail


@pytest.mark.parametrize("dtype", ["float", "float16", "double"])
def test_a_rewrite_wrong_only_between_scaled_and_large_values_fails(dtype):
    # Clip(x, -1000, 1000) taken for x: floats times 100 stay within 1000, and the large case
    # (+-2e15; none in float16) compares finiteness alone
    code = {"float": 1, "float16": 10, "double": 11}[dtype]
    clip = f"""l0 = Constant <value = float {{-1000.0}}> ()
               h0 = Constant <value = float {{1000.0}}> ()
               lo = Cast <to = {code}> (l0)
               hi = Cast <to = {code}> (h0)"""
    sig = f"g ({dtype}[2, 8] x) => ({dtype}[2, 8] y)"
    _refused_and_passed(f"{sig} {{ {clip}\n y = Clip(x, lo, hi) }}", f"{sig} {{ y = Identity(x) }}",
                        "on floats times 10000")


def test_edge_cases_fall_back_to_the_random_draw_that_ran():
    # s drew [1] at seed 0 (Expand of x[6] runs) and [0] at seed 1, the edge cases' seed, which
    # the original refuses: every edge case was left out, and Clip(x, -10, 10) taken for x passed
    sig = "g (float[6] x, int64[1] s) => (float[n] y)"
    clip = """lo = Constant <value = float {-10.0}> ()
              hi = Constant <value = float {10.0}> ()
              c = Clip(x, lo, hi)"""
    _refused_and_passed(f"{sig} {{ {clip}\n y = Expand(c, s) }}", f"{sig} {{ y = Expand(x, s) }}",
                        "on floats times 100; seed 0")


def test_a_scalar_overridable_input_is_fed_other_values():
    # a 0-d default times a factor became a numpy scalar, which onnxruntime does not take: the
    # run with other values was dropped ("only their defaults") for every overridable input
    m = parse_model(H18 + "g (float[3] x, float w) => (float[3] y) <float w = {2.0}> { y = Mul(x, w) }")
    baked = parse_model(H18 + """g (float[3] x, float w) => (float[3] y) <float w = {2.0}, float c = {2.0}> {
                                     y = Mul(x, c) }""")
    v = verify(m, m)
    assert v.status == "passed" and v.runs == 2 and "w its default and scaled by [0.5, 1.5]" in v.inputs, v.detail
    v = verify(m, baked)  # the default baked in: right for the default only
    assert v.status == "failed" and v.runs == 2, v.detail


@pytest.mark.parametrize("eps", ["0.0", "1e-4"])
def test_an_epsilon_changed_under_a_square_root_fails_on_small_floats(eps):
    # LayerNormalization's epsilon 1e-5 taken for 0 or 1e-4: on standard normal values the
    # variance (about 1) hides it within the tolerance
    ln = "g (float[2, 16] x, float[16] g0) => (float[2, 16] y) {{ y = LayerNormalization <epsilon = {e}> (x, g0) }}"
    _refused_and_passed(ln.format(e="1e-5"), ln.format(e=eps), "on floats times 0.0001")


def test_floats_times_10000_allow_rounding_relative_to_the_outputs_largest_magnitude():
    # ResNet-50's logits reach 8e6 there, and one of -44 moved by 2.5 to 3.3 (about 3 float32
    # steps of 8e6): rounding relative to the largest terms, beyond the random draw's
    # differences (4e-5) times 10 x 10000; a Clip's 1000 taken for 3455 is no rounding
    from eqsat.verification import compare
    from eqsat.verification.feeds import SCALED_FAR

    e, a = np.array([8e6, -44.0], np.float32), np.array([8e6, -41.25], np.float32)
    assert compare({"y": e}, {"y": a}, None, None, scaled=SCALED_FAR, noise={"y": 4e-5}) == []
    # the floats times 100 have the same floor, at most what a nudge of the inputs moves the
    # original there: 2.75 off where the original moves by 0.5 is no rounding
    assert compare({"y": e}, {"y": a}, None, None, scaled=True, noise={"y": 4e-5},
                   sensitivity={"y": np.array([1e3, 0.5])}) != []
    clipped, kept = np.array([1000.0, -1000.0, 2.0], np.float32), np.array([3455.8, -1000.0, 2.0], np.float32)
    assert compare({"y": clipped}, {"y": kept}, None, None, scaled=SCALED_FAR, noise={"y": 0.0}) != []


def test_a_size_the_original_takes_only_beyond_0_and_1_is_drawn_so():
    # Reshape of 6 values to a size input ran on no draw of 0 or 1: verification was "not
    # possible" and eqsat optimize wrote Reshape(x, |s|) with exit 0; -1 (among sizes of 2 and 3) runs
    sig = "g (float[6] x, int64[1] s) => (float[n] y)"
    v = _refused_and_passed(f"{sig} {{ y = Reshape(x, s) }}", f"{sig} {{ a = Abs(s)\n y = Reshape(x, a) }}", "")
    assert v.inputs == "s a size, 2 or 3 with a -1", v.inputs


def test_a_size_takes_values_beyond_3():
    # sizes were drawn 0 to 3 (and -1): TopK(x, Min(k, 3)) taken for TopK(x, k) passed
    sig = "g (float[2, 10] x, int64[1] k) => (float[2, n] y, int64[2, n] i)"
    _refused_and_passed(f"{sig} {{ y, i = TopK(x, k) }}",
                        f"""{sig} {{ t = Constant <value = int64[1] {{3}}> ()
                                     m = Min(k, t)
                                     y, i = TopK(x, m) }}""",
                        "sizes of 4 to 9")
