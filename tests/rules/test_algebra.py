"""rules/algebra.egg: scalar arithmetic folded inside egglog, neutral elements, uniform
tensors and idempotent unary ops. Each rule fires on a minimal model with onnxruntime's
outputs unchanged, and a near-miss model (one guard violated, named in a comment) shows
where it must not fire."""

from __future__ import annotations

import numpy as np

from ..conftest import assert_same_outputs, assert_verified, check_rewrite, optimized, parse_model

H = '<ir_version: 8, opset_import: ["" : 18]>'


# ---- scalar arithmetic


def test_double_scalar_arithmetic_folds_inside_egglog():
    m = parse_model(H + """
        agraph (double[3] x) => (double[3] y) {
            a = Constant <value = double {2.0}> ()
            b = Constant <value = double {1.5}> ()
            c = Constant <value = double {0.5}> ()
            d = Constant <value = double {4.0}> ()
            s = Add(a, b)
            t = Sub(s, c)
            u = Mul(t, d)
            v = Div(u, a)
            y = Mul(x, v)
        }""")
    rules = ["fold-scalar-add", "fold-scalar-sub", "fold-scalar-mul", "fold-scalar-div"]
    check_rewrite(m, ["Mul"], fired=rules)


def test_scalar_folds_that_would_change_the_value_stay_out_of_egglog():
    m = parse_model(H + """
        agraph (double[3] x, float[3] f) => (double[1] y, double[3] z, float[3] g) {
            a = Constant <value = double {2.0}> ()
            b1 = Constant <value = double[1] {1.5}> ()
            s = Add(a, b1)
            y = Mul(x, s)
            zero = Constant <value = double {0.0}> ()
            q = Div(a, zero)
            z = Mul(x, q)
            fa = Constant <value = float {2.0}> ()
            fb = Constant <value = float {1.5}> ()
            fs = Sub(fa, fb)
            g = Mul(f, fs)
        }""")
    # s: shapes [] and [1] (the sum is a [1]); q: a zero divisor; fs: float32, which egglog's
    # f64 would not round as the runtime does; the oracle folds each in its own dtype
    res = check_rewrite(m, ["Mul", "Mul", "Mul"],
                        not_fired=["fold-scalar-add", "fold-scalar-div", "fold-scalar-sub"],
                        feeds={"x": np.array([1.0, -1.0, 0.0]), "f": np.ones(3, np.float32)})
    assert res.report["oracle"]["folded"] == 3


def test_int64_scalar_arithmetic_folds_inside_egglog():
    m = parse_model(H + """
        agraph (int64[3] x) => (int64[3] y) {
            a = Constant <value = int64 {2}> ()
            b = Constant <value = int64 {5}> ()
            c = Constant <value = int64 {3}> ()
            s = Add(a, b)
            t = Sub(s, c)
            u = Mul(t, b)
            y = Add(x, u)
        }""")
    check_rewrite(m, ["Add"], fired=["fold-int-add", "fold-int-sub", "fold-int-mul"])


def test_int64_scalars_that_could_overflow_are_left_to_the_oracle():
    # the magnitude guards, at their bounds: 2^62 for + and -, 2^31 for *
    m = parse_model(H + """
        agraph (int64[3] x) => (int64[3] y) {
            big = Constant <value = int64 {4611686018427387904}> ()
            nbig = Constant <value = int64 {-4611686018427387904}> ()
            m = Constant <value = int64 {2147483648}> ()
            one = Constant <value = int64 {1}> ()
            s = Add(big, one)
            t = Sub(nbig, one)
            u = Mul(m, one)
            a1 = Add(x, s)
            a2 = Add(a1, t)
            y = Add(a2, u)
        }""")
    check_rewrite(m, ["Add"] * 3, not_fired=["fold-int-add", "fold-int-sub", "fold-int-mul"])


def test_scalar_arithmetic_folds_and_neutral_elements_go():
    m = parse_model(H + """
        agraph (float[3] x) => (float[3] y) {
            a = Constant <value = float {2.0}> ()
            b = Constant <value = float {0.5}> ()
            one = Mul(a, b)
            z = Constant <value = float {0.0}> ()
            p = Mul(x, one)
            y = Add(p, z)
        }""")
    # float32 scalars fold in the oracle, in float32 (the egglog rules fold doubles only)
    check_rewrite(m, ["Identity"], fired=["mul-one", "add-splat-zero"], not_fired=["fold-scalar-mul"])
    check_rewrite(parse_model(H + """
        agraph (double[3] x) => (double[3] y) {
            a = Constant <value = double {2.0}> ()
            b = Constant <value = double {0.5}> ()
            one = Mul(a, b)
            y = Mul(x, one)
        }"""), ["Identity"], fired=["fold-scalar-mul", "mul-one"])


