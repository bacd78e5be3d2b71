"""Running models under onnxruntime and comparing outputs.

Used by tests (exact equality after a round trip), by verification of optimized models,
and by benchmarks. onnxruntime is optional at import time: install `eqsat[cpu]` or
`eqsat[gpu]`.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import ModelProto

from eqsat.backends.ort.sessions import ort, session  # noqa: F401 - ort is imported from here too (eqsat.plan.execute)
from eqsat.core.randomness import RANDOM_OPS
from eqsat.errors import EqsatError
from eqsat.verification.feeds import SCALED, Feeds


def run(model: ModelProto | str, feeds: dict[str, np.ndarray], optimize: bool = True) -> dict[str, np.ndarray]:
    sess = session(model, optimize)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def random_inputs(model: ModelProto, dims: dict[str, int] | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Random feeds for the graph inputs (overridable ones get their defaults): floats
    standard normal, integers 0 or 1 (eqsat.verification.feeds, without `wide`). Symbolic or unknown
    dimensions take their value from `dims` (by name), else 2."""
    return Feeds(model).draw(dims, seed, wide=False)


@dataclass
class Mismatch:
    output: str
    detail: str
    requantized: bool = False  # beyond the QDQ allowance: farther than onnxruntime's own optimization moves it

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


def _scale(e: np.ndarray) -> float:
    """The default absolute tolerance's factor for an output: its largest finite magnitude,
    where that is below 1, but not below the square root of the type's smallest normal
    (about 1e-19 for float32: smaller outputs are the remains of underflow, which rounding
    moves by more than their size; a MobileViT with random weights ends near 1e-40). An
    output whose values are all about 1e-9 (a network with random weights) passed anything
    within 1e-4 of them: a bias of another layer's passed there."""
    if e.dtype.kind not in "fc" or e.size == 0:
        return 1.0
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.abs(e[np.isfinite(e)])
    top = float(m.max()) if m.size else 1.0
    return min(1.0, max(top, float(np.sqrt(np.finfo(e.dtype).tiny))))


# compare's `noise`: the floats times SCALED may be off by up to this many times SCALED times an
# output's largest difference on the random draw (rounding's spread between draws)
NOISE_MARGIN = 10


def max_difference(e: object, a: object) -> float:
    """The largest absolute difference between two runs' finite floating-point values of one
    output (tensors, sequences, maps); 0 where there are none."""
    if isinstance(e, dict) and isinstance(a, dict):
        return max((max_difference(e[k], a[k]) for k in e if k in a), default=0.0)
    if isinstance(e, list) and isinstance(a, list):
        return max((max_difference(x, y) for x, y in zip(e, a, strict=False)), default=0.0)
    if not (isinstance(e, np.ndarray) and isinstance(a, np.ndarray)) or e.shape != a.shape \
            or e.dtype != a.dtype or e.dtype.kind not in "fc" or e.size == 0:
        return 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(a.astype(np.float64) - e.astype(np.float64))
    d = d[np.isfinite(d)]
    return float(d.max()) if d.size else 0.0


def compare(expected: dict[str, np.ndarray], actual: dict[str, np.ndarray], rtol: float | None = 0.0,
            atol: float | None = 0.0, finite_free: bool = False, scaled: bool = False,
            noise: dict[str, float] | None = None) -> list[Mismatch]:
    """Differences between two runs: names, dtypes, shapes, then values (exact when
    rtol = atol = 0, and always for integers and booleans; NaN equals NaN, inf equals inf of
    its sign and nothing else; None: `tolerance` of each output's element type).
    `finite_free`: floating-point values need only be finite where the expected ones are, and
    the same NaN or infinity where they are not. `scaled`: the runs took the floats times
    SCALED (Feeds.with_special_values): floating-point values are compared only where the
    expected ones are finite (the original overflowed elsewhere), with an absolute tolerance
    SCALED times as large (rounding grows with the terms a model sums, which the scaling
    makes up to SCALED times larger, while its outputs need not grow: a BatchNorm or a bias
    keeps a ResNet's logits near the random draw's; a rewrite wrong only beyond the random
    draw's values is off by far more). `noise`: each output's largest difference on the random
    draw; the scaled tolerance grows by at most NOISE_MARGIN * SCALED times it (rounding
    grows with the terms, so a right program's does no more; one exact on the random draw
    and wrong beyond it, 0.5 % off at an output of 1, passed on the tolerance times 100)."""
    out: list[Mismatch] = []
    if list(expected) != list(actual):
        return [Mismatch(",".join(actual), f"output names differ: expected {list(expected)}")]
    for name, e in expected.items():
        out.extend(_compare_value(name, e, actual[name], rtol, atol, finite_free, scaled,
                                  None if noise is None else noise.get(name, 0.0)))
    return out


def _compare_value(name: str, e: object, a: object, rtol: float | None, atol: float | None,
                   finite_free: bool = False, scaled: bool = False, noise: float | None = None) -> list[Mismatch]:
    """One output: a tensor, a sequence (list) of tensors, a map, or None (optional)."""
    out: list[Mismatch] = []
    if e is None or a is None:
        return [] if e is None and a is None else [Mismatch(name, f"{a!r} vs expected {e!r}")]
    if isinstance(e, dict) or isinstance(a, dict):
        if not (isinstance(e, dict) and isinstance(a, dict)) or list(e) != list(a):
            return [Mismatch(name, "maps differ in their keys")]
        for k in e:
            out.extend(_compare_value(f"{name}[{k!r}]", e[k], a[k], rtol, atol, finite_free, scaled, noise))
        return out
    if isinstance(e, list) or isinstance(a, list):
        if not (isinstance(e, list) and isinstance(a, list)) or len(e) != len(a):
            return [Mismatch(name, "sequences differ in length or kind")]
        for i, (x, y) in enumerate(zip(e, a, strict=True)):
            out.extend(_compare_value(f"{name}[{i}]", x, y, rtol, atol, finite_free, scaled, noise))
        return out
    return _compare_tensor(name, np.asarray(e), np.asarray(a), rtol, atol, finite_free, scaled, noise)


