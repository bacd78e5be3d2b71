"""eqsat's program beside the one onnxruntime's ORT_ENABLE_ALL saves, op by op: how much room
is left between them for a latency difference.

    python benchmarks/torchvision_models.py --out DIR --set all
    python benchmarks/ort_all_programs.py DIR [--out benchmarks/results/ort-all-programs.md]

For every tv_*.onnx in DIR: `eqsat optimize` with its defaults (kept as NAME.eq.onnx; an
existing one is reused) and onnxruntime's ORT_ENABLE_ALL saved model (NAME.all.onnx, one
intra-op thread, CPU). Each program is counted by kernel signature: domain, op, fused
activation, inputs given, grouped or not (a Conv with a Sum input has 4 inputs). Two programs
with the same counts run the same kernels on the same shapes, so that their latencies can
differ only by what no op list shows (memory placement, initializer order). Nothing is timed.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
from pathlib import Path

import onnx
from onnx import helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from torchvision_models import DEVELOPMENT, HELD_OUT  # noqa: E402


def signature(model: onnx.ModelProto) -> collections.Counter:
    """Kernel signatures of the main graph's nodes, counted."""
    out: collections.Counter = collections.Counter()
    for n in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        act = attrs.get("activation", b"")
        act = act.decode() if isinstance(act, bytes) else str(act)
        key = (n.domain or "ai.onnx", n.op_type, act, sum(1 for i in n.input if i), int(attrs.get("group", 1)) > 1)
        out[key] += 1
    return out


def ort_all(src: Path, dst: Path) -> None:
    import onnxruntime as rt

    so = rt.SessionOptions()
    so.graph_optimization_level = rt.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(dst)
    so.log_severity_level = 4
    so.intra_op_num_threads = 1
    rt.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])


def compare(path: Path) -> dict:
    """eqsat's and ORT-all's programs of one model: exit code, node counts, differing signatures."""
    eq, al = path.with_suffix(".eq.onnx"), path.with_suffix(".all.onnx")
    if not eq.exists():
        r = subprocess.run([sys.executable, "-m", "eqsat", "optimize", "-q", str(path), "-o", str(eq)],
                           capture_output=True, text=True, check=False)
        if r.returncode:
            return {"exit": r.returncode, "error": r.stderr.strip().splitlines()[-1][:200]}
    ort_all(path, al)
    a, b = signature(onnx.load(str(al), load_external_data=False)), signature(onnx.load(str(eq), load_external_data=False))
    diff = {k: (a[k], b[k]) for k in sorted(set(a) | set(b), key=str) if a[k] != b[k]}
    return {"exit": 0, "ort": sum(a.values()), "eqsat": sum(b.values()), "diff": diff}


def _op(key: tuple) -> str:
    domain, op, act, inputs, grouped = key
    name = op if domain == "ai.onnx" else f"{domain.split('.')[-1]}:{op}"
    extra = [x for x in (act, "grouped" if grouped else "") if x]
    return f"{name}/{inputs}" + (f" ({', '.join(extra)})" if extra else "")


def rows(results: dict[str, dict]) -> list[str]:
    lines = ["| model | set | ORT-all nodes | eqsat nodes | same kernels | signatures that differ (ORT-all -> eqsat) |",
             "|---|---|---:|---:|---|---|"]
    for name, r in results.items():
        kind = "development" if name[3:] in DEVELOPMENT else "held-out" if name[3:] in HELD_OUT else "other"
        if r["exit"]:
            lines.append(f"| {name} | {kind} | | | eqsat exit {r['exit']} | {r['error']} |")
            continue
        diff = "; ".join(f"{_op(k)} {x} -> {y}" for k, (x, y) in r["diff"].items())
        lines.append(f"| {name} | {kind} | {r['ort']} | {r['eqsat']} | {'yes' if not r['diff'] else 'no'} | {diff} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="write the table to this markdown file")
    args = ap.parse_args(argv)
    results = {}
    for path in sorted(args.models.glob("tv_*.onnx")):
        if path.name.count(".") > 1:  # NAME.eq.onnx, NAME.all.onnx
            continue
        results[path.stem] = compare(path)
        print(path.stem, results[path.stem].get("diff", results[path.stem]), flush=True)
    same = sum(1 for r in results.values() if r["exit"] == 0 and not r["diff"])
    lines = rows(results) + ["", f"{same} of {len(results)} programs run the same kernels as ORT-all's."]
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    else:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
