"""Measure a hardware profile for the roofline cost model on this machine, with onnxruntime
(CPU, one thread unless told otherwise):

- matmul_gflops: a 512 x 512 x 512 float32 MatMul;
- vector_gflops: a chain of 20 element-wise Muls on 16 Ki-element vectors that stay in cache,
  less each op's kernel_overhead_us (the roofline adds that apart). The method before, one
  64 Ki-element Mul a run, counted the run's own overhead (Python's and onnxruntime's, about
  25 us here) as arithmetic and read 1.2 to 2.5 GFLOP/s where the chain reads 1.9 to 5.4;
- mem_gbps: an element-wise Add of two 16 Mi-element vectors (192 MiB moved);
- cache_gbps: the same Add on 256 Ki-element vectors (3 MiB moved: an activation that stays
  in cache, what most element-wise ops between two convolutions move);
- conv_gflops: dense NCHW convolutions (1x1 and 3x3 of ResNet-50's widths, 7 to 56 pixels;
  geometric mean), which onnxruntime runs as im2col + GEMM below its MatMul rate;
- kernel_overhead_us: a chain of 200 Adds on one-element tensors, per op;
- merge_parallel_matmuls: whether one MatMul [128, 768] x [768, 2304] + Split beats three
  MatMuls [128, 768] x [768, 768] (a transformer's Q/K/V projections; rules/matmul.egg);
- fuse_skip_layernorm: whether com.microsoft.SkipLayerNormalization beats Add +
  LayerNormalization on [1, 128, 768] (rules/transformer.egg);
- fuse_attention: whether com.microsoft.MultiHeadAttention beats the attention subgraph of a
  decoder (12 heads of 64, sequence 128, causal bias; rules/attention.egg). A kernel alone
  can pay where the whole model does not: the shipped cpu profile's value comes from whole
  models (extract/hardware/cpu.json says which);
- fuse_unmasked_attention: the same for an encoder's attention without a mask (ViT-B/16: 197
  tokens, 12 heads of 64), its query, key and value 3-D and their biases in the fused op;
- fuse_cached_attention: the same for a decoder step's attention with its KV cache (12 heads
  of 64, one new token after 128 cached, a mask over all 129): MultiHeadAttention with
  past_key / past_value and its present outputs against the Concats and the subgraph;
- grouped_query_matmul: whether grouped-query attention's products on the kv heads as they
  are (the query heads of a group stacked as rows) beat them on the kv heads repeated (8
  query and 2 kv heads of 64, sequence 128, causal bias; rules/attention.egg).
- contraction_alias_slowdown: how many times slower MatMul [128, 3072] x [3072, 768] (a
  transformer MLP's second product, its rows 12 KiB apart) runs than the same with 16 zero
  columns and rows appended (rules/contraction.egg pads where it is at least 1.03).
The six booleans run with onnxruntime's graph optimizations off (the model as eqsat writes it),
side by side (eqsat.backends.ort.latency.compare), and hold only where the fused form is at least 3% faster.
- stem_conv_slowdown: how much slower than the dense convolutions an image's first 3x3
  convolution (3 input channels) runs in NCHW (eqsat/backends/ort/calibrate_layout.py).
- narrow_conv_exponent: how much slower than the same convolution with 64 outputs an NCHW
  convolution with 8 to 32 output channels runs, as the exponent a of (M / 64) ** a
  (eqsat/backends/ort/calibrate_layout.py, NARROW: 1x1 and 3x3, 28 to 112 pixels).
- qconv_gops, qconv_depthwise_gops: channels-last 8-bit convolutions (com.microsoft.QLinearConv,
  uint8 x int8) of the dense and depthwise shapes above, GOP/s (calibrate_layout.qconv_gops;
  rules/qdq_nhwc.egg).
- transcendental_flops: the FLOPs the roofline charges an element of Erf, Tanh, Sigmoid, ...:
  the median over Sigmoid, Tanh and Erf of a chain of each on the vector rate's vectors,
  against the chain of Muls side by side, each op less kernel_overhead_us (a Mul is one FLOP
  an element at the vector rate);
- normalization_flops: the FLOPs the roofline charges an element of LayerNormalization,
  SimplifiedLayerNormalization and their skip forms: the median over the two of a chain of
  each on the vector rate's floats (16 rows), against the chain of Muls side by side;
- interpolation_flops: a linear Resize's time an output element (eqsat/backends/ort/calibrate_layout.py,
  resize_ns) at the vector rate above: the FLOPs the roofline charges it.
- depthwise_gflops, pool_gops and layouts.nchwc (block, conv_speedup, depthwise_gflops, pool_speedup,
  global_pool_speedup, pixel_conv_speedup, reorder_gbps, upsample_speedup): the channel-blocked layout's figures,
  where onnxruntime has
  those kernels on this machine (eqsat/backends/ort/calibrate_layout.py); a profile without them never
  chooses the layout.

Each figure is the median of several timed runs after warm-up.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from eqsat.backends.ort import calibrate_layout
from eqsat.backends.ort.latency import compare
from eqsat.verification import session


def _timed(model, feeds: dict, runs: int, threads: int) -> float:
    sess = session(model, threads=threads)
    for _ in range(3):
        sess.run(None, feeds)
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _model(nodes, inputs, outputs):
    g = helper.make_graph(nodes, "calibrate", inputs, outputs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _faster(fused, unfused, feeds: dict, runs: int, threads: int) -> bool:
    """Whether `fused` beats `unfused` by at least 3%: ratio of medians over `runs` rounds
    side by side (eqsat.backends.ort.latency.compare: the two strictly alternate, so neither runs twice in
    a row)."""
    tf, tu = compare([fused, unfused], feeds, runs=runs, threads=threads)
    return tf < 0.97 * tu


def _causal_bias(s: int) -> np.ndarray:
    """A decoder's additive attention bias [1, 1, s, s]: -1e4 above the diagonal."""
    return np.triu(np.full((s, s), -1e4, np.float32), 1).reshape(1, 1, s, s)