def _compare_tensor(name: str, e: np.ndarray, a: np.ndarray, rtol: float | None, atol: float | None,
                    finite_free: bool = False, scaled: bool = False, noise: float | None = None) -> list[Mismatch]:
    if e.dtype != a.dtype:
        return [Mismatch(name, f"dtype {a.dtype}, expected {e.dtype}")]
    if rtol is None or atol is None:
        r, t = tolerance(e.dtype)
        rtol, atol = r if rtol is None else rtol, t * _scale(e) if atol is None else atol
    if scaled:
        extra = (SCALED - 1) * atol
        atol += extra if noise is None else min(extra, NOISE_MARGIN * SCALED * noise)
    if e.shape != a.shape:
        return [Mismatch(name, f"shape {a.shape}, expected {e.shape}")]
    if e.dtype == object or e.dtype.kind in "SUb":
        return [] if np.array_equal(e, a) else [Mismatch(name, "values differ")]
    if e.dtype.kind not in "iufc":  # ml_dtypes (bfloat16, float8, int4, ...): compare as float32
        try:
            e, a = e.astype(np.float32), a.astype(np.float32)
        except (TypeError, ValueError):
            return [] if e.tobytes() == a.tobytes() else [Mismatch(name, "values differ")]
    if e.dtype.kind in "iu":
        ok = a == e  # integers: right or wrong, whatever the tolerance (rtol 1e-3 let 1000999 pass for 1000000)
    elif finite_free and e.dtype.kind in "fc":
        ok = (np.isfinite(a) & np.isfinite(e)) | (a == e) | (np.isnan(a) & np.isnan(e))
    elif rtol or atol:
        ok = np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
        if scaled and e.dtype.kind in "fc":
            ok |= ~np.isfinite(e)
    elif e.dtype.kind in "fc":
        ok = (a == e) | (np.isnan(a) & np.isnan(e))
    else:
        ok = a == e
    if np.all(ok):
        return []
    idx = tuple(int(i) for i in np.argwhere(~ok)[0])
    worst = ""
    if e.dtype.kind in "fiu":
        with np.errstate(invalid="ignore"):  # inf - inf: the values themselves are shown
            err = np.abs(a.astype(np.float64) - e.astype(np.float64))[~ok]
        if np.isfinite(err).any():
            worst = f", max abs diff {float(np.max(err[np.isfinite(err)])):.3g}"
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
    inputs: str = ""  # what the integer and overridable inputs were fed (eqsat.verification.feeds)
    not_verified: str = ""  # what the comparison did not cover (nodes fed stand-in values)
    edge_cases: str = ""  # the runs on special values and empty sizes (`_edge_runs`), and those the original refused
    # failed only on outputs of a QDQ model that lie farther from the original than onnxruntime's
    # own optimization of it moves them (QdqAllowance): a program with fewer requantizing
    # fusions may pass (eqsat.api.finish tries them)
    requantized: bool = False

    def as_dict(self) -> dict:
        out = {"status": self.status, "detail": self.detail, "runs": self.runs}
        if self.inputs:
            out["inputs"] = self.inputs
        if self.not_verified:
            out["not_verified"] = self.not_verified
        if self.edge_cases:
            out["edge_cases"] = self.edge_cases
        return out


Runner = Callable[[dict[str, np.ndarray], dict[str, int]], dict[str, object]]
# Set by eqsat.verification.isolate's child (eqsat.verification.isolate_child): `announce` is told each step before
# it is
# taken ("load original", "run optimized", "edge B=0": the edge case that follows), so that a
# crash can be placed;
# WIDE_INTEGERS False draws every integer 0 or 1; EDGE_CASES False leaves out the runs of
# `_edge_runs` (the original crashed onnxruntime on them).
announce: Callable[[str], None] = lambda step: None  # noqa: E731
WIDE_INTEGERS = True
EDGE_CASES = True


