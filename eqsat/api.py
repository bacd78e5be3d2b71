"""eqsat's Python API: what `eqsat optimize`, `eqsat plan` and `eqsat rules list` do, as calls.

    import eqsat
    r = eqsat.optimize("model.onnx")                  # a path or an onnx.ModelProto
    print(r.report.nodes_before, "->", r.report.nodes_after, r.report.verification["status"])
    r.save("model.opt.onnx")

Contracts:
- `optimize` returns only a model that passed verification under onnxruntime (unless
  `verify=False`); a failed verification raises `OptimizeError` and returns nothing. So does
  a model that cannot be verified (onnxruntime cannot run the original on the inputs it
  draws), as the CLI refuses it; with `require_verification=False` it is returned with a
  warning in its report, as `eqsat optimize --allow-unverified` writes it.
- Every default is the CLI's: both read them from `eqsat.settings.Options` and
  `eqsat.limits.Limits`, so a call with no options and `eqsat optimize` with no flags give
  the same program.
- Errors are `eqsat.errors.EqsatError` subclasses: `UsageError` (bad option), `InputError`
  (unreadable model), `RuleError` (bad rule file, with FILE:LINE:COL), `OptimizeError`.
- The input model is never modified.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eqsat.limits import Limits
from eqsat.report import Report
from eqsat.settings import Options, Settings

if TYPE_CHECKING:
    from onnx import ModelProto

    from eqsat.core.pipeline import Result as PipelineResult
    from eqsat.plan import Plan
    from eqsat.ruletool.model import Rule
    from eqsat.verification import Verification

PathLike = str | os.PathLike
_OPTIONS, _LIMITS = Options(), Limits()  # the defaults, defined once (the CLI reads the same)


@dataclass
class Result:
    """An optimized model, its report, and its memory plan (a dict as `--plan` writes it,
    or None when `plan=False`)."""

    model: ModelProto
    report: Report
    plan: dict[str, Any] | None = None

    def save(self, path: PathLike, external_data: bool | None = None) -> Path:
        """Write the model (checked by onnx's checker); weights go to PATH.data when the model
        is too large for one protobuf file or `external_data` is True. Returns the path."""
        from eqsat.io.modelio import save_model

        return save_model(self.model, path, external_data)


def _load(model: ModelProto | PathLike) -> tuple[ModelProto, Path | None]:
    """The model and the file it came from (None for a model given in memory)."""
    from onnx import ModelProto

    if isinstance(model, ModelProto):
        return model, None
    if not isinstance(model, str | os.PathLike):
        from eqsat.errors import UsageError

        raise UsageError(f"optimize takes an onnx.ModelProto or a path, not {type(model).__name__}")
    from eqsat.io.modelio import read_model

    return read_model(model, check=True)[0], Path(model)


def settings(*, rules: Iterable[PathLike] = (), default_rules: bool = True, target: str = _OPTIONS.target,
             hardware: str = _OPTIONS.hardware, layout: str = _OPTIONS.layout, cost_model: str = _OPTIONS.cost_model,
             extractor: str = _OPTIONS.extractor, extract_time_limit: float = _OPTIONS.extract_time_limit,
             dims: Mapping[str, int] | None = None, iter_limit: int = _LIMITS.iter_limit,
             node_limit: int = _LIMITS.node_limit, time_limit: float = _LIMITS.time_limit,
             fold_limit: int = _OPTIONS.fold_limit, explain: bool = False, save_egraph: PathLike | None = None,
             choice: PathLike | None = None) -> Settings:
    """The options of one run resolved once (eqsat.settings.resolve), the rule files checked
    to exist: a bad option or a missing rule file is a UsageError raised here, before any
    model is read. `optimize` and `eqsat optimize` both start with it."""
    from eqsat.core.rulefiles import check_rule_files
    from eqsat.settings import resolve

    s = resolve(Options(rule_files=[Path(p) for p in rules], default_rules=default_rules,
                        limits=Limits(iter_limit, node_limit, time_limit), extractor=extractor,
                        extract_time_limit=extract_time_limit, cost_model=cost_model, target=target,
                        hardware=hardware, dims=dict(dims or {}), fold_limit=fold_limit,
                        save_egraph=Path(save_egraph) if save_egraph else None, explain=explain, layout=layout,
                        choice=Path(choice) if choice else None))
    check_rule_files(list(s.rule_files))
    return s


def optimize(model: ModelProto | PathLike, *, rules: Iterable[PathLike] = (), default_rules: bool = True,
             target: str = _OPTIONS.target, hardware: str = _OPTIONS.hardware, layout: str = _OPTIONS.layout,
             cost_model: str = _OPTIONS.cost_model, extractor: str = _OPTIONS.extractor,
             extract_time_limit: float = _OPTIONS.extract_time_limit, dims: Mapping[str, int] | None = None,
             iter_limit: int = _LIMITS.iter_limit, node_limit: int = _LIMITS.node_limit,
             time_limit: float = _LIMITS.time_limit, fold_limit: int = _OPTIONS.fold_limit,
             verify: bool = True, verify_runs: int = 1, rtol: float | None = None, atol: float | None = None,
             require_verification: bool = True, plan: bool = False, explain: bool = False,
             save_egraph: PathLike | None = None,
             progress: Callable[[str], None] | None = None) -> Result:
    """Optimize `model` (a path or an onnx.ModelProto) as `eqsat optimize` does: saturate
    with the default rules and those in `rules`, extract with `cost_model` and `extractor`,
    decode, verify against the original under onnxruntime (`verify_runs` random input sets,
    `rtol`/`atol` or each dtype's tolerance), and with `plan=True` plan its memory. `dims`
    binds symbolic dimensions by name. `progress` receives one line per step."""
    from eqsat.core.pipeline import optimize as run_pipeline

    s = settings(rules=rules, default_rules=default_rules, target=target, hardware=hardware, layout=layout,
                 cost_model=cost_model, extractor=extractor, extract_time_limit=extract_time_limit, dims=dims,
                 iter_limit=iter_limit, node_limit=node_limit, time_limit=time_limit, fold_limit=fold_limit,
                 explain=explain, save_egraph=save_egraph)
    original, src = _load(model)
    if plan:
        from eqsat.plan.entry import check_plan_dims

        check_plan_dims(original, s.dims)  # an unbound dimension fails now, not after optimizing
    res = run_pipeline(original, s, progress)
    checks = Checks(verify, verify_runs, rtol, atol, require_verification)
    planned = finish(original, res, s.dims, checks, plan=plan, files=(src, None), progress=progress)
    return Result(res.model, Report.from_dict(res.report), planned)


@dataclass(frozen=True)
class Checks:
    """How an optimized model is verified (`finish`). `require`: a verification that is not
    possible refuses the model (nothing checked is never written unasked); `flags` names the
    options in reports and errors (the CLI's flags or the API's keywords): the one that skips
    verification, and what a user whose model cannot be verified can do."""

    verify: bool = True
    runs: int = 1
    rtol: float | None = None
    atol: float | None = None
    require: bool = True
    flags: tuple[str, str] = ("verify=False", "return it unverified with require_verification=False")


def finish(original: ModelProto, res: PipelineResult, dims: Mapping[str, int], checks: Checks, *,
           plan: bool = False, files: tuple[Path | None, Path | None] = (None, None), nothing_written: bool = False,
           progress: Callable[[str], None] | None = None,
           stage: Callable[[ModelProto], Path] | None = None) -> dict[str, Any] | None:
    """Verify `res.model` against `original` under `checks` and, with `plan`, plan its memory;
    both go into `res.report` (verification, plan, warnings). `files` are the two models'
    files, where onnxruntime may run them as written. Where verification refuses a QDQ
    model's requantizing fusions, the programs of `res.retry` with fewer are verified in turn
    (eqsat.core.requantize), each written by `stage` where given (it returns the file), and
    the first that passes replaces `res.model` and `res.report`. Contract: returns only after
    a passed, a skipped, or an allowed "not possible" verification; a failed one, or "not
    possible" under `checks.require`, raises OptimizeError (", nothing written" with
    `nothing_written`). Returns the plan (a dict as the plan file holds it) or None."""
    from eqsat.errors import OptimizeError

    say = progress or (lambda _msg: None)
    if not checks.verify:
        res.report["verification"] = {"status": "skipped", "detail": checks.flags[0], "runs": 0}
    else:
        v = verify_models(original, res.model, runs=checks.runs, rtol=checks.rtol, atol=checks.atol, dims=dims,
                          _files=files, _random_pairs=res.random_pairs)
        if v.status == "failed" and v.requantized and res.retry is not None:
            v = _fewer_requantizing(original, res, dims, checks, files[0], stage, say, v)
        report = res.report
        report["verification"] = v.as_dict()
        written = ", nothing written" if nothing_written else ""
        if v.status == "failed":
            raise OptimizeError(f"verification failed{written}: {v.detail}")
        if v.status == "not possible" and checks.require:
            raise OptimizeError(f"verification not possible{written}: {v.detail} ({checks.flags[1]})")
        if v.status == "not possible":
            report["warnings"].append(f"verification not possible: {v.detail}")
        else:
            say(f"verification {v.status}: {v.detail}")
        if v.not_verified:  # part of the model was fed, not run
            report["warnings"].append(f"not verified: {v.not_verified}")
    report = res.report
    if not plan:
        return None
    from eqsat.plan.entry import checked_plan, summary
    from eqsat.plan.planner import plan_warnings

    planned = checked_plan(res.model, dict(dims))  # a failed plan raises: nothing written
    report["plan"] = summary(planned)
    report["warnings"] += [f"plan: {w}" for w in plan_warnings(planned)]
    return planned


def _fewer_requantizing(original: ModelProto, res: PipelineResult, dims: Mapping[str, int], checks: Checks,
                        src: Path | None, stage: Callable[[ModelProto], Path] | None, say: Callable[[str], None],
                        refused: Verification) -> Verification:
    """`finish`'s retries (eqsat.core.requantize): the first program of `res.retry`'s levels
    that passes verification replaces res.model and res.report (its `requantization` and a
    warning say so) and its Verification is returned; else `refused`, its detail naming the
    levels tried."""
    from eqsat.core.requantize import LEVEL_TEXT, LEVELS, split_level

    tried = []
    for level in LEVELS:
        say(f"verification refused rounding in a quantized output; trying {LEVEL_TEXT[level]}")
        alt = res.retry(level)
        if alt is None:
            say("the same program: next")
            continue
        written = stage(alt.model) if stage else None
        v = verify_models(original, alt.model, runs=checks.runs, rtol=checks.rtol, atol=checks.atol, dims=dims,
                          _files=(src, written), _random_pairs=alt.random_pairs)
        tried.append(f"{LEVEL_TEXT[level]}: {v.status}")
        if v.status != "failed":
            kept, folded = split_level(level)
            alt.report["requantization"] = {"kept": kept, "weights_folded": folded,
                                             "refused": refused.detail}
            alt.report["warnings"].append(
                f"{LEVEL_TEXT[level]}: verification refused the program with more ({refused.detail})")
            res.model, res.report, res.random_pairs = alt.model, alt.report, alt.random_pairs
            return v
    if not tried:
        return refused
    return dataclasses.replace(refused, detail=f"{refused.detail}; then {'; '.join(tried)}")


def verify_models(original: ModelProto | PathLike, optimized: ModelProto | PathLike, *, runs: int = 1,
                  rtol: float | None = None, atol: float | None = None, dims: Mapping[str, int] | None = None,
                  _files: tuple[Path | None, Path | None] = (None, None),
                  _random_pairs: dict[str, str] | None = None) -> Verification:
    """Compare two models' outputs under onnxruntime on random inputs, zeros, large values and
    empty sizes (eqsat.verification.verify), in a child process, so that a crash of
    onnxruntime is a failed verification. Returns a Verification whose `status` is passed,
    failed or not possible, never raises for a difference."""
    from eqsat.verification import verify as run_verify

    a, src_a = _load(original)
    b, src_b = _load(optimized)
    files = (_files[0] or src_a, _files[1] or src_b)
    return run_verify(a, b, runs, rtol, atol, dict(dims or {}), files=files, random_pairs=_random_pairs,
                      isolated=True)


def plan(model: ModelProto | PathLike, *, dims: Mapping[str, int] | None = None, alignment: int = 64) -> Plan:
    """The memory plan of `model` (eqsat.plan): every intermediate tensor's offset in one arena,
    checked (no two live tensors overlap, offsets aligned). Symbolic dimensions must be bound
    by `dims`."""
    from eqsat.plan.entry import plan as checked

    return checked(model, dims=dict(dims or {}), alignment=alignment)


def load_rules(*paths: PathLike, default_rules: bool = True) -> list[Rule]:
    """The rules of the given .egg files, after egglog has type-checked them against the op
    language (and the default rules, unless `default_rules=False`). Raises RuleError with
    FILE:LINE:COL on the first problem. With no paths: the default rules."""
    from eqsat.core.rulefiles import display_path
    from eqsat.ruletool import load_program

    prog, _ = load_program([Path(p) for p in paths], default_rules)
    if not paths:
        return list(prog.rules)
    shown = {display_path(Path(p)) for p in paths} | {str(Path(p)) for p in paths}
    return [r for r in prog.rules if r.path in shown]
