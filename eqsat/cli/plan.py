"""Command-line pieces for memory planning, wired into eqsat/cli/main.py:

    eqsat plan MODEL.onnx [--dim NAME=VALUE]... [-o PLAN.json] [--alignment N] [--execute]
    eqsat optimize IN.onnx ... --plan PLAN.json     (plans the optimized model)

`add_plan_parser(subparsers)` declares the `plan` subcommand, `cmd_plan(args)` runs it,
`add_optimize_plan_argument(parser)` adds `--plan` to `optimize`, `check_plan_dims(model,
dims)` fails early (before optimizing) when a symbolic dimension is unbound,
`checked_plan(model, dims, alignment)` plans and checks (`optimize --plan` writes it with
`write_json` once the model is in place), and `plan_to_file(model, path, dims, alignment)`
plans, checks and writes the plan file.
Errors are eqsat.errors exceptions: UsageError (exit 2) for an unbound dimension, PlanError
(exit 1) for a plan that fails its checks or its proof by execution, or whose proof
`--execute` asked for and is not possible (onnxruntime cannot run the model, or a node
alone); the plan is then not written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from eqsat.cli.args import (
    add_dim,
    nonnegative_float,
    output_file,
    power_of_two,
    warn_unknown_model_dims,
)
from eqsat.plan.entry import check_plan_dims, checked_plan, summary  # noqa: F401 - the CLI's names

if TYPE_CHECKING:  # onnx takes 0.2 s to import: not for --help
    from onnx import ModelProto

PLAN_HELP = "plan the memory of a model's intermediate tensors in one arena"


def add_plan_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "plan", help=PLAN_HELP,
        description="Plan where every intermediate tensor of an ONNX model lives in one arena: lifetimes in a "
                    "memory-aware execution order, in-place reuse and views, offsets by the best of several "
                    "packing heuristics. Prints the arena, the lower bound for the order, the size without "
                    "reuse and what in-place reuse saves.")
    p.add_argument("input", metavar="MODEL.onnx")
    add_dim(p, "; every symbolic dimension of the inputs must be given")
    p.add_argument("-o", "--output", metavar="PLAN.json", type=output_file, help="write the plan as JSON")
    p.add_argument("--alignment", type=power_of_two, default=64, metavar="N",
                   help="offsets are multiples of N bytes, a power of two (default 64)")
    p.add_argument("--no-inplace", action="store_true", help="no in-place reuse (views still share buffers)")
    p.add_argument("--execute", action="store_true",
                   help="prove the plan: run the model node by node through one numpy arena laid out by the plan "
                        "and compare the outputs with onnxruntime's (exit 1, plan not written, when the proof "
                        "fails or onnxruntime cannot run the model)")
    p.add_argument("--rtol", type=nonnegative_float,
                   help="--execute relative tolerance (default 1e-4; 1e-2 for a model with float16 tensors)")
    p.add_argument("--atol", type=nonnegative_float,
                   help="--execute absolute tolerance (default 1e-5; 1e-3 for a model with float16 tensors)")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    return p


def register(subparsers) -> dict:
    add_plan_parser(subparsers)
    return {"plan": cmd_plan}


def add_optimize_plan_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plan", metavar="PLAN.json", type=output_file,
                        help="also plan the memory of the optimized model and write the plan (symbolic "
                             "dimensions from --dim)")


def write_json(data: dict, path: str | os.PathLike) -> Path:
    """Write atomically (eqsat.io.atomic)."""
    from eqsat.io.atomic import write_text

    return write_text(path, json.dumps(data, indent=1) + "\n")


def plan_to_file(model: ModelProto, path: str | os.PathLike, dims: dict[str, int] | None = None,
                 alignment: int = 64) -> dict:
    """Plan `model`, check the plan, write it as JSON to `path`; returns the plan's dict."""
    d = checked_plan(model, dims, alignment)
    write_json(d, path)
    return d


def cmd_plan(args: argparse.Namespace) -> int:
    from eqsat.core.modelcheck import check_model
    from eqsat.environment import check_environment
    from eqsat.io.modelio import read_model
    from eqsat.plan import check_plan, execute_plan, plan_model
    from eqsat.plan.errors import PlanError

    def say(msg: str) -> None:
        if not args.quiet:
            print(msg)

    check_environment()
    src = Path(args.input)
    model = read_model(src, check=True)[0]
    check_model(model)  # no outputs: nothing to plan
    warn_unknown_model_dims(model, args.dim)  # as optimize and compare-costs do
    t0 = time.perf_counter()
    plan = plan_model(model, dict(args.dim), args.alignment, inplace=not args.no_inplace)
    check_plan(plan)
    say(f"{src}: planned in {time.perf_counter() - t0:.2f} s")
    for line in plan.summary():
        say(f"  {line}")
    for w in plan.warnings():  # shown even with -q
        print(f"eqsat: warning: plan: {w}", file=sys.stderr)
    if args.execute:
        ex = execute_plan(model, plan, rtol=args.rtol, atol=args.atol)
        engines = ", ".join(f"{k} {v}" for k, v in sorted(ex.engines.items()))
        msg = f"execution {ex.status}: {ex.detail} ({ex.seconds:.2f} s through the arena; nodes: {engines})"
        if ex.status == "failed":
            raise PlanError(msg)
        if ex.status == "not possible":  # --execute asked for the proof: as optimize --require-verification
            raise PlanError(f"execution not possible, plan not written: {ex.detail} (plan without --execute to "
                            "write it unproven)")
        say(f"  {msg}")
    if args.output:  # after --execute: a plan that fails its proof is not written
        write_json(plan.to_dict(), args.output)
        say(f"  wrote {args.output}")
    return 0
