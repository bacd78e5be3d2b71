"""eqsat calibrate's fusion decisions and layout figures: measured, and read back by the Hardware loader."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import helper as h

from eqsat.backends.ort import calibrate, calibrate_layout
from eqsat.backends.ort.calibrate import aliased_models, cached_attention_models, fusion_choices, grouped_query_models
from eqsat.extract.costs.roofline import Hardware
from eqsat.verification import run, session

pytestmark = pytest.mark.no_egglog  # calls no egglog (tests/conftest.py's guard)


def test_fusion_choices_are_measured_booleans_that_a_profile_loads(tmp_path):
    got = fusion_choices(runs=10)
    keys = ("merge_parallel_matmuls", "fuse_skip_layernorm", "fuse_attention", "fuse_unmasked_attention",
            "fuse_cached_attention", "grouped_query_matmul", "contraction_alias_slowdown")
    assert set(got) == set(keys)
    assert all(isinstance(got[k], bool) for k in keys[:-1])
    assert isinstance(got["contraction_alias_slowdown"], float) and got["contraction_alias_slowdown"] > 0
    prof = {"name": "t", "matmul_gflops": 1.0, "vector_gflops": 1.0, "mem_gbps": 1.0, "kernel_overhead_us": 1.0, **got}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(prof))
    hw = Hardware.load(str(path))
    assert tuple(getattr(hw, k) for k in keys) == tuple(got[k] for k in keys)


def test_the_aliased_and_the_padded_product_compute_the_same():
    """The two products eqsat calibrate times for contraction_alias_slowdown: the padded one's
    zero columns meet zero rows, and the sums are the same."""
    aliased, padded, fa, fp = aliased_models(np.random.default_rng(0), m=4, k=1024, n=8)
    assert fp["x"].shape == (4, 1040)
    want = run(aliased, fa, optimize=False)["y"]
    np.testing.assert_allclose(run(padded, fp, optimize=False)["y"], want, rtol=1e-5, atol=1e-4)


def test_grouped_query_models_compute_the_same_attention():
    """The two forms eqsat calibrate times for grouped_query_matmul give the same output, on
    two batches and three query heads a kv head (so the figure times the same work)."""
    grouped, repeated, feeds = grouped_query_models(np.random.default_rng(0), b=2, n=6, nk=2, s=5, d=4)
    want = run(repeated, feeds, optimize=False)["o"]
    assert want.shape == (2, 6, 5, 4)
    np.testing.assert_allclose(run(grouped, feeds, optimize=False)["o"], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("past, new", [(7, 1), (5, 3), (0, 4)])
def test_cached_attention_models_compute_the_same_outputs(past, new):
    """The two forms eqsat calibrate times for fuse_cached_attention: the same output and
    present key and value, for a step, several new tokens, and an empty cache."""
    subgraph, fused, feeds = cached_attention_models(np.random.default_rng(0), past, new=new, b=2, n=3, d=4)
    want, got = run(subgraph, feeds, optimize=False), run(fused, feeds, optimize=False)
    assert want["present_k"].shape == (2, 3, past + new, 4)
    for k in ("y", "present_k", "present_v"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_a_profile_without_the_keys_merges_nothing_and_fuses_skip_layernorm_and_attention():
    hw = Hardware(name="t", matmul_gflops=1.0, vector_gflops=1.0, mem_gbps=1.0, kernel_overhead_us=1.0)
    assert (hw.merge_parallel_matmuls, hw.fuse_skip_layernorm, hw.fuse_attention, hw.fuse_unmasked_attention) == (
        False, True, True, True)
    cpu = Hardware.load("cpu")
    assert (cpu.merge_parallel_matmuls, cpu.fuse_skip_layernorm, cpu.fuse_attention, cpu.fuse_unmasked_attention) == (
        False, False, False, True)


def test_layout_figures_are_measured_on_models_that_compute_the_nchw_result(tmp_path, blocked):
    """eqsat calibrate's NCHWc figures (eqsat/backends/ort/calibrate_layout.py): the blocked models it
    times give the NCHW models' outputs (so the figures time the same work), and the figures
    are positive numbers for this machine's block that a profile loads."""
    block = blocked
    for models in (calibrate_layout.conv_models(2 * block, 3, 7, 1, block),
                   calibrate_layout.conv_models(2 * block, 3, 7, 2 * block, block),
                   calibrate_layout.pool_models("MaxPool", 2 * block, 7),
                   calibrate_layout.pool_models("AveragePool", 2 * block, 7)):
        n, b, r, feeds = models
        want = run(n, feeds, optimize=False)["y"]
        np.testing.assert_allclose(run(b, feeds, optimize=False)["y"], want, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(run(r, feeds, optimize=False)["y"], feeds["x"])
    # a one-pixel image is laid out the same in both layouts: the blocked filters compute the NCHW result
    n, b, feeds = calibrate_layout.pixel_conv_models(2 * block, block, 2, block)
    want = run(n, feeds, optimize=False)
    for k, v in run(b, feeds, optimize=False).items():
        np.testing.assert_allclose(v, want[k], rtol=1e-4, atol=1e-4)
    got = calibrate_layout.measure(runs=3)
    nchwc = got["layouts"]["nchwc"]
    assert nchwc["block"] == block
    assert all(nchwc[k] > 0 for k in ("conv_speedup", "depthwise_gflops", "pool_speedup", "global_pool_speedup",
                                      "pixel_conv_speedup",
                                      "reorder_gbps"))
    assert got["depthwise_gflops"] > 0 and got["pool_gops"] > 0
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"name": "t", "matmul_gflops": 1.0, "vector_gflops": 1.0, "mem_gbps": 1.0,
                                "kernel_overhead_us": 1.0, **got}))
    hw = Hardware.load(str(path))
    assert hw.has_layout("nchwc") and hw.depthwise_gflops == got["depthwise_gflops"]