def verify(original: ModelProto, optimized: ModelProto, runs: int = 1, rtol: float | None = None,
           atol: float | None = None, dims: dict[str, int] | None = None,
           files: tuple[str | os.PathLike | None, str | os.PathLike | None] = (None, None),
           random_pairs: dict[str, str] | None = None, isolated: bool = False) -> Verification:
    """Compare the optimized model with the original under onnxruntime on `runs` sets of
    random inputs (seeds 0, 1, ...), within rtol/atol (None: `tolerance` of each output's
    element type), plus one set where the model has floating-point overridable inputs, with
    other values for those (eqsat.verification.feeds). Integers are drawn by how the model uses them; where
    the original does not run on those, 0 or 1 as before (the result says which). Symbolic
    dimensions not in `dims` take the first sizes of `verification_dims` the original runs
    with. Then the edge cases of `_edge_runs`: zeros and large values among the floats, and
    each free symbolic dimension at size 0, where the original runs on them. A model onnxruntime cannot run whole
    (ops of domains it does not know, random ops)
    runs in stages, with the same stand-in values for those nodes in both models
    (eqsat.verification.standins; `random_pairs` maps the optimized model's random nodes to the
    original's); `not_verified` then names them. Not possible (never silently passed) when
    onnxruntime cannot run the original even so, or the inputs cannot be made up; failed on any
    difference beyond the tolerance, or when onnxruntime cannot run the optimized model.
    `files` are where the two models are saved, if they are: onnxruntime reads a file
    faster than it gets a model serialized again (seconds for a 500 MB model). `isolated`
    runs it all in a child process (eqsat.verification.isolate), so that a crash of onnxruntime is a
    failed verification, not the end of the caller."""
    if isolated:
        from eqsat.verification.isolate import verify_isolated

        return Verification(**verify_isolated(original, optimized, runs, rtol, atol, dims, files, random_pairs))
    try:
        feeds = Feeds(original)
    except EqsatError as e:
        return Verification("not possible", str(e))
    setup = _runners(original, optimized, files, random_pairs)
    if isinstance(setup, Verification):
        return setup
    ref, opt, cut = setup
    not_verified = ""
    if cut:
        listed = ", ".join(f"{k} x{v}" for k, v in sorted(cut.items()))
        not_verified = (f"the nodes onnxruntime cannot run or that are random ({listed}), fed the same stand-in "
                        "values in both models: what the models compute around them is verified, not those nodes")
    vary = feeds.floating_overridable()
    qdq = QdqAllowance(original, files) if not cut else None
    noise: dict[str, float] = {}  # each output's largest difference on the random draw
    found = _random_runs(original, feeds, ref, opt, runs, vary, dims, rtol, atol, not_verified, qdq, noise)
    if isinstance(found, Verification):
        return found
    sizes, wide, dtypes, varied = found
    drawn = feeds.describe(sizes, wide, varied)
    edges = _edge_runs(original, feeds, ref, opt, sizes, wide, dims, runs, rtol, atol, qdq, noise) if EDGE_CASES \
        else ""
    if isinstance(edges, Verification):
        return dataclasses.replace(edges, runs=runs + (1 if varied else 0), inputs=drawn, not_verified=not_verified)
    done = _passed(runs, rtol, atol, dtypes, sizes, drawn, edges, vary, varied, not_verified)
    if qdq is not None and qdq.used:
        done = dataclasses.replace(done, detail=done.detail + "; " + qdq.describe())
    return done


# onnxruntime transformers left out of the allowance's reference run: QDQFinalCleanupTransformer
# removes every DequantizeLinear -> QuantizeLinear pair of one scale and zero point, also where
# it is no identity (a float32 scale of 6.8e36 overflows (y - z) * s for |y - z| > 50, which
# Q saturates; a float16 one rounds int16 codes above 2048): with it, the allowance accepted
# the same pair removed by a rewrite, on any input. DoubleQDQPairsRemover makes
# Q(s1) -> DQ -> Q(s2) -> DQ one pair at one of the scales: with s1 = 0.01 and s2 = 1 its outputs
# lay up to half of s2 (50 steps of s1) from the original, and the allowance accepted a rule
# file's removal of the second pair
QDQ_UNSOUND_TRANSFORMERS = ["QDQFinalCleanupTransformer", "DoubleQDQPairsRemover"]
# and its DequantizeLinear -> MatMul fusion into MatMulNBits computes in float32 there (accuracy
# level 1), not with activations rounded to int8 (its default, 4): in a model with a
# QuantizeLinear elsewhere, a 4-bit weight-only MatMul's output moved by 0.028 with it, and a
# block scale 1 % off (0.026) passed
QDQ_ALLOWANCE_CONFIG = {"session.qdq_matmulnbits_accuracy_level": "1"}


