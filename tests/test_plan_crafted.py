"""The memory planner on crafted models: sizes it must not take from declarations that lie,
and sizes it must name as following from input values (eqsat.plan.sizes, eqsat.plan.graph)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from eqsat.plan import check_plan, execute_plan, plan_model

pytestmark = pytest.mark.no_egglog  # calls no egglog (tests/conftest.py's guard)

F32 = 4
V = helper.make_tensor_value_info


def _model(nodes, inputs, outputs, value_info=(), inits=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits), value_info=list(value_info))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _relu_neg_model(value_info=(), y_shape=None) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Neg", ["r"], ["n"], name="neg"),
             helper.make_node("Relu", ["x"], ["r2"], name="relu2"),
             helper.make_node("Add", ["n", "r2"], ["y"], name="add")]
    return _model(nodes, [V("x", TensorProto.FLOAT, [4])], [V("y", TensorProto.FLOAT, y_shape)], value_info)


@pytest.mark.parametrize("case", ["value_info smaller", "value_info larger", "output smaller"])
def test_a_declared_shape_that_lies_does_not_size_a_tensor(case):
    # onnxruntime runs a model whose value_info or outputs declare a wrong shape (it warns);
    # the planner sized r (float[4]) by a declared float[1]: 4 bytes in the arena, and r2,
    # live at the same time, was placed over the rest of it (the proof by execution failed,
    # `eqsat plan` without --execute wrote the plan, exit 0)
    vi = {"value_info smaller": [V("r", TensorProto.FLOAT, [1])],
          "value_info larger": [V("r", TensorProto.FLOAT, [8])], "output smaller": []}[case]
    m = _relu_neg_model(vi, [1] if case == "output smaller" else None)
    p = plan_model(m, {})
    check_plan(p)
    sizes = {t["name"]: t["size"] for t in p.to_dict()["tensors"]}
    assert sizes == {"r": 4 * F32, "n": 4 * F32, "r2": 4 * F32, "y": 4 * F32}, sizes
    ex = execute_plan(m, p)
    assert ex.status == "passed", ex.detail


def _lying_beside(op: str) -> onnx.ModelProto:
    """x[1, 8, 4, 4] through a node onnx's inference does not size, whose output b is declared
    float[1, 1, 1, 1], with a tensor live beside it."""
    if op == "nchwc ReorderInput":
        mid = [helper.make_node("ReorderInput", ["a"], ["b"], name="ri", domain="com.microsoft.nchwc"),
               helper.make_node("ReorderOutput", ["b"], ["c"], name="ro", domain="com.microsoft.nchwc", channels=8)]
        opsets, functions = [helper.make_opsetid("com.microsoft.nchwc", 1)], []
    else:  # a model-local function
        fn = helper.make_function("local", "Twice", ["i"], ["o"], [helper.make_node("Relu", ["i"], ["r"]),
                                                                  helper.make_node("Neg", ["r"], ["o"])],
                                  [helper.make_opsetid("", 17)])
        mid = [helper.make_node("Twice", ["a"], ["b"], name="twice", domain="local"),
               helper.make_node("Neg", ["b"], ["c"], name="neg")]
        opsets, functions = [helper.make_opsetid("local", 1)], [fn]
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"), *mid,
             helper.make_node("Relu", ["x"], ["r2"], name="relu2"),
             helper.make_node("Add", ["c", "r2"], ["y"], name="add")]
    s = [1, 8, 4, 4]
    m = _model(nodes, [V("x", TensorProto.FLOAT, s)], [V("y", TensorProto.FLOAT, s)],
               [V("b", TensorProto.FLOAT, [1] * 4)])
    m.opset_import.extend(opsets)
    m.functions.extend(functions)
    return m


@pytest.mark.parametrize("op", ["nchwc ReorderInput", "local function"])
def test_a_declaration_that_lies_about_an_op_onnxruntime_runs_does_not_size_it(op):
    # onnx's inference knows neither com.microsoft.nchwc nor (in this form) the function: b
    # was sized by its declaration, 4 bytes for 512
    m = _lying_beside(op)
    p = plan_model(m, {})
    check_plan(p)
    size = {t["name"]: t["size"] for t in p.to_dict()["tensors"]}["b"]
    assert size >= 128 * F32  # the channels padded to the machine's block for nchwc
    ex = execute_plan(m, p)
    assert ex.status == "passed", ex.detail


def test_a_custom_ops_output_is_still_sized_by_its_declaration():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Foo", ["r"], ["f"], name="foo", domain="my.domain"),
             helper.make_node("Neg", ["f"], ["y"], name="neg")]
    m = _model(nodes, [V("x", TensorProto.FLOAT, [2, 4])], [V("y", TensorProto.FLOAT, None)],
               [V("f", TensorProto.FLOAT, [3, 4])])
    m.opset_import.append(helper.make_opsetid("my.domain", 1))
    sizes = {t["name"]: t["size"] for t in plan_model(m, {}).to_dict()["tensors"]}
    assert sizes == {"r": 8 * F32, "f": 12 * F32, "y": 12 * F32}, sizes


def _shaped_by(case: str) -> onnx.ModelProto:
    """A tensor whose shape an input's (or an overridable default's) values give."""
    x, s = V("x", TensorProto.FLOAT, [4]), V("s", TensorProto.INT64, [2])
    y = V("y", TensorProto.FLOAT, None)
    relu = helper.make_node("Relu", ["x"], ["r"], name="relu")
    if case == "Expand by an input":
        return _model([relu, helper.make_node("Expand", ["r", "s"], ["e"], name="e"),
                       helper.make_node("Neg", ["e"], ["y"], name="neg")], [x, s], [y])
    if case == "ConstantOfShape of an input":
        return _model([relu, helper.make_node("ConstantOfShape", ["s"], ["e"], name="e"),
                       helper.make_node("Neg", ["e"], ["y"], name="neg")], [x, s], [y])
    if case == "Tile by an input plus one":
        one = onnx.numpy_helper.from_array(np.ones(1, np.int64), "one")
        return _model([relu, helper.make_node("Add", ["k", "one"], ["k1"], name="k1"),
                       helper.make_node("Tile", ["r", "k1"], ["e"], name="e"),
                       helper.make_node("Neg", ["e"], ["y"], name="neg")],
                      [x, V("k", TensorProto.INT64, [1])], [y], inits=[one])
    # Reshape to an overridable default: an initializer also listed as an input
    shape = onnx.numpy_helper.from_array(np.array([2, 2], np.int64), "s")
    return _model([relu, helper.make_node("Reshape", ["r", "s"], ["e"], name="e"),
                   helper.make_node("Neg", ["e"], ["y"], name="neg")], [x, s], [y], inits=[shape])


@pytest.mark.parametrize("case", ["Expand by an input", "ConstantOfShape of an input", "Tile by an input plus one",
                                  "Reshape to an overridable default"])
def test_a_size_an_input_value_gives_is_named_as_value_dependent(case):
    # e's size follows from the values of s (or k): measured on one random input (s drawn
    # [0, 0] gave e 0 bytes) without a warning, and Expand(r, [3, 4]) overflowed the arena
    p = plan_model(_shaped_by(case), {})
    dep = p.value_dependent
    assert dep.get("e") == "e" and dep.get("y") == "e", dep
    assert "r" not in dep


def test_sizes_that_follow_input_shapes_only_are_not_value_dependent():
    # Expand to the shape of an input: inferred, no run; Reshape to a constant: inferred
    x, z = V("x", TensorProto.FLOAT, [4]), V("z", TensorProto.FLOAT, [3, 4])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Shape", ["z"], ["s"], name="shape"),
             helper.make_node("Expand", ["r", "s"], ["e"], name="e"), helper.make_node("Neg", ["e"], ["y"], name="neg")]
    p = plan_model(_model(nodes, [x, z], [V("y", TensorProto.FLOAT, None)]), {})
    assert p.value_dependent == {}


def test_an_if_whose_branches_differ_in_shape_is_value_dependent_whatever_its_declaration():
    # then gives x[4], else x[:2]; y declared float[2]: the declaration sized y (8 bytes) with
    # no warning, and c = True wrote 16
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["o"])], "then", [], [V("o", TensorProto.FLOAT, [4])])
    ends = [onnx.numpy_helper.from_array(np.array([k], np.int64), n) for n, k in (("st", 0), ("en", 2))]
    else_g = helper.make_graph([helper.make_node("Slice", ["x", "st", "en"], ["o"])], "else", [],
                               [V("o", TensorProto.FLOAT, [2])], initializer=ends)
    nodes = [helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g),
             helper.make_node("Neg", ["y"], ["z"], name="neg")]
    m = _model(nodes, [V("x", TensorProto.FLOAT, [4]), V("c", TensorProto.BOOL, [])], [V("z", TensorProto.FLOAT, None)],
               [V("y", TensorProto.FLOAT, [2])])
    assert plan_model(m, {}).value_dependent == {"y": "if", "z": "if"}


@pytest.mark.parametrize("size", [2.5, True, -1, "3"])
def test_a_dimension_that_is_not_a_size_is_a_usage_error(size):
    # eqsat.plan(dims={"N": 2.5}) planned for N = 2 (and True for 1); -1 was numpy's ValueError
    from eqsat.errors import UsageError

    m = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [V("x", TensorProto.FLOAT, ["N", 4])],
               [V("y", TensorProto.FLOAT, ["N", 4])])
    with pytest.raises(UsageError, match="dimension 'N'"):
        plan_model(m, {"N": size})
    assert plan_model(m, {"N": np.int64(3)}).to_dict()["tensors"][0]["size"] == 12 * F32


def _concat_overridable(declared) -> onnx.ModelProto:
    """Concat(x[4], w) with w overridable, its default float[4], declared `declared`."""
    w = onnx.numpy_helper.from_array(np.ones(4, np.float32), "w")
    nodes = [helper.make_node("Concat", ["x", "w"], ["c"], name="concat", axis=0),
             helper.make_node("Neg", ["c"], ["y"], name="neg")]
    return _model(nodes, [V("x", TensorProto.FLOAT, [4]), V("w", TensorProto.FLOAT, declared)],
                  [V("y", TensorProto.FLOAT, None)], inits=[w])


def test_an_overridable_input_is_planned_for_the_shape_its_dimensions_are_given():
    # w declared float[K], its default float[4]: with K = 6 given, c was still sized by the
    # default (32 bytes for 40) and the proof ran on the default
    m = _concat_overridable(["K"])
    p = plan_model(m, {"K": 6})
    sizes = {t["name"]: t["size"] for t in p.to_dict()["tensors"]}
    assert sizes == {"c": 10 * F32, "y": 10 * F32}, sizes
    assert p.to_dict()["dims"] == {"K": 6}
    ex = execute_plan(m, p)
    assert ex.status == "passed", ex.detail
    # not given: the default's size, and the plan says so
    p = plan_model(m, {})
    assert p.to_dict()["dims"] == {"K": 4}
    assert {t["name"]: t["size"] for t in p.to_dict()["tensors"]}["c"] == 8 * F32
    # declared without a shape: the default's
    assert {t["name"]: t["size"] for t in plan_model(_concat_overridable(None), {}).to_dict()["tensors"]}["c"] == 32
