"""Where a model's time goes under onnxruntime, op type by op type, before and after eqsat.

    python benchmarks/op_profile.py [--models DIR] [--only NAME,...] [--setting all|off]
                                    [--runs 20] [--out benchmarks/results/op_profile.md]

For each model: eqsat optimizes it (the defaults of `eqsat optimize`), then the original and
the result run under onnxruntime's profiler (CPU, 1 thread, the setting's graph optimizations,
symbolic dims as in peers.py, benchmarks/symdims.py; huge pages as there), `--runs` rounds each after three
warm-up runs, the two sessions alternating. Kernel times are summed by op type (the op as
onnxruntime ran it, after its own optimizer) and divided by the rounds.

The matrix products (MatMul, FusedMatMul, Gemm, FusedGemm) get their FLOPs from the shapes the
profiler records, hence their throughput; the products inside a fused attention kernel
(MultiHeadAttention) are not counted, so where eqsat fused attention (ViT) its products and
bound leave them out. The **bound** is the eqsat result's matrix-product
time over the original's total: the ratio a rewrite could reach at best if it kept every
product as it is and every other op took no time. Where products dominate, this says how much a
graph optimizer can still win on this machine. A different product would first have to run
faster than onnxruntime's (MLAS) kernel. The peak line is the best rate MLAS reached on three
products in a warm cache (`peak_gflops`), for scale.

Kernel times are profiler sums, not wall time: a ratio here is not a latency ratio
(benchmarks/peers.py and benchmarks/ab.py measure those).
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.symdims import describe, dims_for  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_peers", ROOT / "benchmarks" / "peers.py")
peers = importlib.util.module_from_spec(_spec)  # the results pages' machine, versions and feeds
_spec.loader.exec_module(peers)

PRODUCTS = ("MatMul", "FusedMatMul", "Gemm", "FusedGemm")
DEFAULT_MODELS = "bert-base,gpt2,vit-base,llama-4l"


def _session(path: Path, setting: str, prefix: str | None, saved: Path | None):
    import onnxruntime as rt

    so = rt.SessionOptions()
    so.graph_optimization_level = (rt.GraphOptimizationLevel.ORT_DISABLE_ALL if setting == "off"
                                   else rt.GraphOptimizationLevel.ORT_ENABLE_ALL)
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4
    if prefix:
        so.enable_profiling = True
        so.profile_file_prefix = prefix
    if saved:
        so.optimized_model_filepath = str(saved)
    return rt.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _trans(saved: Path) -> dict[str, tuple[int, int]]:
    """node name -> (transA, transBatchA) in the graph onnxruntime ran (its saved model)."""
    import onnx

    out = {}
    for n in onnx.load(str(saved), load_external_data=False).graph.node:
        if n.op_type in PRODUCTS:
            at = {a.name: a.i for a in n.attribute}
            out[n.name] = (at.get("transA", 0), at.get("transBatchA", 0))
    return out


def product_flops(op: str, shapes: list[list[int]], out: list[int], trans_a: int, trans_batch_a: int = 0) -> float:
    """FLOPs of one matrix product: 2 x (output elements) x K, K read from A's shape. FusedMatMul's
    transBatchA moves A's first dimension to the second last before transA applies."""
    a = shapes[0]
    if op in ("Gemm", "FusedGemm"):
        k = a[0] if trans_a else a[1]
    elif trans_batch_a and len(a) >= 3:
        k = a[0] if trans_a else a[-1]
    else:
        k = a[-2] if (trans_a and len(a) >= 2) else a[-1]
    return 2.0 * math.prod(out) * k


def _shape(entry: dict) -> list[int]:
    return next(iter(entry.values())) if entry else []


