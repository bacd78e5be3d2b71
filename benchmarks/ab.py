"""Models side by side against one original: the A/B measurements behind the notes in RESULTS.md.

    python benchmarks/ab.py ORIGINAL.onnx NAME=PATH [NAME=PATH ...] [--setting off|all]
                            [--children 8] [--runs 40] [--dim NAME=VALUE ...]

Latency exactly as benchmarks/peers.py measures it (`peers._latency_children`: child
processes with huge pages that share the rounds and create the sessions in opposite orders,
each round in a fresh random order, after warm-up). Symbolic dims as there
(benchmarks/symdims.py), `--dim` overriding (a KV-cache step's total follows past and new
tokens unless given). Prints each model's median and its ratio to the original
with a 95 % bootstrap interval, then each model after the first against the first, paired
in the same rounds (`peers.bootstrap_ratio`): `new/old: 0.992 [0.979, 1.010]` means the
interval holds 1.00, so the two are not told apart. Pass the original itself as one of the
models (`control=ORIGINAL.onnx`) to see how far noise alone moves a ratio.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.symdims import dims_for, kv_total  # noqa: E402
from eqsat.cli.args import dim  # noqa: E402  (eqsat optimize's --dim NAME=VALUE)

_spec = importlib.util.spec_from_file_location("bench_peers", ROOT / "benchmarks" / "peers.py")
peers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peers)


def measure(src: Path, models: dict[str, Path], setting: str = "all", children: int = 8, runs: int = 40,
            dims: dict[str, int] | None = None, warmup: int = 3, timeout: float = 1800.0) -> dict:
    """peers' summary of each model against `src`, with "pairs": {name: (ratio, lo, hi)} for
    each model after the first against the first (pooled medians, paired interval)."""
    import onnx

    bound = kv_total({**dims_for(onnx.load(str(src), load_external_data=False)), **(dims or {})}, set(dims or {}))
    job = {"kind": "latency", "src": str(src), "results": {n: str(p) for n, p in models.items()}, "dims": bound,
           "setting": setting, "runs": runs, "warmup": warmup, "max_s": 1e9, "min_runs": runs}
    out = peers._latency_children(job, timeout, children)
    if "error" in out:
        raise SystemExit(f"latency: {out['error']}")
    names = list(models)
    first = out[names[0]]["samples_ms"][names[0]]
    pairs = {}
    for n in names[1:]:
        mine = out[n]["samples_ms"][n]
        ratio = statistics.median(t for c in mine for t in c) / statistics.median(t for c in first for t in c)
        pairs[n] = (ratio, *peers.bootstrap_ratio(mine, first))
    return {"models": out, "pairs": pairs, "dims": bound}


def _named(arg: str) -> tuple[str, Path]:
    name, sep, path = arg.partition("=")
    if not sep or not name or not Path(path).is_file():
        raise argparse.ArgumentTypeError(f"{arg!r}: expected NAME=PATH of an existing .onnx file")
    return name, Path(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("original", type=Path)
    ap.add_argument("models", nargs="+", type=_named, metavar="NAME=PATH")
    ap.add_argument("--setting", choices=peers.SETTINGS, default="all",
                    help="onnxruntime's optimizations: off (ORT_DISABLE_ALL) or all (ORT_ENABLE_ALL, the default)")
    ap.add_argument("--children", type=int, default=8, help="child processes sharing the rounds (default 8)")
    ap.add_argument("--runs", type=int, default=40, help="rounds in all (default 40)")
    ap.add_argument("--dim", type=dim, action="append", default=[], metavar="NAME=VALUE")
    a = ap.parse_args(argv)
    if not a.original.is_file():
        ap.error(f"no such model: {a.original}")
    res = measure(a.original, dict(a.models), a.setting, a.children, a.runs, dict(a.dim))
    print(f"{a.original.name}, optimizations {a.setting}, dims {res['dims']}, {a.children} children, {a.runs} rounds")
    for name, s in res["models"].items():
        lo, hi = s["ci95"]
        print(f"{name:14s} {s['median_ms']:9.3f} ms  ratio {s['ratio']:.3f} [{lo:.3f}, {hi:.3f}]  "
              f"(original {s['original_ms']:.3f} ms)")
    first = next(iter(res["models"]))
    for name, (r, lo, hi) in res["pairs"].items():
        print(f"{name}/{first}: {r:.3f} [{lo:.3f}, {hi:.3f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
