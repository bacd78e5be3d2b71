"""The NCHWc figures of a hardware profile (`layouts.nchwc`, rules/layout.egg), measured on this
machine by `eqsat calibrate` with onnxruntime's graph optimizations off:

- block: onnxruntime's channel block here (eqsat.backends.ort.target.nchwc_block: 8 with AVX2, 16 with
  AVX-512); no figures where it has no blocked kernels;
- conv_speedup: how much faster a blocked convolution is than the NCHW one (geometric mean
  over dense 1x1 and 3x3 convolutions of ResNet-50's widths, 7 to 56 pixels);
- depthwise_gflops: a blocked depthwise 3x3 convolution's throughput (and, for the profile's
  top level, the NCHW one's: no GEMM, far below matmul_gflops);
- pool_speedup: how much faster a blocked MaxPool or AveragePool (3x3 window) is (and, for
  the profile's top level, pool_gops: the NCHW one's window elements visited a second, output
  elements times 9, in G/s: its kernel visits each window, far below the vector rate's count);
- pixel_conv_speedup: how much faster a blocked 1x1 convolution of a one-pixel image is
  (squeeze-excite's two products, 128 to 960 channels, filters read once each, as in a
  network): the NCHW kernel reads the filter at half the blocked one's rate;
- global_pool_speedup: how much faster a blocked GlobalAveragePool is (squeeze-excite's
  pooling, 16 to 1152 channels, 7 to 112 pixels): the blocked kernel reads its input at two
  to three times the NCHW one's rate;
- reorder_gbps: ReorderInput plus ReorderOutput, bytes read and written per second (the
  tensors of one layer stay in cache: faster than mem_gbps's stream).
- upsample_speedup: how much faster a blocked linear Upsample is than the NCHW Resize
  (segmentation heads' bilinear upsampling by 2 to 8); `resize_ns` gives the NCHW Resize's
  time an output element, which `eqsat calibrate` turns into the profile's
  interpolation_flops at its vector rate.

Method: each shape keeps its channels and pixels (stride 1, same padding), so that one
ReorderInput -> ReorderOutput model R times the reorders a blocked model B needs around its
op: the blocked op's time is B - R. The NCHW op N, B and R run side by side
(eqsat.backends.ort.latency.compare), medians of `runs` rounds. Channel counts are multiples of 16, so
the same shapes serve both block widths.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from eqsat.backends.ort.latency import compare
from eqsat.backends.ort.qlinear_conv import qlinear_conv_model
from eqsat.backends.ort.target import NCHWC_DOMAIN, nchwc_block
from eqsat.oracle.layout import reorder_filter

DENSE = [(128, 1, 56), (256, 1, 28), (512, 1, 14), (1024, 1, 7),  # (channels, kernel, pixels)
         (64, 3, 56), (128, 3, 28), (256, 3, 14), (512, 3, 7)]
DEPTHWISE = [(64, 56), (128, 28), (256, 14), (512, 7)]
POOLS = [(op, c, p) for op in ("MaxPool", "AveragePool") for c, p in ((64, 56), (128, 28), (256, 14), (512, 7))]
STEMS = [(16, 224), (24, 224), (32, 224)]  # (output channels, pixels) of an image's first 3x3 convolution
GLOBAL_POOLS = [(32, 112), (96, 56), (144, 56), (240, 28), (480, 14), (1152, 7)]  # (channels, pixels)
PIXEL_CONVS = [(128, 32), (480, 128), (672, 176), (960, 240), (240, 960), (176, 672)]  # (in, out) channels
UPSAMPLES = [(128, 20, 2), (32, 56, 2), (32, 40, 8)]  # (channels, pixels, factor): linear, half_pixel
# (input channels, output channels, kernel, pixels): NCHW convolutions narrower than NARROW_CONV_M
NARROW = [(16, 8, 1, 112), (16, 16, 1, 112), (32, 16, 1, 56), (32, 32, 1, 56), (16, 16, 3, 56), (32, 32, 3, 28)]
FLOOR = 0.05  # the blocked op's time is at least this share of B (B - R is a difference of noisy medians)


def _model(nodes, shape, weights: dict):
    vi = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)]
    g = helper.make_graph(nodes, "calibrate-layout", vi, out,
                          [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(NCHWC_DOMAIN, 1)])


def _blocked(node, channels: int):
    """ReorderInput -> node (reading "xb", writing "yb") -> ReorderOutput."""
    return [helper.make_node("ReorderInput", ["x"], ["xb"], domain=NCHWC_DOMAIN),
            node,
            helper.make_node("ReorderOutput", ["yb"], ["y"], domain=NCHWC_DOMAIN, channels=channels)]


def _three(nchw_node, blocked_node, shape, weights: dict, blocked_weights: dict):
    """The NCHW model N, the blocked one B, the reorders R, and their input."""
    c = shape[1]
    n = _model([nchw_node], shape, weights)
    b = _model(_blocked(blocked_node, c), shape, blocked_weights)
    r = _model([helper.make_node("ReorderInput", ["x"], ["xb"], domain=NCHWC_DOMAIN),
                helper.make_node("ReorderOutput", ["xb"], ["y"], domain=NCHWC_DOMAIN, channels=c)], shape, {})
    return n, b, r, {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}


def _times(models, runs: int, threads: int) -> tuple[float, float, float]:
    """Milliseconds of the NCHW op, the blocked op (B - R) and the reorders (R)."""
    n, b, r, feeds = models
    tn, tb, tr = compare([n, b, r], feeds, runs=runs, threads=threads)
    return tn, max(tb - tr, FLOOR * tb), tr


def conv_models(c: int, k: int, pixels: int, group: int, block: int):
    """A k x k convolution of c channels to c (group 1, or c: depthwise) as `_three`'s models."""
    rng = np.random.default_rng(0)
    shape = [1, c, pixels, pixels]
    w = (rng.standard_normal((c, c // group, k, k)) * 0.1).astype(np.float32)
    attrs = dict(kernel_shape=[k, k], pads=[k // 2] * 4, strides=[1, 1], group=group)
    layout = "OIHWBo" if group > 1 else "OIHWBiBo"
    nchw = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
    blocked = helper.make_node("Conv", ["xb", "w"], ["yb"], domain=NCHWC_DOMAIN, **attrs)
    return _three(nchw, blocked, shape, {"w": w}, {"w": reorder_filter(w, block, layout)})


def pool_models(op: str, c: int, pixels: int):
    """A 3x3 MaxPool or AveragePool (stride 1, same padding) as `_three`'s models."""
    attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
    return _three(helper.make_node(op, ["x"], ["y"], **attrs),
                  helper.make_node(op, ["xb"], ["yb"], domain=NCHWC_DOMAIN, **attrs), [1, c, pixels, pixels], {}, {})


def global_pool_models(c: int, pixels: int, copies: int) -> tuple:
    """`copies` GlobalAveragePools of one [1, c, pixels, pixels] input, in NCHW and blocked (the
    input read as blocked: the kernel's time alone), and their input. The time of one pool is
    the difference between `copies` and one: the session's own overhead cancels."""
    shape = [1, c, pixels, pixels]
    vi = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(NCHWC_DOMAIN, 1)]

    def model(domain: str):
        outs = [f"y{i}" for i in range(copies)]
        g = helper.make_graph([helper.make_node("GlobalAveragePool", ["x"], [y], domain=domain) for y in outs],
                              "global-pool", vi,
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, c, 1, 1]) for y in outs])
        return helper.make_model(g, opset_imports=opsets)

    return model(""), model(NCHWC_DOMAIN), {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}


def global_pool_speedup(threads: int = 1, runs: int = 40) -> tuple[float, list[float]]:
    """The geometric mean over GLOBAL_POOLS of NCHW / blocked GlobalAveragePool time, and each ratio."""
    ratios = []
    for c, p in GLOBAL_POOLS:
        n1, b1, feeds = global_pool_models(c, p, 1)
        n4, b4, _ = global_pool_models(c, p, 4)
        tn1, tn4, tb1, tb4 = compare([n1, n4, b1, b4], feeds, runs=runs, threads=threads)
        tn, tb = (tn4 - tn1) / 3, (tb4 - tb1) / 3
        ratios.append(tn / max(tb, FLOOR * tn))
    return round(_geomean(ratios), 3), ratios


def pixel_conv_models(c: int, o: int, copies: int, block: int) -> tuple:
    """`copies` 1x1 convolutions of one [1, c, 1, 1] input to o channels, each with a filter of
    its own (read once a run, as a network reads its filters), in NCHW and blocked (the input
    read as blocked), and their input."""
    rng = np.random.default_rng(0)
    ws = [(rng.standard_normal((o, c, 1, 1)) * 0.1).astype(np.float32) for _ in range(copies)]
    vi = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 1, 1])]
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(NCHWC_DOMAIN, 1)]

    def model(domain: str):
        outs = [f"y{i}" for i in range(copies)]
        nodes = [helper.make_node("Conv", ["x", f"w{i}"], [y], domain=domain, kernel_shape=[1, 1])
                 for i, y in enumerate(outs)]
        inits = [numpy_helper.from_array(w if not domain else reorder_filter(w, block, "OIHWBiBo"), f"w{i}")
                 for i, w in enumerate(ws)]
        g = helper.make_graph(nodes, "pixel-conv", vi,
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, o, 1, 1])
                                                         for y in outs], inits)
        return helper.make_model(g, opset_imports=opsets)

    return model(""), model(NCHWC_DOMAIN), {"x": rng.standard_normal((1, c, 1, 1)).astype(np.float32)}


