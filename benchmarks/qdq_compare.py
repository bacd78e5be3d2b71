"""eqsat's QDQ output beside onnxruntime's own optimization (issue 30):

    python benchmarks/qdq_compare.py QDQ.onnx EQSAT.onnx [QDQ2.onnx EQSAT2.onnx ...]

For each pair: the max abs difference from the QDQ model run as written (onnxruntime,
graph optimizations off) of eqsat's output (run with optimizations off) and of the QDQ
model under onnxruntime's ORT_ENABLE_ALL, on 3 seeded standard-normal inputs (seeds 0, 1,
2; batch 1); then the quantized and float op counts of eqsat's output and of the model
onnxruntime saves with ORT_ENABLE_EXTENDED. Prints Markdown table rows.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort

KEEP = ("QLinearConv", "QLinearMatMul", "QLinearAdd", "QGemm", "QLinearGlobalAveragePool", "Conv", "MatMul",
        "Gemm", "Add", "QuantizeLinear", "DequantizeLinear")


def session(path: str, level, save: str | None = None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.log_severity_level = 3
    if save:
        so.optimized_model_filepath = save
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def counts(path: str) -> str:
    c = Counter((n.domain + "." if n.domain not in ("", "ai.onnx") else "") + n.op_type
                for n in onnx.load(path).graph.node)
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items()) if k.split(".")[-1] in KEEP)


def main() -> None:
    lv = ort.GraphOptimizationLevel
    rows, ops = [], []
    for qdq, ours in zip(sys.argv[1::2], sys.argv[2::2], strict=True):
        ref, own = session(qdq, lv.ORT_DISABLE_ALL), session(qdq, lv.ORT_ENABLE_ALL)
        eq = session(ours, lv.ORT_DISABLE_ALL)
        with tempfile.TemporaryDirectory() as d:
            ext = os.path.join(d, "ext.onnx")
            session(qdq, lv.ORT_ENABLE_EXTENDED, ext)
            ops.append(f"| {os.path.basename(qdq)} | {counts(ours)} | {counts(ext)} |")
        i = ref.get_inputs()[0]
        shape = [s if isinstance(s, int) else 1 for s in i.shape]
        d_own, d_eq = [], []
        for seed in range(3):
            x = {i.name: np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}
            r = ref.run(None, x)[0].astype(np.float64)
            d_own.append(float(np.abs(own.run(None, x)[0] - r).max()))
            d_eq.append(float(np.abs(eq.run(None, x)[0] - r).max()))
        ok = all(a <= b for a, b in zip(d_eq, d_own, strict=True))
        rows.append(f"| {os.path.basename(qdq)} | " + ", ".join(f"{v:.4g}" for v in d_own) + " | "
                    + ", ".join(f"{v:.4g}" for v in d_eq) + f" | {'yes' if ok else 'no'} |")
    print("| model | ORT_ENABLE_ALL, seeds 0 1 2 | eqsat, seeds 0 1 2 | eqsat <= ORT on each |")
    print("|---|---|---|---|")
    print("\n".join(rows))
    print()
    print("| model | eqsat's output | onnxruntime ORT_ENABLE_EXTENDED |")
    print("|---|---|---|")
    print("\n".join(ops))


if __name__ == "__main__":
    main()
