"""eqsat's Python API: what `eqsat optimize`, `eqsat plan` and `eqsat rules list` do, as calls.

    import eqsat
    r = eqsat.optimize("model.onnx")                  # a path or an onnx.ModelProto
    print(r.report.nodes_before, "->", r.report.nodes_after, r.report.verification["status"])
    r.save("model.opt.onnx")

Contracts:
- `optimize` returns only a model that passed verification under onnxruntime (unless
  `verify=False`); a failed verification raises `OptimizeError` and returns nothing. A model
  that cannot be verified (onnxruntime cannot run the original) is returned with a warning in
  its report, or refused with `require_verification=True`, as the CLI does.
- Every default is the CLI's: both read them from `eqsat.pipeline.Options` and
  `eqsat.limits.Limits`, so a call with no options and `eqsat optimize` with no flags give
  the same program.
- Errors are `eqsat.errors.EqsatError` subclasses: `UsageError` (bad option), `InputError`
  (unreadable model), `RuleError` (bad rule file, with FILE:LINE:COL), `OptimizeError`.
- The input model is never modified.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .limits import Limits
from .pipeline import Options

if TYPE_CHECKING:
    from onnx import ModelProto

    from .plan import Plan
    from .ruletool.model import Rule
    from .verification import Verification

PathLike = str | os.PathLike
_OPTIONS, _LIMITS = Options(), Limits()  # the defaults, defined once (the CLI reads the same)


@dataclass(frozen=True)
class Report:
    """What an optimization did: the CLI's `--report` JSON, with its headline fields typed.
    `data` is the whole report (docs/cli.md describes every key)."""

    nodes_before: int
    nodes_after: int
    ops_before: dict[str, int]
    ops_after: dict[str, int]
    warnings: list[str]
    verification: dict[str, Any] | None  # status: passed | failed | not possible | skipped
    data: dict[str, Any] = field(repr=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Report:
        return cls(d["nodes_before"], d["nodes_after"], d["ops_before"], d["ops_after"],
                   d["warnings"], d.get("verification"), d)

    def as_dict(self) -> dict[str, Any]:
        """The report as `eqsat optimize --report` writes it (less the file names)."""
        return self.data


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
        from .modelio import save_model

        return save_model(self.model, path, external_data)


def _load(model: ModelProto | PathLike) -> tuple[ModelProto, Path | None]:
    """The model and the file it came from (None for a model given in memory)."""
    from onnx import ModelProto

    if isinstance(model, ModelProto):
        return model, None
    if not isinstance(model, str | os.PathLike):
        from .errors import UsageError

        raise UsageError(f"optimize takes an onnx.ModelProto or a path, not {type(model).__name__}")
    from .modelio import read_model

    return read_model(model, check=True)[0], Path(model)


def optimize(model: ModelProto | PathLike, *, rules: Iterable[PathLike] = (), default_rules: bool = True,
             target: str = _OPTIONS.target, hardware: str = _OPTIONS.hardware, layout: str = _OPTIONS.layout,
             cost_model: str = _OPTIONS.cost_model, extractor: str = _OPTIONS.extractor,
             extract_time_limit: float = _OPTIONS.extract_time_limit, dims: Mapping[str, int] | None = None,
             iter_limit: int = _LIMITS.iter_limit, node_limit: int = _LIMITS.node_limit,
             time_limit: float = _LIMITS.time_limit, fold_limit: int = _OPTIONS.fold_limit,
             verify: bool = True, verify_runs: int = 1, rtol: float | None = None, atol: float | None = None,
             require_verification: bool = False, plan: bool = False, explain: bool = False,
             save_egraph: PathLike | None = None,
             progress: Callable[[str], None] | None = None) -> Result:
    """Optimize `model` (a path or an onnx.ModelProto) as `eqsat optimize` does: saturate
    with the default rules and those in `rules`, extract with `cost_model` and `extractor`,
    decode, verify against the original under onnxruntime (`verify_runs` random input sets,
    `rtol`/`atol` or each dtype's tolerance), and with `plan=True` plan its memory. `dims`
    binds symbolic dimensions by name. `progress` receives one line per step."""
    from .errors import OptimizeError
    from .pipeline import check_options
    from .pipeline import optimize as run_pipeline
    from .rulefiles import check_rule_files

    dims = dict(dims or {})
    opts = Options(rule_files=[Path(p) for p in rules], default_rules=default_rules,
                   limits=Limits(iter_limit, node_limit, time_limit), extractor=extractor,
                   extract_time_limit=extract_time_limit, cost_model=cost_model, target=target,
                   hardware=hardware, dims=dims, fold_limit=fold_limit,
                   save_egraph=Path(save_egraph) if save_egraph else None, explain=explain, layout=layout)
    check_options(opts)  # a bad option fails before the model loads
    check_rule_files(opts.rule_files)  # and so does a missing rule file
    original, src = _load(model)
    if plan:
        from .plan.cli import check_plan_dims

        check_plan_dims(original, dims)  # an unbound dimension fails now, not after optimizing
    res = run_pipeline(original, opts, progress)
    report = res.report
    if verify:
        v = verify_models(original, res.model, runs=verify_runs, rtol=rtol, atol=atol, dims=dims,
                          _files=(src, None), _random_pairs=res.random_pairs)
        report["verification"] = v.as_dict()
        if v.status == "failed":
            raise OptimizeError(f"verification failed: {v.detail}")
        if v.status == "not possible":
            if require_verification:
                raise OptimizeError(f"verification not possible (require_verification): {v.detail}")
            report["warnings"].append(f"verification not possible: {v.detail}")
        elif v.not_verified:
            report["warnings"].append(f"not verified: {v.not_verified}")
    else:
        report["verification"] = {"status": "skipped", "detail": "verify=False", "runs": 0}
    planned = None
    if plan:
        from .plan.cli import checked_plan, summary
        from .plan.planner import plan_warnings

        planned = checked_plan(res.model, dims)
        report["plan"] = summary(planned)
        report["warnings"] += [f"plan: {w}" for w in plan_warnings(planned)]
    return Result(res.model, Report.from_dict(report), planned)


def verify_models(original: ModelProto | PathLike, optimized: ModelProto | PathLike, *, runs: int = 1,
                  rtol: float | None = None, atol: float | None = None, dims: Mapping[str, int] | None = None,
                  _files: tuple[Path | None, Path | None] = (None, None),
                  _random_pairs: dict[str, str] | None = None) -> Verification:
    """Compare two models' outputs under onnxruntime on random inputs, zeros, large values and
    empty sizes (eqsat.verification.verify), in a child process, so that a crash of
    onnxruntime is a failed verification. Returns a Verification whose `status` is passed,
    failed or not possible, never raises for a difference."""
    from .verification import verify as run_verify

    a, src_a = _load(original)
    b, src_b = _load(optimized)
    files = (_files[0] or src_a, _files[1] or src_b)
    return run_verify(a, b, runs, rtol, atol, dict(dims or {}), files=files, random_pairs=_random_pairs,
                      isolated=True)


def plan(model: ModelProto | PathLike, *, dims: Mapping[str, int] | None = None, alignment: int = 64) -> Plan:
    """The memory plan of `model` (eqsat.plan): every intermediate tensor's offset in one arena,
    checked (no two live tensors overlap, offsets aligned). Symbolic dimensions must be bound
    by `dims`."""
    from .plan import check_plan, plan_model

    m, _ = _load(model)
    p = plan_model(m, dict(dims or {}), alignment)
    check_plan(p)
    return p


def load_rules(*paths: PathLike, default_rules: bool = True) -> list[Rule]:
    """The rules of the given .egg files, after egglog has type-checked them against the op
    language (and the default rules, unless `default_rules=False`). Raises RuleError with
    FILE:LINE:COL on the first problem. With no paths: the default rules."""
    from .rulefiles import display_path
    from .ruletool import load_program

    prog, _ = load_program([Path(p) for p in paths], default_rules)
    if not paths:
        return list(prog.rules)
    shown = {display_path(Path(p)) for p in paths} | {str(Path(p)) for p in paths}
    return [r for r in prog.rules if r.path in shown]
