"""extract/costs/roofline.py on the layout ops of a saturated e-graph: blocked pooling is
`pool_speedup` times faster than NCHW pooling, a reorder is a copy (its time memory only,
whatever the vector rate), and the name `cpu` stands for the shipped profile measured with
this machine's NCHWc block."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from eqsat.backends.ort.target import foreign_block_warning, hardware_profile, nchwc_block
from eqsat.core.pipeline import Options, saturate
from eqsat.extract import EGraph
from eqsat.extract.costs.roofline import HARDWARE_DIR, Hardware, Roofline


def _pool_model(c: int, hw: int) -> onnx.ModelProto:
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, c, hw, hw])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _hw(**nchwc) -> Hardware:
    return Hardware(name="t", matmul_gflops=50.0, vector_gflops=0.001, mem_gbps=10.0, kernel_overhead_us=1.0,
                    layouts={"nchwc": {"block": 8, "conv_speedup": 1.3, "reorder_gbps": 20.0, **nchwc}})


def _costs(block: int, hw: Hardware) -> dict[str, float]:
    c, px = 2 * block, 14
    st = saturate(_pool_model(c, px), Options())
    r = Roofline(hw)
    r._setup(st.egraph)
    return {n.op: r.node_cost(st.egraph, n) for n in st.egraph.nodes.values()
            if n.op in ("MaxPool", "NchwcMaxPool", "NchwcReorderInput", "NchwcReorderOutput")}


def test_blocked_pooling_is_pool_speedup_times_faster(blocked):
    plain, fast = _costs(blocked, _hw()), _costs(blocked, _hw(pool_speedup=4.0))
    assert {"MaxPool", "NchwcMaxPool"} <= set(plain)
    assert plain["NchwcMaxPool"] == pytest.approx(plain["MaxPool"])  # no figure: as fast as NCHW
    assert fast["NchwcMaxPool"] - 1.0 == pytest.approx((plain["MaxPool"] - 1.0) / 4.0)
    assert fast["MaxPool"] == pytest.approx(plain["MaxPool"])


def _pool_node_costs(node, shapes: tuple[list[int], list[int]], hw: Hardware, ops: tuple[str, str]) -> dict[str, float]:
    """Roofline costs of the e-nodes of `ops` in the saturated e-graph of one pooling `node`
    from x of shapes[0] to y of shapes[1]."""
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shapes[0])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, shapes[1])])
    st = saturate(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), Options())
    r = Roofline(hw)
    r._setup(st.egraph)
    return {n.op: r.node_cost(st.egraph, n) for n in st.egraph.nodes.values() if n.op in ops}


def _window_pool_costs(block: int, hw: Hardware) -> dict[str, float]:
    """Costs of a 3x3 stride-2 AveragePool (no padding) of [1, 2 blocks, 15, 15] to 7 x 7, saturated."""
    c = 2 * block
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2])
    return _pool_node_costs(node, ([1, c, 15, 15], [1, c, 7, 7]), hw, ("AveragePool", "NchwcAveragePool"))


def test_a_window_pool_visits_its_output_times_its_window_at_pool_gops(blocked):
    """With the profile's pool_gops, an NCHW MaxPool / AveragePool computes its output's elements
    times its kernel's area at that rate (not one FLOP an input element at the vector rate:
    Inception-v3's AveragePools ran 1.9 to 4.6x slower than that memory-bound price), and its
    blocked form that over pool_speedup."""
    hw = dataclasses.replace(_hw(pool_speedup=4.0), vector_gflops=1e6, pool_gops=0.01)  # compute-bound
    windows = 2 * blocked * 7 * 7 * 9
    costs = _window_pool_costs(blocked, hw)
    assert costs["AveragePool"] == pytest.approx(1.0 + windows / (0.01 * 1e3))  # 1 us overhead + windows
    assert costs["NchwcAveragePool"] - 1.0 == pytest.approx((costs["AveragePool"] - 1.0) / 4.0)
    same = _costs(blocked, hw)  # MaxPool 3x3, stride 1, same padding: the output is the input's size
    assert same["MaxPool"] == pytest.approx(1.0 + 2 * blocked * 14 * 14 * 9 / (0.01 * 1e3))
    # without pool_gops: one FLOP an input element at the vector rate, as before
    plain = _window_pool_costs(blocked, dataclasses.replace(hw, vector_gflops=0.001, pool_gops=None))
    assert plain["AveragePool"] == pytest.approx(1.0 + 2 * blocked * 15 * 15 / (0.001 * 1e3))
    assert Hardware.load(HARDWARE_DIR / "cpu.json").pool_gops > 0


def test_a_reorder_costs_its_bytes_at_reorder_gbps_not_its_elements_at_the_vector_rate(blocked):
    costs = _costs(blocked, _hw())
    moved = 2 * 4 * (2 * blocked) * 14 * 14  # read and written once, float32
    for op in ("NchwcReorderInput", "NchwcReorderOutput"):
        assert costs[op] == pytest.approx(1.0 + moved / 20.0e3), op  # 1 us overhead + bytes at 20 GB/s


def _upsample_costs(block: int, hw: Hardware, mode: str) -> dict[str, float]:
    """Resize x2 (sizes given) of a conv's output, 2 blocks of channels, 14 x 14, saturated."""
    c = 2 * block
    w = onnx.numpy_helper.from_array(np.ones((c, c, 1, 1), np.float32), "w")
    sizes = onnx.numpy_helper.from_array(np.array([1, c, 28, 28], np.int64), "sizes")
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"]),
             helper.make_node("Resize", ["y", "", "", "sizes"], ["z"], mode=mode,
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, c, 14, 14])],
                          [helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [1, c, 28, 28])], [w, sizes])
    st = saturate(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), Options())
    r = Roofline(hw)
    r._setup(st.egraph)
    return {n.op: r.node_cost(st.egraph, n) for n in st.egraph.nodes.values() if n.op in ("Resize", "NchwcUpsample")}


