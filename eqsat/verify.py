"""Running models under onnxruntime and comparing outputs.

Used by tests (exact equality after a round trip), by verification of optimized models,
and by benchmarks. onnxruntime is optional at import time: install `eqsat[cpu]` or
`eqsat[gpu]`.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import ModelProto

from .errors import EqsatError
from .lang.dtypes import np_dtype
from .randomness import random_ops
from .shapes import type_of


def ort():
    try:
        import onnxruntime
    except ImportError:
        raise EqsatError(
            "onnxruntime is not installed: pip install 'eqsat[cpu]' (or 'eqsat[gpu]')"
        ) from None
    return onnxruntime


def session(model: ModelProto | str | os.PathLike, optimize: bool = True, threads: int = 1, providers: list[str] | None = None):
    rt = ort()
    so = rt.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 4
    if not optimize:
        so.graph_optimization_level = rt.GraphOptimizationLevel.ORT_DISABLE_ALL
    providers = providers or ["CPUExecutionProvider"]
    if isinstance(model, (str, os.PathLike)):
        # an ONNX model, whatever its name (onnxruntime reads a path ending in .ort as its own format)
        so.add_session_config_entry("session.load_model_format", "ONNX")
        return rt.InferenceSession(str(model), so, providers=providers)
    from .modelio import on_disk, save_model

    if on_disk(model):
        # weights on disk or too big for one protobuf: run it from a saved copy
        with tempfile.TemporaryDirectory(prefix="eqsat-run-") as d:
            path = save_model(model, Path(d) / "model.onnx", check=False)
            return rt.InferenceSession(str(path), so, providers=providers)
    return rt.InferenceSession(model.SerializeToString(), so, providers=providers)


def run(model: ModelProto | str, feeds: dict[str, np.ndarray], optimize: bool = True) -> dict[str, np.ndarray]:
    sess = session(model, optimize)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def random_inputs(model: ModelProto, dims: dict[str, int] | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Random feeds for the graph inputs that are not initializers. Symbolic or unknown
    dimensions take their value from `dims` (by name), else 2."""
    rng = np.random.default_rng(seed)
    dims = dims or {}
    inits = {t.name for t in model.graph.initializer}
    shapes: dict[str, tuple[list[int], np.dtype]] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        t = type_of(vi.type)
        if t is None or not t.elem:
            raise EqsatError(f"input '{vi.name}' is not a tensor of known element type")
        shape = [d if isinstance(d, int) else dims.get(d, 2) if isinstance(d, str) else 2 for d in (t.dims or ())]
        shapes[vi.name] = (shape, np_dtype(t.elem))
    # numpy draws them as 8-byte values, then casts
    need = sum(int(np.prod(shape, dtype=object)) * (8 + dt.itemsize) for shape, dt in shapes.values())
    if need > _memory() // 2:
        at = f"at these sizes ({', '.join(f'{k}={v}' for k, v in dims.items())})" if dims else "of these shapes"
        raise EqsatError(f"making random inputs {at} takes {need / (1 << 30):,.1f} GiB, more than half of this "
                         "machine's memory" + (": give smaller --dim values to verify" if dims else ""))
    feeds: dict[str, np.ndarray] = {}
    for name, (shape, dt) in shapes.items():
        if dt == np.bool_:
            feeds[name] = np.asarray(rng.random(shape) < 0.5)
        elif np.issubdtype(dt, np.integer):
            feeds[name] = rng.integers(0, 2, size=shape).astype(dt)
        elif np.issubdtype(dt, np.floating):
            feeds[name] = rng.standard_normal(shape).astype(dt)
        elif dt == np.object_:
            feeds[name] = np.array(["a"] * int(np.prod(shape)), dtype=object).reshape(shape)
        else:
            feeds[name] = rng.standard_normal(shape).astype(dt)
    return feeds


