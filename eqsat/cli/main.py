"""The `eqsat` command line.

Exit codes: 0 success; 1 optimization or verification failed; 2 bad usage or unreadable
input. Errors are one line on stderr, `eqsat: error: ...`; progress goes to stderr too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import NoReturn

from eqsat import __version__
from eqsat.cli.args import (
    dim,
    named_files,
    nonnegative_float,
    output_file,
    positive_float,
    positive_int,
    refuse_overwrites,
    same_file,
    warn_unknown_model_dims,
)
from eqsat.errors import EqsatError, OptimizeError, Terminated, UsageError
from eqsat.extract.costs import DEFAULT as COST_MODEL_DEFAULT
from eqsat.io.atomic import write_text


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage errors exit 2 with one line
        self.print_usage(sys.stderr)
        raise UsageError(message)


# Subcommands that live beside what they run: each module's `register(subparsers)` adds its
# parsers and returns {command: handler}; a handler takes the parsed arguments and returns
# the exit code.
COMMAND_MODULES = ("eqsat.cli.extract", "eqsat.cli.plan", "eqsat.cli.conformance", "eqsat.cli.rules", "eqsat.cli.viz")


def _register(sub) -> dict:
    import importlib

    handlers = {}
    for name in COMMAND_MODULES:
        handlers.update(importlib.import_module(name).register(sub))
    return handlers


def build_parser() -> argparse.ArgumentParser:
    from eqsat.cli.plan import add_optimize_plan_argument
    from eqsat.limits import Limits

    lim = Limits()
    p = _Parser(prog="eqsat", description="Optimize ONNX models by equality saturation.")
    p.add_argument("--version", action="version", version=f"eqsat {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    o = sub.add_parser("optimize", help="optimize an ONNX model", description="Optimize an ONNX model.")
    o.add_argument("input", metavar="IN.onnx")
    o.add_argument("-o", "--output", metavar="OUT.onnx", type=output_file, help="output file (default: IN.opt.onnx)")
    o.add_argument("--rules", metavar="FILE.egg", action="append", default=[], type=Path,
                   help="a rule file to load after the default rules (repeatable)")
    o.add_argument("--no-default-rules", action="store_true",
                   help="load only the op language prelude and the --rules files: no schedule, and no constant "
                        "folding or shape oracles; the --rules files' rulesets (and the prelude's phases their rules "
                        "join) run once a round")
    o.add_argument("--iter-limit", type=positive_int, default=lim.iter_limit, metavar="N",
                   help=f"saturation rounds at most (default {lim.iter_limit})")
    o.add_argument("--node-limit", type=positive_int, default=lim.node_limit, metavar="N",
                   help=f"e-nodes at most; a round that passes it is rolled back (default {lim.node_limit})")
    o.add_argument("--time-limit", type=positive_float, default=lim.time_limit, metavar="S",
                   help=f"seconds of saturation, checked between rounds (default {lim.time_limit:g})")
    o.add_argument("--target", default="ort", choices=["ort", "onnx"],
                   help="ort (default): onnxruntime's contrib ops allowed; onnx: standard ops of the model's opset only")
    o.add_argument("--layout", default="nchwc", choices=["nchw", "nchwc"],
                   help="nchwc (default): with --target ort, where the installed onnxruntime has channel-blocked "
                        "CPU kernels, convolutions and pooling may also run in that layout where the cost model "
                        "finds it faster (the output then runs only on onnxruntime's CPU provider with the same "
                        "block size); nchw: standard layout only, for a model meant for another machine or provider")
    o.add_argument("--fold-limit", type=positive_int, default=1 << 20, metavar="BYTES",
                   help="largest folded constant, unless no larger than its inputs (default 1 MiB)")
    o.add_argument("--extractor", default="ilp",
                   help="extraction algorithm: ilp (default, exact DAG cost), dag-greedy, tree-greedy, or one an "
                        "installed package declares (eqsat.extractors entry points; docs/extraction.md)")
    o.add_argument("--extract-time-limit", type=positive_float, default=60.0, metavar="S",
                   help="seconds for the ILP extractor; past it the best answer found, or the greedy one (default 60)")
    o.add_argument("--cost-model", default=COST_MODEL_DEFAULT,
                   help="cost model: roofline (default: each op's FLOPs and bytes at the hardware profile's rates), "
                        "node-count (a research baseline: every op costs 1), measured (each op configuration timed "
                        "under onnxruntime on this machine), or one an installed package declares "
                        "(eqsat.cost_models entry points)")
    o.add_argument("--hardware", default="cpu", metavar="PROFILE",
                   help="hardware profile (which fusions and layouts pay; the roofline's rates): a name, "
                        "or a .json file from `eqsat calibrate`; cpu (default): the shipped profile for "
                        "this machine's vector width (cpu-avx2 where onnxruntime's NCHWc block is 8), h200")
    o.add_argument("--dim", action="append", default=[], type=dim, metavar="NAME=VALUE",
                   help="size of a symbolic dimension (repeatable), e.g. --dim batch=8: for the cost "
                        "model, verification's inputs and the --plan")
    o.add_argument("--choice", metavar="CHOICE.json", type=Path,
                   help="decode this choice file (`eqsat extract -o`, or another tool's) instead of extracting; "
                        "it must be made on the e-graph these options saturate to (--save-egraph)")
    o.add_argument("--report", metavar="REPORT.json", type=output_file, help="write a JSON report")
    o.add_argument("--explain", action="store_true",
                   help="print, for each output node, the rules that produced it and the original nodes it "
                        "replaced (also an `explain` section in --report); loads instrumented rules, slower")
    o.add_argument("--save-egraph", metavar="FILE.json", type=output_file,
                   help="write the saturated e-graph (egraph-serialize JSON with eqsat metadata); written "
                        "before extraction, and kept if verification then fails")
    o.add_argument("--no-verify", action="store_true",
                   help="skip comparing the optimized model with the original under onnxruntime")
    o.add_argument("--require-verification", action="store_true",
                   help="fail (exit 1, nothing written) when verification is not possible, instead of a warning")
    o.add_argument("--verify-runs", type=positive_int, default=1, metavar="N",
                   help="sets of random inputs for verification (default 1)")
    o.add_argument("--rtol", type=nonnegative_float,
                   help="verification relative tolerance (default by output type: 1e-3, float16 1e-2, float64 1e-9)")
    o.add_argument("--atol", type=nonnegative_float,
                   help="verification absolute tolerance (default by output type: 1e-4, float16 1e-3, float64 1e-12, "
                        "times the output's largest magnitude where that is below 1)")
    o.add_argument("--in-place", action="store_true",
                   help="replace the input with the output (the default output then is the input itself; "
                        "-o may name it)")
    o.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    add_optimize_plan_argument(o)

    k = sub.add_parser("compare-costs", help="compare cost models' predictions with measured latency",
                       description="Extract with every cost model and a sample of other valid programs from one "
                                   "saturated e-graph, time them under onnxruntime, and report per cost model the "
                                   "predicted cost, the measured latency and Kendall's tau.")
    k.add_argument("input", metavar="MODEL.onnx")
    k.add_argument("--json", metavar="FILE", type=output_file, help="also write the table as JSON records")
    k.add_argument("--samples", type=positive_int, default=8, help="random extractions to rank (default 8)")
    k.add_argument("--runs", type=positive_int, default=20, help="timed runs per program (default 20)")
    k.add_argument("--cost-model", action="append", default=[], metavar="NAME",
                   help="a cost model to compare (repeatable; default: every registered one)")
    k.add_argument("--extractor", default="ilp",
                   help="the extractor each cost model chooses its program with, as for optimize (default ilp)")
    k.add_argument("--hardware", default="cpu", metavar="PROFILE", help="hardware profile, as for optimize (default cpu)")
    k.add_argument("--dim", action="append", default=[], type=dim, metavar="NAME=VALUE",
                   help="size of a symbolic dimension (repeatable), e.g. --dim batch=8")
    k.add_argument("--rules", metavar="FILE.egg", action="append", default=[], type=Path,
                   help="a rule file to load after the default rules (repeatable)")
    k.add_argument("--target", default="ort", choices=["ort", "onnx"], help="as for optimize (default ort)")
    k.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")

    c = sub.add_parser("calibrate", help="measure this machine's hardware profile (for --hardware)",
                       description="Measure this machine under onnxruntime and write a hardware profile: the "
                                   "roofline's rates (MatMul and vector throughput, memory bandwidth, per-op "
                                   "overhead), which fusions pay, and the channel-blocked layout's figures. Every "
                                   "cost model reads the fusion and layout choices; pass the file to --hardware.")
    c.add_argument("-o", "--output", metavar="PROFILE.json", required=True, type=output_file)
    c.add_argument("--threads", type=positive_int, default=1, help="onnxruntime threads (default 1)")
    p.set_defaults(handlers=_register(sub))
    p.commands = sub.choices  # a subcommand's own parser reports its unknown arguments (main)
    return p


def _progress(quiet: bool):
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        if not quiet:
            print(f"eqsat: [{time.perf_counter() - t0:6.2f}s] {msg}", file=sys.stderr, flush=True)

    return say


def cmd_optimize(args: argparse.Namespace) -> int:
    from eqsat.core.pipeline import Options, check_options, optimize
    from eqsat.io.atomic import Commit, check_output
    from eqsat.io.modelio import read_model, stage_model
    from eqsat.limits import Limits

    src = Path(args.input)
    out = Path(args.output) if args.output else src if args.in_place else src.with_name(src.stem + ".opt.onnx")
    if args.no_verify and args.require_verification:
        raise UsageError("--no-verify and --require-verification contradict each other: give one")
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
    opts = Options(
        rule_files=list(args.rules),
        default_rules=not args.no_default_rules,
        limits=Limits(args.iter_limit, args.node_limit, args.time_limit),
        extractor=args.extractor,
        extract_time_limit=args.extract_time_limit,
        cost_model=args.cost_model,
        target=args.target,
        hardware=args.hardware,
        dims=dict(args.dim),
        fold_limit=args.fold_limit,
        save_egraph=args.save_egraph,
        explain=args.explain,
        layout=args.layout,
        choice=args.choice,
    )
    check_options(opts)  # a bad --cost-model, --hardware or --extractor fails before the load
    from eqsat.core.rulefiles import check_rule_files

    check_rule_files(opts.rule_files)  # so does a missing --rules file
    say = _progress(args.quiet)
    model, runnable = read_model(src, check=True)
    say(f"loaded {src} ({len(model.graph.node)} nodes)")
    warn_unknown_model_dims(model, args.dim)
    if args.plan:
        from eqsat.cli.plan import check_plan_dims

        check_plan_dims(model, dict(args.dim))  # an unbound dimension fails now, not after optimizing
    res = optimize(model, opts, progress=say)
    r = res.report
    plan = None
    # Every output is staged under a temporary name first: verification runs the written
    # model, and only once all are written are they renamed into place, together; a failure
    # anywhere leaves every previous output as it was and nothing behind.
    with Commit() as outputs:
        written = stage_model(res.model, out, outputs)
        size = sum(f.stat().st_size for f in written.parent.iterdir())  # with its data file, if any
        say(f"saved and checked a temporary copy ({size / 1e6:.1f} MB)" if size >= 1e5 else
            f"saved and checked a temporary copy ({size / 1e3:.1f} kB)")
        if args.no_verify:
            r["verification"] = {"status": "skipped", "detail": "--no-verify", "runs": 0}
        else:
            from eqsat.verification import verify

            v = verify(model, res.model, args.verify_runs, args.rtol, args.atol, dict(args.dim),
                       files=(src if runnable else None, written), random_pairs=res.random_pairs,
                       isolated=True)
            r["verification"] = v.as_dict()
            if v.status == "failed":
                raise OptimizeError(f"verification failed, nothing written: {v.detail}")
            if v.status == "not possible" and args.require_verification:
                raise OptimizeError(f"verification not possible, nothing written (--require-verification): {v.detail}")
            if v.status == "not possible":  # a warning, shown even with -q; not also a progress line
                print(f"eqsat: warning: verification not possible: {v.detail}", file=sys.stderr)
            else:
                say(f"verification {v.status}: {v.detail}")
            if v.not_verified:  # shown even with -q: part of the model was fed, not run
                print(f"eqsat: warning: not verified: {v.not_verified}", file=sys.stderr)
        if args.plan:
            from eqsat.cli.plan import checked_plan, summary
            from eqsat.plan.planner import plan_warnings

            plan = checked_plan(res.model, dict(args.dim))  # a failed plan writes nothing
            r["plan"] = dict(summary(plan), file=str(args.plan))
            r["warnings"] += [f"plan: {w}" for w in plan_warnings(plan)]
            outputs.text(args.plan, json.dumps(plan, indent=1) + "\n")  # as eqsat.cli.plan.write_json
        if args.report:
            outputs.text(args.report, json.dumps(dict(r, input=str(src), output=str(out)), indent=2))
        outputs.commit()
    say(f"wrote {out}: {r['nodes_before']} -> {r['nodes_after']} nodes")
    if plan is not None:
        say(f"wrote {args.plan}: arena {plan['arena_bytes']} bytes, lower bound {plan['lower_bound_bytes']}, "
            f"no reuse {plan['no_reuse_bytes']}")
    if args.explain:
        from eqsat.core.explain import format_text

        print(format_text(r["explain"]))
    for w in res.report["warnings"]:
        print(f"eqsat: warning: {w}", file=sys.stderr)
    return 0


def cmd_compare_costs(args: argparse.Namespace) -> int:
    from eqsat.backends.ort.compare_costs import as_json, compare_costs, table
    from eqsat.core.pipeline import Options
    from eqsat.core.rulefiles import check_rule_files
    from eqsat.io.modelio import read_model

    check_rule_files(args.rules)  # before the model loads
    src = Path(args.input)
    model = read_model(src, check=True)[0]
    warn_unknown_model_dims(model, args.dim)
    # the programs are timed at the sizes the cost models predict for: each must be given (the
    # cost models' default of 16 and verification's 2 to 5 would compare different runs, and a
    # decoder with a KV cache needs sizes that fit together)
    from eqsat.verification import symbolic_input_dims

    given = dict(args.dim)
    if unbound := [n for n in symbolic_input_dims(model) if n not in given]:
        raise UsageError(f"{src}: compare-costs times the programs at the sizes its cost models predict for: "
                         f"give {' '.join(f'--dim {n}=N' for n in unbound)}")
    opts = Options(rule_files=list(args.rules), target=args.target, hardware=args.hardware, dims=given,
                   extractor=args.extractor)
    records, info = compare_costs(model, opts, samples=args.samples, runs=args.runs, progress=_progress(args.quiet),
                                  cost_models=args.cost_model)
    n = info["programs"]
    print(f"{src}: {n} distinct program{'' if n == 1 else 's'} from one e-graph, each cost model's own chosen by "
          f"{args.extractor}" + (" (Kendall's tau needs two or more)" if n < 2 else ""))
    print(table(records))
    if args.json:
        write_text(args.json, json.dumps(as_json(records, info), indent=2))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from eqsat.backends.ort.calibrate import write

    prof = write(args.output, args.threads)
    print(json.dumps(prof, indent=2))
    return 0


def _raise_terminated(signum, frame):
    raise Terminated()


def run() -> NoReturn:
    """The `eqsat` program (console script and `python -m eqsat`): `main` in a process whose
    allocator keeps freed memory for reuse (eqsat.io.allocator)."""
    import signal

    from eqsat.io.allocator import reuse_freed_memory

    reuse_freed_memory()
    rc = main()
    # The outcome is settled: a Ctrl-C or SIGTERM while the interpreter shuts down would only
    # print a traceback from its threads' shutdown or replace the exit status.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(rc)


def main(argv: list[str] | None = None) -> int:
    import signal
    import threading

    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if in_main else None
    try:
        return _main(argv)
    except Terminated:  # anywhere, start-up included
        print("eqsat: terminated", file=sys.stderr)
        return 143
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # with the subcommand's usage, not the top level's
            parser.commands.get(args.command, parser).error(f"unrecognized arguments: {' '.join(extra)}")
        if args.command is None:
            parser.print_help(sys.stderr)
            print("eqsat: error: a command is required (optimize, plan, show, ...)", file=sys.stderr)
            return 2
        from eqsat.environment import check_environment

        check_environment()  # a bad EQSAT_* setting fails every command before any work
        hints = {}
        if args.command == "optimize":
            hints[("--output", "the input")] = None if args.in_place else "pass --in-place to allow it"
        args.named_inputs, outputs = named_files(parser.commands[args.command], args)
        refuse_overwrites(args.named_inputs, outputs, hints)
        commands = {"optimize": cmd_optimize, "calibrate": cmd_calibrate, "compare-costs": cmd_compare_costs,
                    **args.handlers}
        return commands[args.command](args)
    except EqsatError as e:
        print(f"eqsat: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("eqsat: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `eqsat rules list | head`: the reader left; say nothing more
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at interpreter exit
        return 141


if __name__ == "__main__":
    sys.exit(main())
