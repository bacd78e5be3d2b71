"""`eqsat rules check`: soundness of rules by testing.

For each rule with something to check (a `union`, or a `set` of `shape` / `dtype`), the
checker unfolds the relations of its query into the rules that derive them
(`unfold.py`), instantiates the query as a small ONNX graph with random shapes, values and
attributes that satisfy its guards (`instantiate.py`), builds the terms the rule's actions
create on the same inputs, and runs everything once under onnxruntime. Both sides of each
union must agree (shape, dtype, values within a tolerance), and a set shape or dtype must
be the one onnxruntime produces.

Values: `instantiate.py` draws standard normal floats and small integers, and on some tries
special constants a rule matches (SPECIAL_F64, SPECIAL_CONST: 0, 1e30, -inf, 1e-30); a rule
that names no element type, or names types only as a Cast's target (which says nothing of
the tensor cast), is tried once more at each of OTHER_DTYPES (`_other_dtypes`: int32,
float16, uint8, int64, and float32 for the latter).

Edge runs: an instance whose random run agrees runs again on the inputs where verification
finds rewrites that are wrong beyond the random draw (integers in [-7, 7] without 0,
standard normal floats), made by verification's own `Feeds` from the matched side's graph, as
verification reads the inputs' roles off the original (`eqsat.verification.feeds`: an
integer only the rewrite divides by is a general one, 0 among the zeros): zeros among the floats and general
integers, the floats times 100, 10000 and 0.0001, one float at +-2e15, integers at their
type's minimum and maximum, booleans and masks negated. Only graph inputs change; constants
the query matched keep their values. A case that changes no input is not run. Each is
compared as verification compares it (`eqsat.verification.compare`, at this checker's
tolerance): exactly for integers; NaN where NaN and inf where inf of the same sign for zeros
and small floats (0 / 0 is NaN under IEEE 754, which ONNX follows: Div(x, x) -> 1 is wrong
there); for the floats times 100 and 10000 with the tolerance times that factor (no more
than 10 x factor x the random run's own largest difference), but at least 256 float steps
of the output's largest finite magnitude (inputs scaled together multiply their factors:
nchwc-conv-scaled-input's Conv of x * s sums terms 10000 times the random draw's, and an
output of -6.7 moved by 0.03 there, beyond the tolerance times 100), and for +-2e15 on finiteness alone.
Then a case of the checker's own (NONFINITE_LABEL): one inf, one -inf, one NaN and one each
of +-2 sqrt(the type's largest value) among the floats, compared at the tolerance with inf
and NaN in their places. A rule's variable stands for any value a model computes, and from
verification's large floats a model computes those (exp(2e15), inf - inf, 2e15 squared),
where verification holds inf and NaN to their places: a rule `eqsat optimize` would refuse
on some model is not sound ((x - x) + y -> y, Sqrt(x * x) -> Abs(x)). An edge run is
skipped where the matched side itself fails under onnxruntime (INT_MIN / -1); for the floats
times 100 and 10000 only the elements where the matched side is finite are compared, as
verification does; for +-2e15 and the checker's case, an element where one side is inf and
the other finite within NEAR_RANGE of the type's largest value is not counted (an overflow
near the range in one order of the arithmetic, which docs/semantics.md lets a rewrite
change). A rule whose rewrite creates a kernel that treats inf and NaN its own way
(`own_nonfinite_kernels`: channel-blocked ops, PadChannels) is not run on the checker's case;
its result's detail says so. -0.0 is never drawn: the sign of a zero is not kept. A
difference makes the rule unsound, with the edge case named first in the problem and its
inputs in the counterexample.

Contract: `check_rules(rules, prog, ...)` returns one `Result` per rule:
- `ok`: checked on `runs` instantiations (each on its edge runs too), no difference; `detail`
  names the edge case left out (`own_nonfinite_kernels`), if any;
- `unsound`: a counterexample (`detail`: the inputs, both outputs);
- `unchecked`: no instantiation found or possible (`detail` says why);
- `facts`: the rule only derives facts (relations) for other rules; `covered_by` names the
  checked rules whose unfoldings used it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from eqsat.ruletool.build import BuildError
from eqsat.ruletool.instantiate import OTHER_DTYPES, Inconsistent, Instance, Reject, Unsupported, action_ctors
from eqsat.ruletool.model import Program, Rule
from eqsat.ruletool.prims import NoMatch
from eqsat.ruletool.unfold import variants

TRIALS = 24  # random tries per unfolding
RUNS = 8  # instantiations to run per rule
MAX_UNFOLDINGS = 8  # unfoldings tried per rule


@dataclass
class Result:
    rule: Rule
    status: str  # ok | unsound | unchecked | facts
    detail: str = ""
    runs: int = 0
    covered_by: list[str] = field(default_factory=list)
    via: list[str] = field(default_factory=list)
    # unsound: {problem, inputs: [{name, dtype, shape, values}], values: {name: value},
    # before, after: {dtype, shape, values} or None}, the names as the rule writes them
    counterexample: dict | None = None


def _has_checks(rule: Rule) -> bool:
    for a in rule.actions:
        if isinstance(a, list) and a and (a[0] == "union" or (a[0] == "set" and isinstance(a[1], list)
                                                               and str(a[1][0]) in ("shape", "dtype"))):
            return True
    return False


def _tol(arr: np.ndarray) -> tuple[float, float]:
    if arr.dtype in (np.float16,):
        return 2e-2, 2e-2
    return 1e-3, 1e-4


def _fmt(arr: np.ndarray) -> str:
    a = np.asarray(arr)
    body = np.array2string(a, precision=4, threshold=24, edgeitems=3, separator=", ").replace("\n", "")
    body = " ".join(body.split())
    return f"{a.dtype}{list(a.shape)} {body}"


def _compare(what: str, lhs: np.ndarray, rhs: np.ndarray) -> str | None:
    lhs, rhs = np.asarray(lhs), np.asarray(rhs)
    if lhs.shape != rhs.shape:
        return f"{what}: shape {list(lhs.shape)} before, {list(rhs.shape)} after"
    if lhs.dtype != rhs.dtype:
        return f"{what}: dtype {lhs.dtype} before, {rhs.dtype} after"
    if lhs.dtype.kind in "fc":
        rtol, atol = _tol(lhs)
        a, b = lhs.astype(np.float64), rhs.astype(np.float64)
        bad = ~np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    else:
        bad = lhs != rhs
    if not bad.any():
        return None
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"{what}: values differ at {list(idx)}: {lhs[idx].item()!r} before, {rhs[idx].item()!r} after"


def _tensor(arr) -> dict:
    a = np.asarray(arr)
    return {"dtype": str(a.dtype), "shape": list(a.shape), "values": _plain(a.tolist())}


def _plain(x):
    """A value as strict JSON: a non-finite float as its name ("nan", "inf", "-inf")."""
    if isinstance(x, list):
        return [_plain(y) for y in x]
    if isinstance(x, tuple):
        return [_plain(y) for y in x]
    if isinstance(x, float) and not np.isfinite(x):
        return str(x)
    if isinstance(x, (bool, int, float, str)) or x is None:
        return x
    if isinstance(x, np.generic):
        return _plain(x.item())
    return str(x)


def _counterexample(inst: Instance, problem: str, lhs, rhs) -> tuple[str, dict]:
    """The counterexample as text (the report's lines) and as data (Result.counterexample)."""
    lines = [problem]
    data: dict = {"problem": problem, "inputs": [], "values": {}, "before": None, "after": None}
    for v, name in inst.leaves:
        arr = inst.gb.feeds.get(name, inst.gb.consts.get(name))
        shown_as = inst.display(v)
        lines.append(f"  {shown_as} = {_fmt(arr)}")
        data["inputs"].append({"name": shown_as, **_tensor(arr)})
    shown = {v for v, _ in inst.leaves}
    for k, v in sorted(inst.env.items()):
        if "~" not in k and not k.startswith("_") and k not in shown and k != "__root":
            lines.append(f"  {k} = {v}")
            data["values"][k] = _plain(v)
    if lhs is not None:
        lines.append(f"  before: {_fmt(lhs)}")
        lines.append(f"  after:  {_fmt(rhs)}")
        data["before"], data["after"] = _tensor(lhs), _tensor(rhs)
    return "\n".join(lines), data


def _run_once(inst: Instance) -> tuple[str | None, tuple[str, dict] | None]:
    """Run an instance: (None, None) when both sides agree, else ('unsound', the
    counterexample as text and as data)."""
    outs: list[str] = []
    pairs = []
    for what, lhs, rhs in inst.checks:  # a union of nodes with several outputs: each output
        if isinstance(lhs, tuple) and isinstance(rhs, tuple) and len(lhs) == len(rhs):
            pairs += [(f"{what} output {k}", a, b) for k, (a, b) in enumerate(zip(lhs, rhs, strict=True))]
        elif isinstance(lhs, tuple) or isinstance(rhs, tuple):
            raise Unsupported("a union of a node with several outputs and one with another number")
        else:
            pairs.append((what, lhs, rhs))
    inst.checks = pairs
    for _, lhs, rhs in inst.checks:
        if not isinstance(lhs, str) or not isinstance(rhs, str):
            if lhs != rhs:
                return "unsound", _counterexample(inst, f"values differ: {lhs!r} before, {rhs!r} after", None, None)
            continue
        if lhs == "" or rhs == "":
            if lhs != rhs:
                return "unsound", _counterexample(inst, "one side is an absent input", None, None)
            continue
        outs += [lhs, rhs]
    for _, target, _kind, _ in inst.claims:
        if isinstance(target, str) and target:
            outs.append(target)
    outs = list(dict.fromkeys(outs))
    if not outs:
        return None, None
    try:
        res = inst.gb.run(outs)
    except BuildError as e:
        # the matched side alone: if it runs, the rewritten side is what fails
        lhs_only = list(dict.fromkeys(c[1] for c in inst.checks if isinstance(c[1], str) and c[1]))
        try:
            inst.gb.run(lhs_only)
        except BuildError:
            raise Reject(str(e)) from None
        return "unsound", _counterexample(inst, f"the rewritten graph fails under onnxruntime: {e}", None, None)
    inst.ran = (outs, res)
    for what, lhs, rhs in inst.checks:
        if isinstance(lhs, str) and lhs and isinstance(rhs, str) and rhs:
            problem = _compare(what, res[lhs], res[rhs])
            if problem:
                return "unsound", _counterexample(inst, problem, res[lhs], res[rhs])
    for what, target, kind, expected in inst.claims:
        if not (isinstance(target, str) and target):
            continue
        arr = np.asarray(res[target])
        if kind == "shape":
            if tuple(expected) != tuple(arr.shape):
                return "unsound", _counterexample(
                    inst, f"{what}: claims shape {list(expected)}, onnxruntime gives {list(arr.shape)}", None, None)
        else:
            from onnx import helper

            from eqsat.ruletool.build import dtype_code

            code = helper.np_dtype_to_tensor_dtype(arr.dtype)
            if dtype_code(expected) != code:
                return "unsound", _counterexample(
                    inst, f"{what}: claims dtype {expected}, onnxruntime gives {arr.dtype}", None, None)
    return None, None


def _edge_cases(feeds) -> list[tuple[str, str]]:
    """(label, kind) of the edge runs `feeds` (verification's Feeds of the instance) may change."""
    from eqsat.verification import EDGE_KINDS, EXTREMES_LABEL, MASKS_LABEL, NEGATED_LABEL, ZEROS_LABEL

    cases = [(EDGE_KINDS[k], k) for k in EDGE_KINDS]
    if feeds.has_general_integers():
        cases[0] = (ZEROS_LABEL, "zeros")
        cases.append((EXTREMES_LABEL, "extremes"))
    if feeds.has_flags():
        cases.append((NEGATED_LABEL, "negated"))
    if feeds.has_masks():
        cases.append((MASKS_LABEL, "masks"))
    cases.append((NONFINITE_LABEL, "nonfinite"))
    return cases


def _edge_feeds(feeds, kind: str, base: dict, seed: int) -> dict:
    if kind == "extremes":
        return feeds.with_integer_extremes(base, seed)
    if kind == "negated":
        return feeds.with_flags_negated(base)
    if kind == "masks":
        return feeds.with_masks_widened(base, seed)
    if kind == "nonfinite":
        return _with_nonfinite(base, seed)
    return feeds.with_special_values(base, seed, kind)


NONFINITE_LABEL = "inf, -inf, NaN and floats whose square overflows"
# where one side overflowed to inf and the other is finite at this fraction of the type's largest
# value or beyond, the difference is not counted: an overflow near the range may happen in one
# order of the arithmetic and not the other (docs/semantics.md: what the rewrites do not keep)
NEAR_RANGE = 2.0 ** -16
# kernels that treat inf and NaN their own way (docs/semantics.md: what inf and NaN give): a rule
# whose rewrite creates one is not run on NONFINITE_LABEL's inputs
OWN_NONFINITE = frozenset({"PadChannels"})


def _with_nonfinite(base: dict, seed: int) -> dict:
    """`base` with one +inf, one -inf, one NaN and one each of +-2 sqrt(the type's largest
    value) at random places of each floating-point input (as many as it has elements): a
    rule's variable stands for any value a model computes, and verification's large floats
    (+-2e15) overflow to inf and NaN (exp(2e15), inf - inf) or square to 4e30 before the
    matched terms; verification holds inf and NaN to their places there."""
    rng = np.random.default_rng(seed)
    out = dict(base)
    for name, v in base.items():
        if not isinstance(v, np.ndarray) or v.dtype.kind != "f" or v.size == 0:
            continue
        v = v.copy()
        flat = v.reshape(-1)
        huge = 2 * float(np.sqrt(np.finfo(v.dtype).max))
        for pos, val in zip(rng.permutation(flat.size)[:5], (np.inf, -np.inf, np.nan, huge, -huge), strict=False):
            flat[pos] = val
        out[name] = v
    return out


def _near_range_overflow(e: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Where one side is inf and the other finite within NEAR_RANGE of the type's largest value."""
    near = float(np.finfo(e.dtype).max) * NEAR_RANGE
    with np.errstate(invalid="ignore"):
        return (np.isinf(e) & np.isfinite(a) & (np.abs(a) >= near)) | \
            (np.isinf(a) & np.isfinite(e) & (np.abs(e) >= near))


def own_nonfinite_kernels(rule: Rule) -> list[str]:
    """The constructors a rule's actions create whose kernels treat inf and NaN their own way
    (OWN_NONFINITE, and the channel-blocked ops)."""
    from eqsat.backends.ort.target import NCHWC_DOMAIN
    from eqsat.lang.ops import BY_CTOR

    return [c for c in action_ctors(rule.actions)
            if c in OWN_NONFINITE or (c in BY_CTOR and BY_CTOR[c].domain == NCHWC_DOMAIN)]


def _same(a: dict, b: dict) -> bool:
    return all(np.array_equal(a[k], b[k]) for k in a)


def _edge_runs(inst: Instance, seed: int, nonfinite: bool = True) -> tuple[str | None, tuple[str, dict] | None]:
    """The instance, whose random run agreed, on each edge case (the module's contract; the
    case of NONFINITE_LABEL only where `nonfinite`): (None, None) or ('unsound', the
    counterexample on that case's inputs)."""
    from eqsat.verification import SCALED, SCALED_FAR, compare, max_difference
    from eqsat.verification.feeds import Feeds

    outs, first = getattr(inst, "ran", (None, None))
    pairs = [(w, a, b) for w, a, b in inst.checks if isinstance(a, str) and a and isinstance(b, str) and b]
    if not outs or not pairs or not inst.gb.feeds:
        return None, None
    base = dict(inst.gb.feeds)
    try:  # the inputs' roles as verification reads them off the original: the matched side's graph
        # (a divisor that only the rewrite makes is a general integer there, 0 among the zeros)
        feeds = Feeds(inst.gb.model(list(dict.fromkeys(a for _, a, _ in pairs))))
    except Exception:  # noqa: BLE001 - an input verification cannot draw for: no edge runs
        return None, None
    for label, kind in _edge_cases(feeds):
        if kind == "nonfinite" and not nonfinite:
            continue
        edge = _edge_feeds(feeds, kind, base, seed)
        if _same(base, edge):
            continue
        inst.gb.feeds = edge
        try:
            res = inst.gb.run(outs)
        except BuildError:
            lhs_only = list(dict.fromkeys(a for _, a, _ in pairs))
            try:
                inst.gb.run(lhs_only)
            except BuildError:
                continue  # the matched side fails there too
            return "unsound", _counterexample(
                inst, f"on {label}: the rewritten graph fails under onnxruntime, where the matched side runs",
                None, None)
        for what, lhs, rhs in pairs:
            e, a = np.asarray(res[lhs]), np.asarray(res[rhs])
            rtol, atol = _tol(e) if e.dtype.kind in "fc" else (0.0, 0.0)
            if e.dtype.kind == "f" and e.shape == a.shape:
                if kind in ("scaled", "far"):  # compared where the matched side is finite, as verification does
                    a = np.where(np.isfinite(e), a, e)
                elif kind in ("large", "nonfinite"):
                    a = np.where(_near_range_overflow(e, a), e, a)
            bad = compare({what: e}, {what: a}, rtol, atol, finite_free=kind == "large",
                          scaled={"scaled": float(SCALED), "far": SCALED_FAR}.get(kind, False),
                          noise={what: max_difference(np.asarray(first[lhs]), np.asarray(first[rhs]))})
            if bad:
                return "unsound", _counterexample(inst, f"on {label}: {bad[0]}", e, np.asarray(res[rhs]))
    inst.gb.feeds = base
    return None, None


def check_rule(rule: Rule, prog: Program, seed: int = 0) -> Result:
    if not _has_checks(rule):
        return Result(rule, "facts", "derives facts for other rules only")
    reasons: list[str] = []
    runs = 0
    via_used: list[str] = []
    k = 0  # unfoldings tried (an inconsistent one is not a try)
    inconsistent: list[str] = []
    own = own_nonfinite_kernels(rule)
    for var in variants(rule, prog):
        if k >= MAX_UNFOLDINGS or runs >= RUNS:
            break
        rng = np.random.default_rng([seed, k, len(rule.name)])
        k += 1
        last = ""
        for trial in range(TRIALS):
            try:
                inst = Instance(var, rule.actions, prog, rng, trial)
                inst.build()
                status, detail = _run_once(inst)
                if status is None:
                    status, detail = _edge_runs(inst, seed + trial, nonfinite=not own)
            except Inconsistent as e:
                inconsistent.append(str(e))
                k -= 1
                break
            except Reject as e:
                last = str(e) or "no instantiation satisfied the guards"
                continue
            except NoMatch as e:
                last = f"the guards did not hold ({e})"
                continue
            except Unsupported as e:
                last = str(e)
                reasons.append(last)
                break
            if status == "unsound":
                return Result(rule, "unsound", detail[0], runs, via=var.via, counterexample=detail[1])
            runs += 1
            via_used += var.via
            if runs >= RUNS:
                break
        else:
            reasons.append(f"no instantiation in {TRIALS} tries ({last})")
        if runs:
            found = _other_dtypes(rule, var, prog, seed, k)
            if found is not None:
                return Result(rule, "unsound", found[0], runs, via=var.via, counterexample=found[1])
    if runs:
        note = (f"not on inf and NaN: the kernels of {', '.join(own)} treat them their own way (docs/semantics.md)"
                if own else "")
        return Result(rule, "ok", note, runs=runs, via=list(dict.fromkeys(via_used)))
    reasons += inconsistent
    if not reasons:
        reasons.append("nothing derives the relations its query needs")
    return Result(rule, "unchecked", _best_reason(reasons))


def _other_dtypes(rule: Rule, var, prog: Program, seed: int, k: int) -> tuple[str, dict] | None:
    """One try of an unfolding that ran at each of OTHER_DTYPES, for a rule that names no
    type, or names types only as a Cast's target (egglog matches its ops on tensors of any
    type; Instance rejects the types that do not apply): the counterexample of the first that
    is unsound, else None. A try that cannot be built (an op without kernels for the type)
    counts for nothing; the random tries' generator is not touched, so they draw what they drew."""
    rng = np.random.default_rng([seed, k, len(rule.name), 1])
    for trial, dtype in OTHER_DTYPES.items():
        try:
            inst = Instance(var, rule.actions, prog, rng, trial, dtype)
            inst.build()
            status, detail = _run_once(inst)
            if status is None:
                status, detail = _edge_runs(inst, seed + trial, nonfinite=not own_nonfinite_kernels(rule))
        except (Reject, NoMatch, Unsupported):
            continue
        if status == "unsound":
            return detail
    return None


def _best_reason(reasons: list[str]) -> str:
    for r in reasons:
        if not r.startswith("no instantiation"):
            return r
    return reasons[0]


def check_rules(rules: list[Rule], prog: Program, seed: int = 0) -> list[Result]:
    results = [check_rule(r, prog, seed) for r in rules]
    by_label = {r.rule.label: r for r in results}
    for r in results:
        if r.status == "ok":
            for name in r.via:
                dep = by_label.get(name)
                if dep is not None and dep.status == "facts" and r.rule.label not in dep.covered_by:
                    dep.covered_by.append(r.rule.label)
    return results
