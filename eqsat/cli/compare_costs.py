"""`eqsat compare-costs`: every cost model's program and sampled others from one saturated
e-graph, timed under onnxruntime (eqsat.backends.ort.compare_costs)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from eqsat.cli.args import (
    add_dim,
    add_hardware,
    add_quiet,
    add_rules,
    add_target,
    nonnegative_int,
    output_file,
    positive_int,
    progress,
    warn_unknown_model_dims,
)
from eqsat.errors import UsageError
from eqsat.settings import EXTRACTOR_DEFAULT, HARDWARE_DEFAULT


def register(sub) -> dict:
    k = sub.add_parser("compare-costs", help="compare cost models' predictions with measured latency",
                       description="Extract with every cost model and a sample of other valid programs from one "
                                   "saturated e-graph (uniform random extractions, random walks from the models' "
                                   "optima, mutations, perturbed roofline), time them under onnxruntime, and report "
                                   "per cost model the predicted cost, the measured latency, Kendall's tau, top-1 and "
                                   "top-5 regret and the error of predicted time.")
    k.add_argument("input", metavar="MODEL.onnx|SAVED.json",
                   help="a model, or an e-graph saved by --save-egraph (of optimize or compare-costs), which "
                        "holds no weights: with it, --programs SET --no-time scores the cost models against the "
                        "set's stored timings without saturating or timing anything")
    k.add_argument("--save-egraph", metavar="FILE", type=output_file,
                   help="write the saturated e-graph (with the op times the measured model reads), so that later "
                        "runs can score cost models on it without the model")
    k.add_argument("--json", metavar="FILE", type=output_file, help="also write the table as JSON records")
    k.add_argument("--samples", type=positive_int, default=8,
                   help="distinct programs to sample beside the cost models' own (default 8)")
    k.add_argument("--runs", type=positive_int, default=30, help="timed runs per program, interleaved (default 30)")
    k.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                   help="a run's time: the process's CPU time (default; on a shared machine wall time also "
                        "counts the time other work holds the core) or wall time")
    k.add_argument("--repeats", type=positive_int, default=1,
                   help="time every program this many times over, each in fresh processes with the programs "
                        "grouped anew, pooling the samples; from 2 on the report gives the repeat ceiling, how "
                        "well the repeats order the programs against each other (default 1)")
    k.add_argument("--seed", type=nonnegative_int, default=0, help="the sampler's random seed (default 0)")
    k.add_argument("--save-programs", metavar="FILE", type=output_file,
                   help="write the programs (their choices, the e-graph's digest, every sample) to reuse later")
    k.add_argument("--programs", metavar="FILE", type=Path,
                   help="time the programs of a set --save-programs wrote (on the same e-graph) instead of sampling")
    k.add_argument("--no-time", action="store_true",
                   help="with --programs: score the cost models against the set's stored samples, timing nothing")
    k.add_argument("--cost-model", action="append", default=[], metavar="NAME",
                   help="a cost model to compare (repeatable; default: every registered or installed one "
                        "compared by default, all but file-costs)")
    k.add_argument("--extractor", default=EXTRACTOR_DEFAULT,
                   help=f"the extractor each cost model chooses its program with, as for optimize "
                        f"(default {EXTRACTOR_DEFAULT})")
    add_hardware(k, f"hardware profile, as for optimize (default {HARDWARE_DEFAULT}; for a saved e-graph, the "
                    "profile it was saturated for)")
    add_dim(k)
    add_rules(k)
    add_target(k, "as for optimize (default ort)")
    add_quiet(k)
    return {"compare-costs": cmd_compare_costs}


def cmd_compare_costs(args: argparse.Namespace) -> int:
    from eqsat.backends.ort import program_set
    from eqsat.backends.ort.compare_costs import as_json, compare_costs, default_names, program_set_json, run_record
    from eqsat.core.rulefiles import check_rule_files
    from eqsat.io.atomic import write_text
    from eqsat.io.modelio import read_model
    from eqsat.settings import Options

    check_rule_files(args.rules)  # before the model loads
    if args.no_time and not args.programs:
        raise UsageError("--no-time scores the cost models against stored timings: give them with --programs FILE")
    src = Path(args.input)
    if src.suffix == ".json":
        return _saved(src, args)
    stored = program_set.read(args.programs) if args.programs else None
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
    opts = Options(rule_files=list(args.rules), target=args.target, hardware=args.hardware or HARDWARE_DEFAULT,
                   dims=given, extractor=args.extractor)
    names = default_names(args.cost_model)
    records, info = compare_costs(model, opts, samples=args.samples, runs=args.runs, progress=progress(args.quiet),
                                  cost_models=names, seed=args.seed, program_set=stored, timed=not args.no_time,
                                  program_set_path=str(args.programs or ""), clock=args.clock,
                                  repeats=args.repeats)
    run = run_record(opts, names, args.samples, args.runs, args.seed, not args.no_time, str(args.programs or ""),
                     args.clock, args.repeats)
    _print(src, args, records, info)
    if args.json:
        write_text(args.json, json.dumps(as_json(records, info, run), indent=2))
    if args.save_programs:
        write_text(args.save_programs, json.dumps(program_set_json(info, run), indent=1))
    if args.save_egraph:
        write_text(args.save_egraph, json.dumps(info["egraph_json"]))
    return 0


def _saved(src: Path, args: argparse.Namespace) -> int:
    """compare-costs SAVED.json --programs SET --no-time: the cost models scored on a saved
    e-graph against the set's stored timings, at the e-graph's own profile and sizes."""
    from eqsat.backends.ort import program_set
    from eqsat.backends.ort.compare_costs import as_json, run_record, score_saved
    from eqsat.cli.extract import load_egraph, saved_options
    from eqsat.io.atomic import write_text

    if not (args.programs and args.no_time):
        raise UsageError(f"{src}: a saved e-graph holds no weights, so its programs cannot be timed: give "
                         "--programs SET --no-time to score the cost models against the set's stored timings, "
                         "or the model itself")
    if args.save_programs or args.save_egraph or args.rules:
        raise UsageError(f"{src}: --save-programs, --save-egraph and --rules need the model, not a saved e-graph")
    stored = program_set.read(args.programs)
    g = load_egraph(src)
    opts = saved_options(g, args.hardware, dict(args.dim), extractor=args.extractor, target=args.target)
    names = args.cost_model or None
    records, info = score_saved(g, opts, names, stored, str(args.programs))
    run = run_record(opts, [r.cost_model for r in records], args.samples, args.runs, args.seed, False,
                     str(args.programs))
    _print(src, args, records, info)
    if args.json:
        write_text(args.json, json.dumps(as_json(records, info, run), indent=2))
    return 0


def _print(src: Path, args: argparse.Namespace, records: list, info: dict) -> None:
    from eqsat.backends.ort.compare_costs import noise_line, table

    n = info["programs"]
    where = f"from {args.programs}" if args.programs else "from one e-graph"
    timed = ", scored against their stored timings" if args.no_time else ""
    print(f"{src}: {n} distinct program{'' if n == 1 else 's'} {where}{timed}, each cost model's own chosen by "
          f"{args.extractor}" + (" (Kendall's tau needs two or more)" if n < 2 else ""))
    if info.get("note"):
        print(f"note: {info['note']}")
    print(table(records))
    if line := noise_line(info):
        print(line)
