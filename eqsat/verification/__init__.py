"""Running models under onnxruntime and comparing outputs.

Used by tests (exact equality after a round trip), by verification of optimized models,
and by benchmarks. onnxruntime is optional at import time: install `eqsat[cpu]` or
`eqsat[gpu]`.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections import Counter
from collections.abc import Callable

import numpy as np
import onnx
from onnx import ModelProto

from eqsat.backends.ort.sessions import ort, session  # noqa: F401 - ort is imported from here too (eqsat.plan.execute)
from eqsat.core.scopes import subgraphs
from eqsat.errors import EqsatError
from eqsat.verification import ties, widen
from eqsat.verification.feeds import LARGER_SIZES, SCALED, SCALED_FAR, Feeds
from eqsat.verification.mismatch import Mismatch
from eqsat.verification.outcome import DEFAULT_TOLERANCE, TOLERANCE, Verification, _scale, tolerance  # noqa: F401
from eqsat.verification.paired import RunAhead, alone  # noqa: F401 - alone is imported from here too
from eqsat.verification.qdq import (  # noqa: F401 - also imported from here
    QDQ_ALLOWANCE_CONFIG,
    QDQ_UNSOUND_TRANSFORMERS,
    QdqAllowance,
    qdq_allowance_withheld,
    qdq_kept_out,
    quantized_outputs,
)


def run(model: ModelProto | str, feeds: dict[str, np.ndarray], optimize: bool = True) -> dict[str, np.ndarray]:
    sess = session(model, optimize)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def random_inputs(model: ModelProto, dims: dict[str, int] | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Random feeds for the graph inputs (overridable ones get their defaults): floats
    standard normal, integers 0 or 1 (eqsat.verification.feeds, without `wide`). Symbolic or unknown
    dimensions take their value from `dims` (by name), else 2."""
    return Feeds(model).draw(dims, seed, wide=False)


# compare's `noise`: the floats times SCALED may be off by up to this many times SCALED times an
# output's largest difference on the random draw (rounding's spread between draws)
NOISE_MARGIN = 10
# compare's `scaled` (the floats times SCALED or SCALED_FAR): the absolute tolerance is at least this
# many float steps (eps) of the output's largest finite magnitude. Rounding at those magnitudes is
# relative to the largest terms: ResNet-50's logits, up to 8e6 there, moved one of -44 by 2.5 to 3.3
# (about 3 steps of 8e6; seeds 0-4), beyond the tolerance of the random draw's differences times 10 x 10000
FAR_STEPS = 256
# and at each element at most what the original itself moves there when each float input moves by
# FAR_NUDGE of itself (or 64 steps of its type, if more), with a sign drawn for each (compare's
# `sensitivity`): rounding there is relative to that element's own terms, which such a nudge moves it
# by (about FAR_NUDGE / eps = 2048 times an ulp of them, less where the terms' moves cancel: ResNet-50's
# one logit beyond the other tolerances, 1.06 off, moved 20.6). A Clip's 1000 beside a constant 1e30 in
# one output had 256 steps of 1e30 (3e25) as its tolerance, and a dropped Clip (3455) passed; where the
# Clip saturates, the nudge moves nothing
FAR_NUDGE = 2.0 ** -12


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
            atol: float | None = 0.0, finite_free: bool | str = False, scaled: bool | float = False,
            noise: dict[str, float] | None = None, sensitivity: dict[str, object] | None = None) -> list[Mismatch]:
    """Differences between two runs: names, dtypes, shapes, then values (exact when
    rtol = atol = 0, and always for integers and booleans; NaN equals NaN, inf equals inf of
    its sign and nothing else; None: `tolerance` of each output's element type).
    `finite_free`: floating-point values need only be finite where the expected ones are, and
    the same NaN or infinity where they are not; "values": and where both are finite, within
    the tolerance grown as `scaled` grows it (with `scaled` the largest input, by at most
    NOISE_MARGIN times it times the random draw's difference) and without its floor: a large
    value cancelling against itself leaves a result whose rounding is relative to it ((x * 300 +
    1.1) - x * 300 is 0 for x = 2e15), which a program off on the random draw by rounding only
    gets as slack, and an exact one does not (a Clip at 1e12 dropped passed on finiteness
    alone); with `sensitivity`, the floor too, capped at each element by it as below (a
    network's outputs can be 1e-14 on the random draw, so that its differences there say
    nothing of the large values' rounding: EfficientNet-B1's logits there were 8 float steps
    of their largest, as onnxruntime's own optimizations left them). `scaled`: the runs took the floats times
    SCALED (Feeds.with_special_values; a number: times that number, which SCALED below then
    means, and the absolute tolerance is at least FAR_STEPS float steps of the output's
    largest finite magnitude): floating-point values are compared only where the
    expected ones are finite (the original overflowed elsewhere), with an absolute tolerance
    SCALED times as large (rounding grows with the terms a model sums, which the scaling
    makes up to SCALED times larger, while its outputs need not grow: a BatchNorm or a bias
    keeps a ResNet's logits near the random draw's; a rewrite wrong only beyond the random
    draw's values is off by far more). `noise`: each output's largest difference on the random
    draw; the scaled tolerance grows by at most NOISE_MARGIN * SCALED times it (rounding
    grows with the terms, so a right program's does no more; one exact on the random draw
    and wrong beyond it, 0.5 % off at an output of 1, passed on the tolerance times 100).
    Every scaled run's absolute tolerance is at least the FAR_STEPS floor of the output's largest
    magnitude, at each element at most `sensitivity`: each output's elements' moves under a
    nudge of the inputs (`nudged_moves`, FAR_NUDGE); rounding in a deep network grows with its
    largest terms, which its random draw need not show."""
    out: list[Mismatch] = []
    if list(expected) != list(actual):
        return [Mismatch(",".join(actual), f"output names differ: expected {list(expected)}")]
    for name, e in expected.items():
        out.extend(_compare_value(name, e, actual[name], rtol, atol, finite_free, scaled,
                                  None if noise is None else noise.get(name, 0.0),
                                  None if sensitivity is None else sensitivity.get(name)))
    return out


def _compare_value(name: str, e: object, a: object, rtol: float | None, atol: float | None,
                   finite_free: bool | str = False, scaled: bool | float = False,
                   noise: float | None = None, sensitivity: object = None) -> list[Mismatch]:
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
    moves = sensitivity if isinstance(sensitivity, np.ndarray) else None
    return _compare_tensor(name, np.asarray(e), np.asarray(a), rtol, atol, finite_free, scaled, noise, moves)


def _compare_tensor(name: str, e: np.ndarray, a: np.ndarray, rtol: float | None, atol: float | None,
                    finite_free: bool | str = False, scaled: bool | float = False,
                   noise: float | None = None, moves: np.ndarray | None = None) -> list[Mismatch]:
    if e.dtype != a.dtype:
        return [Mismatch(name, f"dtype {a.dtype}, expected {e.dtype}")]
    if rtol is None or atol is None:
        r, t = tolerance(e.dtype)
        rtol, atol = r if rtol is None else rtol, t * _scale(e) if atol is None else atol
    if scaled:
        factor = SCALED if scaled is True else float(scaled)
        extra = (factor - 1) * atol
        atol += extra if noise is None else min(extra, NOISE_MARGIN * factor * noise)
        if finite_free != "values" or moves is not None:
            atol = np.maximum(atol, _far_floor(e, moves))
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
        ok = np.isfinite(a) & np.isfinite(e)
        if finite_free == "values":
            ok &= np.isclose(a, e, rtol=rtol, atol=atol)
        ok |= (a == e) | (np.isnan(a) & np.isnan(e))
    elif rtol or np.any(atol):
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