def test_a_linear_resize_costs_interpolation_flops_an_element_and_its_blocked_form_upsample_speedup_less(blocked):
    hw = dataclasses.replace(_hw(upsample_speedup=4.0), interpolation_flops=8.0)
    linear, nearest = _upsample_costs(blocked, hw, "linear"), _upsample_costs(blocked, hw, "nearest")
    out = 2 * blocked * 28 * 28
    # 1 us + FLOPs at the vector rate
    assert linear["Resize"] == pytest.approx(1.0 + 8.0 * out / (hw.vector_gflops * 1e3))
    assert linear["NchwcUpsample"] - 1.0 == pytest.approx((linear["Resize"] - 1.0) / 4.0)
    assert nearest["Resize"] - 1.0 == pytest.approx((linear["Resize"] - 1.0) / 8.0)  # a copy: one FLOP an element
    assert nearest["NchwcUpsample"] == pytest.approx(nearest["Resize"])


def _conv_cost(hw: Hardware, cin: int, k: int, cout: int = 64, group: int = 1) -> float:
    """The roofline cost of the NCHW Conv of [1, cin, 32, 32] to `cout` channels, k x k."""
    w = onnx.numpy_helper.from_array(np.ones((cout, cin // group, k, k), np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[k // 2] * 4, group=group)], "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, cin, 32, 32])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, cout, 32, 32])], [w])
    st = saturate(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), Options(layout="nchw"))
    r = Roofline(hw)
    r._setup(st.egraph)
    return next(r.node_cost(st.egraph, n) for n in st.egraph.nodes.values() if n.op == "Conv")


def test_an_image_stem_conv_runs_stem_conv_slowdown_times_slower_and_no_other_conv_does():
    hw = dataclasses.replace(_hw(), conv_gflops=0.001)  # compute-bound: the cost is its FLOPs' time
    slow = dataclasses.replace(hw, stem_conv_slowdown=3.0)
    for cin, k, stem in ((3, 3, True), (8, 3, False), (32, 1, False)):  # 27 inputs an output: a stem; 72, 32: not
        base, priced = _conv_cost(hw, cin, k), _conv_cost(slow, cin, k)
        assert priced - 1.0 == pytest.approx((base - 1.0) * (3.0 if stem else 1.0)), (cin, k)


def test_an_nchw_conv_with_fewer_than_64_outputs_a_group_runs_below_the_rate_and_a_stem_is_not_slowed_twice():
    hw = dataclasses.replace(_hw(), conv_gflops=0.001)  # compute-bound: the cost is its FLOPs' time
    narrow = dataclasses.replace(hw, narrow_conv_exponent=0.5)
    for cin, k, cout, group, share in ((32, 1, 8, 1, 0.125 ** 0.5), (32, 3, 16, 1, 0.5), (32, 1, 64, 1, 1.0),
                                       (32, 1, 128, 1, 1.0), (64, 1, 64, 2, 0.5 ** 0.5)):  # 2 groups of 32
        base, priced = _conv_cost(hw, cin, k, cout, group), _conv_cost(narrow, cin, k, cout, group)
        assert priced - 1.0 == pytest.approx((base - 1.0) / share), (cin, k, cout, group)
    slow = dataclasses.replace(narrow, stem_conv_slowdown=3.0)  # an image's first conv: its own slowdown only
    assert _conv_cost(slow, 3, 3, 16) - 1.0 == pytest.approx((_conv_cost(hw, 3, 3, 16) - 1.0) * 3.0)


def test_a_normalization_costs_normalization_flops_an_element():
    g = helper.make_graph([helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)], "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 256])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 256])],
                          [numpy_helper.from_array(np.ones(256, np.float32), "s"),
                           numpy_helper.from_array(np.zeros(256, np.float32), "b")])
    st = saturate(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), Options())
    for flops in (2.0, 5.0):
        hw = dataclasses.replace(_hw(), normalization_flops=flops)  # vector_gflops 0.001: compute-bound
        r = Roofline(hw)
        r._setup(st.egraph)
        (cost,) = [r.node_cost(st.egraph, n) for n in st.egraph.nodes.values() if n.op == "LayerNormalization"]
        assert cost == pytest.approx(1.0 + flops * 4 * 256 / (hw.vector_gflops * 1e3))


