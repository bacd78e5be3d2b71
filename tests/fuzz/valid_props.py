"""Properties of valid models: eqsat gives a model that computes what the original computes,
or refuses cleanly (an EqsatError: exit code 1 or 2, a one-line message).

- `optimize_keeps_outputs`: eqsat.core.pipeline.optimize (no verification), then the fuzzer's own
  comparison under onnxruntime on four feeds: sizes of N 2, 1, 3, 5; integers over ranges
  with negatives; overridable initializers fed other values from the second feed on.
- `cli_keeps_outputs`: the real `eqsat optimize` with verification on and extra outputs
  (--report, --save-egraph, --plan), in a temporary folder: success writes exactly what was
  asked and the output computes what the input does; failure is one error line and leaves
  the folder as it was.
- `opaque_ops_kept`: a model with ops of a custom domain nothing defines (onnxruntime cannot
  run it): eqsat must carry them unchanged; checked by giving both models a definition of
  those ops and comparing. Through the CLI (with or without --require-verification), exit 0
  with a correct model, or a clean failure.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx
from hypothesis import assume

from eqsat.errors import EqsatError

from . import clirun, failures, oracle, stats
from .graphs import SYM, Case
from .strategies import checked


def assert_clean_refusal(e: EqsatError) -> None:
    msg = str(e)
    assert e.exit_code in (1, 2), f"exit code {e.exit_code}: {msg}"
    assert msg.strip() and "\n" not in msg, f"not a one-line message: {msg!r}"


def _runnable(case: Case, model: onnx.ModelProto) -> onnx.ModelProto:
    return model if case.runnable else oracle.with_functions(model, list(case.custom_ops.values()))


def reference(case: Case, prop: str) -> list[tuple[dict, dict]]:
    """The feeds and the original's outputs; the case is discarded where the onnx checker or
    onnxruntime rejects the model (a generator's mistake, counted)."""
    why = checked(case)
    feeds = [case.feeds(k) for k in range(case.feeds_count)]
    if why is None:
        try:
            outs = oracle.run_all(_runnable(case, case.model), feeds)
        except Exception as e:  # noqa: BLE001 - onnxruntime rejects the drawn model
            why = f"onnxruntime: {str(e).splitlines()[0]}"
    if why is not None:
        stats.discarded(prop, why)
        assume(False)
    return list(zip(feeds, outs, strict=True))


def assert_same(case: Case, optimized: onnx.ModelProto, ref: list[tuple[dict, dict]]) -> None:
    from eqsat.lang.contrib import register

    register()  # onnxruntime's ops in the default domain (SimplifiedLayerNormalization) for the checker
    onnx.checker.check_model(optimized)
    model = _runnable(case, optimized)
    try:
        s = oracle.session(model)
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"onnxruntime cannot load the optimized model: {e}") from None
    names = [o.name for o in s.get_outputs()]
    for k, (feeds, expected) in enumerate(ref):
        try:
            got = dict(zip(names, s.run(names, feeds), strict=True))
        except Exception as e:  # noqa: BLE001
            raise AssertionError(f"feed {k}: onnxruntime cannot run the optimized model: {e}") from None
        bad = oracle.compare(expected, got)
        assert not bad, f"feed {k} (N={feeds and next(iter(feeds.values())).shape}): " + "; ".join(bad)


def _files(case: Case) -> dict[str, bytes | str]:
    return {"model.onnx": case.model.SerializeToString(), "case.txt": repr(case)}


def optimize_keeps_outputs(case: Case) -> None:
    prop = "optimize_keeps_outputs"
    ref = reference(case, prop)
    stats.example(prop)
    with failures.kept(prop, _files(case)):
        _optimize(case, prop, ref)


def _optimize(case: Case, prop: str, ref) -> None:
    try:
        optimized = onnx.load_from_string(clirun.isolated(clirun.optimize_bytes, case.model.SerializeToString(),
                                                          case.options))
    except EqsatError as e:
        assert_clean_refusal(e)
        stats.refused(prop, str(e))
        failures.keep_refusal(prop, stats.key(str(e)), _files(case))
        return
    assert_same(case, optimized, ref)


def _flags(case: Case) -> list[str]:
    o = case.options
    flags = ["--extract-time-limit", str(o.get("extract_time_limit", 20.0))]
    for key, flag in (("target", "--target"), ("extractor", "--extractor"), ("cost_model", "--cost-model"),
                      ("layout", "--layout")):
        if key in o:
            flags += [flag, o[key]]
    for name, v in o.get("dims", {}).items():
        flags += ["--dim", f"{name}={v}"]
    return flags


def _cli(case: Case, prop: str, extra: list[str], ref) -> None:
    with tempfile.TemporaryDirectory(prefix="eqsat-fuzz-") as d:
        src, out = Path(d) / "m.onnx", Path(d) / "m.opt.onnx"
        onnx.save(case.model, src)
        asked = ["m.opt.onnx"]
        args = ["optimize", src, "-o", out, "-q", *_flags(case), *extra]
        for flag, name in (("--report", "r.json"), ("--save-egraph", "e.json"), ("--plan", "p.json")):
            if flag in extra:
                args.remove(flag)
                args += [flag, Path(d) / name]
                asked.append(name)
        before = clirun.snapshot(d)
        rc, _, err = clirun.cli(args)
        if rc == 0:
            assert "Traceback" not in err, err
            clirun.assert_unchanged(before, d, may_add=tuple(asked))
            missing = [a for a in asked if not (Path(d) / a).exists()]
            assert not missing, f"exit 0 but {missing} not written; stderr:\n{err}"
            assert_same(case, onnx.load(out), ref)
            return
        line = clirun.assert_clean_failure(rc, err)
        stats.refused(prop, line)
        kept = ("e.json",) if "--save-egraph" in extra else ()  # written before extraction, kept on failure
        clirun.assert_unchanged(before, d, may_add=kept)


def cli_keeps_outputs(case: Case, extra: list[str]) -> None:
    prop = "cli_keeps_outputs"
    ref = reference(case, prop)
    stats.example(prop)
    if "--plan" in extra and SYM in str(case.model.graph.input) and not case.options.get("dims"):
        extra = [*extra, "--dim", "N=2"]
    with failures.kept(prop, {**_files(case), "extra.txt": " ".join(extra)}):
        _cli(case, prop, extra, ref)


def opaque_ops_kept(case: Case, through_cli: bool, require: bool) -> None:
    prop = "opaque_ops_kept"
    ref = reference(case, prop)
    stats.example(prop)
    with failures.kept(prop, {**_files(case), "how.txt": f"through_cli={through_cli} require={require}"}):
        _opaque(case, prop, ref, through_cli, require)


def _opaque(case: Case, prop: str, ref, through_cli: bool, require: bool) -> None:
    if through_cli:  # verification stands in for the custom ops: a warning, or with
        # --require-verification maybe a clean failure
        _cli(case, prop, ["--require-verification"] if require else [], ref)
        return
    _optimize(case, prop, ref)