def _largest_float(f: dict[str, object]) -> float:
    """The largest finite magnitude among the floating-point inputs `f`, at least 1 (the
    factor of the large values' tolerance: compare's finite_free "values")."""
    tops = [float(np.abs(v[np.isfinite(v)]).max(initial=0.0)) for v in f.values()
            if isinstance(v, np.ndarray) and v.dtype.kind == "f" and v.size]
    return max([1.0, *tops])


def _far_floor(e: np.ndarray, moves: np.ndarray | None) -> np.ndarray | float:
    """The floor of the absolute tolerance where the floats were scaled far or made large:
    FAR_STEPS float steps of the output's largest finite magnitude, at each element at most
    `moves` (compare's `sensitivity`) where given; 0 for what is not a float tensor."""
    if e.dtype.kind != "f" or e.size == 0:
        return 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        top = np.abs(e[np.isfinite(e)])
    floor = FAR_STEPS * float(np.finfo(e.dtype).eps) * float(top.max(initial=0.0))
    if moves is not None and moves.shape == e.shape:  # at most what a nudge moves each element
        return np.minimum(floor, np.where(np.isfinite(moves), moves, floor))
    return floor


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
    element type), plus one set where the model has overridable inputs (floating-point, integer
    or boolean), with other values for those (eqsat.verification.feeds: signs drawn, integers
    reordered; where the original refuses those, the floats' alone: `_other_floats`). Integers
    are drawn by how the model uses them; where the original does not run on those, 0 or 1 as
    before (the result says which). Symbolic dimensions not in `dims` take the first sizes of
    `verification_dims` the original runs with. Then the edge cases of `_edge_runs`: zeros and
    large values among the floats, other sizes, integer extremes, booleans and masks negated,
    and each symbolic dimension at size 0 and 1 (a bound one too), where the original runs on
    them; then, where either has an If in the main graph whose condition the inputs decide,
    with every such If's condition forced true and then false (`_forced_branches`), and every
    such Loop's trip count a constant past its body's constants (`_forced_trips`), and where
    either has a Scan, every free symbolic size past its body's constants (`_forced_lengths`).
    A model onnxruntime cannot run whole (ops of domains it does not know, random ops) runs in
    stages, with the same stand-in values for those nodes in both models
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
    if widen.applies(original):  # float16 rounding told from error (eqsat.verification.widen)
        return widen.verify_half(original, optimized, runs, rtol, atol, dims, files, random_pairs, verify)
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
    vary = feeds.varied_overridable()
    qdq = QdqAllowance(original, files, lambda step: announce(step)) if not cut else None
    noise: dict[str, float] = {}  # each output's largest difference on the random draw
    aside: list[tuple[str, str]] = []  # what eqsat.verification.ties set aside (what, on which run)
    found = _random_runs(original, feeds, ref, opt, runs, vary, dims, rtol, atol, not_verified, qdq, noise, aside)
    if isinstance(found, Verification):
        return found
    sizes, wide, dtypes, varied = found
    drawn = feeds.describe(sizes, wide, varied)
    edges = _edge_runs(original, feeds, ref, opt, sizes, wide, dims, runs, rtol, atol, qdq, noise, aside) \
        if EDGE_CASES else ""
    if isinstance(edges, Verification):
        return dataclasses.replace(edges, runs=runs + (1 if varied else 0), inputs=drawn, not_verified=not_verified)
    if EDGE_CASES and not _FORCING:
        forced = _forced_runs(original, optimized, runs, rtol, atol, dims, random_pairs)
        if isinstance(forced, Verification):
            return dataclasses.replace(forced, runs=runs + (1 if varied else 0), inputs=drawn,
                                       not_verified=not_verified)
        edges = "; ".join(x for x in (edges, forced) if x)
    done = _passed(runs, rtol, atol, dtypes, sizes, drawn, edges, vary, varied, not_verified)
    if qdq is not None and qdq.used:
        done = dataclasses.replace(done, detail=done.detail + "; " + qdq.describe())
    if aside:  # eqsat.verification.ties: not compared, the original itself leaves them undetermined
        runs_of = {what: [w for a, w in aside if a == what] for what, _ in aside}
        told = "; ".join(f"{what} ({', '.join(w)})" for what, w in runs_of.items())
        done = dataclasses.replace(done, detail=done.detail + "; set aside as ties: " + told)
    return done


def _random_runs(original: ModelProto, feeds: Feeds, ref: Runner, opt: Runner, runs: int, vary,
                 dims: dict[str, int] | None, rtol: float | None, atol: float | None, not_verified: str,
                 qdq: QdqAllowance | None = None, noise: dict[str, float] | None = None,
                 aside: list[tuple[str, str]] | None = None,
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
                if other:  # the original does not run with other values for those: the floats alone, else said below
                    found = _other_floats(feeds, ref, sizes, seed, wide)
                    if found is None:
                        break
                    f, expected, other = *found, "floats"
                else:
                    try:
                        wide = False
                        f = feeds.draw(sizes, seed, wide, other)
                        expected = ref(f, sizes)
                    except Exception as e:  # noqa: BLE001
                        return Verification("not possible", "onnxruntime cannot run the original on random inputs: "
                                                            f"{_line(e)}", not_verified=not_verified)
        varied = other or varied
        try:
            got = opt(f, sizes)
        except Exception as e:  # noqa: BLE001
            return Verification("failed", f"onnxruntime cannot run the optimized model: {_line(e)}", seed + 1,
                                feeds.describe(sizes, wide, varied), not_verified)
        dtypes |= {v.dtype.name for v in expected.values()
                   if hasattr(v, "dtype") and v.dtype.name.startswith(("float", "bfloat"))}
        def judged(g, expected=expected, f=f):
            found = widen.judge(original, compare(expected, g, rtol, atol), expected, g, f, rtol, atol)
            return found if qdq is None else qdq.filter(found, expected, g, f)

        bad = ties.settle(judged(got), expected, got, f, sizes, ref, judged, rtol, atol, original, aside=aside,
                          where=f"random inputs, seed {seed}")
        if noise is not None:
            for name, e in expected.items():
                noise[name] = max(noise.get(name, 0.0), max_difference(e, got.get(name)))
        if bad:
            drawn = feeds.describe(sizes, wide, other)
            return Verification("failed", "; ".join(map(str, bad[:3])) + f" (random inputs, seed {seed}"
                                + _sizes(sizes) + (f"; inputs: {drawn}" if drawn else "") + ")", seed + 1,
                                drawn, not_verified, requantized=all(m.requantized for m in bad))
    return sizes, wide, dtypes, varied


def _other_floats(feeds: Feeds, ref: Runner, sizes: dict[str, int], seed: int, wide: bool):
    """(inputs, the original's outputs) of `_random_runs`' extra run with the floating-point
    overridable inputs varied alone, where the original refuses other values for all of them
    (a Reshape target reordered); None where it refuses these too or there are none."""
    if not feeds.floating_overridable():
        return None
    try:
        f = feeds.draw(sizes, seed, wide, "floats")
        return f, ref(f, sizes)
    except Exception:  # noqa: BLE001 - the original does not run so
        return None


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


EDGE_KINDS = {"zeros": "zeros among the floats", "large": "large floats (+-2e15)", "scaled": "floats times 100",
              "far": "floats times 10000", "small": "floats times 0.0001",
              "halves": "whole and half numbers among the floats"}
ZEROS_LABEL = "zeros among the floats and integers"  # "zeros" where the model has general integers
SIZES_LABEL = "sizes of 2 and 3"  # the run of Feeds.with_large_sizes
LARGER_LABEL = "sizes of 4 to 9"  # the run of Feeds.with_larger_sizes
EXTREMES_LABEL = "integers at their type's extremes"  # the run of Feeds.with_integer_extremes
COMPARED_LABEL = "inputs at the constants they are compared with"  # the run of Feeds.with_compared
ABOVE_LABEL = "inputs above the constants they are compared with"  # Feeds.with_compared's run of step 1
BELOW_LABEL = "inputs below the constants they are compared with"  # its run of step -1 (inputs of one element)
NEGATIVE_LABEL = "sizes of -1"  # the run of Feeds.with_negative_sizes
SIZES_BEYOND_LABEL = "sizes beyond the constants' values"  # the run of Feeds.with_sizes_beyond
NEGATED_LABEL = "booleans and masks negated"  # the run of Feeds.with_flags_negated, on the first random draw
MASKS_LABEL = "masks beyond 0 and 1"  # the run of Feeds.with_masks_widened
TRUE_LABEL, FALSE_LABEL = "booleans all true", "booleans all false"  # the runs of Feeds.with_booleans_set
ONES_LABEL = "symbolic sizes of 1"  # every free symbolic dimension at size 1, in one run
ZERO_DIMS = 4  # symbolic dimensions tried at size 0, at most (each one alone)
BEYOND_LABEL = "symbolic sizes beyond the constants' values"  # the run at constant_sizes.beyond_sizes
NEXT_LABEL = "symbolic sizes one larger"  # the random runs' free sizes plus one, all in one run
SIZE_KINDS = ("empty", "ones", "one", "beyond", "next")  # the edge cases that change the sizes alone


def _size_beyond(model: ModelProto) -> int | None:
    """The value `Feeds.with_sizes_beyond` puts in each size input: one past the largest value up
    to BEYOND_LIMIT of the model's small integer constants and what it computes from them
    (constant_sizes.bound_values), where that is past the sizes of 4 to 9 already drawn; else None."""
    from eqsat.verification.constant_sizes import BEYOND_LIMIT, bound_values

    bound = max((v for v in bound_values(model) if v <= BEYOND_LIMIT), default=0)
    return bound + 1 if bound >= LARGER_SIZES[1] - 1 else None


def _beyond(original: ModelProto, sizes: dict[str, int], dims: dict[str, int] | None) -> dict[str, int] | None:
    """The sizes of `_edge_runs`' run beyond the model's constants (constant_sizes.beyond_sizes:
    the random runs' sizes of the free symbolic dimensions scaled past every small integer
    constant's value, within the elements of the largest sizes `verification_dims` tries)."""
    from eqsat.verification.constant_sizes import beyond_sizes

    free = [n for n in symbolic_input_dims(original) if n not in (dims or {})]
    if not free:
        return None
    return beyond_sizes(original, free, sizes, verification_dims(original, dims))


def _edge_runs(original: ModelProto, feeds: Feeds, ref: Runner, opt: Runner, sizes: dict[str, int] | None,
               wide: bool, dims: dict[str, int] | None, seed: int, rtol: float | None, atol: float | None,
               qdq: QdqAllowance | None = None, noise: dict[str, float] | None = None,
               aside: list[tuple[str, str]] | None = None) -> str | Verification:
    """Runs on inputs where some rewrites are wrong and the random ones are not: floats with
    zeros, times 100, 10000 and 0.0001, with whole and half numbers (a rounding's ties: a rule
    file's Floor(x + 0.5) -> Round(x) passed every other draw), and with large magnitudes (eqsat.verification.feeds:
    Feeds.with_special_values; no inf or NaN,
    which onnxruntime's own kernels do not agree on), integer size inputs of 2 and 3 where
    the random ones are 0 or 1 (Feeds.with_large_sizes: an Expand(x[1], s) taken for x is
    right for s = [1] only), integers at their type's minimum and maximum where the random
    ones are in [-9, 9] (Feeds.with_integer_extremes: Relu(Abs(x)) taken for Abs(x) is right
    but for int8's -128), sizes with a -1 among them (Feeds.with_negative_sizes), the first
    random draw with booleans and masks negated (Feeds.with_flags_negated: each takes both
    values), masks of -2 to 3 where the random ones are 0 or 1 (Feeds.with_masks_widened),
    booleans all true and all false where they hold several elements (Feeds.with_booleans_set:
    two scalar conditions were never both true), general integers and floats compared with
    constants at, below and above those constants (Feeds.with_compared: Equal(i, 5000) taken
    for Equal(i, 5001) passed every draw in [-9, 9]),
    each symbolic input dimension (those the user does not bind first; at most
    ZERO_DIMS) at size 0 (an empty batch or sequence: a Reshape's -1 beside a 0 is
    refused, a rule that reads a size from an element count is wrong), and those all at size
    1, or each alone at 1 where the original does not run so (Squeeze without axes drops a
    batch of one), and the free ones scaled beyond every value of the model's small integer
    constants (`_beyond`: a Slice to 5 taken for the identity passed sizes of 0 to 3), and
    one larger than the random runs' (their other parity: N = 32 and its multiples passed a
    Slice to N of 2 * ceiling(N / 2) elements taken for the identity). They are compared as
    any run (NaN where NaN, inf where inf of the same sign), but for the large values, where
    the places and kinds of non-finite values must agree (an overflow on one side only
    is what they look for) and finite ones within a tolerance grown by what rounding moves
    (compare's finite_free "values", after the scaled cases): a large value cancelling against
    itself along two paths leaves a result whose rounding error is relative to the large terms,
    not to it. A case the
    original does not run on (a Conv over 0 pixels, a mask that must be total = past +
    sequence) is left out: the original's refusal is not the optimizer's fault; a case is
    drawn at `seed`, and where the original refuses that draw, again at seed 0 (the first
    random draw, which it ran: `_edge_expected`). Each costs
    one run of each model, on empty tensors for the sizes of 0. Returns what was checked and
    left out, as a clause, or the failed Verification."""
    sizes = dict(sizes or {})
    cases, free = _edge_cases(original, feeds, sizes, dims)
    listed = [ZEROS_LABEL if k == "zeros" and feeds.has_general_integers() else EDGE_KINDS[k] for k in EDGE_KINDS]
    ran, refused = [], []
    for label, kind, at in cases:  # (grows while it runs: each size 1 alone where all at 1 is refused)
        found = _edge_expected(feeds, ref, label, kind, at, seed, wide)
        if found is None:  # the original does not take these: nothing to compare
            if kind == "ones":  # such as a KV cache's total = past + sequence: then each alone
                cases += [(f"{n}=1", "one", {**sizes, n: 1}) for n in free[:ZERO_DIMS] if sizes.get(n) != 1]
            else:
                refused.append(label)
            continue
        f, expected, used = found
        where = f"{label} (symbolic sizes {_listed(at)})" if kind in SIZE_KINDS else label
        failed = _edge_verdict(original, ref, opt, kind, f, at, used, expected, (rtol, atol, qdq, noise, aside),
                               where, f"{where}; seed {used}")
        if failed:
            return failed
        ran.append(label)
    covered = _covering_runs(original, feeds, ref, opt, sizes, wide, rtol, atol, qdq, noise, aside)
    if isinstance(covered, Verification):
        return covered
    out = [covered] if covered else []
    for labels in (ran, refused):
        labels.sort(key=lambda x: listed.index(x) if x in listed else len(listed))
    if ran:
        out.append("on " + _edge_list(ran))
    if refused:
        out.append("not on " + _edge_list(refused) + " (the original does not run on them)")
    return "; ".join(out)


COVERING_LABEL = "inputs that set the If and Where conditions each way"  # the runs of `_covering_runs`


def _covering_runs(original: ModelProto, feeds: Feeds, ref: Runner, opt: Runner, sizes: dict[str, int],
                   wide: bool, rtol: float | None, atol: float | None, qdq: QdqAllowance | None,
                   noise: dict[str, float] | None, aside: list[tuple[str, str]] | None) -> str | Verification:
    """Both models run on the draws of eqsat.verification.conditions.covering_draws: inputs on
    which every three of the original's If and Where conditions that are main-graph values
    (computed ones, `_ifs`, nested ones too; a Where's where it holds one element) take each of
    their ways, where the forced runs
    set every If of a depth alike and the draws led two Ifs (or Wheres) on sum(x) > sum(u) and
    sum(u) > mean(x) no way but three (a main-graph Relu that mattered only in the fourth was
    dropped by a rule file's Relu(y) -> y, written with exit 0).
    Chosen by what the original computes alone, they need no If of one model matched to one of
    the other. A clause saying they ran, "" where none did, or the failed Verification."""
    from eqsat.verification.conditions import covering_draws

    # nested ones too where the condition is a main-graph value (two Ifs in an If's branch on
    # values the main graph computes were forced alike, one depth)
    main = {i.name for i in original.graph.input} | {o for n in original.graph.node for o in n.output}
    conditions = [n.input[0] for n, _ in _ifs(original) + _computed(original, "Where") if n.input[0] in main]
    ran = 0
    for kind, seed, f in covering_draws(original, conditions, feeds, sizes, wide):
        where = f"{COVERING_LABEL} (seed {seed}{'' if kind == 'random' else ', ' + EDGE_KINDS[kind]})"
        try:
            expected = ref(f, sizes)
        except Exception:  # noqa: BLE001, S112 - the original does not run so: nothing to compare
            continue
        failed = _edge_verdict(original, ref, opt, kind, f, sizes, seed, expected, (rtol, atol, qdq, noise, aside),
                               where, where)
        if failed:
            return failed
        ran += 1
    return f"on {ran} {COVERING_LABEL}" if ran else ""


def _edge_verdict(original: ModelProto, ref: Runner, opt: Runner, kind: str, f: dict[str, np.ndarray],
                  at: dict[str, int], used: int, expected: dict[str, object], judging: tuple, where: str,
                  said: str) -> Verification | None:
    """The failed Verification of one edge or covering run (the optimized model on `f` against
    the original's `expected`: it does not run, or `_edge_mismatches` finds differences, said
    to be on `said`), or None where it passes. `judging`: (rtol, atol, qdq, noise, aside)."""
    rtol, atol, qdq, noise, aside = judging
    try:
        got = opt(f, at)
    except Exception as e:  # noqa: BLE001
        return Verification("failed", f"onnxruntime cannot run the optimized model on {where}, where it runs "
                                      f"the original: {_line(e)}", edge_cases=where)
    bad = _edge_mismatches(original, ref, kind, f, at, used, expected, got, rtol, atol, qdq, noise, aside, where)
    if bad:
        return Verification("failed", "; ".join(map(str, bad[:3])) + f" (on {said})", edge_cases=where,
                            requantized=all(m.requantized for m in bad))
    return None


def _edge_mismatches(original: ModelProto, ref: Runner, kind: str, f: dict[str, np.ndarray], at: dict[str, int],
                     used: int, expected: dict[str, object], got: dict[str, object], rtol: float | None,
                     atol: float | None, qdq: QdqAllowance | None, noise: dict[str, float] | None,
                     aside: list[tuple[str, str]] | None = None, where: str = "") -> list[Mismatch]:
    """What `_edge_runs` finds unlike the original on one edge case (`kind`, drawn at `used`):
    compare's, widen's and the QDQ allowance's judgement, less what the original itself leaves
    undetermined (eqsat.verification.ties)."""
    scaled = {"scaled": True, "far": SCALED_FAR, "large": _largest_float(f)}.get(kind, False)
    # the floor capped by the nudged original's moves only loosens: run the nudge where it can matter
    floorless = _unmoved(expected) if kind in ("far", "scaled", "large") else None
    finite_free = "values" if kind == "large" else False
    sens = floorless
    if floorless is not None and compare(expected, got, rtol, atol, finite_free=finite_free, scaled=scaled,
                                         noise=noise, sensitivity=floorless):
        sens = nudged_moves(ref, f, at, expected, used)

    def judged(g):
        found = compare(expected, g, rtol, atol, finite_free=finite_free, scaled=scaled, noise=noise,
                        sensitivity=sens)
        found = widen.judge(original, found, expected, g, f, rtol, atol)
        return found if qdq is None else qdq.filter(found, expected, g, f)

    # the halves sit on a rounding's ties on purpose: no nudge there
    return ties.settle(judged(got), expected, got, f, at, ref, judged, rtol, atol, original,
                       nudge=kind != "halves", aside=aside, where=where)


def _unmoved(expected: dict[str, object]) -> dict[str, object]:
    """compare's `sensitivity` of an original that no nudge moves: no floor at all. A run that
    passes so passes under every sensitivity (the floor only loosens the tolerance)."""
    return {k: np.zeros(e.shape) for k, e in expected.items() if isinstance(e, np.ndarray) and e.dtype.kind == "f"}


def nudged_moves(ref: Runner, f: dict[str, np.ndarray], sizes: dict[str, int], expected: dict[str, object],
                 seed: int) -> dict[str, object] | None:
    """How far the original's floating-point outputs move, element by element, when each float
    input element moves by FAR_NUDGE of itself (or 64 steps of its type, if more), with a sign
    drawn at `seed` (compare's `sensitivity`): inf where either run is not finite; None where the
    original does not run on the nudged inputs. Run after the optimized model on `f` (a staged
    runner matches the optimized model's cut nodes to the original's last run)."""
    rng = np.random.default_rng([seed, 16])
    nudged = {}
    for k, v in f.items():
        if isinstance(v, np.ndarray) and v.dtype.kind == "f" and v.size:
            step = max(FAR_NUDGE, 64 * float(np.finfo(v.dtype).eps))
            v = (v * (1 + step * rng.choice([-1.0, 1.0], v.shape))).astype(v.dtype)
        nudged[k] = v
    try:
        got = alone(ref)(nudged, sizes)
    except Exception:  # noqa: BLE001 - the floor stays the output's
        return None
    out: dict[str, object] = {}
    for k, e in expected.items():
        g = got.get(k)
        if isinstance(e, np.ndarray) and isinstance(g, np.ndarray) and e.shape == g.shape and e.dtype.kind == "f":
            with np.errstate(invalid="ignore", over="ignore"):
                d = np.abs(g.astype(np.float64) - e.astype(np.float64))
            out[k] = np.where(np.isfinite(d), d, np.inf)
    return out



FORCED = "eqsat_forced_condition"  # the name of the constant `_forced_branches` puts in every If's condition


_FORCING: list[bool] = []  # not empty while `_forced_runs` verifies its variants (which it does not vary again)
FORCED_TRIPS = (16, 256)  # `_with_trips`: a trip count twice the largest constant of the bodies, within these
FORCED_COUNTED = 4096  # ... or two past a trip number a body compares its counter with, up to this


def _forced_count(original: ModelProto, optimized: ModelProto, bodies: list) -> int:
    """The trip count or scan length `_forced_trips` and `_forced_lengths` force: twice the largest
    constant of the bodies within FORCED_TRIPS, or two past the largest trip number at which
    a body's comparison of its counter turns (constant_sizes.counter_bounds), up to
    FORCED_COUNTED: a body that adds a value only once its counter passes 300 reads it on no
    run of 256 trips (a rule file's x * x -> x of that value was written with exit 0)."""
    from eqsat.verification.constant_sizes import bound_values, counter_bounds

    bound = max((v for g in bodies for v in bound_values(onnx.helper.make_model(g)) if v <= FORCED_TRIPS[1]),
                default=1)
    counted = [c + 2 for m in (original, optimized) for c in counter_bounds(m) if c + 2 <= FORCED_COUNTED]
    return max([min(max(FORCED_TRIPS[0], 2 * bound), FORCED_TRIPS[1]), *counted])


def _forced_runs(original: ModelProto, optimized: ModelProto, runs: int, rtol: float | None,
                 atol: float | None, dims: dict[str, int] | None, random_pairs: dict[str, str] | None
                 ) -> str | Verification:
    """`_forced_branches`, `_forced_trips`, then `_forced_lengths`: what they ran, as a clause, or the failed
    Verification."""
    _FORCING.append(True)
    try:
        out = []
        for forced in (_forced_branches, _forced_trips, _forced_lengths):
            got = forced(original, optimized, runs, rtol, atol, dims, random_pairs)
            if isinstance(got, Verification):
                return got
            out.append(got)
        return "; ".join(x for x in out if x)
    finally:
        _FORCING.pop()


def _forced_trips(original: ModelProto, optimized: ModelProto, runs: int, rtol: float | None,
                  atol: float | None, dims: dict[str, int] | None, random_pairs: dict[str, str] | None
                  ) -> str | Verification:
    """Both models verified again with every computed trip count (`_loops`: nested Loops too, not
    ones the constants decide) a constant T (`_with_trips`), where either has one: a trip count
    drawn as a size is at most 9, and a value of the main graph that a body reads only on later
    trips was compared nowhere (a rule file's x * x -> x of a value a body adds from trip 11 on
    was written with exit 0). The two need not have as many Loops: a rule file's Loop -> its
    initial value, right for trip counts up to 10 only, took the Loop out of the optimized
    model, and forcing left both out (written with exit 0). Where `_forced_branches` forces the
    Ifs, once more with each of its ways of forcing them: a Loop in a branch that the inputs
    drawn never take runs its later trips only so. What was run, or what the original does not
    run on, as a clause, or the failed Verification."""
    loops = [_loops(original), _loops(optimized)]
    if not loops[0] and not loops[1]:
        return ""
    bodies = [a.g for n in loops[0] + loops[1] for a in n.attribute if a.name == "body"]
    trips = _forced_count(original, optimized, bodies)
    label = f"every Loop's trip count {trips}"
    ran, refused = [], []
    for values in [None, *_condition_patterns(original, optimized)]:
        pair = [_with_trips(m, trips) for m in (original, optimized)]
        if values is not None:
            pair = [_with_conditions(m, values) for m in pair]
        v = verify(*pair, runs, rtol, atol, dims, random_pairs=random_pairs)
        forced = "" if values is None else " and every If's condition forced " + _depths_label(values)
        if v.status == "failed":
            return dataclasses.replace(v, detail=f"{v.detail} (with {label}{forced})", edge_cases=label + forced)
        (ran if v.status == "passed" else refused).append(forced)
    also = sum(1 for x in ran if x)
    out = [f"on {label}" + (f" (also with the If conditions forced {also} way{'s' * (also > 1)})" if also else "")
           ] if ran else []
    if refused:
        out.append(f"not with {label}{refused[0]} (the original does not run so)")
    return "; ".join(out)


def _forced_lengths(original: ModelProto, optimized: ModelProto, runs: int, rtol: float | None,
                    atol: float | None, dims: dict[str, int] | None, random_pairs: dict[str, str] | None
                    ) -> str | Verification:
    """Both models verified again with every free symbolic size that is not a batch (all, where
    each is) a constant T past the constants of the Scan bodies of either's main graph (as
    `_forced_trips` takes T), where either has a Scan: a scan's length is an input's size,
    drawn small and scaled past the main graph's constants alone, and a value of the main graph
    that a body reads only at later iterations (through a counter it carries) was compared
    nowhere (a rule file's x * x -> x of a value a body adds from iteration 12 on was written
    with exit 0). What was run, or what the original does not run on, as a clause, or the
    failed Verification."""
    bodies = [a.g for m in (original, optimized) for n in m.graph.node
              if n.op_type == "Scan" and n.domain in ("", "ai.onnx") for a in n.attribute if a.name == "body"]
    free = [n for n in symbolic_input_dims(original) if n not in (dims or {})]
    names = [n for n in free if "batch" not in n.lower()] or free
    if not bodies or not names:
        return ""
    length = _forced_count(original, optimized, bodies)
    at = dict.fromkeys(names, length)
    v = verify(original, optimized, runs, rtol, atol, {**(dims or {}), **at}, random_pairs=random_pairs)
    label = f"every Scan's length {length} (symbolic sizes {_listed(at)})"
    if v.status == "failed":
        return dataclasses.replace(v, detail=f"{v.detail} (with {label})", edge_cases=label)
    return f"on {label}" if v.status == "passed" else f"not with {label} (the original does not run so)"


def _loops(model: ModelProto) -> list:
    """Every Loop whose trip count is computed (`_computed`), nested ones too, or whose condition
    is (`_conditioned`: a while loop, or a loop that exits early): a main-graph value that a Loop
    nested in a body reads only on later trips is reached only where that Loop's trip count is
    forced too (a rule file's x * x -> x of a value a Loop in a Loop's body adds from trip 11 on
    was written with exit 0), and a Loop without a trip count, or with a constant one, whose
    condition ends it after m trips (m an input drawn up to 9) read such a value nowhere either
    (written with exit 0)."""
    return [n for n, _ in _computed(model, "Loop", _conditioned)]


def _conditioned(n: onnx.NodeProto, consts: set[str]) -> bool:
    """Whether Loop `n` may stop before its trip count: its condition input is given and no constant
    (`consts`: those of its scope), or its body's condition output is not its condition input passed on
    (as it is, or through Identity) nor a constant of the body (`_from_constants`)."""
    if len(n.input) > 1 and n.input[1] and n.input[1] not in consts:
        return True
    body = next((a.g for a in n.attribute if a.name == "body"), None)
    if body is None or len(body.input) < 2 or not body.output:
        return False
    cond, made = body.output[0].name, {o: m for m in body.node for o in m.output}
    fixed = consts | {m.output[0] for m in body.node if m.op_type == "Constant" and m.output}
    src = made.get(cond)
    return not (cond == body.input[1].name or cond in fixed | _from_constants(body, fixed)
                or src is not None and src.op_type == "Identity" and src.input[0] == body.input[1].name)


def _with_trips(model: ModelProto, trips: int) -> ModelProto:
    """A copy of `model` whose computed trip counts (`_loops`, nested ones too) are all the constant
    `trips` of the main graph, and those Loops' conditions true (their input and their body's output):
    each runs `trips` trips."""
    out = ModelProto()
    out.CopyFrom(model)
    name, true = f"{FORCED}_trips", f"{FORCED}_go"
    for k, n in enumerate(_loops(out)):
        while len(n.input) < 2:
            n.input.append("")
        n.input[0], n.input[1] = name, true
        body = next(a.g for a in n.attribute if a.name == "body")
        cond = f"{FORCED}_cond{k}"
        body.node.append(onnx.helper.make_node("Constant", [], [cond], value=onnx.helper.make_tensor(
            cond, onnx.TensorProto.BOOL, [], [True])))
        body.output[0].name = cond
    out.graph.node.insert(0, onnx.helper.make_node("Constant", [], [name], value=onnx.helper.make_tensor(
        name, onnx.TensorProto.INT64, [], [trips])))
    out.graph.node.insert(0, onnx.helper.make_node("Constant", [], [true], value=onnx.helper.make_tensor(
        true, onnx.TensorProto.BOOL, [], [True])))
    return out


def _forced_branches(original: ModelProto, optimized: ModelProto, runs: int, rtol: float | None,
                     atol: float | None, dims: dict[str, int] | None, random_pairs: dict[str, str] | None
                     ) -> str | Verification:
    """Both models verified again with every computed If condition (`_ifs`: nested ones too, not
    ones the constants decide) a constant (`_with_conditions`), where one is not a graph input:
    once for each way of forcing the depths
    true or false (FORCED_DEPTHS of them; deeper ones as the deepest of those), so that each
    branch of an If in another's else branch is reached too. The runs reach a branch only where
    the inputs drawn lead there, and a value of the main graph that only such a branch reads
    was compared nowhere (a rule file's x * x -> x of a value read by a branch taken where
    i == 5000 was written with exit 0; the branch as a model of its own takes the value as an
    input). The two need not have as many Ifs: a rule file's If(c, Neg(x), x) -> x took the If
    out of the optimized model, and forcing left both out (written with exit 0). What was run
    and what the original does not run on, as a clause, or the failed Verification."""
    patterns = _condition_patterns(original, optimized)
    if not patterns:
        return ""
    ran, refused = [], []
    for values in patterns:
        v = verify(_with_conditions(original, values), _with_conditions(optimized, values), runs, rtol, atol, dims,
                   random_pairs=random_pairs)
        if v.status == "failed":
            label = _depths_label(values)
            return dataclasses.replace(v, detail=f"{v.detail} (with every If's condition forced {label})",
                                       edge_cases=f"every If's condition forced {label}")
        (ran if v.status == "passed" else refused).append("/".join("true" if x else "false" for x in values))
    by_depth = " by nesting depth" if len(patterns) > 2 else ""
    out = []
    if ran:
        out.append("on every If's condition forced " + _and(ran) + by_depth)
    if refused:
        out.append("not with every If's condition forced " + " or ".join(refused) + by_depth
                   + " (the original does not run so)")
    return "; ".join(out)


def _condition_patterns(original: ModelProto, optimized: ModelProto) -> list[tuple[bool, ...]]:
    """The values `_with_conditions` gives the depths of computed Ifs, one tuple a run: every way
    of setting FORCED_DEPTHS of them (fewer where the Ifs nest less), or none where neither model
    has none or every condition is a graph input (which the draws negate). The two models need not
    have as many: each is forced on its own."""
    ifs = _ifs(original) + _ifs(optimized)
    inputs = {i.name for i in original.graph.input} | {i.name for i in optimized.graph.input}
    if all(n.input[0] in inputs for n, _ in ifs):
        return []
    return list(itertools.product((True, False), repeat=min(1 + max(d for _, d in ifs), FORCED_DEPTHS)))


def _depths_label(values: tuple[bool, ...]) -> str:
    return "/".join("true" if x else "false" for x in values) + (" by nesting depth" if len(values) > 1 else "")


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


FORCED_DEPTHS = 3  # `_forced_branches` forces the Ifs of up to this many nesting depths apart (2 ** 3 runs)


def _ifs(model: ModelProto) -> list[tuple]:
    """(If, nesting depth) of every If whose condition is computed, in the main graph and nested
    in any body; the depth counts the computed Ifs whose branches hold it. An If whose condition
    is a constant computes the same either way (eqsat inlines its branch, so counting those, a
    model with one such If found the optimized one with an If less and forced nothing), and a
    main-graph value that only an If nested in a branch reads is reached only where that If is
    forced too."""
    return _computed(model, "If")


def _computed(model: ModelProto, op: str, also: Callable | None = None) -> list[tuple]:
    """(node, depth) of the nodes `op` of the standard domain, in the main graph and nested in
    any body, whose first input is given and is no constant: not a Constant node's output of
    its scope or an enclosing one, a value of the main graph no input can change (`_decided`:
    initializers no caller overrides and what is computed from them and from fixed shapes), or
    a small integer the main graph computes from constants alone (constant_sizes.constant_values), or for
    which `also(node, the constants of its scope)` holds. The depth counts the nodes found whose bodies
    hold the node."""
    from eqsat.core.initializers import fixed_initializers
    from eqsat.verification.constant_sizes import constant_values

    out: list[tuple] = []

    def walk(g: onnx.GraphProto, consts: set[str], depth: int) -> None:
        consts = consts | {t.name for t in g.initializer if g is not model.graph}
        consts |= {n.output[0] for n in g.node if n.op_type == "Constant" and n.output}
        consts |= _from_constants(g, consts)
        for n in g.node:
            found = (n.op_type == op and n.domain in ("", "ai.onnx")
                     and (bool(n.input) and bool(n.input[0]) and n.input[0] not in consts
                          or also is not None and also(n, consts)))
            if found:
                out.append((n, depth))
            for a in n.attribute:
                for body in subgraphs(a):
                    walk(body, consts, depth + found)

    walk(model.graph, set(fixed_initializers(model)) | set(constant_values(model)) | _decided(model), 0)
    return out


def _from_constants(g: onnx.GraphProto, consts: set[str]) -> set[str]:
    """The values of `g` its deterministic ops without subgraphs compute from `consts` alone (a body's
    Not(Constant false)): an If on one takes the same branch on every trip, and eqsat inlines it, so
    forcing the original alone to the other branch refused that right program."""
    out: set[str] = set()
    for n in g.node:
        if n.domain in ("", "ai.onnx") and n.op_type not in NONDETERMINISTIC and any(i for i in n.input) \
                and all(i in consts or i in out for i in n.input if i) \
                and not any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute):
            out.update(o for o in n.output if o)
    return out


def _with_conditions(model: ModelProto, values: tuple[bool, ...]) -> ModelProto:
    """A copy of `model` whose computed If conditions (`_ifs`, nested ones too) are constants of
    the main graph: `values[d]` at nesting depth d, the last of `values` deeper, negated where the
    condition is a Not of a value (`_negated`): forced true, If(Not(c), b, a) takes a as If(c, a, b)
    does (that right rewrite was refused: forced, the two took other branches). A branch that reads
    its If's condition reads it as the branch's value (true in the then branch, false in the else
    branch), as it is wherever the branch runs: a right Where(c, a, b) -> a in If(c)'s then branch
    was refused (forced true, the original's Where read the drawn c, false)."""
    out = ModelProto()
    out.CopyFrom(model)
    made = _producers(out.graph)
    for n, depth in _ifs(out):
        value = values[min(depth, len(values) - 1)] != _negated(made, n.input[0])
        cond, n.input[0] = n.input[0], f"{FORCED}_{'true' if value else 'false'}"
        for a in n.attribute:
            if a.name in ("then_branch", "else_branch"):
                _renamed(a.g, cond, f"{FORCED}_{'true' if a.name == 'then_branch' else 'false'}")
    for value in (False, True):
        name = f"{FORCED}_{'true' if value else 'false'}"
        out.graph.node.insert(0, onnx.helper.make_node("Constant", [], [name], value=onnx.helper.make_tensor(
            name, onnx.TensorProto.BOOL, [], [value])))
    return out


def _renamed(g: onnx.GraphProto, name: str, to: str) -> None:
    """`g` (and the graphs nested in it) reading `to` where it read the value `name` of an enclosing graph."""
    from eqsat.core.scopes import subgraphs

    if name in {i.name for i in g.input} | {t.name for t in g.initializer} | {o for n in g.node for o in n.output}:
        return  # a value of its own of that name
    for n in g.node:
        n.input[:] = [to if i == name else i for i in n.input]
        for a in n.attribute:
            for sub in subgraphs(a):
                _renamed(sub, name, to)
    for o in g.output:
        if o.name == name:
            g.node.append(onnx.helper.make_node("Identity", [to], [f"{to}_{name}"]))
            o.name = f"{to}_{name}"


def _producers(g: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    """The node that makes each value of `g` and of the graphs nested in it."""
    from eqsat.core.scopes import subgraphs

    out: dict[str, onnx.NodeProto] = {}
    todo = [g]
    while todo:
        h = todo.pop()
        out.update((o, n) for n in h.node for o in n.output if o)
        todo.extend(sub for n in h.node for a in n.attribute for sub in subgraphs(a))
    return out


def _negated(made: dict[str, onnx.NodeProto], name: str) -> bool:
    """Whether value `name` is an odd number of Nots (through Identity) of another value (`made`: `_producers`)."""
    odd, seen = False, set()
    while (n := made.get(name)) is not None and n.domain in ("", "ai.onnx") and n.op_type in ("Not", "Identity") \
            and name not in seen:
        seen.add(name)
        odd ^= n.op_type == "Not"
        name = n.input[0]
    return odd


# ops whose outputs differ from run to run on the same inputs: never decided by the constants
NONDETERMINISTIC = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                              "Multinomial", "Bernoulli", "Dropout"})