def test_a_chain_of_scalar_folds_rounds_each_step_to_the_dtype(dtype="float", one="1.0", big="100000000.0"):
    # (1e8 + 1) - 1e8 is 0 in float32 as onnxruntime computes it; folded in f64 it was 1, and
    # x * c then became x: exit 0 with other outputs wherever the Where picked x * c
    m = parse_model(H + f"""
        agraph ({dtype}[4] x) => ({dtype}[4] y) {{
            b = Constant <value = {dtype} {{{big}}}> ()
            o = Constant <value = {dtype} {{{one}}}> ()
            s = Add(b, o)
            c = Sub(s, b)
            t = Constant <value = {dtype} {{1000.0}}> ()
            g = Greater(x, t)
            p = Mul(x, c)
            y = Where(g, p, x)
        }}""")
    x = np.array([0.5, 2e4, -3.0, 5e4], np.float32)
    res = optimized(m)
    assert_same_outputs(m, res.model, feeds={"x": x})  # exactly
    assert_verified(m, res)


# ---- neutral elements


def test_neutral_elements_on_either_side_go():
    m = parse_model(H + """
        agraph (float[2, 3] x) => (float[2, 3] y) {
            one = Constant <value = float {1.0}> ()
            zero = Constant <value = float[1] {0.0}> ()
            a = Mul(one, x)
            b = Div(a, one)
            y = Sub(b, zero)
        }""")
    check_rewrite(m, ["Identity"], fired=["mul-one-left", "div-one", "sub-zero"])


def test_neutral_elements_that_broadcast_the_value_stay():
    # each operand [1, 1] turns x [3] into a [1, 3]: the shape guard
    m = parse_model(H + """
        agraph (float[3] x) => (float[1, 3] y, float[1, 3] a, float[1, 3] b, float[1, 3] c) {
            one = Constant <value = float[1, 1] {1.0}> ()
            zero = Constant <value = float[1, 1] {0.0}> ()
            y = Mul(x, one)
            a = Mul(one, x)
            b = Div(x, one)
            c = Sub(x, zero)
        }""")
    check_rewrite(m, ["Mul", "Mul", "Div", "Sub"],
                  not_fired=["mul-one", "mul-one-left", "div-one", "sub-zero"])


# ---- uniform tensors

# The all-zero mask that exporters build when there is none: Where(Expand(trues), 0, lowest)
# over a symbolic batch, so that no folding can see it is zeros; added to the scores.
ZERO_MASK = """
            sh = Shape(x)
            i0 = Constant <value = int64[1] {0}> ()
            i1 = Constant <value = int64[1] {1}> ()
            b = Slice(sh, i0, i1)
            rest = Constant <value = int64[3] {1, 3, 3}> ()
            target = Concat <axis = 0> (b, rest)
            big = Expand(keep, target)
            zero = Constant <value = float {0.0}> ()
            low = Constant <value = float {-3.4028234663852886e+38}> ()
            mask = Where(big, zero, low)
            y = Add(x, mask)"""


def test_adding_an_expanded_all_zero_mask_goes():
    m = parse_model(H + """
        agraph (float[batch, 2, 3, 3] x) => (float[batch, 2, 3, 3] y) <bool[1, 1, 3, 1] keep = {1, 1, 1}> {"""
                    + ZERO_MASK + "\n        }")
    res = check_rewrite(m, ["Identity"], fired=["all-true-expand", "splat-where", "add-splat-zero"], dims={"batch": 2})
    assert not res.model.graph.initializer


def test_a_mask_with_one_false_stays():
    # one key masked: the Where is no splat, the Add stays
    m = parse_model(H + """
        agraph (float[batch, 2, 3, 3] x) => (float[batch, 2, 3, 3] y) <bool[1, 1, 3, 1] keep = {1, 0, 1}> {"""
                    + ZERO_MASK + "\n        }")
    check_rewrite(m, ["Add", "Concat", "Expand", "Shape", "Slice", "Where"],
                  fired=["splat-scalar"], not_fired=["all-true-expand", "splat-where", "add-splat-zero"],
                  dims={"batch": 2})


def test_adding_zeros_on_either_side_goes():
    m = parse_model(H + """
        agraph (float[2, 3] w) => (float[2, 3] y, float[2, 3] v) <float[3] z3 = {0.0, 0.0, 0.0}> {
            y = Add(w, z3)
            v = Add(z3, w)
        }""")
    check_rewrite(m, ["Identity", "Identity"], fired=["add-splat-zero", "add-splat-zero-left"])


def test_adding_zeros_that_broadcast_the_value_stays():
    # x [3] + zeros [2, 3] is a [2, 3]: the shape guard, on either side
    m = parse_model(H + """
        agraph (float[3] x) => (float[2, 3] y, float[2, 3] v)
            <float[2, 3] z = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0}> {
            y = Add(x, z)
            v = Add(z, x)
        }""")
    check_rewrite(m, ["Add", "Add"], not_fired=["add-splat-zero", "add-splat-zero-left"])


def test_where_with_an_all_true_condition_is_its_first_operand():
    m = parse_model(H + """
        agraph (float[2, 3] a, float[2, 3] b) => (float[2, 3] y) <bool[2, 3] c = {1, 1, 1, 1, 1, 1}> {
            y = Where(c, a, b)
        }""")
    check_rewrite(m, ["Identity"], fired=["where-all-true"])


