"""Memory plans of the corpus: arena, lower bounds, no reuse, in-place savings, onnxruntime.

    python benchmarks/memory.py [--models DIR] [--only NAME,...] [--variants exported,optimized]
                                [--no-execute] [--no-ort] [--out benchmarks/results/memory.md] [--json FILE]

For each `*.onnx` in DIR (benchmarks/corpus.py, benchmarks/light_models.py), with its
symbolic dimensions bound (a name with `batch` -> 1, with `seq` -> 128): plans the model as
exported and the model eqsat optimizes (default rules, target ort), checks each plan,
proves it by execution (node by node through one numpy arena, compared with onnxruntime)
and measures onnxruntime's own peak on the same graph in a subprocess (see `ort_peak`).
Writes a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.symdims import dims_for  # noqa: E402

MIB = 1 << 20
RTOL, ATOL = 1e-4, 1e-5


# ---- onnxruntime's peak, in a child process ---------------------------------------------------

def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmHWM:", "VmRSS:")):
                k, v = line.split(":")
                out[k] = int(v.split()[0]) * 1024
    return out


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS


def ort_peak(path: str, dims: dict[str, int]) -> dict:
    """Peak RSS growth of onnxruntime runs of the model at `path` (the child process).

    onnxruntime CPU, 1 thread, graph optimizations off (the graph that was planned), CPU
    memory arena off and memory pattern on: the first run records the allocation pattern,
    the second allocates one block for the planned tensors. The parent sets
    MALLOC_MMAP_THRESHOLD_=65536, so every allocation of 64 KiB or more is its own mmap,
    returned to the system on free: RSS follows what is allocated. For each run: VmHWM after
    the run minus VmRSS before it, with VmHWM reset (/proc/self/clear_refs) just before."""
    import onnx
    import onnxruntime as rt

    from eqsat.verification import random_inputs

    so = rt.SessionOptions()
    so.graph_optimization_level = rt.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.enable_cpu_mem_arena = False
    so.enable_mem_pattern = True
    so.log_severity_level = 4
    sess = rt.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feeds = random_inputs(onnx.load(path, load_external_data=False), dims)
    out = {}
    for run in ("first_run", "second_run"):
        before = _status()["VmRSS"]
        _reset_peak()
        res = sess.run(None, feeds)
        out[run] = _status()["VmHWM"] - before
        del res
    return out


def measure_ort(path: Path, dims: dict[str, int]) -> dict:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    p = subprocess.run([sys.executable, __file__, "--ort-peak", str(path), "--dims", json.dumps(dims)],
                       capture_output=True, text=True, env=env, timeout=1200)
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


# ---- one model ---------------------------------------------------------------------------------

def bench(path: Path, variant: str, execute: bool, ort: bool, tmp: Path) -> dict:
    from eqsat.core.pipeline import Options, optimize
    from eqsat.io.modelio import load_model, save_model
    from eqsat.plan import check_plan, execute_plan, plan_model

    model = load_model(path)
    dims = dims_for(model, unknown=None)
    row: dict = {"model": path.name, "variant": variant, "dims": dims}
    file = path
    if variant == "optimized":
        t0 = time.perf_counter()
        res = optimize(model, Options(dims=dims))
        row["optimize_s"] = time.perf_counter() - t0
        model = res.model
        file = tmp / f"{path.stem}.opt.onnx"
        save_model(model, file)
    row["nodes"] = len(model.graph.node)
    t0 = time.perf_counter()
    plan = plan_model(model, dims)
    row["plan_s"] = time.perf_counter() - t0
    check_plan(plan)
    row.update({k: v for k, v in plan.to_dict().items() if k not in ("tensors", "order", "generated_names")})
    row["tensors"] = len(plan.tensors)
    row["shapes_from_run"] = sum(t.shape_source == "run" for t in plan.tensors)
    row["ratio"] = plan.ratio
    if execute:
        ex = execute_plan(model, plan, rtol=RTOL, atol=ATOL)
        row["execution"] = ex.as_dict()
    if ort:
        row["ort"] = measure_ort(file, dims)
    return row


# ---- the table ---------------------------------------------------------------------------------

def _mib(b) -> str:
    return f"{b / MIB:.2f}" if isinstance(b, int | float) else "-"


def table(rows: list[dict]) -> str:
    head = ("| model | graph | nodes | tensors | arena MiB | lower bound MiB | arena / LB | model-order LB MiB "
            "| order | placement | no reuse MiB | in-place saved MiB | ORT peak MiB (1st / 2nd run) "
            "| proof by execution | proof s | shapes run | plan s |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['variant']} | error: {r['error']} |" + " |" * 14)
            continue
        ex = r.get("execution")
        proof = "-" if ex is None else ("passed" if ex["status"] == "passed" else f"{ex['status']}: {ex['detail']}")
        if ex and ex["status"] == "passed" and ex.get("max_abs_diff"):
            proof += f" (max abs diff {max(ex['max_abs_diff'].values()):.1e})"
        placement = r["heuristic"]
        if r.get("repack_saved_bytes"):
            placement += f" + repack (-{_mib(r['repack_saved_bytes'])})"
        o = r.get("ort") or {}
        ort = "-" if not o else (f"error: {o['error']}" if "error" in o else
                                 f"{_mib(o['first_run'])} / {_mib(o['second_run'])}")
        lines.append(
            f"| {r['model']} | {r['variant']} | {r['nodes']} | {r['tensors']} | {_mib(r['arena_bytes'])} "
            f"| {_mib(r['lower_bound_bytes'])} | {r['ratio']:.3f} | {_mib(r['model_order_lower_bound_bytes'])} "
            f"| {r['order_heuristic']} | {placement} | {_mib(r['no_reuse_bytes'])} "
            f"| {_mib(r['inplace_saved_bytes'])} | {ort} | {proof} | {ex['seconds'] if ex else 0:.1f} "
            f"| {r.get('shapes_from_run', 0)} | {r['plan_s']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=ROOT / "benchmarks/models")
    ap.add_argument("--only", default="", help="comma-separated model names (file stems)")
    ap.add_argument("--variants", default="exported,optimized")
    ap.add_argument("--no-execute", action="store_true")
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/memory.md")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    ap.add_argument("--from-json", type=Path, help="only rewrite the markdown from rows a --json run saved")
    ap.add_argument("--ort-peak", help=argparse.SUPPRESS)
    ap.add_argument("--dims", default="{}", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.ort_peak:
        print(json.dumps(ort_peak(a.ort_peak, json.loads(a.dims))))
        return 0
    if a.from_json:
        write_markdown(json.loads(a.from_json.read_text()), a.out)
        return 0
    paths = sorted(a.models.glob("*.onnx"))
    if a.only:
        keep = set(a.only.split(","))
        paths = [p for p in paths if p.stem in keep or p.name in keep]
    if not paths:
        print(f"no models in {a.models}; build them with benchmarks/corpus.py and benchmarks/light_models.py",
              file=sys.stderr)
        return 2
    variants = [v for v in a.variants.split(",") if v]
    rows = []
    with tempfile.TemporaryDirectory(prefix="eqsat-memory-") as d:
        for p in paths:
            for v in variants:
                t0 = time.perf_counter()
                try:
                    r = bench(p, v, not a.no_execute, not a.no_ort, Path(d))
                except Exception as e:  # noqa: BLE001 - one model's failure is a row, not the end
                    r = {"model": p.name, "variant": v, "error": str(e).splitlines()[0] if str(e) else type(e).__name__}
                r["total_s"] = time.perf_counter() - t0
                rows.append(r)
                ex = r.get("execution") or {}
                print(f"{p.name} [{v}]: " + (f"error {r['error']}" if "error" in r else
                      f"arena {_mib(r['arena_bytes'])} MiB, LB {_mib(r['lower_bound_bytes'])} MiB "
                      f"(model order {_mib(r['model_order_lower_bound_bytes'])}), ratio {r['ratio']:.3f}, "
                      f"no reuse {_mib(r['no_reuse_bytes'])}, in-place saved {_mib(r['inplace_saved_bytes'])}, "
                      f"ORT {r.get('ort')}, proof {ex.get('status')} {ex.get('seconds', 0):.1f}s "
                      f"{ex.get('max_abs_diff')}, {r['total_s']:.0f}s"), flush=True)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1, default=str))
    write_markdown(rows, a.out)
    return 0


def write_markdown(rows: list[dict], out: Path) -> None:
    import numpy
    import onnx
    import onnxruntime

    ok = [r for r in rows if "error" not in r]
    worst = max((r["ratio"] for r in ok), default=1.0)
    proofs = [r["execution"] for r in ok if r.get("execution")]
    passed = sum(e["status"] == "passed" for e in proofs)
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip() or "?"
    except OSError:
        commit = "?"
    ratios = sorted(r["ort"]["second_run"] / r["arena_bytes"] for r in ok
                    if r.get("ort") and "second_run" in r["ort"] and r["arena_bytes"])
    ort_line = (f" onnxruntime's 2nd-run peak / arena: {ratios[0]:.2f} to {ratios[-1]:.2f}, median "
                f"{ratios[len(ratios) // 2]:.2f}." if ratios else "")
    text = f"""# Memory plans of the corpus