def _decided(model: ModelProto) -> set[str]:
    """The names of the main graph's values that no value of its inputs can change: constants,
    initializers that are not inputs too, and what the graph's deterministic ops without
    subgraphs compute from those and from the Shape or Size of values whose shape shape
    inference finds fixed (a condition on Shape(x) of x[1, 3]). A forced If condition or Loop
    trip count must not be one of those: the original's value there is the only one it ever
    takes, and eqsat inlines or unrolls such nodes, so that forcing the original alone ran it
    on a branch no input reaches."""
    inputs = {i.name for i in model.graph.input}
    decided = {t.name for t in model.graph.initializer if t.name not in inputs}
    decided |= {t.name for t in model.graph.sparse_initializer if t.name not in inputs}
    fixed = _fixed_shapes(model)
    for n in model.graph.node:
        if n.domain not in ("", "ai.onnx") or n.op_type in NONDETERMINISTIC \
                or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute):
            continue
        if n.op_type in ("Shape", "Size") and n.input and n.input[0] in fixed \
                or all(i in decided for i in n.input if i):
            decided.update(o for o in n.output if o)
    return decided


def _fixed_shapes(model: ModelProto) -> set[str]:
    """The main graph's values whose shape onnx's shape inference gives with every dimension a number."""
    from eqsat.core import native
    from eqsat.core.shapes import _skeleton

    try:
        g = native.infer_shapes(_skeleton(model), check_type=False, strict_mode=False).graph
    except Exception:  # noqa: BLE001 - then no shape is taken for fixed
        return set()
    return {vi.name for vi in (*g.input, *g.value_info, *g.output)
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")
            and all(d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)}