def test_a_written_profile_is_named_after_its_file(tmp_path, monkeypatch):
    """`eqsat calibrate -o box.json` writes a profile named box (not the shipped `cpu`), which
    the loader reads back by path with its measured figures."""
    figures = {"name": "cpu", "matmul_gflops": 2.0, "vector_gflops": 1.0, "mem_gbps": 3.0, "kernel_overhead_us": 0.5}
    monkeypatch.setattr(calibrate, "measure", lambda threads=1: dict(figures))
    path = tmp_path / "box.json"
    calibrate.write(path)
    hw = Hardware.load(str(path))
    assert (hw.name, hw.matmul_gflops, hw.mem_gbps) == ("box", 2.0, 3.0)


def test_the_vector_chain_stays_in_normal_floats():
    """The vector rate's chain of Muls must not decay into denormals (which run many times
    slower on x86 and would make the rate a denormal rate) nor overflow."""
    model, feeds = calibrate.vector_chain(np.random.default_rng(0), calibrate.VECTOR_K, calibrate.VECTOR_MULS)
    (out,) = session(model).run(None, feeds)
    expect = feeds["x0"] * feeds["b"].astype(np.float64) ** calibrate.VECTOR_MULS
    np.testing.assert_allclose(out, expect, rtol=1e-4)
    assert np.abs(out).min() >= np.finfo(np.float32).tiny and np.isfinite(out).all()


@pytest.mark.parametrize("op", calibrate.TRANSCENDENTALS)
def test_the_transcendental_chains_compute_their_op_in_normal_floats(op):
    """Each transcendental chain applies its op VECTOR_MULS times to the vector chain's x0, and
    its values stay normal floats (a chain decaying into denormals would time the denormal path)."""
    import math

    _, feeds = calibrate.vector_chain(np.random.default_rng(0), 64, calibrate.VECTOR_MULS)
    (out,) = session(calibrate.unary_chain(op, 64, calibrate.VECTOR_MULS)).run(None, feeds)
    f = {"Sigmoid": lambda v: 1 / (1 + math.exp(-v)), "Tanh": math.tanh, "Erf": math.erf}[op]
    expect = []
    for v in feeds["x0"].astype(np.float64):
        for _ in range(calibrate.VECTOR_MULS):
            v = f(v)
        expect.append(v)
    np.testing.assert_allclose(out, expect, rtol=1e-4)
    assert np.abs(out).min() >= np.finfo(np.float32).tiny


