"""Inputs that verification's runs never bring to the place a rewrite is wrong: combinations of
If conditions computed from float reductions of one input, which the forced runs (all Ifs of a
depth alike) and the edge runs (every element scaled alike) never split. Each test crafts the
model and an unsound rule file, and checks under onnxruntime that `eqsat optimize` refuses it or
writes what the original computes."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

from .test_verify_reach import _never_written_wrong, _outputs, parse_model

BAD_RELU = '(ruleset bad)\n; Relu(x) -> x, unsound\n(rewrite (Relu x) x :ruleset bad :name "bad-relu")\n'

def two_ifs(inputs: str, conditions: str, w: str = "w") -> str:
    """A model (ONNX text) whose `conditions` compute scalar c1 and c2 and whose output is
    Relu(If(c1, -|w| - 1, |w| + 1) + If(c2, 2|w| + 2, 0)): the Relu matters only where c1 holds
    and c2 does not."""
    return f"""
    <ir_version: 8, opset_import: ["" : 18]>
    g ({inputs}) => (float[3] z) {{
        {conditions}
        y1 = If(c1) <then_branch = t1 () => (float[3] a) {{
                ax = Abs({w})
                na = Neg(ax)
                one = Constant <value = float {{1.0}}> ()
                a = Sub(na, one)
            }}, else_branch = e1 () => (float[3] b) {{
                bx = Abs({w})
                one2 = Constant <value = float {{1.0}}> ()
                b = Add(bx, one2)
            }}>
        y2 = If(c2) <then_branch = t2 () => (float[3] p) {{
                px = Abs({w})
                p1 = Add(px, px)
                two = Constant <value = float {{2.0}}> ()
                p = Add(p1, two)
            }}, else_branch = e2 () => (float[3] q) {{
                q = Sub({w}, {w})
            }}>
        s = Add(y1, y2)
        z = Relu(s)
    }}"""


TWO_IFS_ON_REDUCTIONS = two_ifs("float[16] x, float[3] w", """hi = ReduceMax <keepdims = 0> (x)
        lo = ReduceMin <keepdims = 0> (x)
        k1 = Constant <value = float {10.0}> ()
        k2 = Constant <value = float {-10.0}> ()
        c1 = Greater(hi, k1)
        c2 = Less(lo, k2)""")


def test_two_ifs_on_reductions_of_one_input_split_are_refused(capsys, tmp_path):
    # y1 = If(max(x) > 10, -|w| - 1, |w| + 1), y2 = If(min(x) < -10, 2|w| + 2, 0), z = Relu(y1 + y2):
    # the Relu matters only where max(x) > 10 and min(x) >= -10. The forced runs force both Ifs
    # (one depth) alike, and the scaled edge runs scale every element of x alike (x * 100 has
    # both an element above 10 and one below -10), so a rule file's Relu(y) -> y was written
    # with exit 0
    m = parse_model(TWO_IFS_ON_REDUCTIONS)
    x = np.zeros(16, np.float32)
    x[3] = 20.0
    feeds = {"x": x, "w": np.array([1, -2, 3], np.float32)}
    assert _outputs(m, feeds)[0].tolist() == [0, 0, 0]
    _never_written_wrong(capsys, tmp_path, m, BAD_RELU, feeds)


def test_the_other_split_of_two_ifs_on_reductions_is_refused(capsys, tmp_path):
    # the reverse: the Relu matters only where max(x) <= 10 and min(x) < -10; the run one above
    # both constants gives max 11.25 and min -9.25, the one case the fix above might have
    # reached by luck
    m = parse_model(TWO_IFS_ON_REDUCTIONS.replace("If(c1)", "If(cb)").replace("If(c2)", "If(c1)")
                    .replace("If(cb)", "If(c2)"))
    x = np.zeros(16, np.float32)
    x[3] = -20.0
    feeds = {"x": x, "w": np.array([1, -2, 3], np.float32)}
    assert _outputs(m, feeds)[0].tolist() == [0, 0, 0]
    _never_written_wrong(capsys, tmp_path, m, BAD_RELU, feeds)


def test_two_ifs_on_the_maxima_of_two_inputs_split_are_refused(capsys, tmp_path):
    # max(x) > 10 and max(u) > 10: the run one above a constant keeps a maximum above it, so
    # the inputs' split (one at its constants, the other one above) never had one false and
    # the other true; the split of constants keeps the other input as drawn
    m = parse_model(TWO_IFS_ON_REDUCTIONS.replace("float[16] x,", "float[16] x, float[16] u,")
                    .replace("ReduceMin <keepdims = 0> (x)", "ReduceMax <keepdims = 0> (u)")
                    .replace("k2 = Constant <value = float {-10.0}>", "k2 = Constant <value = float {10.0}>")
                    .replace("Less(lo, k2)", "Greater(lo, k2)"))
    x = np.zeros(16, np.float32)
    x[3] = 20.0
    feeds = {"x": x, "u": np.zeros(16, np.float32), "w": np.array([1, -2, 3], np.float32)}
    assert _outputs(m, feeds)[0].tolist() == [0, 0, 0]
    _never_written_wrong(capsys, tmp_path, m, BAD_RELU, feeds)


def _picked(op: str, k: int, cmp: str = "Equal"):
    # Where(any(pick(i) CMP k), a, b) with pick an op whose output holds some of i's values
    from .test_verify_reach4 import _const, _where

    picks = {"Gather": [_const("at", 2), h.make_node("Gather", ["i", "at"], ["v"])],
             "Slice": [_const("s0", [1]), _const("s1", [3]), h.make_node("Slice", ["i", "s0", "s1"], ["v"])],
             "Concat": [_const("zs", [0, 0]), h.make_node("Concat", ["zs", "i"], ["v"], axis=0)],
             "ReduceMax": [h.make_node("ReduceMax", ["i"], ["v"], keepdims=0)],
             "ReduceMin": [h.make_node("ReduceMin", ["i"], ["v"], keepdims=0)],
             "Abs": [h.make_node("Abs", ["i"], ["v"])],
             "Max": [_const("lo", -3), h.make_node("Max", ["lo", "i"], ["v"])],
             "Where": [_const("zero", 0), h.make_node("Greater", ["i", "zero"], ["p"]),
                       h.make_node("Where", ["p", "i", "zero"], ["v"])]}[op]
    anyof = [h.make_node("Cast", ["e"], ["ei"], to=TP.INT64), h.make_node("ReduceMax", ["ei"], ["em"], keepdims=0),
             h.make_node("Cast", ["em"], ["c"], to=TP.BOOL)]
    m = _where([*picks, _const("k", k), h.make_node(cmp, ["v", "k"], ["e"]), *anyof])
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize(("op", "cmp", "k", "moved"), [
    ("Gather", "Equal", 5000, 5001), ("Slice", "Equal", 5000, 5001), ("Concat", "Equal", 5000, 5001),
    ("ReduceMax", "Equal", 5000, 5001), ("ReduceMin", "Less", -300, -301), ("Abs", "Equal", 5000, 5001),
    ("Max", "Equal", 5000, 5001), ("Where", "Equal", 5000, 5001)])
def test_a_comparison_of_values_picked_from_the_input_is_failed(op, cmp, k, moved):
    # Equal(pick(i), 5000) (Less(min(i), -300)) with pick an element, a slice, a Concat, a reduction, |i|, Max(i, -3)
    # or Where(i > 0, i, 0): the walk to the compared constants stopped at these ops, so i never
    # took 5000 and the constant moved by one passed
    from eqsat.verification import verify

    assert verify(_picked(op, k, cmp), _picked(op, k, cmp)).status == "passed"
    v = verify(_picked(op, k, cmp), _picked(op, moved, cmp))
    assert v.status == "failed", v.detail


def test_two_ifs_on_input_comparisons_each_way_are_refused(capsys, tmp_path):
    # y1 = If(sum(u) > mean(x), -|w| - 1, |w| + 1), y2 = If(sum(x) > sum(u), 2|w| + 2, 0),
    # z = Relu(y1 + y2): the Relu matters only where the first holds and the second does not.
    # No constant is compared, so no edge run splits them, the forced runs set both alike, and
    # the draws (random, edge runs) led them three ways of four: a rule file's Relu(y) -> y was
    # written with exit 0
    m = parse_model(TWO_IFS_ON_REDUCTIONS.replace("float[16] x, float[3] w", "float[16] x, float[16] u, float[3] w")
                    .replace("hi = ReduceMax <keepdims = 0> (x)", "hi = ReduceSum <keepdims = 0> (x)")
                    .replace("lo = ReduceMin <keepdims = 0> (x)", "lo = ReduceSum <keepdims = 0> (u)")
                    .replace("k2 = Constant <value = float {-10.0}> ()", "mx = ReduceMean <keepdims = 0> (x)")
                    .replace("c1 = Greater(hi, k1)", "c1 = Greater(lo, mx)")
                    .replace("c2 = Less(lo, k2)", "c2 = Greater(hi, lo)"))
    feeds = {"x": np.zeros(16, np.float32), "u": np.ones(16, np.float32), "w": np.array([1, -2, 3], np.float32)}
    assert _outputs(m, feeds)[0].tolist() == [0, 0, 0]
    _never_written_wrong(capsys, tmp_path, m, BAD_RELU, feeds)


def test_right_programs_with_several_ifs_pass_the_covering_runs():
    # the covering draws are picked by the original's conditions alone: the model against itself,
    # and against a copy whose two Ifs are listed in the other order, passes and says it ran them
    from eqsat.verification import verify

    m = parse_model(TWO_IFS_ON_REDUCTIONS)
    v = verify(m, m)
    assert v.status == "passed" and "inputs that set the If and Where conditions each way" in v.detail, v.detail
    swapped = parse_model(TWO_IFS_ON_REDUCTIONS)
    nodes = list(swapped.graph.node)
    a, b = (k for k, n in enumerate(nodes) if n.op_type == "If")
    nodes[a], nodes[b] = nodes[b], nodes[a]
    del swapped.graph.node[:]
    swapped.graph.node.extend(nodes)
    assert verify(m, swapped).status == "passed"


def test_two_wheres_on_scalar_conditions_each_way_are_refused(capsys, tmp_path):
    # the sibling with Where(c, a, b) of scalar computed conditions in place of the Ifs: nothing
    # forces a Where's condition, and the draws led them three ways of four
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[16] x, float[16] u, float[3] w) => (float[3] z) {
            sx = ReduceSum <keepdims = 0> (x)
            su = ReduceSum <keepdims = 0> (u)
            mx = ReduceMean <keepdims = 0> (x)
            c1 = Greater(su, mx)
            c2 = Greater(sx, su)
            one = Constant <value = float {1.0}> ()
            two = Constant <value = float {2.0}> ()
            aw = Abs(w)
            a1 = Add(aw, one)
            na = Neg(a1)
            y1 = Where(c1, na, a1)
            a2 = Add(aw, aw)
            p = Add(a2, two)
            zero = Sub(w, w)
            y2 = Where(c2, p, zero)
            s = Add(y1, y2)
            z = Relu(s)
        }""")
    feeds = {"x": np.zeros(16, np.float32), "u": np.ones(16, np.float32), "w": np.array([1, -2, 3], np.float32)}
    assert _outputs(m, feeds)[0].tolist() == [0, 0, 0]
    _never_written_wrong(capsys, tmp_path, m, BAD_RELU, feeds)


