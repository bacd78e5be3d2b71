"""Guards of rules/layout.egg that `eqsat rules check` found missing once it could
instantiate the NCHWc rules (channels a multiple of the block, blocked inputs and filters):
onnxruntime's ReorderInput takes only a multiple of 4 channels, and its blocked
AveragePool gives NaN where the plain one gives 0 for a dilated window that holds only
padding. Each model stopped verification (exit 1) or reached the rule before the guard."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from eqsat.core.pipeline import Options, saturate

from .conftest import assert_same_outputs, assert_verified, optimized


def vi(name, shape):
    return helper.make_tensor_value_info(name, T.FLOAT, shape)


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def weight(name, shape):
    return numpy_helper.from_array(np.random.default_rng(0).standard_normal(shape).astype(np.float32), name)


def test_depthwise_conv_with_channels_not_a_multiple_of_4_stays_runnable(blocked):
    # 17 channels (more than a block, not a multiple of it): before, nchwc-conv-depthwise-padded
    # reordered the input with ReorderInput, which onnxruntime refuses for 17 channels: the
    # optimized model did not run, verification failed (exit 1)
    c = 17 if blocked < 17 else blocked + 1
    m = model([helper.make_node("Conv", ["x", "w"], ["c"], group=c, pads=[1, 1, 1, 1]),
               helper.make_node("Relu", ["c"], ["y"])],
              [vi("x", [1, c, 8, 8])], [vi("y", [1, c, 8, 8])], [weight("w", [c, 1, 3, 3])])
    res = optimized(m)
    assert res.report["saturation"]["rule_matches"].get("nchwc-conv-depthwise-padded", 0) == 0
    assert_same_outputs(m, res.model, rtol=1e-4, atol=1e-5)
    assert_verified(m, res)


def test_fused_conv_sum_input_with_channels_not_a_multiple_of_4_is_no_candidate(blocked):
    # Relu(Conv(x, w) + z), 18 output channels: before, nchwc-candidate-fused-conv-sum put
    # ReorderInput(z) on 18 channels into the e-graph (onnxruntime cannot run it)
    o = blocked + 2
    m = model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
               helper.make_node("Add", ["c", "z"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
              [vi("x", [1, blocked, 8, 8]), vi("z", [1, o, 8, 8])], [vi("y", [1, o, 8, 8])],
              [weight("w", [o, blocked, 3, 3])])
    got = saturate(m, Options()).report["saturation"]["rule_matches"]
    assert got.get("conv-add-relu", 0) == 1 and got.get("nchwc-candidate-fused-conv-sum", 0) == 0


def test_dilated_average_pool_stays_nchw(blocked):
    # a dilated window that holds only padding: onnxruntime's AveragePool gives 0, its
    # blocked AveragePool NaN; before, nchwc-average-pool rewrote it
    attrs = dict(kernel_shape=[2, 3], pads=[1, 1, 1, 0], dilations=[2, 2], strides=[2, 1])
    m = model([helper.make_node("AveragePool", ["x"], ["y"], **attrs)],
              [vi("x", [1, blocked, 1, 8])], [vi("y", [1, blocked, 1, 5])], opset=19)
    got = saturate(m, Options()).report["saturation"]["rule_matches"]
    assert got.get("nchwc-average-pool", 0) == 0


def test_pools_with_an_empty_output_stay_nchw(blocked):
    # a kernel taller than the input: the output has 0 rows. onnxruntime's MaxPool and
    # AveragePool give an empty tensor, their blocked forms kill the process (SIGFPE), so
    # verification of a model that used them would never report; before, the rules fired
    for op in ("MaxPool", "AveragePool"):
        m = model([helper.make_node(op, ["x"], ["y"], kernel_shape=[2, 3], strides=[1, 2])],
                  [vi("x", [1, blocked, 1, 8])], [vi("y", [1, blocked, 0, 3])])
        got = saturate(m, Options()).report["saturation"]["rule_matches"]
        assert not any(k.startswith("nchwc-") for k in got), (op, got)


def test_average_pool_with_ceil_mode_and_count_include_pad_stays_nchw(blocked):
    # ceil_mode 1 adds a window past the end; with count_include_pad 1 onnxruntime's
    # AveragePool and its blocked AveragePool divide that window by other counts (half the
    # value here: a 2x2 window over one column). Before, nchwc-average-pool rewrote it and
    # verification refused the whole model (exit 1, nothing written). ceil_mode -1 is on too.
    # 15 pixels a side: big enough that the convs around the pool still run blocked
    for cm in (1, -1):
        attrs = dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=cm, count_include_pad=1)
        m = model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                   helper.make_node("AveragePool", ["c"], ["p"], **attrs),
                   helper.make_node("Conv", ["p", "w2"], ["y"])],
                  [vi("x", [1, blocked, 15, 15])], [vi("y", [1, blocked, 8, 8])],
                  [weight("w", [blocked, blocked, 3, 3]), weight("w2", [blocked, blocked, 1, 1])])
        res = optimized(m)
        assert res.report["saturation"]["rule_matches"].get("nchwc-average-pool", 0) == 0
        assert_same_outputs(m, res.model, rtol=1e-4, atol=1e-4, ort_optimize=False)
        assert_verified(m, res)
        assert "com.microsoft.nchwc.Conv" in [f"{n.domain}.{n.op_type}" for n in res.model.graph.node]


def test_average_pool_with_ceil_mode_alone_or_count_include_pad_alone_is_blocked(blocked):
    # the guard's other side: either attribute alone keeps the blocked pool, which computes
    # what the NCHW one does (a window past the end with count_include_pad 0)
    for cm, cip in ((1, 0), (0, 1)):
        attrs = dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=cm, count_include_pad=cip, pads=[0, 1, 1, 0])
        m = model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                   helper.make_node("AveragePool", ["c"], ["p"], **attrs),
                   helper.make_node("Conv", ["p", "w2"], ["y"])],
                  [vi("x", [1, blocked, 8, 8])], [vi("y", [1, blocked, None, None])],
                  [weight("w", [blocked, blocked, 3, 3]), weight("w2", [blocked, blocked, 1, 1])])
        res = optimized(m)
        assert res.report["saturation"]["rule_matches"].get("nchwc-average-pool", 0) > 0, (cm, cip)
        assert_same_outputs(m, res.model, rtol=1e-4, atol=1e-4, ort_optimize=False)
        assert_verified(m, res)


def _pool_after_convs(op, c, **attrs):
    """Conv -> Conv -> op over an image of symbolic height and width h, w."""
    return model([helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]),
                  helper.make_node("Conv", ["a", "w2"], ["b"], pads=[1, 1, 1, 1]),
                  helper.make_node(op, ["b"], ["y"], **attrs)],
                 [vi("x", [1, c, "h", "w"])], [vi("y", [1, c, None, None])],
                 [weight("w", [c, c, 3, 3]), weight("w2", [c, c, 3, 3])])


def test_pools_whose_output_may_be_empty_for_some_size_stay_nchw(blocked):
    # a 3x3 window without padding over a symbolic h x w: for h = 2 the output has 0 rows,
    # which onnxruntime's MaxPool and AveragePool return; their blocked forms stop the
    # process (SIGFPE) for h = w = 2. The static guard (no 0 in the output's shape) let the
    # symbolic shape through: written with exit 0 (verification drew h = 2, w = 3, a size the
    # blocked kernels happen to survive)
    for op in ("MaxPool", "AveragePool"):
        m = _pool_after_convs(op, 2 * blocked, kernel_shape=[3, 3])
        res = optimized(m)
        got = res.report["saturation"]["rule_matches"]
        assert not any(k.startswith("nchwc-") and "pool" in k for k in got), (op, got)
        assert not any(n.domain == "com.microsoft.nchwc" and "Pool" in n.op_type for n in res.model.graph.node)
        for h, w in ((2, 2), (5, 6)):
            assert_same_outputs(m, res.model, dims={"h": h, "w": w}, rtol=1e-4, atol=1e-4, ort_optimize=False)
            assert_verified(m, res, {"h": h, "w": w})


def test_pools_whose_window_fits_in_the_padding_stay_blocked_at_any_size(blocked):
    # a window no taller than 1 + both pads (ResNet's 3x3 MaxPool with pads 1, a 5x5 one with
    # pads 2 as in YOLO's SPPF) has an output row for every input row: blocked at any size
    for op, k, p in (("MaxPool", 3, 1), ("MaxPool", 5, 2), ("AveragePool", 3, 1)):
        m = _pool_after_convs(op, 2 * blocked, kernel_shape=[k, k], pads=[p] * 4, strides=[2, 2])
        res = optimized(m)
        fired = "nchwc-max-pool" if op == "MaxPool" else "nchwc-average-pool"
        assert res.report["saturation"]["rule_matches"].get(fired, 0) > 0, (op, k)
        for h, w in ((1, 1), (2, 3), (7, 5)):
            assert_same_outputs(m, res.model, dims={"h": h, "w": w}, rtol=1e-4, atol=1e-4, ort_optimize=False)
            assert_verified(m, res, {"h": h, "w": w})


_RUN_AT_SMALL_SIZES = """
import sys, numpy as np, onnxruntime as ort
def session(path):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
a, b = session(sys.argv[1]), session(sys.argv[2])
c = a.get_inputs()[0].shape[1]
compared = 0
for h in range(7):
    for w in range(7):
        x = np.random.default_rng(h * 7 + w).standard_normal((1, c, h, w)).astype(np.float32)
        try:
            want = a.run(None, {"x": x})
        except Exception:  # the original refuses this size (a Conv kernel taller than the input):
            try:  # the optimized model may refuse it too, but must not stop the process
                b.run(None, {"x": x})
            except Exception:
                pass
            continue
        got = b.run(None, {"x": x})
        for u, v in zip(want, got):
            assert u.shape == v.shape, (h, w, u.shape, v.shape)
            np.testing.assert_allclose(v, u, rtol=1e-4, atol=1e-4, err_msg=f"h={h} w={w}")
        compared += 1
