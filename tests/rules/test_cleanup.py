"""rules/cleanup.egg and rules/algebra.egg: each rule fires on a minimal model with the
outputs unchanged, and does not fire where it must not."""

from __future__ import annotations

import numpy as np

from ..conftest import assert_same_outputs, check_rewrite, optimized, parse_model

H = '<ir_version: 8, opset_import: ["" : 18]>'


def test_identity_and_dropout_disappear():
    m = parse_model(H + """
        agraph (float[2, 3] x) => (float[2, 3] y) {
            a = Identity(x)
            b = Dropout(a)
            y = Relu(b)
        }""")
    check_rewrite(m, ["Relu"], fired=["identity-elim", "dropout-elim"])


def test_dropout_in_training_mode_stays():
    m = parse_model(H + """
        agraph (float[2, 3] x) => (float[2, 3] y) {
            r = Constant <value = float {0.0}> ()
            t = Constant <value = bool {1}> ()
            y = Dropout(x, r, t)
        }""")
    check_rewrite(m, ["Dropout"], not_fired=["dropout-elim", "dropout-elim-not-training"])


def test_cast_to_own_type_disappears_but_a_real_cast_stays():
    m = parse_model(H + """
        agraph (float[4] x) => (float[4] y, float16[4] z) {
            a = Cast <to = 1> (x)
            y = Relu(a)
            z = Cast <to = 10> (x)
        }""")
    check_rewrite(m, ["Relu", "Cast"], fired=["cast-same-type"])


def test_noop_reshape_expand_slice_pad():
    m = parse_model(H + """
        agraph (float[batch, 8] x) => (float[batch, 8] y) {
            s = Shape(x)
            a = Reshape(x, s)
            b = Expand(a, s)
            st = Constant <value = int64[1] {0}> ()
            en = Constant <value = int64[1] {8}> ()
            ax = Constant <value = int64[1] {1}> ()
            c = Slice(b, st, en, ax)
            p = Constant <value = int64[4] {0, 0, 0, 0}> ()
            d = Pad(c, p)
            y = Relu(d)
        }""")
    check_rewrite(m, ["Relu"], fired=["reshape-noop", "expand-noop", "slice-noop", "pad-noop-2d"], dims={"batch": 3})


def test_slice_that_reverses_stays():
    m = parse_model(H + """
        agraph (float[4] x) => (float[4] y) {
            st = Constant <value = int64[1] {-1}> ()
            en = Constant <value = int64[1] {-100}> ()
            ax = Constant <value = int64[1] {0}> ()
            sp = Constant <value = int64[1] {-1}> ()
            y = Slice(x, st, en, ax, sp)
        }""")
    check_rewrite(m, ["Slice"], not_fired=["slice-noop", "slice-noop-step-1"])


def test_transposes_that_cancel_and_compose():
    m = parse_model(H + """
        agraph (float[2, 3, 4] x) => (float[2, 3, 4] y, float[4, 2, 3] z) {
            a = Transpose <perm = [0, 2, 1]> (x)
            y = Transpose <perm = [0, 2, 1]> (a)
            z = Transpose <perm = [1, 0, 2]> (a)
        }""")
    res = check_rewrite(m, ["Identity", "Transpose"], fired=["transpose-compose-3", "transpose-identity"])
    perm = [n for n in res.model.graph.node if n.op_type == "Transpose"][0].attribute[0].ints
    assert list(perm) == [2, 0, 1]


def test_reshape_reshape_and_squeeze_unsqueeze():
    m = parse_model(H + """
        agraph (float[2, 3, 4] x) => (float[6, 4] y, float[2, 3, 4] z) {
            s1 = Constant <value = int64[2] {3, 8}> ()
            s2 = Constant <value = int64[2] {6, 4}> ()
            a = Reshape(x, s1)
            y = Reshape(a, s2)
            ax = Constant <value = int64[1] {1}> ()
            u = Unsqueeze(x, ax)
            z = Squeeze(u, ax)
        }""")
    check_rewrite(m, ["Reshape", "Identity"], fired=["reshape-reshape", "squeeze-unsqueeze"])


