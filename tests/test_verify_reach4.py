"""Integer inputs compared against constants that verification's draws never reach: integers are
drawn in [-9, 9], at their type's extremes and as sizes of 0 to 3, never at or next to the 5000
a graph compares them with, so a rewrite of such a comparison (its constant moved by one, taken
for always false) passed every run. Each test crafts the comparison and checks that verification
fails the wrong program, passes the right one, and that `eqsat optimize` with a user's unsound
rule file refuses the program (outputs under onnxruntime)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

from .conftest import assert_wrong_never_written
from .test_verify_reach import _outputs


def _const(name: str, value, dtype=np.int64) -> onnx.NodeProto:
    return h.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, dtype), name))


def _checked(g: onnx.GraphProto) -> onnx.ModelProto:
    """`g` as an opset-18 model that onnx's checker accepts."""
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)], ir_version=8)
    onnx.checker.check_model(m)
    return m


def _model(nodes, inputs, inits=(), n: int = 4) -> onnx.ModelProto:
    ins = [h.make_tensor_value_info(name, elem, [n]) for name, elem in inputs]
    ins += [h.make_tensor_value_info(x, TP.FLOAT, [n]) for x in ("a", "b")]
    g = h.make_graph(nodes, "g", ins, [h.make_tensor_value_info("y", TP.FLOAT, [n])], list(inits))
    return _checked(g)


def _where(cond: list[onnx.NodeProto], inputs=(("i", TP.INT64),), inits=()) -> onnx.ModelProto:
    return _model([*cond, h.make_node("Where", ["c", "a", "b"], ["y"])], list(inputs), inits)


def _compare(op: str, k: int, elem=TP.INT64, dtype=np.int64) -> onnx.ModelProto:
    return _where([_const("k", k, dtype), h.make_node(op, ["i", "k"], ["c"])], [("i", elem)])


_FEEDS = {"a": np.ones(4, np.float32), "b": np.zeros(4, np.float32)}


def test_a_where_on_an_integer_equal_to_a_constant_is_refused(capsys, tmp_path):
    # Where(i == 5000, a, b) -> b passed every draw (i in [-9, 9] and at int64's extremes)
    m = _compare("Equal", 5000)
    assert _outputs(m, {"i": np.full(4, 5000, np.int64), **_FEEDS})[0].tolist() == [1] * 4
    rules = ("(ruleset bad)\n; Where(c, a, b) -> b, unsound where c holds\n"
             '(rewrite (Where c a b) b :ruleset bad :name "bad-where-else")\n')
    wrong = _model([h.make_node("Identity", ["b"], ["y"])], [("i", TP.INT64)])
    v = assert_wrong_never_written(capsys, tmp_path, m, wrong, rules=rules)
    assert "inputs at the constants they are compared with" in v.detail, v.detail


@pytest.mark.parametrize(("op", "k", "moved"), [
    ("Equal", 5000, 5001), ("Greater", 300, 301), ("Greater", 300, 299), ("Less", 300, 301), ("Less", 300, 299),
    ("LessOrEqual", 300, 301), ("LessOrEqual", 300, 299), ("GreaterOrEqual", 300, 301),
    ("GreaterOrEqual", 300, 299)])
@pytest.mark.parametrize("elem", [TP.INT64, TP.INT32, TP.UINT16])
def test_a_comparison_against_a_constant_moved_by_one_is_failed(op, k, moved, elem):
    from eqsat.verification import verify

    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))
    m, wrong = _compare(op, k, elem, dtype), _compare(op, moved, elem, dtype)
    assert verify(m, m).status == "passed"
    v = verify(m, wrong)
    assert v.status == "failed", v.detail


def test_an_equal_after_a_cast_from_float_is_failed():
    # Equal(Cast(x, int64), 5000): a float input, cast to integers before the comparison
    from eqsat.verification import verify

    def made(k):
        return _where([_const("k", k), h.make_node("Cast", ["x"], ["xi"], to=TP.INT64),
                       h.make_node("Equal", ["xi", "k"], ["c"])], [("x", TP.FLOAT)])

    assert verify(made(5000), made(5000)).status == "passed"
    assert verify(made(5000), made(5001)).status == "failed"


