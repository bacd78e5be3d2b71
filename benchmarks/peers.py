"""eqsat beside the graph optimizers people use today: nodes, time, equivalence, latency.

    python benchmarks/peers.py [--models DIR] [--only NAME,...] [--tools TOOL,...] [--runs N]
                               [--out benchmarks/out] [--results benchmarks/RESULTS.md]
                               [--plots benchmarks/results] [--force] [--report-only]

Tools: eqsat (`eqsat.core.pipeline.optimize` with default options: what `eqsat optimize` does with
no flags), onnxruntime's optimizer at basic, extended and all (the model it saves through
`SessionOptions.optimized_model_filepath`), onnxsim, onnxslim, onnxoptimizer (default
fuse-and-elimination passes) and onnxscript's optimizer, each with its defaults. A peer
that is not installed is reported as such, not run.

For each corpus model (benchmarks/corpus.py, benchmarks/light_models.py; symbolic dims
bound as benchmarks/memory.py does: a name with `batch` -> 1, with `seq` -> 128) and tool:

- ok or the error; node count of the result (top-level graph);
- opt s: the optimization call alone (model in memory -> model in memory; for onnxruntime,
  the session creation that optimizes and saves); loading and saving are `io_s`;
- equivalence: the result against the original under onnxruntime (CPU, 1 thread,
  optimizations off) on random inputs: `identical`, `close` (max |diff| / max |ref| <= 1e-3
  on every output), or `MISMATCH`;
- latency under onnxruntime CPU, 1 intra-op thread, in two settings: onnxruntime's
  optimizations off (ORT_DISABLE_ALL: what the tool itself did) and fully on
  (ORT_ENABLE_ALL: what remains on top); `--settings off-mt,all-mt` measures the same at
  onnxruntime's default thread count (one intra-op thread per physical core). The original and every result of the
  model run
  round-robin in one process (each round in a fresh random order, never starting with the
  session that ended the round before: `round_orders`), after warm-up, in `--children`
  child processes that share the rounds and create the sessions alternately in opposite
  orders, with glibc's malloc asked for huge pages (LATENCY_ENV); the figure is
  median(result) / median(original) over the pooled samples in the same setting, so a noisy
  machine slows both, with a 95 % bootstrap interval over children and rounds
  (`bootstrap_ratio`);
- eqsat only: its phase times, and its output's memory plan (eqsat.plan.plan_model): arena
  bytes against the lower bound.

Every optimization and every latency measurement runs in a child process with a timeout,
so a crash is a row, not the end. Records are cached per (model, tool) in
`OUT/<model>/<tool>.json` (keyed by the model file's size and mtime and the tool's version):
a rerun only does what is missing (`--force` redoes it). The optimized models are deleted
once measured (`--keep-models` keeps them). Writes RESULTS.md and PNG plots (matplotlib).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.symdims import describe, dims_for  # noqa: E402


def _load_rounds():
    """eqsat/backends/ort/rounds.py of this checkout, by path: the children may import an older eqsat."""
    spec = importlib.util.spec_from_file_location("eqsat_rounds", ROOT / "eqsat" / "backends" / "ort" / "rounds.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


round_orders = _load_rounds().round_orders

TOOLS = ("eqsat", "ort-basic", "ort-extended", "ort-all", "onnxsim", "onnxslim", "onnxoptimizer", "onnxscript",
         "control")
# `control` is the original model itself, measured like a result: its ratio is the noise floor.
# onnxruntime's own optimizations when the results run (off / all), at 1 intra-op thread, or at
# onnxruntime's default thread count (one per physical core) with "-mt"
SETTINGS = ("off", "all", "off-mt", "all-mt")
REL_TOL = 1e-3
NOISY = 0.10  # a control ratio further than this from 1.00 marks the model's figures as noise-bound
# Latency children ask glibc's malloc for transparent huge pages. Without them, on this project's
# (virtual) machines a session's MatMuls ran 1.5x to 5x slower depending on where its weights
# landed (BERT-base, one process, four sessions of the same model: 1,384 / 756 / 432 / 376 ms;
# with huge pages 218 / 213 / 212 / 206 ms), so a ratio between two sessions measured memory
# placement, not the models. A user's GLIBC_TUNABLES wins.
LATENCY_ENV = {"GLIBC_TUNABLES": os.environ.get("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")}
NOTES_MARKER = "<!-- notes: kept when peers.py rewrites this file -->"
# the Python distribution behind each tool (its version is part of the cache key)
DISTRIBUTION = {"eqsat": "eqsat", "ort-basic": "onnxruntime", "ort-extended": "onnxruntime",
                "ort-all": "onnxruntime", "onnxsim": "onnxsim", "onnxslim": "onnxslim",
                "onnxoptimizer": "onnxoptimizer", "onnxscript": "onnxscript", "control": "onnx"}
MODULE = {"eqsat": "eqsat", "ort-basic": "onnxruntime", "ort-extended": "onnxruntime", "ort-all": "onnxruntime",
          "onnxsim": "onnxsim", "onnxslim": "onnxslim", "onnxoptimizer": "onnxoptimizer",
          "onnxscript": "onnxscript", "control": "onnx"}


def missing(tool: str) -> str | None:
    """Why `tool` cannot run here, or None."""
    if tool not in MODULE:
        return f"unknown tool {tool!r}; choose from {', '.join(TOOLS)}"
    if importlib.util.find_spec(MODULE[tool]) is None:
        return f"{MODULE[tool]} is not installed (pip install -e '.[bench]')"
    return None


EQSAT_SRC: Path | None = None  # --eqsat-commit: eqsat/, extract/, rules/ exported from that commit


def version(tool: str) -> str:
    """The tool's version; for eqsat also the last commit that changed eqsat/, extract/ or
    rules/ (`.dirty` with uncommitted changes there), or the commit given by --eqsat-commit,
    so that another eqsat is measured again."""
    try:
        v = importlib.metadata.version(DISTRIBUTION.get(tool, tool))
    except importlib.metadata.PackageNotFoundError:
        return "?"
    if tool == "eqsat" and EQSAT_SRC is not None:
        return v + "+g" + (EQSAT_SRC / "COMMIT").read_text().strip()
    if tool == "eqsat" and (c := _git_commit("eqsat", "extract", "rules")) != "?":
        v += "+g" + c + (".dirty" if "uncommitted" in eqsat_source() else "")
    return v


def export_eqsat(rev: str, out: Path) -> Path:
    """eqsat/, extract/ and rules/ of commit `rev` (git archive: the checkout is not touched)
    in OUT/eqsat-src-<hash>/, the rules also as the package eqsat.rules."""
    h = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev], capture_output=True, text=True,
                       check=True).stdout.strip()
    d = out / f"eqsat-src-{h}"
    if not (d / "COMMIT").exists():
        import io
        import shutil
        import tarfile

        tar = subprocess.run(["git", "-C", str(ROOT), "archive", h, "eqsat", "extract", "rules"], capture_output=True,
                             check=True).stdout
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(tar)) as t:
            t.extractall(d, filter="data")
        shutil.copytree(d / "rules", d / "eqsat" / "rules")
        shutil.copytree(d / "extract", d / "eqsat" / "extract")  # installed as eqsat.extract since b252b8b
        (d / "COMMIT").write_text(h + "\n")
    return d


def eqsat_source() -> str:
    """The commit eqsat ran from, and whether eqsat/, extract/ or rules/ had uncommitted changes."""
    import eqsat

    if EQSAT_SRC is not None or not Path(eqsat.__file__).resolve().is_relative_to(ROOT):
        d = Path(eqsat.__file__).resolve().parent.parent
        c = d / "COMMIT"
        shown = d.relative_to(ROOT) if d.is_relative_to(ROOT) else d.name  # no machine paths in results
        return (c.read_text().strip() + f" (exported to {shown})") if c.exists() else str(shown)
    try:
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "eqsat", "extract", "rules"],
                               capture_output=True, text=True).stdout.split("\n")
    except OSError:
        return "?"
    dirty = sorted({ln[3:].strip() for ln in dirty if ln.strip()})
    return _git_commit() + (f" + uncommitted changes in {', '.join(dirty)}" if dirty else "")


def fingerprint(path: Path) -> str:
    st = path.stat()
    return f"{st.st_size}:{st.st_mtime_ns}"


def _line(e: BaseException) -> str:
    s = " ".join(str(e).split()) or type(e).__name__
    return s[:300]


# ---- the tools (run in the child) ------------------------------------------------------------

def _ort_optimize(level: str, src: Path, dst: Path) -> dict:
    import onnxruntime as rt

    so = rt.SessionOptions()
    so.graph_optimization_level = {"basic": rt.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                                   "extended": rt.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                                   "all": rt.GraphOptimizationLevel.ORT_ENABLE_ALL}[level]
    so.optimized_model_filepath = str(dst)
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    t0 = time.perf_counter()
    rt.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    return {"opt_s": time.perf_counter() - t0, "io_s": 0.0}


def _proto_tool(tool: str, src: Path, dst: Path) -> dict:
    import onnx

    t0 = time.perf_counter()
    model = onnx.load(str(src))
    io = time.perf_counter() - t0
    t0 = time.perf_counter()
    if tool == "onnxsim":
        import onnxsim

        out, ok = onnxsim.simplify(model)
        if not ok:
            raise RuntimeError("onnxsim: its own check of the simplified model failed")
    elif tool == "onnxslim":
        import onnxslim

        out = onnxslim.slim(model)
    elif tool == "onnxoptimizer":
        import onnxoptimizer

        out = onnxoptimizer.optimize(model)
    elif tool == "onnxscript":
        import onnxscript.optimizer

        out = onnxscript.optimizer.optimize(model)
    else:
        raise ValueError(tool)
    opt = time.perf_counter() - t0
    t0 = time.perf_counter()
    big = out.ByteSize() > (1 << 31) - (1 << 26) if hasattr(out, "ByteSize") else False
    onnx.save(out, str(dst), save_as_external_data=big)
    return {"opt_s": opt, "io_s": io + time.perf_counter() - t0}


def _eqsat(src: Path, dst: Path, dims: dict[str, int]) -> dict:
    from eqsat.core.pipeline import Options, optimize
    from eqsat.io.modelio import load_model, save_model

    t0 = time.perf_counter()
    model = load_model(src)
    io = time.perf_counter() - t0
    t0 = time.perf_counter()
    # the defaults of `eqsat optimize`, with an image's free height and width bound as a user
    # binds them (`--dim height=224`: the layout's blocked kernels need the sizes); the other
    # symbolic sizes (batch, sequence) stay free, as the defaults leave them
    image = {k: v for k, v in dims.items() if any(h in k.lower() for h in ("height", "width"))}
    res = optimize(model, Options(dims=image) if image else Options())
    opt = time.perf_counter() - t0
    t0 = time.perf_counter()
    save_model(res.model, dst, check=False)
    io += time.perf_counter() - t0
    r = res.report
    extra = {"phases_s": r["times_s"], "stop_reason": r["saturation"]["stop_reason"],
             "iterations": r["saturation"]["iterations"], "enodes": r["saturation"]["enodes"],
             "extractor": r["extraction"]["extractor"], "extract_notes": r["extraction"]["notes"],
             "work": r.get("work"), "source": eqsat_source()}
    try:
        from eqsat.plan import plan_model

        t0 = time.perf_counter()
        plan = plan_model(res.model, dims)
        extra["plan"] = {"arena_bytes": plan.arena_bytes, "lower_bound_bytes": plan.lower_bound_bytes,
                         "no_reuse_bytes": plan.no_reuse_bytes, "ratio": plan.ratio,
                         "plan_s": time.perf_counter() - t0}
    except Exception as e:  # noqa: BLE001 - a failed plan is a field, not a failed tool
        extra["plan"] = {"error": _line(e)}
    return {"opt_s": opt, "io_s": io, "eqsat": extra}


def optimize_with(tool: str, src: Path, dst: Path, dims: dict[str, int]) -> dict:
    """Optimize `src` into `dst` with `tool` in this process; timing and tool extras."""
    if tool == "eqsat":
        return _eqsat(src, dst, dims)
    if tool.startswith("ort-"):
        return _ort_optimize(tool[4:], src, dst)
    if tool == "control":
        import shutil

        t0 = time.perf_counter()
        shutil.copyfile(src, dst)
        return {"opt_s": 0.0, "io_s": time.perf_counter() - t0}
    return _proto_tool(tool, src, dst)


def node_count(path: Path) -> int:
    import onnx

    return len(onnx.load(str(path), load_external_data=False).graph.node)


def _session(path: Path, setting: str):
    import onnxruntime as rt

    so = rt.SessionOptions()
    so.graph_optimization_level = (rt.GraphOptimizationLevel.ORT_DISABLE_ALL if setting.startswith("off")
                                   else rt.GraphOptimizationLevel.ORT_ENABLE_ALL)
    so.intra_op_num_threads = 0 if setting.endswith("-mt") else 1  # 0: onnxruntime's default
    so.inter_op_num_threads = 1
    so.execution_mode = rt.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 4
    return rt.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _feeds_for(sess, feeds: dict) -> dict:
    names = {i.name for i in sess.get_inputs()}
    return {k: v for k, v in feeds.items() if k in names}


def _feeds(src: Path, dims: dict[str, int]) -> dict:
    import onnx

    from eqsat.verification import random_inputs

    return random_inputs(onnx.load(str(src), load_external_data=False), dims)


def equivalence(src: Path, dst: Path, dims: dict[str, int]) -> dict:
    """The result against the original under onnxruntime, optimizations off, random inputs."""
    import numpy as np

    feeds = _feeds(src, dims)
    ref_s = _session(src, "off")
    ref_names = [o.name for o in ref_s.get_outputs()]
    ref = dict(zip(ref_names, ref_s.run(None, _feeds_for(ref_s, feeds)), strict=True))
    del ref_s
    try:
        got_s = _session(dst, "off")
        got_names = [o.name for o in got_s.get_outputs()]
        got = dict(zip(got_names, got_s.run(None, _feeds_for(got_s, feeds)), strict=True))
    except Exception as e:  # noqa: BLE001
        return {"status": "error", "detail": f"onnxruntime cannot run the result: {_line(e)}"}
    notes = []
    if set(got_names) != set(ref_names):
        if len(got_names) != len(ref_names):
            return {"status": "MISMATCH", "detail": f"outputs {ref_names} became {got_names}"}
        notes.append("outputs renamed; compared by position")
        got = dict(zip(ref_names, (got[n] for n in got_names), strict=True))
    worst_abs, worst_rel, identical = 0.0, 0.0, True
    for name, a in ref.items():
        a, b = np.asarray(a), np.asarray(got[name])
        if a.shape != b.shape:
            return {"status": "MISMATCH", "detail": f"output {name!r}: shape {a.shape} became {b.shape}"}
        if a.dtype != b.dtype:
            notes.append(f"output {name!r}: dtype {a.dtype} became {b.dtype}")
        if a.dtype.kind not in "fc":
            if not np.array_equal(a, b):
                return {"status": "MISMATCH", "detail": f"output {name!r}: {int((a != b).sum())} values differ"}
            continue
        if a.size == 0:
            continue
        x, y = a.astype(np.float64), b.astype(np.float64)
        if not np.array_equal(x, y, equal_nan=True):
            identical = False
        d = float(np.nanmax(np.abs(x - y))) if a.size else 0.0
        worst_abs = max(worst_abs, d)
        # relative to the output's scale, down to 1e-19 (a network with random weights ends
        # near 1e-9: against max(1, scale) any result there was "close"; below, underflow's
        # remains, which rounding moves by more than their size)
        scale = float(np.nanmax(np.abs(x[np.isfinite(x)]))) if np.isfinite(x).any() else 0.0
        worst_rel = max(worst_rel, d / max(scale, 1e-19))
    status = "identical" if identical else ("close" if worst_rel <= REL_TOL else "MISMATCH")
    return {"status": status, "max_abs_diff": worst_abs, "rel_diff": worst_rel, "detail": "; ".join(notes)}


def latency(src: Path, results: dict[str, Path], dims: dict[str, int], setting: str, runs: int = 30,
            warmup: int = 3, max_s: float = 120.0, min_runs: int = 10, reverse: bool = False,
            seed: int = 0) -> dict:
    """Latency samples (ms) of the original and each result, run round-robin in this process:
    {"times_ms": {name: [...]}, "rounds": n}; `summarize` turns them into ratios.

    Every round runs the original and every result once, in a fresh random order that never
    starts with the session the round before ended with (`round_orders`), so that drifting
    load on a shared machine hits all of them alike and none runs more often right after
    itself (its weights still in cache) or right after another model. Stops after
    `runs` rounds, or after `max_s` seconds once `min_runs` rounds are done. The sessions are
    created in the order original, results... (`reverse`: the other way round): a session
    created later in a process can run a few percent faster (where it lands in memory), so
    `measure_latencies` pools children of both orders."""
    feeds = _feeds(src, dims)
    order = [("original", src)] + list(results.items())
    made = {name: _session(path, setting) for name, path in (order[::-1] if reverse else order)}
    sessions = [(name, made[name], _feeds_for(made[name], feeds)) for name, _ in order]
    for _ in range(warmup):
        for _name, s, f in sessions:
            s.run(None, f)
    times: dict[str, list[float]] = {name: [] for name, _, _ in sessions}
    t_start = time.perf_counter()
    rounds = 0
    for perm in round_orders(len(sessions), runs, seed):
        for name, s, f in (sessions[j] for j in perm):
            t0 = time.perf_counter()
            s.run(None, f)
            times[name].append((time.perf_counter() - t0) * 1e3)
        rounds += 1
        if rounds >= min_runs and time.perf_counter() - t_start > max_s:
            break
    return {"times_ms": times, "rounds": rounds}


def summarize(children: list[dict[str, list[float]]]) -> dict:
    """Each result's median, ratio to the original's median, median of the per-round ratios,
    ratio of 10th percentiles, and a 95 % bootstrap interval of the ratio (`bootstrap_ratio`),
    from `latency`'s samples of one or more children (pooled); with the samples themselves, so
    that a later report can pair two results measured in the same children."""
    times = {name: [t for c in children for t in c[name]] for name in children[0]}
    base = statistics.median(times["original"])
    rounds = len(times["original"])
    out = {}
    for name, ts in times.items():
        if name == "original":
            continue
        med = statistics.median(ts)
        lo, hi = bootstrap_ratio([c[name] for c in children], [c["original"] for c in children])
        out[name] = {"median_ms": med, "original_ms": base, "ratio": med / base,
                     "paired_ratio": statistics.median(t / o for t, o in zip(ts, times["original"], strict=True)),
                     "p10_ratio": _p10(ts) / _p10(times["original"]), "runs": rounds, "ci95": [lo, hi],
                     "samples_ms": {"original": [c["original"] for c in children], name: [c[name] for c in children]},
                     "group": sorted(n for n in times if n != "original")}
    return out


def bootstrap_ratio(num: list[list[float]], den: list[list[float]], reps: int = 2000, seed: int = 0,
                    level: float = 0.95) -> tuple[float, float]:
    """A percentile bootstrap interval of median(num) / median(den), pooled over children.

    num[c][i] and den[c][i] ran in the same round i of child c. Each replicate draws the
    children with replacement, then each drawn child's rounds with replacement, keeping each
    round's two samples together (what drifted during a round slowed both): the interval
    holds the round-to-round noise and, as far as a few children can show it, the
    child-to-child one (where each process placed the sessions in memory)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    num = [np.asarray(a, dtype=float) for a in num]
    den = [np.asarray(b, dtype=float) for b in den]
    k = len(num)
    r = np.empty(reps)
    for j in range(reps):
        ns, ds = [], []
        for c in (rng.integers(0, k, size=k) if k > 1 else (0,)):
            idx = rng.integers(0, len(num[c]), size=len(num[c]))
            ns.append(num[c][idx])
            ds.append(den[c][idx])
        r[j] = np.median(np.concatenate(ns)) / np.median(np.concatenate(ds))
    q = (1 - level) / 2
    return float(np.quantile(r, q)), float(np.quantile(r, 1 - q))


