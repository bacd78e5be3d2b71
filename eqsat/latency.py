"""Latency of models under onnxruntime, measured side by side.

`compare(models, feeds)` creates one session per model, warms each up, then runs them
round by round, each round every session once in a fresh random order that never starts with
the session that ended the round before (`eqsat.rounds.round_orders`), so that a noisy
machine slows all of them alike and none always runs right after the same one, and returns
each model's median time in milliseconds.

On Linux, run the process with `GLIBC_TUNABLES=glibc.malloc.hugetlb=1`: on the project's
virtual machines, without transparent huge pages, sessions of the same model in one process
ran 1.5x to 5x apart depending on where their weights landed in memory (benchmarks/peers.py
sets it for its latency children).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

from onnx import ModelProto

from .rounds import round_orders
from .verify import session


def compare(models: Sequence[ModelProto | str], feeds: dict | Sequence[dict], runs: int = 30, warmup: int = 3,
            optimize: bool = False, threads: int = 1) -> list[float]:
    """Median milliseconds of each model over `runs` rounds (`round_orders`). `feeds`: one
    dict for all models, or one a model. `optimize` turns onnxruntime's own graph
    optimizations on (off by default: what the model is, is what runs)."""
    sessions = [session(m, optimize=optimize, threads=threads) for m in models]
    each = [feeds] * len(sessions) if isinstance(feeds, dict) else list(feeds)
    if len(each) != len(sessions):
        raise ValueError(f"compare: {len(each)} feeds for {len(sessions)} models")
    for s, f in zip(sessions, each, strict=True):
        for _ in range(warmup):
            s.run(None, f)
    times: list[list[float]] = [[] for _ in sessions]
    for perm in round_orders(len(sessions), runs):
        for i in perm:
            t0 = time.perf_counter()
            sessions[i].run(None, each[i])
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) * 1e3 for t in times]
