"""Telling float16 rounding from error: verification of half-precision models against
float32 copies of themselves.

A float16 (or bfloat16) model rounds at the places its graph puts float16 values; a fused
program (a LayerNormalization for its chain of ops, an attention, a folded constant) rounds
at others, so the two float16 runs can differ by more than the float16 tolerance while the
optimized program is as close to the exact result as the original is. `verify_half` is
what `eqsat.verification.verify` does for such a model: its verification, each run of which
`judge` also checks against float32 copies (step 2), and where step 2 excused a difference
that the float16 tolerance does not, step 1 too:

1. the program: float32 copies of both models (`widened`: every float16 and bfloat16
   initializer, Constant, Cast target, input, output and value type made float32, but a
   Cast of a constant to float16 followed by one to float32; the optimized model's folded
   constants keep their float16 values) must agree as any float32 models do (the whole
   verification, edge cases included, at float32's tolerance);
2. the rounding: an output that a run of the float16 verification finds apart beyond the
   tolerance (`judge`) stands only where the optimized model's float16 run is within
   max(the tolerance, HALF_ERROR_FACTOR times the original's own largest distance) of the
   original's float32 copy on the same inputs (the truth), with a non-finite value only where
   the original's run has the same one, or where the optimized run is finite and within that
   bound of a finite truth (the original overflowed). The original's own distance is the
   larger of its onnxruntime run's and its `rounded` run's (each op's result rounded to
   float16, as the ONNX specification and a float16 kernel compute it: onnxruntime's CPU
   provider runs a chain of float16 ops in float32 and rounds at its ends, so a fused
   LayerNormalization that rounds its input is farther from the truth than onnxruntime's
   run of the original chain, and as far as the specification's). In each run every float16
   output of the optimized model's `rounded` copy must keep to the same bound, which is where
   an overflow of float16 that onnxruntime's float32 chains hide shows. Where the original
   casts a computed value to a half type (Cast, or CastLike to a half value), its float32
   copy drops a rounding the program asks for, and is another function where that rounding
   matters (a float32 value split into float16 parts, a rounding before a comparison): the
   excused output must then keep to the same bound of the original's `kept` copy too (those
   roundings done, the rest in float32), or a program that drops them, as close to the
   float32 copy as can be, would be excused.

Both must hold; where a float32 copy cannot be made or run (a sparse or external initializer,
an op without a float32 kernel), or the refusal was no difference of values (a crash, a
shape, nodes fed stand-ins), the refusal stands as it was. A program right in float32 that
overflows in float16 where the original does not is refused by step 2 (its float16 run is
not finite where the truth and the original's are); a fold done in float32 and stored in
float16 keeps its stored value in the float32 copy, which step 1 compares.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Callable

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, numpy_helper

from eqsat.verification.mismatch import Mismatch
from eqsat.verification.outcome import Verification

HALF = frozenset({TensorProto.FLOAT16, TensorProto.BFLOAT16})
HALF_NAMES = frozenset({"float16", "bfloat16"})
# `judge`: the optimized float16 run may be this many times as far from the float32 truth as the
# original is. On the float16 exports of T5, OPT, StableLM, Gemma 2 and Qwen3
# (benchmarks/architectures.py --fp16), seeds 0 to 4, eqsat's program was 0.71 to 1.77 times as far
# as onnxruntime's run of the original, at most 1.00 times the larger of that and the original's
# rounded run, and its own rounded run at most 1.01 times
HALF_ERROR_FACTOR = 2.0
# attributes that name an element type (Cast's to, RandomNormal's dtype, ...)
_TYPE_ATTRS = frozenset({"to", "dtype", "output_dtype"})

# the Truth of the verification `verify_half` runs; empty otherwise
_TRUTH: list[Truth] = []
# `verify_half` makes no float32 copies of models with more float16 weights than this (bytes):
# three float32 copies (the original's, and both `rounded`) are held while it runs
WIDEN_LIMIT = 256 << 20
_ACTIVE: list[bool] = []  # not empty while `verify_half` runs a verification of its own


def is_half(model: ModelProto) -> bool:
    """Whether a graph input or output of `model` is a float16 or bfloat16 tensor."""
    return any(v.type.tensor_type.elem_type in HALF for v in (*model.graph.input, *model.graph.output))


def applies(model: ModelProto) -> bool:
    """Whether `verify` hands this model to `verify_half` (not while it runs one itself)."""
    return not _ACTIVE and is_half(model)


def widened(model: ModelProto) -> ModelProto | None:
    """A copy of `model` with every float16 and bfloat16 value made float32 (initializers,
    Constant and other tensor attributes, element-type attributes, inputs, outputs and value
    types, in subgraphs too), but for the rounding of a Cast to float16 or bfloat16 of a
    constant, kept as that Cast followed by one to float32 (a float32 weight cast to float16 at
    run time, which eqsat folds into a float16 initializer, is rounded in both copies; a Cast of
    a computed value is not kept: a fused program rounds at other places, such as inside a
    normalization computed in float32); None where it holds what this does not convert (a
    sparse initializer, a tensor stored outside the model)."""
    out = copy.deepcopy(model)
    try:
        _widen_graph(out.graph)
    except _Unconvertible:
        return None
    return out


def kept(model: ModelProto) -> ModelProto | None:
    """The `widened` copy of `model` keeping the rounding of every Cast to float16 or bfloat16
    (of a computed value too, as that Cast followed by one to float32): the program as `model`
    writes it, each rounding it asks for done, the rest in float32. None where `widened` is, or
    where `model` casts no computed value to a half type (the copy is `widened`'s). Where the
    original rounds a computed value on purpose (a float32 value split into float16 parts, a
    rounding before a comparison or an integer Cast), its `widened` copy is another function,
    and a program that drops the rounding would be as close to it as can be: `judge` holds an
    excused output to this copy too."""
    out = _castlike_as_cast(copy.deepcopy(model))
    found: list[bool] = []
    try:
        _widen_graph(out.graph, found)
    except _Unconvertible:
        return None
    return out if found else None


def _castlike_as_cast(model: ModelProto) -> ModelProto:
    """`model` (changed in place) with each CastLike of its main graph whose target is a float16 or
    bfloat16 value made the Cast to that type (`widened` makes the target float32, and the CastLike
    then rounds nothing)."""
    try:
        typed = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # noqa: BLE001 - the types not known: the CastLikes stay
        return model
    types = {v.name: v.type.tensor_type.elem_type for v in (*typed.input, *typed.value_info, *typed.output)}
    types |= {t.name: t.data_type for t in model.graph.initializer}
    for i, n in enumerate(model.graph.node):
        if n.op_type == "CastLike" and n.domain in ("", "ai.onnx") and types.get(n.input[1]) in HALF:
            model.graph.node[i].CopyFrom(onnx.helper.make_node("Cast", [n.input[0]], list(n.output), name=n.name,
                                                               to=types[n.input[1]]))
    return model


class _Unconvertible(Exception):
    pass


def _widen_graph(g: onnx.GraphProto, keep: list[bool] | None = None) -> None:
    """Widens `g` in place; `keep` not None: every Cast to a half type kept as a rounding (`kept`),
    one True appended to `keep` for each of a computed value."""
    if any(s.values.data_type in HALF for s in g.sparse_initializer):
        raise _Unconvertible
    for i, t in enumerate(g.initializer):
        if t.data_type in HALF:
            g.initializer[i].CopyFrom(_widen_tensor(t))
    for v in (*g.input, *g.output, *g.value_info):
        _widen_type(v.type)
    nodes = []
    constants = {t.name for t in g.initializer} | {o for n in g.node if n.op_type == "Constant" for o in n.output}
    for n in g.node:
        nodes.append(n)
        to = next((a.i for a in n.attribute if a.name == "to"), None)
        if n.op_type == "Cast" and n.domain in ("", "ai.onnx") and to in HALF \
                and (n.input[0] in constants or keep is not None):
            if n.input[0] not in constants:
                keep.append(True)
            out = n.output[0]
            n.output[0] = f"{out}__eqsat_rounded"
            nodes.append(onnx.helper.make_node("Cast", [n.output[0]], [out], to=TensorProto.FLOAT))
            continue
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type in HALF:
                a.t.CopyFrom(_widen_tensor(a.t))
            elif a.type == onnx.AttributeProto.INT and a.name in _TYPE_ATTRS and a.i in HALF:
                a.i = TensorProto.FLOAT
            elif a.type == onnx.AttributeProto.GRAPH:
                _widen_graph(a.g, keep)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    _widen_graph(sub, keep)
            elif a.type == onnx.AttributeProto.SPARSE_TENSOR and a.sparse_tensor.values.data_type in HALF:
                raise _Unconvertible
    del g.node[:]
    g.node.extend(nodes)


def _widen_tensor(t: TensorProto) -> TensorProto:
    if t.data_location == TensorProto.EXTERNAL:
        raise _Unconvertible
    return numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name)


def _widen_type(tp: onnx.TypeProto) -> None:
    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        tt = getattr(tp, kind)
        if tt.elem_type in HALF:
            tt.elem_type = TensorProto.FLOAT
    elif kind in ("sequence_type", "optional_type"):
        _widen_type(getattr(tp, kind).elem_type)
    elif kind == "map_type":
        _widen_type(tp.map_type.value_type)


def widened_feeds(f: dict[str, object]) -> dict[str, object]:
    """The feeds of `widened` copies: float16 and bfloat16 arrays as float32, the rest as they are."""
    return {k: v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype.name in HALF_NAMES else v
            for k, v in f.items()}


def verify_half(original: ModelProto, optimized: ModelProto, runs: int, rtol: float | None, atol: float | None,
                dims: dict[str, int] | None, files, random_pairs: dict[str, str] | None, verify: Callable):
    """`verify` (eqsat.verification.verify, which calls this: passed in, not imported) of a
    float16 or bfloat16 model (`is_half`): its own verification with each run also `judge`d
    against the original's float32 copy (this module's step 2), and where that excused a
    difference beyond the tolerance, step 1: the float32 copies must pass; else the
    verification fails with the difference it excused. Where onnxruntime cannot run the
    original (no bfloat16 kernels on its CPU provider), `_emulated`. Where the copies cannot
    be made or run (or the models hold more than WIDEN_LIMIT bytes of float16 weights, or
    nodes verification runs in stages: `_cut`), the verification as for any model."""
    wide_original = widened(original) if _half_bytes(original) <= WIDEN_LIMIT and not _cut(original) else None
    truth = Truth.of(original, optimized, wide_original) if wide_original is not None else None
    if truth is not None:
        _TRUTH.append(truth)
    try:
        with _active():
            v = verify(original, optimized, runs, rtol, atol, dims, files, random_pairs)
    finally:
        if truth is not None:
            _TRUTH.pop()
    if v.status == "not possible" and wide_original is not None and _no_kernels(original, v.detail):
        return _emulated(original, optimized, wide_original, v, runs, rtol, atol, dims, random_pairs, verify)
    if truth is None or not truth.excused or v.status != "passed":
        return v
    excused = "; ".join(truth.excused[:2])
    wide = _wide(wide_original, optimized, runs, rtol, atol, dims, random_pairs, verify)
    if wide.status != "passed":
        return dataclasses.replace(v, status="failed", detail=f"{excused} (float16 rounding ruled out: {wide.detail})")
    return dataclasses.replace(v, detail=(
        f"{v.detail}; float16 rounding: where the two float16 runs differ beyond the tolerance ({excused}), the "
        f"optimized one is within {HALF_ERROR_FACTOR:g} times the original's own distance from the original's "
        f"float32 copy, and the float32 copies of both agree ({wide.detail})"))


def _wide(wide_original: ModelProto, optimized: ModelProto, runs: int, rtol: float | None, atol: float | None,
          dims: dict[str, int] | None, random_pairs: dict[str, str] | None, verify: Callable):
    """Step 1: the verification (`verify`) of the float32 copies, its detail saying what refused them where it
    did not pass."""

    wide_optimized = widened(optimized)
    if wide_optimized is None:
        return Verification("not possible", "no float32 copy of the optimized model could be made")
    with _active():
        wide = verify(wide_original, wide_optimized, runs, rtol, atol, dims, (None, None), random_pairs)
    if wide.status == "passed":
        return wide
    said = "differ" if wide.status == "failed" else "do not run"
    return dataclasses.replace(wide, detail=f"their float32 copies {said} too: {wide.detail}")


def _emulated(original: ModelProto, optimized: ModelProto, wide_original: ModelProto, refused, runs: int,
              rtol: float | None, atol: float | None, dims: dict[str, int] | None,
              random_pairs: dict[str, str] | None, verify: Callable):
    """The verification (`verify`) of a model onnxruntime cannot run (`refused`, "not possible": its CPU
    provider has no bfloat16 kernels for most ops): its float32 copies (step 1, at float32's
    tolerance), then its `rounded` copies, each op's result rounded to its type (the
    specification's run), every run of them `judge`d against the original's float32 copy
    (`Truth.emulated`). Passed or failed as those are; `refused` where a copy cannot be made
    or run."""
    ro, rp = rounded(original), rounded(optimized)
    truth = _runner(wide_original)
    if ro is None or rp is None or truth is None:
        return refused
    wide = _wide(wide_original, optimized, runs, rtol, atol, dims, random_pairs, verify)
    if wide.status != "passed":
        return dataclasses.replace(wide, detail=f"{refused.detail}; {wide.detail}") \
            if wide.status == "not possible" else wide
    ctx = Truth(ro, truth, emulated=True, kept=_kept_runner(original))
    _TRUTH.append(ctx)
    try:
        with _active():
            v = verify(ro, rp, runs, rtol, atol, dims, (None, None), random_pairs)
    finally:
        _TRUTH.pop()
    what = ", ".join(sorted({_TYPE_NAMES[t] for t in _half_types(original)}))
    excused = f"; apart beyond that tolerance: {'; '.join(ctx.excused[:2])}" if ctx.excused else ""
    return dataclasses.replace(v, detail=(
        f"onnxruntime runs no {what} kernels for this model ({_one_line(refused.detail)}): verified as float32 "
        f"copies of both models ({wide.detail}) and as those copies with each op's result rounded to {what}, "
        f"within the tolerance or {HALF_ERROR_FACTOR:g} times the original's distance from its float32 copy "
        f"({v.detail}{excused})"))


def _no_kernels(original: ModelProto, detail: str) -> bool:
    """Whether a refusal ("not possible", `detail`) is onnxruntime's that `_emulated` stands in for: it cannot
    make a session of the original (no kernels), or, for a bfloat16 model, cannot run it on any inputs
    (its Python binding takes no bfloat16 arrays, so a model whose ops all have kernels never runs)."""
    return "cannot run the original:" in detail \
        or "cannot run the original on random inputs:" in detail and TensorProto.BFLOAT16 in _half_types(original)


_TYPE_NAMES = {TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "bfloat16"}


def _half_types(model: ModelProto) -> set[int]:
    return {v.type.tensor_type.elem_type for v in (*model.graph.input, *model.graph.output)} & HALF


def _one_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def _cut(model: ModelProto) -> bool:
    """Whether verification runs `model` in stages (eqsat.verification.standins: ops onnxruntime
    cannot run, random ops): its float32 copies would run those nodes on their own."""
    from eqsat.verification.standins import CutNodes

    cuts = CutNodes(model)
    return any(cuts.why(n) for n in model.graph.node)


def _half_bytes(model: ModelProto) -> int:
    """The bytes of the float16 and bfloat16 initializers of `model`'s main graph (as stored)."""
    return sum(2 * int(np.prod(t.dims, dtype=np.int64)) for t in model.graph.initializer if t.data_type in HALF)


