"""onnxruntime's com.microsoft QLinearConcat and QGemm against the DequantizeLinear -> op ->
QuantizeLinear they replace (rules/qdq.egg's qdq-concat-fuse and qdq-gemm-fuse): one thread,
graph optimizations off, uint8 everywhere, shapes of the torchvision QDQ models' fire modules,
ShuffleNet's stages and classifiers. Prints each pair's times (the best of three medians of 300
runs, taken in turn) and the largest difference between their quantized outputs.

    python benchmarks/qdq_concat_gemm_kernels.py
"""

from __future__ import annotations

import time

import numpy as np
import onnxruntime as ort
from onnx import ModelProto, TensorProto, helper
from onnx import numpy_helper as nh

RNG = np.random.default_rng(0)
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]


def session(m: ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def median_ms(s: ort.InferenceSession, feeds: dict, n: int = 300) -> float:
    for _ in range(20):
        s.run(None, feeds)
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        s.run(None, feeds)
        ts.append(time.perf_counter() - t)
    return float(np.median(ts)) * 1e3


def const(name: str, v) -> TensorProto:
    return nh.from_array(np.asarray(v), name)


def concat_models(shape: list[int], n_in: int = 2):
    """QLinearConcat of n_in uint8 inputs (each its own scale and zero point) along axis 1, and
    its DQ -> Concat -> Q."""
    ins = [helper.make_tensor_value_info(f"x{i}", TensorProto.UINT8, shape) for i in range(n_in)]
    out = [helper.make_tensor_value_info("y", TensorProto.UINT8, [shape[0], shape[1] * n_in, *shape[2:]])]
    inits = [const("ys", np.float32(0.05)), const("yz", np.uint8(120))]
    for i in range(n_in):
        inits += [const(f"s{i}", np.float32(0.03 + 0.01 * i)), const(f"z{i}", np.uint8(128 + i))]
    triples = [v for i in range(n_in) for v in (f"x{i}", f"s{i}", f"z{i}")]
    fused = [helper.make_node("QLinearConcat", ["ys", "yz", *triples], ["y"], axis=1, domain="com.microsoft")]
    unfused = [helper.make_node("DequantizeLinear", [f"x{i}", f"s{i}", f"z{i}"], [f"d{i}"]) for i in range(n_in)]
    unfused += [helper.make_node("Concat", [f"d{i}" for i in range(n_in)], ["c"], axis=1),
                helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["y"])]
    feeds = {f"x{i}": RNG.integers(0, 256, shape, dtype=np.uint8) for i in range(n_in)}
    return [helper.make_model(helper.make_graph(nodes, "g", ins, out, inits), opset_imports=OPSETS)
            for nodes in (fused, unfused)] + [feeds]


def gemm_models(m: int, k: int, n: int):
    """QGemm of uint8 A [m, k] by uint8 B [n, k] (transB) with an int32 bias at a_scale * b_scale,
    and its DQ -> Gemm -> Q."""
    ins = [helper.make_tensor_value_info("a", TensorProto.UINT8, [m, k])]
    out = [helper.make_tensor_value_info("y", TensorProto.UINT8, [m, n])]
    a_scale, b_scale = np.float32(0.03), np.float32(0.002)
    inits = [const("as", a_scale), const("az", np.uint8(128)), const("b", RNG.integers(0, 256, (n, k), dtype=np.uint8)),
             const("bs", b_scale), const("bz", np.uint8(128)),
             const("c", RNG.integers(-3000, 3000, n).astype(np.int32)), const("cs", np.float32(a_scale * b_scale)),
             const("ys", np.float32(0.05)), const("yz", np.uint8(120))]
    fused = [helper.make_node("QGemm", ["a", "as", "az", "b", "bs", "bz", "c", "ys", "yz"], ["y"], transB=1,
                              domain="com.microsoft")]
    unfused = [helper.make_node("DequantizeLinear", ["a", "as", "az"], ["ad"]),
               helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bd"]),
               helper.make_node("DequantizeLinear", ["c", "cs"], ["cd"]),
               helper.make_node("Gemm", ["ad", "bd", "cd"], ["g"], transB=1),
               helper.make_node("QuantizeLinear", ["g", "ys", "yz"], ["y"])]
    feeds = {"a": RNG.integers(0, 256, (m, k), dtype=np.uint8)}
    return [helper.make_model(helper.make_graph(nodes, "g", ins, out, inits), opset_imports=OPSETS)
            for nodes in (fused, unfused)] + [feeds]


CASES = [("QLinearConcat 2 x [1, 64, 55, 55] (SqueezeNet fire2)", lambda: concat_models([1, 64, 55, 55])),
         ("QLinearConcat 2 x [1, 256, 13, 13] (SqueezeNet fire8)", lambda: concat_models([1, 256, 13, 13])),
         ("QLinearConcat 2 x [1, 58, 28, 28] (ShuffleNet stage 2)", lambda: concat_models([1, 58, 28, 28])),
         ("QGemm [1, 1024] x [1000, 1024]^T (ShuffleNet's classifier)", lambda: gemm_models(1, 1024, 1000)),
         ("QGemm [1, 1280] x [1000, 1280]^T (EfficientNet-B0's classifier)", lambda: gemm_models(1, 1280, 1000))]


def main() -> None:
    for label, make in CASES:
        fused, unfused, feeds = make()
        sf, su = session(fused), session(unfused)
        a, b = sf.run(None, feeds)[0], su.run(None, feeds)[0]
        tf, tu = [], []
        for _ in range(3):
            tf.append(median_ms(sf, feeds))
            tu.append(median_ms(su, feeds))
        diff = int(np.abs(a.astype(np.int64) - b.astype(np.int64)).max())
        print(f"{label}: fused {min(tf):.4f} ms, unfused {min(tu):.4f} ms, ratio {min(tf) / min(tu):.2f}; "
              f"largest code difference {diff}")


if __name__ == "__main__":
    main()
