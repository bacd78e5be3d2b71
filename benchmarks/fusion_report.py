"""What the default rules do to the corpus, beside onnxruntime's own optimizer.

    python benchmarks/fusion_report.py [--models DIR] [--only NAME,...] [--target ort|onnx]
                                       [--hardware cpu|h200|FILE.json] [--out benchmarks/results/fusion.md]

For each model: eqsat's node count and op histogram; the node count of the model that
onnxruntime's ORT_ENABLE_EXTENDED optimizer saves (`SessionOptions.optimized_model_filepath`);
the largest output difference from the original, relative to the output's scale (max abs
diff / max(1, max |original|)), with onnxruntime's optimizations off when the result runs;
and which ops of interest remain (BatchNormalization, Identity, Dropout, and the primitive
forms of LayerNorm, Gelu and attention).
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eqsat.core.pipeline import Options, op_histogram, optimize  # noqa: E402
from eqsat.io.modelio import load_model, save_model  # noqa: E402
from eqsat.verification import random_inputs, run  # noqa: E402

DIMS = {"batch": 1, "batch_size": 1, "sequence": 32, "sequence_length": 32}
LEFT_OVER = ("BatchNormalization", "Identity", "Dropout", "Erf", "Softmax", "ReduceMean", "Pow", "Sqrt", "Tanh")


def ort_extended(path: Path, tmp: Path) -> onnx.ModelProto:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp / (path.stem + ".ort.onnx"))
    so.log_severity_level = 4
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return onnx.load(so.optimized_model_filepath, load_external_data=False)


def rel_diff(a: dict, b: dict) -> float:
    worst = 0.0
    for k, x in a.items():
        x, y = np.asarray(x, np.float64), np.asarray(b[k], np.float64)
        worst = max(worst, float(np.max(np.abs(x - y))) / max(1.0, float(np.max(np.abs(x)))))
    return worst


def report(path: Path, target: str, tmp: Path, hardware: str = "cpu") -> dict:
    model = load_model(path)
    t0 = time.perf_counter()
    res = optimize(model, Options(target=target, hardware=hardware))
    secs = time.perf_counter() - t0
    out = tmp / (path.stem + ".eqsat.onnx")
    save_model(res.model, out)
    feeds = random_inputs(model, DIMS)
    diff = rel_diff(run(model, feeds), run(str(out), feeds, optimize=False))
    ortx = ort_extended(path, tmp)
    hist = op_histogram(res.model)
    return {
        "model": path.name,
        "before": len(model.graph.node),
        "eqsat": len(res.model.graph.node),
        "ort_extended": len(ortx.graph.node),
        "rel_diff": diff,
        "seconds": secs,
        "left": {k: hist[k] for k in LEFT_OVER if hist.get(k)},
        "fused": {k: v for k, v in hist.items() if "." in k or k in ("LayerNormalization", "RMSNormalization", "Gelu",
                                                                     "Attention")},
        "hist": dict(hist.most_common()),
        "ort_hist": dict(op_histogram(ortx).most_common()),
        "rules": res.report["saturation"]["rule_matches"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=ROOT / "benchmarks/models")
    ap.add_argument("--only", default="")
    ap.add_argument("--target", default="ort")
    ap.add_argument("--hardware", default="cpu",
                    help="hardware profile: which fusions pay (cpu, the default: no attention or SkipLayerNorm fusion)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("-v", "--verbose", action="store_true", help="print the op histograms")
    a = ap.parse_args(argv)
    paths = sorted(a.models.glob("*.onnx"))
    if a.only:
        keep = set(a.only.split(","))
        paths = [p for p in paths if p.stem in keep or p.name in keep]
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for p in paths:
            r = report(p, a.target, Path(d), a.hardware)
            rows.append(r)
            print(f"{r['model']:24s} nodes {r['before']:5d} -> eqsat {r['eqsat']:4d} (ORT extended "
                  f"{r['ort_extended']:4d}) "
                  f"diff {r['rel_diff']:.1e}  {r['seconds']:.1f}s  fused {r['fused']}  left {r['left']}", flush=True)
            if a.verbose:
                print("   eqsat:", r["hist"])
                print("   ort:  ", r["ort_hist"])
                print("   rules:", r["rules"])
    if a.out:
        lines = [
            "# Default rules on the corpus",
            "",
            f"Command: `python benchmarks/fusion_report.py --target {a.target} --hardware {a.hardware}` "
            f"({platform.machine()}, "
            f"Python {platform.python_version()}). Node counts of the graph; ORT extended = the model "
            "onnxruntime's ORT_ENABLE_EXTENDED optimizer saves. Output difference: max abs diff over "
            "max(1, max |original|), random inputs, symbolic dims bound to " + str(DIMS) + ", the result "
            "run with onnxruntime's optimizations off.",
            "",
            "| model | nodes | eqsat | ORT extended | max rel. diff | eqsat s | fused ops | left |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            fused = ", ".join(f"{k} {v}" for k, v in r["fused"].items()) or "-"
            left = ", ".join(f"{k} {v}" for k, v in r["left"].items()) or "-"
            lines.append(f"| {r['model']} | {r['before']} | {r['eqsat']} | {r['ort_extended']} | {r['rel_diff']:.1e} "
                         f"| {r['seconds']:.1f} | {fused} | {left} |")
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text("\n".join(lines) + "\n")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