def pixel_conv_speedup(block: int, threads: int = 1, runs: int = 40) -> tuple[float, list[float]]:
    """The geometric mean over PIXEL_CONVS of NCHW / blocked time (16 convolutions against one,
    so that the session's overhead cancels), and each ratio."""
    ratios = []
    for c, o in PIXEL_CONVS:
        n1, b1, feeds = pixel_conv_models(c, o, 1, block)
        n16, b16, _ = pixel_conv_models(c, o, 16, block)
        tn1, tn16, tb1, tb16 = compare([n1, n16, b1, b16], feeds, runs=runs, threads=threads)
        tn, tb = (tn16 - tn1) / 15, (tb16 - tb1) / 15
        ratios.append(tn / max(tb, FLOOR * tn))
    return round(_geomean(ratios), 3), ratios


def conv_gflops(threads: int = 1, runs: int = 20) -> float:
    """Dense NCHW convolutions' throughput (the DENSE shapes; geometric mean, GFLOP/s)."""
    return round(_geomean(_dense_rates(threads, runs)), 2)


def _dense_rates(threads: int, runs: int) -> list[float]:
    rates = []
    for c, k, p in DENSE:
        n, _, _, feeds = conv_models(c, k, p, 1, 8)
        (ms,) = compare([n], feeds, runs=runs, threads=threads)
        rates.append(2.0 * c * c * k * k * p * p / ms / 1e6)
    return rates


