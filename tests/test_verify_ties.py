"""Verification at ties (eqsat.verification.ties): an output element the original itself does
not determine (an index picked among values that tie within rounding) may differ where an
honest rewrite rounds otherwise, and a program wrong elsewhere is refused all the same."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from eqsat.verification import random_inputs, run, ties, verify

from .conftest import optimize_cli

N = 65536  # sorted normal values this many: dozens of neighbours one float step apart
A, B = np.float32(1.1), np.float32(3.3)


def _model(nodes, inits: dict[str, np.ndarray], x_shape, outputs) -> onnx.ModelProto:
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                      [oh.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                      [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m)
    return m


def sorted_scores(folded: bool = False, k: int = N, tail=(), out: str = "i") -> onnx.ModelProto:
    """TopK (all N, sorted) of (x * A) * B, or with `folded` of x * (A * B): the same scores rounded
    otherwise, which reorders neighbours one float step apart. `tail`: nodes after the TopK that
    read v and i and write `out` (in place of i)."""
    inits = {"k": np.array([k], np.int64)}
    if folded:
        nodes = [oh.make_node("Mul", ["x", "ab"], ["s"])]
        inits["ab"] = np.array(A * B, np.float32)
    else:
        nodes = [oh.make_node("Mul", ["x", "a"], ["t"]), oh.make_node("Mul", ["t", "b"], ["s"])]
        inits |= {"a": np.array(A, np.float32), "b": np.array(B, np.float32)}
    nodes += [oh.make_node("TopK", ["s", "k"], ["v", "i"]), *tail]
    return _model(nodes, inits, [N], [("v", TensorProto.FLOAT, ["kk"]), (out, TensorProto.INT64, ["kk"])])


def _index_differences() -> int:
    f = random_inputs(sorted_scores())
    return int((run(sorted_scores(), f, False)["i"] != run(sorted_scores(True), f, False)["i"]).sum())


def test_reassociated_scores_reorder_ties_and_pass():
    """The folded scores reorder a few neighbours (what the test is about), and verification
    passes: the original itself reorders them under a nudge of its inputs. Before ties.settle:
    failed, "output 'i': 8 of 65536 values differ, first at (6456,): 9244 vs expected 44536"."""
    assert _index_differences() > 0
    original, folded = sorted_scores(), sorted_scores(True)
    v = verify(original, folded)
    assert v.status == "passed", v.detail
    assert "set aside as ties: " in v.detail and "in i" in v.detail, v.detail  # the user is told
    assert "set aside" not in verify(original, original).detail
    f = random_inputs(original)
    e, a = run(original, f, False), run(folded, f, False)
    np.testing.assert_allclose(a["v"], e["v"], rtol=1e-6)
    assert sorted(a["i"]) == sorted(e["i"])  # the same indices, some neighbours swapped


REASSOCIATE = """(ruleset user)
; (x * s) * t -> x * (s * t), right up to rounding (the constants' product is folded)
(rewrite (Mul (Mul x s) t) (Mul x (Mul s t)) :ruleset user :name "user-mul-reassociate")
"""


def test_reassociated_scores_pass_end_to_end(capsys, tmp_path):
    """A user's rule file reassociates the two Muls (the constants then folded) and eqsat writes
    the model (exit 0), whose indices differ from the original's only among ties. Before
    ties.settle: exit 1, nothing written."""
    rc, err, out = optimize_cli(capsys, tmp_path, sorted_scores(), rules=REASSOCIATE)
    assert rc == 0 and out is not None, err
    onnx.checker.check_model(out)
    assert [n.op_type for n in out.graph.node] == ["Mul", "TopK"]
    f = random_inputs(sorted_scores())
    e, a = run(sorted_scores(), f, False), run(out, f, False)
    np.testing.assert_allclose(a["v"], e["v"], rtol=1e-6)
    assert sorted(a["i"]) == sorted(e["i"])


def test_settling_costs_nothing_when_the_comparison_passes(monkeypatch):
    """A model that agrees exactly runs no nudged copy of the original."""
    calls = []
    monkeypatch.setattr(ties, "nudged", lambda f, seed: calls.append(seed) or f)
    assert verify(sorted_scores(), sorted_scores()).status == "passed"
    assert calls == []


def _swap_top_two() -> list:
    """Nodes that swap the first two of v and of i (the largest two of N normal values: about
    0.2 apart, no tie) into vs and the output j."""
    perm = numpy_helper.from_array(np.array([1, 0, *range(2, N)], np.int64), "perm")
    return [oh.make_node("Constant", [], ["p"], value=perm),
            oh.make_node("Gather", ["i", "p"], ["j"], axis=0)]


def test_swapped_rows_that_do_not_tie_are_refused():
    """The folded scores with their top two indices swapped: refused at position 0, though the
    ties elsewhere are set aside."""
    original = sorted_scores(tail=[oh.make_node("Identity", ["i"], ["j"])], out="j")
    wrong = sorted_scores(True, tail=_swap_top_two(), out="j")
    v = verify(original, wrong)
    assert v.status == "failed" and "output 'j'" in v.detail and "first at (0,)" in v.detail, v.detail


def test_topk_with_another_k_is_refused():
    """A TopK of k = N - 1 among the ties: the shapes differ, which no tie sets aside."""
    v = verify(sorted_scores(), sorted_scores(True, k=N - 1))
    assert v.status == "failed" and "shape" in v.detail, v.detail


def arg_of_relu(op: str) -> onnx.ModelProto:
    """ArgMax or ArgMin of Relu(x) over the last axis: rows all negative tie at 0."""
    return _model([oh.make_node("Relu", ["x"], ["r"]), oh.make_node(op, ["r"], ["y"], axis=1, keepdims=0)], {},
                  ["n", 4], [("y", TensorProto.INT64, ["n"])])


def test_argmin_for_argmax_over_relu_is_refused():
    """ArgMax -> ArgMin over a Relu: right only on rows of ties (all zeros), wrong on the
    rest, whose largest value no nudge of 2 ** -16 moves past another."""
    v = verify(arg_of_relu("ArgMax"), arg_of_relu("ArgMin"))
    assert v.status == "failed" and "output 'y'" in v.detail, v.detail


def test_undetermined_only_where_the_nudged_original_leaves_the_tolerance():
    """`undetermined`: an element is set aside only where the nudged original's value there lies
    outside the original's tolerance, whatever the optimized value."""
    e = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    n = np.array([1.5, 2.0001, 3.0, 4.0], np.float32)
    a = np.array([9.0, 9.0, 9.0, 4.0], np.float32)
    assert ties.undetermined(e, a, n, None, None).tolist() == [True, False, False, False]
    i = np.array([3, 1, 2], np.int64)
    assert ties.undetermined(i, i[::-1], np.array([3, 2, 2], np.int64), None, None).tolist() == [False, True, False]


def test_rows_matched_only_among_tied_keys():
    """`permuted_rows`: rows of tied scores are put in the original's order; a row whose score
    ties with none is not moved, a row that matches nothing leaves all as it was, and a
    constant output is no key (it would let every row move)."""
    scores = np.array([0.9, 0.5, 0.5, 0.1], np.float32)
    boxes = np.arange(16, dtype=np.float32).reshape(4, 4)
    labels = np.array([1, 2, 3, 4], np.int64)
    expected = {"boxes": boxes, "scores": scores, "labels": labels}
    swap = [0, 2, 1, 3]
    got = {"boxes": boxes[swap], "scores": scores[swap], "labels": labels[swap]}
    fixed = ties.permuted_rows(expected, got, None, None)
    assert all(np.array_equal(fixed[k], expected[k]) for k in ("boxes", "labels"))
    untied = [1, 0, 2, 3]
    got = {"boxes": boxes[untied], "scores": scores, "labels": labels[untied]}
    assert ties.permuted_rows(expected, got, None, None) == {}
    other = dict(got, boxes=boxes[swap] + np.float32(1), labels=labels[swap])
    other["scores"] = scores
    assert ties.permuted_rows(expected, other, None, None) == {}
    constant = {"boxes": boxes, "flag": np.zeros(4, np.float32)}
    assert ties.permuted_rows(constant, {"boxes": boxes[::-1], "flag": np.zeros(4, np.float32)}, None, None) == {}


def _clipped_noise(clip: bool, cast: bool = False) -> onnx.ModelProto:
    """y = c + c * 0.01 * sin(x * 1e8), c = Clip(x, -1000, 1000) (or x), cast to int32 where
    `cast`: the sine is ill-conditioned at every x not 0 (a nudge of x moves its argument by
    radians), so the original does not determine y to the tolerance, but within 2 % of c."""
    consts = {"lo": np.array(-1000, np.float32), "hi": np.array(1000, np.float32),
              "big": np.array(1e8, np.float32), "eps": np.array(0.01, np.float32)}
    nodes = [oh.make_node("Clip", ["x", "lo", "hi"], ["c"]) if clip else oh.make_node("Identity", ["x"], ["c"]),
             oh.make_node("Mul", ["x", "big"], ["xs"]), oh.make_node("Sin", ["xs"], ["s"]),
             oh.make_node("Mul", ["s", "eps"], ["n"]), oh.make_node("Mul", ["c", "n"], ["cn"]),
             oh.make_node("Add", ["c", "cn"], ["yf" if cast else "y"])]
    if cast:
        nodes.append(oh.make_node("Cast", ["yf"], ["y"], to=TensorProto.INT32))
    return _model(nodes, consts, [64], [("y", TensorProto.INT32 if cast else TensorProto.FLOAT, [64])])


@pytest.mark.parametrize("cast", [False, True])
def test_an_undetermined_element_far_beyond_what_the_nudges_move_is_refused(capsys, tmp_path, cast):
    # where |x| > 1000 (floats times 10000, the large floats) every element of y was set aside
    # as undetermined, whatever the optimized model gave there: a rule file's Clip(x, lo, hi) -> x
    # gave 1e4 where the original gives 1000 +- 10, and was written with exit 0, also with y
    # cast to int32. A set-aside element must lie within what the nudged runs move the original
    # by (times SPREAD), or be a value a nudged run gave (an integer)
    from .conftest import assert_refused_or_right
    from .test_verify_reach import _outputs

    m, wrong = _clipped_noise(True, cast), _clipped_noise(False, cast)
    assert verify(m, m).status == "passed"
    v = verify(m, wrong)
    assert v.status == "failed", v.detail
    x = {"x": np.linspace(1500, 5000, 64).astype(np.float32)}
    assert np.abs(_outputs(m, x)[0] - 1000).max() <= 10.01

    def right(out: onnx.ModelProto) -> None:  # within the original's 1 % of noise
        np.testing.assert_allclose(_outputs(out, x)[0], _outputs(m, x)[0], rtol=0.03, err_msg="written with exit 0")

    rules = '(ruleset bad)\n; Clip(x, lo, hi) -> x, unsound\n(rewrite (Clip x lo hi) x :ruleset bad :name "bad-clip")\n'
    assert_refused_or_right(capsys, tmp_path, m, right, rules=rules)


ROWS_PERMUTED = """
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[6, 3] w) => (float[6] key, float[6, 3] z) {
        key = Constant <value = float[6] {1, 0, 0, 0, 0, 0}> ()
        p = Constant <value = int64[6] {0, 5, 4, 3, 2, 1}> ()
        g = Gather <axis = 0> (w, p)
        big = Constant <value = float {1e8}> ()
        eps = Constant <value = float {NOISE}> ()
        gs = Mul(g, big)
        s = Sin(gs)
        n = Mul(s, eps)
        z = Add(g, n)
    }"""


@pytest.mark.parametrize("noise", ["0.0", "0.01"])
def test_rows_in_another_order_that_no_nudge_reorders_are_refused(capsys, tmp_path, noise):
    # key, a sorted output of 6 (constant: 1 then five 0s), made every row of z but the first
    # "tied", and rows listed in another order among tied keys were set aside unconfirmed: a
    # rule file's Gather(w, p) -> w, p a constant permutation, was written with exit 0. With an
    # ill-conditioned 0.01 * sin(1e8 * row) added, every row moves when nudged, but by 0.02, not
    # by the distance to another row
    from .conftest import assert_refused_or_right
    from .test_verify_reach import _outputs, parse_model

    rules = '(ruleset bad)\n; Gather(x, i) -> x, unsound\n(rewrite (Gather x i a) x :ruleset bad :name "bad-gather")\n'
    w = {"w": np.arange(18, dtype=np.float32).reshape(6, 3)}
    m = parse_model(ROWS_PERMUTED.replace("NOISE", noise))
    assert abs(_outputs(m, w)[1][1, 0] - 15) <= 0.011

    def right(out: onnx.ModelProto) -> None:
        for a, b in zip(_outputs(out, w), _outputs(m, w), strict=True):
            np.testing.assert_allclose(a, b, rtol=0.01, atol=0.03, err_msg="written with exit 0")

    assert_refused_or_right(capsys, tmp_path, m, right, rules=rules)


def test_rows_of_reassociated_scores_in_another_order_pass():
    # the right sibling of the test above: rows gathered by the TopK's indices (a detection's
    # boxes beside its scores) listed in another order among neighbours one float step apart
    # pass, the nudged runs of the original reordering those rows too
    table = np.random.default_rng(5).standard_normal((N, 4)).astype(np.float32)

    def made(folded: bool) -> onnx.ModelProto:
        tail = [oh.make_node("Constant", [], ["table"], value=numpy_helper.from_array(table, "table")),
                oh.make_node("Gather", ["table", "i"], ["boxes"], axis=0)]
        m = sorted_scores(folded, tail=tail, out="i")
        m.graph.output.append(oh.make_tensor_value_info("boxes", TensorProto.FLOAT, ["kk", 4]))
        return m

    original, folded = made(False), made(True)
    f = random_inputs(original)
    e, a = run(original, f, False), run(folded, f, False)
    assert not np.allclose(e["boxes"], a["boxes"])  # some rows in another order
    v = verify(original, folded)
    assert v.status == "passed", v.detail
    assert "rows of tied scores in another order in boxes" in v.detail, v.detail


def _exact_ties(perm=(0, 1, 2)) -> onnx.ModelProto:
    """v, i = TopK([m, m, m + 1]) with m = ReduceMean(x): keys computed from x, two of them tied
    exactly on every draw (no nudge breaks them); the indices through `perm` (another sort's
    tie-breaking where it swaps 0 and 1), boxes = Gather(rows, i)."""
    nodes = [oh.make_node("ReduceMean", ["x"], ["m"], keepdims=1), oh.make_node("Add", ["m", "one"], ["m1"]),
             oh.make_node("Concat", ["m", "m", "m1"], ["c"], axis=0),
             oh.make_node("TopK", ["c", "k"], ["v", "j"]), oh.make_node("Gather", ["perm", "j"], ["i"], axis=0),
             oh.make_node("Gather", ["rows", "i"], ["boxes"], axis=0)]
    inits = {"one": np.array([1], np.float32), "k": np.array([3], np.int64),
             "perm": np.array(perm, np.int64), "rows": np.arange(12, dtype=np.float32).reshape(3, 4)}
    return _model(nodes, inits, [8], [("v", TensorProto.FLOAT, [3]), ("i", TensorProto.INT64, [3]),
                                      ("boxes", TensorProto.FLOAT, [3, 4])])


def test_rows_of_keys_tied_exactly_may_come_in_another_order_where_the_keys_are_computed(monkeypatch):
    # a detector's scores over a 1 x 1 image tie exactly, and the optimized model's sort may
    # list those rows in another order; no nudge breaks such ties, so requiring the nudged runs
    # to reorder the rows too refused Faster R-CNN (exit 1). Keys computed from the inputs (a
    # nudge moves them, in value or in count) let rows tied in them come in another order
    real = ties._nudged_run

    def counted(*args, **kw):  # a detector's nudged run keeps another number of boxes
        out = real(*args, **kw)
        return out if out is None or kw.get("scale") == 0.0 else {k: v[:2] for k, v in out.items()}

    monkeypatch.setattr(ties, "_nudged_run", counted)
    original, other = _exact_ties(), _exact_ties((1, 0, 2))
    f = random_inputs(original)
    a, b = run(original, f), run(other, f)
    assert a["v"].tolist() == b["v"].tolist() and a["i"].tolist() == [2, 0, 1] and b["i"].tolist() == [2, 1, 0]
    v = verify(original, other)
    assert v.status == "passed", v.detail
    assert "rows of tied scores in another order" in v.detail, v.detail
    # the untied row is still compared: its index taken from elsewhere is refused
    assert verify(original, _exact_ties((0, 2, 1))).status == "failed"
