"""Whether onnxruntime's fused attention with a KV cache would pay in a decoder's step.

    python benchmarks/decode_attention.py [--past 128,512] [--runs 3000]
                                          [--out benchmarks/results/decode_attention.md]

In a step, each layer appends the new key and value to the cache (Concat on the sequence
axis, the present outputs), multiplies the query by all keys, scales, adds the mask, takes
the softmax and multiplies by all values. com.microsoft.MultiHeadAttention takes past_key /
past_value and returns present_key / present_value itself (rules/attention.egg's
attention-mha-past builds it; `eqsat calibrate` times the same models for the profile key
fuse_cached_attention). This times one GPT-2-sized layer (12 heads of 64, one new token),
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

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import peers  # noqa: E402
from eqsat.backends.ort.calibrate import cached_attention_models  # noqa: E402
from eqsat.backends.ort.latency import compare  # noqa: E402
from eqsat.verification import compare as compare_outputs  # noqa: E402
from eqsat.verification import run  # noqa: E402

HEADS, HEAD_DIM, NEW = 12, 64, 1


def step_models(past: int):
    """(subgraph, fused) models of one layer's attention in a step, and their feeds."""
    return cached_attention_models(np.random.default_rng(0), past, new=NEW, n=HEADS, d=HEAD_DIM)


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
