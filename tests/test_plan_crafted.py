"""The memory planner on crafted models: sizes it must not take from declarations that lie,
and sizes it must name as following from input values (eqsat.plan.sizes, eqsat.plan.graph)."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from eqsat.plan import check_plan, execute_plan, plan_model

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


def test_a_custom_ops_output_is_still_sized_by_its_declaration():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Foo", ["r"], ["f"], name="foo", domain="my.domain"),
             helper.make_node("Neg", ["f"], ["y"], name="neg")]
    m = _model(nodes, [V("x", TensorProto.FLOAT, [2, 4])], [V("y", TensorProto.FLOAT, None)],
               [V("f", TensorProto.FLOAT, [3, 4])])
    m.opset_import.append(helper.make_opsetid("my.domain", 1))
    sizes = {t["name"]: t["size"] for t in plan_model(m, {}).to_dict()["tensors"]}
    assert sizes == {"r": 8 * F32, "f": 12 * F32, "y": 12 * F32}, sizes