def _p10(xs: list[float]) -> float:
    """The 10th percentile: less sensitive than the median to other work on the machine."""
    xs = sorted(xs)
    return xs[int(0.1 * (len(xs) - 1))]


# ---- children ----------------------------------------------------------------------------------

def _child(job: dict) -> dict:
    global EQSAT_SRC
    if job.get("eqsat_src"):
        EQSAT_SRC = Path(job["eqsat_src"])
        sys.path.insert(0, job["eqsat_src"])
    kind = job["kind"]
    dims = job["dims"]
    if kind == "optimize":
        src, dst = Path(job["src"]), Path(job["dst"])
        rec = optimize_with(job["tool"], src, dst, dims)
        rec["nodes"] = node_count(dst)
        t0 = time.perf_counter()
        rec["equivalence"] = equivalence(src, dst, dims)
        rec["equivalence"]["seconds"] = time.perf_counter() - t0
        return rec
    if kind == "time":  # the optimization alone (benchmarks/opt_time.py)
        return optimize_with(job["tool"], Path(job["src"]), Path(job["dst"]), dims)
    if kind == "latency":
        return latency(Path(job["src"]), {t: Path(p) for t, p in job["results"].items()}, dims, job["setting"],
                       job["runs"], job["warmup"], job["max_s"], job["min_runs"], job.get("reverse", False),
                       job.get("seed", 0))
    raise ValueError(kind)


