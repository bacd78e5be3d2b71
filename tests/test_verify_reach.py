"""Parts of a model that verification's runs do not reach, or reach with too few values: an
unsound rewrite there must not be written with exit 0. Each test crafts such a place, has a
user's unsound rule file rewrite it, and checks that `eqsat optimize` either refuses the
program or keeps the place as it was (the written model gives the original's outputs on
inputs that reach it, under onnxruntime)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from .conftest import assert_refused, assert_refused_or_right, parse_model
from .test_shapes import CEIL_SLICE

BAD_SQUARE = '(ruleset bad)\n; Mul(x, x) -> x, unsound\n(rewrite (Mul x x) x :ruleset bad :name "bad-square")\n'


def _outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _never_written_wrong(capsys, tmp_path, model, rules, feeds, *args):
    """`eqsat optimize --rules` refuses, or what it writes gives the original's outputs on `feeds`
    (inputs that reach the place the rule rewrote wrongly)."""
    def right(out: onnx.ModelProto) -> None:
        onnx.checker.check_model(out)
        for a, b in zip(_outputs(model, feeds), _outputs(out, feeds), strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg="written with exit 0")

    return assert_refused_or_right(capsys, tmp_path, model, right, *args, rules=rules)


# ---- subgraphs whose verification as a model of their own is not possible


def test_a_branch_whose_own_verification_is_not_possible_is_kept(capsys, tmp_path):
    # the then branch runs only where i == 5000 (the whole model's draws give i in [-9, 9] and
    # the type's extremes), and reshapes the outer x (35 values) to the outer s = Shape(y),
    # [5, 7]: as a model of its own, s is a size input drawn 0, 1, 2, 3 or -1, none of which
    # takes 35 values, so the branch's own verification was "not possible", and that kept the
    # optimized branch: a rule file's x * x -> x there was written with exit 0 (y = x, off by
    # up to 1190 for x = 1..35)
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[35] x, float[5, 7] y, int64[1] i) => (float[35] z) {
            s = Shape(y)
            s35 = Shape(x)
            k = Constant <value = int64[1] {5000}> ()
            c1 = Equal(i, k)
            c = Squeeze(c1)
            z = If(c) <then_branch = t () => (float[35] zt) {
                    r = Reshape(x, s)
                    q = Mul(r, r)
                    zt = Reshape(q, s35)
                }, else_branch = e () => (float[35] ze) {
                    ze = Identity(x)
                }>
        }""")
    feeds = {"x": np.arange(1, 36, dtype=np.float32), "y": np.zeros((5, 7), np.float32),
             "i": np.array([5000], np.int64)}
    out = _never_written_wrong(capsys, tmp_path, m, BAD_SQUARE, feeds)
    if out is not None:  # kept: the branch as it was
        then = next(a.g for a in out.graph.node[-1].attribute if a.name == "then_branch")
        assert [n.op_type for n in then.node] == ["Reshape", "Mul", "Reshape"]


# ---- symbolic sizes beyond the model's constants

SLICE_DROP = ('(ruleset bad)\n; Slice(x, ...) -> x, unsound\n'
              '(rewrite (Slice x a b c d) x :ruleset bad :name "bad-slice")\n')


def test_a_rewrite_wrong_only_beyond_a_constant_size_is_refused(capsys, tmp_path):
    # Slice(x, 0, 5) is x for every size of x up to 5: verification ran N = 2 and the edge
    # cases N = 0 and 1, so a rule file's Slice -> x was written with exit 0 (6 values where
    # the original gives 5 for N = 6). An edge run scales the free symbolic sizes beyond every
    # small integer constant's value
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[N] x) => (float[M] y) {
            s = Constant <value = int64[1] {0}> ()
            e = Constant <value = int64[1] {5}> ()
            y = Slice(x, s, e)
        }""")
    err = assert_refused(capsys, tmp_path, m, rules=SLICE_DROP)
    assert "symbolic sizes beyond the constants' values (symbolic sizes N=6)" in err, err


def test_the_run_beyond_the_constants_keeps_related_sizes_and_passes_a_right_program():
    # a KV cache's total = past + sequence holds after scaling: the original runs there, and the
    # model against itself passes on it
    from eqsat.verification import verify

    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[past] k, float[seq] x, float[total] mask) => (float[M] y) {
            c = Concat <axis = 0> (k, x)
            a = Add(c, mask)
            s = Constant <value = int64[1] {0}> ()
            e = Constant <value = int64[1] {20}> ()
            y = Slice(a, s, e)
        }""")
    v = verify(m, m)
    assert v.status == "passed" and "symbolic sizes beyond the constants' values" in v.edge_cases, v.detail
    assert "not on symbolic sizes beyond" not in v.edge_cases, v.edge_cases


# ---- inputs drawn alike


