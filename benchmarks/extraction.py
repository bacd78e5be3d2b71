"""Every extractor on every saved e-graph of the corpus: DAG cost, tree cost and time.

    python benchmarks/extraction.py [--models DIR] [--egraphs DIR] [--only NAME,...]
                                    [--cost-model node-count] [--hardware cpu]
                                    [--out benchmarks/results/extraction.md]

Saturates each corpus model with the default rules once and saves its e-graph
(`--egraphs`, default benchmarks/egraphs/NAME.json, reused when present), then runs each
extractor of extract/ on the saved file alone, with the cost model and hardware profile that
`eqsat optimize` uses by default (`cpu`: the shipped profile for this machine's NCHWc block).
The ILP's line says whether it proved optimality within its time limit.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eqsat.extract import EXTRACTORS, EGraph, check, get_extractor  # noqa: E402
from eqsat.extract.check import dag_cost, tree_cost  # noqa: E402
from eqsat.extract.costs import make_cost_model  # noqa: E402


def save_egraph(model_path: Path, out: Path) -> None:
    from eqsat.core.pipeline import Options, saturate
    from eqsat.io.modelio import load_model

    saturate(load_model(model_path), Options(save_egraph=out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=ROOT / "benchmarks/models")
    ap.add_argument("--egraphs", type=Path, default=ROOT / "benchmarks/egraphs")
    ap.add_argument("--only", default="")
    ap.add_argument("--cost-model", default="node-count")
    ap.add_argument("--hardware", default="cpu", help="hardware profile, as eqsat optimize's --hardware")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    a.egraphs.mkdir(parents=True, exist_ok=True)
    keep = set(filter(None, a.only.split(",")))
    from eqsat.backends.ort.target import hardware_profile

    hardware = hardware_profile(a.hardware)
    rows = []
    for p in sorted(a.models.glob("*.onnx")):
        if keep and p.stem not in keep:
            continue
        ej = a.egraphs / f"{p.stem}.json"
        if not ej.is_file():
            save_egraph(p, ej)
        g = EGraph.from_json(ej)
        cost = make_cost_model(a.cost_model, hardware)
        costs = cost.costs(g)
        for name in EXTRACTORS:
            t0 = time.perf_counter()
            ex = get_extractor(name, a.time_limit).extract(g, cost)
            secs = time.perf_counter() - t0
            check(g, ex.choice)
            dag, tree = dag_cost(g, ex.choice, costs), tree_cost(g, ex.choice, costs)  # not the extractor's word
            if abs(dag - ex.dag_cost) > 1e-9 * max(1.0, dag):
                print(f"{p.stem}: {name} reports DAG cost {ex.dag_cost}, its choice costs {dag}", file=sys.stderr)
                return 1
            rows.append((p.stem, len(g.nodes), len(g.classes), name, dag, tree, secs, "; ".join(ex.notes)))
            print(f"{p.stem:24s} {len(g.nodes):6d} e-nodes {name:12s} DAG cost {dag:10.3f}  tree {tree:.4g}  "
                  f"{secs:7.3f} s  {'; '.join(ex.notes)}", flush=True)
    if not rows:
        print(f"no models in {a.models}{' named ' + a.only if keep else ''} (`make corpus` builds them)",
              file=sys.stderr)
        return 2
    if a.out:
        lines = [
            "# Extractors on the corpus e-graphs",
            "",
            f"Command: `python benchmarks/extraction.py --cost-model {a.cost_model} --hardware {a.hardware}` "
            f"(profile {hardware}; {platform.machine()}, "
            f"Python {platform.python_version()}); ILP time limit {a.time_limit:g} s. E-graphs saturated with the "
            "default rules; each extractor runs on the saved JSON alone; every result passes the checker, and its "
            "costs are recomputed from its choice (DAG: each chosen node once; tree: once per use).",
            "",
            "| model | e-nodes | e-classes | extractor | DAG cost | tree cost | seconds | notes |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for m, n, c, name, dag, tree, secs, notes in rows:
            lines.append(f"| {m} | {n} | {c} | {name} | {dag:.3f} | {tree:.4g} | {secs:.3f} | {notes or '-'} |")
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
