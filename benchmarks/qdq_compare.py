"""eqsat's QDQ output beside onnxruntime's own optimization (issue 30):

    python benchmarks/qdq_compare.py QDQ.onnx EQSAT.onnx [QDQ2.onnx EQSAT2.onnx ...]
                                     [--float FLOAT.onnx ...]

For each pair: the max abs difference from the QDQ model run as written (onnxruntime,
graph optimizations off) of eqsat's output (run with optimizations off) and of the QDQ
model under onnxruntime's ORT_ENABLE_ALL, on 3 seeded standard-normal inputs (seeds 0, 1,
2; batch 1); then the quantized and float op counts of eqsat's output and of the model
onnxruntime saves with ORT_ENABLE_EXTENDED. With `--float` (one float model per pair, in
order: the model the QDQ one was quantized from), also each one's max abs difference from the
float model on the same inputs (issue 30's metric: eqsat as close to float as onnxruntime's
own QDQ result). Prints Markdown table rows.
"""

from __future__ import annotations

import argparse
import os
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
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help="QDQ.onnx EQSAT.onnx pairs")
    ap.add_argument("--float", action="append", default=[], help="the float model of each pair, in order")
    a = ap.parse_args()
    pairs = list(zip(a.models[0::2], a.models[1::2], strict=True))
    if a.float and len(a.float) != len(pairs):
        ap.error("give one --float per pair")
    lv = ort.GraphOptimizationLevel
    rows, ops, floats = [], [], []
    for k, (qdq, ours) in enumerate(pairs):
        ref, own = session(qdq, lv.ORT_DISABLE_ALL), session(qdq, lv.ORT_ENABLE_ALL)
        eq = session(ours, lv.ORT_DISABLE_ALL)
        flt = session(a.float[k], lv.ORT_DISABLE_ALL) if a.float else None
        with tempfile.TemporaryDirectory() as d:
            ext = os.path.join(d, "ext.onnx")
            session(qdq, lv.ORT_ENABLE_EXTENDED, ext)
            ops.append(f"| {os.path.basename(qdq)} | {counts(ours)} | {counts(ext)} |")
        i = ref.get_inputs()[0]
        shape = [s if isinstance(s, int) else 1 for s in i.shape]
        d_own, d_eq, f_ref, f_own, f_eq = [], [], [], [], []
        for seed in range(3):
            x = {i.name: np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}
            r = ref.run(None, x)[0].astype(np.float64)
            o, e = own.run(None, x)[0], eq.run(None, x)[0]
            d_own.append(float(np.abs(o - r).max()))
            d_eq.append(float(np.abs(e - r).max()))
            if flt is not None:
                f = flt.run(None, {flt.get_inputs()[0].name: x[i.name]})[0].astype(np.float64)
                f_ref.append(float(np.abs(r - f).max()))
                f_own.append(float(np.abs(o - f).max()))
                f_eq.append(float(np.abs(e - f).max()))
        ok = all(a <= b for a, b in zip(d_eq, d_own, strict=True))
        rows.append(f"| {os.path.basename(qdq)} | " + ", ".join(f"{v:.4g}" for v in d_own) + " | "
                    + ", ".join(f"{v:.4g}" for v in d_eq) + f" | {'yes' if ok else 'no'} |")
        if flt is not None:
            ok = all(a <= b for a, b in zip(f_eq, f_own, strict=True))
            floats.append(f"| {os.path.basename(qdq)} | " + " | ".join(", ".join(f"{v:.4g}" for v in vs)
                                                            for vs in (f_ref, f_own, f_eq))
                          + f" | {'yes' if ok else 'no'} |")
    print("| model | ORT_ENABLE_ALL, seeds 0 1 2 | eqsat, seeds 0 1 2 | eqsat <= ORT on each |")
    print("|---|---|---|---|")
    print("\n".join(rows))
    if floats:
        print()
        print("Max abs difference from the float model:")
        print()
        print("| model | QDQ as written | ORT_ENABLE_ALL | eqsat | eqsat <= ORT on each |")
        print("|---|---|---|---|---|")
        print("\n".join(floats))
    print()
    print("| model | eqsat's output | onnxruntime ORT_ENABLE_EXTENDED |")
    print("|---|---|---|")
    print("\n".join(ops))


if __name__ == "__main__":
    main()
