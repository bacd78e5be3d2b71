"""Latency of models under onnxruntime, measured side by side.

`compare(models, feeds)` creates one session per model, warms each up, then runs them
round by round, each round every session once in a fresh random order that never starts with
the session that ended the round before (`eqsat.backends.ort.rounds.round_orders`), so that a noisy
machine slows all of them alike and none always runs right after the same one, and returns
each model's median time in milliseconds (`compare_samples`: every run's).

`clock`: "wall" (time.perf_counter, the default) or "cpu" (time.process_time around each
run: the time the process's threads ran, which on a machine that other work shares does not
count the time others hold the core; with onnxruntime's single intra-op thread every run's
work is this process's).

On Linux, run the process with `GLIBC_TUNABLES=glibc.malloc.hugetlb=1`: on the project's
virtual machines, without transparent huge pages, sessions of the same model in one process
ran 1.5x to 5x apart depending on where their weights landed in memory (benchmarks/peers.py
sets it for its latency children).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from onnx import ModelProto

from eqsat.backends.ort.rounds import round_orders
from eqsat.verification import session

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def compare(models: Sequence[ModelProto | str], feeds: dict | Sequence[dict], runs: int = 30, warmup: int = 3,
            optimize: bool = False, threads: int = 1, clock: str = "wall") -> list[float]:
    """Median milliseconds of each model over `runs` rounds (`round_orders`). `feeds`: one
    dict for all models, or one a model. `optimize` turns onnxruntime's own graph
    optimizations on (off by default: what the model is, is what runs)."""
    return [statistics.median(t) for t in compare_samples(models, feeds, runs, warmup, optimize, threads, clock)]


def compare_samples(models: Sequence[ModelProto | str], feeds: dict | Sequence[dict], runs: int = 30,
                    warmup: int = 3, optimize: bool = False, threads: int = 1,
                    clock: str = "wall") -> list[list[float]]:
    """Every run's milliseconds of each model, in the order run (`compare`, which takes medians)."""
    now = CLOCKS[clock]
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
            t0 = now()
            sessions[i].run(None, each[i])
            times[i].append((now() - t0) * 1e3)
    return times


# glibc's malloc asked for huge pages in the timing children (see the module's docstring)
CHILD_ENV = {"GLIBC_TUNABLES": os.environ.get("GLIBC_TUNABLES") or "glibc.malloc.hugetlb=1"}


def compare_to_first(models: Sequence[ModelProto | str], feeds: dict, runs: int = 30, group: int = 4,
                     threads: int = 1, clock: str = "wall") -> list[float]:
    """Each model's median milliseconds, measured against the first (`compare_to_first_samples`)."""
    firsts, scaled = _to_first(models, feeds, runs, group, threads, clock)
    base = statistics.median(statistics.median(f) for f in firsts)
    return [base] + [statistics.median(t) / statistics.median(firsts[k]) * base for k, t in scaled[1:]]


def compare_to_first_samples(models: Sequence[ModelProto | str], feeds: dict, runs: int = 30, group: int = 4,
                             threads: int = 1, clock: str = "wall") -> list[list[float]]:
    """Every run of each model (`compare_to_first`), in milliseconds, scaled as its median is:
    a model's runs times the first's median over every child over the first's median in its
    own child. The first's are its runs in every child, each child's scaled alike."""
    firsts, scaled = _to_first(models, feeds, runs, group, threads, clock)
    base = statistics.median(statistics.median(f) for f in firsts)
    out = [[x * base / statistics.median(f) for f in firsts for x in f]]
    return out + [[x * base / statistics.median(firsts[k]) for x in t] for k, t in scaled[1:]]


def _to_first(models: Sequence[ModelProto | str], feeds: dict, runs: int, group: int,
              threads: int, clock: str = "wall") -> tuple[list[list[float]], list[tuple[int, list[float]]]]:
    """For compare_to_first: (the first's runs in each child, (that child, its runs) for each
    model; the first's entry is empty). The others go in groups of `group` - 1, each group
    beside the first in a child process of its own (huge pages,
    CHILD_ENV; sessions created in the group's order, reversed every other group), and a
    model's figure is its median over the first's in its child, times the first's median
    over every child. Many sessions in one process evict each other's weights from the caches
    between runs, which a deployed model does not suffer, and the first is in every child, so
    programs in different children compare through it. Models are ModelProtos or files."""
    import numpy as np

    from eqsat.io.modelio import save_model

    if len(models) < 2:
        return compare_samples(models, feeds, runs=runs, threads=threads, clock=clock), [(0, [])]
    with tempfile.TemporaryDirectory(prefix="eqsat-latency-") as scratch:
        paths = [str(m) if isinstance(m, str | os.PathLike) else str(save_model(m, Path(scratch) / f"m{k}.onnx",
                                                                                 check=False))
                 for k, m in enumerate(models)]
        np.savez(Path(scratch) / "feeds.npz", **{k: np.asarray(v) for k, v in feeds.items()})
        rest = list(range(1, len(paths)))
        chunks = [rest[i:i + max(1, group - 1)] for i in range(0, len(rest), max(1, group - 1))]
        out: list = [(0, [])] * len(paths)
        firsts = []
        for k, chunk in enumerate(chunks):
            order = [0, *chunk] if k % 2 == 0 else [*chunk[::-1], 0]
            request = {"models": [paths[i] for i in order], "feeds": str(Path(scratch) / "feeds.npz"),
                       "runs": runs, "threads": threads, "samples": True, "clock": clock}
            proc = subprocess.run([sys.executable, "-m", "eqsat.backends.ort.latency"], input=json.dumps(request),
                                  text=True,
                                  capture_output=True, env=dict(os.environ, **CHILD_ENV))
            if proc.returncode != 0:
                lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
                raise RuntimeError(f"timing child failed: {lines[-1] if lines else f'exit code {proc.returncode}'}")
            times = dict(zip(order, json.loads(proc.stdout.strip().splitlines()[-1]), strict=True))
            firsts.append(times[0])
            for i in chunk:
                out[i] = (k, times[i])
    return firsts, out


def _main() -> int:
    import numpy as np

    req = json.loads(sys.stdin.read())
    with np.load(req["feeds"], allow_pickle=False) as npz:
        feeds = {k: npz[k] for k in npz.files}
    each = compare_samples(req["models"], feeds, runs=req["runs"], threads=req["threads"],
                           clock=req.get("clock", "wall"))
    out = each if req.get("samples") else [statistics.median(t) for t in each]
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