class QdqAllowance:
    """Issue 30: in a quantized (QDQ) model, a rewrite that requantizes (DQ -> Conv -> Q into
    QLinearConv, ...) moves an output that rounds differently by a whole quantization step, far
    beyond verification's tolerance, and onnxruntime's own QDQ fusions move it so too. rules/qdq.egg
    makes such rewrites only where onnxruntime's own transformers make them; here an output of a
    model with QuantizeLinear nodes that differs beyond the tolerance passes where, element by
    element, it is no farther from the original (all finite) than the original run with
    onnxruntime's graph optimizations on (ORT_ENABLE_ALL, less QDQ_UNSOUND_TRANSFORMERS) is at
    that element, on the same inputs, plus 4 float32 ulps of that element's magnitude (the same
    number of quantization steps, each rounded by float32 a few ulps apart). Only for outputs
    that a QuantizeLinear reaches (`quantized_outputs`): a float output beside them is held to
    the tolerance. Element by element: with the largest difference of an output as the measure,
    an output holding one element of 1e8 took 4 ulps of it (47) as slack for every other element,
    and one element onnxruntime moved by a step let every other element move by as much. Not for
    models run in stages."""

    def __init__(self, original: ModelProto, files) -> None:
        # requantization needs a QuantizeLinear: a weight-only model (DequantizeLinear of int4
        # weights) is not requantized by any rewrite, and onnxruntime's own MatMulNBits fusion of
        # it quantizes activations (accuracy level 4), far looser than any rewrite of eqsat's
        self.active = any(n.op_type == "QuantizeLinear" and n.domain in ("", "ai.onnx") for n in original.graph.node)
        # where onnxruntime's own fusions are no rounding change, what they move is no measure
        self.withheld = qdq_allowance_withheld(original) if self.active else ""
        self.quantized = quantized_outputs(original) if self.active else set()
        self.source = files[0] or original
        self.sess = None
        self.used: list[str] = []

    def _own(self, f: dict[str, np.ndarray]) -> dict[str, object] | None:
        try:
            if self.sess is None:
                announce("load original, onnxruntime-optimized")
                self.sess = session(self.source, optimize=True, disabled_optimizers=QDQ_UNSOUND_TRANSFORMERS,
                                    config=QDQ_ALLOWANCE_CONFIG)
            names = [o.name for o in self.sess.get_outputs()]
            announce("run original, onnxruntime-optimized")
            return dict(zip(names, self.sess.run(names, f), strict=True))
        except Exception:  # noqa: BLE001 - no allowance then
            return None

    def filter(self, bad: list[Mismatch], expected: dict, got: dict, f: dict[str, np.ndarray]) -> list[Mismatch]:
        """The mismatches that remain after the allowance."""
        if not bad or not self.active:
            return bad
        if self.withheld:  # a program with fewer requantizing fusions may pass (eqsat.api.finish)
            return [Mismatch(m.output, f"{m.detail}; no QDQ allowance: {self.withheld}", requantized=True)
                    for m in bad]
        own = self._own(f)
        if own is None:
            return bad
        still = []
        for m in bad:
            e, g, o = (np.asarray(d[m.output]) if m.output in d else None for d in (expected, got, own))
            if (m.output not in self.quantized or e is None or g is None or o is None
                    or not e.shape == g.shape == o.shape or e.size == 0
                    or not all(np.issubdtype(a.dtype, np.number) and np.isfinite(a).all() for a in (e, g, o))):
                still.append(m)
                continue
            e, g, o = (a.astype(np.float64) for a in (e, g, o))
            ours, theirs = np.abs(g - e), np.abs(o - e)
            # the same number of quantization steps can differ by float32 rounding of the step
            slack = 4 * float(np.finfo(np.float32).eps) * np.maximum(np.abs(e), np.abs(o))
            beyond = ours > theirs + slack
            if not beyond.any():
                self.used.append(f"'{m.output}' {float(ours.max()):.3g} <= {float(theirs.max()):.3g}")
                continue
            at = tuple(int(i) for i in np.argwhere(beyond)[0])
            still.append(Mismatch(m.output, f"{m.detail}; farther than onnxruntime's own optimization of the "
                                            f"original moves it at {int(beyond.sum())} of them, first at {at}: "
                                            f"{ours[at]:.3g} where it moves {theirs[at]:.3g}", requantized=True))
        return still

    def describe(self) -> str:
        return ("QDQ model: outputs beyond the tolerance no farther from the original than onnxruntime's own "
                "optimization of it at each element (largest difference, ours <= onnxruntime's: "
                + ", ".join(self.used[:4])
                + (", ..." if len(self.used) > 4 else "") + ")")


# Scales of a QDQ model where onnxruntime's own fusions differ from the float form by rounding
# alone (rules/qdq.egg's qdq-requant-scale): products and sums of DQ's values stay finite and
# normal, and so do the fused kernels' ratios of scales. An int32 DequantizeLinear (a bias) is
# scaled by x_scale * w_scale: the range squared.
REQUANT_SCALE_RANGE = (2.0 ** -60, 2.0 ** 30)
# what _QdqGraph folds to learn a scale computed from constants: ops whose output is no larger
# than their inputs broadcast together (not ConstantOfShape, Expand, Tile, Range), each input of
# at most FOLD_ELEMENTS elements
FOLD_ELEMENTS = 1024
FOLD_OPS = frozenset({
    "Abs", "Add", "Cast", "CastLike", "Ceil", "Clip", "Concat", "Constant", "Div", "Erf", "Exp", "Flatten", "Floor",
    "Gather", "Identity", "Log", "Max", "Mean", "Min", "Mul", "Neg", "Pow", "Reciprocal", "ReduceMax", "ReduceMean",
    "ReduceMin", "ReduceProd", "ReduceSum", "Relu", "Reshape", "Round", "Sigmoid", "Sign", "Slice", "Sqrt", "Squeeze",
    "Sub", "Sum", "Tanh", "Transpose", "Unsqueeze", "Where"})
# ops whose QDQ fusion adds the bias (input 2) in the accumulator's integers
BIASED_QDQ_OPS = ("Conv", "ConvTranspose", "Gemm")


def quantized_outputs(model: ModelProto) -> set[str]:
    """The graph outputs of `model` that a QuantizeLinear reaches: computed from one's output,
    or from a node whose subgraphs or local function hold one (a requantizing rewrite moves
    nothing else)."""
    from eqsat.core.scopes import implicit_inputs, subgraphs

    funcs = {(f.domain, f.name): f for f in model.functions}

    def holds_q(nodes, seen: frozenset = frozenset()) -> bool:
        for n in nodes:
            if n.op_type == "QuantizeLinear" and n.domain in ("", "ai.onnx"):
                return True
            if any(holds_q(sub.node, seen) for a in n.attribute for sub in subgraphs(a)):
                return True
            key = (n.domain, n.op_type)
            if key in funcs and key not in seen and holds_q(funcs[key].node, seen | {key}):
                return True
        return False

    reached: set[str] = set()
    for n in model.graph.node:
        if holds_q([n]) or any(i in reached for i in list(n.input) + implicit_inputs(n)):
            reached.update(o for o in n.output if o)
    return {o.name for o in model.graph.output if o.name in reached}