def _edge_cases(original: ModelProto, feeds: Feeds, sizes: dict[str, int], dims: dict[str, int] | None
                ) -> tuple[list[tuple[str, str, dict[str, int]]], list[str]]:
    """(the (label, kind, sizes) of `_edge_runs`' cases, the symbolic dimensions tried at size 0 and 1:
    the free ones first)."""
    # the large values last of these, listed in EDGE_KINDS' order: what the others find, they say more plainly
    kinds = [k for k in EDGE_KINDS if k != "large"] + ["large"]
    cases: list[tuple[str, str, dict[str, int]]] = [(EDGE_KINDS[k], k, sizes) for k in kinds]
    if feeds.has_general_integers():
        cases[0] = (ZEROS_LABEL, "zeros", sizes)
    if feeds.has_sizes():
        cases += [(SIZES_LABEL, "sizes", sizes), (LARGER_LABEL, "larger", sizes), (NEGATIVE_LABEL, "negative", sizes)]
        if _size_beyond(original) is not None:
            cases.append((SIZES_BEYOND_LABEL, "beyond-sizes", sizes))
    if feeds.has_general_integers():
        cases.append((EXTREMES_LABEL, "extremes", sizes))
    if feeds.has_compared():
        cases += [(COMPARED_LABEL, "compared", sizes), (ABOVE_LABEL, "above", sizes)]
        if feeds.has_single_compared():
            cases.append((BELOW_LABEL, "below", sizes))
        cases += [(f"{COMPARED_LABEL} {feeds.split_label(g)}", f"split{k}", sizes)
                  for k, g in enumerate(feeds.compared_splits())]
    if feeds.has_flags():
        cases.append((NEGATED_LABEL, "negated", sizes))
    if feeds.has_masks():
        cases.append((MASKS_LABEL, "masks", sizes))
    if feeds.has_several_flags():
        cases += [(TRUE_LABEL, "true", sizes), (FALSE_LABEL, "false", sizes)]
    # the free ones first; a bound one too (`dims` sizes the inputs, the written model keeps the
    # symbol: a fused op that refuses an empty batch was written where --dim bound it)
    free = [n for n in symbolic_input_dims(original) if n not in (dims or {})]
    free += [n for n in symbolic_input_dims(original) if n in (dims or {})]
    cases += [(f"{n}=0", "empty", {**sizes, n: 0}) for n in free[:ZERO_DIMS]]
    if free and any(sizes.get(n) != 1 for n in free):
        cases.append((ONES_LABEL, "ones", {**sizes, **dict.fromkeys(free, 1)}))
    beyond = _beyond(original, sizes, dims)
    if beyond is not None:
        cases.append((BEYOND_LABEL, "beyond", beyond))
    # sizes of the other parity: the random runs' sizes may be the only ones the original takes
    # below its constants, and every run past them scales those (a rewrite right only where
    # 2 * ceiling(N / 2) = N passed N = 32 and its multiples)
    unbound = [n for n in free if n not in (dims or {}) and n in sizes]
    if unbound:
        cases.append((NEXT_LABEL, "next", {**sizes, **{n: sizes[n] + 1 for n in unbound}}))
    return cases, free