@contextlib.contextmanager
def _active():
    _ACTIVE.append(True)
    try:
        yield
    finally:
        _ACTIVE.pop()


def rounded(model: ModelProto) -> ModelProto | None:
    """The `widened` copy of `model` rounding every value of the main graph that `model` holds
    in float16 or bfloat16 to that type (a Cast to it and back to float32 after the node that
    makes it): `model` as the ONNX specification runs it, each op's result rounded, where
    onnxruntime's CPU provider runs a chain of float16 ops in float32 and rounds at its ends
    (x * x / x does not overflow there). None where `widened` is, or the types cannot be inferred."""
    try:
        typed = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - no rounded copy: `judge` compares onnxruntime's runs alone
        return None
    types = {v.name: v.type.tensor_type.elem_type for v in (*typed.graph.value_info, *typed.graph.output)}
    out = widened(model)
    if out is None:
        return None
    nodes = []
    for n in out.graph.node:
        nodes.append(n)
        for i, name in enumerate(n.output):
            if name and types.get(name) in HALF:
                n.output[i] = f"{name}__eqsat_wide"
                nodes += [onnx.helper.make_node("Cast", [n.output[i]], [f"{name}__eqsat_half"], to=types[name]),
                          onnx.helper.make_node("Cast", [f"{name}__eqsat_half"], [name], to=TensorProto.FLOAT)]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


