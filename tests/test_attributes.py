"""Attributes of carried (opaque) ops come back exactly as they were: a tensor attribute
keeps its TensorProto's name, doc string and metadata although tensors are stored by
content, and an attribute with a doc string keeps it. Checked on the round trip (no rules)
and through the default optimization."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

from eqsat.core.pipeline import Options, optimize
from eqsat.core.store import TensorStore
from eqsat.verification import run

from .conftest import assert_same_outputs, assert_verified


def _tensor(name: str, doc: str = "", values=(1.0, 2.0)) -> onnx.TensorProto:
    t = numpy_helper.from_array(np.array(values, np.float32), name)
    t.doc_string = doc
    return t


def _model() -> onnx.ModelProto:
    """Two custom ops whose tensor attributes hold equal values under different names, one
    with a doc string and metadata; an initializer `w` with the same values feeding an Add;
    an INT attribute with a doc string."""
    table = _tensor("table", "the lookup table")
    table.metadata_props.add(key="origin", value="test")
    counted = h.make_attribute("count", 3)
    counted.doc_string = "how many"
    a = h.make_node("Mystery", ["x"], ["m1"], domain="my.ops", table=table)
    b = h.make_node("Mystery", ["x"], ["m2"], domain="my.ops", table=_tensor("other"))
    c = h.make_node("Mystery", ["x"], ["m3"], domain="my.ops", table=_tensor(""))
    c.attribute.append(counted)
    nodes = [a, b, c, h.make_node("Add", ["x", "w"], ["s"]), h.make_node("Identity", ["s"], ["y"])]
    vi = [h.make_tensor_value_info(n, TP.FLOAT, [2]) for n in ("m1", "m2", "m3", "y")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [2])], vi, [_tensor("w", "weights")])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 18), h.make_opsetid("my.ops", 1)])


@pytest.mark.parametrize("rules", [False, True], ids=["roundtrip", "default-rules"])
def test_opaque_tensor_attributes_keep_name_doc_string_and_metadata(rules):
    m = _model()
    out = optimize(m, Options(default_rules=rules)).model
    onnx.checker.check_model(out)
    got = {n.output[0]: n for n in out.graph.node if n.op_type == "Mystery"}
    want = {n.output[0]: n for n in m.graph.node if n.op_type == "Mystery"}
    assert set(got) == {"m1", "m2", "m3"}
    for k, n in want.items():  # every field of every attribute (attributes come back in name order)
        assert sorted(got[k].attribute, key=lambda a: a.name) == sorted(n.attribute, key=lambda a: a.name), k
    assert got["m1"].attribute[0].t.name == "table" and got["m1"].attribute[0].t.doc_string == "the lookup table"
    assert got["m2"].attribute[0].t.name == "other"
    assert got["m3"].attribute[0].t.name == ""  # not the initializer's name, although the values are equal
    assert {a.name: a.doc_string for a in got["m3"].attribute}["count"] == "how many"
    # the initializer with the same values keeps its own name and doc string
    w = [t for t in out.graph.initializer if t.name == "w"]
    assert len(w) == 1 and w[0].doc_string == "weights"
    if rules:
        assert [n.op_type for n in out.graph.node].count("Identity") == 0
    x = np.array([0.5, -1.5], np.float32)
    want_s = x + np.array([1.0, 2.0], np.float32)
    sub = onnx.ModelProto()
    sub.CopyFrom(out)  # the Add half runs under onnxruntime; the custom ops cannot
    del sub.graph.node[:]
    sub.graph.node.extend(n for n in out.graph.node if n.domain != "my.ops")
    del sub.graph.output[:3]
    np.testing.assert_array_equal(run(sub, {"x": x})["y"], want_s)


def test_equal_tensor_attributes_on_typed_and_carried_ops_stay_apart():
    """The content store keeps one tensor per value for initializers; an exact key keeps the
    attribute's own fields even after an equal initializer was stored first."""
    store = TensorStore()
    k_init = store.add(_tensor("w", "weights"))
    k_attr = store.add_exact(_tensor("table"))
    k_attr2 = store.add_exact(_tensor("table"))
    k_other = store.add_exact(_tensor("other"))
    assert k_attr == k_attr2 and len({k_init, k_attr, k_other}) == 3
    assert store.proto(k_attr).name == "table" and store.proto(k_other).name == "other"
    assert store.proto(k_init).name == "w"
    assert not store.is_exact(k_init) and store.is_exact(k_attr)
    np.testing.assert_array_equal(store.array(k_attr), store.array(k_init))


def test_constant_of_shape_tensor_attribute_still_folds_and_runs():
    """A typed op's tensor attribute (ConstantOfShape's value) is not affected: it runs."""
    value = numpy_helper.from_array(np.array([2.5], np.float32), "fill")
    nodes = [h.make_node("Shape", ["x"], ["sh"]), h.make_node("ConstantOfShape", ["sh"], ["k"], value=value),
             h.make_node("Mul", ["x", "k"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, ["n", 3])],
                     [h.make_tensor_value_info("y", TP.FLOAT, ["n", 3])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    out = optimize(m, Options()).model
    rng = np.random.default_rng(0)
    for n in (1, 4):
        assert_same_outputs(m, out, {"x": rng.standard_normal((n, 3)).astype(np.float32)})
        assert_verified(m, out)