def _edge_expected(feeds: Feeds, ref: Runner, label: str, kind: str, at: dict[str, int], seed: int, wide: bool):
    """(inputs, the original's outputs, seed) of one edge case of `_edge_runs`, drawn at `seed`, or
    where the original does not run those, at seed 0, the first random draw, which it ran at these
    sizes (a size input that drew [0] at the edge cases' seed, where it drew [1] before, left them
    all out); None where it runs neither."""
    for s in (0,) if kind == "negated" else dict.fromkeys((seed, 0)):
        try:
            f = _edge_feeds(feeds, kind, at, s, wide)
            announce(f"edge {label}")
            return f, ref(f, at), s
        except Exception:  # noqa: BLE001, PERF203 - the original does not take these
            continue
    return None


def _edge_feeds(feeds: Feeds, kind: str, at: dict[str, int], seed: int, wide: bool) -> dict[str, np.ndarray]:
    """The inputs of one edge case of `_edge_runs` (raises EqsatError where they cannot be made)."""
    if kind == "negated":  # the first random draw's (which the original ran), so that each flag takes both values
        return feeds.with_flags_negated(feeds.draw(at, 0, wide))
    f = feeds.draw(at, seed, wide)
    if kind == "sizes":
        return feeds.with_large_sizes(f, seed)
    if kind == "larger":
        return feeds.with_larger_sizes(f, seed)
    if kind == "negative":
        return feeds.with_negative_sizes(f, seed)
    if kind == "beyond-sizes":
        return feeds.with_sizes_beyond(f, seed, _size_beyond(feeds.model))
    if kind == "extremes":
        return feeds.with_integer_extremes(f, seed)
    if kind == "masks":
        return feeds.with_masks_widened(f, seed)
    if kind in ("compared", "above", "below"):
        return feeds.with_compared(f, {"compared": 0, "above": 1, "below": -1}[kind], at)
    if kind.startswith("split"):
        return feeds.with_compared(f, 0, at, only=feeds.compared_splits()[int(kind[5:])])
    if kind in ("true", "false"):
        return feeds.with_booleans_set(f, kind == "true")
    if kind in SIZE_KINDS:
        return f
    return feeds.with_special_values(f, seed, kind)