def nchw_conv_model(cin: int, cout: int, k: int, pixels: int, stride: int = 1) -> tuple:
    """A k x k, same-padded NCHW convolution of `cin` channels to `cout` on `pixels` x `pixels`,
    and its input."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((cout, cin, k, k)) * 0.1).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[k, k], pads=[k // 2] * 4,
                            strides=[stride, stride])
    vi = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, pixels, pixels])]
    yo = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    g = helper.make_graph([node], "conv", vi, yo, [numpy_helper.from_array(w, "w")])
    return (helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
            {"x": rng.standard_normal((1, cin, pixels, pixels)).astype(np.float32)})


def narrow_conv_exponent(threads: int = 1, runs: int = 40) -> tuple[float, list[float]]:
    """(a, each shape's a): an NCHW convolution with M < NARROW_CONV_M output channels runs at
    (M / NARROW_CONV_M) ** a of the rate of the same convolution with NARROW_CONV_M outputs
    (same input, kernel and pixels, timed side by side); a is the median over the NARROW
    shapes of log(rate ratio) / log(M / NARROW_CONV_M), at least 0 (never faster)."""
    from eqsat.extract.costs.roofline import NARROW_CONV_M

    each = []
    for cin, cout, k, p in NARROW:
        narrow, feeds = nchw_conv_model(cin, cout, k, p)
        wide, _ = nchw_conv_model(cin, NARROW_CONV_M, k, p)
        t_narrow, t_wide = compare([narrow, wide], feeds, runs=runs, threads=threads)
        share = (cout / t_narrow) / (NARROW_CONV_M / t_wide)  # rate ratio: FLOPs scale with the outputs
        each.append(max(math.log(share) / math.log(cout / NARROW_CONV_M), 0.0))
    return round(statistics.median(each), 3), [round(a, 3) for a in each]


def stem_models(cout: int, pixels: int) -> tuple:
    """An image's first layer: a 3x3, stride 2 NCHW convolution of 3 channels to `cout`."""
    return nchw_conv_model(3, cout, 3, pixels, stride=2)


def stem_conv_slowdown(threads: int = 1, runs: int = 20) -> float:
    """How much slower the STEMS convolutions (3 channels, 3x3, stride 2) run than the DENSE
    ones, both measured here side by side in time (ratio of geometric-mean throughputs)."""
    stems = []
    for cout, p in STEMS:
        model, feeds = stem_models(cout, p)
        (ms,) = compare([model], feeds, runs=runs, threads=threads)
        stems.append(2.0 * 27 * cout * (p // 2) ** 2 / ms / 1e6)
    return round(_geomean(_dense_rates(threads, runs)) / _geomean(stems), 3)


def upsample_models(c: int, pixels: int, factor: int) -> tuple:
    """A linear (half_pixel) Resize by `factor` of [1, c, pixels, pixels] and onnxruntime's
    blocked Upsample of the same tensor (read as blocked: the kernel's time alone), with
    their input."""
    shape, out = [1, c, pixels, pixels], [1, c, pixels * factor, pixels * factor]
    vi = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    yo = [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)]
    resize = helper.make_graph([helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear",
                                                 coordinate_transformation_mode="half_pixel")],
                               "resize", vi, yo, [numpy_helper.from_array(np.array(out, np.int64), "sizes")])
    blocked = helper.make_graph([helper.make_node("Upsample", ["x"], ["y"], domain=NCHWC_DOMAIN, mode="linear",
                                                  coordinate_transformation_mode="half_pixel",
                                                  scales=[1, 1, factor, factor])], "upsample", vi, yo)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(NCHWC_DOMAIN, 1)]
    return (helper.make_model(resize, opset_imports=opsets), helper.make_model(blocked, opset_imports=opsets),
            {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)})