def test_reshape_with_zero_after_reshape_keeps_both():
    # the second target copies dimension 0 from its input, which the first reshape changed
    m = parse_model(H + """
        agraph (float[2, 3, 4] x) => (float[6, 2, 2] y) {
            s1 = Constant <value = int64[2] {6, 4}> ()
            s2 = Constant <value = int64[3] {0, 2, 2}> ()
            a = Reshape(x, s1)
            y = Reshape(a, s2)
        }""")
    check_rewrite(m, ["Reshape", "Reshape"], not_fired=["reshape-reshape"])


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
    assert_same_outputs(m, optimized(m).model, feeds={"x": x})  # exactly


def test_multiply_by_one_that_broadcasts_stays():
    # x * ones([1, 1]) turns a [3] into a [1, 3]: not an identity
    m = parse_model(H + """
        agraph (float[3] x) => (float[1, 3] y) {
            one = Constant <value = float[1, 1] {1.0}> ()
            y = Mul(x, one)
        }""")
    check_rewrite(m, ["Mul"], not_fired=["mul-one"])


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


def test_adding_zeros_that_broadcast_the_value_stays():
    # x [3] + zeros [2, 3] is a [2, 3]: not an identity; x [2, 3] + zeros [3] is
    m = parse_model(H + """
        agraph (float[3] x, float[2, 3] w) => (float[2, 3] y, float[2, 3] v) <float[2, 3] z = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0},
                                                                              float[3] z3 = {0.0, 0.0, 0.0}> {
            y = Add(x, z)
            v = Add(z3, w)
        }""")
    res = check_rewrite(m, ["Add", "Identity"], fired=["add-splat-zero-left"])
    assert [n.op_type for n in res.model.graph.node if n.output[0] == "y"] == ["Add"]


def test_where_with_an_all_true_condition_is_its_first_operand():
    m = parse_model(H + """
        agraph (float[2, 3] a, float[2, 3] b) => (float[2, 3] y) <bool[2, 3] c = {1, 1, 1, 1, 1, 1}> {
            y = Where(c, a, b)
        }""")
    check_rewrite(m, ["Identity"], fired=["where-all-true"])


def test_shape_chain_folds_when_static_and_becomes_a_literal_target_when_symbolic():
    m = parse_model(H + """
        agraph (float[batch, 4, 6] x, float[2, 4, 6] w) => (float[batch, 4, 2, 3] y, float[2, 24] z) {
            s = Shape(x)
            i0 = Constant <value = int64 {0}> ()
            b = Gather(s, i0)
            ax = Constant <value = int64[1] {0}> ()
            bu = Unsqueeze(b, ax)
            rest = Constant <value = int64[3] {4, 2, 3}> ()
            t = Concat <axis = 0> (bu, rest)
            y = Reshape(x, t)
            sw = Shape(w)
            w0 = Gather(sw, i0)
            w0u = Unsqueeze(w0, ax)
            k = Constant <value = int64[1] {24}> ()
            t2 = Concat <axis = 0> (w0u, k)
            z = Reshape(w, t2)
        }""")
    res = check_rewrite(m, ["Reshape", "Reshape"], dims={"batch": 5})
    assert res.report["oracle"]["reshape_targets_rewritten"] >= 1
    assert res.report["oracle"]["folded"] >= 1


def test_if_with_constant_condition_is_inlined_and_a_runtime_condition_is_not():
    m = parse_model(H + """
        agraph (float[3] x, bool c) => (float[3] y, float[3] z) {
            k = Constant <value = bool {0}> ()
            y = If(k) <
                then_branch = g1 () => (float[3] a) { a = Relu(x) },
                else_branch = g2 () => (float[3] b) { b = Neg(x) }
            >
            z = If(c) <
                then_branch = g3 () => (float[3] a3) { a3 = Relu(x) },
                else_branch = g4 () => (float[3] b4) { b4 = Neg(x) }
            >
        }""")
    import numpy as np

    res = check_rewrite(m, ["Neg", "If"], feeds={"x": np.array([1, -2, 3], np.float32), "c": np.array(True)})
    assert res.report["oracle"]["if_inlined"] == 1


def test_idempotent_unary_ops_collapse():
    m = parse_model(H + """
        agraph (float[2, 5] x, bool[3] c) => (float[2, 5] r, float[2, 5] a, float[2, 5] f, float[2, 5] g,
                                            bool[3] d) {
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
        }""")
    check_rewrite(m, ["Relu", "Abs", "Ceil", "Floor", "Identity"],  # d = c needs an Identity
                  fired=["relu-relu", "relu-abs", "abs-abs", "abs-neg", "floor-floor", "ceil-ceil", "floor-ceil",
                         "ceil-floor", "not-not"],
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
