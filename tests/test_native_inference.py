"""onnx's shape inference runs in a forked child (eqsat/core/native.py): where it aborts on a
malformed node, eqsat refuses the model instead of dying with it."""

from __future__ import annotations

import os

import onnx
import onnx.parser
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from eqsat.core.native import ShapeInferenceError, infer_shapes
from eqsat.errors import InvalidModelError

pytestmark = [pytest.mark.skipif(not hasattr(os, "fork"), reason="the child is forked: POSIX only"),
              pytest.mark.no_egglog]  # calls no egglog (tests/conftest.py's guard)


def _split4() -> onnx.ModelProto:
    """Split<num_outputs = 3> into four values: onnx's inference indexes past its sizes."""
    g = h.make_graph([h.make_node("Split", ["x"], ["a", "b", "c", "d"], axis=1, num_outputs=3)], "g",
                     [h.make_tensor_value_info("x", TP.FLOAT, [1, 4])],
                     [h.make_tensor_value_info("d", TP.FLOAT, [1, 1])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 20)])


def test_a_crash_of_onnxs_inference_is_an_invalid_model_naming_the_signal():
    with pytest.raises(InvalidModelError, match=r"m.onnx: onnx's shape inference crashed on it \(signal 6, SIGABRT\)"):
        infer_shapes(_split4(), "m.onnx", data_prop=True)


def test_the_answer_is_onnxs_own():
    m = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["": 17]>
        g (float[2, 3] x) => (float[?] y) { s = Shape(x)  c = Cast<to = 1>(s)  y = Add(c, c) }""")
    assert infer_shapes(m, data_prop=True) == onnx.shape_inference.infer_shapes(m, data_prop=True)


def test_an_error_of_onnxs_inference_is_raised_with_its_message():
    m = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["": 17]>
        g (float[2, 3] x, float[4] z) => (float[2, 3] y) { y = Add(x, z) }""")
    with pytest.raises(onnx.shape_inference.InferenceError):
        onnx.shape_inference.infer_shapes(m, strict_mode=True)
    with pytest.raises(ShapeInferenceError, match="Incompatible dimensions"):
        infer_shapes(m, strict_mode=True)


def test_the_child_serves_again_after_a_crash():
    m = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["": 17]>
        g (float[2, 3] x) => (float[2, 3] y) { y = Relu(x) }""")
    assert infer_shapes(m) == onnx.shape_inference.infer_shapes(m)
    with pytest.raises(InvalidModelError):
        infer_shapes(_split4(), data_prop=True)
    for _ in range(3):
        assert infer_shapes(m) == onnx.shape_inference.infer_shapes(m)