def _weights_model(nodes, inputs, outputs, weights: dict, ms: bool = False):
    g = helper.make_graph(nodes, "calibrate", inputs, outputs,
                          [numpy_helper.from_array(v, k) for k, v in weights.items()])
    ops = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    return helper.make_model(g, opset_imports=ops)


def fusion_choices(threads: int = 1, runs: int = 100) -> dict:
    """The profile's fusion decisions, measured (see the module docstring)."""
    rng = np.random.default_rng(0)
    m, k, n = 128, 768, 768
    ws = {f"w{i}": rng.standard_normal((k, n)).astype(np.float32) for i in range(3)}
    ws["sizes"] = np.array([n, n, n], np.int64)
    ws["w"] = np.concatenate([ws["w0"], ws["w1"], ws["w2"]], axis=1)
    outs = [_vi(f"y{i}", [m, n]) for i in range(3)]
    merged = _weights_model([helper.make_node("MatMul", ["x", "w"], ["c"]),
                             helper.make_node("Split", ["c", "sizes"], ["y0", "y1", "y2"], axis=-1)],
                            [_vi("x", [m, k])], outs, {"w": ws["w"], "sizes": ws["sizes"]})
    apart = _weights_model([helper.make_node("MatMul", ["x", f"w{i}"], [f"y{i}"]) for i in range(3)],
                           [_vi("x", [m, k])], outs, {f"w{i}": ws[f"w{i}"] for i in range(3)})
    merge = _faster(merged, apart, {"x": rng.standard_normal((m, k)).astype(np.float32)}, runs, threads)

    shape = [1, m, k]
    ln = {"g": rng.standard_normal(k).astype(np.float32), "b": rng.standard_normal(k).astype(np.float32)}
    ins = [_vi("x", shape), _vi("r", shape)]
    skip = _weights_model([helper.make_node("SkipLayerNormalization", ["x", "r", "g", "b"], ["y"],
                                            domain="com.microsoft", epsilon=1e-12)], ins, [_vi("y", shape)], ln,
                          ms=True)
    plain = _weights_model([helper.make_node("Add", ["x", "r"], ["s"]),
                            helper.make_node("LayerNormalization", ["s", "g", "b"], ["y"], epsilon=1e-12)],
                           ins, [_vi("y", shape)], ln)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32), "r": rng.standard_normal(shape).astype(np.float32)}
    skip_ln = _faster(skip, plain, feeds, runs * 3, threads)
    return {"merge_parallel_matmuls": merge, "fuse_skip_layernorm": skip_ln,
            "fuse_attention": _attention_pays(rng, runs, threads),
            "fuse_unmasked_attention": _unmasked_attention_pays(rng, runs, threads),
            "fuse_cached_attention": _cached_attention_pays(rng, runs, threads),
            "grouped_query_matmul": _grouped_query_pays(rng, runs, threads),
            "contraction_alias_slowdown": contraction_alias_slowdown(rng, runs, threads)}