def test_a_comparison_with_an_initializer_through_reshape_is_failed():
    # Where(Reshape(Unsqueeze(i)) == k, a, b), k an initializer
    from eqsat.verification import verify

    def made(k):
        inits = [numpy_helper.from_array(np.array([k], np.int64), "k"),
                 numpy_helper.from_array(np.array([0], np.int64), "ax"),
                 numpy_helper.from_array(np.array([4], np.int64), "s")]
        return _where([h.make_node("Unsqueeze", ["i", "ax"], ["u"]), h.make_node("Reshape", ["u", "s"], ["r"]),
                       h.make_node("Equal", ["r", "k"], ["c"])], inits=inits)

    assert verify(made(777), made(777)).status == "passed"
    assert verify(made(777), made(778)).status == "failed"


def test_a_mod_compared_with_zero_is_failed():
    # Mod(i, 5000) == 0 taken for i == 0: the two differ at i = 5000 alone among small values
    from eqsat.verification import verify

    right = _where([_const("k", 5000), _const("z", 0), h.make_node("Mod", ["i", "k"], ["r"]),
                    h.make_node("Equal", ["r", "z"], ["c"])])
    wrong = _where([_const("z", 0), h.make_node("Equal", ["i", "z"], ["c"])])
    assert verify(right, right).status == "passed"
    assert verify(right, wrong).status == "failed"


def _if_model(k: int) -> onnx.ModelProto:
    # If(c): then Where(i == k, a, b) with k a constant of the branch; else b
    then = h.make_graph([_const("bk", k), h.make_node("Equal", ["i", "bk"], ["bc"]),
                         h.make_node("Where", ["bc", "a", "b"], ["t"])], "then", [],
                        [h.make_tensor_value_info("t", TP.FLOAT, [4])])
    other = h.make_graph([h.make_node("Identity", ["b"], ["e"])], "else", [],
                         [h.make_tensor_value_info("e", TP.FLOAT, [4])])
    return _if_raw(then, other)


def _if_raw(then, other) -> onnx.ModelProto:
    ins = [h.make_tensor_value_info("i", TP.INT64, [4]), h.make_tensor_value_info("c", TP.BOOL, []),
           *(h.make_tensor_value_info(x, TP.FLOAT, [4]) for x in ("a", "b"))]
    g = h.make_graph([h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], "g", ins,
                     [h.make_tensor_value_info("y", TP.FLOAT, [4])])
    return _checked(g)


def test_a_comparison_inside_an_if_branch_is_failed():
    from eqsat.verification import verify

    assert verify(_if_model(5000), _if_model(5000)).status == "passed"
    v = verify(_if_model(5000), _if_model(5001))
    assert v.status == "failed", v.detail


def test_a_right_program_with_comparisons_passes_and_says_so():
    # a model without such comparisons runs no such case; one with them passes against itself
    from eqsat.verification import verify

    plain = _where([_const("k", 5000), h.make_node("Add", ["i", "k"], ["s"]), _const("z", 3),
                    h.make_node("Greater", ["s", "i"], ["c"])])
    assert "beside the constants" not in verify(plain, plain).detail
    m = _compare("Greater", 300)
    v = verify(m, m)
    assert v.status == "passed" and "inputs at the constants they are compared with" in v.detail, \
        v.detail


def test_a_float_compared_with_a_constant_moved_by_one_is_failed():
    # Greater(x, 300.0) -> Greater(x, 301.0) on a float input: x = 300.25 tells them apart
    from eqsat.verification import verify

    def made(k):
        return _where([_const("k", k, np.float32), h.make_node("Greater", ["x", "k"], ["c"])], [("x", TP.FLOAT)])

    assert verify(made(300.0), made(300.0)).status == "passed"
    assert verify(made(300.0), made(301.0)).status == "failed"


