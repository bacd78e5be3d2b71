"""More places verification's runs did not reach: an unsound rewrite there must not be written
with exit 0. Each test crafts such a place, has a user's unsound rule file rewrite it, and checks
that `eqsat optimize` refuses the program or writes one that gives the original's outputs on
inputs that reach the place (under onnxruntime)."""

from __future__ import annotations

import numpy as np

from .conftest import parse_model
from .test_verify_reach import LOOP, _optimize, _outputs

# ---- an If the optimized model no longer has

IF_TAKEN_AT_5000 = """
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[3] x, int64[1] i) => (float[3] z) {
        k = Constant <value = int64[1] {5000}> ()
        c1 = Equal(i, k)
        c = Squeeze(c1)
        z = If(c) <then_branch = t () => (float[3] zt) {
                zt = Neg(x)
            }, else_branch = e () => (float[3] ze) {
                ze = Identity(x)
            }>
    }"""
IF_TO_ELSE = ("(ruleset bad)\n; If(c, Neg(x), x) -> x, unsound where c is true\n"
              '(rewrite (Out (If c e t (Cons x (Nil)) 1) 0) x :ruleset bad :name "bad-if-else")\n')


def test_an_if_removed_wrongly_is_refused(capsys, tmp_path):
    # the then branch is taken only where i == 5000, which no draw gives; the conditions were
    # forced only where both models have as many Ifs, so a rule file's If(c, Neg(x), x) -> x
    # (the optimized model has no If) was written with exit 0 (x where the original gives -x)
    m = parse_model(IF_TAKEN_AT_5000)
    feeds = {"x": np.array([1, 2, 3], np.float32), "i": np.array([5000], np.int64)}
    assert _outputs(m, feeds)[0].tolist() == [-1, -2, -3]
    rc, err, out = _optimize(capsys, tmp_path, m, IF_TO_ELSE)
    assert rc == 1 and out is None, err


def test_a_loop_removed_wrongly_is_refused(capsys, tmp_path):
    # the body adds v = x * x only from trip 11 on, and the trip count m is drawn up to 9: a
    # rule file's Loop(m, t, x) -> x took the Loop out of the optimized model, the trip counts
    # were forced only where both models have as many Loops, and it was written with exit 0
    # (x where the original gives x + x * x at m = 12)
    rules = ("(ruleset bad)\n; Loop(m, t, x) -> x, unsound from trip 11 on\n"
             '(rewrite (Out (Opaque d "Loop" (Cons m (Cons t (Cons x (Nil)))) a caps n) 0) x'
             ' :ruleset bad :name "bad-loop-drop")\n')
    m = parse_model(LOOP)
    rc, err, out = _optimize(capsys, tmp_path, m, rules)
    assert rc == 1 and out is None, err
    assert "with every Loop's trip count 20" in err, err


def test_an_if_the_constants_decide_is_inlined_and_verified(capsys, tmp_path):
    # the conditions are a constant and Shape(x)[0] == 3 of x[3]: eqsat inlines the taken
    # branches, and forcing the original alone to the other branch, which no input reaches,
    # would refuse that right program. The If on i is still forced in both
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[3] x, int64[1] i) => (float[3] z) {
            s = Shape(x)
            three = Constant <value = int64[1] {3}> ()
            d = Equal(s, three)
            c = Squeeze(d)
            y = If(c) <then_branch = t () => (float[3] yt) {
                    yt = Neg(x)
                }, else_branch = e () => (float[3] ye) {
                    ye = Identity(x)
                }>
            f = Constant <value = bool {0}> ()
            w = If(f) <then_branch = t2 () => (float[3] wt) {
                    wt = Identity(y)
                }, else_branch = e2 () => (float[3] we) {
                    we = Abs(y)
                }>
            k = Constant <value = int64[1] {5000}> ()
            c1 = Equal(i, k)
            c2 = Squeeze(c1)
            z = If(c2) <then_branch = t3 () => (float[3] zt) {
                    zt = Neg(w)
                }, else_branch = e3 () => (float[3] ze) {
                    ze = Identity(w)
                }>
        }""")
    rc, err, out = _optimize(capsys, tmp_path, m, "(ruleset none)\n")
    assert rc == 0 and out is not None, err
    assert [n.op_type for n in out.graph.node].count("If") == 1, [n.op_type for n in out.graph.node]
    feeds = {"x": np.array([1, -2, 3], np.float32), "i": np.array([5000], np.int64)}
    for i in (5000, 1):
        feeds["i"] = np.array([i], np.int64)
        np.testing.assert_array_equal(_outputs(out, feeds)[0], _outputs(m, feeds)[0])
    from eqsat.verification import verify

    v = verify(m, out)
    assert v.status == "passed" and "every If's condition forced true and false" in v.edge_cases, v.detail