def _edge_list(labels: list[str]) -> str:
    sizes = [x for x in labels if x.endswith(("=0", "=1"))]
    rest = [x for x in labels if not x.endswith(("=0", "=1"))]
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
    ahead = RunAhead(lambda f: dict(zip(names, opt_sess.run(names, f), strict=True)))

    def run_ref(f, sizes):  # the optimized model starts on the same inputs beside it (eqsat.verification.paired)
        announce("run original")
        ahead.start(f)
        return dict(zip(names, ref_sess.run(names, f), strict=True))

    def run_ref_alone(f, sizes):  # inputs the optimized model is not run on (a nudge of the original's)
        announce("run original")
        return dict(zip(names, ref_sess.run(names, f), strict=True))

    run_ref.alone = run_ref_alone

    def run_opt(f, sizes):
        announce("run optimized")
        return ahead.take(f)

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
    """(sizes, wide, feeds, outputs) of the first sizes of `verification_dims`, then of
    `constant_sizes` (only where none of those runs: sizes the model's constants fix, such as
    a ViT's patch count), then of `separate_sizes` (only where none of those runs: a height
    and a width the constants fix apart), and the first way of drawing integers (by use, then 0 or 1, then by
    use with sizes of 2 and 3 and with a -1 among those: Feeds.size_mode, which `feeds` keeps)
    the original runs with; else a Verification saying it is not possible (a Reshape of 6
    values to a size input was, and an unsound rewrite of that size was written unverified)."""
    from eqsat.verification.constant_sizes import constant_sizes, separate_sizes

    tried = verification_dims(original, dims)
    found = _first_of(feeds, ref, tried, seed)
    free = [n for n in symbolic_input_dims(original) if n not in (dims or {})]
    first = found
    for read in (constant_sizes, separate_sizes) if free else ():
        if not isinstance(found, Exception):
            break
        more = read(original, free, tried[0], tried)
        found = _first_of(feeds, ref, more, seed) if more else found
        tried += more
    found = first if isinstance(found, Exception) else found
    if not isinstance(found, Exception):
        return found
    shown = "; ".join(_listed(t) for t in tried[:TRIES_SHOWN])
    if len(tried) > TRIES_SHOWN:
        shown += f"; and {len(tried) - TRIES_SHOWN} more"
    hint = (f" (symbolic sizes tried: {shown}; pass --dim NAME=SIZE "
            "for the sizes the model needs)") if tried != [dict(dims or {})] else ""
    return Verification("not possible", f"onnxruntime cannot run the original on random inputs: {_line(found)}{hint}")