def test_an_integer_plus_a_constant_compared_is_failed():
    # Equal(i + 1, 5000) holds at i = 4999
    from eqsat.verification import verify

    def made(k):
        return _where([_const("one", 1), _const("k", k), h.make_node("Add", ["i", "one"], ["s"]),
                       h.make_node("Equal", ["s", "k"], ["c"])])

    assert verify(made(5000), made(5000)).status == "passed"
    assert verify(made(5000), made(5001)).status == "failed"


def _if_on(k: int) -> onnx.ModelProto:
    # If(Squeeze(i == k)): a else b
    branches = [h.make_graph([h.make_node("Identity", [x], [f"o{x}"])], f"g{x}", [],
                             [h.make_tensor_value_info(f"o{x}", TP.FLOAT, [4])]) for x in ("a", "b")]
    ins = [h.make_tensor_value_info("i", TP.INT64, [1]), *(h.make_tensor_value_info(x, TP.FLOAT, [4]) for x in "ab")]
    g = h.make_graph([_const("k", [k]), h.make_node("Equal", ["i", "k"], ["c1"]), h.make_node("Squeeze", ["c1"], ["c"]),
                      h.make_node("If", ["c"], ["y"], then_branch=branches[0], else_branch=branches[1])], "g", ins,
                     [h.make_tensor_value_info("y", TP.FLOAT, [4])])
    return _checked(g)


def test_an_if_on_an_integer_equal_to_a_constant_is_failed():
    # a scalar-like i: the one element takes 5000 in one run and 5001 in the other
    from eqsat.verification import verify

    assert verify(_if_on(5000), _if_on(5000)).status == "passed"
    assert verify(_if_on(5000), _if_on(5001)).status == "failed"


def _loop_on(k: int) -> onnx.ModelProto:
    # Loop(1 trip, carried v = i): the body's v == k picks a or b
    body = h.make_graph([_const("bk", k), h.make_node("Equal", ["v", "bk"], ["bc"]),
                         h.make_node("Where", ["bc", "a", "b"], ["w"]), h.make_node("Identity", ["cond"], ["co"]),
                         h.make_node("Identity", ["v"], ["vo"])], "body",
                        [h.make_tensor_value_info("it", TP.INT64, []), h.make_tensor_value_info("cond", TP.BOOL, []),
                         h.make_tensor_value_info("v", TP.INT64, [4])],
                        [h.make_tensor_value_info("co", TP.BOOL, []), h.make_tensor_value_info("vo", TP.INT64, [4]),
                         h.make_tensor_value_info("w", TP.FLOAT, [4])])
    ins = [h.make_tensor_value_info("i", TP.INT64, [4]), *(h.make_tensor_value_info(x, TP.FLOAT, [4]) for x in "ab")]
    nodes = [_const("m", 1), h.make_node("Constant", [], ["t"], value=h.make_tensor("t", TP.BOOL, [], [True])),
             h.make_node("Loop", ["m", "t", "i"], ["vf", "ws"], body=body), h.make_node("Squeeze", ["ws", "z"], ["y"])]
    g = h.make_graph([_const("z", [0]), *nodes], "g", ins, [h.make_tensor_value_info("y", TP.FLOAT, [4])])
    return _checked(g)


def test_a_loop_carried_integer_compared_in_the_body_is_failed():
    from eqsat.verification import verify

    assert verify(_loop_on(5000), _loop_on(5000)).status == "passed"
    assert verify(_loop_on(5000), _loop_on(5001)).status == "failed"