def test_where_that_broadcasts_or_has_a_false_stays():
    # y: the condition is all true but a [3] broadcasts to [2, 3] (the shape guard); z: one
    # false (the all-true guard)
    m = parse_model(H + """
        agraph (float[3] a, float[2, 3] b) => (float[2, 3] y, float[2, 3] z)
            <bool[2, 3] c = {1, 1, 1, 1, 1, 1}, bool[2, 3] k = {1, 1, 1, 1, 0, 1}> {
            y = Where(c, a, b)
            z = Where(k, b, b)
        }""")
    check_rewrite(m, ["Where", "Where"], not_fired=["where-all-true"])


# ---- unary ops

def test_idempotent_unary_ops_collapse():
    m = parse_model(H + """
        agraph (float[2, 5] x, bool[3] c) => (float[2, 5] r, float[2, 5] a, float[2, 5] f, float[2, 5] g,
                                            bool[3] d, float[2, 5] v) {
            r1 = Relu(x)
            r = Relu(r1)
            n = Neg(x)
            a1 = Abs(n)
            a2 = Abs(a1)
            a = Relu(a2)
            f1 = Ceil(x)
            f2 = Ceil(f1)
            f = Floor(f2)
            g1 = Floor(x)
            g2 = Floor(g1)
            g = Ceil(g2)
            d1 = Not(c)
            d = Not(d1)
            n2 = Neg(n)
            v = Add(n2, x)
        }""")
    # d = c needs an Identity; v = -(-x) + x = x + x
    check_rewrite(m, ["Relu", "Abs", "Ceil", "Floor", "Identity", "Add"],
                  fired=["relu-relu", "relu-abs", "abs-abs", "abs-neg", "floor-floor", "ceil-ceil", "floor-ceil",
                         "ceil-floor", "not-not", "neg-neg"],
                  feeds={"x": np.array([[np.nan, -0.0, 0.0, np.inf, -np.inf], [-2.5, 2.5, -1.5, 0.49, -0.51]],
                                       np.float32), "c": np.array([True, False, True])}, rtol=0, atol=0)


def test_relu_of_a_negation_is_not_an_abs():
    # Relu(Neg(x)) keeps only the negative part: no rule may treat it like Abs
    m = parse_model(H + """
        agraph (float[2, 5] x) => (float[2, 5] y) {
            n = Neg(x)
            y = Relu(n)
        }""")
    check_rewrite(m, ["Neg", "Relu"], not_fired=["relu-abs", "abs-neg"])


def test_relu_of_a_signed_integer_abs_stays():
    # Abs wraps a signed integer's minimum to itself (|-128| is -128 in int8), which Relu makes
    # 0: Relu(Abs(x)) is Abs(x) for floats only
    for t, info in (("int8", np.iinfo(np.int8)), ("int32", np.iinfo(np.int32))):
        m = parse_model(H + f"""
            agraph ({t}[2, 3] x) => ({t}[2, 3] y) {{
                a = Abs(x)
                y = Relu(a)
            }}""")
        x = np.array([[info.min, info.min + 1, -1], [0, 1, info.max]], info.dtype)
        check_rewrite(m, ["Abs", "Relu"], not_fired=["relu-abs"], feeds={"x": x}, rtol=0, atol=0)


def test_unary_pairs_that_do_not_cancel_stay():
    # the outer op of each rule over another inner op, for which the identity is false:
    # -|x| is not x, not |x|; Relu(LeakyRelu(x)) is not LeakyRelu(x); |Relu(x)| is not |x|;
    # |Floor(x)| is not Floor(x); Floor(|x|) and Ceil(|x|) are not |x|; Not(c and d) is not c and d
    m = parse_model(H + """
        agraph (float[2, 5] x, bool[3] c, bool[3] e)
            => (float[2, 5] n, float[2, 5] r, float[2, 5] a, float[2, 5] b, float[2, 5] f,
                float[2, 5] g, bool[3] d) {
            ax = Abs(x)
            n = Neg(ax)
            l = LeakyRelu <alpha = 0.1> (x)
            r = Relu(l)
            rx = Relu(x)
            a = Abs(rx)
            fx = Floor(x)
            b = Abs(fx)
            f = Floor(ax)
            g = Ceil(ax)
            ce = And(c, e)
            d = Not(ce)
        }""")
    x = np.array([[np.nan, -0.0, 0.0, np.inf, -np.inf], [-2.5, 2.5, -1.5, 0.49, -0.51]], np.float32)
    feeds = {"x": x, "c": np.array([True, False, True]), "e": np.array([True, True, False])}
    expect = ["Abs"] * 3 + ["Neg", "LeakyRelu"] + ["Relu", "Floor"] * 2 + ["Ceil", "And", "Not"]
    check_rewrite(m, expect,
                  not_fired=["neg-neg", "abs-neg", "relu-relu", "relu-abs", "abs-abs",
                             "floor-floor", "floor-ceil", "ceil-ceil", "ceil-floor", "not-not"],
                  feeds=feeds, rtol=0, atol=0)