def aliased_models(rng, m: int = 128, k: int = 3072, n: int = 768, pad: int = 16):
    """(aliased, padded, feeds of each): x [m, k] x w [k, n], and the same with `pad` zero
    columns in x and zero rows in w (the same result)."""
    w = rng.standard_normal((k, n)).astype(np.float32)
    x = rng.standard_normal((m, k)).astype(np.float32)

    def product(kk: int, weight: np.ndarray):
        return _weights_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_vi("x", [m, kk])], [_vi("y", [m, n])],
                              {"w": weight})

    padded = product(k + pad, np.concatenate([w, np.zeros((pad, n), np.float32)]))
    return product(k, w), padded, {"x": x}, {"x": np.concatenate([x, np.zeros((m, pad), np.float32)], axis=1)}


def contraction_alias_slowdown(rng, runs: int, threads: int) -> float:
    """The aliased product's time over the padded one's (aliased_models), medians of `runs`
    rounds side by side (eqsat.backends.ort.latency.compare), rounded to 2 decimals."""
    aliased, padded, fa, fp = aliased_models(rng)
    ta, tp = compare([aliased, padded], [fa, fp], runs=runs, threads=threads)
    return round(ta / tp, 2)


def _cached_attention_pays(rng, runs: int, threads: int) -> bool:
    """Whether MultiHeadAttention with past_key / past_value beats a decoder step's attention
    with its cache Concats (cached_attention_models: one new token after 128 cached)."""
    subgraph, fused, feeds = cached_attention_models(rng, past=128)
    return _faster(fused, subgraph, feeds, runs * 3, threads)


def cached_attention_models(rng, past: int, new: int = 1, b: int = 1, n: int = 12, d: int = 64):
    """(subgraph, fused, feeds): one layer's attention in a decoder step as exporters write it
    (q, k, v [b, new, n*d] split into heads; present key and value = Concat(past, new) on the
    sequence axis; scores scaled, a zero mask [1, 1, new, past + new] added, softmax, times the
    values, heads merged) and as com.microsoft.MultiHeadAttention with past_key / past_value
    and present outputs (rules/attention.egg's attention-mha-past)."""
    h, total = n * d, past + new
    ins = [_vi(c, [b, new, h]) for c in ("q", "k", "v")] + [_vi("past_k", [b, n, past, d]),
                                                           _vi("past_v", [b, n, past, d])]
    outs = [_vi("y", [b, new, h]), _vi("present_k", [b, n, total, d]), _vi("present_v", [b, n, total, d])]
    consts = {"mask": np.zeros([1, 1, new, total], np.float32), "split": np.array([0, 0, n, d], np.int64),
              "merge": np.array([0, 0, h], np.int64), "scale": np.array(d ** -0.5, np.float32)}
    nodes = []
    for c in ("q", "k", "v"):
        nodes += [helper.make_node("Reshape", [c, "split"], [f"{c}r"]),
                  helper.make_node("Transpose", [f"{c}r"], [f"{c}h"], perm=[0, 2, 1, 3])]
    nodes += [helper.make_node("Concat", ["past_k", "kh"], ["present_k"], axis=2),
              helper.make_node("Concat", ["past_v", "vh"], ["present_v"], axis=2),
              helper.make_node("Transpose", ["present_k"], ["kt"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["qh", "kt"], ["qk"]),
              helper.make_node("Mul", ["qk", "scale"], ["sc"]),
              helper.make_node("Add", ["sc", "mask"], ["sm"]),
              helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "present_v"], ["o"]),
              helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ot", "merge"], ["y"])]
    fused = [helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "", "mask", "past_k", "past_v"],
                              ["y", "present_k", "present_v"], domain="com.microsoft", num_heads=n, scale=d ** -0.5)]
    feeds = {vi.name: rng.standard_normal([x.dim_value for x in vi.type.tensor_type.shape.dim]).astype(np.float32)
             for vi in ins}
    return (_weights_model(nodes, ins, outs, consts),
            _weights_model(fused, ins, outs, {"mask": consts["mask"]}, ms=True), feeds)