@dataclasses.dataclass
class Truth:
    """The runs `judge` compares a float16 run with: the original's float32 copy (`truth`),
    and the `rounded` copies of the original and the optimized model (None where there are none)."""

    original: ModelProto
    truth: object
    rounded_original: object = None
    rounded_optimized: object = None
    excused: list[str] = dataclasses.field(default_factory=list)  # the mismatches `judge` excused
    # `_emulated`: the runs `judge` sees are the `rounded` copies' (float32 values rounded to a half type)
    emulated: bool = False
    # the original's `kept` copy (its own Casts to half types rounding); None where it casts no computed value
    kept: object = None

    @staticmethod
    def of(original: ModelProto, optimized: ModelProto, wide_original: ModelProto) -> Truth | None:
        """None where onnxruntime cannot run the original's float32 copy."""
        truth = _runner(wide_original)
        if truth is None:
            return None
        ro, rp = rounded(original), rounded(optimized)
        ro, rp = (_runner(ro), _runner(rp)) if ro is not None and rp is not None else (None, None)
        return Truth(original, truth, *((ro, rp) if ro is not None and rp is not None else (None, None)),
                     kept=_kept_runner(original))


def _kept_runner(original: ModelProto):
    """The runner of the original's `kept` copy; None where there is none, or `_KEPT_UNRUNNABLE` where
    onnxruntime cannot run it (then `judge` excuses nothing: the explicit roundings cannot be checked)."""
    k = kept(original)
    if k is None:
        return None
    return _runner(k) or _KEPT_UNRUNNABLE