def summarize(events: list[dict], rounds: int, trans: dict[str, tuple[int, int]]) -> dict:
    """Per op type: ms per round and count; products' FLOPs per round."""
    ms = collections.Counter()
    count = collections.Counter()
    flops = 0.0
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        args = e.get("args", {})
        op = args.get("op_name", "?")
        ms[op] += e["dur"] / 1000.0
        count[op] += 1
        if op in PRODUCTS:
            node = e["name"][: -len("_kernel_time")]
            ins = [_shape(x) for x in args.get("input_type_shape", [])]
            outs = [_shape(x) for x in args.get("output_type_shape", [])]
            if ins and outs and ins[0]:
                flops += product_flops(op, ins, outs[0], *trans.get(node, (0, 0)))
    per = {op: {"ms": v / rounds, "count": count[op] // rounds} for op, v in ms.items()}
    total = sum(v["ms"] for v in per.values())
    prod_ms = sum(per[o]["ms"] for o in PRODUCTS if o in per)
    return {"ops": per, "total_ms": total, "products_ms": prod_ms, "products_gflop": flops / rounds / 1e9}


def profile_pair(original: Path, result: Path, dims: dict[str, int], setting: str, runs: int,
                 work: Path) -> dict[str, dict]:
    """Profile both models in this process, alternating, after 3 warm-up runs each."""
    import onnx

    from eqsat.verification import random_inputs

    feeds = random_inputs(onnx.load(str(original), load_external_data=False), dims)
    sessions, trans = {}, {}
    for name, path in (("original", original), ("eqsat", result)):
        saved = work / f"{name}.ort.onnx"
        sessions[name] = _session(path, setting, str(work / f"{name}-prof"), saved)
        trans[name] = _trans(saved)
    own = {name: peers._feeds_for(s, feeds) for name, s in sessions.items()}
    for name, s in sessions.items():
        for _ in range(3):
            s.run(None, own[name])
    # the profiler records the warm-up runs too: _last_runs keeps the last `runs`
    for r in range(runs):
        order = list(sessions) if r % 2 == 0 else list(sessions)[::-1]
        for name in order:
            sessions[name].run(None, own[name])
    out = {}
    for name, s in sessions.items():
        path = s.end_profiling()
        with open(path) as f:
            events = json.load(f)
        os.remove(path)
        events = _last_runs(events, runs)
        out[name] = summarize(events, runs, trans[name])
    return out


def _last_runs(events: list[dict], runs: int) -> list[dict]:
    """The node events of the last `runs` model runs (the profiler's `model_run` spans)."""
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "model_run")
    if len(spans) < runs:
        raise SystemExit(f"the profiler recorded {len(spans)} runs, expected at least {runs}")
    start = spans[-runs][0]
    return [e for e in events if e.get("ts", 0) >= start]


def peak_gflops(repeats: int = 30) -> float:
    """MLAS's best rate seen, 1 thread, warm: the fastest of `repeats` runs of MatMul
    [m, k] x [k, n] for a large square product and two of a transformer's shapes."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    best = 0.0
    with tempfile.TemporaryDirectory() as d:
        for m, k, n in ((1024, 1024, 1024), (384, 768, 768), (128, 768, 3072)):
            w = rng.standard_normal((k, n)).astype(np.float32)
            g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "peak",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                                  [numpy_helper.from_array(w, "w")])
            p = Path(d) / f"peak{m}x{k}x{n}.onnx"
            onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(p))
            s = _session(p, "all", None, None)
            x = rng.standard_normal((m, k)).astype(np.float32)
            for _ in range(3):
                s.run(None, {"x": x})
            for _ in range(repeats):
                t0 = time.perf_counter()
                s.run(None, {"x": x})
                best = max(best, 2.0 * m * k * n / (time.perf_counter() - t0) / 1e9)
    return best


def _optimize(src: Path, dst: Path) -> None:
    from eqsat.core.pipeline import Options, optimize
    from eqsat.io.modelio import load_model, save_model

    save_model(optimize(load_model(src), Options()).model, dst, check=False)


def _cell(c: dict | None) -> str:
    return f"{c['ms']:.2f} | {c['count']}" if c else "- | 0"


def report(results: dict[str, dict], setting: str, runs: int, peak: float, command: str) -> str:
    lines = [
        "# Where the time goes: onnxruntime's profiler by op type",
        "",
        f"Command: `{command}` (eqsat at commit {peers._git_commit('eqsat', 'rules', 'extract')}). "
        "Written by `benchmarks/op_profile.py`.",
        "",
        f"Machine: {peers._machine()}.",
        "",
        f"Packages: {peers._versions()}.",
        "",
        f"Method: symbolic dims (by name) {describe()}; onnxruntime CPU, 1 thread, graph optimizations "
        f"{'on (ORT_ENABLE_ALL)' if setting == 'all' else 'off'}, "
        f"profiler kernel times summed by op type over {runs} runs of each model after 3 warm-up runs, the original "
        "and eqsat's result (`eqsat optimize` defaults) alternating in one process; ms per run. **products**: MatMul, "
        "FusedMatMul, Gemm, FusedGemm, with their GFLOP per run from the recorded shapes (not those inside "
        "MultiHeadAttention). **bound**: eqsat's "
        "products time / the original's total: the best ratio left to a rewrite that keeps the products and makes "
        f"every other op free. MLAS's best rate on this machine (`peak_gflops`: the fastest of 30 warm runs of three "
        f"products, 1 thread): {peak:.1f} GFLOP/s.",
        "",
        "| model | total ms, original | total ms, eqsat | eqsat / original | products ms (share), eqsat "
        "| GFLOP | GFLOP/s | bound |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        o, e = r["original"], r["eqsat"]
        rate = e["products_gflop"] / (e["products_ms"] / 1000) if e["products_ms"] else 0.0
        lines.append(f"| {name} | {o['total_ms']:.1f} | {e['total_ms']:.1f} | {e['total_ms'] / o['total_ms']:.3f} "
                     f"| {e['products_ms']:.1f} ({100 * e['products_ms'] / e['total_ms']:.1f} %) "
                     f"| {e['products_gflop']:.3g} | {rate:.1f} | {e['products_ms'] / o['total_ms']:.3f} |")
    for name, r in results.items():
        lines += ["", f"## {name}", "", "| op | original ms | count | eqsat ms | count |", "|---|---:|---:|---:|---:|"]
        o, e = r["original"]["ops"], r["eqsat"]["ops"]
        for op in sorted(set(o) | set(e), key=lambda k: -max(o.get(k, {}).get("ms", 0), e.get(k, {}).get("ms", 0))):
            lines.append(f"| {op} | {_cell(o.get(op))} | {_cell(e.get(op))} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import onnx

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=ROOT / "benchmarks" / "models")
    ap.add_argument("--only", default=DEFAULT_MODELS, help=f"comma-separated model names (default {DEFAULT_MODELS})")
    ap.add_argument("--setting", choices=("all", "off"), default="all")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None, help="write the markdown here (default: print it)")
    a = ap.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.only.split(","):
            src = a.models / f"{name}.onnx"
            if not src.is_file():
                raise SystemExit(f"no model {src}; build the corpus first (make corpus)")
            work = Path(tmp) / name
            work.mkdir()
            dst = work / "eqsat.onnx"
            print(f"{name}: optimizing", file=sys.stderr, flush=True)
            _optimize(src, dst)
            dims = dims_for(onnx.load(str(src), load_external_data=False))
            print(f"{name}: profiling {a.runs} runs", file=sys.stderr, flush=True)
            results[name] = profile_pair(src, dst, dims, a.setting, a.runs, work)
    peak = peak_gflops()
    command = "python benchmarks/op_profile.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(results, a.setting, a.runs, peak, command.strip())
    if a.out:
        a.out.write_text(text)
        print(f"wrote {a.out}", file=sys.stderr)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    if "GLIBC_TUNABLES" not in os.environ:  # huge pages, as peers.py's latency children (LATENCY_ENV)
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]],
                  {**os.environ, "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"})
    sys.exit(main())
