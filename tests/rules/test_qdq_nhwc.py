"""rules/qdq_nhwc.egg: channels-last QLinearConv (com.microsoft.QLinearConv, channels_last = 1)
between Transposes, as onnxruntime's NhwcTransformer writes it at ORT_ENABLE_ALL, and the ops
after a channels-last value run on it (QLinearAdd, QLinearGlobalAveragePool channels_last = 1,
QLinearConcat on axis 3, MaxPool between a DQ and a Q of one scale as com.microsoft.NhwcMaxPool),
so that a chain pays one Transpose where it enters the layout and one where it leaves.

The models are what quantize_static writes with uint8 activations (QuantizeLinear ->
DequantizeLinear around each op), 16 channels of 12 x 12 pixels: big enough that the cost model
prefers the channels-last chain, where a lone convolution stays NCHW. Outputs are compared with
the original's under onnxruntime (optimizations off) within one quantization step of the output
(the fusion requantizes once from the integers; the layout change itself is exact)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from ..conftest import assert_same_outputs, assert_verified, assert_written, op_list, optimized
from ..conftest import check_rewrite as check_any_layout

pytestmark = pytest.mark.usefixtures("portable_weights")

# 24 pixels: at 12 the profile prices a three-conv chain's two Transposes above what they save
# (there channels-last measured 4 % faster all the same: per-op overheads decide at that size)
C, HW = 16, 24
OUT_SCALE = 0.05  # the last Q's scale: the outputs' tolerance
MS_CONV = "com.microsoft.QLinearConv"
NCHWC = "com.microsoft.nchwc"


def check_rewrite(model, expect_ops, *args, **opts):
    """conftest.check_rewrite with channels-last allowed (the default layout), within one
    output quantization step, onnxruntime's optimizations off on both sides."""
    opts.setdefault("layout", "nchwc")
    opts.setdefault("atol", OUT_SCALE * 1.01)
    opts.setdefault("ort_optimize", False)
    return check_any_layout(model, expect_ops, *args, **opts)