def _KEPT_UNRUNNABLE(f):  # noqa: N802 - a marker runner
    raise RuntimeError("the original's kept copy does not run")


def _runner(model: ModelProto):
    from eqsat.backends.ort.sessions import session

    try:
        sess = session(model, optimize=False)
    except Exception:  # noqa: BLE001 - an op without a float32 kernel, ...
        return None
    names = [o.name for o in sess.get_outputs()]
    return lambda f: dict(zip(names, sess.run(names, widened_feeds(f)), strict=True))


def judge(original: ModelProto, bad: list[Mismatch], expected: dict[str, object], got: dict[str, object],
          f: dict[str, object], rtol: float | None, atol: float | None) -> list[Mismatch]:
    """One run of the float16 verification while `verify_half` re-runs it for this `original`
    (else `bad` as it is; a forced variant of it has other truths): `bad`, its mismatches, less
    the float16 outputs whose optimized run is `within` the bound of the truth, plus those
    whose `rounded` copies are not (each op's result rounded: an overflow onnxruntime's run hides)."""
    if not _TRUTH or _TRUTH[-1].original is not original:
        return bad
    ctx = _TRUTH[-1]
    try:
        t = ctx.truth(f)
        ro, rp = (ctx.rounded_original(f), ctx.rounded_optimized(f)) if ctx.rounded_original else ({}, {})
        k = ctx.kept(f) if ctx.kept else None
    except Exception:  # noqa: BLE001 - the refusal stands
        return bad
    out = []
    for m in bad:
        e, a, w = expected.get(m.output), got.get(m.output), t.get(m.output)
        if k is not None and not _kept_within(e, a, k.get(m.output), ro.get(m.output), rtol, atol):
            out.append(m)
        elif ctx.emulated and _float_tensors(e, a, w) and within(e, a, w, _own(w, e), rtol, atol):
            ctx.excused.append(str(m))
        elif not _half_tensors(e, a, w) or not within(e, a, w, _own(w, e, ro.get(m.output)), rtol, atol):
            out.append(m)
        else:
            ctx.excused.append(str(m))
    for name, e in expected.items():
        if _half_tensors(e, got.get(name), t.get(name)):
            out.extend(_rounded_mismatch(name, e, ro.get(name), rp.get(name), t[name], rtol, atol))
    return out