def test_string_inputs_are_not_all_the_same_string(capsys, tmp_path):
    # every string element was drawn "a": two string inputs were always equal, so a rule file's
    # Where(c, a, b) -> b on strings passed every run (with the booleans negated too) and was
    # written with exit 0
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (bool[3] c, string[3] x, string[3] s) => (string[3] y) { y = Where(c, x, s) }""")
    rules = '(ruleset bad)\n; Where(c, a, b) -> b, unsound\n(rewrite (Where c a b) b :ruleset bad :name "bad-where")\n'
    feeds = {"c": np.array([True, False, True]), "x": np.array(["p", "q", "r"], dtype=object),
             "s": np.array(["u", "v", "w"], dtype=object)}
    assert_refused(capsys, tmp_path, m, rules=rules)
    assert _outputs(m, feeds)[0].tolist() == ["p", "v", "r"]


def test_two_scalar_conditions_are_both_true_in_some_run(capsys, tmp_path):
    # two scalar booleans drew (False, True) at seed 0, (True, False) negated and (False,
    # False) at the edge cases' seed: never both true, so a rule file's Where(And(a, b), p, q)
    # -> q was written with exit 0 (x where the original gives -x)
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (bool c1, bool c2, float[3] x) => (float[3] y) {
            a = And(c1, c2)
            n = Neg(x)
            y = Where(a, n, x)
        }""")
    rules = ("(ruleset bad)\n; Where(And(a, b), p, q) -> q, unsound\n"
             '(rewrite (Where (And a b) p q) q :ruleset bad :name "bad-and")\n')
    feeds = {"c1": np.array(True), "c2": np.array(True), "x": np.array([1, 2, 3], np.float32)}
    _never_written_wrong(capsys, tmp_path, m, rules, feeds)


# ---- values only a branch that the draws do not take reads


CAPTURED = """
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[3] x, int64[1] i) => (float[3] z) {
        v = Mul(x, x)
        k = Constant <value = int64[1] {5000}> ()
        c1 = Equal(i, k)
        c = Squeeze(c1)
        z = If(c) <then_branch = t () => (float[3] zt) {
                zt = Neg(v)
            }, else_branch = e () => (float[3] ze) {
                ze = Identity(x)
            }>
    }"""


def test_a_main_graph_value_read_only_by_a_branch_not_taken_is_verified(capsys, tmp_path):
    # v = x * x is read only by the then branch, taken where i == 5000, which no draw gives;
    # the branch as a model of its own takes v as an input. A rule file's x * x -> x in the main
    # graph was written with exit 0 (the branch then read x: -x where the original gives -x * x)
    m = parse_model(CAPTURED)
    feeds = {"x": np.array([1, 2, 3], np.float32), "i": np.array([5000], np.int64)}
    err = assert_refused(capsys, tmp_path, m, rules=BAD_SQUARE)
    # the edge run with i at the 5000 it is compared with takes the branch before the forced conditions do
    assert "every If's condition forced true" in err or "inputs at the constants they are compared with" in err, err
    assert _outputs(m, feeds)[0].tolist() == [-1, -4, -9]


def test_forcing_the_conditions_passes_a_right_program_and_skips_what_the_original_refuses():
    from eqsat.verification import verify

    m = parse_model(CAPTURED)
    v = verify(m, m)
    assert v.status == "passed" and "every If's condition forced true and false" in v.edge_cases, v.detail
    # the then branch reshapes 6 values to [4]: the original runs only where it is not taken
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[6] x) => (float[4] z) {
            s = Constant <value = int64[1] {4}> ()
            mx = ReduceMax <keepdims = 0> (x)
            big = Constant <value = float {1000.0}> ()
            c = Greater(mx, big)
            z = If(c) <then_branch = t () => (float[4] zt) {
                    zt = Reshape(x, s)
                }, else_branch = e () => (float[4] ze) {
                    st = Constant <value = int64[1] {0}> ()
                    zs = Slice(x, st, s)
                    ze = Identity(zs)
                }>
        }""")
    v = verify(m, m)
    assert v.status == "passed", v.detail
    assert "not with every If's condition forced true (the original does not run so)" in v.edge_cases, v.edge_cases


# ---- float thresholds beyond the scaled runs


def test_a_threshold_between_the_scaled_and_the_large_floats_is_reached(capsys, tmp_path):
    # the floats times 10000 stay within about 4e4, and the run with +-2e15 among them compared
    # only where values are finite: Clip(x, -1e6, 1e6) taken for x (a rule file's) was written
    # with exit 0 (2e15 where the original gives 1e6). The large run compares finite values now
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[8] x) => (float[8] y) {
            lo = Constant <value = float {-1000000.0}> ()
            hi = Constant <value = float {1000000.0}> ()
            y = Clip(x, lo, hi)
        }""")
    rules = ("(ruleset bad)\n; Clip(x, lo, hi) -> x, unsound\n"
             '(rewrite (Clip x lo hi) x :ruleset bad :name "clip-drop")\n')
    assert_refused(capsys, tmp_path, m, rules=rules)