Command: `python benchmarks/memory.py` (eqsat at commit {commit}, with the working tree's rules) on
{platform.machine()}, Python {platform.python_version()}, onnx {onnx.__version__}, onnxruntime
{onnxruntime.__version__}, numpy {numpy.__version__}. Symbolic dimensions: a name with `batch` -> 1, with `seq` ->
128 (all corpus models use `batch` and `sequence`). Graph `exported`: the file as exported; `optimized`: after `eqsat
optimize` (default rules, target ort).

Columns (all sizes in MiB of 2^20 bytes; alignment 64 bytes):

- **arena**: the plan's arena: every placement heuristic (greedy-by-size (best fit, Pisarchyk & Lee 2020),
  greedy-long-lived-first, greedy-by-size-first-fit, greedy-by-breadth, greedy-by-start, greedy-by-conflict), the
  three smallest improved by `repack` (compaction and local re-placement, eqsat/plan/arena.py); **placement** names
  the heuristic whose result won, with the bytes repack took off it.
- **lower bound**: the largest sum of simultaneously live buffers (aligned; in-place reuse and views applied) in the
  chosen execution **order**; no arena for that order can be smaller. **arena / LB** is the ratio (target: <= 1.05).
  **model-order LB**: the same bound in the model's own node order.
- **no reuse**: every intermediate in a buffer of its own. **in-place saved**: the best arena without in-place reuse
  (views still shared) minus the arena.