def _kept_within(e, a, k, r, rtol: float | None, atol: float | None) -> bool:
    """Whether `a` (the optimized model's run) is within the bound of `k`, the original's `kept` copy's run,
    the original's own distance being its runs' (`e` onnxruntime's, `r` the rounded one) from `k`."""
    if not (isinstance(e, np.ndarray) and isinstance(a, np.ndarray) and isinstance(k, np.ndarray)
            and e.dtype.kind == "f" and e.shape == a.shape == k.shape):
        return False
    return within(e, a, k, _own(k, e, r), rtol, atol)


def _rounded_mismatch(name: str, e: np.ndarray, r, s, t: np.ndarray, rtol: float | None,
                      atol: float | None) -> list[Mismatch]:
    """The mismatch of output `name` where the optimized model's `rounded` run `s` is `outside`
    the bound of the truth `t` (`r`: the original's rounded run, `e` its onnxruntime run); else none."""
    if not (isinstance(r, np.ndarray) and isinstance(s, np.ndarray) and r.shape == s.shape == t.shape):
        return []
    own = _own(t, e, r)
    off = outside(r, s, t, own, rtol, atol)
    if not off.any():
        return []
    idx = tuple(int(i) for i in np.argwhere(off)[0])
    return [Mismatch(name, f"with each op's result rounded to {e.dtype.name}, {int(off.sum())} of {off.size} values "
                           f"beyond {HALF_ERROR_FACTOR:g} times the original's distance ({own:.3g}) from its float32 "
                           f"copy, first at {idx}: {float(s[idx]):.8g} vs {float(t[idx]):.8g} (the original "
                           f"{float(r[idx]):.8g})")]


