"""More places verification's runs did not reach: an unsound rewrite there must not be written
with exit 0. Each test crafts such a place, has a user's unsound rule file rewrite it, and checks
that `eqsat optimize` refuses the program or writes one that gives the original's outputs on
inputs that reach the place (under onnxruntime)."""

from __future__ import annotations

import numpy as np

from .conftest import optimize_cli, parse_model
from .test_verify_reach import LOOP, _outputs

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
    rc, err, out = optimize_cli(capsys, tmp_path, m, rules=IF_TO_ELSE)
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
    rc, err, out = optimize_cli(capsys, tmp_path, m, rules=rules)
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
    rc, err, out = optimize_cli(capsys, tmp_path, m, rules="(ruleset none)\n")
    assert rc == 0 and out is not None, err
    assert [n.op_type for n in out.graph.node].count("If") == 1, [n.op_type for n in out.graph.node]
    feeds = {"x": np.array([1, -2, 3], np.float32), "i": np.array([5000], np.int64)}
    for i in (5000, 1):
        feeds["i"] = np.array([i], np.int64)
        np.testing.assert_array_equal(_outputs(out, feeds)[0], _outputs(m, feeds)[0])
    from eqsat.verification import verify

    v = verify(m, out)
    assert v.status == "passed" and "every If's condition forced true and false" in v.edge_cases, v.detail


# ---- overridable inputs (initializers that are graph inputs too): the caller may feed any values


def _with_default(nodes, inputs, output, default):
    import onnx
    from onnx import helper as h
    from onnx import numpy_helper

    g = h.make_graph(nodes, "g", inputs, [output], [numpy_helper.from_array(default, inputs[-1].name)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)], ir_version=8)
    onnx.checker.check_model(m)
    return m


def test_an_overridable_weight_takes_both_signs(capsys, tmp_path):
    # w is overridable with the default [0.5, 1, 2]: the extra run scaled it by [0.5, 1.5] and
    # kept its signs, so a rule file's Relu(w) -> w was written with exit 0 (x * w where the
    # original gives 0 for a caller's w = -1)
    from onnx import TensorProto as TP
    from onnx import helper as h

    m = _with_default([h.make_node("Relu", ["w"], ["r"]), h.make_node("Mul", ["x", "r"], ["y"])],
                      [h.make_tensor_value_info("x", TP.FLOAT, [3]), h.make_tensor_value_info("w", TP.FLOAT, [3])],
                      h.make_tensor_value_info("y", TP.FLOAT, [3]), np.array([0.5, 1.0, 2.0], np.float32))
    rules = "(ruleset bad)\n; Relu(w) -> w, unsound for a negative w\n" \
            '(rewrite (Relu w) w :ruleset bad :name "bad-relu-drop")\n'
    feeds = {"x": np.ones(3, np.float32), "w": np.array([-1, 1, -1], np.float32)}
    assert _outputs(m, feeds)[0].tolist() == [0, 1, 0]
    rc, err, out = optimize_cli(capsys, tmp_path, m, rules=rules)
    assert rc == 1 and out is None, err


def test_an_overridable_integer_takes_another_value(capsys, tmp_path):
    # s is overridable with the default [2, 3], x[2, 3]: integers kept their defaults in every
    # run, so a rule file's Reshape(x, s) -> x was written with exit 0 (shape [2, 3] where the
    # original gives [3, 2] for a caller's s = [3, 2])
    from onnx import TensorProto as TP
    from onnx import helper as h

    m = _with_default([h.make_node("Reshape", ["x", "s"], ["y"])],
                      [h.make_tensor_value_info("x", TP.FLOAT, [2, 3]), h.make_tensor_value_info("s", TP.INT64, [2])],
                      h.make_tensor_value_info("y", TP.FLOAT, ["a", "b"]), np.array([2, 3], np.int64))
    rules = "(ruleset bad)\n; Reshape(x, s) -> x, unsound\n" \
            '(rewrite (Reshape x s a) x :ruleset bad :name "bad-reshape-drop")\n'
    rc, err, out = optimize_cli(capsys, tmp_path, m, rules=rules)
    assert rc == 1 and out is None, err
    assert "s its default and reordered or less by 1" in err, err