assert compared >= 16, compared
print(compared)
"""


def test_blocked_ops_over_symbolic_sizes_run_as_the_original_at_every_small_size(blocked, tmp_path):
    # the blocked forms that stay blocked over a symbolic h x w (a Conv whose output may have
    # 0 rows, GlobalAveragePool of a 0-pixel map, a ceil-mode MaxPool whose window fits in its
    # pads): for h, w in 0..6 they return what the NCHW ops return, in a child process, since
    # a blocked kernel that divides by an empty extent stops the process (SIGFPE)
    import subprocess
    import sys

    c = 2 * blocked
    tail = {"Conv": [helper.make_node("Conv", ["a", "w2"], ["y"], kernel_shape=[3, 3], strides=[3, 3])],
            "GlobalAveragePool": [helper.make_node("GlobalAveragePool", ["a"], ["y"])],
            "MaxPool": [helper.make_node("MaxPool", ["a"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                         pads=[1, 1, 1, 1], ceil_mode=1)]}
    for op, nodes in tail.items():
        m = model([helper.make_node("Conv", ["x", "w"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]), *nodes],
                  [vi("x", [1, c, "h", "w"])], [vi("y", [1, c, None, None])],
                  [weight("w", [c, c, 3, 3]), weight("w2", [c, c, 3, 3])])
        res = optimized(m)
        assert any(n.domain == "com.microsoft.nchwc" and n.op_type == op for n in res.model.graph.node), op
        onnx.save(m, tmp_path / "a.onnx")
        onnx.save(res.model, tmp_path / "b.onnx")
        p = subprocess.run([sys.executable, "-c", _RUN_AT_SMALL_SIZES, str(tmp_path / "a.onnx"),
                            str(tmp_path / "b.onnx")], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, (op, p.returncode, p.stderr[-2000:])
        assert int(p.stdout.split()[-1]) >= 16, (op, p.stdout)