def qdq_allowance_withheld(model: ModelProto) -> str:
    """Why onnxruntime's own optimization of `model` is no measure of what a requantizing rewrite
    may move (empty where it is one): a constant scale of a QuantizeLinear or DequantizeLinear
    outside REQUANT_SCALE_RANGE (zero, negative, subnormal, huge: onnxruntime fused DQ -> Add ->
    Q with a zero output scale or scales of 6.8e36, and moved codes by up to 255, the float form
    overflowing where its kernel does not), or a Conv, ConvTranspose or Gemm that onnxruntime
    fuses with a bias it changes: an int32 bias, not all zeros, at another scale than
    x_scale * w_scale (QGemm adds it at x_scale * w_scale) or a float bias rounded to integers
    of x_scale * w_scale above a tenth of the output's step (a Gemm's output moved 178 and 41
    steps, a Conv's 38); or an AveragePool after a DequantizeLinear with ceil_mode 1 and
    count_include_pad 1, which onnxruntime's QLinearAveragePool counts otherwise (up to 87
    steps). With any, the allowance accepted any program as far off."""
    g = _QdqGraph(model.graph)
    return g.scale_out_of_range() or g.bias_changed() or g.pool_miscounted()


class _QdqGraph:
    """The constants, producers and readers of a graph's values, for qdq_allowance_withheld."""

    def __init__(self, graph) -> None:
        from eqsat.core.encode import NotTyped, constant_node_tensor
        from eqsat.core.scopes import implicit_inputs

        self.nodes = list(graph.node)
        self.consts: dict[str, object] = {t.name: t for t in graph.initializer}
        for n in self.nodes:
            if n.op_type != "Constant" or not n.output:
                continue
            try:
                t = constant_node_tensor(n)  # each of its forms (value, value_float, value_floats, ...)
            except NotTyped:  # several attributes, or an unknown one: not a constant known here
                continue
            if t is not None:
                self.consts[n.output[0]] = t
        self.producer = {o: n for n in self.nodes for o in n.output}
        self.folded: dict[str, np.ndarray | None] = {}
        # the values computed from a graph input or a random node (in graph order: ONNX's is topological)
        self.dependent = {i.name for i in graph.input if i.name not in self.consts}
        for n in self.nodes:
            if n.op_type in RANDOM_OPS or any(i in self.dependent for i in list(n.input) + implicit_inputs(n)):
                self.dependent.update(n.output)
        self.readers: dict[str, list] = {}
        for n in self.nodes:
            for i in n.input:
                self.readers.setdefault(i, []).append(n)

    def value(self, name: str) -> np.ndarray | None:
        """The constant `name`'s array: stored in the model, or computed from stored constants
        by nodes of small inputs (FOLD_ELEMENTS), as onnxruntime's constant folding computes
        it before its QDQ fusions (an output scale of Identity(0) or 0 * 1 is a scale of 0
        there); None where it is not known here."""
        t = self.consts.get(name)
        if isinstance(t, np.ndarray):
            return t
        if isinstance(t, onnx.TensorProto):
            if t.data_location == onnx.TensorProto.EXTERNAL:
                return None
            try:
                return onnx.numpy_helper.to_array(t)
            except Exception:  # noqa: BLE001 - an unreadable constant: not known
                return None
        if name not in self.folded and self.computed_from_constants(name):
            self._fold(name)
        return self.folded.get(name)

    def computed_from_constants(self, name: str) -> bool:
        """Whether `name` is computed by nodes from constants alone (onnxruntime folds it)."""
        return name in self.producer and name not in self.dependent

    def _fold(self, name: str) -> None:
        """Computes `name` and the values it needs (in graph order, without recursion: a
        constant computation may be thousands of nodes deep) into `folded`; None for each
        that a node of another domain, a subgraph, a large input or the reference evaluator's
        refusal leaves unknown."""
        from onnx.reference import ReferenceEvaluator

        needed, todo = set(), [name]
        while todo:
            n = self.producer.get(todo.pop())
            if n is None or id(n) in needed:
                continue
            needed.add(id(n))
            todo += [i for i in n.input if i and i not in self.consts and i not in self.folded]
        graphs = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        for n in self.nodes:
            if id(n) not in needed:
                continue
            ins = [self.value(i) if i else None for i in n.input]
            outs = None
            small = all(not i or (v is not None and v.size <= FOLD_ELEMENTS) for i, v in zip(n.input, ins, strict=True))
            if n.domain in ("", "ai.onnx") and n.op_type in FOLD_OPS and small and not any(
                    a.type in graphs for a in n.attribute):
                try:
                    outs = ReferenceEvaluator(n).run(None, {i: v for i, v in zip(n.input, ins, strict=True) if i})
                except Exception:  # noqa: BLE001 - an op the reference cannot compute: not known
                    outs = None
            for k, o in enumerate(n.output):
                self.folded[o] = np.asarray(outs[k]) if outs is not None and k < len(outs) else None

    @staticmethod
    def qdq(n) -> bool:
        return n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.domain in ("", "ai.onnx")

    def dq_scale(self, name: str) -> np.ndarray | None:
        """The constant scale of the DequantizeLinear that computes `name`, in float32."""
        d = self.producer.get(name)
        if d is None or not self.qdq(d) or d.op_type != "DequantizeLinear" or len(d.input) < 2:
            return None
        s = self.value(d.input[1])
        return None if s is None else s.astype(np.float32)

    def scale_out_of_range(self) -> str:
        lo, hi = REQUANT_SCALE_RANGE
        for n in self.nodes:
            s = self.value(n.input[1]) if self.qdq(n) and len(n.input) > 1 else None
            if s is None and self.qdq(n) and len(n.input) > 1 and self.computed_from_constants(n.input[1]):
                return (f"the scale of {n.op_type} '{n.name or n.output[0]}' is computed from constants that "
                        "onnxruntime folds and this check cannot (its fusions may take any scale)")
            if s is None or s.size == 0 or s.dtype.kind != "f":
                continue
            x = self.value(n.input[0])
            wide = n.op_type == "DequantizeLinear" and x is not None and x.dtype == np.int32
            a = np.abs(s.astype(np.float64))
            if not (np.isfinite(a).all() and (s > 0).all()
                    and a.min() >= (lo * lo if wide else lo) and a.max() <= (hi * hi if wide else hi)):
                return (f"the scale of {n.op_type} '{n.name or n.output[0]}' is not positive within [2^-60, 2^30] "
                        "(onnxruntime's fusions there compute other values than the float form, not a rounding "
                        "apart)")
        return ""

    def bias_changed(self) -> str:
        for n in self.nodes:
            if n.op_type not in BIASED_QDQ_OPS or n.domain not in ("", "ai.onnx") or len(n.input) < 3 \
                    or not n.input[2]:
                continue
            qs = [self.value(q.input[1]) for q in self.readers.get(n.output[0], []) if self.qdq(q) and len(q.input) > 1]
            sa, sb = self.dq_scale(n.input[0]), self.dq_scale(n.input[1])
            if qs and sa is not None and sb is not None and not self._bias_kept(n.input[2], sa * sb, qs):
                return (f"onnxruntime fuses {n.op_type} '{n.name or n.output[0]}' with its bias changed (an int32 "
                        "bias not at x_scale * w_scale, or a float bias it rounds at x_scale * w_scale above a tenth "
                        "of the output's step)")
        return ""

    def pool_miscounted(self) -> str:
        """An AveragePool after a DequantizeLinear with ceil_mode 1 and count_include_pad 1:
        onnxruntime fuses it into QLinearAveragePool, which divides a window that ceil_mode
        adds past the end by another count than its float AveragePool (42 to 87 output steps
        apart): what its own optimization moves there is no rounding."""
        for n in self.nodes:
            if n.op_type != "AveragePool" or n.domain not in ("", "ai.onnx") or not n.input:
                continue
            a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
            d = self.producer.get(n.input[0])
            if a.get("ceil_mode", 0) and a.get("count_include_pad", 0) and d is not None and self.qdq(d):
                return (f"onnxruntime fuses AveragePool '{n.name or n.output[0]}' (ceil_mode and count_include_pad) "
                        "into QLinearAveragePool, which counts a window past the end otherwise")
        return ""

    def _bias_kept(self, name: str, product: np.ndarray, qs: list) -> bool:
        """Whether onnxruntime's fusion adds the bias `name` as it is: an int32 DequantizeLinear of
        zeros, or at the scale `product` (x_scale * w_scale), or a float bias whose rounding at
        `product` is below a tenth of each output scale in `qs`."""
        product = product.astype(np.float32)
        try:
            bias = self.producer.get(name)
            if bias is not None and bias.op_type == "DequantizeLinear":
                codes = [self.value(i) if i else np.zeros(1) for i in list(bias.input[:1]) + list(bias.input[2:3])]
                # a bias of zeros adds nothing at any scale (exporters share one among convs)
                if all(c is not None and not np.any(c) for c in codes):
                    return True
                cs = self.dq_scale(name)
                return cs is not None and bool(np.allclose(cs, product, rtol=1e-6, atol=0.0))
            top = float(np.max(np.abs(product)))
            return all(q is not None and q.size > 0 and top <= 0.1 * float(np.min(np.abs(q))) for q in qs)
        except ValueError:  # shapes that do not broadcast: no known scale
            return False


