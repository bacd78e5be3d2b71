"""The ILP choosing layouts with everything else, against the ILP with layouts fixed from the
greedy answer, on saved e-graphs (`make egraph-dataset` writes them):

    python benchmarks/layout_ilp.py build/egraph-dataset/*.egraph.json [--time-limit 60]
        [--split build/egraph-dataset/index.json]

Per e-graph that holds both layouts: each solve's time, status and roofline DAG cost
(microseconds, at the e-graph's own profile and sizes), the joint answer's cost over the
fixed one's, and the joint program's proven gap. E-graphs without blocked ops are skipped
(there both are the same solve). Prints a markdown table, held-out models marked where an
index.json gives the split.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eqsat.cli.extract import load_egraph  # noqa: E402
from eqsat.core.pipeline import Options, cost_model  # noqa: E402
from eqsat.extract.ilp import ILP  # noqa: E402
from eqsat.extract.nchwc import NCHWC_OPS  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("egraphs", nargs="+", type=Path)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--split", type=Path, help="the dataset's index.json, for each model's split")
    a = ap.parse_args()
    split = {}
    if a.split:
        split = {m["name"]: m.get("split", "") for m in json.loads(a.split.read_text())["models"]}
    print("| model | split | e-nodes | fixed s | fixed cost | joint s | joint status | joint cost / fixed | gap |")
    print("|---|---|---:|---:|---:|---:|---|---:|---:|")
    ratios, times = [], []
    for path in a.egraphs:
        g = load_egraph(path)
        if not any(n.op in NCHWC_OPS for n in g.nodes.values()):
            continue
        s = g.meta.get("settings", {})
        opts = Options(hardware=s.get("hardware", "cpu"), dims=s.get("dims", {}), cost_model="roofline")
        cost = cost_model(dataclasses.replace(opts))
        t = time.perf_counter()
        fixed = ILP(a.time_limit, fix_layouts=True).extract(g, cost)
        tf = time.perf_counter() - t
        t = time.perf_counter()
        joint = ILP(a.time_limit).extract(g, cost)
        tj = time.perf_counter() - t
        name = path.name.removesuffix(".egraph.json")
        ratio = joint.dag_cost / fixed.dag_cost
        ratios.append(ratio)
        times.append(tj)
        gap = "" if joint.gap is None else f"{100 * joint.gap:.2f} %"
        print(f"| {name} | {split.get(name, '')} | {len(g.nodes)} | {tf:.1f} | {fixed.dag_cost:.1f} | {tj:.1f} | "
              f"{joint.status} | {ratio:.4f} | {gap} |", flush=True)
    if ratios:
        print(f"\n{len(ratios)} e-graphs; joint cost / fixed: median {statistics.median(ratios):.4f}, "
              f"min {min(ratios):.4f}; joint time: median {statistics.median(times):.1f} s, max {max(times):.1f} s")


if __name__ == "__main__":
    main()
