"""How eqsat's time per phase and peak memory grow with the node count.

    python benchmarks/scaling.py [--sizes 1000,3000,10000,30000,100000] [--timeout S]
                                 [--out benchmarks/results/scaling.md] [--json FILE]

Synthetic transformer-like graphs, built with onnx.helper: a stack of encoder layers as the
TorchScript exporter writes them, every pattern in primitive ops (hidden 32, 4 heads,
sequence 16, batch 1, static shapes; small weights, the node count is what matters):

- LayerNorm pattern: ReduceMean, Sub, Pow, ReduceMean, Add(eps), Sqrt, Div, Mul, Add (9);
- attention pattern: Q, K, V projections (MatMul + Add, Reshape, Transpose each), MatMul,
  Div by sqrt(d), Add of the mask, Softmax, MatMul, Transpose, Reshape, output projection
  (MatMul + Add), residual Add (22);
- a second LayerNorm (9); MLP: MatMul + Add, Gelu pattern (Div, Erf, Add, Mul, Mul),
  MatMul + Add, residual Add (10).

50 nodes a layer; a size N gets round(N / 50) layers. Each size runs in a child process:
`eqsat.core.pipeline.optimize` with default options (what `eqsat optimize` does, less its
verification and file writing), the report's phase times, the child's peak RSS
(`ru_maxrss`) and its RSS after imports. A size that passes `--timeout` is recorded as such.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NODES_PER_LAYER = 50
HIDDEN, HEADS, SEQ, FFN = 32, 4, 16, 64
PHASES = ("shape_inference", "load_rules", "encode", "saturate", "serialize", "extract", "decode")


def build(layers: int, seed: int = 0):
    """A model of `layers` encoder layers (50 nodes each), input x[1, SEQ, HIDDEN] and mask."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits: list = []
    nodes: list = []
    counter = [0]

    def name(prefix: str) -> str:
        counter[0] += 1
        return f"{prefix}_{counter[0]}"

    def weight(shape, prefix="w") -> str:
        n = name(prefix)
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), n))
        return n

    def const(value, dtype=np.float32) -> str:
        n = name("c")
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), n))
        return n

    def node(op: str, inputs: list[str], **attrs) -> str:
        out = name(op.lower())
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def layer_norm(x: str) -> str:
        mean = node("ReduceMean", [x], axes=[-1])
        d = node("Sub", [x, mean])
        sq = node("Pow", [d, const(2.0)])
        var = node("ReduceMean", [sq], axes=[-1])
        std = node("Sqrt", [node("Add", [var, const(1e-5)])])
        return node("Add", [node("Mul", [node("Div", [d, std]), weight([HIDDEN], "g")]), weight([HIDDEN], "b")])

    def linear(x: str, n_in: int, n_out: int) -> str:
        return node("Add", [node("MatMul", [x, weight([n_in, n_out])]), weight([n_out], "bias")])

    head_dim = HIDDEN // HEADS
    x = "x"
    for _ in range(layers):
        h = layer_norm(x)
        split = const([1, SEQ, HEADS, head_dim], np.int64)
        q = node("Transpose", [node("Reshape", [linear(h, HIDDEN, HIDDEN), split])], perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [linear(h, HIDDEN, HIDDEN), split])], perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [linear(h, HIDDEN, HIDDEN), split])], perm=[0, 2, 1, 3])
        s = node("Add", [node("Div", [node("MatMul", [q, k]), const(np.sqrt(head_dim))]), "mask"])
        ctx = node("MatMul", [node("Softmax", [s], axis=-1), v])
        ctx = node("Reshape", [node("Transpose", [ctx], perm=[0, 2, 1, 3]), const([1, SEQ, HIDDEN], np.int64)])
        x = node("Add", [x, linear(ctx, HIDDEN, HIDDEN)])
        h = linear(layer_norm(x), HIDDEN, FFN)
        gelu = node("Mul", [node("Mul", [h, node("Add", [node("Erf", [node("Div", [h, const(np.sqrt(2.0))])]),
                                                          const(1.0)])]), const(0.5)])
        x = node("Add", [x, linear(gelu, FFN, HIDDEN)])
    y = node("Identity", [x])
    graph = helper.make_graph(
        nodes, f"synthetic_{layers}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, HIDDEN]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, 1, SEQ])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, SEQ, HIDDEN])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def child(layers: int) -> dict:
    """Build and optimize in this process; phase times and memory."""
    from eqsat.core.pipeline import Options, optimize

    t0 = time.perf_counter()
    model = build(layers)
    build_s = time.perf_counter() - t0
    base = _rss_kib()
    t0, c0 = time.perf_counter(), _cpu_s(resource.RUSAGE_SELF)
    res = optimize(model, Options(), progress=lambda msg: print(f"progress: {msg}", file=sys.stderr, flush=True))
    total, cpu = time.perf_counter() - t0, _cpu_s(resource.RUSAGE_SELF) - c0
    r = res.report
    return {"layers": layers, "nodes": len(model.graph.node), "nodes_after": len(res.model.graph.node),
            "build_s": build_s, "optimize_s": total, "optimize_cpu_s": cpu, "phases_s": r["times_s"],
            "stop_reason": r["saturation"]["stop_reason"], "iterations": r["saturation"]["iterations"],
            "enodes": r["saturation"]["enodes"], "eclasses": r["saturation"]["eclasses"],
            "extractor": r["extraction"]["extractor"], "extract_notes": r["extraction"]["notes"],
            "rss_after_build_mib": base / 1024,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _cpu_s(who: int) -> float:
    u = resource.getrusage(who)
    return u.ru_utime + u.ru_stime


def run_size(nodes: int, timeout: float) -> dict:
    """One size in a child; on a timeout or crash, how far it got: its progress lines and
    the CPU seconds it had used (the machine is shared: wall time alone says little)."""
    layers = max(1, round(nodes / NODES_PER_LAYER))
    t0, c0 = time.perf_counter(), _cpu_s(resource.RUSAGE_CHILDREN)
    try:
        p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(layers)],
                           capture_output=True, text=True, timeout=timeout, cwd=str(ROOT))
    except subprocess.TimeoutExpired as e:
        err = (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return {"target": nodes, "layers": layers, "nodes": layers * NODES_PER_LAYER + 1,
                "error": f"timed out after {timeout:.0f} s", "progress": _progress(err)[-3:],
                "wall_s": time.perf_counter() - t0, "cpu_s": _cpu_s(resource.RUSAGE_CHILDREN) - c0}
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        why = f"crashed (signal {-p.returncode})" if p.returncode < 0 else \
            ((p.stderr.strip().splitlines() or ["?"])[-1])[:300]
        return {"target": nodes, "layers": layers, "nodes": layers * NODES_PER_LAYER + 1, "error": why,
                "wall_s": wall, "cpu_s": _cpu_s(resource.RUSAGE_CHILDREN) - c0, "progress": _progress(p.stderr)[-3:]}
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out.update(target=nodes, wall_s=wall)
    return out


def _progress(stderr: str) -> list[str]:
    return [ln[len("progress: "):] for ln in stderr.splitlines() if ln.startswith("progress: ")]


def write(rows: list[dict], out: Path, command: str) -> None:
    import onnx

    plots = plot(rows, out.parent)
    ok = [r for r in rows if "error" not in r]
    lines = [
        "# eqsat scaling: synthetic transformer-like graphs",
        "",
        f"Command: `{command}`, written by `benchmarks/scaling.py`, on {platform.machine()} "
        f"({_cpu()}), Python {platform.python_version()}, onnx {onnx.__version__}, egglog {_ver('egglog')}. "
        "The machine (2 cores) was shared with other work, and the peer benchmark ran at the same time: "
        "times are indicative.",
        "",
        f"Graphs: {NODES_PER_LAYER} nodes a layer (LayerNorm, attention and Gelu as primitive ops, "
        f"hidden {HIDDEN}, {HEADS} heads, sequence {SEQ}); `eqsat.core.pipeline.optimize` with default options "
        "(limits: 30 rounds, 2,000,000 e-nodes, 120 s of saturation; ILP extraction with a 60 s limit, "
        "then the greedy answer). Peak RSS: the child's `ru_maxrss` (after imports and the model build: "
        "`RSS before`).",
        "",
        "| nodes | layers | nodes after | total s | CPU s | " + " | ".join(PHASES)
        + " | stop | e-nodes | extraction | RSS before MiB | peak RSS MiB | s / 1k nodes | MiB / 1k nodes |",
        "|---:|---:|---:|---:|---:|" + "---:|" * len(PHASES) + "---|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            last = "; ".join(r.get("progress") or [])
            lines.append(f"| {r['nodes']} | {r['layers']} | error: {r['error']}"
                         + (f" (last progress: {last})" if last else "")
                         + f" | {r.get('wall_s', 0):.0f} s wall"
                         + (f", {r['cpu_s']:.0f} s CPU" if "cpu_s" in r else "") + " |" + " |" * (len(PHASES) + 9))
            continue
        ph = r["phases_s"]
        ex = r["extractor"] + (f" ({'; '.join(r['extract_notes'])})" if r.get("extract_notes") else "")
        grow = r["peak_rss_mib"] - r["rss_after_build_mib"]
        lines.append(
            f"| {r['nodes']} | {r['layers']} | {r['nodes_after']} | {r['optimize_s']:.1f} | "
            + (f"{r['optimize_cpu_s']:.1f} | " if "optimize_cpu_s" in r else "- | ")
            + " | ".join(f"{ph.get(p, 0):.2f}" for p in PHASES)
            + f" | {r['stop_reason']} ({r['iterations']} rounds) | {r['enodes']} | {ex} | "
              f"{r['rss_after_build_mib']:.0f} | {r['peak_rss_mib']:.0f} | "
              f"{1000 * r['optimize_s'] / r['nodes']:.2f} | {1000 * grow / r['nodes']:.1f} |")
    if len(ok) >= 2:
        import math

        a, b = ok[0], ok[-1]
        k = math.log(b["optimize_s"] / a["optimize_s"]) / math.log(b["nodes"] / a["nodes"])
        lines += ["", f"Growth of the total time from {a['nodes']} to {b['nodes']} nodes: exponent "
                      f"{k:.2f} (time ~ nodes^k; 1 is linear)."]
        if "optimize_cpu_s" in a and "optimize_cpu_s" in b:
            kc = math.log(b["optimize_cpu_s"] / a["optimize_cpu_s"]) / math.log(b["nodes"] / a["nodes"])
            lines.append(f"Growth of the CPU time (less sensitive to other work on the machine): exponent {kc:.2f}.")
        for p in PHASES:
            if a["phases_s"].get(p, 0) > 0.05 and b["phases_s"].get(p, 0) > 0:
                kp = math.log(b["phases_s"][p] / a["phases_s"][p]) / math.log(b["nodes"] / a["nodes"])
                lines.append(f"- {p}: exponent {kp:.2f}")
    lines += ["", *[f"![{p.stem}]({p.name})" for p in plots], ""]
    out.write_text("\n".join(lines))


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    except OSError:
        return "?"


def _ver(n: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(n)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def plot(rows: list[dict], out_dir: Path) -> list[Path]:
    ok = [r for r in rows if "error" not in r]
    if not ok:
        return []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    n = [r["nodes"] for r in ok]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    for p in PHASES:
        ys = [max(r["phases_s"].get(p, 0), 1e-3) for r in ok]
        if max(ys) > 0.01:
            ax1.plot(n, ys, marker="o", label=p)
    ax1.plot(n, [r["optimize_s"] for r in ok], marker="s", color="black", label="total")
    if all("optimize_cpu_s" in r for r in ok):
        ax1.plot(n, [r["optimize_cpu_s"] for r in ok], marker="s", color="black", linestyle="--", label="total CPU")
    lo = ok[0]
    ax1.plot(n, [lo["optimize_s"] * x / lo["nodes"] for x in n], linestyle=":", color="gray", label="linear")
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.set_xlabel("nodes")
    ax1.set_ylabel("seconds")
    ax1.set_title("eqsat time per phase", fontsize=10)
    ax1.grid(alpha=0.3, which="both")
    ax1.legend(fontsize=7)
    ax2.plot(n, [r["peak_rss_mib"] for r in ok], marker="o", label="peak RSS")
    ax2.plot(n, [r["rss_after_build_mib"] for r in ok], marker="x", label="RSS before optimizing")
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_xlabel("nodes")
    ax2.set_ylabel("MiB")
    ax2.set_title("eqsat peak memory (child ru_maxrss)", fontsize=10)
    ax2.grid(alpha=0.3, which="both")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    p = out_dir / "scaling.png"
    fig.savefig(p, dpi=80)
    plt.close(fig)
    return [p]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,3000,10000,30000,100000")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per size")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/scaling.md")
    ap.add_argument("--json", type=Path, help="also write (and resume from) the rows as JSON")
    ap.add_argument("--report-only", action="store_true", help="only rewrite the markdown from --json")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child)))
        return 0
    command = "python benchmarks/scaling.py" + (" " + " ".join(sys.argv[1:]) if argv is None and sys.argv[1:] else "")
    rows = json.loads(a.json.read_text()) if a.json and a.json.exists() else []
    if a.report_only:
        write(rows, a.out, command)
        return 0
    done = {r["target"] for r in rows if "error" not in r}
    for size in (int(s) for s in a.sizes.split(",") if s):
        if size in done:
            continue
        rows = [r for r in rows if r["target"] != size]
        r = run_size(size, a.timeout)
        rows.append(r)
        rows.sort(key=lambda r: r["target"])
        print(f"{size}: " + (f"error {r['error']}" if "error" in r else
                             f"{r['nodes']} -> {r['nodes_after']} nodes, {r['optimize_s']:.1f} s "
                             f"{ {k: round(v, 2) for k, v in r['phases_s'].items()} }, {r['stop_reason']}, "
                             f"peak RSS {r['peak_rss_mib']:.0f} MiB"), flush=True)
        if a.json:
            a.json.parent.mkdir(parents=True, exist_ok=True)
            a.json.write_text(json.dumps(rows, indent=1))
        a.out.parent.mkdir(parents=True, exist_ok=True)
        write(rows, a.out, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