# ---- indices into a table whose shape the model does not declare


def test_an_index_into_a_computed_table_spans_the_table(capsys, tmp_path):
    # the table t = Concat(a, b) (10 values) declares no shape, so its indices were drawn in
    # [0, 2): a rule file's Gather(Concat(a, b), i) -> Gather(a, i) (a holds 2) was written with
    # exit 0. The table's size comes from shape inference
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[2] a, float[8] b, int64[4] i) => (float[4] y) {
            t = Concat <axis = 0> (a, b)
            y = Gather(t, i)
        }""")
    rules = ("(ruleset bad)\n; Gather(Concat(a, b), i) -> Gather(a, i), unsound\n"
             "(rewrite (Gather (Concat (Cons a (Cons b (Nil))) ax) i g) (Gather a i g)"
             ' :ruleset bad :name "bad-gather")\n')
    assert_refused(capsys, tmp_path, m, rules=rules)
    from eqsat.verification.feeds import Feeds

    assert Feeds(m).describe() == "i an index in [-10, 10)"


def test_a_size_bound_computed_from_constants_is_passed_too(capsys, tmp_path):
    # the Slice's end is 3 * 4, two constants that are each below 12: the run beyond the
    # constants' values ran N = 6, and a rule file's Slice -> x was written with exit 0. The
    # values that the main graph computes from small integer constants alone count too
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[N] x) => (float[M] y) {
            s = Constant <value = int64[1] {0}> ()
            a = Constant <value = int64[1] {3}> ()
            b = Constant <value = int64[1] {4}> ()
            e = Mul(a, b)
            y = Slice(x, s, e)
        }""")
    err = assert_refused(capsys, tmp_path, m, rules=SLICE_DROP)
    assert "symbolic sizes beyond the constants' values (symbolic sizes N=14)" in err, err


LOOP = """
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[3] x, int64 m) => (float[3] z) {
        v = Mul(x, x)
        t = Constant <value = bool {1}> ()
        z = Loop(m, t, x) <body = b (int64 i, bool c, float[3] acc) => (bool co, float[3] ao) {
                ten = Constant <value = int64 {10}> ()
                late = Greater(i, ten)
                co = Identity(c)
                w = Add(acc, v)
                ao = Where(late, w, acc)
            }>
    }"""


def test_a_value_a_loop_reads_only_after_many_trips_is_verified(capsys, tmp_path):
    # the trip count m is a size input, drawn up to 9; the body adds the main graph's v = x * x
    # only from trip 11 on, and as a model of its own takes v as an input. A rule file's
    # x * x -> x in the main graph was written with exit 0 (x + x where the original gives x + x * x
    # at m = 12). Every Loop of the main graph runs again with a trip count beyond its body's constants
    m = parse_model(LOOP)
    feeds = {"x": np.array([1, 2, 3], np.float32), "m": np.array(12, np.int64)}
    _never_written_wrong(capsys, tmp_path, m, BAD_SQUARE, feeds)
    from eqsat.verification import verify

    v = verify(m, m)
    assert v.status == "passed" and "every Loop's trip count 20" in v.edge_cases, v.detail


def test_a_size_input_takes_a_value_beyond_the_constants(capsys, tmp_path):
    # a size input is drawn 0 to 9 (and -1): ConstantOfShape(s) sliced to 10 is the same for
    # every such s, so a rule file's Slice -> x was written with exit 0 (11 values where the
    # original gives 10 at s = [11]). An edge run puts one element of each size input past
    # the constants' values
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (int64[1] s) => (float[M] y) {
            c = ConstantOfShape <value = float[1] {1.0}> (s)
            b = Constant <value = int64[1] {0}> ()
            e = Constant <value = int64[1] {10}> ()
            y = Slice(c, b, e)
        }""")
    err = assert_refused(capsys, tmp_path, m, rules=SLICE_DROP)
    assert "sizes beyond the constants' values" in err, err


# Slice(u, 0, N) of 2 * ceiling(N / 2) elements is u where N is even only; the Gather of
# element 8 keeps the original from running below N = 9, so the random run took N = 32 and
# every run beyond it scaled N by a factor: all even
ODD_ONLY = CEIL_SLICE.replace("z = Slice(u, zero, n, two)", "z = %s")


def test_a_program_wrong_only_at_odd_sizes_is_refused(capsys, tmp_path):
    # a user's Slice(x, ...) -> x: written with exit 0, N + 1 elements for every odd N >= 9
    from eqsat.verification import verify

    m = parse_model(ODD_ONLY % "Slice(u, zero, n, two)")
    v = verify(m, parse_model(ODD_ONLY % "Identity(u)"))
    assert v.status == "failed", v.detail
    x = np.random.default_rng(0).random((1, 1, 11), dtype=np.float32)
    _never_written_wrong(capsys, tmp_path, m, SLICE_DROP, {"x": x})