def _compared_float(op: str, k: float, dtype) -> onnx.ModelProto:
    # Where(x OP k, a, b) with x and k of `dtype`
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes = [h.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.array(k, dtype), "k")),
             h.make_node(op, ["x", "k"], ["c"]), h.make_node("Where", ["c", "a", "b"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", elem, [4]),
                                  *(h.make_tensor_value_info(n, TP.FLOAT, [4]) for n in "ab")],
                     [h.make_tensor_value_info("y", TP.FLOAT, [4])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)], ir_version=8)
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize(("op", "k", "moved", "dtype"), [
    ("Less", 3000, 2998, np.float16), ("GreaterOrEqual", 3000, 2998, np.float16), ("Less", 5000, 4996, np.float16),
    ("Greater", 3000, 3002, np.float16), ("LessOrEqual", 3000, 3002, np.float16)])
def test_a_float_compared_above_its_types_unit_spacing_moved_down_is_failed(op, k, moved, dtype):
    # float16 holds no value between 2998 and 3000: the value one below the constant (plus a
    # quarter, 2999.25) rounded to 3000 itself, so Less(x, 3000) taken for Less(x, 2998) passed
    # (float32 above 2^24 alike, but there a nudge of 2^-20 moves x across the constant, a tie)
    from eqsat.verification import verify

    m = _compared_float(op, k, dtype)
    assert verify(m, m).status == "passed"
    v = verify(m, _compared_float(op, moved, dtype))
    assert v.status == "failed", v.detail