def _memory() -> int:
    """Bytes of physical memory (a large number where the system does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 50


@dataclass
class Mismatch:
    output: str
    detail: str

    def __str__(self) -> str:
        return f"output '{self.output}': {self.detail}"


# Verification's tolerance where the user gives none, by output element type: rewrites
# reorder arithmetic and so move the last bits, and onnxruntime's CPU provider runs many
# float16 ops in float32 with casts placed by the graph's structure (a float16 value has
# about three decimal digits). No bfloat16 entry: onnxruntime cannot hand bfloat16 outputs
# to numpy, so such a model is "not possible" to verify before any tolerance applies.
# float64 outputs are held to double precision (reordering moves a double by about 1e-15
# of its magnitude): with float32's tolerance a rewrite that ran a double computation in
# float32 passed.
DEFAULT_TOLERANCE = (1e-3, 1e-4)  # (rtol, atol)
TOLERANCE = {"float16": (1e-2, 1e-3), "float64": (1e-9, 1e-12)}


def tolerance(dtype) -> tuple[float, float]:
    """(rtol, atol) for outputs of this element type when the user gives none."""
    return TOLERANCE.get(np.dtype(dtype).name, DEFAULT_TOLERANCE)


def compare(expected: dict[str, np.ndarray], actual: dict[str, np.ndarray], rtol: float | None = 0.0,
            atol: float | None = 0.0) -> list[Mismatch]:
    """Differences between two runs: names, dtypes, shapes, then values (exact when
    rtol = atol = 0; NaN equals NaN; None: `tolerance` of each output's element type)."""
    out: list[Mismatch] = []
    if list(expected) != list(actual):
        return [Mismatch(",".join(actual), f"output names differ: expected {list(expected)}")]
    for name, e in expected.items():
        out.extend(_compare_value(name, e, actual[name], rtol, atol))
    return out


def _compare_value(name: str, e: object, a: object, rtol: float | None, atol: float | None) -> list[Mismatch]:
    """One output: a tensor, a sequence (list) of tensors, a map, or None (optional)."""
    out: list[Mismatch] = []
    if e is None or a is None:
        return [] if e is None and a is None else [Mismatch(name, f"{a!r} vs expected {e!r}")]
    if isinstance(e, dict) or isinstance(a, dict):
        if not (isinstance(e, dict) and isinstance(a, dict)) or list(e) != list(a):
            return [Mismatch(name, "maps differ in their keys")]
        for k in e:
            out.extend(_compare_value(f"{name}[{k!r}]", e[k], a[k], rtol, atol))
        return out
    if isinstance(e, list) or isinstance(a, list):
        if not (isinstance(e, list) and isinstance(a, list)) or len(e) != len(a):
            return [Mismatch(name, "sequences differ in length or kind")]
        for i, (x, y) in enumerate(zip(e, a, strict=True)):
            out.extend(_compare_value(f"{name}[{i}]", x, y, rtol, atol))
        return out
    return _compare_tensor(name, np.asarray(e), np.asarray(a), rtol, atol)


def _compare_tensor(name: str, e: np.ndarray, a: np.ndarray, rtol: float | None, atol: float | None
                    ) -> list[Mismatch]:
    if e.dtype != a.dtype:
        return [Mismatch(name, f"dtype {a.dtype}, expected {e.dtype}")]
    if rtol is None or atol is None:
        r, t = tolerance(e.dtype)
        rtol, atol = r if rtol is None else rtol, t if atol is None else atol
    if e.shape != a.shape:
        return [Mismatch(name, f"shape {a.shape}, expected {e.shape}")]
    if e.dtype == object or e.dtype.kind in "SUb":
        return [] if np.array_equal(e, a) else [Mismatch(name, "values differ")]
    if e.dtype.kind not in "iufc":  # ml_dtypes (bfloat16, float8, int4, ...): compare as float32
        try:
            e, a = e.astype(np.float32), a.astype(np.float32)
        except (TypeError, ValueError):
            return [] if e.tobytes() == a.tobytes() else [Mismatch(name, "values differ")]
    if rtol or atol:
        ok = np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    elif e.dtype.kind in "fc":
        ok = (a == e) | (np.isnan(a) & np.isnan(e))
    else:
        ok = a == e
    if np.all(ok):
        return []
    idx = tuple(int(i) for i in np.argwhere(~ok)[0])
    worst = ""
    if e.dtype.kind in "fiu":
        err = np.abs(a.astype(np.float64) - e.astype(np.float64))
        worst = f", max abs diff {float(np.nanmax(err)):.3g}"
    return [Mismatch(name, f"{int((~ok).sum())} of {e.size} values differ, first at {idx}: "
                           f"{_scalar(a[idx])} vs expected {_scalar(e[idx])}{worst}")]


def _scalar(v) -> str:
    """One element as a user reads it: 0.083480641, not np.float32(0.083480641)."""
    x = v.item() if hasattr(v, "item") else v
    return f"{x:.8g}" if isinstance(x, float) else repr(x)


def onnx_checker_ok(model: ModelProto) -> str | None:
    """None if the onnx checker accepts the model, else its first line of complaint."""
    try:
        onnx.checker.check_model(model)
        return None
    except onnx.checker.ValidationError as e:
        return str(e).strip().splitlines()[0]


@dataclass
class Verification:
    status: str  # passed | failed | not possible
    detail: str = ""
    runs: int = 0

    def as_dict(self) -> dict:
        return {"status": self.status, "detail": self.detail, "runs": self.runs}


def verify(original: ModelProto, optimized: ModelProto, runs: int = 1, rtol: float | None = None,
           atol: float | None = None, dims: dict[str, int] | None = None,
           files: tuple[str | os.PathLike | None, str | os.PathLike | None] = (None, None)) -> Verification:
    """Compare the optimized model with the original under onnxruntime on `runs` sets of
    random inputs (seeds 0, 1, ...), within rtol/atol (None: `tolerance` of each output's
    element type). Symbolic dimensions not in `dims` take the first sizes of
    `verification_dims` the original runs with. Not possible (never silently passed) when
    onnxruntime cannot run the original, the inputs cannot be made up, or the model has
    random ops (`random_ops`); failed on any difference beyond the tolerance, or when
    onnxruntime cannot run the optimized model.
    `files` are where the two models are saved, if they are: onnxruntime reads a file
    faster than it gets a model serialized again (seconds for a 500 MB model)."""
    rnd = random_ops(original)
    if rnd:
        return Verification("not possible", f"the model has random ops ({', '.join(sorted(rnd))}): two runs of it "
                                            "differ, so there is nothing to compare")
    try:
        ref_sess = session(files[0] or original)
    except Exception as e:  # noqa: BLE001 - an op onnxruntime lacks, a custom domain, ...
        return Verification("not possible", f"onnxruntime cannot run the original: {_line(e)}")
    try:
        opt_sess = session(files[1] or optimized)
    except Exception as e:  # noqa: BLE001
        return Verification("failed", f"onnxruntime cannot run the optimized model: {_line(e)}")
    names = [o.name for o in ref_sess.get_outputs()]
    sizes: dict[str, int] | None = None  # the symbolic sizes the original ran with
    dtypes: set[str] = set()
    for seed in range(runs):
        if sizes is None:
            first = None
            tried = verification_dims(original, dims)
            for attempt in tried:
                try:
                    feeds = random_inputs(original, attempt, seed=seed)
                except EqsatError as e:
                    return Verification("not possible", str(e))
                try:
                    expected = dict(zip(names, ref_sess.run(names, feeds), strict=True))
                except Exception as e:  # noqa: BLE001 - e.g. random ids out of a table's range, a size too small
                    first = first or e
                    continue
                sizes = attempt
                break
            if sizes is None:
                shown = "; ".join(_listed(t) for t in tried[:TRIES_SHOWN])
                if len(tried) > TRIES_SHOWN:
                    shown += f"; and {len(tried) - TRIES_SHOWN} more"
                hint = (f" (symbolic sizes tried: {shown}; pass --dim NAME=SIZE "
                        "for the sizes the model needs)") if tried != [dict(dims or {})] else ""
                return Verification("not possible",
                                    f"onnxruntime cannot run the original on random inputs: {_line(first)}{hint}")
        else:
            feeds = random_inputs(original, sizes, seed=seed)
            try:
                expected = dict(zip(names, ref_sess.run(names, feeds), strict=True))
            except Exception as e:  # noqa: BLE001
                return Verification("not possible", f"onnxruntime cannot run the original on random inputs: "
                                                    f"{_line(e)}")
        try:
            got = dict(zip(names, opt_sess.run(names, feeds), strict=True))
        except Exception as e:  # noqa: BLE001
            return Verification("failed", f"onnxruntime cannot run the optimized model: {_line(e)}", seed + 1)
        dtypes |= {v.dtype.name for v in expected.values()
                   if hasattr(v, "dtype") and v.dtype.name.startswith(("float", "bfloat"))}
        bad = compare(expected, got, rtol, atol)
        if bad:
            return Verification("failed", "; ".join(map(str, bad[:3])) + f" (random inputs, seed {seed}"
                                + _sizes(sizes) + ")", seed + 1)
    return Verification("passed", f"{runs} run(s) within {_tolerances(rtol, atol, dtypes)}{_sizes(sizes)}", runs)


TRIES_SHOWN = 4  # sizes a "not possible" message lists
PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)


