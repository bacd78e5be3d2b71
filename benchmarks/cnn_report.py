"""The CNN corpus beside onnxruntime's ORT_ENABLE_ALL saved model, development and held-out
sets reported apart: benchmarks/results/cnn.md.

    make bench-cnn        # the two steps below (BENCH_ARGS for more of peers.py's flags)
    python benchmarks/peers.py --only $(python benchmarks/cnn_report.py --names) \
        --tools eqsat,ort-all,control --settings off,all,off-mt,all-mt \
        --results benchmarks/results/peers-cnn.md --plots benchmarks/results/cnn   # measures (cached)
    python benchmarks/cnn_report.py [--out benchmarks/out] [--results benchmarks/results/cnn.md]

Reads the records peers.py cached (`OUT/<model>/<tool>.json`) for every model of the CNN
corpus (`make corpus`: torchvision_models.py, hf_vision_models.py, cnn_styles.py,
light_models.py) and writes, per set, each model's eqsat / ORT-all latency (paired, 95 %
bootstrap interval) with onnxruntime's optimizations off at 1 thread and at its default
thread count, eqsat / original and control / original with them on, and the work of input
and output (contractions; GFLOPs, of them on padding) from eqsat's report; then per set the
geometric mean of eqsat / ORT-all, how many models are at most 1.00, how many are slower
beyond their interval, and how many run slower than the original with optimizations on.
Nothing is measured here.

Sets: `development`, the models eqsat's layout rules and cost figures were tuned on
(torchvision_models.DEVELOPMENT, the exporter-style models of cnn_styles.py and the onnx
wheel's light models); `held-out`, models measured only after the changes
(torchvision_models.HELD_OUT and the transformers vision models); `outside the corpus`, with
`--others`, every other model whose records are in `--out` (peers.py --models DIR on models
never used here, as benchmarks/results/cnn-never-seen-avx2.md was written).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from torchvision_models import DEVELOPMENT, HELD_OUT  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_peers", ROOT / "benchmarks" / "peers.py")
peers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peers)

HF = ["hf_mobilevit", "hf_segformer", "hf_levit", "hf_swin"]
STYLES = ["style_mbv3", "style_effnet", "style_yolo"]
LIGHT = ["light_densenet121", "light_inception_v1", "light_inception_v2", "light_resnet50", "light_shufflenet",
         "light_squeezenet"]
SETS = {"development": [f"tv_{n}" for n in DEVELOPMENT] + STYLES + LIGHT,
        "held-out": [f"tv_{n}" for n in HELD_OUT] + HF}


def _lat(rec: dict | None, setting: str) -> dict:
    return ((rec or {}).get("latency") or {}).get(setting) or {}


def pair(by: dict, m: str, setting: str) -> tuple[float, tuple[float, float] | None] | None:
    """eqsat / ort-all in `setting`: the ratio of their medians and its paired interval."""
    e, o = by.get((m, "eqsat")), by.get((m, "ort-all"))
    le, lo = _lat(e, setting), _lat(o, setting)
    if "median_ms" not in le or "median_ms" not in lo:
        return None
    return le["median_ms"] / lo["median_ms"], peers.pair_interval(e, o, setting)


def fmt(v: tuple[float, tuple[float, float] | None] | None) -> str:
    if v is None:
        return "-"
    r, ci = v
    return f"{r:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else f"{r:.3f}"


def to_original(by: dict, m: str, tool: str, setting: str) -> tuple[float, tuple[float, float] | None] | None:
    x = _lat(by.get((m, tool)), setting)
    return (x["ratio"], tuple(x["ci95"]) if x.get("ci95") else None) if "ratio" in x else None


def work_cell(rec: dict | None) -> tuple[str, str]:
    w = ((rec or {}).get("eqsat") or {}).get("work")
    if not w:
        return "-", "-"
    i, o = w["input"], w["output"]
    pad = o.get("padding_flops", 0.0)
    return (f"{i['contractions']} -> {o['contractions']}",
            f"{i['flops'] / 1e9:.3f} -> {o['flops'] / 1e9:.3f} ({pad / 1e9:.3f})")


def geomean(xs: list[float]) -> float | None:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def report(recs: list[dict]) -> list[str]:
    by = {(r["model"], r["tool"]): r for r in recs}
    have = {r["model"] for r in recs}
    lines: list[str] = []
    summary = ["| set | models | setting | geomean eqsat / ORT-all | at most 1.00 | slower beyond the interval "
               "| slower than the original, optimizations on |", "|---|---:|---|---:|---:|---:|---:|"]
    known = {m for ms in SETS.values() for m in ms}
    sets = {**SETS, "outside the corpus": sorted(have - known)}  # models given with --out alone: never tuned on
    for name, models in sets.items():
        models = [m for m in models if m in have]
        if not models:
            continue
        lines += [f"## {name} ({len(models)} models)", "",
                  "| model | eqsat / ORT-all, off | off, default threads | eqsat / original, on | on, default "
                  "threads | control, on | contractions | GFLOP (on padding) |",
                  "|---|---:|---:|---:|---:|---:|---|---|"]
        for m in models:
            c, f = work_cell(by.get((m, "eqsat")))
            lines.append(f"| {m} | {fmt(pair(by, m, 'off'))} | {fmt(pair(by, m, 'off-mt'))} "
                         f"| {fmt(to_original(by, m, 'eqsat', 'all'))} | {fmt(to_original(by, m, 'eqsat', 'all-mt'))} "
                         f"| {fmt(to_original(by, m, 'control', 'all'))} | {c} | {f} |")
        lines.append("")
        for setting in ("off", "off-mt"):
            ps = [p for m in models if (p := pair(by, m, setting))]
            if not ps:
                continue
            on = "all" if setting == "off" else "all-mt"
            slower_on = [m for m in models if (x := to_original(by, m, "eqsat", on)) and x[1] and x[1][0] > 1.0]
            g = geomean([r for r, _ in ps])
            summary.append(f"| {name} | {len(ps)} | {setting} | {g:.3f} | {sum(r <= 1.0 for r, _ in ps)} "
                           f"| {sum(1 for _, ci in ps if ci and ci[0] > 1.0)} | {len(slower_on)}"
                           + (f" ({', '.join(slower_on)})" if slower_on else "") + " |")
    return summary + [""] + lines


def head(recs: list[dict]) -> list[str]:
    commits = sorted({str((r.get("eqsat") or {}).get("source", "?")) for r in recs if r["tool"] == "eqsat"})
    runs = sorted({lat["runs"] for r in recs for lat in (r.get("latency") or {}).values() if "runs" in lat})
    return ["# CNNs: eqsat beside onnxruntime's ORT_ENABLE_ALL saved model", "",
            "Written by `benchmarks/cnn_report.py` from the records of `benchmarks/peers.py --tools "
            "eqsat,ort-all,control --settings off,all,off-mt,all-mt` (see its docstring for the commands); "
            f"eqsat at {', '.join(commits)}.", "",
            f"Machine: {peers._machine()}.", "", f"Packages: {peers._versions()}.", "",
            "Method: peers.py's (child processes sharing the rounds, random round orders, huge pages); "
            f"{runs[0] if runs else '?'} to {runs[-1] if runs else '?'} rounds per measurement. **eqsat / ORT-all**: "
            "the median latency of eqsat's output over that of the model onnxruntime saves at ORT_ENABLE_ALL, "
            "both run with onnxruntime's optimizations off, measured in the same rounds, with a 95 % paired "
            "bootstrap interval: below 1.00, eqsat's is faster; an interval that holds 1.00 does not tell them "
            "apart. **on**: eqsat's output over the original, both run with ORT_ENABLE_ALL (what a user "
            "gets by default), the control the original against itself. **default threads**: onnxruntime's "
            "default intra-op thread count (one per physical core) instead of 1. Work from eqsat's report: "
            "contractions (convolutions, products) and GFLOPs of input and output, with the output's FLOPs on "
            "zero padding of weights in parentheses (blocked channels padded to the block).", ""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out", help="peers.py's record cache")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "cnn.md")
    ap.add_argument("--names", action="store_true", help="print the corpus's model names, comma-separated, and stop")
    ap.add_argument("--others", action="store_true",
                    help="also report every other model recorded in --out, as `outside the corpus`")
    a = ap.parse_args(argv)
    if a.names:
        print(",".join(m for ms in SETS.values() for m in ms))
        return 0
    recs = peers.load_all(a.out, None if a.others else [m for ms in SETS.values() for m in ms])
    if not recs:
        ap.error(f"no records for the CNN corpus in {a.out}: run benchmarks/peers.py first (see --help)")
    a.results.write_text("\n".join(head(recs) + report(recs)) + "\n")
    print(f"wrote {a.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
