"""eqsat's QDQ output beside onnxruntime's own optimization (issue 30):

    python benchmarks/qdq_compare.py QDQ.onnx EQSAT.onnx [QDQ2.onnx EQSAT2.onnx ...]
                                     [--float FLOAT.onnx ...] [--seeds 3]

For each pair: the max abs difference from the QDQ model run as written (onnxruntime,
graph optimizations off) of eqsat's output (run with optimizations off) and of the QDQ
model under onnxruntime's ORT_ENABLE_ALL, on 3 seeded inputs (seeds 0, 1, 2; batch 1):
`qdq_models.random_feeds`, standard normal for a float input, token ids, a mask and token
types for a transformer's int64 inputs (sequence 128), the largest over the outputs; then
the quantized and float op counts of eqsat's output and of the model onnxruntime saves
with ORT_ENABLE_EXTENDED. With `--float` (one float model per pair, in order: the model the
QDQ one was quantized from), also each one's max abs difference from the float model on the
same inputs (issue 30's metric: eqsat as close to float as onnxruntime's
own QDQ result), and the mean abs difference from it (over the outputs' elements, then the
seeds): a max is one element, which one early step rounded otherwise moves. `--seeds N` draws
seeds 0 .. N-1. Prints Markdown table rows.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
from qdq_models import DIMS, random_feeds

KEEP = ("QLinearConv", "QLinearMatMul", "QLinearAdd", "QGemm", "QLinearGlobalAveragePool", "QLinearSigmoid",
        "QLinearSoftmax", "Conv", "MatMul",
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


def _maxdiff(a: list, b: list) -> float:
    """The largest max abs difference over the outputs, paired in order."""
    return max(float(np.abs(np.asarray(u, np.float64) - v).max()) for u, v in zip(a, b, strict=True))


def _meandiff(a: list, b: list) -> float:
    """The mean abs difference over all the outputs' elements, paired in order."""
    d = [np.abs(np.asarray(u, np.float64) - v).ravel() for u, v in zip(a, b, strict=True)]
    return float(np.concatenate(d).mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help="QDQ.onnx EQSAT.onnx pairs")
    ap.add_argument("--float", action="append", default=[], help="the float model of each pair, in order")
    ap.add_argument("--seeds", type=int, default=3, help="inputs drawn with seeds 0 .. N-1 (default 3)")
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
        proto = onnx.load(qdq, load_external_data=False)
        d_own, d_eq, f_ref, f_own, f_eq, means = [], [], [], [], [], []
        for seed in range(a.seeds):
            x = random_feeds(proto, np.random.default_rng(seed), DIMS)
            r = [v.astype(np.float64) for v in ref.run(None, x)]
            o, e = own.run(None, x), eq.run(None, x)
            d_own.append(_maxdiff(o, r))
            d_eq.append(_maxdiff(e, r))
            if flt is not None:
                f = [v.astype(np.float64) for v in flt.run(None, {k.name: x[k.name] for k in flt.get_inputs()})]
                f_ref.append(_maxdiff(r, f))
                f_own.append(_maxdiff(o, f))
                f_eq.append(_maxdiff(e, f))
                means.append([_meandiff(v, f) for v in (r, o, e)])
        ok = all(a <= b for a, b in zip(d_eq, d_own, strict=True))
        rows.append(f"| {os.path.basename(qdq)} | " + ", ".join(f"{v:.4g}" for v in d_own) + " | "
                    + ", ".join(f"{v:.4g}" for v in d_eq) + f" | {'yes' if ok else 'no'} |")
        if flt is not None:
            ok = all(a <= b for a, b in zip(f_eq, f_own, strict=True))
            mean = np.mean(means, axis=0)
            floats.append(f"| {os.path.basename(qdq)} | " + " | ".join(", ".join(f"{v:.4g}" for v in vs)
                                                            for vs in (f_ref, f_own, f_eq))
                          + f" | {'yes' if ok else 'no'} | " + " | ".join(f"{v:.4g}" for v in mean) + " |")
    seeds = " ".join(str(k) for k in range(a.seeds))
    print(f"| model | ORT_ENABLE_ALL, seeds {seeds} | eqsat, seeds {seeds} | eqsat <= ORT on each |")
    print("|---|---|---|---|")
    print("\n".join(rows))
    if floats:
        print()
        print("Max abs difference from the float model:")
        print()
        print("| model | QDQ as written | ORT_ENABLE_ALL | eqsat | eqsat <= ORT on each "
              "| mean abs: QDQ as written | ORT_ENABLE_ALL | eqsat |")
        print("|---|---|---|---|---|---:|---:|---:|")
        print("\n".join(floats))
    print()
    print("| model | eqsat's output | onnxruntime ORT_ENABLE_EXTENDED |")
    print("|---|---|---|")
    print("\n".join(ops))


if __name__ == "__main__":
    main()