@pytest.mark.parametrize(("op", "k", "moved"), [("Less", 300, 299), ("GreaterOrEqual", 300, 299)])
def test_a_one_element_input_takes_the_value_below_a_constant(op, k, moved):
    # i of one element takes one value a run: 300 and 301 alone left Less(i, 300) -> Less(i, 299) unseen
    # (an input of more elements takes 299 beside 300 in one run)
    from eqsat.verification import verify

    def made(c):
        nodes = [_const("k", c), h.make_node(op, ["i", "k"], ["c"]), h.make_node("Where", ["c", "a", "b"], ["y"])]
        g = h.make_graph(nodes, "g", [h.make_tensor_value_info("i", TP.INT64, [1]),
                               *(h.make_tensor_value_info(x, TP.FLOAT, [4]) for x in "ab")],
                         [h.make_tensor_value_info("y", TP.FLOAT, [4])])
        return h.make_model(g, opset_imports=[h.make_opsetid("", 18)], ir_version=8)

    assert verify(made(k), made(k)).status == "passed"
    assert verify(made(k), made(moved)).status == "failed"


def test_an_index_compared_with_a_pad_id_is_failed():
    # ids index a table of 30000 rows and Where(ids == 29999, 0, row) masks a pad id: ids were drawn
    # in [-30000, 30000), 29999 never among 4 of them, so Equal(ids, 29999) -> Equal(ids, 29998) passed
    from eqsat.verification import verify

    def made(k):
        table = numpy_helper.from_array(np.arange(30000, dtype=np.float32).reshape(30000, 1), "t")
        g = h.make_graph([_const("k", k), _const("zero", 0.0, np.float32), h.make_node("Gather", ["t", "ids"], ["r"]),
                          h.make_node("Unsqueeze", ["ids", "ax"], ["u"]), h.make_node("Equal", ["u", "k"], ["c"]),
                          h.make_node("Where", ["c", "zero", "r"], ["y"])], "g",
                         [h.make_tensor_value_info("ids", TP.INT64, [4])],
                         [h.make_tensor_value_info("y", TP.FLOAT, [4, 1])],
                         [table, numpy_helper.from_array(np.array([1], np.int64), "ax")])
        return _checked(g)

    assert verify(made(29999), made(29999)).status == "passed"
    assert verify(made(29999), made(29998)).status == "failed"


def test_an_overridable_integer_compared_with_a_constant_is_failed():
    # w is overridable with the default 1..4 (reversed in the other run): never 5000
    from eqsat.verification import verify

    from .test_verify_reach2 import _with_default

    def made(k):
        return _with_default([_const("k", k), h.make_node("Equal", ["w", "k"], ["c"]),
                              h.make_node("Where", ["c", "a", "b"], ["y"])],
                             [*(h.make_tensor_value_info(x, TP.FLOAT, [4]) for x in "ab"),
                              h.make_tensor_value_info("w", TP.INT64, [4])],
                             h.make_tensor_value_info("y", TP.FLOAT, [4]), np.arange(1, 5, dtype=np.int64))

    assert verify(made(5000), made(5000)).status == "passed"
    assert verify(made(5000), made(5001)).status == "failed"


@pytest.mark.parametrize(("arith", "k", "moved"), [
    ("Neg", -5000, -5001),  # Equal(-i, -5000): i = 5000
    ("Mul", 10000, 10002),  # Equal(i * 2, 10000)
    ("SubFrom", 1000, 1001),  # Equal(6000 - i, 1000)
    ("Div", 2500, 2501),  # Equal(i / 2, 2500): i = 5000 or 5001
    ("MulAdd", 15007, 15010),  # Equal(i * 3 + 7, 15007)
])
def test_a_comparison_after_scaling_or_negating_the_input_is_failed(arith, k, moved):
    # the input reaches the comparison through Neg, a product or quotient by a constant, or a
    # constant minus it: the constant it is compared with is not the input's value there
    from eqsat.verification import verify

    def made(c):
        ops = {"Neg": [h.make_node("Neg", ["i"], ["v"])],
               "Mul": [_const("two", 2), h.make_node("Mul", ["i", "two"], ["v"])],
               "SubFrom": [_const("big", 6000), h.make_node("Sub", ["big", "i"], ["v"])],
               "Div": [_const("two", 2), h.make_node("Div", ["i", "two"], ["v"])],
               "MulAdd": [_const("three", 3), _const("seven", 7), h.make_node("Mul", ["three", "i"], ["t"]),
                          h.make_node("Add", ["t", "seven"], ["v"])]}[arith]
        return _where([*ops, _const("k", c), h.make_node("Equal", ["v", "k"], ["c"])])

    assert verify(made(k), made(k)).status == "passed"
    v = verify(made(k), made(moved))
    assert v.status == "failed", v.detail