def test_cpu_names_the_shipped_profile_of_this_machines_block(blocked):
    name = hardware_profile("cpu")
    assert Hardware.load(name).layouts["nchwc"]["block"] == blocked
    assert hardware_profile("h200") == "h200"
    assert hardware_profile(str(HARDWARE_DIR / "cpu.json")) == str(HARDWARE_DIR / "cpu.json")


def test_every_shipped_cpu_profile_has_its_own_block(monkeypatch):
    blocks = {}
    for path in sorted(HARDWARE_DIR.glob("cpu*.json")):
        blocks[path.stem] = json.loads(path.read_text())["layouts"]["nchwc"]["block"]
    assert sorted(blocks.values()) == sorted(set(blocks.values())), blocks
    for stem, b in blocks.items():
        monkeypatch.setenv("EQSAT_NCHWC_BLOCK", str(b))
        nchwc_block.cache_clear()
        assert hardware_profile("cpu") == stem
    monkeypatch.setenv("EQSAT_NCHWC", "0")  # no blocked kernels: cpu.json
    nchwc_block.cache_clear()
    assert hardware_profile("cpu") == "cpu"
    nchwc_block.cache_clear()


def test_a_profile_of_another_block_is_warned_of(monkeypatch):
    monkeypatch.setenv("EQSAT_NCHWC_BLOCK", "16")
    nchwc_block.cache_clear()
    try:
        w = foreign_block_warning("cpu-avx2")  # measured with block 8
        assert w is not None and w.startswith("hardware profile cpu-avx2 was measured with onnxruntime's NCHWc "
                                              "block 8, this machine's is 16")
        assert "eqsat calibrate" in w
        assert foreign_block_warning("cpu") is None  # block 16, as here
        assert foreign_block_warning("cpu-avx2", layout="nchw") is None  # the layout is not asked for
        assert foreign_block_warning("h200") is None  # a profile with no blocked layout
        monkeypatch.setenv("EQSAT_NCHWC", "0")  # a machine without blocked kernels
        nchwc_block.cache_clear()
        assert foreign_block_warning("cpu-avx2") is None
    finally:
        nchwc_block.cache_clear()