def _signed_if(k: int, t: bool) -> str:
    """y_k = If(c_k, -aw or aw, aw or -aw) in ONNX text: -aw where c_k is `t`."""
    tv, ev = ("-1.0", "1.0") if t else ("1.0", "-1.0")
    return f"""
            y{k} = If(c{k}) <then_branch = t{k} () => (float[3] a{k}) {{
                    kt{k} = Constant <value = float {{{tv}}}> ()
                    a{k} = Mul(aw, kt{k})
                }}, else_branch = e{k} () => (float[3] b{k}) {{
                    ke{k} = Constant <value = float {{{ev}}}> ()
                    b{k} = Mul(aw, ke{k})
                }}>"""


def _three_ifs(combo: tuple[bool, bool, bool], relu: bool = True) -> onnx.ModelProto:
    # z = Relu(y0 + y1 + y2 + 2.5 a), a = |w| + 1, y_k = If(sum(input k) > 0, -a or a, a or -a):
    # the sum is negative, and the Relu matters, only where the conditions are `combo`
    ifs = [f"""
            s{k} = ReduceSum <keepdims = 0> ({inp})
            c{k} = Greater(s{k}, zero){_signed_if(k, t)}"""
           for k, (inp, t) in enumerate(zip("xuv", combo, strict=True))]
    return parse_model(f"""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[16] x, float[16] u, float[16] v, float[3] w) => (float[3] z) {{
            zero = Constant <value = float {{0.0}}> ()
            one = Constant <value = float {{1.0}}> ()
            half = Constant <value = float {{2.5}}> ()
            ab = Abs(w)
            aw = Add(ab, one)
            {''.join(ifs)}
            s01 = Add(y0, y1)
            s012 = Add(s01, y2)
            bias = Mul(aw, half)
            s = Add(s012, bias)
            z = {'Relu' if relu else 'Identity'}(s)
        }}""")


