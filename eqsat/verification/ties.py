"""Differences at output elements that the original itself does not determine.

An element picked among near-equal values (TopK, ArgMax/ArgMin, NonMaxSuppression, a sort)
or computed ill-conditioned differs between two right programs whose roundings differ: a fused
score computation reorders two tied rows. Where a comparison finds differences (and only
then: a passing run costs nothing more), `settle` looks again in two ways:

- rows (`permuted_rows`): outputs whose first dimension is that of a 1-D floating-point output
  (a detection's scores beside its boxes and labels) may list the original's rows in another
  order among rows whose keys tie within the tolerance (the original's order there is its
  sort's tie-breaking), each row matched whole, within the tolerance: alone on the whole and
  half numbers, where `nudge` is off, and elsewhere only where the nudged runs below move
  the original's rows as much;
- elements (`undetermined`): the original runs again, up to TIE_RUNS times, with its inputs
  and its floating-point initializers each moved by TIE_NUDGE of itself (`nudged`, about 8
  float32 steps: what rounding moves them by), and an element is set aside where such a run
  leaves the original's own tolerance there (a discrete choice among near-equal values, an
  ill-conditioned value): the original does not determine it to the tolerance. A float
  element is set aside only within SPREAD times the farthest those runs move it (`near_spread`):
  an ill-conditioned 1000 +- 10 is still no 1e4.

Every other element is judged as before: a wrong program is off at rows whose keys do not tie
and at elements that the nudges leave within the tolerance (an ArgMax over well-separated
values), or in a shape (a TopK's k), which nothing sets aside.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from onnx import ModelProto, numpy_helper

from eqsat.verification.mismatch import Mismatch
from eqsat.verification.outcome import _scale, tolerance
from eqsat.verification.paired import alone

# The relative move of each floating-point input and initializer element: about 8 float32
# steps, the order of what reassociated float32 arithmetic differs by in its terms, and far
# below the tolerance's 1e-3, so that a nudged run leaves the tolerance only where the original
# amplifies rounding (measured: RAFT-small's flow on its inputs times 0.0001 leaves it at 244 of
# 3072 elements after 4 runs).
TIE_NUDGE = 2.0 ** -20
TIE_RUNS = 8  # nudged runs of the original at most (four pairs of opposite moves), only after a mismatch
MOVED_ROWS = 4096  # rows `permuted_rows` matches at most (each against each)
# An element set aside as undetermined must still lie within this many times what the nudged
# runs moved the original's value by (plus the tolerance): a program that rounds otherwise
# moves an ill-conditioned value by about as much as a nudge of 8 float32 steps does
SPREAD = 4.0
SMALL = 8  # initializers of fewer elements are not moved (thresholds, Resize scales: they change shapes)

Runner = Callable[[dict[str, np.ndarray], dict[str, int]], dict[str, object]]
Rejudge = Callable[[dict[str, object]], list[Mismatch]]


def _moves(shape, rng: np.random.Generator, seed: int, scale: float = 1.0) -> np.ndarray:
    """Relative moves of magnitude uniform in [0.5, 1] * TIE_NUDGE with random signs, negated for
    odd seeds: each pair of seeds moves two values that tie within what the draw moves them
    apart by one way and then the other."""
    u = rng.uniform(0.5, 1.0, shape) * rng.choice([-1.0, 1.0], shape)
    return (-1.0 if seed % 2 else 1.0) * TIE_NUDGE * scale * u


def nudged(f: dict[str, object], seed: int, scale: float = 1.0) -> dict[str, object]:
    """`f` with each floating-point element x moved to x * (1 + `_moves`), drawn at `seed` // 2;
    other inputs as they are (`scale` 0: not moved, for `_faithful`)."""
    rng = np.random.default_rng([seed // 2, 30])
    out = {}
    for k, v in f.items():
        if isinstance(v, np.ndarray) and v.dtype.kind == "f" and v.size:
            v = (v * (1 + _moves(v.shape, rng, seed, scale))).astype(v.dtype)
        out[k] = v
    return out


def nudged_model(model: ModelProto, seed: int, scale: float = 1.0) -> ModelProto | None:
    """A copy of `model` with each floating-point initializer of the main graph of at least
    SMALL elements moved as `nudged` moves inputs; None where there is none."""
    rng = np.random.default_rng([seed // 2, 31])
    out = ModelProto()
    out.CopyFrom(model)
    moved = False
    for t in out.graph.initializer:
        if t.data_type not in (1, 10, 11) or np.prod(t.dims, dtype=np.int64) < SMALL or t.data_location == 1:
            continue  # float, float16, double only; external data stays
        v = numpy_helper.to_array(t)
        t.CopyFrom(numpy_helper.from_array((v * (1 + _moves(v.shape, rng, seed, scale))).astype(v.dtype), t.name))
        moved = True
    return out if moved else None


def settle(bad: list[Mismatch], expected: dict[str, object], got: dict[str, object], f: dict[str, object],
           sizes: dict[str, int] | None, ref: Runner, rejudge: Rejudge, rtol: float | None,
           atol: float | None, original: ModelProto | None = None, nudge: bool = True,
           aside: list[tuple[str, str]] | None = None, where: str = "") -> list[Mismatch]:
    """`bad` (the mismatches of comparing `got` with `expected`, the original's outputs on `f`),
    or [] where `rejudge` (the same comparison of another `got`) finds nothing once the
    elements the original leaves undetermined (`undetermined`, floats within `near_spread` of
    the original's: against up to TIE_RUNS runs of the original on `nudged` inputs, `original`
    with `nudged_model` initializers where given and onnxruntime runs it, else `ref`) take the
    original's values. Rows listed in another order among tied keys pass so, where the nudged
    runs reorder them too: matched by `permuted_rows` alone, a Gather of a constant
    permutation dropped beside a constant sorted output passed, the keys tied exactly and no
    nudge moving a row. Only tensor outputs of the original's shape and type are set aside;
    `bad` stands whole otherwise. `nudge` False (the whole and half numbers, on a rounding's
    ties on purpose): rows matched by `permuted_rows` alone. Where it returns [], `aside` gets
    (what was set aside, `where`: which run), for the verification's detail."""
    if not bad:
        return bad
    rows = permuted_rows(expected, got, rtol, atol)
    rows_said = f"rows of tied scores in another order in {', '.join(sorted(rows))}"
    if not nudge:
        if not rows or rejudge({**got, **rows}):
            return bad
        if aside is not None:
            aside.append((rows_said, where))
        return []
    if rows and not rejudge({**got, **rows}) and _computed_keys(original, ref, f, sizes, expected, got, rtol, atol):
        if aside is not None:
            aside.append((rows_said, where))
        return []
    names = {m.output for m in bad}
    targets = [n for n in names if _same_tensor(expected.get(n), got.get(n))]
    if len(targets) < len(names) or not _faithful(original, ref, f, sizes, expected, targets):
        return bad
    allowed = {n: np.zeros(np.shape(expected[n]), bool) for n in targets}
    spread = {n: np.zeros(np.shape(expected[n]), np.float64) for n in targets}
    seen = {n: np.zeros(np.shape(expected[n]), bool) for n in targets}
    for seed in range(TIE_RUNS):
        other = _nudged_run(original, ref, f, sizes, seed)
        if other is None:
            return bad
        for n in targets:
            allowed[n] |= undetermined(expected[n], got[n], other.get(n), rtol, atol)
            spread[n] = np.maximum(spread[n], moved_by(expected[n], other.get(n)))
            seen[n] |= _seen(got[n], other.get(n))
        within = {n: allowed[n] & (seen[n] | near_spread(expected[n], got[n], spread[n], rtol, atol))
                  for n in targets}
        if not rejudge({**got, **{n: np.where(within[n], expected[n], got[n]) for n in targets}}):
            if aside is not None:
                counts = ", ".join(f"{int(allowed[n].sum())} of {allowed[n].size} in {n}" for n in sorted(targets))
                said = f"elements the original moves beyond the tolerance when nudged ({counts})"
                aside.append((f"{rows_said}, {said}" if rows else said, where))
            return []
    return bad


def _computed_keys(original: ModelProto | None, ref: Runner, f: dict[str, object], sizes: dict[str, int] | None,
                   expected: dict[str, object], got: dict[str, object], rtol: float | None,
                   atol: float | None) -> bool:
    """Whether a nudged run of the original (`_nudged_run`, `_faithful` first) moves every sort
    key `permuted_rows` reads, in value or in length (a detector's count of boxes past its
    threshold): keys computed from the inputs, whose exact ties (a detection's
    scores over a 1 x 1 image) the optimized model's rounding may break another way. A key no
    nudge moves (a constant's sorted [1, 0, 0, 0]) ties by construction, and rows listed in
    another order beside it are another function (a Gather of a constant permutation dropped)."""
    keys = _keys(expected, got, rtol, atol)
    if not keys or not _faithful(original, ref, f, sizes, expected, keys):
        return False
    other = _nudged_run(original, ref, f, sizes, 0)
    return other is not None and all(
        isinstance(other.get(k), np.ndarray) and not (np.shape(other[k]) == np.shape(expected[k])
                                                      and np.array_equal(other[k], expected[k])) for k in keys)


def _faithful(original: ModelProto | None, ref: Runner, f: dict[str, object], sizes: dict[str, int] | None,
              expected: dict[str, object], targets: list[str]) -> bool:
    """Whether `_nudged_run` with nothing moved gives the original's outputs `expected`, bit for
    bit, on `targets`: else the nudged runs compute another function (an overridable
    initializer left at its default made every element of a wrong Min(w, 1) -> w look
    undetermined), and nothing may be set aside."""
    same = _nudged_run(original, ref, f, sizes, 0, scale=0.0)
    return same is not None and all(
        isinstance(same.get(n), np.ndarray)
        and np.array_equal(same[n], expected[n], equal_nan=expected[n].dtype.kind in "fc") for n in targets)


def _nudged_run(original: ModelProto | None, ref: Runner, f: dict[str, object], sizes: dict[str, int] | None,
                seed: int, scale: float = 1.0) -> dict[str, object] | None:
    """The original's outputs on `nudged` inputs, with `nudged_model` initializers where it has
    some and onnxruntime runs that copy whole, else through `ref`; None where neither runs."""
    from eqsat.backends.ort.sessions import session

    g = nudged(f, seed, scale)
    m = nudged_model(original, seed, scale) if original is not None else None
    if m is not None:
        try:
            s = session(m, False)
            names = [o.name for o in s.get_outputs()]
            # every graph input drawn, overridable initializers too (get_inputs() leaves those
            # out, and their defaults made the nudged run another function: all set aside)
            declared = {i.name for i in m.graph.input}
            feeds = {k: v for k, v in g.items() if k in declared}
            return dict(zip(names, s.run(names, feeds), strict=True))
        except Exception:  # noqa: BLE001 - staged models, stand-ins: the inputs alone are moved
            pass
    try:
        return alone(ref)(g, dict(sizes or {}))  # no optimized run beside it
    except Exception:  # noqa: BLE001 - the original does not run so: nothing is set aside
        return None


def moved_by(e: np.ndarray, n: object) -> np.ndarray:
    """How far the original's value `n` on nudged inputs lies from its value `e`, elementwise
    (numbers and booleans; 0 where either is not finite, or `n` is no tensor like `e`)."""
    if not _same_tensor(e, n) or e.dtype.kind not in "fciub":
        return np.zeros(np.shape(e), np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(np.asarray(n).astype(np.float64) - e.astype(np.float64))
    return np.where(np.isfinite(d), d, 0.0)


def near_spread(e: np.ndarray, a: np.ndarray, spread: np.ndarray, rtol: float | None,
                atol: float | None) -> np.ndarray:
    """Where the optimized value `a` lies within SPREAD times `spread` (what the nudged runs
    moved the original's `e` by, `moved_by`) of `e`, plus the tolerance: an element the
    original does not determine is still bounded by what rounding moves it by (an
    ill-conditioned 1000 +- 10 where a dropped Clip gave 1e4 was set aside whole, as a float
    and cast to int32). Integers and booleans too (an index picked among two tied scores is
    the other's, as a nudged run picks it: the caller also lets pass a value a nudged run
    took there); other kinds: everywhere."""
    if e.dtype.kind not in "fciub":
        return np.ones(np.shape(e), bool)
    r, t = _tolerance(e, rtol, atol)
    ef = e.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(a.astype(np.float64) - ef)
        return (d <= SPREAD * spread + t + r * np.abs(ef)) | ~np.isfinite(ef)


def _seen(a: np.ndarray, n: object) -> np.ndarray:
    """Where the optimized value `a` equals the original's value `n` on nudged inputs (not
    floats: an index or label that a nudge picks)."""
    if not _same_tensor(a, n) or a.dtype.kind in "fc":
        return np.zeros(np.shape(a), bool)
    return np.asarray(n) == a


def undetermined(e: np.ndarray, a: np.ndarray, n: object, rtol: float | None, atol: float | None) -> np.ndarray:
    """Where the original does not determine its value `e` to the tolerance: its value `n` on
    nudged inputs lies outside it (floats: `rtol`/`atol`, None for `tolerance`'s, `n` finite
    and `a`, the optimized value, finite where `e` is; other kinds: `n` differs from `e`, such
    as an index or a label picked among near-equal scores)."""
    if not _same_tensor(e, n):
        return np.zeros(np.shape(e), bool)
    n = np.asarray(n)
    if e.dtype.kind not in "fc":
        return n != e
    with np.errstate(invalid="ignore", over="ignore"):
        near = _close(e, n, rtol, atol)
    return ~near & np.isfinite(e) & np.isfinite(n) & np.isfinite(a)


def _close(e: np.ndarray, a: np.ndarray, rtol: float | None, atol: float | None) -> np.ndarray:
    """Elementwise: `a` within the tolerance of `e` (floats, NaN equal to NaN; else equal)."""
    if e.dtype.kind not in "fc":
        return a == e
    r, t = _tolerance(e, rtol, atol)
    return np.isclose(a.astype(np.float64), e.astype(np.float64), rtol=r, atol=t, equal_nan=True)


def permuted_rows(expected: dict[str, object], got: dict[str, object], rtol: float | None,
                  atol: float | None) -> dict[str, np.ndarray]:
    """The outputs that `got` lists in another order than `expected` among rows whose keys tie,
    put in the original's order: for each length N of a key (`_sort_key`: a detection's
    scores) of both within the tolerance, the tensors of both of first dimension N (of one
    shape and type in both) are the rows, and each row that differs is matched (`_matched`) to
    another that differs, whose keys in `expected` are within the tolerance of its own and whose
    row in `got` equals its row in `expected` within the tolerance in every such tensor. {}
    where some row has no match."""
    out: dict[str, np.ndarray] = {}
    keys = _keys(expected, got, rtol, atol)
    for size in {expected[k].shape[0] for k in keys}:
        rows = [k for k, e in expected.items() if _same_tensor(e, got.get(k)) and e.ndim >= 1 and e.shape[0] == size]
        tied = [k for k in keys if expected[k].shape[0] == size]
        order = _matched(expected, got, rows, tied, rtol, atol)
        if order is None:
            return {}
        if order != list(range(size)):
            out |= {k: got[k][order] for k in rows}
    return out


def _keys(expected: dict[str, object], got: dict[str, object], rtol: float | None, atol: float | None) -> list[str]:
    """The outputs that are sort keys (`_sort_key`) in `expected`, of one shape and type in both
    and within the tolerance of each other."""
    return [k for k, e in expected.items() if _same_tensor(e, got.get(k)) and _sort_key(e)
            and _close(e, got[k], rtol, atol).all()]


def _sort_key(e: np.ndarray) -> bool:
    """A sort's output: 1-D floats, finite, in order (either way), not all equal (a constant output
    is no key: it would let every row move)."""
    if e.ndim != 1 or e.dtype.kind != "f" or e.size < 2 or not np.isfinite(e).all():
        return False
    d = np.diff(e.astype(np.float64))
    return bool(((d <= 0).all() or (d >= 0).all()) and (d != 0).any())


def _matched(expected: dict, got: dict, rows: list[str], keys: list[str], rtol: float | None,
             atol: float | None) -> list[int] | None:
    """`permuted_rows` for one length: for each expected row, the row of `got` it is matched to;
    only rows that differ move, each to one whose keys tie with its own (within the tolerance of
    the key's output: no chain of ties reaches farther). None where one has no match, or more
    than MOVED_ROWS rows differ."""
    tol = {k: _tolerance(expected[k], rtol, atol) for k in rows}

    def close(k: str, x, y) -> bool:
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        r, t = tol[k]
        return bool(np.all((np.abs(x - y) <= t + r * np.abs(x)) | (x == y) | (np.isnan(x) & np.isnan(y))))

    size = expected[rows[0]].shape[0]
    same = np.ones(size, bool)
    for k in rows:
        same &= _close(expected[k], got[k], rtol, atol).reshape(size, -1).all(axis=1)
    moved = [int(i) for i in np.flatnonzero(~same)]
    if len(moved) > MOVED_ROWS:
        return None
    order, free = list(range(size)), set(moved)
    for i in moved:
        j = next((j for j in moved if j in free and all(close(k, expected[k][i], expected[k][j]) for k in keys)
                  and all(close(k, expected[k][i], got[k][j]) for k in rows)), None)
        if j is None:
            return None
        free.discard(j)
        order[i] = j
    return order


def _tolerance(e: np.ndarray, rtol: float | None, atol: float | None) -> tuple[float, float]:
    """(rtol, atol) of one output as compare takes them (0 for integers and other kinds)."""
    if e.dtype.kind not in "fc":
        return 0.0, 0.0
    r, t = tolerance(e.dtype)
    return (r if rtol is None else rtol), (t * _scale(e) if atol is None else atol)


def _same_tensor(e: object, a: object) -> bool:
    return isinstance(e, np.ndarray) and isinstance(a, np.ndarray) and e.shape == a.shape and e.dtype == a.dtype