@pytest.mark.parametrize("late", [300, 3000])
def test_a_value_a_loop_reads_only_past_trip_256_is_verified(capsys, tmp_path, late):
    # the body adds the main graph's v = x * x only once its trip counter passes `late`, and
    # forced trip counts stopped at 256 (body constants above it were not counted): a rule
    # file's x * x -> x was written with exit 0. The counter's comparison with `late` decides
    from .test_verify_reach import BAD_SQUARE, _never_written_wrong, parse_model

    m = parse_model(f"""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[3] x, int64 m) => (float[3] z) {{
            v = Mul(x, x)
            t = Constant <value = bool {{1}}> ()
            z = Loop(m, t, x) <body = b (int64 i, bool c, float[3] acc) => (bool co, float[3] ao) {{
                    k = Constant <value = int64 {{{late}}}> ()
                    after = Greater(i, k)
                    co = Identity(c)
                    w = Add(acc, v)
                    ao = Where(after, w, acc)
                }}>
        }}""")
    feeds = {"x": np.array([1, 2, 3], np.float32), "m": np.array(late + 2, np.int64)}
    assert _outputs(m, feeds)[0].tolist() == [2, 6, 12]
    _never_written_wrong(capsys, tmp_path, m, BAD_SQUARE, feeds)


def test_a_value_a_scan_reads_only_past_iteration_256_is_verified(capsys, tmp_path):
    # the sibling over a Scan: its body's carried counter passes 300 only on a scan longer
    # than the 256 rows forced, so a rule file's x * x -> x of the value it adds then was
    # written with exit 0
    from .conftest import optimize_cli
    from .test_verify_reach import BAD_SQUARE, parse_model
    from .test_verify_reach2 import SCAN

    m = parse_model(SCAN.replace("int64 {10}", "int64 {300}"))
    feeds = {"x": np.zeros((302, 3), np.float32), "y": np.array([1, 2, 3], np.float32)}
    assert _outputs(m, feeds)[0].tolist() == [1, 4, 9]
    rc, err, out = optimize_cli(capsys, tmp_path, m, rules=BAD_SQUARE)
    assert rc == 1 and out is None, err


def test_two_ifs_wrong_only_where_one_is_taken_and_the_other_not_are_refused(capsys, tmp_path):
    # y1 = If(i == 5000, -|x| - 1, |x| + 1), y2 = If(j == 7000, 2|x| + 2, 0), z = Relu(y1 + y2): the
    # Relu changes something only where the first If is taken and the second is not. Draws never
    # reach the constants, the edge runs put i at 5000 and j at 7000 together or neither, and
    # the forced runs force both Ifs (one depth) alike, so a rule file's Relu(y) -> y was
    # written with exit 0 (y1 where the original gives 0 at i = 5000, j = 0)
    from .test_verify_reach import BAD_SQUARE, _never_written_wrong, parse_model
    from .test_verify_reach5 import two_ifs

    m = parse_model(two_ifs("float[3] x, int64[1] i, int64[1] j", """k1 = Constant <value = int64[1] {5000}> ()
        k2 = Constant <value = int64[1] {7000}> ()
        e1 = Equal(i, k1)
        c1 = Squeeze(e1)
        e2 = Equal(j, k2)
        c2 = Squeeze(e2)""", w="x"))
    feeds = {"x": np.array([1, 2, 3], np.float32), "i": np.array([5000], np.int64), "j": np.array([0], np.int64)}
    assert _outputs(m, feeds)[0].tolist() == [0, 0, 0]
    rules = BAD_SQUARE.replace("Mul x x", "Relu x").replace("Mul(x, x)", "Relu(x)")
    _never_written_wrong(capsys, tmp_path, m, rules, feeds)