def _only_the_wrong_one_fails(made, combo) -> None:
    """made(combo) passes against itself and fails against made(combo, relu=False)."""
    from eqsat.verification import verify

    m = made(combo)
    assert verify(m, m).status == "passed"
    v = verify(m, made(combo, relu=False))
    assert v.status == "failed", v.detail


@pytest.mark.parametrize("combo", list(itertools.product((True, False), repeat=3)))
def test_three_ifs_wrong_in_one_way_of_eight_are_failed(combo):
    # pairs of conditions each way left (false, true, false) of sum(x), sum(u), sum(v) > 0 unrun
    _only_the_wrong_one_fails(_three_ifs, combo)


def test_three_ifs_wrong_in_one_way_of_eight_are_refused(capsys, tmp_path):
    m = _three_ifs((False, True, False))
    feeds = {"x": -np.ones(16, np.float32), "u": np.ones(16, np.float32), "v": -np.ones(16, np.float32),
             "w": np.array([1, -2, 3], np.float32)}
    assert _outputs(m, feeds)[0].tolist() == [0, 0, 0]
    _never_written_wrong(capsys, tmp_path, m, BAD_RELU, feeds)


def _three_ifs_at_constants(combo: tuple[bool, bool, bool], relu: bool = True) -> onnx.ModelProto:
    # `_three_ifs` on Squeeze(i) == 5000, Squeeze(j) == 7000, Squeeze(k) == 9000 (int64[1] inputs)
    text = onnx.printer.to_text(_three_ifs(combo, relu))
    text = text.replace("float[16] x, float[16] u, float[16] v", "int64[1] x, int64[1] u, int64[1] v")
    for k, (inp, c) in enumerate(zip("xuv", (5000, 7000, 9000), strict=True)):
        text = text.replace(f"s{k} = ReduceSum <keepdims: int = 0> ({inp})", f"s{k} = Squeeze ({inp})")
        text = text.replace(f"c{k} = Greater (s{k}, zero)",
                            f"k{k} = Constant <value = int64 {{{c}}}> ()\n c{k} = Equal (s{k}, k{k})")
    return parse_model(text)


@pytest.mark.parametrize("combo", list(itertools.product((True, False), repeat=3)))
def test_three_ifs_at_constants_wrong_in_one_way_of_eight_are_failed(combo):
    # the splits by one bit of an input's index (0, 1, 2) put them at their constants as
    # {1}, {0, 2}, {2}, {0, 1}, never true, false, false nor false, true, true; a group for each
    # nonzero mask of the bits (parity) reaches every three each way
    from eqsat.verification import verify

    m = _three_ifs_at_constants(combo)
    assert "Equal" in [n.op_type for n in m.graph.node]
    assert verify(m, m).status == "passed"
    v = verify(m, _three_ifs_at_constants(combo, relu=False))
    assert v.status == "failed", v.detail


