"""eqsat/backends/ort/measure.py: the measured cost model's op timings. Each op is timed alone as written,
with onnxruntime's own graph optimizations off (with them on, an NCHW Conv would run as
onnxruntime's blocked one and a BatchNormalization be fused away, so the alternatives that
extraction chooses between would time alike), and the timings are cached on disk."""

from __future__ import annotations

import copy

import numpy as np
import onnx
from onnx import helper, numpy_helper

import eqsat.backends.ort.measure as measure
from eqsat.core.pipeline import Options, saturate


def _conv_bn_relu() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    c = 16
    inits = [numpy_helper.from_array(rng.standard_normal((c, c, 3, 3)).astype(np.float32), "w")]
    inits += [numpy_helper.from_array(rng.uniform(0.5, 2, c).astype(np.float32), n) for n in ("s", "b", "m", "v")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
             helper.make_node("Relu", ["n"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, c, 14, 14])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, c, 14, 14])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_ops_are_timed_as_written_and_cached(monkeypatch, tmp_path):
    flags = []
    real = measure.session

    def spy(model, optimize=True, threads=1, providers=None):
        flags.append(optimize)
        return real(model, optimize=optimize, threads=threads, providers=providers)

    monkeypatch.setattr(measure, "session", spy)
    st = saturate(_conv_bn_relu(), Options(layout="nchw"))
    cache = tmp_path / "measured.json"
    first = measure.Measurer(st.model, st.tensors, st.protos, runs=2, cache=cache)
    data = first.annotate(copy.deepcopy(st.data))
    timed = data["eqsat"]["measured_us"]
    ops = {st.egraph.nodes[n].op for n in timed}
    assert {"Conv", "BatchNormalization", "Relu"} <= ops, ops
    assert all(t > 0 for t in timed.values())
    assert flags and not any(flags), flags  # every session with onnxruntime's optimizations off
    assert first.timed == len(flags)
    again = measure.Measurer(st.model, st.tensors, st.protos, runs=2, cache=cache)
    assert again.annotate(copy.deepcopy(st.data))["eqsat"]["measured_us"] == timed
    assert again.timed == 0  # all from the cache


def test_cache_is_keyed_by_onnxruntime_version_and_cpu(tmp_path, monkeypatch):
    # a home folder shared by two machines, or an upgraded onnxruntime, must time afresh
    import onnxruntime

    st = saturate(_conv_bn_relu(), Options(layout="nchw"))
    cache = tmp_path / "measured.json"
    first = measure.Measurer(st.model, st.tensors, st.protos, runs=2, cache=cache)
    first.annotate(copy.deepcopy(st.data))
    assert first.timed > 0
    monkeypatch.setattr(onnxruntime, "__version__", "0.0.0-other")
    measure.machine_salt.cache_clear()
    try:
        other = measure.Measurer(st.model, st.tensors, st.protos, runs=2, cache=cache)
        other.annotate(copy.deepcopy(st.data))
        assert other.timed == first.timed  # nothing reused from the other version's times
        monkeypatch.setattr(measure.platform, "machine", lambda: "another-cpu")
        measure.machine_salt.cache_clear()
        third = measure.Measurer(st.model, st.tensors, st.protos, runs=2, cache=cache)
        third.annotate(copy.deepcopy(st.data))
        assert third.timed == first.timed
    finally:
        monkeypatch.undo()
        measure.machine_salt.cache_clear()
    same = measure.Measurer(st.model, st.tensors, st.protos, runs=2, cache=cache)
    same.annotate(copy.deepcopy(st.data))
    assert same.timed == 0  # this machine's own entries are still there
