"""The learned cost model, trained on some models' measured programs and scored on models
held out of training, beside the roofline on the same programs.

    python benchmarks/learned_cost.py --models DIR [--out DIR] [--samples 40] [--runs 30]
                                      [--repeats 4] [--train a,b,...] [--held-out c,d,...]

For every model DIR/tv_NAME.onnx of both lists (benchmarks/torchvision_models.py writes them):
`eqsat compare-costs --save-programs` (skipped where OUT/NAME.json exists), then `eqsat
calibrate --learn` on the training sets with the held-out sets scored, then, per held-out
model, `compare-costs --programs SET --no-time --cost-model roofline --cost-model learned
--cost-model node-count --cost-model measured` against the stored timings. Prints a markdown
table: per held-out model, programs, each model's Kendall tau over all programs, its tau
among the programs within 10 % of the fastest measured (where the ranking decides what is
picked), and its top-1 regret, beside the set's repeat ceiling (compare-costs --repeats: how
well the measurement's own halves order the near-best programs); then the medians and means
over the held-out models.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from torchvision_models import DEVELOPMENT, HELD_OUT

TRAIN = ["squeezenet1_1", "mobilenet_v3_small", "shufflenet_v2_x1_0", "mnasnet1_0", "regnet_y_400mf",
         "mobilenet_v2"]
HELD = ["mnasnet0_5", "shufflenet_v2_x0_5", "resnet18", "squeezenet1_0", "regnet_x_400mf", "mnasnet0_75",
        "shufflenet_v2_x1_5", "mnasnet1_3", "regnet_x_800mf", "regnet_y_800mf", "resnet34"]
MODELS = ("roofline", "learned", "node-count", "measured")


def eqsat(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eqsat.cli.main", *map(str, args)], capture_output=True, text=True)


def measure(models: Path, out: Path, name: str, samples: int, runs: int, repeats: int) -> Path:
    dest = out / f"{name}.json"
    if not dest.exists():
        r = eqsat("compare-costs", models / f"tv_{name}.onnx", "--samples", samples, "--runs", runs, "--repeats",
                  repeats, "--seed", 1, "-q", "--save-programs", dest)
        if r.returncode:
            raise SystemExit(f"{name}: compare-costs failed: {r.stderr.strip()}")
        print(f"measured {name}", file=sys.stderr)
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path("build/learned-cost"))
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--train", default=",".join(TRAIN))
    ap.add_argument("--held-out", default=",".join(HELD))
    a = ap.parse_args()
    train, held = a.train.split(","), a.held_out.split(",")
    if leak := set(train) & set(held):
        raise SystemExit(f"a model both trained on and held out: {sorted(leak)}")
    if tuned := [m for m in held if m in DEVELOPMENT and m not in HELD_OUT]:
        print(f"note: {tuned} are development models (issue 10's tuning set), not held out there", file=sys.stderr)
    a.out.mkdir(parents=True, exist_ok=True)
    sets = {m: measure(a.models, a.out, m, a.samples, a.runs, a.repeats) for m in train + held}
    prof = a.out / "learned.json"
    r = eqsat("calibrate", "--learn", *(sets[m] for m in train), "--hold-out", *(sets[m] for m in held), "-o", prof)
    if r.returncode:
        raise SystemExit(f"calibrate --learn failed: {r.stderr.strip()}")
    print(r.stdout, file=sys.stderr)
    cols = " | ".join(f"{m} tau | {m} tau near | {m} top-1 regret" for m in MODELS)
    print(f"| held-out model | programs | near | repeat ceiling tau near | {cols} |")
    print("|---|---:|---:|---:|" + "---:|" * (3 * len(MODELS)))
    per: dict[str, list[tuple]] = {m: [] for m in MODELS}
    ceilings = []
    for m in held:
        js = a.out / f"{m}.score.json"
        r = eqsat("compare-costs", a.models / f"tv_{m}.onnx", "--programs", sets[m], "--no-time", "--hardware", prof,
                  *(x for n in MODELS for x in ("--cost-model", n)), "-q", "--json", js)
        if r.returncode:
            raise SystemExit(f"{m}: scoring failed: {r.stderr.strip()}")
        data = json.loads(js.read_text())
        rows = {row["cost_model"]: row for row in data["cost_models"]}
        progs = data["programs"]
        near = rows[MODELS[0]]["near_programs"]  # compare-costs' tau near: within 10 % of the fastest
        cells = []
        for x in MODELS:
            tn = rows[x].get("kendall_tau_near")
            per[x].append((rows[x].get("kendall_tau"), tn, rows[x].get("top1_regret")))
            cells.append(f"{_f(rows[x].get('kendall_tau'))} | {_f(tn)} | {_pct(rows[x].get('top1_regret'))}")
        noise = json.loads(sets[m].read_text()).get("noise_floor") or {}
        ceiling = (noise.get("repeat_ceiling") or {}).get("tau_near")
        ceilings.append(ceiling)
        print(f"| {m} | {len(progs)} | {near} | {_f(ceiling)} | {' | '.join(cells)} |")
    for label, agg in (("median", statistics.median), ("mean", statistics.fmean)):
        cells = []
        for x in MODELS:
            cols = list(zip(*per[x], strict=True))
            cells.append(" | ".join(_f(agg([v for v in c if v is not None])) if k < 2
                                    else _pct(agg([v for v in c if v is not None])) for k, c in enumerate(cols)))
        known = [c for c in ceilings if c is not None]
        print(f"| {label} | | | {_f(agg(known)) if known else 'n/a'} | {' | '.join(cells)} |")


def _f(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


if __name__ == "__main__":
    main()
