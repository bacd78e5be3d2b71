"""Round trip of the corpus through the e-graph with no rules: outputs must be identical.

    python benchmarks/roundtrip.py [--models DIR] [--out benchmarks/results/roundtrip.md]

For each `*.onnx` in DIR (built by benchmarks/corpus.py), runs eqsat with
`--no-default-rules`, checks the result with the onnx checker, and compares the outputs with
the original's under onnxruntime on the same random inputs (symbolic dims: batch 1,
sequence 32), exactly. Writes a markdown table with node counts and the time of each phase.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eqsat.core.pipeline import Options, optimize  # noqa: E402
from eqsat.io.modelio import load_model  # noqa: E402
from eqsat.verification import compare, onnx_checker_ok, random_inputs, run  # noqa: E402

DIMS = {"batch": 1, "batch_size": 1, "sequence": 32, "sequence_length": 32}
PHASES = ("shape_inference", "encode", "saturate", "serialize", "extract", "decode")


def roundtrip(path: Path) -> dict:
    model = load_model(path)
    t0 = time.perf_counter()
    res = optimize(model, Options(default_rules=False))
    total = time.perf_counter() - t0
    feeds = random_inputs(model, DIMS)
    problem = onnx_checker_ok(res.model)
    if problem is None:
        diffs = compare(run(model, feeds), run(res.model, feeds))
        problem = "; ".join(map(str, diffs[:2])) if diffs else None
    r = res.report
    return {
        "model": path.name,
        "status": "identical" if problem is None else f"FAILED: {problem}",
        "nodes": f"{r['nodes_before']} -> {r['nodes_after']}",
        "opaque": sum(r["opaque"].values()),
        "enodes": r["saturation"]["enodes"],
        "total_s": total,
        **{p: r["times_s"].get(p, 0.0) for p in PHASES},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=ROOT / "benchmarks/models")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/roundtrip.md")
    a = ap.parse_args(argv)
    paths = sorted(a.models.glob("*.onnx"))
    if not paths:
        print(f"no models in {a.models}; build them with: python benchmarks/corpus.py (and --dynamo)", file=sys.stderr)
        return 2
    rows = []
    for p in paths:
        row = roundtrip(p)
        rows.append(row)
        print(f"{row['model']:24s} {row['status']:10s} {row['nodes']:>14s}  {row['total_s']:.2f} s", flush=True)
    head = ["model", "outputs", "nodes (Constant nodes become initializers)", "opaque", "e-nodes", "total s",
            *[f"{p} s" for p in PHASES]]
    lines = [
        "# Round trip of the corpus (no rules)",
        "",
        f"Command: `python benchmarks/roundtrip.py` on {platform.machine()}, Python {platform.python_version()}, "
        f"{_versions()}. Inputs: random, symbolic dims bound to {DIMS}; outputs compared exactly under "
        "onnxruntime (CPU, one thread).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in rows:
        vals = [r["model"], r["status"], r["nodes"], str(r["opaque"]), str(r["enodes"]), f"{r['total_s']:.2f}",
                *[f"{r[p]:.3f}" for p in PHASES]]
        lines.append("| " + " | ".join(vals) + " |")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {a.out}")
    return 0 if all(r["status"] == "identical" for r in rows) else 1


def _versions() -> str:
    import importlib.metadata as md

    return ", ".join(f"{p} {md.version(p)}" for p in ("egglog", "onnx", "onnxruntime"))


if __name__ == "__main__":
    sys.exit(main())
