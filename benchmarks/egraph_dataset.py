"""The e-graph dataset: every corpus model's saturated e-graph in eqsat's format and in
extraction-gym's, and optionally its measured program set, with an index (docs/egraph-dataset.md).

    python benchmarks/egraph_dataset.py [--models benchmarks/models] [--out build/egraph-dataset]
                                        [--only NAME,...] [--split corpus|held-out] [--limit K]
                                        [--programs N] [--runs R] [--timeout S] [--force]

For each DIR/NAME.onnx (`make corpus` writes them; `make egraph-dataset` runs both), each in
child processes with a time limit, a failure recorded and not fatal:
- `eqsat optimize NAME.onnx --save-egraph NAME.egraph.json --no-verify` (symbolic sizes from
  benchmarks/symdims.py, given with --dim);
- `eqsat export-egraph NAME.egraph.json --format gym -o NAME.gym.json` (roofline costs);
- with `--programs N`: `eqsat compare-costs NAME.onnx --samples N --runs R --save-programs
  NAME.programs.json` (slow: minutes a model).
A model whose files exist is kept unless `--force`, so an interrupted run resumes. OUT/index.json
lists every model (entries of models outside a partial run, `--only`, `--split` or `--limit`, are
kept from the index already there): its split (`held-out`: issue 10's held-out CNNs, benchmarks/cnn_report.SETS;
`corpus`: the rest), the sizes used, the script that generated it, its files with their sha256, the e-class and
e-node counts of both e-graph files, node counts before and after, and the eqsat commit and versions it was made with.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from symdims import dims_for  # noqa: E402
from torchvision_models import HELD_OUT  # noqa: E402

HF_HELD_OUT = ["hf_mobilevit", "hf_segformer", "hf_levit", "hf_swin"]  # as benchmarks/cnn_report.SETS
HELD = {f"tv_{n}" for n in HELD_OUT} | set(HF_HELD_OUT)
FORMAT = 1


def split_of(name: str) -> str:
    return "held-out" if name in HELD else "corpus"


def generator_of(name: str) -> str:
    """The `make corpus` command that writes the model NAME.onnx (all with random weights)."""
    for prefix, script in (("tv_", "torchvision_models.py"), ("hf_", "hf_vision_models.py"),
                           ("light_", "light_models.py"), ("style_", "cnn_styles.py")):
        if name.startswith(prefix):
            return f"benchmarks/{script}"
    return "benchmarks/corpus.py --dynamo" if name.endswith(".dynamo") else "benchmarks/corpus.py"


def counts(nodes: dict) -> dict:
    """E-node and e-class counts of an egraph-serialize `nodes` map."""
    return {"e_nodes": len(nodes), "e_classes": len({n["eclass"] for n in nodes.values()})}


def eqsat(args: list, timeout: float) -> tuple[int, str]:
    try:
        r = subprocess.run([sys.executable, "-m", "eqsat.cli.main", *map(str, args)], capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:g} s"
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    return r.returncode, (lines[-1] if lines else "")


def sha256(p: Path) -> str:
    h = hashlib.sha256()
    with p.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build_one(src: Path, out: Path, a: argparse.Namespace, old: dict | None, commit: str | None) -> dict:
    """Write one model's files (kept where they exist, unless --force); its index entry. `old`:
    the model's entry in the index already there, whose time and commit are kept when nothing is
    rebuilt; `commit`: the eqsat commit this run is made with."""
    import onnx

    name = src.stem
    files = {"egraph": out / f"{name}.egraph.json", "gym": out / f"{name}.gym.json",
             "report": out / f"{name}.report.json"}
    if a.programs:
        files["programs"] = out / f"{name}.programs.json"
    dims = dims_for(onnx.load(str(src), load_external_data=False))
    dim_args = [x for k, v in sorted(dims.items()) for x in ("--dim", f"{k}={v}")]
    entry = {"name": name, "split": split_of(name), "source": str(src.name), "generator": generator_of(name),
             "dims": dims, "status": "ok"}
    t0 = time.perf_counter()
    steps = [("egraph", ["optimize", src, "-o", out / f"{name}.opt.onnx", "--save-egraph", files["egraph"],
                         "--report", files["report"], "--no-verify", "-q", *dim_args]),
             ("gym", ["export-egraph", files["egraph"], "--format", "gym", "-o", files["gym"]])]
    if a.programs:
        steps.append(("programs", ["compare-costs", src, "--samples", a.programs, "--runs", a.runs, "--seed", 0,
                                   "-q", "--save-programs", files["programs"], *dim_args]))
    ran = False
    for key, args in steps:
        if files[key].exists() and not a.force and not ran:  # a rebuilt e-graph rebuilds what follows it
            continue
        ran = True
        rc, why = eqsat(args, a.timeout)
        if rc != 0:
            entry.update(status="failed", failed_step=key, error=why)
            break
    (out / f"{name}.opt.onnx").unlink(missing_ok=True)  # the optimized model is not part of the dataset
    entry["seconds"] = round(time.perf_counter() - t0, 1)
    if not ran:
        # the time it took and the commit it was made with when it was built (None: unknown)
        entry.update(skipped=True, seconds=(old or {}).get("seconds"), eqsat_commit=(old or {}).get("eqsat_commit"))
    else:
        entry["eqsat_commit"] = commit
    entry["files"] = {k: {"path": p.name, "sha256": sha256(p)} for k, p in files.items() if p.exists()}
    if files["egraph"].exists():
        eg = json.loads(files["egraph"].read_text())
        subsumed = sum(bool(n.get("subsumed")) for n in eg["nodes"].values())
        entry["egraph"] = {**counts(eg["nodes"]), "subsumed": subsumed, "roots": len(eg.get("root_eclasses", []))}
    if files["gym"].exists():
        gym = json.loads(files["gym"].read_text())
        entry["gym"] = {**counts(gym["nodes"]), "roots": len(gym.get("root_eclasses", []))}
    if files["report"].exists():
        rep = json.loads(files["report"].read_text())
        entry["nodes"] = {"before": rep.get("nodes_before"), "after": rep.get("nodes_after")}
    return entry


def provenance() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    def ver(pkg: str) -> str | None:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return None

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    return {"eqsat_commit": commit.strip() or None,
            **{p: ver(p) for p in ("eqsat", "egglog", "onnx", "onnxruntime")}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=ROOT / "benchmarks" / "models")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "egraph-dataset")
    ap.add_argument("--only", default="", help="comma-separated model names (file stems)")
    ap.add_argument("--split", choices=["corpus", "held-out"], help="only the models of this split")
    ap.add_argument("--limit", type=int, default=0, help="at most this many models (0: all)")
    ap.add_argument("--programs", type=int, default=0, help="measure this many programs a model (0: none)")
    ap.add_argument("--runs", type=int, default=30, help="timed runs a program, with --programs")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds a step may take")
    ap.add_argument("--force", action="store_true", help="rebuild files that exist")
    a = ap.parse_args(argv)
    srcs = sorted(p for p in a.models.glob("*.onnx") if not p.name.endswith(".opt.onnx"))
    if a.only:
        want = set(a.only.split(","))
        srcs = [p for p in srcs if p.stem in want]
        if missing := want - {p.stem for p in srcs}:
            raise SystemExit(f"no {', '.join(sorted(missing))} in {a.models} (make corpus writes the models)")
    if a.split:
        srcs = [p for p in srcs if split_of(p.stem) == a.split]
    if a.limit:
        srcs = srcs[:a.limit]
    if not srcs:
        raise SystemExit(f"no models in {a.models}: `make corpus` writes them")
    a.out.mkdir(parents=True, exist_ok=True)
    index_path = a.out / "index.json"
    old = {e["name"]: e for e in (json.loads(index_path.read_text())["models"] if index_path.exists() else [])}
    made_with = provenance()
    entries = []
    for i, src in enumerate(srcs, 1):
        e = build_one(src, a.out, a, old.get(src.stem), made_with["eqsat_commit"])
        entries.append(e)
        done = "kept" if e.get("skipped") else f"in {e['seconds']} s"
        print(f"[{i}/{len(srcs)}] {e['name']} ({e['split']}): {e['status']} {done}"
              + (f" ({e['failed_step']}: {e['error']})" if e["status"] != "ok" else ""), file=sys.stderr, flush=True)
    # A partial run keeps the entries of the other models whose files are still there.
    ran = {e["name"] for e in entries}
    kept = [e for n, e in old.items()
            if n not in ran and all((a.out / f["path"]).exists() for f in e.get("files", {}).values())]
    models = sorted(entries + kept, key=lambda e: e["name"])
    index = {"format": FORMAT, "what": "eqsat e-graph dataset", "made_with": made_with, "models": models}
    index_path.write_text(json.dumps(index, indent=1) + "\n")
    ok = sum(e["status"] == "ok" for e in entries)
    print(f"{ok} of {len(entries)} models written to {a.out} "
          f"({sum(e['split'] == 'held-out' for e in entries)} held out); the index lists {len(models)}",
          file=sys.stderr)
    return 0 if ok == len(entries) else 1


if __name__ == "__main__":
    sys.exit(main())