def symbolic_input_dims(model: ModelProto) -> list[str]:
    """The names of the symbolic dimensions of the graph's inputs, in order of appearance."""
    return list(dict.fromkeys(d.dim_param for vi in model.graph.input for d in vi.type.tensor_type.shape.dim
                              if d.dim_param))


def verification_dims(model: ModelProto, dims: dict[str, int] | None = None) -> list[dict[str, int]]:
    """Sizes to try, in order, for the symbolic dimensions of the model's inputs that `dims`
    does not bind: first a different small size for each (2, 3, 5, ... in order of
    appearance, so that a rewrite confusing batch with sequence shows), then 2 for all, then
    the first sizes with one dimension the sum of two others (`related_sizes`: a decoder
    with a KV cache needs total = past + sequence), then the first sizes 16 and 128 times
    larger for every dimension but a batch (an audio model's sample count or a vision
    model's height may need hundreds)."""
    dims = dict(dims or {})
    every = symbolic_input_dims(model)
    names = [n for n in every if n not in dims]
    if not names:
        return [dims]
    small = {n: PRIMES[i % len(PRIMES)] for i, n in enumerate(names)}
    both = {n: dims[n] if n in dims else small[n] for n in every}
    out = [small, dict.fromkeys(names, 2), *related_sizes(both, names)]
    for k in (16, 128):
        out.append({n: v if "batch" in n.lower() else v * k for n, v in small.items()})
    tries: list[dict[str, int]] = []
    for d in out:
        if {**d, **dims} not in tries:
            tries.append({**d, **dims})
    return tries