def test_other_overridable_values_pass_a_right_program_and_fall_back_to_the_floats():
    # the original refuses every other value of its Reshape target s ([6] less by 1 is [5]):
    # the extra run varies the float w alone, and the model passes against itself
    from onnx import TensorProto as TP
    from onnx import helper as h
    from onnx import numpy_helper

    from eqsat.verification import verify

    m = _with_default([h.make_node("Reshape", ["x", "s"], ["r"]), h.make_node("Mul", ["r", "w"], ["y"])],
                      [h.make_tensor_value_info("x", TP.FLOAT, [2, 3]), h.make_tensor_value_info("w", TP.FLOAT, [6]),
                       h.make_tensor_value_info("s", TP.INT64, [1])],
                      h.make_tensor_value_info("y", TP.FLOAT, [6]), np.array([6], np.int64))
    m.graph.initializer.append(numpy_helper.from_array(np.arange(1, 7, dtype=np.float32), "w"))
    v = verify(m, m)
    assert v.status == "passed" and v.runs == 2, v.detail
    parts = v.inputs.split("; ")
    assert "w its default and scaled by [0.5, 1.5] with signs drawn" in parts and "s its default" in parts, v.inputs


# ---- a Scan's later iterations

SCAN = """
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[N, 3] x, float[3] y) => (float[3] z) {
        v = Mul(y, y)
        i0 = Constant <value = int64 {0}> ()
        a0 = Constant <value = float[3] {0, 0, 0}> ()
        i1, z = Scan <num_scan_inputs = 1, body = b (int64 i, float[3] acc, float[3] xs) => (int64 io, float[3] ao) {
                one = Constant <value = int64 {1}> ()
                io = Add(i, one)
                ten = Constant <value = int64 {10}> ()
                late = Greater(i, ten)
                s = Add(acc, xs)
                w = Add(s, v)
                ao = Where(late, w, s)
            }> (i0, a0, x)
    }"""


def test_a_value_a_scan_reads_only_after_many_iterations_is_verified(capsys, tmp_path):
    # the body adds the main graph's v = y * y only from iteration 12 on (its counter past 10),
    # and the scan's length N was drawn 2, 3 and at most 4 past the main graph's constants: a
    # rule file's x * x -> x in the main graph was written with exit 0 (y where the original
    # adds y * y at N = 12). The runs forced on the Loops run the Scans past their bodies' constants
    m = parse_model(SCAN)
    rules = '(ruleset bad)\n; Mul(x, x) -> x, unsound\n(rewrite (Mul x x) x :ruleset bad :name "bad-square")\n'
    feeds = {"x": np.zeros((12, 3), np.float32), "y": np.array([1, 2, 3], np.float32)}
    assert _outputs(m, feeds)[0].tolist() == [1, 4, 9]
    rc, err, out = optimize_cli(capsys, tmp_path, m, rules=rules)
    assert rc == 1 and out is None, err
    # the sizes past the constants count the bodies' constants too (red27), and find it first;
    # the forced Scan lengths find it as well
    assert "every Scan's length 20" in err or "symbolic sizes beyond the constants' values (symbolic sizes N=12)" \
        in err, err
    from eqsat.verification import verify

    v = verify(m, m)
    assert v.status == "passed" and "every Scan's length 20 (symbolic sizes N=20)" in v.edge_cases, v.detail


# ---- a rounding's ties


def test_a_rewrite_wrong_at_a_rounding_tie_is_refused(capsys, tmp_path):
    # no draw gives a float that is a half number (standard normal values, times 100, 10000,
    # 0.0001, zeros, +-2e15): a rule file's Floor(x + 0.5) -> Round(x) was written with exit 0
    # (Round halves to even: 2 where the original gives 3 at x = 2.5)
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[8] x) => (float[8] y) {
            h = Constant <value = float {0.5}> ()
            a = Add(x, h)
            y = Floor(a)
        }""")
    rules = ("(ruleset bad)\n; Floor(x + 0.5) -> Round(x), unsound at ties\n"
             '(rewrite (Floor (Add x (ScalarF 0.5 t s))) (Out (Opaque "" "Round" (Cons x (Nil)) (ANil) (Nil) 1) 0)'
             ' :ruleset bad :name "bad-round")\n')
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 3, 0.2, 0.7], np.float32)
    assert _outputs(m, {"x": x})[0].tolist() == [1, 2, 3, 0, -1, 3, 0, 1]
    rc, err, out = optimize_cli(capsys, tmp_path, m, rules=rules)
    assert rc == 1 and out is None, err
    assert "whole and half numbers among the floats" in err, err

