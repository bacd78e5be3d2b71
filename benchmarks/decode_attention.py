"""Whether onnxruntime's fused attention with a KV cache would pay in a decoder's step.

    python benchmarks/decode_attention.py [--past 128,512] [--runs 3000]
                                          [--out benchmarks/results/decode_attention.md]

In a step, each layer appends the new key and value to the cache (Concat on the sequence
axis, the present outputs), multiplies the query by all keys, scales, adds the mask, takes
the softmax and multiplies by all values. eqsat leaves that subgraph unfused.
com.microsoft.MultiHeadAttention takes past_key / past_value and returns present_key /
present_value itself. This times one GPT-2-sized layer (12 heads of 64, one new token),
both forms in one process, alternating (eqsat.backends.ort.latency.compare), with onnxruntime's
optimizations on and off, after checking that their three outputs are equal. Nothing is
asserted.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import peers  # noqa: E402
from eqsat.backends.ort.latency import compare  # noqa: E402
from eqsat.verification import compare as compare_outputs  # noqa: E402
from eqsat.verification import run  # noqa: E402

HEADS, HEAD_DIM, NEW = 12, 64, 1


def _vi(name: str, shape: list[int]):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def step_models(past: int):
    """(subgraph, fused) models of one layer's attention in a step, and their feeds."""
    n, d, b = HEADS, HEAD_DIM, 1
    h, total = n * d, past + NEW
    ins = [_vi(c, [b, NEW, h]) for c in ("q", "k", "v")] + [_vi("past_k", [b, n, past, d]),
                                                           _vi("past_v", [b, n, past, d])]
    outs = [_vi("y", [b, NEW, h]), _vi("present_k", [b, n, total, d]), _vi("present_v", [b, n, total, d])]
    weights = {"mask": np.zeros([1, 1, NEW, total], np.float32), "split": np.array([0, 0, n, d], np.int64),
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

    def model(body, used):
        g = helper.make_graph(body, "step", ins, outs, [numpy_helper.from_array(weights[k], k) for k in used])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18),
                                                   helper.make_opsetid("com.microsoft", 1)])

    rng = np.random.default_rng(0)
    feeds = {vi.name: rng.standard_normal([x.dim_value for x in vi.type.tensor_type.shape.dim]).astype(np.float32)
             for vi in ins}
    return model(nodes, list(weights)), model(fused, ["mask"]), feeds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--past", default="128,512", help="cached tokens, comma-separated")
    ap.add_argument("--runs", type=int, default=3000)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "decode_attention.md")
    args = ap.parse_args(argv)
    rows = ["| past | onnxruntime optimizations | subgraph ms | MultiHeadAttention ms | ratio | saved per 12 layers, "
            "ms |",
            "|---:|---|---:|---:|---:|---:|"]
    for past in (int(p) for p in args.past.split(",")):
        plain, fused, feeds = step_models(past)
        bad = compare_outputs(run(plain, feeds), run(fused, feeds), 1e-5, 1e-6)
        if bad:
            raise SystemExit(f"past {past}: the fused layer differs: {bad[0]}")
        for optimize in (True, False):
            tp, tf = compare([plain, fused], feeds, runs=args.runs, optimize=optimize)
            rows.append(f"| {past} | {'on' if optimize else 'off'} | {tp:.4f} | {tf:.4f} | {tf / tp:.3f} | "
                        f"{12 * (tp - tf):.3f} |")
            print(rows[-1], file=sys.stderr)
    cmd = "python benchmarks/decode_attention.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    text = ["# Decode-step attention: subgraph or MultiHeadAttention with past key/value", "",
            f"Command: `{cmd}`. Written by `benchmarks/decode_attention.py`.", "",
            f"Machine: {peers._machine()}. {peers._versions()}.", "",
            f"Method: one layer, {HEADS} heads of {HEAD_DIM}, {NEW} new token, batch 1, a zero mask over past + new; "
            "the subgraph as a step runs it after eqsat (Concat of the cache, products, scale, mask, softmax) "
            "against com.microsoft.MultiHeadAttention with past_key/past_value and present outputs; outputs "
            f"checked equal; medians of {args.runs} alternating runs (eqsat.backends.ort.latency.compare), "
            f"onnxruntime CPU, "
            "1 thread.", "", *rows, ""]
    args.out.write_text("\n".join(text))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
