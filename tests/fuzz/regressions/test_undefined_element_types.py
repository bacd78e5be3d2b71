"""Regression (issue 26, found by tests/fuzz model_file_is_clean): a graph input whose element
type is not a real one (0, UNDEFINED; or 99) and feeds MatMul -> Add (-> Relu):

- `eqsat optimize` never ends (over 100 s; killed): onnxruntime's symbolic shape inference,
  which eqsat/shapes.py runs with auto_merge=True after a first try, loops forever in
  _infer_impl on this model;
- `eqsat plan` dies with `KeyError: 99` (eqsat/plan/sizes.py itemsize,
  onnx.helper.tensor_dtype_to_np_dtype).

- `eqsat optimize` with element type 99 writes a model (exit 0, "verification not
  possible").

Expected: promptly, one error line naming the input and its element type (the onnx checker
accepts the model; exit 2, or 1 from plan), nothing written."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

from .helpers import assert_clean_error, only


def _model(elem_type: int) -> onnx.ModelProto:
    """x[N, 2, 4] of element type `elem_type` -> MatMul -> Add -> Relu -> y."""
    w = numpy_helper.from_array(np.ones((4, 1), np.float32), "w")
    b = numpy_helper.from_array(np.ones((1,), np.float32), "b")
    nodes = [h.make_node("MatMul", ["x", "w"], ["a"]), h.make_node("Add", ["b", "a"], ["s"]),
             h.make_node("Relu", ["s"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, ["N", 2, 4])],
                     [h.make_tensor_value_info("y", TP.FLOAT, ["N", 2, 1])], [w, b])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 7
    m.graph.input[0].type.tensor_type.elem_type = elem_type
    return m


@pytest.mark.parametrize("elem_type", [0, 99])
@pytest.mark.parametrize("command", ["optimize", "plan"])
def test_an_input_of_no_element_type_is_refused_promptly(tmp_path, elem_type, command):
    onnx.save(_model(elem_type), tmp_path / "m.onnx")
    args = {"optimize": ["optimize", "m.onnx", "-o", "o.onnx", "-q"],
            "plan": ["plan", "m.onnx", "-q", "--dim", "N=2", "-o", "p.json"]}[command]
    try:
        p = subprocess.run([sys.executable, "-m", "eqsat", *args], cwd=tmp_path, capture_output=True, text=True,
                           timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"eqsat {command} did not finish in 60 s")
    assert_clean_error(p.returncode, p.stderr, 2 if command == "optimize" else (1, 2))
    only(tmp_path, "m.onnx")
