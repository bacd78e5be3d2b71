"""Properties of invalid (or suspicious) input: eqsat exits 1 or 2 with one line
`eqsat: error: ...` last on stderr, no traceback, and leaves its folder as it was; or, where
the input was valid after all, exits 0 having written only what it was asked to, and the
model it wrote computes what the input computes (on random feeds, under onnxruntime).

- `model_file_is_clean`: a model file spoiled as bytes or as a protobuf message
  (mutate_model), through optimize, plan, show, diff.
- `scenario_is_clean`: external data, rule files, saved e-graphs and choice files,
  environment variables, arguments (scenarios).
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from . import clirun, failures, oracle, stats
from .scenarios import Scenario

ERROR = clirun.ERROR


MAX_FEED = 1 << 22  # elements: larger inputs are not compared (a mutated dim of 2^40)


def generic_feeds(model: onnx.ModelProto, n: int = 2, seed: int = 0) -> dict[str, np.ndarray] | None:
    """Random feeds for a model's inputs that are not initializers: floats normal, integers
    0 or 1 (valid as indices), symbolic or unknown dimensions n; None where an input would
    be larger than MAX_FEED elements or its type has no numpy dtype."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        try:
            dt = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        except (KeyError, ValueError):
            return None
        shape = [d.dim_value if d.dim_value > 0 else n for d in tt.shape.dim]
        if np.prod(shape, dtype=np.float64) > MAX_FEED:
            return None
        if dt == np.bool_:
            feeds[vi.name] = np.asarray(rng.random(shape) < 0.5)
        elif np.issubdtype(dt, np.integer):
            feeds[vi.name] = np.asarray(rng.integers(0, 2, size=shape), dt)
        else:
            feeds[vi.name] = np.asarray(rng.standard_normal(shape), dt)
    return feeds


def _session(path: Path) -> ort.InferenceSession | None:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    try:
        return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - not runnable: nothing to compare with
        return None


def assert_same_model(original: Path, optimized: Path, input_must_run: bool = False) -> None:
    """Where onnxruntime runs `original` (from its file, with its data), `optimized` runs
    and gives the same outputs on two random feeds."""
    a = _session(original)
    if a is None:
        assert not input_must_run, "exit 0, but onnxruntime cannot load the input"
        return
    try:
        model = onnx.load(str(original), load_external_data=False)
    except Exception:  # noqa: BLE001 - onnx cannot parse what onnxruntime runs: compare nothing
        return
    b = None
    for seed in range(2):
        feeds = generic_feeds(model, seed=seed)
        if feeds is None:
            return
        try:
            exp = dict(zip([o.name for o in a.get_outputs()], a.run(None, feeds), strict=True))
        except Exception:  # noqa: BLE001 - these feeds do not suit the input
            return
        b = b or _session(optimized)
        assert b is not None, "onnxruntime runs the input but cannot load the output"
        try:
            got = dict(zip([o.name for o in b.get_outputs()], b.run(None, feeds), strict=True))
        except Exception as e:  # noqa: BLE001
            raise AssertionError(f"the output fails where the input runs: {e}") from None
        bad = oracle.compare(exp, got)
        assert not bad, "; ".join(bad)


def _judge(prop: str, rc: int, err: str, d: Path, before: dict, outputs: tuple[str, ...], args: list[str],
           verdict_ok: bool = False) -> bool:
    """Check the exit; True when it succeeded (the caller checks what was written)."""
    if rc == 0:
        clirun.assert_no_traceback(rc, err)
        after = clirun.snapshot(d)
        removed = sorted(set(before) - set(after))
        stray = sorted(k for k in after if after[k] != before.get(k) and k not in outputs)
        assert not removed and not stray, f"exit 0, but removed {removed} and wrote {stray}"
        return True
    if verdict_ok and rc == 1 and ERROR not in err:
        clirun.assert_no_traceback(rc, err)
    else:
        line = clirun.assert_clean_failure(rc, err)
        stats.refused(prop, line)
    kept = ("e.json",) if rc == 1 and any(str(a).endswith("e.json") for a in args) else ()
    clirun.assert_unchanged(before, d, may_add=kept)
    return False