class Net:
    """A QDQ graph under construction: float values, each quantized (Q -> DQ, uint8, per tensor)
    after the op that makes it, as quantize_static writes them."""

    def __init__(self, seed: int = 0, in_type: int = T.UINT8, shape=(1, C, HW, HW), opset: int = 17) -> None:
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.k = 0
        self.in_type = in_type
        self.inputs = [helper.make_tensor_value_info("x", T.FLOAT, list(shape))]
        self.scales: dict[str, float] = {}
        self.x = self.qdq("x", 0.04)

    def name(self, base: str) -> str:
        self.k += 1
        return f"{base}{self.k}"

    def const(self, base: str, a: np.ndarray) -> str:
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(a, n))
        return n

    def qdq(self, v: str, scale: float, zero: int = 128, axis: int | None = None, q_scale: float | None = None) -> str:
        """Q -> DQ of the float value v; returns the DQ's output. `q_scale`: the Q's scale where it
        differs from the DQ's (not a pair that cancels). A per-channel pair along `axis`."""
        t = self.in_type
        code = np.uint16 if t == T.UINT16 else np.uint8
        if axis is None:
            s = self.const("s", np.array(scale, np.float32))
            z = self.const("z", np.array(zero * (256 if t == T.UINT16 else 1), code))
            sq = self.const("s", np.array(q_scale, np.float32)) if q_scale else s
            attrs = {}
        else:
            s = self.const("s", np.full(C, scale, np.float32) * np.linspace(1, 2, C, dtype=np.float32))
            z = self.const("z", np.full(C, zero, code))
            sq, attrs = s, {"axis": axis}
        q, d = self.name("q"), self.name("d")
        self.nodes += [helper.make_node("QuantizeLinear", [v, sq, z], [q], **attrs),
                       helper.make_node("DequantizeLinear", [q, s, z], [d], **attrs)]
        self.scales[d] = scale
        return d

    def conv(self, x: str, cout: int = C, k: int = 3, group: int = 1, scale: float = 0.05) -> str:
        cin = C // group
        w = self.rng.integers(-60, 61, (cout, cin, k, k)).astype(np.int8)
        ws = np.float32(0.02 / np.sqrt(cin * k * k))
        wq, wsn, wz = self.const("w", w), self.const("ws", np.array(ws)), self.const("wz", np.array(0, np.int8))
        bs = np.float32(np.float32(self.scales[x]) * ws)
        bq = self.const("b", self.rng.integers(-500, 500, cout).astype(np.int32))
        bsn, bz = self.const("bs", np.array(bs)), self.const("bz", np.array(0, np.int32))
        wd, bd, y = self.name("wd"), self.name("bd"), self.name("y")
        self.nodes += [helper.make_node("DequantizeLinear", [wq, wsn, wz], [wd]),
                       helper.make_node("DequantizeLinear", [bq, bsn, bz], [bd]),
                       helper.make_node("Conv", [x, wd, bd], [y], pads=[k // 2] * 4, group=group)]
        return self.qdq(y, scale)

    def op(self, op: str, inputs: list[str], scale: float = 0.05, **attrs) -> str:
        y = self.name("y")
        self.nodes.append(helper.make_node(op, inputs, [y], **attrs))
        return self.qdq(y, scale)

    def model(self, out: str, out_shape=(1, C, HW, HW)) -> onnx.ModelProto:
        self.nodes.append(helper.make_node("Identity", [out], ["out"]))
        g = helper.make_graph(self.nodes, "g", self.inputs,
                              [helper.make_tensor_value_info("out", T.FLOAT, list(out_shape))], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)], ir_version=8)
        onnx.checker.check_model(m)
        return m


def attr(node, name, default=None):
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def ms_convs(model: onnx.ModelProto) -> list:
    return [n for n in model.graph.node if n.domain == "com.microsoft" and n.op_type == "QLinearConv"]


def transposes(model: onnx.ModelProto) -> list[list[int]]:
    return [list(attr(n, "perm")) for n in model.graph.node if n.op_type == "Transpose"]


ENTER_EXIT = ["QuantizeLinear", "Transpose", "Transpose", "DequantizeLinear"]


def test_a_conv_chain_runs_channels_last_between_one_transpose_at_each_end():
    n = Net()
    m = n.model(n.conv(n.conv(n.conv(n.x))))
    res = check_rewrite(m, ENTER_EXIT + [MS_CONV] * 3, fired=["qdq-conv-channels-last"])
    assert all(attr(c, "channels_last") == 1 for c in ms_convs(res.model))
    assert transposes(res.model) == [[0, 2, 3, 1], [0, 3, 1, 2]]
    # the filter stays OIHW: the contrib op takes it as the standard one does
    w = {i.name: i for i in res.model.graph.initializer}[ms_convs(res.model)[0].input[3]]
    assert list(w.dims) == [C, C, 3, 3]


def test_a_lone_conv_stays_nchw_its_transposes_would_cost_more():
    n = Net()
    check_rewrite(n.model(n.conv(n.x)), ["QuantizeLinear", "QLinearConv", "DequantizeLinear"],
                  fired=["qdq-conv-channels-last"])


def test_a_depthwise_and_pointwise_chain_runs_channels_last():
    n = Net()
    m = n.model(n.conv(n.conv(n.conv(n.x, k=1), group=C), k=1))
    check_rewrite(m, ENTER_EXIT + [MS_CONV] * 3, fired=["qdq-conv-channels-last"])


def test_target_onnx_keeps_qlinearconv_nchw():
    n = Net()
    m = n.model(n.conv(n.conv(n.conv(n.x))))
    res = check_rewrite(m, ["QuantizeLinear", "QLinearConv", "QLinearConv", "QLinearConv", "DequantizeLinear"],
                        not_fired=["qdq-conv-channels-last"], target="onnx")
    assert not transposes(res.model)


def test_layout_nchw_keeps_qlinearconv_nchw():
    n = Net()
    m = n.model(n.conv(n.conv(n.conv(n.x))))
    check_rewrite(m, ["QuantizeLinear", "QLinearConv", "QLinearConv", "QLinearConv", "DequantizeLinear"],
                  not_fired=["qdq-conv-channels-last"], layout="nchw")


def test_16_bit_activations_get_no_channels_last_conv():
    # the contrib QLinearConv takes 8-bit activations only (and rules/qdq.egg fuses none of 16 bits)
    n = Net(in_type=T.UINT16, opset=21)
    m = n.model(n.conv(n.conv(n.x)))
    res = optimized(m, layout="nchwc")
    assert res.report["saturation"]["rule_matches"].get("qdq-conv-channels-last", 0) == 0
    assert not ms_convs(res.model) and "QLinearConv" not in op_list(res.model)
    # the float convolutions may run blocked (NCHWc), rounding a float sum otherwise: a step at most
    assert_same_outputs(m, res.model, rtol=1e-4, atol=OUT_SCALE * 1.01)
    # verification refuses that step (11 of 2304 outputs) where onnxruntime's own optimization
    # moves none: eqsat optimize writes the program with fewer requantizing fusions, still
    # without a channels-last conv
    assert_written(m, res)
    assert not ms_convs(res.model) and "QLinearConv" not in op_list(res.model)


def test_a_residual_qlinearadd_runs_channels_last():
    n = Net()
    a = n.conv(n.x)
    s = n.op("Add", [a, n.conv(a)])
    m = n.model(n.conv(s))
    res = check_rewrite(m, ENTER_EXIT + [MS_CONV] * 3 + ["com.microsoft.QLinearAdd"],
                        fired=["qdq-add-channels-last-a", "qdq-add-channels-last-b"])
    assert len(transposes(res.model)) == 2


def test_an_add_whose_channels_last_input_is_its_second_runs_channels_last():
    # the first input comes from a lone uint8 graph-input pair, the second from a conv chain
    n = Net()
    s = n.op("Add", [n.x, n.conv(n.conv(n.x))])
    m = n.model(n.conv(s))
    res = check_rewrite(m, ENTER_EXIT + [MS_CONV] * 3 + ["com.microsoft.QLinearAdd"],
                        fired=["qdq-add-channels-last-b"])
    assert transposes(res.model) == [[0, 2, 3, 1], [0, 3, 1, 2]]  # x transposed once, for both readers


def test_a_broadcasting_add_stays_nchw():
    # Add(conv, bias [1, C, 1, 1]): the second operand is not permuted alike, so the rule refuses
    n = Net()
    bias = n.const("c", n.rng.standard_normal((1, C, 1, 1)).astype(np.float32))
    bd = n.qdq(bias, 0.04)
    s = n.op("Add", [n.conv(n.conv(n.conv(n.x))), bd])
    res = check_rewrite(n.model(s), ENTER_EXIT + [MS_CONV] * 3 + ["com.microsoft.QLinearAdd"],
                        not_fired=["qdq-add-channels-last-a", "qdq-add-channels-last-b"])
    add = next(x for x in res.model.graph.node if x.op_type == "QLinearAdd")
    assert add.input[0] not in {o for x in ms_convs(res.model) for o in x.output}  # reads the NCHW value


def test_an_add_of_two_nchw_values_gets_no_channels_last_form():
    n = Net()
    y = n.qdq("x", 0.04, zero=100)
    m = n.model(n.op("Add", [n.x, y]))
    check_rewrite(m, ["QuantizeLinear", "QuantizeLinear", "com.microsoft.QLinearAdd", "DequantizeLinear"],
                  not_fired=["qdq-add-channels-last-a", "qdq-add-channels-last-b"])


def test_global_average_pool_after_a_channels_last_chain_runs_channels_last():
    n = Net()
    g = n.op("GlobalAveragePool", [n.conv(n.conv(n.x))])
    res = check_rewrite(n.model(g, [1, C, 1, 1]),
                        ENTER_EXIT + [MS_CONV] * 2 + ["com.microsoft.QLinearGlobalAveragePool"],
                        fired=["qdq-global-average-pool-channels-last"])
    gap = next(x for x in res.model.graph.node if x.op_type == "QLinearGlobalAveragePool")
    assert attr(gap, "channels_last") == 1


def test_global_average_pool_of_an_nchw_value_stays_nchw():
    n = Net()
    g = n.op("GlobalAveragePool", [n.x])
    check_rewrite(n.model(g, [1, C, 1, 1]),
                  ["QuantizeLinear", "com.microsoft.QLinearGlobalAveragePool", "DequantizeLinear"],
                  not_fired=["qdq-global-average-pool-channels-last"])


def test_maxpool_between_one_scale_runs_as_nhwc_maxpool():
    n = Net()
    a = n.conv(n.conv(n.x))
    p = n.op("MaxPool", [a], scale=n.scales[a], kernel_shape=[2, 2], strides=[2, 2])
    res = check_rewrite(n.model(n.conv(p)), ENTER_EXIT + [MS_CONV] * 3 + ["com.microsoft.NhwcMaxPool"],
                        fired=["qdq-maxpool-channels-last"])
    assert len(transposes(res.model)) == 2


def test_maxpool_whose_q_has_another_scale_is_not_rewritten():
    n = Net()
    a = n.conv(n.conv(n.x))
    y = n.name("y")
    n.nodes.append(helper.make_node("MaxPool", [a], [y], kernel_shape=[2, 2], strides=[2, 2]))
    p = n.qdq(y, n.scales[a], q_scale=n.scales[a] * 1.5)
    check_rewrite(n.model(p), ["QuantizeLinear", "QLinearConv", "QLinearConv", "DequantizeLinear", "MaxPool",
                               "QuantizeLinear", "DequantizeLinear"],
                  not_fired=["qdq-maxpool-channels-last"])


def test_concat_of_channels_last_values_runs_on_axis_3():
    n = Net()
    a = n.conv(n.conv(n.x))
    b = n.conv(a)
    c = n.op("Concat", [a, b], axis=1)
    y = n.name("y")  # a 1x1 conv of the 2C channels
    w = n.rng.integers(-60, 61, (C, 2 * C, 1, 1)).astype(np.int8)
    wq, ws, wz = n.const("w", w), n.const("ws", np.array(0.003, np.float32)), n.const("wz", np.array(0, np.int8))
    wd = n.name("wd")
    n.nodes += [helper.make_node("DequantizeLinear", [wq, ws, wz], [wd]), helper.make_node("Conv", [c, wd], [y])]
    out = n.qdq(y, 0.05)
    res = check_rewrite(n.model(out), ENTER_EXIT + [MS_CONV] * 4 + ["com.microsoft.QLinearConcat"],
                        fired=["qdq-concat-channels-last-input", "qdq-concat-channels-last"])
    cat = next(x for x in res.model.graph.node if x.op_type == "QLinearConcat")
    assert attr(cat, "axis") == 3


def test_concat_on_another_axis_stays_as_it_is():
    n = Net()
    a = n.conv(n.conv(n.x))
    c = n.op("Concat", [a, n.conv(a)], axis=2)
    check_rewrite(n.model(c, (1, C, 2 * HW, HW)), ["QuantizeLinear", "QLinearConv", "QLinearConv", "QLinearConv",
                                                   "com.microsoft.QLinearConcat", "DequantizeLinear"],
                  not_fired=["qdq-concat-channels-last-input", "qdq-concat-channels-last"])


def test_a_per_channel_dq_after_the_chain_reads_the_nchw_value():
    # a per-channel DQ (axis 1) would need its axis remapped to read the NHWC value: it is left
    # after the Transpose back (qdq-dq-past-transpose moves per-tensor DQs only)
    n = Net()
    a = n.conv(n.conv(n.conv(n.x)))
    y = n.name("y")
    n.nodes.append(helper.make_node("Relu", [a], [y]))
    p = n.qdq(y, 0.05, axis=1)
    # (one step of the conv's requantization may move the per-channel output by one of its steps, up to 0.1)
    m = n.model(p)
    res = check_rewrite(m, ENTER_EXIT + [MS_CONV] * 3 + ["Relu", "QuantizeLinear", "DequantizeLinear"],
                        fired=["qdq-conv-channels-last"], atol=0.101,
                        unverified="requantizing: eqsat optimize retries (per-axis scales, no QDQ allowance)")
    sizes = {i.name: int(np.prod(i.dims)) for i in res.model.graph.initializer}
    per_channel = [x for x in res.model.graph.node if x.op_type in ("QuantizeLinear", "DequantizeLinear")
                   and sizes.get(x.input[1]) == C]
    assert len(per_channel) == 2 and all(attr(x, "axis", 1) == 1 for x in per_channel)
    relu = next(x for x in res.model.graph.node if x.op_type == "Relu")
    back = next(x for x in res.model.graph.node if x.op_type == "Transpose" and attr(x, "perm") == [0, 3, 1, 2])
    producer = {o: x for x in res.model.graph.node for o in x.output}
    assert producer[relu.input[0]].input[0] == back.output[0]  # Relu(DQ(the NCHW value))
    assert_written(m, res)  # the program eqsat optimize writes instead


def test_a_transpose_that_is_no_layout_change_stays():
    # Transpose(., [0, 1, 3, 2]) between convs (H and W swapped): it composes with the layout's
    # Transpose back into one Transpose(., [0, 3, 2, 1]) of the NHWC value, and nothing cancels it.
    # (The conv after it stays float, as in onnxruntime: its DQ reaches it only through the move of
    # a DQ past the Transpose, qdq-u8-in.)
    n = Net()
    a = n.conv(n.conv(n.x))
    t = n.name("t")
    n.nodes.append(helper.make_node("Transpose", [a], [t], perm=[0, 1, 3, 2]))
    n.scales[t] = n.scales[a]
    # (its weight's DequantizeLinear folded: a float Conv, blocked where the cost model prefers)
    ops = ["QuantizeLinear", "Transpose", MS_CONV, MS_CONV, "Transpose", "DequantizeLinear", "QuantizeLinear",
           "QLinearConv", "DequantizeLinear"]
    blocked = [f"{NCHWC}.{op}" for op in ("ReorderInput", "Conv", "ReorderOutput")]
    m = n.model(n.conv(n.conv(t)))
    res = check_rewrite(m, (ops + ["Conv"], ops + blocked), fired=["qdq-conv-channels-last"],
                        unverified="requantizing: eqsat optimize retries")
    assert transposes(res.model) == [[0, 2, 3, 1], [0, 3, 2, 1]]
    assert_written(m, res)  # the program eqsat optimize writes instead


def test_onnxruntimes_own_channels_last_model_is_read_and_written_back(tmp_path):
    # ORT_ENABLE_ALL's saved model of a chain with a one-scale MaxPool: com.microsoft.QLinearConv
    # (channels_last 1) and com.microsoft.NhwcMaxPool are ops of eqsat's language, encoded and
    # decoded with their attributes
    import onnxruntime as ort

    n = Net()
    a = n.conv(n.conv(n.x))
    p = n.op("MaxPool", [a], scale=n.scales[a], kernel_shape=[2, 2], strides=[2, 2])
    src = tmp_path / "m.onnx"
    onnx.save(n.model(n.conv(p), (1, C, HW // 2, HW // 2)), src)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(tmp_path / "all.onnx")
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    theirs = onnx.load(str(tmp_path / "all.onnx"))
    assert "com.microsoft.NhwcMaxPool" in op_list(theirs) and len(ms_convs(theirs)) == 3
    res = optimized(theirs, layout="nchwc")
    assert sorted(op_list(res.model)) == sorted(op_list(theirs))
    assert all(attr(c, "channels_last") == 1 for c in ms_convs(res.model))
    pool = next(x for x in res.model.graph.node if x.op_type == "NhwcMaxPool")
    assert list(attr(pool, "kernel_shape")) == [2, 2] and list(attr(pool, "strides")) == [2, 2]
    assert_same_outputs(theirs, res.model, ort_optimize=False)
    assert_verified(theirs, res)


@pytest.mark.parametrize("seed", range(16))
def test_random_qdq_nets_compute_the_same_codes_channels_last_as_nchw(seed):
    # The layout change is exact: on random QDQ nets of convolutions (grouped, depthwise),
    # Adds, Muls, LeakyRelus (alpha negative or > 1), MaxPools between one scale and Concats,
    # uint8 or int8, the program with channels-last forms gives bit for bit the outputs of the
    # program fused in NCHW (onnxruntime's optimizations off on both)
    from eqsat.verification import random_inputs, run

    rng = np.random.default_rng(seed)
    n = Net(seed=seed, in_type=[T.UINT8, T.INT8][seed % 2])
    vals = [n.conv(n.x)]
    for _ in range(6):
        k, a = int(rng.integers(0, 7)), vals[int(rng.integers(len(vals)))]
        if k <= 1:
            v = n.conv(a, group=int(rng.choice([1, 4, C])))
        elif k == 2:
            v = n.op("Add", [a, vals[-1]])
        elif k == 3:  # a Concat, then a 1x1 conv back to C channels
            c = n.op("Concat", [a, vals[-1]], axis=1)
            w = n.rng.integers(-60, 61, (C, 2 * C, 1, 1)).astype(np.int8)
            wq, ws = n.const("w", w), n.const("ws", np.array(0.003, np.float32))
            wz, wd, y = n.const("wz", np.array(0, np.int8)), n.name("wd"), n.name("y")
            n.nodes += [helper.make_node("DequantizeLinear", [wq, ws, wz], [wd]),
                        helper.make_node("Conv", [c, wd], [y])]
            v = n.qdq(y, 0.05)
        elif k == 4:
            v = n.op("MaxPool", [a], scale=n.scales[a], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        elif k == 5:
            v = n.op("LeakyRelu", [a], alpha=float(rng.choice([-0.5, 0.1, 2.0])))
        else:
            v = n.op("Mul", [a, vals[-1]])
        vals.append(v)
    m = n.model(n.op("GlobalAveragePool", [vals[-1]]), out_shape=(1, C, 1, 1))
    last, nchw = optimized(m, layout="nchwc").model, optimized(m, layout="nchw").model
    feeds = random_inputs(m)
    got, want = run(last, feeds, False), run(nchw, feeds, False)
    assert all(np.array_equal(got[k], want[k]) for k in want)


def test_a_symbolic_residual_chain_moves_what_onnxruntimes_own_fusion_moves_at_any_size():
    # A red-team probe ran a channels-last chain ending in QLinearAdd and a QLinearConv over a
    # symbolic h x w (verified at h=2, w=3) at 174 sizes: at 64 x 64 alone its outputs lay two
    # output steps (0.1) from the unoptimized original's. That is onnxruntime's own rounding: its
    # ORT_ENABLE_ALL (and EXTENDED) optimization of the original gives the written program's
    # outputs bit for bit at every size, and moves them two steps on some inputs at any size (9 of
    # 149 sizes with one draw each, 64 x 64 among them with one seed of three); no kernel chosen
    # by size separates the two
    from eqsat.verification import run

    n = Net(shape=(1, C, "h", "w"))
    a = n.conv(n.conv(n.x))
    m = n.model(n.conv(n.op("Add", [a, n.conv(a)])), out_shape=(1, C, None, None))
    res = check_rewrite(m, ENTER_EXIT + [MS_CONV] * 4 + ["com.microsoft.QLinearAdd"],
                        feeds={"x": np.random.default_rng(0).standard_normal((1, C, 5, 7)).astype(np.float32)},
                        fired=["qdq-add-channels-last-a"])
    steps = set()
    for seed, (h, w) in enumerate([(64, 64), (64, 64), (64, 63), (17, 16), (1, 30), (3, 3)]):
        x = np.random.default_rng(seed).standard_normal((1, C, h, w)).astype(np.float32)
        ours, theirs, plain = run(res.model, {"x": x}, False), run(m, {"x": x}, True), run(m, {"x": x}, False)
        assert np.array_equal(ours["out"], theirs["out"]), (h, w)
        steps.add(round(float(np.abs(ours["out"] - plain["out"]).max()) / OUT_SCALE))
    assert steps <= {0, 1, 2} and 2 in steps  # the probe's two steps, onnxruntime's own
