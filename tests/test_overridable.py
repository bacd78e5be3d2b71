"""Graph inputs that are also initializers (IR >= 4): a caller may feed them, so they are
inputs everywhere (shape inference, the oracles, every rule's guards), and their initializer
is only a default. Each model here is optimized with the default rules and then run with the
default and with other values fed for those inputs; the outputs must match the original's."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

from eqsat.core.initializers import fixed_initializers, overridable_inputs
from eqsat.verification import compare, run

from .conftest import optimized


def _model(nodes, inputs, outputs, inits, ir_version=8, opset=18):
    g = h.make_graph(nodes, "g", inputs, outputs, inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=ir_version)
    onnx.checker.check_model(m)
    return m


def _same_outputs(m, out, feeds):
    bad = compare(run(m, feeds, optimize=False), run(out, feeds, optimize=False), 1e-5, 1e-6)
    assert not bad, "; ".join(map(str, bad))


def _tensor(name, dims=None, elem=TP.FLOAT):
    return h.make_tensor_value_info(name, elem, dims)


def test_reshape_target_fed_by_the_caller_is_not_folded():
    # Reshape(x [2, 3], s = [2, 3] by default): a no-op only while s keeps its default
    m = _model([h.make_node("Reshape", ["x", "s"], ["y"])],
               [_tensor("x", [2, 3]), _tensor("s", [2], TP.INT64)], [_tensor("y", ["a", "b"])],
               [numpy_helper.from_array(np.array([2, 3], np.int64), "s")])
    out = optimized(m).model
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    _same_outputs(m, out, {"x": x})
    _same_outputs(m, out, {"x": x, "s": np.array([3, 2], np.int64)})


def test_slice_bounds_fed_by_the_caller_are_not_folded():
    # Slice(x [4], 0, e = 4 by default): the whole of x only while e keeps its default
    m = _model([h.make_node("Slice", ["x", "b", "e"], ["t"]), h.make_node("Relu", ["t"], ["y"])],
               [_tensor("x", [4]), _tensor("e", [1], TP.INT64)], [_tensor("y", ["n"])],
               [numpy_helper.from_array(np.array([0], np.int64), "b"),
                numpy_helper.from_array(np.array([4], np.int64), "e")])
    out = optimized(m).model
    x = np.array([1, -2, 3, -4], np.float32)
    _same_outputs(m, out, {"x": x})
    _same_outputs(m, out, {"x": x, "e": np.array([2], np.int64)})


def test_shape_arithmetic_on_an_overridable_value_is_not_folded():
    # t = Reshape(x, Concat(Gather(Shape(x), 0), k)) with k = [12] by default, then
    # y = Reshape(t, [2, 12]): a no-op only while k keeps its default (k = [3, 4] keeps t 3-D)
    m = _model([h.make_node("Shape", ["x"], ["sh"]),
                h.make_node("Gather", ["sh", "i0"], ["d0"], axis=0),
                h.make_node("Concat", ["d0", "k"], ["tgt"], axis=0),
                h.make_node("Reshape", ["x", "tgt"], ["t"]),
                h.make_node("Reshape", ["t", "flat"], ["y"])],
               [_tensor("x", [2, 3, 4]), _tensor("k", ["kn"], TP.INT64)], [_tensor("y", ["a", "b"])],
               [numpy_helper.from_array(np.array([0], np.int64), "i0"),
                numpy_helper.from_array(np.array([12], np.int64), "k"),
                numpy_helper.from_array(np.array([2, 12], np.int64), "flat")])
    out = optimized(m).model
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    _same_outputs(m, out, {"x": x})
    _same_outputs(m, out, {"x": x, "k": np.array([3, 4], np.int64)})


def test_split_sizes_fed_by_the_caller():
    # a, b = Split(x [6], sizes = [3, 3] by default); y = Slice(a, 0, 3): a no-op only while
    # the sizes keep their default (shape inference must not take them)
    m = _model([h.make_node("Split", ["x", "sz"], ["a", "b"]), h.make_node("Slice", ["a", "s0", "s3"], ["y"]),
                h.make_node("Sigmoid", ["b"], ["z"])],
               [_tensor("x", [6]), _tensor("sz", [2], TP.INT64)], [_tensor("y", ["m"]), _tensor("z", ["n"])],
               [numpy_helper.from_array(np.array([3, 3], np.int64), "sz"),
                numpy_helper.from_array(np.array([0], np.int64), "s0"),
                numpy_helper.from_array(np.array([3], np.int64), "s3")])
    out = optimized(m).model
    x = np.linspace(-1, 1, 6).astype(np.float32)
    _same_outputs(m, out, {"x": x})
    _same_outputs(m, out, {"x": x, "sz": np.array([4, 2], np.int64)})


def test_weights_kept_as_inputs_stay_inputs_through_fusions():
    # an older PyTorch export (keep_initializers_as_inputs): Conv + BatchNormalization +
    # Relu whose weights are all overridable; the fusions may not bake their defaults in
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    vals = {"w": w, "bias": rng.standard_normal(4).astype(np.float32),
            "scale": rng.random(4).astype(np.float32) + 0.5, "shift": rng.standard_normal(4).astype(np.float32),
            "mean": rng.standard_normal(4).astype(np.float32), "var": rng.random(4).astype(np.float32) + 0.5}
    inits = [numpy_helper.from_array(v, k) for k, v in vals.items()]
    m = _model([h.make_node("Conv", ["x", "w", "bias"], ["c"], pads=[1, 1, 1, 1]),
                h.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["n"]),
                h.make_node("Relu", ["n"], ["y"])],
               [_tensor("x", [1, 3, 8, 8]), *[_tensor(k, list(v.shape)) for k, v in vals.items()]],
               [_tensor("y", [1, 4, 8, 8])], inits)
    out = optimized(m).model
    assert sorted(i.name for i in out.graph.input) == sorted(["x", *vals])
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    _same_outputs(m, out, {"x": x})
    _same_outputs(m, out, {"x": x, **{k: rng.standard_normal(v.shape).astype(np.float32) + 1
                                      for k, v in vals.items()}})


def test_which_initializers_are_overridable():
    inits = [numpy_helper.from_array(np.zeros(1, np.float32), n) for n in ("a", "b")]
    m = _model([h.make_node("Add", ["a", "b"], ["y"])], [_tensor("a", [1])], [_tensor("y", [1])], inits)
    assert overridable_inputs(m) == {"a"}
    assert set(fixed_initializers(m)) == {"b"}
    m.ir_version = 3  # before IR 4 an initializer listed as an input is a constant
    assert overridable_inputs(m) == set()
    assert set(fixed_initializers(m)) == {"a", "b"}
