"""Models side by side by the CPU time of each run, for a machine that other work loads:

    python benchmarks/cpu_ab.py ORIGINAL.onnx NAME=PATH [NAME=PATH ...] [--rounds 150]
    python benchmarks/cpu_ab.py --profile MODEL.onnx [MODEL.onnx ...] [--rounds 50]

Wall time (benchmarks/ab.py) counts the time other processes hold the core: on the shared
2-core development machine an A/A control moved by 10 to 30 % there. The CPU time of the
running process (time.process_time around each run) does not count it. One process,
onnxruntime CPU, graph optimizations off, 1 thread, every input drawn by qdq_models.random_feeds (seed 0),
three warm-up runs; each round runs every model once in a fresh random order. Prints each
model's median CPU and wall time, and each model after the first against the first: the
median of the per-round ratios with a 95 % bootstrap interval (2000 resamples), CPU and
wall. Pass a copy of a model (`control=COPY.onnx`) for an A/A control.

`--profile`: onnxruntime's profiler instead (SessionOptions.enable_profiling, the same
settings): each node's kernel time, median over the rounds after three, summed by op type.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import statistics
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from qdq_models import DIMS, random_feeds


def _session(path: str, profile: str | None = None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    if profile:
        so.enable_profiling, so.profile_file_prefix = True, profile
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def _feeds(path: str) -> dict:
    """Every input of the model at `path` (qdq_models.random_feeds, seed 0: a float input
    standard normal, a transformer's token ids, mask and token types; symbolic sizes batch 1,
    sequence 128, others 1)."""
    return random_feeds(onnx.load(path, load_external_data=False), np.random.default_rng(0), DIMS)


def interval(ratios: list[float], seed: int = 1) -> tuple[float, float, float]:
    """(median, 2.5 %, 97.5 %) of the median of `ratios`, bootstrapped."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    return statistics.median(ratios), meds[50], meds[1949]


def measure(named: list[tuple[str, str]], rounds: int) -> dict[str, tuple[list[float], list[float]]]:
    """name -> (CPU seconds, wall seconds) of each round's run."""
    sess = {n: _session(p) for n, p in named}
    feeds = _feeds(named[0][1])
    for s in sess.values():
        for _ in range(3):
            s.run(None, feeds)
    out = {n: ([], []) for n, _ in named}
    rng = random.Random(0)
    for _ in range(rounds):
        order = list(sess)
        rng.shuffle(order)
        for n in order:
            w0, c0 = time.perf_counter(), time.process_time()
            sess[n].run(None, feeds)
            out[n][0].append(time.process_time() - c0)
            out[n][1].append(time.perf_counter() - w0)
    return out


def profile(path: str, rounds: int) -> dict[str, tuple[int, float]]:
    """op type -> (nodes, microseconds): each node's median kernel time, summed by op type."""
    with tempfile.TemporaryDirectory() as tmp:
        s = _session(path, os.path.join(tmp, "p"))
        feeds = _feeds(path)
        for _ in range(rounds + 3):
            s.run(None, feeds)
        with open(s.end_profiling()) as f:
            events = json.load(f)
    per, op = collections.defaultdict(list), {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per[e["name"]].append(e["dur"])
            op[e["name"]] = e["args"].get("op_name", "?")
    tot: dict[str, tuple[int, float]] = {}
    for name, d in per.items():
        n, t = tot.get(op[name], (0, 0.0))
        tot[op[name]] = (n + 1, t + statistics.median(d[3:] or d))
    return dict(sorted(tot.items(), key=lambda kv: -kv[1][1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help="ORIGINAL.onnx NAME=PATH ..., or the models to profile")
    ap.add_argument("--rounds", type=int, default=150)
    ap.add_argument("--profile", action="store_true", help="kernel times by op type (onnxruntime's profiler)")
    args = ap.parse_args(argv)
    if args.profile:
        for path in args.models:
            tot = profile(path, args.rounds)
            print(f"{path}: kernel time {sum(t for _, t in tot.values()):.0f} us ({args.rounds} rounds, medians)")
            for k, (n, t) in tot.items():
                print(f"  {k:28s} {n:4d} {t:10.0f}")
        return 0
    named = [("original", args.models[0])] + [tuple(a.split("=", 1)) for a in args.models[1:]]
    out = measure(named, args.rounds)
    print(f"{args.models[0]}: {args.rounds} rounds, optimizations off, 1 thread; median CPU (wall) ms")
    for n, _ in named:
        print(f"  {n:14s} {statistics.median(out[n][0]) * 1e3:8.2f} ({statistics.median(out[n][1]) * 1e3:.2f})")
    first = named[1][0]
    for n, _ in named[2:] + [("original", "")]:
        a, b = (out[first], out[n]) if n == "original" else (out[n], out[first])
        cpu = interval([p / q for p, q in zip(a[0], b[0], strict=True)])
        wall = interval([p / q for p, q in zip(a[1], b[1], strict=True)])
        name = f"{first}/original" if n == "original" else f"{n}/{first}"
        print(f"  {name}: cpu {cpu[0]:.3f} [{cpu[1]:.3f}, {cpu[2]:.3f}]"
              f"   wall {wall[0]:.3f} [{wall[1]:.3f}, {wall[2]:.3f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