def _grouped_query_pays(rng, runs: int, threads: int) -> bool:
    """Whether grouped-query attention runs faster with its products on the kv heads as they
    are, the query heads of a group stacked as rows (rules/attention.egg), than on the kv heads
    repeated (Unsqueeze, Expand, Reshape: the exporters' repeat_kv): a Llama-4l layer's, 8
    query heads and 2 kv heads of 64, sequence 128, a causal attention bias."""
    grouped, repeated, feeds = grouped_query_models(rng)
    return _faster(grouped, repeated, feeds, runs * 3, threads)


def grouped_query_models(rng, b: int = 1, n: int = 8, nk: int = 2, s: int = 128, d: int = 64):
    """(grouped, repeated, feeds): an attention core on query [b, n, s, d] and key and value
    [b, nk, s, d] with the products grouped, and with the kv heads repeated n / nk times."""
    ins = [_vi("q", [b, n, s, d]), _vi("k", [b, nk, s, d]), _vi("v", [b, nk, s, d])]
    out = [_vi("o", [b, n, s, d])]
    causal = _causal_bias(s)
    consts = {"mask": causal, "scale": np.array(d ** -0.5, np.float32)}

    def core(grouped: bool) -> list:
        def reshape(x, target, y):
            return [helper.make_node("Reshape", [x, target], [y])] if grouped else []

        if grouped:
            nodes, q, k, v = reshape("q", "group", "qg"), "qg", "k", "v"
        else:
            nodes = [helper.make_node(op, i, [o]) for c in "kv" for op, i, o in
                     (("Unsqueeze", [c, "two"], f"{c}u"), ("Expand", [f"{c}u", "rep"], f"{c}e"),
                      ("Reshape", [f"{c}e", "heads"], f"{c}x"))]
            q, k, v = "q", "kx", "vx"
        g = "g" if grouped else ""
        return nodes + [helper.make_node("Transpose", [k], ["kt"], perm=[0, 1, 3, 2]),
                        helper.make_node("MatMul", [q, "kt"], ["qk" + g]), *reshape("qkg", "back", "qk"),
                        helper.make_node("Mul", ["qk", "scale"], ["sc"]),
                        helper.make_node("Add", ["sc", "mask"], ["sm"]),
                        helper.make_node("Softmax", ["sm"], ["p"], axis=-1), *reshape("p", "group", "pg"),
                        helper.make_node("MatMul", ["p" + g, v], ["o" + g]), *reshape("og", "back", "o")]

    repeated = _weights_model(core(False), ins, out,
                              {**consts, "two": np.array([2], np.int64), "heads": np.array([0, n, -1, d], np.int64),
                                                      "rep": np.array([1, 1, n // nk, 1, 1], np.int64)})
    grouped = _weights_model(core(True), ins, out, {**consts, "group": np.array([0, nk, -1, 0], np.int64),
                                                    "back": np.array([0, n, -1, 0], np.int64)})
    feeds = {"q": rng.standard_normal([b, n, s, d]).astype(np.float32),
             "k": rng.standard_normal([b, nk, s, d]).astype(np.float32),
             "v": rng.standard_normal([b, nk, s, d]).astype(np.float32)}
    return grouped, repeated, feeds


def _attention_pays(rng, runs: int, threads: int) -> bool:
    """Whether com.microsoft.MultiHeadAttention beats the attention it replaces
    (rules/attention.egg), in a decoder's form: 12 heads of 64, sequence 128, a causal
    attention bias [1, 1, S, S], the query given in heads (as after a rotary embedding) and so
    transposed back for the fused op, key and value in heads (BNSH)."""
    b, n, s, d = 1, 12, 128, 64
    heads = [b, n, s, d]
    ins = [_vi("q", heads), _vi("k", heads), _vi("v", heads)]
    out = [_vi("y", [b, s, n * d])]
    causal = _causal_bias(s)
    consts = {"mask": causal, "merge": np.array([0, 0, n * d], np.int64), "scale": np.array(d ** -0.5, np.float32)}
    fused = _weights_model([helper.make_node("Transpose", ["q"], ["qt"], perm=[0, 2, 1, 3]),
                            helper.make_node("Reshape", ["qt", "merge"], ["q3"]),
                            helper.make_node("MultiHeadAttention", ["q3", "k", "v", "", "", "mask"], ["y"],
                                             domain="com.microsoft", num_heads=n, scale=d ** -0.5)],
                           ins, out, {"mask": causal, "merge": consts["merge"]}, ms=True)
    plain = _weights_model([helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
                            helper.make_node("MatMul", ["q", "kt"], ["qk"]),
                            helper.make_node("Mul", ["qk", "scale"], ["sc"]),
                            helper.make_node("Add", ["sc", "mask"], ["sm"]),
                            helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
                            helper.make_node("MatMul", ["p", "v"], ["o"]),
                            helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
                            helper.make_node("Reshape", ["ot", "merge"], ["y"])], ins, out, consts)
    feeds = {x: rng.standard_normal(heads).astype(np.float32) for x in "qkv"}
    return _faster(fused, plain, feeds, runs * 3, threads)


def _unmasked_attention_pays(rng, runs: int, threads: int) -> bool:
    """Whether com.microsoft.MultiHeadAttention beats the attention it replaces in an
    encoder's form without a mask (ViT-B/16's: 197 tokens, 12 heads of 64): 3-D query, key
    and value with their bias Adds, split into heads, key transposed, scaled scores, softmax,
    heads merged; fused, the 3-D inputs and the concatenated biases go to the op."""
    b, s, n, d = 1, 197, 12, 64
    h = n * d
    x3 = [b, s, h]
    ins = [_vi(c, x3) for c in "qkv"]
    out = [_vi("y", x3)]
    bias = {f"b{c}": rng.standard_normal(h).astype(np.float32) for c in "qkv"}
    fused = _weights_model([helper.make_node("MultiHeadAttention", ["q", "k", "v", "bias"], ["y"],
                                             domain="com.microsoft", num_heads=n, scale=d ** -0.5)],
                           ins, out, {"bias": np.concatenate([bias[f"b{c}"] for c in "qkv"])}, ms=True)
    nodes = []
    for c, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [helper.make_node("Add", [c, f"b{c}"], [f"{c}a"]),
                  helper.make_node("Reshape", [f"{c}a", "split"], [f"{c}r"]),
                  helper.make_node("Transpose", [f"{c}r"], [f"{c}h"], perm=perm)]
    nodes += [helper.make_node("MatMul", ["qh", "kh"], ["qk"]),
              helper.make_node("Mul", ["qk", "scale"], ["sc"]),
              helper.make_node("Softmax", ["sc"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "vh"], ["o"]),
              helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ot", "merge"], ["y"])]
    plain = _weights_model(nodes, ins, out, {**bias, "split": np.array([0, 0, n, d], np.int64),
                                             "merge": np.array([0, 0, h], np.int64),
                                             "scale": np.array(d ** -0.5, np.float32)})
    feeds = {c: rng.standard_normal(x3).astype(np.float32) for c in "qkv"}
    return _faster(fused, plain, feeds, runs * 3, threads)


VECTOR_K, VECTOR_MULS = 16 * 1024, 20


def vector_chain(rng, k: int, muls: int):
    """x_{i+1} = x_i * b, `muls` times on `k` floats, and its feeds: x0 in [0.5, 1.5), b in
    [0.9, 1.1), so the values neither vanish into denormals (slow on x86) nor overflow."""
    nodes = [helper.make_node("Mul", [f"x{i}", "b"], [f"x{i + 1}"]) for i in range(muls)]
    model = _model(nodes, [_vi("x0", [k]), _vi("b", [k])], [_vi(f"x{muls}", [k])])
    return model, {"x0": rng.random(k, np.float32) + 0.5, "b": rng.random(k, np.float32) * 0.2 + 0.9}


TRANSCENDENTALS = ("Sigmoid", "Tanh", "Erf")


def unary_chain(op: str, k: int, length: int):
    """x_{i+1} = op(x_i), `length` times on `k` floats (fed the vector chain's x0: Sigmoid,
    Tanh and Erf keep values in [0.5, 1.5) inside (0, 1], never denormal)."""
    nodes = [helper.make_node(op, [f"x{i}"], [f"x{i + 1}"]) for i in range(length)]
    return _model(nodes, [_vi("x0", [k]), _vi("b", [k])], [_vi(f"x{length}", [k])])


def _mul_equivalents(chains, feeds: dict, overhead_us: float, threads: int, runs: int) -> float:
    """The median over `chains` (models of VECTOR_MULS ops on VECTOR_K floats, fed `feeds`) of
    (an op's time - overhead) / (a Mul's time - overhead), each chain timed side by side with
    the Mul chain: the FLOPs an element of the op costs at the vector rate."""
    mul, mul_feeds = vector_chain(np.random.default_rng(0), VECTOR_K, VECTOR_MULS)
    ratios = []
    for chain in chains:
        t_mul, t_op = compare([mul, chain], [mul_feeds, feeds], runs=runs, threads=threads)
        per = [t * 1e3 / VECTOR_MULS for t in (t_mul, t_op)]  # us an op (compare gives ms)
        base = max(per[0] - overhead_us, 0.1 * per[0])
        ratios.append(max(per[1] - overhead_us, 0.1 * per[1]) / base)
    return round(statistics.median(ratios), 2)


def transcendental_flops(overhead_us: float, threads: int = 1, runs: int = 60) -> float:
    """The FLOPs a transcendental element costs at the vector rate (`_mul_equivalents` over
    TRANSCENDENTALS' chains, fed the Mul chain's x0)."""
    _, feeds = vector_chain(np.random.default_rng(0), VECTOR_K, VECTOR_MULS)
    chains = [unary_chain(op, VECTOR_K, VECTOR_MULS) for op in TRANSCENDENTALS]
    return _mul_equivalents(chains, feeds, overhead_us, threads, runs)


NORMALIZATIONS = ("LayerNormalization", "SimplifiedLayerNormalization")
NORM_ROWS = 16  # the normalizations' chains run on [NORM_ROWS, VECTOR_K / NORM_ROWS]: the Mul chain's floats


def norm_chain(op: str, k: int, length: int):
    """x_{i+1} = op(x_i) over the last axis of [NORM_ROWS, k / NORM_ROWS], `length` times (unit
    scale, zero bias; onnxruntime registers SimplifiedLayerNormalization in the default domain)."""
    shape = [NORM_ROWS, k // NORM_ROWS]
    params = ["scale", "bias"] if op == "LayerNormalization" else ["scale"]
    nodes = [helper.make_node(op, [f"x{i}", *params], [f"x{i + 1}"], axis=-1, epsilon=1e-5) for i in range(length)]
    weights = [numpy_helper.from_array(np.ones(shape[1], np.float32), "scale"),
               numpy_helper.from_array(np.zeros(shape[1], np.float32), "bias")]
    g = helper.make_graph(nodes, "calibrate", [_vi("x0", shape)], [_vi(f"x{length}", shape)], weights[:len(params)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def normalization_flops(overhead_us: float, threads: int = 1, runs: int = 60) -> float:
    """The FLOPs a normalized element costs at the vector rate (`_mul_equivalents` over
    NORMALIZATIONS' chains on the Mul chain's floats as [NORM_ROWS, VECTOR_K / NORM_ROWS])."""
    _, feeds = vector_chain(np.random.default_rng(0), VECTOR_K, VECTOR_MULS)
    chains = [norm_chain(op, VECTOR_K, VECTOR_MULS) for op in NORMALIZATIONS]
    return _mul_equivalents(chains, {"x0": feeds["x0"].reshape(NORM_ROWS, -1)}, overhead_us, threads, runs)


def measure(threads: int = 1, runs: int = 15) -> dict:
    rng = np.random.default_rng(0)
    n = 512
    mm = _model([helper.make_node("MatMul", ["a", "b"], ["c"])], [_vi("a", [n, n]), _vi("b", [n, n])],
                [_vi("c", [n, n])])
    t = _timed(mm, {"a": rng.random((n, n), np.float32), "b": rng.random((n, n), np.float32)}, runs, threads)
    matmul = 2 * n**3 / t / 1e9

    m = 16 * 1024 * 1024
    add = _model([helper.make_node("Add", ["a", "b"], ["c"])], [_vi("a", [m]), _vi("b", [m])], [_vi("c", [m])])
    t = _timed(add, {"a": rng.random(m, np.float32), "b": rng.random(m, np.float32)}, runs, threads)
    bandwidth = 3 * 4 * m / t / 1e9
    c = 256 * 1024
    add_c = _model([helper.make_node("Add", ["a", "b"], ["c"])], [_vi("a", [c]), _vi("b", [c])], [_vi("c", [c])])
    t = _timed(add_c, {"a": rng.random(c, np.float32), "b": rng.random(c, np.float32)}, runs * 4, threads)
    cache = 3 * 4 * c / t / 1e9

    chain = 200
    nodes = [helper.make_node("Add", [f"x{i}", "one"], [f"x{i + 1}"]) for i in range(chain)]
    small = _model(nodes, [_vi("x0", [1]), _vi("one", [1])], [_vi(f"x{chain}", [1])])
    t = _timed(small, {"x0": np.zeros(1, np.float32), "one": np.ones(1, np.float32)}, runs * 4, threads)
    overhead = t / chain * 1e6

    vec, feeds = vector_chain(rng, VECTOR_K, VECTOR_MULS)
    t = _timed(vec, feeds, runs * 10, threads)
    per_op_us = max(t / VECTOR_MULS * 1e6 - overhead, 0.1 * t / VECTOR_MULS * 1e6)  # the kernel's own time, > 0
    vector = VECTOR_K / per_op_us / 1e3

    return {
        "name": "cpu",
        "matmul_gflops": round(matmul, 2),
        "vector_gflops": round(vector, 3),
        "mem_gbps": round(bandwidth, 2),
        "cache_gbps": round(cache, 2),
        "conv_gflops": calibrate_layout.conv_gflops(threads),
        "stem_conv_slowdown": calibrate_layout.stem_conv_slowdown(threads),
        "narrow_conv_exponent": calibrate_layout.narrow_conv_exponent(threads)[0],
        **calibrate_layout.qconv_gops(threads),
        "kernel_overhead_us": round(overhead, 3),
        "transcendental_flops": transcendental_flops(overhead, threads),
        "normalization_flops": normalization_flops(overhead, threads),
        "interpolation_flops": round(calibrate_layout.resize_ns(threads) * vector, 2),
        **fusion_choices(threads),
        **(calibrate_layout.measure(threads) or {}),
        "source": f"measured by `eqsat calibrate` on {platform.processor() or platform.machine()} "
                  f"({os.cpu_count()} cores), onnxruntime CPU, {threads} thread(s), median of {runs}+ runs",
    }


def write(path, threads: int = 1) -> dict:
    """Measure this machine and write the profile to `path`, named after the file's stem (the
    name `--hardware` and the progress messages show; `cpu` stays the shipped profiles')."""
    from eqsat.io.atomic import write_text

    prof = {**measure(threads), "name": Path(path).stem}
    write_text(path, json.dumps(prof, indent=2) + "\n")
    return prof