def run_child(job: dict, timeout: float) -> dict:
    """Run one job in a child process: its JSON result, or {"error": ...}. Latency children run
    with LATENCY_ENV."""
    t0 = time.perf_counter()
    env = dict(os.environ, **LATENCY_ENV) if job["kind"] == "latency" else None
    try:
        p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(job)],
                           capture_output=True, text=True, timeout=timeout, cwd=str(ROOT), env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s", "child_s": time.perf_counter() - t0}
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        if p.returncode < 0:
            why = f"crashed (signal {-p.returncode})"
        else:
            lines = [s for s in p.stderr.strip().splitlines() if s.strip()]
            why = lines[-1].strip()[:300] if lines else f"exit status {p.returncode}"
        return {"error": why, "child_s": wall}
    try:
        out = json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": "the child printed no result", "child_s": wall}
    out["child_s"] = wall
    return out


# ---- one model -----------------------------------------------------------------------------------

def _load_cache(path: Path, key: dict) -> dict | None:
    try:
        rec = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return rec if all(rec.get(k) == v for k, v in key.items()) else None


def _save(path: Path, rec: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec, indent=1, default=str))
    tmp.replace(path)


def optimize_record(src: Path, tool: str, dims: dict[str, int], work: Path, timeout: float) -> dict:
    """Optimize with one tool in a child: the record (no latency yet)."""
    import onnx

    rec = {"model": src.name[:-5], "tool": tool, "version": version(tool), "fingerprint": fingerprint(src),
           "dims": dims, "nodes_before": len(onnx.load(str(src), load_external_data=False).graph.node)}
    why = missing(tool)
    if why:
        return dict(rec, ok=False, error=why, not_installed=True)
    dst = work / f"{tool}.onnx"
    out = run_child({"kind": "optimize", "tool": tool, "src": str(src), "dst": str(dst), "dims": dims,
                     "eqsat_src": str(EQSAT_SRC) if EQSAT_SRC else None}, timeout)
    if "error" in out:
        return dict(rec, ok=False, error=out["error"], child_s=out.get("child_s"))
    return dict(rec, ok=True, result=str(dst), **out)