def _first_of(feeds: Feeds, ref: Runner, tried: list[dict[str, int]], seed: int):
    """`_first_that_runs` over these sizes: its tuple, the "not possible" Verification where the
    inputs cannot be made, or the first exception of onnxruntime where none runs."""
    first: Exception | None = None
    ways = [(True, ""), (False, "")] if feeds.roles and WIDE_INTEGERS else [(False, "")]
    if feeds.has_sizes() and WIDE_INTEGERS:
        ways += [(True, "large"), (True, "negative")]
    for attempt in tried:
        for wide, mode in ways:
            feeds.size_mode = mode
            try:
                f = feeds.draw(attempt, seed, wide)
            except EqsatError as e:
                feeds.size_mode = ""
                return Verification("not possible", str(e))
            try:
                return attempt, wide, f, ref(f, attempt)
            except Exception as e:  # noqa: BLE001 - e.g. random ids out of a table's range, a size too small
                first = first or _detached(e)
    feeds.size_mode = ""
    return first or EqsatError("no sizes to try")


def _detached(e: BaseException) -> BaseException:
    """`e` without its tracebacks (its own and those of the exceptions it chains): a kept
    exception's traceback holds the frames that raised it, `_first_of`'s with its drawn inputs
    (which hold the exception in turn), so the inputs of every size tried lived until the
    garbage collector ran: 550 MiB a verification of a small cached-attention model."""
    seen: set[int] = set()
    x: BaseException | None = e
    while x is not None and id(x) not in seen:
        seen.add(id(x))
        x.__traceback__ = None
        x = x.__cause__ or x.__context__
    return e


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