@pytest.mark.parametrize("op", calibrate.NORMALIZATIONS)
def test_the_normalization_chains_normalize_each_row(op):
    """Each normalization chain normalizes the rows of the vector chain's floats (unit scale,
    zero bias) VECTOR_MULS times: what it times is the op computing its result."""
    _, feeds = calibrate.vector_chain(np.random.default_rng(0), 256, calibrate.VECTOR_MULS)
    x = feeds["x0"].reshape(calibrate.NORM_ROWS, -1).astype(np.float64)
    (out,) = session(calibrate.norm_chain(op, 256, calibrate.VECTOR_MULS)).run(None, {"x0": x.astype(np.float32)})
    for _ in range(calibrate.VECTOR_MULS):
        if op == "LayerNormalization":
            x = x - x.mean(axis=-1, keepdims=True)
        x = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out, x, rtol=1e-3, atol=1e-4)


def test_the_narrow_conv_models_compute_an_nchw_convolution():
    from eqsat.extract.costs.roofline import NARROW_CONV_M

    cin, cout, k, p = calibrate_layout.NARROW[4]
    assert cout < NARROW_CONV_M and k == 3
    model, feeds = calibrate_layout.nchw_conv_model(cin, cout, k, p)
    (out,) = session(model).run(None, feeds)
    w = onnx.numpy_helper.to_array(model.graph.initializer[0]).astype(np.float64)
    x = np.pad(feeds["x"][0].astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    expect = sum(np.einsum("oi,ihw->ohw", w[:, :, i, j], x[:, i:i + p, j:j + p]) for i in range(3) for j in range(3))
    np.testing.assert_allclose(out[0], expect, rtol=1e-3, atol=1e-3)


def test_qconv_figures_time_a_channels_last_conv_that_computes_the_nchw_result(tmp_path):
    """eqsat calibrate's qconv_gops and qconv_depthwise_gops (rules/qdq_nhwc.egg): the model it
    times is com.microsoft.QLinearConv with channels_last 1, giving ai.onnx QLinearConv's result
    on the transposed input, and the figures are positive numbers that a profile loads."""
    for group in (1, 16):
        model, feeds = calibrate_layout.qconv_model(16, 3, 7, group)
        nchw = onnx.ModelProto()
        nchw.CopyFrom(model)
        node = nchw.graph.node[0]
        node.domain = ""
        del node.attribute[:]
        node.attribute.extend([h.make_attribute("kernel_shape", [3, 3]), h.make_attribute("pads", [1] * 4),
                               h.make_attribute("group", group)])
        nchw.graph.input[0].CopyFrom(h.make_tensor_value_info("x", onnx.TensorProto.UINT8, [1, 16, 7, 7]))
        nchw.graph.output[0].CopyFrom(h.make_tensor_value_info("y", onnx.TensorProto.UINT8, [1, 16, 7, 7]))
        want = run(nchw, {"x": feeds["x"].transpose(0, 3, 1, 2)}, optimize=False)["y"]
        np.testing.assert_array_equal(run(model, feeds, optimize=False)["y"], want.transpose(0, 2, 3, 1))
    got = calibrate_layout.qconv_gops(runs=2)
    assert got["qconv_gops"] > 0 and got["qconv_depthwise_gops"] > 0
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"name": "t", "matmul_gflops": 1.0, "vector_gflops": 1.0, "mem_gbps": 1.0,
                                "kernel_overhead_us": 1.0, **got}))
    assert Hardware.load(str(path)).qconv_gops == got["qconv_gops"]