PAIRED = ("eqsat", "ort-all", "control")  # measured in the first child group, so that they pair


def latency_groups(tools: list[str], per: int) -> list[list[str]]:
    """The tools split into groups of at most `per` (sessions that fit one child's memory),
    eqsat, ort-all and control first, so that eqsat / ort-all gets a paired interval and
    the control measures the same rounds whenever three sessions fit."""
    order = [t for t in PAIRED if t in tools] + [t for t in tools if t not in PAIRED]
    return [order[i:i + per] for i in range(0, len(order), per)]


def measure_latencies(src: Path, recs: dict[str, dict], dims: dict[str, int], a) -> None:
    """Fill rec["latency"][setting] for the records that ran, grouped so that the sessions of
    one child fit in `a.mem_budget` GiB (a model's sessions take about 1.6x its file: 650 MiB for BERT-base,
    measured)."""
    todo = {t: r for t, r in recs.items() if r.get("ok") and r["equivalence"]["status"] != "error"
            and Path(r["result"]).exists() and any(s not in r.get("latency", {}) for s in a.settings)}
    if not todo:
        return
    per = max(1, int(a.mem_budget * (1 << 30) / (1.6 * src.stat().st_size)) - 1)
    groups = latency_groups(list(todo), per)
    for setting in a.settings:
        for group in groups:
            job = {"kind": "latency", "src": str(src), "results": {t: todo[t]["result"] for t in group},
                   "dims": dims, "setting": setting, "runs": a.runs, "warmup": a.warmup, "max_s": a.max_s,
                   "min_runs": min(a.runs, 10), "eqsat_src": str(EQSAT_SRC) if EQSAT_SRC else None}
            out = _latency_children(job, a.timeout, a.children)
            if "error" in out and len(group) > 1:  # find who crashed it: one at a time
                out = {}
                for t in group:
                    o = _latency_children(dict(job, results={t: todo[t]["result"]}), a.timeout, a.children)
                    out[t] = o.get(t, {"error": o.get("error", "?")})
            elif "error" in out:
                out = {group[0]: {"error": out["error"]}}
            for t in group:
                todo[t].setdefault("latency", {})[setting] = out.get(t, {"error": "no result"})
                print(f"  {src.name[:-5]} {t} latency ({setting}): {_fmt_lat(todo[t]['latency'][setting])}",
                      flush=True)