def _gqa_egraph() -> EGraph:
    """Grouped-query products as rules/attention.egg leaves them with a symbolic sequence S
    (dim id -2): q [1, 4, S, 8] regrouped by Reshape [0, 2, -1, 0] to [1, 2, 2S, 8] and
    multiplied by k [1, 2, S, 8] transposed. The e-graph has no shape for the regrouped
    values (2S has no symbol)."""
    def node(op, eclass, *children):
        return {"op": op, "children": list(children), "eclass": eclass, "cost": 1.0}

    nodes = {
        "q": node("Input", "Q"), "k": node("Input", "K"),
        **{f"i{v}": node(str(v), f"i64-{v}") for v in (0, 1, 2, -1)},
        "alpha": node("0.125", "f64-a"),
        "vec": node("vec-of", "IVec-t", "i0", "i2", "i-1", "i0"),
        "ints": node("Ints", "T", "vec"),
        "r": node("Reshape", "R", "q", "ints", "i0"),
        "f": node("FusedMatMul", "F", "r", "k", "alpha", "i0", "i1", "i0", "i0"),
    }
    class_data = {"Q": {"type": "Op", "shape": [1, 4, -2, 8]}, "K": {"type": "Op", "shape": [1, 2, -2, 8]},
                  "R": {"type": "Op"}, "F": {"type": "Op"}, "T": {"type": "Op"}}
    return EGraph.from_json({"nodes": nodes, "class_data": class_data, "root_eclasses": ["F"],
                             "eqsat": {"dims": {"-2": "sequence"}}})


def test_regrouped_query_heads_get_their_shape_from_the_bound_sequence():
    from eqsat.extract.costs.roofline import derived_shapes

    g = _gqa_egraph()
    assert derived_shapes(g, {-2: 10}) == {"R": [1, 2.0, 20.0, 8], "F": [1, 2.0, 20.0, 10]}
    costs = {s: Roofline("cpu", {"sequence": s}).costs(g)["f"] for s in (64, 256)}
    hw = Hardware.load("cpu")
    flops = 2 * (1 * 2 * 128 * 64) * 8  # [1, 2, 2S, S] outputs, K = 8, at S = 64
    assert costs[64] >= hw.kernel_overhead_us + flops / (hw.matmul_gflops * 1e3)
    # the products grow with S squared: priced from their shapes, not as a kernel launch
    assert costs[256] - hw.kernel_overhead_us > 10 * (costs[64] - hw.kernel_overhead_us)


def _global_pool_costs(block: int, hw: Hardware) -> dict[str, float]:
    c = 2 * block
    node = helper.make_node("GlobalAveragePool", ["x"], ["y"])
    return _pool_node_costs(node, ([1, c, 28, 28], [1, c, 1, 1]), hw, ("GlobalAveragePool", "NchwcGlobalAveragePool"))


def test_blocked_global_average_pooling_is_global_pool_speedup_times_faster(blocked):
    plain, fast = _global_pool_costs(blocked, _hw()), _global_pool_costs(blocked, _hw(global_pool_speedup=3.0))
    assert set(plain) == {"GlobalAveragePool", "NchwcGlobalAveragePool"}
    assert plain["NchwcGlobalAveragePool"] == pytest.approx(plain["GlobalAveragePool"])  # no figure: as fast
    assert fast["NchwcGlobalAveragePool"] - 1.0 == pytest.approx((plain["GlobalAveragePool"] - 1.0) / 3.0)
    assert _global_pool_costs(blocked, _hw(pool_speedup=3.0)) == plain  # the window pools' figure is another