def _random_runs(original: ModelProto, feeds: Feeds, ref: Runner, opt: Runner, runs: int, vary,
                 dims: dict[str, int] | None, rtol: float | None, atol: float | None, not_verified: str,
                 qdq: QdqAllowance | None = None, noise: dict[str, float] | None = None,
                 ) -> Verification | tuple[dict[str, int] | None, bool, set[str], bool]:
    """(sizes, wide, float dtypes, varied) after the random runs agree, or the Verification that ends `verify`;
    `noise` gets each output's largest difference (compare's `noise`)."""
    sizes: dict[str, int] | None = None  # the symbolic sizes the original ran with
    wide = True  # integers drawn by their use (else 0 or 1)
    dtypes: set[str] = set()
    varied = False
    for seed in range(runs + (1 if vary else 0)):
        other = seed == runs  # the extra run: other values for the overridable inputs
        if sizes is None:
            found = _first_that_runs(original, feeds, ref, dims, seed)
            if isinstance(found, Verification):
                return dataclasses.replace(found, not_verified=not_verified)
            sizes, wide, f, expected = found
        else:
            try:
                f = feeds.draw(sizes, seed, wide, other)
                expected = ref(f, sizes)
            except Exception:  # noqa: BLE001 - retried with integers 0 or 1
                if other:
                    break  # the original does not run with other values for those: said below
                try:
                    wide = False
                    f = feeds.draw(sizes, seed, wide, other)
                    expected = ref(f, sizes)
                except Exception as e:  # noqa: BLE001
                    return Verification("not possible", "onnxruntime cannot run the original on random inputs: "
                                                        f"{_line(e)}", not_verified=not_verified)
        varied |= other
        try:
            got = opt(f, sizes)
        except Exception as e:  # noqa: BLE001
            return Verification("failed", f"onnxruntime cannot run the optimized model: {_line(e)}", seed + 1,
                                feeds.describe(sizes, wide, varied), not_verified)
        dtypes |= {v.dtype.name for v in expected.values()
                   if hasattr(v, "dtype") and v.dtype.name.startswith(("float", "bfloat"))}
        bad = compare(expected, got, rtol, atol)
        if qdq is not None:
            bad = qdq.filter(bad, expected, got, f)
        if noise is not None:
            for name, e in expected.items():
                noise[name] = max(noise.get(name, 0.0), max_difference(e, got.get(name)))
        if bad:
            drawn = feeds.describe(sizes, wide, other)
            return Verification("failed", "; ".join(map(str, bad[:3])) + f" (random inputs, seed {seed}"
                                + _sizes(sizes) + (f"; inputs: {drawn}" if drawn else "") + ")", seed + 1,
                                drawn, not_verified, requantized=all(m.requantized for m in bad))
    return sizes, wide, dtypes, varied