COMMANDS = {
    "optimize": (["optimize", "{src}", "-o", "{d}/o.onnx", "-q"], ("o.onnx",)),
    "optimize-nchw": (["optimize", "{src}", "-o", "{d}/o.onnx", "-q", "--layout", "nchw", "--target", "onnx"],
                      ("o.onnx",)),
    "plan": (["plan", "{src}", "-q", "--dim", "N=2", "-o", "{d}/p.json"], ("p.json",)),
    "show": (["show", "{src}", "--svg", "{d}/g.svg"], ("g.svg",)),
    "diff": (["diff", "{src}", "{src}"], ()),
}


def model_file_is_clean(mutated: tuple[bytes, str], command: str) -> None:
    prop = "model_file_is_clean"
    stats.example(prop)
    data, _what = mutated
    template, outputs = COMMANDS[command]
    with tempfile.TemporaryDirectory(prefix="eqsat-fuzz-") as d:
        d = Path(d)
        src = d / "m.onnx"
        src.write_bytes(data)
        args = [a.replace("{src}", str(src)).replace("{d}", str(d)) for a in template]
        before = clirun.snapshot(d)
        with failures.kept(prop, {"m.onnx": data, "command.txt": " ".join(template)}):
            rc, _, err = clirun.cli(args)
            if _judge(prop, rc, err, d, before, outputs, args) and command.startswith("optimize"):
                assert (d / "o.onnx").exists(), "exit 0 but no output"
                assert_same_model(src, d / "o.onnx")


def _lay_out(sc: Scenario, d: Path) -> None:
    ds = str(d)
    for rel, content in sc.files.items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, onnx.ModelProto):
            m = copy.deepcopy(content)
            for t in m.graph.initializer:
                for e in t.external_data:
                    e.value = e.value.replace("{d}", ds)
            content = m.SerializeToString()
        p.write_bytes(content.replace(b"{d}", ds.encode()))
    for rel, target in sc.links.items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target.replace("{d}", ds), p)


def scenario_is_clean(sc: Scenario, prop: str = "scenario_is_clean") -> None:
    stats.example(prop)
    with tempfile.TemporaryDirectory(prefix="eqsat-fuzz-") as d:
        d = Path(d)
        _lay_out(sc, d)
        ds = str(d)
        args = [a.replace("{d}", ds) for a in sc.args]
        env = {k: v.replace("{d}", ds) for k, v in sc.env.items()}
        before = clirun.snapshot(d)
        pre = None
        if failures.folder(prop) is not None:  # the folder as laid out, kept if the example fails
            pre = Path(tempfile.mkdtemp(prefix="eqsat-fuzz-pre-"))
            shutil.copytree(d, pre, symlinks=True, dirs_exist_ok=True)
        try:
            with failures.kept(prop, {"scenario.txt": repr(sc)}, pre):
                _run_scenario(sc, prop, d, args, env, before)
        finally:
            if pre is not None:
                shutil.rmtree(pre, ignore_errors=True)


def _run_scenario(sc: Scenario, prop: str, d: Path, args: list[str], env: dict, before: dict) -> None:
    if sc.subprocess:
        rc, _, err = clirun.subprocess(args, env=env, cwd=d)
    else:
        assert not env, "environment variables need a subprocess"
        rc, _, err = clirun.cli(args)
    if not _judge(prop, rc, err, d, before, sc.outputs, args, sc.verdict_ok):
        return
    assert not sc.must_refuse, f"exit 0 for an input eqsat must refuse; stderr:\n{err}"
    if not sc.model:
        return
    out = next((d / o for o in sc.outputs if o.endswith(".onnx") and (d / o).exists()), None)
    if "--in-place" in args:
        out = d / sc.model
    if out is None:
        return
    # compare with the input as it was (an in-place run replaced it)
    original = d / "orig" / Path(sc.model).name
    original.parent.mkdir(exist_ok=True)
    content = sc.files[sc.model]
    if isinstance(content, onnx.ModelProto):  # beside its data file: compare in its own folder
        original = d / sc.model
    else:
        original.write_bytes(content)
    assert_same_model(original, out, sc.input_must_run)