def test_three_ifs_at_constants_wrong_in_one_way_are_refused(capsys, tmp_path):
    m = _three_ifs_at_constants((True, False, False))
    feeds = {"x": np.array([5000]), "u": np.array([0]), "v": np.array([0]), "w": np.array([1, -2, 3], np.float32)}
    assert _outputs(m, feeds)[0].tolist() == [0, 0, 0]
    _never_written_wrong(capsys, tmp_path, m, BAD_RELU, feeds)


def _nested_ifs(combo: tuple[bool, bool], relu: bool = True) -> onnx.ModelProto:
    # z = Relu(If(sum(x) > 0, y1 + y2 + 1.5 a, 0)), y_k = If(sum(input k) > 0, -a or a, a or -a)
    # inside the then branch, their conditions main-graph values: the sum is negative, and the
    # Relu matters, only where the inner conditions are `combo`
    inner = _signed_if
    return parse_model(f"""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[16] x, float[16] u, float[16] v, float[3] w) => (float[3] z) {{
            zero = Constant <value = float {{0.0}}> ()
            one = Constant <value = float {{1.0}}> ()
            half = Constant <value = float {{1.5}}> ()
            ab = Abs(w)
            aw = Add(ab, one)
            s0 = ReduceSum <keepdims = 0> (x)
            s1 = ReduceSum <keepdims = 0> (u)
            s2 = ReduceSum <keepdims = 0> (v)
            c0 = Greater(s0, zero)
            c1 = Greater(s1, zero)
            c2 = Greater(s2, zero)
            zb = If(c0) <then_branch = tt () => (float[3] zt) {{
                    {inner(1, combo[0])}
                    {inner(2, combo[1])}
                    s12 = Add(y1, y2)
                    bias = Mul(aw, half)
                    zt = Add(s12, bias)
                }}, else_branch = ee () => (float[3] ze) {{
                    ze = Sub(w, w)
                }}>
            z = {'Relu' if relu else 'Identity'}(zb)
        }}""")


@pytest.mark.parametrize("combo", list(itertools.product((True, False), repeat=2)))
def test_two_ifs_nested_in_a_branch_wrong_in_one_way_are_failed(combo):
    # the forced runs force the two inner Ifs (one depth) alike, and the covering draws took
    # main-graph Ifs alone: true, false and false, true never ran inside the taken branch
    _only_the_wrong_one_fails(_nested_ifs, combo)


def test_two_ifs_nested_in_a_branch_wrong_in_one_way_are_refused(capsys, tmp_path):
    m = _nested_ifs((True, False))
    feeds = {"x": np.ones(16, np.float32), "u": np.ones(16, np.float32), "v": -np.ones(16, np.float32),
             "w": np.array([1, -2, 3], np.float32)}
    assert _outputs(m, feeds)[0].tolist() == [0, 0, 0]
    _never_written_wrong(capsys, tmp_path, m, BAD_RELU, feeds)


def _equal_narrowed(wrap: bool, elem: str, to: int, k: int) -> onnx.ModelProto:
    # Where(Cast(i, to) == k, a, b) with `wrap`, else Where(i == k, a, b) (the constant cast to i's type)
    cond = (f"n = Cast <to = {to}> (i)\n e = Equal(n, k8)" if wrap
            else "kk = CastLike(k8, i)\n e = Equal(i, kk)")
    return parse_model(f"""
        <ir_version: 8, opset_import: ["" : 18]>
        g ({elem}[4] i, float[4] a, float[4] b) => (float[4] y) {{
            k8 = Constant <value = {'int8' if to == 3 else 'uint8'} {{{k}}}> ()
            {cond}
            y = Where(e, a, b)
        }}""")


@pytest.mark.parametrize(("elem", "to", "k"), [("int32", 3, 5), ("int16", 3, -7), ("int64", 2, 200), ("int32", 2, 0)])
def test_a_comparison_after_a_narrowing_cast_taken_for_one_without_it_is_failed(elem, to, k):
    # Cast(i, int8) == 5 holds at i = 261 too (wrap-around), Equal(i, 5) does not; the runs put i
    # at 5, 4 and 6, at [-9, 9] and at its type's extremes (-2^31 casts to 0, 2^31 - 1 to -1)
    from eqsat.verification import verify

    m = _equal_narrowed(True, elem, to, k)
    assert verify(m, m).status == "passed"
    v = verify(m, _equal_narrowed(False, elem, to, k))
    assert v.status == "failed", v.detail