RELATED_MAX = 6  # related_sizes looks for sums among at most this many dimensions


def related_sizes(sizes: dict[str, int], free: list[str]) -> list[dict[str, int]]:
    """`sizes` with one dimension c of `free` (those the user did not bind) set to the sum
    of two others a and b (bound or not), then to their difference a - b where that is
    positive, for every such choice among the dimensions that are not a batch, in order of
    appearance. A decoder's step with a KV cache takes past keys [batch, heads, past, d],
    new tokens [batch, sequence] and an attention mask [batch, total], and runs only where
    total = past + sequence; no choice of independent sizes satisfies that, and where the
    user binds total (and past or sequence), the other is a difference. With more than
    RELATED_MAX such dimensions none is tried (pass --dim)."""
    names = [n for n in sizes if "batch" not in n.lower()]
    if len(names) < 3 or len(names) > RELATED_MAX:
        return []
    sums, differences = [], []
    for c in (n for n in names if n in free):
        rest = [n for n in names if n != c]
        for i, a in enumerate(rest):
            for b in rest[i + 1:]:
                sums.append({**sizes, c: sizes[a] + sizes[b]})
                if sizes[a] != sizes[b]:
                    differences.append({**sizes, c: abs(sizes[a] - sizes[b])})
    return sums + differences


def _listed(sizes: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def _sizes(sizes: dict[str, int] | None) -> str:
    return f"; symbolic sizes {_listed(sizes)}" if sizes else ""


def _tolerances(rtol: float | None, atol: float | None, dtypes: set[str]) -> str:
    """The tolerance a verification used, per output element type where it was the default."""
    parts = []
    for dt in sorted(dtypes) or ["float32"]:
        r, t = tolerance(dt)
        r, t = r if rtol is None else rtol, t if atol is None else atol
        parts.append((dt, f"rtol {r:g}, atol {t:g}"))
    if len({p for _, p in parts}) == 1:
        return parts[0][1]
    return "; ".join(f"{p} ({dt})" for dt, p in parts)


def _line(e: Exception) -> str:
    s = " ".join(str(e).split())
    return s[:240]