- **ORT peak**: onnxruntime {onnxruntime.__version__} running the same graph in a child process (CPU, 1 thread, graph
  optimizations off, CPU memory arena off, memory pattern on, `MALLOC_MMAP_THRESHOLD_=65536` so that every allocation
  of 64 KiB or more is its own mmap and goes back to the system when freed): VmHWM after a run minus VmRSS before it,
  VmHWM reset through `/proc/self/clear_refs` just before. The 1st run records onnxruntime's allocation pattern; the
  2nd allocates one block for its planned tensors. It includes what the arena does not: kernels' scratch buffers
  (im2col, packed weights, ...), the outputs handed to Python, allocator overhead; and excludes what is under 64 KiB
  and was already in the heap.
- **shapes run**: tensors whose static shape ONNX shape inference left unknown (contrib ops, shape computations it
  cannot follow), measured by one onnxruntime run at the bound dimensions.
- **proof by execution**: the model run node by node (onnx's reference evaluator; onnxruntime for contrib ops,
  Conv/pooling, BatchNormalization, LRN and pre-13 Softmax, see eqsat/plan/execute.py) with every intermediate in one
  numpy arena at its planned offset, dead buffers overwritten with 0xFF; the outputs compared with onnxruntime on the
  whole graph (optimizations off) at rtol {RTOL:g}, atol {ATOL:g}. **proof s**: the node-by-node run. **plan s**:
  planning, including shape inference (and, where it leaves shapes unknown, one onnxruntime run to measure them).

Largest arena / lower bound over these models: {worst:.3f}. Proofs by execution passed: {passed} of
{len(proofs)}.{ort_line}

{table(rows)}
"""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
