"""extraction-gym interchange, both directions.

    python benchmarks/gym_interchange.py export MODEL.onnx... [--cost-model roofline] [--work DIR]
    python benchmarks/gym_interchange.py tensat GYM.json... [--extract-time-limit 60]

`export`: each model is optimized with `--save-egraph` (verification off: only the e-graph is
wanted), exported with `eqsat export-egraph --format gym`, and the export is extracted with
the ported bottom-up and greedy-dag of extraction-gym (extract/gym_port.py; gym's Rust
cannot be built without crates.io) and with eqsat's ILP (`eqsat extract` on the export,
its costs the file's). Each choice goes through gym's ported `result.check` and eqsat's
checker. Prints one row per model: e-classes and nodes of the export, each extractor's DAG
cost (gym's dag_cost), and whether every check passed.

`tensat`: `eqsat extract` on gym's own files (Tensat's e-graphs: data/tensat/*.json of
extraction-gym, given by path; nothing is downloaded), priced by their `cost`s (file-costs),
with the ILP under --extract-time-limit: its status (optimal: proven; optimal for its fixed
layouts: proven once the NCHWc layouts were fixed from the greedy answer; gap: stopped at the
time limit with a solution of its own, not proven; fallback: the greedy answer was used, the
note says why), DAG cost, proven lower bound and gap, and time, beside the ported bottom-up's
and greedy-dag's DAG costs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eqsat.extract import EGraph, check  # noqa: E402
from eqsat.extract import gym_port as gp  # noqa: E402
from eqsat.extract.costs import FileCosts  # noqa: E402


def ported(data: dict) -> tuple[dict[str, float], bool]:
    """Each ported gym extractor's DAG cost, and whether its choice passed gym's check."""
    g = gp.GymEGraph(data)
    out, ok = {}, True
    for name, run in gp.EXTRACTORS.items():
        choice = run(g)
        try:
            gp.check(g, choice)
            out[name] = gp.dag_cost(g, choice)
        except gp.GymError as e:
            print(f"  {name}: gym's check failed: {e}", file=sys.stderr)
            out[name], ok = float("nan"), False
    return out, ok


def ilp(path: Path, time_limit: float) -> tuple[str, float, float, str]:
    """eqsat's ILP on a gym file: (status, DAG cost, seconds, notes), its choice checked."""
    from eqsat.core.pipeline import run_extractor

    g = EGraph.from_json(path)
    t0 = time.perf_counter()
    ex = run_extractor(g, "ilp", FileCosts(), time_limit)  # checked by eqsat's checker inside
    seconds = time.perf_counter() - t0
    check(g, ex.choice)
    notes = "; ".join(ex.notes)
    # extract/ilp.py's notes: "greedy answer used" / "greedy answer was better" when it fell back
    fell_back = "greedy answer used" in notes or "greedy answer was better" in notes
    status = ex.status or ("fallback" if fell_back else "limit" if "stopped at the time limit" in notes else "optimal")
    if status == "optimal" and "optimal for the fixed layouts" in notes:
        status = "optimal for its fixed layouts"
    bound = "" if ex.lower_bound is None else f"{ex.lower_bound:.6g} | {ex.gap:.2%}"
    return status, ex.dag_cost, seconds, notes + (f" [bound: {bound}]" if bound else "")


def export_rows(models: list[Path], cost_model: str, work: Path, time_limit: float) -> int:
    from eqsat.cli.main import main

    print(f"| model | e-classes | nodes | bottom-up DAG | greedy-dag DAG | eqsat ILP DAG | check passed |  "
          f"(costs: {cost_model})")
    print("|---|---:|---:|---:|---:|---:|---|")
    failed = 0
    for m in models:
        saved, gym = work / f"{m.stem}.egraph.json", work / f"{m.stem}.gym.json"
        rc = main(["optimize", str(m), "-o", str(work / f"{m.stem}.opt.onnx"), "--save-egraph", str(saved), "-q",
                   "--no-verify"])
        with contextlib.redirect_stdout(io.StringIO()):  # its one line would break the table
            rc = rc or main(["export-egraph", str(saved), "--format", "gym", "--cost-model", cost_model,
                             "-o", str(gym)])
        if rc:
            print(f"| {m.name} | failed (exit {rc}) | | | | | no |")
            failed += 1
            continue
        data = json.loads(gym.read_text())
        costs, ok = ported(data)
        status, dag, _, _ = ilp(gym, time_limit)
        classes = len({n["eclass"] for n in data["nodes"].values()})
        print(f"| {m.name} | {classes} | {len(data['nodes'])} | {costs['bottom-up']:.6g} | "
              f"{costs['greedy-dag']:.6g} | {dag:.6g}{'' if status == 'optimal' else ' (' + status + ')'} | "
              f"{'yes' if ok else 'NO'} |")
        failed += not ok
    return 1 if failed else 0


def tensat_rows(files: list[Path], time_limit: float) -> int:
    print(f"| e-graph | e-classes | nodes | ILP status | ILP DAG | lower bound | gap | ILP time (s) | bottom-up DAG | "
          f"greedy-dag DAG |  (ILP limit {time_limit:g} s)")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for f in files:
        data = json.loads(f.read_text())
        classes = len({n["eclass"] for n in data["nodes"].values()})
        costs, _ = ported(data)
        try:
            status, dag, seconds, notes = ilp(f, time_limit)
        except Exception as e:  # noqa: BLE001 - reported, the other files still run
            status, dag, seconds, notes = f"error: {type(e).__name__}", float("nan"), float("nan"), str(e)
        bound = notes.rsplit(" [bound: ", 1)[1].rstrip("]") if " [bound: " in notes else "- | -"
        print(f"| {f.name} | {classes} | {len(data['nodes'])} | {status} | {dag:.6g} | {bound} | {seconds:.1f} | "
              f"{costs['bottom-up']:.6g} | {costs['greedy-dag']:.6g} |")
        if notes:
            print(f"  {f.name}: {notes}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    e = sub.add_parser("export", help="eqsat's e-graphs of these models, through gym's ported checker")
    e.add_argument("models", nargs="+", type=Path, metavar="MODEL.onnx")
    e.add_argument("--cost-model", default="roofline")
    e.add_argument("--work", type=Path, help="where the e-graphs go (default: a temporary folder)")
    e.add_argument("--extract-time-limit", type=float, default=60.0)
    t = sub.add_parser("tensat", help="eqsat extract on gym's files (Tensat's e-graphs)")
    t.add_argument("files", nargs="+", type=Path, metavar="GYM.json")
    t.add_argument("--extract-time-limit", type=float, default=60.0)
    a = ap.parse_args(argv)
    if a.mode == "tensat":
        return tensat_rows(a.files, a.extract_time_limit)
    if a.work:
        a.work.mkdir(parents=True, exist_ok=True)
        return export_rows(a.models, a.cost_model, a.work, a.extract_time_limit)
    with tempfile.TemporaryDirectory() as tmp:
        return export_rows(a.models, a.cost_model, Path(tmp), a.extract_time_limit)


if __name__ == "__main__":
    sys.exit(main())
