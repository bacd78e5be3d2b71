"""Issue 30's decoder check: eqsat beside onnxruntime's transformers optimizer and ORT_ENABLE_ALL
on decoders with a KV cache, at a prefill and at one step.

    python benchmarks/decoders.py [--models gpt2-kv,llama-4l-kv,...] [--runs 15] [--children 3]
                                  [--settings off,all] [--models-dir benchmarks/models]
                                  [--variant NAME='EQSAT ARGS' ...] [--no-timing] [--report-only]
                                  [--out benchmarks/out/decoders] [--results benchmarks/results/decoders.md]

    # -> benchmarks/results/decoders.md:
    python benchmarks/decoders.py --runs 32 --children 4 --variant 'eqsat-h200=--hardware h200' \
        --results benchmarks/results/decoders.md

For each decoder (corpus.py's `*-kv` exports: inputs input_ids [batch, new_tokens],
attention_mask [batch, total_sequence], past.N.key / past.N.value [batch, kv_heads,
past_sequence, head]):

- **eqsat**: `eqsat optimize MODEL -o OUT --report R` with its defaults (it verifies; its
  verification line is kept).
- **transformers optimizer**: `onnxruntime.transformers.optimizer.optimize_model(MODEL,
  model_type, num_heads, hidden_size, opt_level=--tf-opt-level)`, saved with
  `save_model_to_file`. model_type: `gpt2` for GPT-2; for the Llama-style model, `qwen3`
  (onnxruntime 1.32's only Llama-like type: Gpt2OnnxModel with rotary, GQA and RMSNorm
  fusions; `gpt2` maps to the same class). opt_level 1 for both (gpt2's default; qwen3's
  default 0 leaves the Shape/Gather chains unfolded). `qwen3` for the Qwen2- and Phi-3-style
  models too, `gpt2` for the Phi-2-style one (LayerNorm, gelu): onnxruntime 1.32's `phi` type
  (PhiOnnxModel) is written for the dynamo export's function nodes and fails on these
  TorchScript exports (TypeError: 'method' object is not iterable); on them `gpt2` and `qwen3`
  give the same graph.
- **ort-all**: the model onnxruntime saves at ORT_ENABLE_ALL (`optimized_model_filepath`).

Then it counts the fused ops in each output against the number of layers (past.N.key
inputs), checks each output against the original at both shapes
(`eqsat.verification.verify` with the shape's sizes) and times all three with the original
at two shapes (benchmarks/ab.py's `measure`: child processes sharing interleaved rounds):
**prefill** past_sequence=0, new_tokens=128 (total 128) and **step** past_sequence=128,
new_tokens=1 (total 129), batch 1, with onnxruntime's optimizations off and all. Prints
Markdown (and writes it to --results); the records go to --out/records.json, and
`--report-only` rewrites the Markdown from them. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_spec = importlib.util.spec_from_file_location("bench_ab", ROOT / "benchmarks" / "ab.py")
ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ab)
peers = ab.peers

# model -> (transformers optimizer model_type, num_heads, hidden_size), from corpus.py's configs
TF_TYPES = {"gpt2-kv": ("gpt2", 12, 768), "llama-4l-kv": ("qwen3", 8, 512), "qwen2-4l-kv": ("qwen3", 8, 512),
            "phi3-4l-kv": ("qwen3", 8, 512), "phi2-4l-kv": ("gpt2", 8, 512)}
SHAPES = {"prefill": {"batch": 1, "past_sequence": 0, "new_tokens": 128},
          "step": {"batch": 1, "past_sequence": 128, "new_tokens": 1}}
TOOLS = ("tf-opt", "eqsat", "ort-all")  # tf-opt first: ab.measure pairs the others with it
# fused ops worth counting: (label, op types)
FUSED = (("attention", ("Attention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention")),
         ("rotary", ("RotaryEmbedding",)),
         ("skip-LN", ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization")),
         ("LN", ("LayerNormalization", "SimplifiedLayerNormalization")),
         ("FusedMatMul", ("FusedMatMul",)),
         ("gelu/silu", ("FastGelu", "BiasGelu", "Gelu", "QuickGelu", "BiasFastGelu")),
         ("Gemm", ("Gemm",)))


def eqsat_commit() -> str:
    """The last commit that changed the eqsat/, rules/ or extract/ that `python -m eqsat` runs
    (an editable install may map it to another checkout than this file's), with `+ changes`
    where they have uncommitted changes."""
    import eqsat

    d = Path(eqsat.__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(d), "log", "-1", "--format=%h", "--", "eqsat", "rules", "extract"],
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(d), "status", "--porcelain", "--", "eqsat", "rules", "extract"],
                               capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"
    return (head or "?") + (" + changes" if dirty else "")


def layers(model) -> int:
    return sum(1 for i in model.graph.input if re.fullmatch(r"past\.\d+\.key", i.name))


def fused_counts(path: Path) -> dict:
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    ops = Counter(n.op_type for n in m.graph.node)
    return {"nodes": len(m.graph.node), "fused": {lab: sum(ops[t] for t in types) for lab, types in FUSED},
            "ops": dict(ops.most_common())}


def run_eqsat(src: Path, dst: Path, extra: list[str] | None = None) -> dict:
    rep = dst.with_suffix(".report.json")
    cmd = [sys.executable, "-m", "eqsat", "optimize", str(src), "-o", str(dst), "--report", str(rep), *(extra or [])]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    line = next((ln for ln in p.stderr.splitlines() if "verification" in ln), "")
    return {"ok": p.returncode == 0, "opt_s": time.perf_counter() - t0, "rc": p.returncode,
            "verification_line": re.sub(r"^eqsat: \[\s*[\d.]+s\] ", "", line).strip(),
            "error": "" if p.returncode == 0 else p.stderr[-2000:], "args": extra or []}


def run_tf(src: Path, dst: Path, model_type: str, heads: int, hidden: int, opt_level: int) -> dict:
    from onnxruntime.transformers.optimizer import optimize_model

    t0 = time.perf_counter()
    m = optimize_model(str(src), model_type=model_type, num_heads=heads, hidden_size=hidden, opt_level=opt_level)
    m.save_model_to_file(str(dst))
    return {"ok": True, "opt_s": time.perf_counter() - t0,
            "call": f"optimize_model(model_type={model_type!r}, num_heads={heads}, hidden_size={hidden}, "
                    f"opt_level={opt_level})"}


def verify_at(src: Path, dst: Path, dims: dict[str, int]) -> dict:
    import onnx

    from benchmarks.symdims import kv_total
    from eqsat.verification import verify

    bound = kv_total({**dims, "total_sequence": 0}, set(dims))  # total = past + new tokens
    v = verify(onnx.load(str(src)), onnx.load(str(dst)), dims=bound, files=(src, dst))
    return {"status": v.status, "detail": v.detail[:400], "edge_cases": v.edge_cases[:400], "dims": bound}


def optimize_all(model: str, src: Path, work: Path, a) -> dict:
    import onnx

    rec: dict = {"model": model}
    orig = onnx.load(str(src), load_external_data=False)
    rec["layers"] = layers(orig)
    rec["original"] = fused_counts(src)
    outs = {t: work / f"{model}.{t}.onnx" for t in (*TOOLS, *a.variant)}
    tools: dict = {}
    if not outs["eqsat"].exists() or a.force:
        tools["eqsat"] = run_eqsat(src, outs["eqsat"])
    else:
        tools["eqsat"] = json.loads((work / f"{model}.eqsat.rec.json").read_text())
    mt, heads, hidden = TF_TYPES[model]
    tools["tf-opt"] = run_tf(src, outs["tf-opt"], mt, heads, hidden, a.tf_opt_level) \
        if not outs["tf-opt"].exists() or a.force else {"ok": True, "call": f"model_type={mt!r} (cached)"}
    if not outs["ort-all"].exists() or a.force:
        tools["ort-all"] = {"ok": True, **peers._ort_optimize("all", src, outs["ort-all"])}
    else:
        tools["ort-all"] = {"ok": True}
    (work / f"{model}.eqsat.rec.json").write_text(json.dumps(tools["eqsat"]))
    for name, args in a.variant.items():  # extra eqsat runs, e.g. eqsat-h200="--hardware h200"
        tools[name] = run_eqsat(src, outs[name], shlex.split(args))
    for t, r in tools.items():
        r["path"] = str(outs[t])
        if r.get("ok"):
            r.update(fused_counts(outs[t]))
            r["verify"] = {s: verify_at(src, outs[t], d) for s, d in SHAPES.items()}
        print(f"  {model} {t}: {r.get('nodes')} nodes, fused {r.get('fused')}, verify "
              f"{ {s: v['status'] for s, v in r.get('verify', {}).items()} }", flush=True)
    rec["tools"] = tools
    return rec


def time_all(rec: dict, src: Path, a) -> None:
    rec.setdefault("latency", {})
    paths = {t: Path(r["path"]) for t, r in rec["tools"].items() if r.get("ok")}
    models = {t: paths[t] for t in (*TOOLS, *sorted(paths)) if t in paths}
    for shape, dims in SHAPES.items():
        for setting in a.settings:
            key = f"{shape}/{setting}"
            if key in rec["latency"] and set(rec["latency"][key]["tools"]) >= set(models):
                continue
            t0 = time.perf_counter()
            res = ab.measure(src, models, setting, a.children, a.runs, dims)
            out = res["models"]
            entry = {"dims": res["dims"], "wall_s": time.perf_counter() - t0, "tools": {}, "pairs": {}}
            for t, s in out.items():
                entry["tools"][t] = {"median_ms": s["median_ms"], "original_ms": s["original_ms"],
                                     "ratio": s["ratio"], "ci95": s["ci95"], "runs": s["runs"]}
            samples = {t: s["samples_ms"][t] for t, s in out.items()}
            for num, den in (("eqsat", "tf-opt"), ("eqsat", "ort-all"), ("tf-opt", "ort-all"),
                             *((v, d) for v in models if v not in TOOLS for d in ("tf-opt", "eqsat"))):
                if num in samples and den in samples:
                    med = (statistics.median(x for c in samples[num] for x in c)
                           / statistics.median(x for c in samples[den] for x in c))
                    entry["pairs"][f"{num}/{den}"] = [med, *peers.bootstrap_ratio(samples[num], samples[den])]
            rec["latency"][key] = entry
            print(f"  {rec['model']} {key}: " + ", ".join(
                f"{p} {v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]" for p, v in entry["pairs"].items()), flush=True)


def _ci(v: list | None) -> str:
    return f"{v[0]:.2f} [{v[1]:.2f}, {v[2]:.2f}]" if v else "-"


def write_md(recs: list[dict], command: str, a, eqsat_rev: str = "?") -> str:
    lines = ["# Decoders with a KV cache: eqsat, onnxruntime's transformers optimizer and ORT_ENABLE_ALL", "",
             f"Command: `{command}` (benchmarks/decoders.py; its docstring says what each tool and shape is).", "",
             f"Machine: {peers._machine()}; shared with other work while measuring, so only ratios measured "
             "side by side mean anything.", "",
             f"Packages: {peers._versions()}; eqsat at commit {eqsat_rev}.", "",
             "Method: benchmarks/ab.py's `measure` (peers.py's latency children: onnxruntime CPU, 1 intra-op "
             f"thread, every round in a fresh random order, {a.children} child processes sharing {a.runs} rounds "
             "after 3 warm-up rounds, huge pages). Ratios are medians over pooled rounds with a 95 % "
             "percentile bootstrap interval, paired in the same rounds (`peers.bootstrap_ratio`); an interval "
             "that holds 1.00 does not tell the two apart. **off**: ORT_DISABLE_ALL for every session (what "
             "the tool did); **all**: ORT_ENABLE_ALL on top. **tf-opt**: "
             "`onnxruntime.transformers.optimizer.optimize_model` (call per model below). "
             "prefill: batch 1, past_sequence 0, new_tokens 128 (total 128); step: batch 1, past_sequence 128, "
             "new_tokens 1 (total 129).", ""]
    lines += ["## Latency", "",
              "x / original: each result against the unoptimized export, in the same rounds. "
              "eqsat / tf-opt < 1: eqsat's output is faster than the transformers optimizer's.", "",
              "| model | shape | setting | original ms | eqsat / original | tf-opt / original | ort-all / original "
              "| **eqsat / tf-opt** | eqsat / ort-all | tf-opt / ort-all |",
              "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in recs:
        for key, e in r.get("latency", {}).items():
            shape, setting = key.split("/")
            t = e["tools"]
            orig = next(iter(t.values()))["original_ms"]
            cells = [_ci([t[x]["ratio"], *t[x]["ci95"]]) if x in t else "-" for x in ("eqsat", "tf-opt", "ort-all")]
            pairs = [_ci(e["pairs"].get(p)) for p in ("eqsat/tf-opt", "eqsat/ort-all", "tf-opt/ort-all")]
            lines.append(f"| {r['model']} | {shape} | {setting} | {orig:.2f} | " + " | ".join(cells) + " | "
                         + " | ".join(pairs) + " |")
    var = [(r, key, e, t) for r in recs for key, e in r.get("latency", {}).items() for t in e["tools"]
           if t not in TOOLS]
    if var:
        lines += ["", "Extra eqsat runs (`--variant NAME=ARGS`, arguments below), in the same rounds:", "",
                  "| model | shape | setting | variant | variant / original | variant / tf-opt | variant / eqsat |",
                  "|---|---|---|---|---:|---:|---:|"]
        for r, key, e, t in var:
            shape, setting = key.split("/")
            x = e["tools"][t]
            lines.append(f"| {r['model']} | {shape} | {setting} | {t} | {_ci([x['ratio'], *x['ci95']])} | "
                         f"{_ci(e['pairs'].get(f'{t}/tf-opt'))} | {_ci(e['pairs'].get(f'{t}/eqsat'))} |")
    lines += ["", "## Fused ops, per output (count / layers)", "",
              "attention: Attention, MultiHeadAttention, GroupQueryAttention; rotary: RotaryEmbedding; "
              "skip-LN: SkipLayerNormalization, SkipSimplifiedLayerNormalization; LN: LayerNormalization, "
              "SimplifiedLayerNormalization; gelu/silu: FastGelu, BiasGelu, Gelu, QuickGelu. Issue 30 asks for "
              "attention (1 per layer) and rotary (2 per layer: query and key, Llama only) in every layer.", "",
              "| model | layers | tool | nodes | " + " | ".join(lab for lab, _ in FUSED)
              + " | attention and rotary in every layer |",
              "|---|---:|---|---:|" + "---:|" * len(FUSED) + "---|"]
    for r in recs:
        L = r["layers"]
        rotary_needed = "llama" in r["model"]
        for t in ("original", *TOOLS, *(t for t in r["tools"] if t not in TOOLS)):
            x = r["original"] if t == "original" else r["tools"].get(t, {})
            if "fused" not in x:
                lines.append(f"| {r['model']} | {L} | {t} | failed |" + " |" * len(FUSED) + " |")
                continue
            f = x["fused"]
            ok = f["attention"] >= L and (not rotary_needed or f["rotary"] >= 2 * L)
            lines.append(f"| {r['model']} | {L} | {t} | {x['nodes']} | "
                         + " | ".join(f"{f[lab]}" + (f" ({f[lab] / L:.3g}/layer)" if f[lab] else "")
                                      for lab, _ in FUSED)
                         + f" | {'yes' if ok else 'no'} |")
    lines += ["", "## Verification", "",
              "`eqsat optimize`'s own verification (its defaults: sizes it picks itself), then each output "
              "against the original at the two benchmark shapes (`eqsat.verification.verify` with those sizes).", "",
              "| model | tool | prefill | step | eqsat optimize's own line |", "|---|---|---|---|---|"]
    for r in recs:
        for t in (*TOOLS, *(t for t in r["tools"] if t not in TOOLS)):
            x = r["tools"].get(t, {})
            v = x.get("verify", {})
            own = x.get("verification_line", "")
            lines.append(f"| {r['model']} | {t} | {v.get('prefill', {}).get('status', '-')} | "
                         f"{v.get('step', {}).get('status', '-')} | {own} |")
    lines += ["", "## Calls", ""]
    for r in recs:
        lines.append(f"- {r['model']}: `{r['tools'].get('tf-opt', {}).get('call', '-')}`")
        for t, x in r["tools"].items():
            if t not in TOOLS:
                lines.append(f"- {r['model']}, {t}: `eqsat optimize {shlex.join(x.get('args', []))}`")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt2-kv,llama-4l-kv,qwen2-4l-kv,phi3-4l-kv,phi2-4l-kv")
    ap.add_argument("--models-dir", type=Path, default=ROOT / "benchmarks" / "models")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "decoders")
    ap.add_argument("--results", type=Path, default=None, help="write the Markdown here too")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--children", type=int, default=3)
    ap.add_argument("--settings", default="off,all")
    ap.add_argument("--tf-opt-level", type=int, default=1)
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                    help="an extra eqsat run with these arguments, e.g. eqsat-h200='--hardware h200'")
    ap.add_argument("--no-timing", action="store_true", help="optimize, count and verify only")
    ap.add_argument("--report-only", action="store_true", help="rewrite the Markdown from --out/records.json")
    ap.add_argument("--force", action="store_true", help="optimize again even where outputs are cached")
    a = ap.parse_args(argv)
    a.settings = [s for s in a.settings.split(",") if s]
    a.variant = dict(v.split("=", 1) for v in a.variant)
    a.out.mkdir(parents=True, exist_ok=True)
    store = a.out / "records.json"
    recs = json.loads(store.read_text()) if store.exists() else {}
    meta = recs.setdefault("_meta", {})
    if not a.report_only:
        meta["command"] = "python benchmarks/decoders.py " + shlex.join(argv if argv is not None else sys.argv[1:])
        meta["eqsat"] = eqsat_commit()
        for model in a.models.split(","):
            src = a.models_dir / f"{model}.onnx"
            if not src.is_file():
                ap.error(f"no such model: {src}")
            rec = recs.get(model) if not a.force else None
            if rec is None or "tools" not in rec or any(v not in rec["tools"] for v in a.variant):
                rec = {**(rec or {}), **optimize_all(model, src, a.out, a)}
                recs[model] = rec
                store.write_text(json.dumps(recs, indent=1))
            if not a.no_timing:
                time_all(rec, src, a)
                store.write_text(json.dumps(recs, indent=1))
    md = write_md([recs[m] for m in a.models.split(",") if m in recs], meta.get("command", "?"), a,
                  meta.get("eqsat", "?"))
    print(md)
    if a.results:
        a.results.write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