def _float_tensors(e, a, t) -> bool:
    return all(isinstance(v, np.ndarray) for v in (e, a, t)) and e.dtype.kind == "f" and e.shape == a.shape == t.shape


def _half_tensors(e, a, t) -> bool:
    return all(isinstance(v, np.ndarray) for v in (e, a, t)) and e.dtype.name in HALF_NAMES \
        and e.shape == a.shape == t.shape


def _largest(a: np.ndarray, t: np.ndarray) -> float:
    """The largest |a - t| where both are finite; 0 where none are."""
    A, T = np.asarray(a, np.float64), np.asarray(t, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(A - T)[np.isfinite(A) & np.isfinite(T)]
    return float(d.max(initial=0.0))


def _own(t: np.ndarray, *runs) -> float:
    """The original's own distance from its float32 copy `t`: the largest of its runs' (onnxruntime's, rounded)."""
    return max((_largest(r, t) for r in runs if isinstance(r, np.ndarray) and r.shape == t.shape), default=0.0)


def within(e: np.ndarray, a: np.ndarray, t: np.ndarray, own: float, rtol: float | None, atol: float | None) -> bool:
    """Whether no element of `a` is `outside` the bound."""
    return not outside(e, a, t, own, rtol, atol).any()


def outside(e: np.ndarray, a: np.ndarray, t: np.ndarray, own: float, rtol: float | None,
            atol: float | None) -> np.ndarray:
    """Where `a` (a run of the optimized model) is farther from `t` (the float32 truth) than
    the bound allows: max(atol + rtol * |t|, HALF_ERROR_FACTOR * `own`), `e` being the
    original's run of the same kind and `own` the original's own distance (`_own`); rtol/atol
    None: float16's tolerance, the absolute one times the output's magnitude as verification
    scales it. Where `e` is not finite, `a` must be the same value, or finite and within the
    bound of a finite `t`; where `t` is not finite and `e` is, within the tolerance of `e`."""
    from eqsat.verification.outcome import _scale, tolerance

    E, A, T = (np.asarray(v).astype(np.float64) for v in (e, a, t))
    r, s = tolerance(np.float16)
    rtol = r if rtol is None else rtol
    fe, ft = np.isfinite(E), np.isfinite(T)
    with np.errstate(invalid="ignore", over="ignore"):
        atol = s * _scale(E.astype(np.float16)) if atol is None else atol
        bound = np.maximum(atol + rtol * np.abs(T), HALF_ERROR_FACTOR * own)
        close = np.isfinite(A) & ft & (np.abs(A - T) <= bound)
        same = (A == E) | (np.isnan(A) & np.isnan(E))
        ok = np.where(fe & ft, close, np.where(~fe, same | close, same | np.isclose(A, E, rtol=rtol, atol=atol)))
    return ~ok