def _latency_children(job: dict, timeout: float, children: int) -> dict:
    """One latency job as `children` child processes, alternately creating the sessions in
    opposite orders, each with its share of the rounds (and time) and its own round orders;
    their samples pooled and summarized. Each child places the sessions in memory afresh,
    which moves a ratio by a percent or two (the controls show it), so more children average
    that out and let the interval see it."""
    k = max(1, children)
    shares = [(i, job["runs"] // k + (i < job["runs"] % k)) for i in range(k)]
    outs = [run_child(dict(job, runs=n, max_s=job["max_s"] / k, min_runs=min(n, -(-job["min_runs"] // k)),
                           reverse=bool(i % 2), seed=i), timeout) for i, n in shares if n]
    bad = next((o for o in outs if "error" in o), None)
    if bad:
        return {"error": bad["error"]}
    return summarize([o["times_ms"] for o in outs])


def _fmt_lat(lat: dict | None) -> str:
    if not lat:
        return "-"
    if "error" in lat:
        return "error: " + lat["error"]
    return f"{lat['ratio']:.2f}x ({lat['median_ms']:.1f} / {lat['original_ms']:.1f} ms, {lat['runs']} runs)"


def bench_model(src: Path, tools: list[str], a) -> dict[str, dict]:
    """Every tool on one model, cached per (model, tool) under a.out/<model>/."""
    import onnx

    name = src.name[:-5]
    work = a.out / name
    work.mkdir(parents=True, exist_ok=True)
    dims = dims_for(onnx.load(str(src), load_external_data=False))
    recs: dict[str, dict] = {}
    for tool in tools:
        cache = work / f"{tool}.json"
        key = {"fingerprint": fingerprint(src), "version": version(tool)}
        rec = None if a.force else _load_cache(cache, key)
        if rec is not None and rec.get("ok") and any(s not in rec.get("latency", {}) for s in a.settings) \
                and not Path(rec["result"]).exists():
            rec = None  # latency missing and the optimized model gone: redo
        if rec is None:
            rec = optimize_record(src, tool, dims, work, a.timeout)
            _save(cache, rec)
            eq = rec.get("equivalence", {})
            print(f"  {name} {tool}: " + (f"{rec['nodes_before']} -> {rec['nodes']} nodes, {rec['opt_s']:.2f} s, "
                                          f"{eq.get('status')} (rel {eq.get('rel_diff', 0):.1e})"
                                          if rec["ok"] else f"error: {rec['error']}"), flush=True)
        recs[tool] = rec
    measure_latencies(src, recs, dims, a)
    for tool, rec in recs.items():
        if rec.get("ok") and not a.keep_models and all(s in rec.get("latency", {}) for s in a.settings):
            Path(rec["result"]).unlink(missing_ok=True)
            Path(rec["result"] + ".data").unlink(missing_ok=True)
        _save(work / f"{tool}.json", rec)
    return recs


def load_all(out: Path, models: list[str] | None = None) -> list[dict]:
    recs = []
    for d in sorted(out.glob("*")) if out.exists() else []:
        if not d.is_dir() or (models is not None and d.name not in models):
            continue
        for f in sorted(d.glob("*.json")):
            try:
                recs.append(json.loads(f.read_text()))
            except (OSError, json.JSONDecodeError):
                pass
    return recs


# ---- RESULTS.md and plots -----------------------------------------------------------------------

def _machine() -> str:
    """The machine in words: the CPU as /proc/cpuinfo names it, with its family and model
    numbers and widest vector extension (a virtual machine may call every EPYC "AMD EPYC",
    and the AVX2 and AVX-512 ones time differently), memory and kernel."""
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            info = dict((k.strip(), v.strip()) for k, v in (ln.split(":", 1) for ln in f.read().split("\n\n")[0]
                                                            .splitlines() if ":" in ln))
        flags = set(info.get("flags", "").split())
        vec = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
        cpu = (f"{info.get('model name', '?')} (family {info.get('cpu family', '?')}, "
               f"model {info.get('model', '?')}, {vec})")
    except OSError:
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / (1 << 20):.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return (f"{platform.machine()}, {cpu}, {os.cpu_count()} logical CPUs, {mem} RAM, "
            f"{platform.system()} {platform.release()}")


def _versions() -> str:
    names = ["eqsat", "egglog", "onnx", "onnxruntime", "onnxsim", "onnxslim", "onnxoptimizer", "onnxscript",
             "numpy", "ml_dtypes", "torch", "transformers"]
    out = []
    for n in names:
        try:
            out.append(f"{n} {importlib.metadata.version(n)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{n} (not installed)")
    return f"Python {platform.python_version()}, " + ", ".join(out)


def _ratio(rec: dict | None, setting: str) -> float | None:
    lat = ((rec or {}).get("latency") or {}).get(setting) or {}
    return lat.get("ratio")


def _cell_ratio(rec: dict | None, setting: str) -> str:
    if rec is None:
        return ""
    if not rec.get("ok"):
        return "n/i" if rec.get("not_installed") else "fail"
    lat = (rec.get("latency") or {}).get(setting)
    if not lat:
        return "-"
    if "error" in lat:
        return "err"
    s = f"{lat['ratio']:.2f}"
    if rec["equivalence"]["status"] == "MISMATCH":
        s += " (!)"
    return s


def pair_interval(a: dict | None, b: dict | None, setting: str) -> tuple[float, float] | None:
    """A 95 % bootstrap interval of median(a) / median(b) for two results measured in the same
    children (the same round-robin: `group`), from their records' samples; None otherwise."""
    la = ((a or {}).get("latency") or {}).get(setting) or {}
    lb = ((b or {}).get("latency") or {}).get(setting) or {}
    if "samples_ms" not in la or "samples_ms" not in lb or (b or {}).get("tool") not in la.get("group", ()):
        return None
    if la["samples_ms"]["original"] != lb["samples_ms"]["original"]:
        return None
    return bootstrap_ratio(la["samples_ms"][a["tool"]], lb["samples_ms"][b["tool"]])


def _with_ci(v: float | None, ci) -> str:
    if v is None:
        return "-"
    return f"{v:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else f"{v:.2f}"


def _bold_best(cells: list[str]) -> list[str]:
    vals = []
    for c in cells:
        try:
            vals.append(float(c))
        except ValueError:
            vals.append(None)
    best = min((v for v in vals if v is not None), default=None)
    return [f"**{c}**" if v is not None and v == best else c for c, v in zip(cells, vals, strict=True)]


def _git_commit(*paths: str) -> str:
    """The short hash of HEAD, or of the last commit that changed `paths`."""
    cmd = ["git", "-C", str(ROOT), "log", "-1", "--format=%h", "HEAD", "--", *paths]
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.strip() or "?"
    except OSError:
        return "?"


def write_results(recs: list[dict], path: Path, command: str, plots: list[Path], runs_note: str) -> None:
    by = {(r["model"], r["tool"]): r for r in recs}
    models = sorted({r["model"] for r in recs}, key=lambda m: (m.startswith("light_"), m))
    tools = [t for t in TOOLS if any(r["tool"] == t for r in recs)]
    kids = sorted({len(x["samples_ms"]["original"]) for r in recs for x in (r.get("latency") or {}).values()
                   if "samples_ms" in x})
    children = "two" if not kids else str(kids[0]) if len(kids) == 1 else f"{kids[0]} to {kids[-1]}"
    lines = [
        "# eqsat beside the peers",
        "",
        f"Command: `{command}` (checkout at commit {_git_commit()}; eqsat as each record says below). Written by "
        f"`benchmarks/peers.py` "
        "from the records cached in its `--out` folder; the notes at the end are written by hand.",
        "",
        f"Machine: {_machine()}; shared with other work while measuring, so absolute times are noisy "
        "and every latency is a ratio against the original measured in the same process, round-robin.",
        "",
        f"Packages: {_versions()}.",
        "",
        "Method: each tool with its defaults (eqsat: `eqsat optimize` defaults, target `ort`, the default "
        "cost model of the commit each record names (`node-count` before d9e7b81, `roofline` since), ILP "
        "extractor; onnxruntime: the model saved by `optimized_model_filepath` at "
        f"ORT_ENABLE_BASIC / EXTENDED / ALL). Symbolic dims (by name): {describe()}. **ratio** = "
        "median latency of the result / median latency of the original, onnxruntime CPU, 1 intra-op "
        "thread, sequential, each round in a fresh random order (never starting with the session that "
        f"ended the round before), {children} child processes sharing the rounds and creating the sessions "
        "alternately in opposite orders, "
        "`GLIBC_TUNABLES=glibc.malloc.hugetlb=1` (without huge pages, sessions of one model ran 1.5x to 5x apart "
        "in one process here); **off**: onnxruntime's graph optimizations disabled (ORT_DISABLE_ALL) for "
        "both, so it shows what the tool did; **on**: ORT_ENABLE_ALL for both, what remains on top of "
        "onnxruntime's own optimizer; **-mt**: the same at onnxruntime's default thread count (one intra-op "
        f"thread per physical core) instead of 1. {runs_note} Lower is better; the best of a row is bold. "
        "**opt s**: the optimization call alone (onnxruntime: session creation, which includes "
        "loading). Equivalence: onnxruntime, optimizations off, random inputs, "
        f"`close` = max |diff| / max |original| <= {REL_TOL:g}. **control**: the original "
        "model itself measured as a result, in its own round-robin with the original: how far from 1.00 "
        "noise alone moves a ratio. `fail`: the tool failed; "
        "`n/i`: not installed; `(!)`: outputs differ beyond tolerance.",
        "",
    ]
    titles = (("off", "Latency ratio, onnxruntime optimizations off (what the tool did)"),
              ("all", "Latency ratio, onnxruntime optimizations on (ORT_ENABLE_ALL on top)"),
              ("off-mt", "Latency ratio, optimizations off, onnxruntime's default thread count"),
              ("all-mt", "Latency ratio, optimizations on, onnxruntime's default thread count"))
    measured = {s for r in recs for s in (r.get("latency") or {})}
    for setting, title in ((s, t) for s, t in titles if s in measured or s in ("off", "all")):
        lines += [f"## {title}", "", "| model | " + " | ".join(tools) + " |", "|---|" + "---:|" * len(tools)]
        for m in models:
            cells = _bold_best([_cell_ratio(by.get((m, t)), setting) for t in tools if t != "control"])
            if "control" in tools:
                cells.append(_cell_ratio(by.get((m, "control")), setting))
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        lines.append("")
    # eqsat vs ORT_ENABLE_ALL saved model
    lines += ["## eqsat against onnxruntime's ORT_ENABLE_ALL saved model (optimizations off)", "",
              "Ratios to the original (median; p10: ratio of the 10th percentiles); eqsat / ort-all > 1 means "
              "eqsat's output is slower than onnxruntime's saved model; control: the original against itself "
              f"(`noisy` where it is off 1.00 by more than {NOISY:.0%}: that row's figures are not conclusive).", "",
              "| model | eqsat | ort-all | eqsat / ort-all | eqsat p10 | ort-all p10 | best other tool | control |",
              "|---|---:|---:|---:|---:|---:|---|---:|"]

    def lat(m: str, t: str, key: str = "ratio") -> float | None:
        return (((by.get((m, t)) or {}).get("latency") or {}).get("off") or {}).get(key)

    def f2(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    for m in models:
        e, o = lat(m, "eqsat"), lat(m, "ort-all")
        others = [(t, lat(m, t)) for t in tools if t not in ("eqsat", "control")]
        others = [(t, v) for t, v in others if v is not None]
        best = min(others, key=lambda x: x[1]) if others else None
        lines.append(f"| {m} | {f2(e)} | {f2(o)} | {f2(e / o) if e and o else '-'} | "
                     f"{f2(lat(m, 'eqsat', 'p10_ratio'))} "
                     f"| {f2(lat(m, 'ort-all', 'p10_ratio'))} | {f'{best[0]} {best[1]:.2f}' if best else '-'} "
                     f"| {f2(lat(m, 'control'))}{' noisy' if abs((lat(m, 'control') or 1) - 1) > NOISY else ''} |")
    lines.append("")
    lines += ["## eqsat's ratios with 95 % intervals", "",
              "Ratio [95 % percentile bootstrap interval] (`bootstrap_ratio`: children resampled, then each "
              "one's rounds, each round's samples kept together). An interval that holds 1.00 does not tell "
              "the two apart; the control's shows how wide noise alone makes it; eqsat / ort-all pairs the two "
              "results' samples from the same rounds.", "",
              "| model | eqsat, off | eqsat / ort-all, off | eqsat, on | control, on |", "|---|---:|---:|---:|---:|"]

    def ci(m: str, t: str, setting: str) -> str:
        x = ((by.get((m, t)) or {}).get("latency") or {}).get(setting) or {}
        return _with_ci(x.get("ratio"), x.get("ci95"))

    for m in models:
        e, o = lat(m, "eqsat"), lat(m, "ort-all")
        pair = _with_ci(e / o if e and o else None, pair_interval(by.get((m, "eqsat")), by.get((m, "ort-all")), "off"))
        lines.append(f"| {m} | {ci(m, 'eqsat', 'off')} | {pair} | {ci(m, 'eqsat', 'all')} "
                     f"| {ci(m, 'control', 'all')} |")
    lines.append("")
    lines += ["## Nodes (top-level graph) and optimization time", "",
              "| model | original nodes | " + " | ".join(f"{t} nodes / opt s" for t in tools) + " |",
              "|---|---:|" + "---:|" * len(tools)]
    for m in models:
        nb = next((r["nodes_before"] for r in recs if r["model"] == m), "-")
        cells = []
        for t in tools:
            r = by.get((m, t))
            if r is None:
                cells.append("")
            elif not r.get("ok"):
                cells.append("n/i" if r.get("not_installed") else "fail")
            else:
                cells.append(f"{r['nodes']} / {r['opt_s']:.2f}")
        lines.append(f"| {m} | {nb} | " + " | ".join(cells) + " |")
    lines.append("")
    lines += ["## Equivalence with the original", "",
              "| model | " + " | ".join(tools) + " |", "|---|" + "---|" * len(tools)]
    for m in models:
        cells = []
        for t in tools:
            r = by.get((m, t))
            if r is None:
                cells.append("")
            elif not r.get("ok"):
                cells.append("n/i" if r.get("not_installed") else "fail")
            else:
                eq = r["equivalence"]
                s = eq["status"]
                if s in ("close", "MISMATCH") and "rel_diff" in eq:
                    s += f" {eq['rel_diff']:.0e}"
                cells.append(s)
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines.append("")
    fails = [r for r in recs if not r.get("ok") and not r.get("not_installed")]
    bad_eq = [r for r in recs if r.get("ok") and r["equivalence"]["status"] in ("MISMATCH", "error")]
    lat_err = [(r, s) for r in recs if r.get("ok") for s, lat in (r.get("latency") or {}).items() if "error" in lat]
    if fails or bad_eq or lat_err:
        lines += ["## Failures", ""]
        lines += [f"- {r['model']} / {r['tool']}: {r['error']}" for r in fails]
        lines += [f"- {r['model']} / {r['tool']}: equivalence {r['equivalence']['status']}: "
                  f"{r['equivalence'].get('detail') or ''} (rel diff "
                  f"{r['equivalence'].get('rel_diff', float('nan')):.2e})"
                  for r in bad_eq]
        lines += [f"- {r['model']} / {r['tool']}: latency ({s}): {r['latency'][s]['error']}" for r, s in lat_err]
        lines.append("")
    nis = sorted({(r["tool"], r["error"]) for r in recs if r.get("not_installed")})
    if nis:
        lines += ["Not installed: " + "; ".join(f"{t} ({e})" for t, e in nis), ""]
    # eqsat phases and memory plan
    eq_recs = [by[(m, "eqsat")] for m in models if by.get((m, "eqsat"), {}).get("ok")]
    if eq_recs:
        phases = ["shape_inference", "load_rules", "encode", "saturate", "serialize", "extract", "decode"]
        lines += ["## eqsat: phases (s), stop reason and memory plan of its output", "",
                  "Arena: eqsat.plan.plan_model on eqsat's output at the bound dims; lower bound: the largest "
                  "sum of simultaneously live buffers in the chosen order (MiB). eqsat ran from: "
                  + "; ".join(sorted({str(r.get("eqsat", {}).get("source", "?"))[:200] for r in eq_recs})) + ".", "",
                  "| model | " + " | ".join(phases) + " | stop | e-nodes | arena MiB | lower bound MiB | arena / LB |",
                  "|---|" + "---:|" * len(phases) + "---|---:|---:|---:|---:|"]
        for r in eq_recs:
            x = r.get("eqsat", {})
            ph = x.get("phases_s", {})
            pl = x.get("plan", {})
            plan = (f"{pl['arena_bytes'] / (1 << 20):.2f} | {pl['lower_bound_bytes'] / (1 << 20):.2f} | "
                    f"{pl['ratio']:.3f}"
                    if "arena_bytes" in pl else f"error: {pl.get('error', '?')} | | ")
            lines.append(f"| {r['model']} | " + " | ".join(f"{ph.get(p, 0):.2f}" for p in phases)
                         + f" | {x.get('stop_reason', '?')} | {x.get('enodes', '?')} | {plan} |")
        lines.append("")
    if plots:
        lines += ["## Plots", ""] + [f"![{p.stem}]({os.path.relpath(p, path.parent)})" for p in plots] + [""]
    # hand-written notes after the marker survive a rewrite
    old = path.read_text() if path.exists() else ""
    if NOTES_MARKER in old:
        lines += ["", old[old.index(NOTES_MARKER):].rstrip("\n")]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def write_plots(recs: list[dict], out_dir: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plots", file=sys.stderr)
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    by = {(r["model"], r["tool"]): r for r in recs}
    models = sorted({r["model"] for r in recs}, key=lambda m: (m.startswith("light_"), m))
    tools = [t for t in TOOLS if t != "control" and any(r["tool"] == t and r.get("ok") for r in recs)]
    paths = []
    fig, axes = plt.subplots(2, 1, figsize=(13, 8.5), sharex=True)
    w = 0.8 / max(1, len(tools))
    cmap = plt.get_cmap("tab10")
    for ax, (setting, title) in zip(axes, (("off", "onnxruntime optimizations off"),
                                           ("all", "onnxruntime optimizations on (ORT_ENABLE_ALL)")), strict=True):
        for j, t in enumerate(tools):
            xs, ys = [], []
            for i, m in enumerate(models):
                v = _ratio(by.get((m, t)), setting)
                if v is not None:
                    xs.append(i - 0.4 + w * (j + 0.5))
                    ys.append(v)
            ax.bar(xs, ys, w, label=t, color=cmap(j), edgecolor="black" if t == "eqsat" else None, linewidth=0.6)
        ctl = [(i, _ratio(by.get((m, "control")), setting)) for i, m in enumerate(models)]
        ctl = [(i, v) for i, v in ctl if v is not None]
        if ctl:
            ax.scatter(*zip(*ctl, strict=True), marker="_", s=900, color="black", linewidths=2.0, zorder=3,
                       label="control (original vs itself: noise)")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_ylabel("latency / original")
        ax.set_title(title, fontsize=10)
        ax.set_ylim(0.3, 1.4)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(ncol=(len(tools) + 2) // 2, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, 1.35))
    axes[1].set_xticks(range(len(models)))
    axes[1].set_xticklabels(models, rotation=40, ha="right", fontsize=8)
    fig.tight_layout()
    p = out_dir / "peers_latency.png"
    fig.savefig(p, dpi=80)
    plt.close(fig)
    paths.append(p)

    fig, ax = plt.subplots(figsize=(8, 5.5))
    for j, t in enumerate(tools):
        pts = [(r["nodes_before"], r["opt_s"]) for r in recs if r["tool"] == t and r.get("ok")]
        if pts:
            ax.scatter(*zip(*pts, strict=True), label=t, color=cmap(j), s=22,
                       marker="o" if t == "eqsat" else "x" if t.startswith("ort") else "^")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes of the original model")
    ax.set_ylabel("optimization time (s)")
    ax.set_title("Optimization time against node count (corpus)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    p = out_dir / "peers_opt_time.png"
    fig.savefig(p, dpi=80)
    plt.close(fig)
    paths.append(p)
    return paths


# ---- main ---------------------------------------------------------------------------------------

def corpus(models_dir: Path, only: str) -> list[Path]:
    paths = sorted(models_dir.glob("*.onnx"), key=lambda p: p.stat().st_size)
    if only:
        keep = set(only.split(","))
        paths = [p for p in paths if p.name[:-5] in keep or p.name in keep]
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=ROOT / "benchmarks/models")
    ap.add_argument("--only", default="", help="comma-separated model names (file names without .onnx)")
    ap.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated, from {','.join(TOOLS)}")
    ap.add_argument("--runs", type=int, default=30, help="latency rounds per setting (default 30)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--max-s", type=float, default=120.0,
                    help="stop a latency measurement after this many seconds once 10 rounds are done")
    ap.add_argument("--settings", default="off,all",
                    help="onnxruntime settings for latency, from off,all,off-mt,all-mt (-mt: its default thread count)")
    ap.add_argument("--children", type=int, default=4,
                    help="child processes per latency measurement, sharing the rounds (default 4)")
    ap.add_argument("--mem-budget", type=float, default=4.0, help="GiB of sessions in one latency child")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per child process")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/out", help="cache of records per (model, tool)")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks/RESULTS.md")
    ap.add_argument("--plots", type=Path, default=ROOT / "benchmarks/results")
    ap.add_argument("--force", action="store_true", help="ignore cached records")
    ap.add_argument("--keep-models", action="store_true", help="keep the optimized models in OUT")
    ap.add_argument("--report-only", action="store_true", help="only rewrite RESULTS.md and plots from the cache")
    ap.add_argument("--eqsat-commit", metavar="REV",
                    help="run eqsat as of this commit (exported with git archive), not the working tree")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(_child(json.loads(a.child)), default=str))
        return 0
    global EQSAT_SRC
    if a.eqsat_commit:
        EQSAT_SRC = export_eqsat(a.eqsat_commit, a.out)
        print(f"eqsat from {EQSAT_SRC}", flush=True)
    a.settings = [s for s in a.settings.split(",") if s]
    if bad := [s for s in a.settings if s not in SETTINGS]:
        ap.error(f"unknown setting(s) {bad}; choose from {SETTINGS}")
    tools = [t for t in a.tools.split(",") if t]
    if bad := [t for t in tools if t not in TOOLS]:
        ap.error(f"unknown tool(s) {bad}; choose from {', '.join(TOOLS)}")
    paths = corpus(a.models, a.only)
    if not paths and not a.report_only:
        print(f"no models in {a.models}; build them with `make corpus`", file=sys.stderr)
        return 2
    command = "python benchmarks/peers.py" + ("" if argv is None and len(sys.argv) == 1 else " " + shlex.join(
        sys.argv[1:] if argv is None else argv))
    if not a.report_only:
        for t in tools:
            if why := missing(t):
                print(f"{t}: {why}; recorded as not installed", file=sys.stderr)
        for p in paths:
            t0 = time.perf_counter()
            print(f"{p.name} ({p.stat().st_size / (1 << 20):.0f} MiB)", flush=True)
            bench_model(p, tools, a)
            print(f"{p.name}: {time.perf_counter() - t0:.0f} s", flush=True)
            _report(a, command)
    _report(a, command)
    return 0


def _report(a, command: str) -> None:
    recs = load_all(a.out)
    if not recs:
        return
    plots = write_plots(recs, a.plots)
    runs = sorted({lat["runs"] for r in recs for lat in (r.get("latency") or {}).values() if "runs" in lat})
    note = (f"Rounds per measurement: {runs[0]} to {runs[-1]} (at most `--runs`, fewer for the slowest "
            "models past `--max-s`), after 3 warm-up rounds." if runs else "")
    if a.report_only and a.results.exists():  # keep the command that measured
        import re

        m = re.search(r"^Command: `([^`]*)`", a.results.read_text(), re.M)
        if m and "--report-only" not in m.group(1):
            command = m.group(1)
    write_results(recs, a.results, command, plots, note)


if __name__ == "__main__":
    sys.exit(main())