def _passed(runs: int, rtol: float | None, atol: float | None, dtypes: set[str], sizes: dict[str, int] | None,
            drawn: str, edges: str, vary, varied: bool, not_verified: str) -> Verification:
    """The `passed` Verification of `verify`, its detail saying what was run and what was not verified."""
    detail = f"{runs} run(s) within {_tolerances(rtol, atol, dtypes)}{_sizes(sizes)}"
    if drawn:
        detail += f"; inputs: {drawn}"
    if edges:
        detail += f"; also {edges}"
    if vary and not varied:
        detail += "; the original does not run with other values for its overridable inputs: only their defaults"
    if not_verified:
        detail += f"; not verified: {not_verified}"
    return Verification("passed", detail, runs + (1 if varied else 0), drawn, not_verified, edges)


EDGE_KINDS = {"zeros": "zeros among the floats", "large": "large floats (+-2e15)", "scaled": "floats times 100"}
SIZES_LABEL = "sizes of 2 and 3"  # the run of Feeds.with_large_sizes
EXTREMES_LABEL = "integers at their type's extremes"  # the run of Feeds.with_integer_extremes
ZERO_DIMS = 4  # symbolic dimensions tried at size 0, at most (each one alone)


def _edge_runs(original: ModelProto, feeds: Feeds, ref: Runner, opt: Runner, sizes: dict[str, int] | None,
               wide: bool, dims: dict[str, int] | None, seed: int, rtol: float | None, atol: float | None,
               qdq: QdqAllowance | None = None, noise: dict[str, float] | None = None) -> str | Verification:
    """Runs on inputs where some rewrites are wrong and the random ones are not: floats with
    zeros and with large magnitudes (eqsat.verification.feeds: Feeds.with_special_values; no inf or NaN,
    which onnxruntime's own kernels do not agree on), integer size inputs of 2 and 3 where
    the random ones are 0 or 1 (Feeds.with_large_sizes: an Expand(x[1], s) taken for x is
    right for s = [1] only), integers at their type's minimum and maximum where the random
    ones are in [-9, 9] (Feeds.with_integer_extremes: Relu(Abs(x)) taken for Abs(x) is right
    but for int8's -128), and each symbolic input dimension the
    user does not bind at size 0 (an empty batch or sequence: a Reshape's -1 beside a 0 is
    refused, a rule that reads a size from an element count is wrong). They are compared as
    any run (NaN where NaN, inf where inf of the same sign), but for the large values, where
    only the places and kinds of non-finite values must agree (an overflow on one side only
    is what they look for): a large value cancelling against itself along two paths leaves
    a result whose rounding error is relative to the large terms, not to it. A case the
    original does not run on (a Conv over 0 pixels, a mask that must be total = past +
    sequence) is left out: the original's refusal is not the optimizer's fault. Each costs
    one run of each model, on empty tensors for the sizes of 0. Returns what was checked and
    left out, as a clause, or the failed Verification."""
    sizes = dict(sizes or {})
    cases: list[tuple[str, str, dict[str, int]]] = [(EDGE_KINDS[k], k, sizes) for k in EDGE_KINDS]
    if feeds.has_sizes():
        cases.append((SIZES_LABEL, "sizes", sizes))
    if feeds.has_general_integers():
        cases.append((EXTREMES_LABEL, "extremes", sizes))
    free = [n for n in symbolic_input_dims(original) if n not in (dims or {})]
    cases += [(f"{n}=0", "empty", {**sizes, n: 0}) for n in free[:ZERO_DIMS]]
    ran, refused = [], []
    for label, kind, at in cases:
        try:
            f = feeds.draw(at, seed, wide)
            if kind == "sizes":
                f = feeds.with_large_sizes(f, seed)
            elif kind == "extremes":
                f = feeds.with_integer_extremes(f, seed)
            elif kind != "empty":
                f = feeds.with_special_values(f, seed, kind)
        except EqsatError:
            refused.append(label)
            continue
        announce(f"edge {label}")
        try:
            expected = ref(f, at)
        except Exception:  # noqa: BLE001 - the original does not take these: nothing to compare
            refused.append(label)
            continue
        where = f"{label} (symbolic sizes {_listed(at)})" if kind == "empty" else label
        try:
            got = opt(f, at)
        except Exception as e:  # noqa: BLE001
            return Verification("failed", f"onnxruntime cannot run the optimized model on {where}, where it runs "
                                          f"the original: {_line(e)}", edge_cases=where)
        bad = compare(expected, got, rtol, atol, finite_free=kind == "large", scaled=kind == "scaled",
                      noise=noise)
        if qdq is not None:
            bad = qdq.filter(bad, expected, got, f)
        if bad:
            return Verification("failed", "; ".join(map(str, bad[:3])) + f" (on {where}; seed {seed})",
                                edge_cases=where, requantized=all(m.requantized for m in bad))
        ran.append(label)
    out = []
    if ran:
        out.append("on " + _edge_list(ran))
    if refused:
        out.append("not on " + _edge_list(refused) + " (the original does not run on them)")
    return "; ".join(out)


def _edge_list(labels: list[str]) -> str:
    sizes = [x for x in labels if x.endswith("=0")]
    rest = [x for x in labels if not x.endswith("=0")]
    if sizes:
        rest.append("symbolic size " + ", ".join(sizes))
    return ", ".join(rest)