def resize_ns(threads: int = 1, runs: int = 20) -> float:
    """Nanoseconds a linear NCHW Resize takes an output element (the UPSAMPLES shapes; geometric mean)."""
    per = []
    for c, p, f in UPSAMPLES:
        resize, _, feeds = upsample_models(c, p, f)
        (ms,) = compare([resize], feeds, runs=runs, threads=threads)
        per.append(ms * 1e6 / (c * (p * f) ** 2))
    return round(_geomean(per), 3)


def qconv_model(c: int, k: int, pixels: int, group: int) -> tuple:
    """A channels-last 8-bit convolution (com.microsoft.QLinearConv, channels_last 1; uint8
    activations, int8 weights in [-60, 60], per tensor) of c channels to c, and its input."""
    rng = np.random.default_rng(0)
    shape = [1, pixels, pixels, c]
    consts = {"w": rng.integers(-60, 61, (c, c // group, k, k)).astype(np.int8),
              "x_scale": np.float32(0.02), "x_zero_point": np.uint8(128),
              "w_scale": np.float32(0.01), "w_zero_point": np.int8(0),
              "y_scale": np.float32(0.05), "y_zero_point": np.uint8(128)}
    model = qlinear_conv_model(shape, consts, channels_last=1, kernel_shape=[k, k], pads=[k // 2] * 4, group=group)
    return model, {"x": rng.integers(0, 256, shape).astype(np.uint8)}


def qconv_gops(threads: int = 1, runs: int = 20) -> dict:
    """{"qconv_gops": dense, "qconv_depthwise_gops": depthwise}: channels-last 8-bit convolutions'
    throughput in GOP/s (two ops a multiply-add), geometric means over the DENSE and DEPTHWISE
    shapes (rules/qdq_nhwc.egg; the roofline adds an NCHW QLinearConv's two inner transposes
    as copies); {} where onnxruntime lacks the kernel."""
    out = {}
    for key, shapes in (("qconv_gops", [(c, k, p, 1) for c, k, p in DENSE]),
                        ("qconv_depthwise_gops", [(c, 3, p, c) for c, p in DEPTHWISE])):
        rates = []
        for c, k, p, g in shapes:
            try:
                model, feeds = qconv_model(c, k, p, g)
                (ms,) = compare([model], feeds, runs=runs, threads=threads)
            except Exception:  # noqa: BLE001 - no com.microsoft QLinearConv here: no figure
                return {}
            rates.append(2.0 * c * (c // g) * k * k * p * p / ms / 1e6)
        out[key] = round(_geomean(rates), 1)
    return out


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def measure(threads: int = 1, runs: int = 40) -> dict | None:
    """{"depthwise_gflops": NCHW rate, "pool_gops": NCHW window rate, "layouts": {"nchwc":
    {...}}}, or None where onnxruntime has no blocked kernels here."""
    block = nchwc_block()
    if not block:
        return None
    dense = []
    for c, k, p in DENSE:
        tn, tb, _ = _times(conv_models(c, k, p, 1, block), runs, threads)
        dense.append(tn / tb)
    dw_nchw, dw_blocked = [], []
    for c, p in DEPTHWISE:
        tn, tb, _ = _times(conv_models(c, 3, p, c, block), runs, threads)
        flops = 2.0 * c * 9 * p * p
        dw_nchw.append(flops / tn / 1e6)
        dw_blocked.append(flops / tb / 1e6)
    pools, pool_rates, reorders = [], [], []
    for op, c, p in POOLS:
        tn, tb, tr = _times(pool_models(op, c, p), runs, threads)
        pools.append(tn / tb)
        pool_rates.append(9 * c * p * p / tn / 1e6)  # 3x3 windows, stride 1, same padding
        reorders.append(4 * 4 * c * p * p / tr / 1e6)  # each reorder reads and writes the tensor
    ups = []
    for c, p, f in UPSAMPLES:
        resize, blocked, feeds = upsample_models(c, p, f)
        tn, tb = compare([resize, blocked], feeds, runs=runs, threads=threads)
        ups.append(tn / tb)
    global_pools, gp = global_pool_speedup(threads, runs)
    pixel, px = pixel_conv_speedup(block, threads, runs)
    return {
        "depthwise_gflops": round(_geomean(dw_nchw), 2),
        "pool_gops": round(_geomean(pool_rates), 2),
        "layouts": {"nchwc": {
            "block": block,
            "conv_speedup": round(_geomean(dense), 3),
            "depthwise_gflops": round(_geomean(dw_blocked), 2),
            "pool_speedup": round(_geomean(pools), 3),
            "global_pool_speedup": global_pools,
            "pixel_conv_speedup": pixel,
            "reorder_gbps": round(_geomean(reorders), 2),
            "upsample_speedup": round(_geomean(ups), 3),
            "source": f"measured by `eqsat calibrate` (eqsat/backends/ort/calibrate_layout.py): block {block}; "
                      "geometric means "
                      f"over {len(DENSE)} dense convolutions (blocked/NCHW {min(dense):.2f} to {max(dense):.2f}), "
                      f"{len(DEPTHWISE)} depthwise 3x3 (NCHW {min(dw_nchw):.1f} to {max(dw_nchw):.1f} GFLOP/s, "
                      f"blocked {min(dw_blocked):.1f} to {max(dw_blocked):.1f}), {len(POOLS)} 3x3 pools "
                      f"({min(pools):.2f} to {max(pools):.2f}) and their reorders, {len(GLOBAL_POOLS)} "
                      "global average pools "
                      f"({min(gp):.2f} to {max(gp):.2f}), {len(PIXEL_CONVS)} one-pixel 1x1 convolutions "
                      f"({min(px):.2f} to {max(px):.2f}), {len(UPSAMPLES)} linear upsamplings "
                      f"({min(ups):.2f} to {max(ups):.2f}); medians of {runs} rounds "
                      f"side by side, onnxruntime's optimizations off, {threads} thread(s)",
        }},
    }
