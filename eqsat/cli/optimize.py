"""`eqsat optimize`: the Python API's optimization (eqsat.api.settings, the pipeline,
eqsat.api.finish) with files: the outputs checked before any work, staged, and renamed into
place together once everything passed."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from eqsat.cli.args import (
    add_dim,
    add_hardware,
    add_quiet,
    add_rules,
    add_target,
    nonnegative_float,
    output_file,
    positive_float,
    positive_int,
    progress,
    refuse_overwrites,
    same_file,
    warn_unknown_model_dims,
)
from eqsat.errors import UsageError
from eqsat.settings import (
    COST_MODEL_DEFAULT,
    EXTRACT_TIME_LIMIT,
    EXTRACTOR_DEFAULT,
    FOLD_LIMIT,
    HARDWARE_DEFAULT,
    LAYOUT_DEFAULT,
)


def register(sub) -> dict:
    o = sub.add_parser("optimize", help="optimize an ONNX model", description="Optimize an ONNX model.")
    o.add_argument("input", metavar="IN.onnx")
    o.add_argument("-o", "--output", metavar="OUT.onnx", type=output_file, help="output file (default: IN.opt.onnx)")
    add_rules(o)
    o.add_argument("--no-default-rules", action="store_true",
                   help="load only the op language prelude and the --rules files: no schedule, and no constant "
                        "folding or shape oracles; the --rules files' rulesets (and the prelude's phases their rules "
                        "join) run once a round")
    _limits(o)
    add_target(o, "ort (default): onnxruntime's contrib ops allowed; onnx: standard ops of the model's opset only")
    o.add_argument("--layout", default=LAYOUT_DEFAULT, choices=["nchw", "nchwc"],
                   help="nchwc (default): with --target ort, where the installed onnxruntime has channel-blocked "
                        "CPU kernels, convolutions and pooling may also run in that layout where the cost model "
                        "finds it faster (the output then runs only on onnxruntime's CPU provider with the same "
                        "block size); nchw: standard layout only, for a model meant for another machine or provider")
    o.add_argument("--fold-limit", type=positive_int, default=FOLD_LIMIT, metavar="BYTES",
                   help=f"largest folded constant, unless no larger than its inputs (default {FOLD_LIMIT >> 20} MiB)")
    _extraction(o)
    add_dim(o, ": for the cost model, verification's inputs and the --plan")
    o.add_argument("--choice", metavar="CHOICE.json", type=Path,
                   help="decode this choice file (`eqsat extract -o`, or another tool's) instead of extracting; "
                        "it must be made on the e-graph these options saturate to (--save-egraph)")
    o.add_argument("--report", metavar="REPORT.json", type=output_file,
                   help="write a JSON report (docs/report.md)")
    o.add_argument("--explain", action="store_true",
                   help="print, for each output node, the rules that produced it and the original nodes it "
                        "replaced (also an `explain` section in --report); loads instrumented rules, slower")
    o.add_argument("--save-egraph", metavar="FILE.json", type=output_file,
                   help="write the saturated e-graph (egraph-serialize JSON with eqsat metadata); written "
                        "before extraction, and kept if verification then fails")
    _verification(o)
    o.add_argument("--in-place", action="store_true",
                   help="replace the input with the output (the default output then is the input itself; "
                        "-o may name it)")
    add_quiet(o)
    from eqsat.cli.plan import add_optimize_plan_argument

    add_optimize_plan_argument(o)
    return {"optimize": cmd_optimize}


def _limits(o: argparse.ArgumentParser) -> None:
    from eqsat.limits import Limits

    lim = Limits()
    o.add_argument("--iter-limit", type=positive_int, default=lim.iter_limit, metavar="N",
                   help=f"saturation rounds at most (default {lim.iter_limit})")
    o.add_argument("--node-limit", type=positive_int, default=lim.node_limit, metavar="N",
                   help=f"e-nodes at most; a round that passes it is rolled back (default {lim.node_limit})")
    o.add_argument("--time-limit", type=positive_float, default=lim.time_limit, metavar="S",
                   help=f"seconds of saturation, checked between rounds (default {lim.time_limit:g})")


def _extraction(o: argparse.ArgumentParser) -> None:
    o.add_argument("--extractor", default=EXTRACTOR_DEFAULT,
                   help="extraction algorithm: ilp (default, exact DAG cost, the layouts chosen with the rest: "
                        "proven optimal or a gap), ilp-fixed-layouts (each value's layout fixed from the greedy "
                        "answer first: faster, optimal for those layouts only), dag-greedy, tree-greedy, or one an "
                        "installed package declares (eqsat.extractors entry points; docs/extraction.md)")
    o.add_argument("--extract-time-limit", type=positive_float, default=EXTRACT_TIME_LIMIT, metavar="S",
                   help="seconds for the ILP extractor; past it the best answer found, or the greedy one "
                        f"(default {EXTRACT_TIME_LIMIT:g})")
    o.add_argument("--cost-model", default=COST_MODEL_DEFAULT,
                   help="cost model: roofline (default: each op's FLOPs and bytes at the hardware profile's rates), "
                        "node-count (a research baseline: every op costs 1), measured (each op configuration timed "
                        "under onnxruntime on this machine), file-costs (the costs the e-graph file carries: "
                        "for `eqsat extract` on another tool's files), learned (weights fitted by `eqsat calibrate "
                        "--learn`, in the --hardware profile), or one an installed package declares "
                        "(eqsat.cost_models entry points)")
    add_hardware(o, "hardware profile (which fusions and layouts pay; the roofline's rates): a name, "
                    "or a .json file from `eqsat calibrate`; cpu (default): the shipped profile for "
                    "this machine's vector width (cpu-avx2 where onnxruntime's NCHWc block is 8), h200",
                 default=HARDWARE_DEFAULT)


def _verification(o: argparse.ArgumentParser) -> None:
    o.add_argument("--no-verify", action="store_true",
                   help="skip comparing the optimized model with the original under onnxruntime")
    o.add_argument("--allow-unverified", action="store_true",
                   help="write the model, with a warning, where verification is not possible (onnxruntime cannot "
                        "run the original on the inputs it draws); by default that is an error, nothing written")
    o.add_argument("--require-verification", action="store_true",
                   help="the default: fail (exit 1, nothing written) where verification is not possible; "
                        "kept for scripts that give it")
    o.add_argument("--verify-runs", type=positive_int, default=1, metavar="N",
                   help="sets of random inputs for verification (default 1)")
    o.add_argument("--rtol", type=nonnegative_float,
                   help="verification relative tolerance (default by output type: 1e-3, float16 1e-2, float64 1e-9)")
    o.add_argument("--atol", type=nonnegative_float,
                   help="verification absolute tolerance (default by output type: 1e-4, float16 1e-3, float64 1e-12, "
                        "times the output's largest magnitude where that is below 1)")


def _output(args: argparse.Namespace) -> Path:
    """The model's output file, every output checked against the inputs and each other: what
    `main` could not check as the command line was read (IN.opt.onnx, --in-place, data files)."""
    from eqsat.io.atomic import check_output

    src = Path(args.input)
    out = Path(args.output) if args.output else src if args.in_place else src.with_name(src.stem + ".opt.onnx")
    for a, b in (("no_verify", "require_verification"), ("allow_unverified", "require_verification")):
        if getattr(args, a) and getattr(args, b):
            raise UsageError(f"--{a.replace('_', '-')} and --{b.replace('_', '-')} contradict each other: give one")
    if args.in_place and args.output and not same_file(Path(args.output), src):
        raise UsageError(f"--in-place replaces {src}, but -o names another file ({args.output}): give one of them")
    # main has refused the named outputs over inputs and each other; here the default output
    # and the output's weights, OUT.onnx.data, which may replace the input's only in place
    in_place = same_file(out, src)
    outputs = [*([] if in_place else [(out, "--output" if args.output else f"the output ({out.name})"),
                                      (out.with_name(out.name + ".data"), "the output's data file")]),
               *[(p, a) for p, a in ((args.report, "--report"), (args.plan, "--plan"),
                                      (args.save_egraph, "--save-egraph")) if p]]
    refuse_overwrites(getattr(args, "named_inputs", []), outputs)
    # -o, --report, --plan and --save-egraph were checked as the command line was read; the
    # model's file is checked here whatever named it (IN.opt.onnx, --in-place), with its data file
    check_output(out, beside={".data": "the model's data file"})
    return out


def cmd_optimize(args: argparse.Namespace) -> int:
    from eqsat.api import Checks, finish, settings
    from eqsat.core.pipeline import optimize
    from eqsat.io.atomic import Commit
    from eqsat.io.modelio import read_model, stage_model

    src, out = Path(args.input), _output(args)
    s = settings(rules=args.rules, default_rules=not args.no_default_rules, target=args.target,
                 hardware=args.hardware, layout=args.layout, cost_model=args.cost_model, extractor=args.extractor,
                 extract_time_limit=args.extract_time_limit, dims=dict(args.dim), iter_limit=args.iter_limit,
                 node_limit=args.node_limit, time_limit=args.time_limit, fold_limit=args.fold_limit,
                 explain=args.explain, save_egraph=args.save_egraph, choice=args.choice)  # fails before the load
    say = progress(args.quiet)
    model, runnable = read_model(src, check=True)
    say(f"loaded {src} ({len(model.graph.node)} nodes)")
    warn_unknown_model_dims(model, args.dim)
    if args.plan:
        from eqsat.plan.entry import check_plan_dims

        check_plan_dims(model, s.dims)  # an unbound dimension fails now, not after optimizing
    res = optimize(model, s, progress=say)
    r = res.report
    checks = Checks(not args.no_verify, args.verify_runs, args.rtol, args.atol, not args.allow_unverified,
                    flags=("--no-verify", "write it unverified with --allow-unverified"))
    # Every output is staged under a temporary name first: verification runs the written
    # model, and only once all are written are they renamed into place, together; a failure
    # anywhere leaves every previous output as it was and nothing behind.
    with Commit() as outputs:
        written = stage_model(res.model, out, outputs)
        size = sum(f.stat().st_size for f in written.parent.iterdir())  # with its data file, if any
        say(f"saved and checked a temporary copy ({size / 1e6:.1f} MB)" if size >= 1e5 else
            f"saved and checked a temporary copy ({size / 1e3:.1f} kB)")
        plan = finish(model, res, s.dims, checks, plan=bool(args.plan), files=(src if runnable else None, written),
                      nothing_written=True, progress=say, stage=lambda m: stage_model(m, out, outputs))
        r = res.report  # a program with fewer requantizing fusions may have replaced the first
        if plan is not None:
            r["plan"]["file"] = str(args.plan)
            outputs.text(args.plan, json.dumps(plan, indent=1) + "\n")  # as eqsat.cli.plan.write_json
        if args.report:
            outputs.text(args.report, json.dumps(dict(r, input=str(src), output=str(out)), indent=2))
        outputs.commit()
    _summary(args, r, out, plan, say)
    return 0


def _summary(args: argparse.Namespace, r: dict, out: Path, plan: dict | None, say) -> None:
    """What was written, --explain's text on stdout, and the warnings (shown even with -q)."""
    say(f"wrote {out}: {r['nodes_before']} -> {r['nodes_after']} nodes")
    if plan is not None:
        say(f"wrote {args.plan}: arena {plan['arena_bytes']} bytes, lower bound {plan['lower_bound_bytes']}, "
            f"no reuse {plan['no_reuse_bytes']}")
    if args.explain:
        from eqsat.core.explain import format_text

        print(format_text(r["explain"]))
    for w in r["warnings"]:
        print(f"eqsat: warning: {w}", file=sys.stderr)