def _pixel_conv_costs(block: int, hw: Hardware, pixels: int = 1) -> dict[str, float]:
    """A 1x1 conv of 2 blocks of channels to 2 on a pixels x pixels image, saturated."""
    c = 2 * block
    w = numpy_helper.from_array(np.ones((c, c, 1, 1), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[1, 1])
    g = helper.make_graph([node], "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, c, pixels, pixels])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, c, pixels, pixels])], [w])
    st = saturate(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), Options())
    r = Roofline(hw)
    r._setup(st.egraph)
    return {n.op: r.node_cost(st.egraph, n) for n in st.egraph.nodes.values() if n.op in ("Conv", "NchwcConvPlain")}


def test_a_blocked_conv_of_one_pixel_is_pixel_conv_speedup_times_faster(blocked):
    hw, fast = _hw(conv_speedup=1.0), _hw(conv_speedup=1.0, pixel_conv_speedup=2.0)
    plain, sped = _pixel_conv_costs(blocked, hw), _pixel_conv_costs(blocked, fast)
    assert set(plain) == {"Conv", "NchwcConvPlain"}
    assert plain["NchwcConvPlain"] == pytest.approx(plain["Conv"])
    assert sped["NchwcConvPlain"] - 1.0 == pytest.approx((plain["Conv"] - 1.0) / 2.0)
    assert _pixel_conv_costs(blocked, fast, pixels=2) == _pixel_conv_costs(blocked, hw, pixels=2)  # one pixel only


def test_a_qlinearconv_costs_its_work_and_an_nchw_one_its_inner_transposes_too():
    # rules/qdq_nhwc.egg: a chain of three 3x3 QLinearConvs, 16 channels of 12 x 12 (uint8), saturated
    from .rules.test_qdq_nhwc import HW, Net
    from .rules.test_qdq_nhwc import C as CH

    n = Net()
    st = saturate(n.model(n.conv(n.conv(n.conv(n.x)))), Options(layout="nchwc"))
    hw = dataclasses.replace(_hw(), qconv_gops=100.0)
    r = Roofline(hw)
    r._setup(st.egraph)
    costs: dict[str, set[float]] = {}
    for node in st.egraph.nodes.values():
        if node.op in ("QLinearConv", "QLinearConvMs", "Transpose"):
            costs.setdefault(node.op, set()).add(round(r.node_cost(st.egraph, node), 6))
    flops = 2.0 * CH * HW * HW * CH * 9
    act = CH * HW * HW  # bytes of a uint8 activation
    assert len(costs["QLinearConvMs"]) == len(costs["QLinearConv"]) == len(costs["Transpose"]) == 1
    assert costs["QLinearConvMs"].pop() == pytest.approx(1.0 + flops / 100.0e3, abs=1e-5)  # compute-bound here
    # the NCHW kernel transposes its input and output (read and written) at mem_gbps, after its work
    assert costs["QLinearConv"].pop() == pytest.approx(1.0 + flops / 100.0e3 + 2 * 2 * act / 10.0e3, abs=1e-5)
    # a Transpose is a copy: its bytes at mem_gbps, no arithmetic (vector_gflops is tiny here)
    assert costs["Transpose"].pop() == pytest.approx(1.0 + 2 * act / 10.0e3, abs=1e-5)
    # a bigger convolution costs more: the same at twice the rate costs less
    fast = Roofline(dataclasses.replace(hw, qconv_gops=200.0))
    fast._setup(st.egraph)
    conv = next(x for x in st.egraph.nodes.values() if x.op == "QLinearConvMs")
    assert fast.node_cost(st.egraph, conv) < r.node_cost(st.egraph, conv)