def _runners(original: ModelProto, optimized: ModelProto, files, random_pairs
             ) -> tuple[Runner, Runner, Counter] | Verification:
    """How to run each model: whole under onnxruntime, or in stages with stand-ins where the
    original has nodes onnxruntime cannot or must not run (eqsat.verification.standins). Both run as
    written, with onnxruntime's graph optimizations off: they rewrite the original too (its
    MatMulScaleFusion makes x * 1e20 * 1e20 one alpha of 1e40, an infinity in float32), and
    a rewrite of eqsat's that made the same mistake passed against a reference that made it
    too; with them on for the optimized model alone, a model eqsat left as it was could
    differ from itself."""
    from eqsat.verification.standins import CutNodes, StagedRunner, StandInError

    cuts = CutNodes(original)
    if any(cuts.why(n) for n in original.graph.node):
        try:
            ref_runner = StagedRunner(original, optimize=False)
            opt_runner = StagedRunner(optimized, random_pairs, optimize=False, reference=ref_runner)
        except StandInError as e:
            return Verification("not possible", str(e))
        def ref(f, sizes):
            announce("run original")
            return {**ref_runner.run(f, sizes), **_cut_inputs(ref_runner.cut_inputs)}

        def opt(f, sizes):  # always after ref on the same inputs: its cut nodes are matched to ref's
            announce("run optimized")
            return {**opt_runner.run(f, sizes), **_cut_inputs(ref_runner.cut_inputs, opt_runner.cut_inputs)}

        return ref, opt, ref_runner.cut_summary()
    try:
        announce("load original")
        ref_sess = session(files[0] or original, optimize=False)
    except Exception as e:  # noqa: BLE001 - an op onnxruntime lacks, ...
        return Verification("not possible", f"onnxruntime cannot run the original: {_line(e)}")
    try:
        announce("load optimized")
        opt_sess = session(files[1] or optimized, optimize=False)
    except Exception as e:  # noqa: BLE001
        return Verification("failed", f"onnxruntime cannot run the optimized model: {_line(e)}")
    names = [o.name for o in ref_sess.get_outputs()]

    def run_ref(f, sizes):
        announce("run original")
        return dict(zip(names, ref_sess.run(names, f), strict=True))

    def run_opt(f, sizes):
        announce("run optimized")
        return dict(zip(names, opt_sess.run(names, f), strict=True))

    return run_ref, run_opt, Counter()


def _cut_inputs(ref: list, opt: list | None = None) -> dict[str, object]:
    """What the original's cut nodes were fed (eqsat.verification.standins: StagedRunner.cut_inputs),
    as extra outputs named "input J of cut node I (OP)", compared as outputs are: a stand-in's
    floats are +-1 plus noise for inputs of magnitude 100 whatever they are, and its integers
    do not depend on them, so a rewrite that got a cut node's input wrong could pass. With
    `opt`, the optimized model's: for each of the original's cut nodes, the inputs of its
    closest match among the optimized model's nodes of the same stand-in key (an op merged
    with its twin, or nodes in another order, still match); none of that key gives empty
    values, a mismatch. (The optimized model's cut nodes are given the outputs of their
    closest match in the original, so a node fed another's inputs shows in the outputs.)"""
    from eqsat.verification.standins import distance

    out: dict[str, object] = {}
    for i, (label, key, inputs, _) in enumerate(ref):
        match = None
        if opt is not None:
            same = [ins for _, k, ins, _ in opt if k == key and len(ins) == len(inputs)]
            match = min(same, key=lambda ins: distance(inputs, ins), default=None)
        for j, x in enumerate(inputs):
            if x is None:
                continue
            name = f"input {j} of cut node {i + 1} ({label})"
            if opt is None:
                out[name] = x
            elif match is None or match[j] is None:
                out[name] = np.zeros((0,), x.dtype)
            else:
                out[name] = match[j]
    return out


def _first_that_runs(original: ModelProto, feeds: Feeds, ref: Runner, dims: dict[str, int] | None, seed: int):
    """(sizes, wide, feeds, outputs) of the first sizes of `verification_dims` and the first
    way of drawing integers (by use, then 0 or 1) the original runs with; else a Verification
    saying it is not possible."""
    first = None
    tried = verification_dims(original, dims)
    for attempt in tried:
        for wide in (True, False) if feeds.roles and WIDE_INTEGERS else (False,):
            try:
                f = feeds.draw(attempt, seed, wide)
            except EqsatError as e:
                return Verification("not possible", str(e))
            try:
                return attempt, wide, f, ref(f, attempt)
            except Exception as e:  # noqa: BLE001 - e.g. random ids out of a table's range, a size too small
                first = first or e
    shown = "; ".join(_listed(t) for t in tried[:TRIES_SHOWN])
    if len(tried) > TRIES_SHOWN:
        shown += f"; and {len(tried) - TRIES_SHOWN} more"
    hint = (f" (symbolic sizes tried: {shown}; pass --dim NAME=SIZE "
            "for the sizes the model needs)") if tried != [dict(dims or {})] else ""
    return Verification("not possible", f"onnxruntime cannot run the original on random inputs: {_line(first)}{hint}")


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
        parts.append((dt, f"rtol {r:g}, atol {t:g}" + (" x the output's scale below 1" if atol is None else "")))
    if len({p for _, p in parts}) == 1:
        return parts[0][1]
    return "; ".join(f"{p} ({dt})" for dt, p in parts)


def _line(e: Exception) -> str:
    s = " ".join(str(e).split())
    return s[:240]
