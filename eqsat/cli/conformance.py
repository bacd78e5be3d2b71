"""`eqsat conformance`: the onnx wheel's test cases through the default optimization.

Every model test data directory shipped with the onnx wheel and every node test case that
`onnx.backend.test.case` generates (nothing is downloaded) is optimized with the default
rules for the `ort` target, and the optimized model's onnxruntime outputs are compared with
the expected outputs shipped with the case (see `eqsat.verification.conformance.check_expected`).

stdout: every failure with its reason, the cases onnxruntime itself cannot run or gets
wrong (unless -q), and a summary with the pass rate. stderr: progress. Exit code 1 when a
case that onnxruntime runs correctly fails after optimization, else 0.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import random
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from eqsat.cli.args import nonnegative_float, output_file, positive_int
from eqsat.errors import UsageError
from eqsat.io.atomic import write_text

if TYPE_CHECKING:  # onnx takes 0.2 s to import: not for --help
    from onnx import ModelProto


def register(subparsers) -> dict:
    c = subparsers.add_parser(
        "conformance", help="run the onnx wheel's test cases through the default optimization",
        description="Optimize every node test case and model test data directory of the onnx wheel with the "
                    "default rules (target ort) and compare the optimized model's onnxruntime outputs with the "
                    "expected outputs shipped with each case. Exit 1 if a case that onnxruntime itself runs "
                    "correctly fails after optimization.")
    c.add_argument("--json", metavar="FILE", type=output_file, help="also write every case's verdict as JSON")
    c.add_argument("--sample", metavar="N", type=positive_int,
                   help="a deterministic subset of N cases (the same N gives the same cases)")
    c.add_argument("--only", metavar="PATTERN", action="append", default=[],
                   help="cases whose name matches a shell pattern (node/test_conv*) or contains the text "
                        "(repeatable; applied before --sample)")
    c.add_argument("--rtol", type=nonnegative_float, help="relative tolerance (default: each case's own, 1e-3)")
    c.add_argument("--atol", type=nonnegative_float, help="absolute tolerance (default: each case's own, 1e-7)")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress; print only failures and the summary")
    return {"conformance": cmd_conformance}


def select(names: list[str], only: list[str], sample: int | None) -> list[int]:
    """Indices of the cases to run: those matching any of `only` (a shell pattern, or a
    substring when the pattern has no wildcard), then a deterministic sample of `sample`
    of them (seed 0), in their original order."""
    idx = list(range(len(names)))
    if only:
        def hit(name: str) -> bool:
            return any(fnmatch.fnmatchcase(name, p) if any(ch in p for ch in "*?[") else p in name for p in only)

        idx = [i for i in idx if hit(names[i])]
    if sample is not None and sample < len(idx):
        idx = sorted(random.Random(0).sample(idx, sample))
    return idx


def default_optimize(model: ModelProto) -> ModelProto:
    """The full default optimization: default rules, target ort, default limits, ILP."""
    from eqsat.core.pipeline import Options, optimize

    return optimize(model, Options()).model


def run_conformance(args: argparse.Namespace, optimize_fn: Callable[[ModelProto], ModelProto] | None = None,
                    cases=None) -> tuple[list, dict]:
    """Run the selected cases (`args`: only, sample, rtol, atol, quiet); returns (verdicts,
    summary). `optimize_fn` defaults to `default_optimize`, `cases` to every case."""
    from eqsat.verification.conformance import STATUSES, all_cases, check_expected, pass_rate

    optimize_fn = optimize_fn or default_optimize
    say = (lambda _m: None) if args.quiet else (lambda m: print(f"eqsat: {m}", file=sys.stderr, flush=True))
    t0 = time.perf_counter()
    if cases is None:
        say("collecting the onnx wheel's test cases")
        cases = all_cases()
    chosen = [cases[i] for i in select([c.name for c in cases], args.only, args.sample)]
    if not chosen:
        raise UsageError("no test case matches --only " + " ".join(args.only))
    say(f"{len(chosen)} of {len(cases)} cases")
    verdicts = []
    for k, case in enumerate(chosen, 1):
        v = check_expected(case, optimize_fn, args.rtol, args.atol)
        verdicts.append(v)
        if v.status == "failed":
            say(f"[{k}/{len(chosen)}] FAILED {v.name}: {v.reason}")
        elif k % 50 == 0 or k == len(chosen):
            say(f"[{k}/{len(chosen)}] {time.perf_counter() - t0:.0f} s")
    counts = {s: sum(v.status == s for v in verdicts) for s in STATUSES}
    rate = pass_rate(verdicts)
    summary = {"cases": len(verdicts), "counts": counts, "pass_rate": rate,
               "seconds": round(time.perf_counter() - t0, 1)}
    return verdicts, summary


def report_lines(verdicts: list, summary: dict, quiet: bool = False) -> list[str]:
    """The text report: failures, then (unless quiet) the cases that do not count, then the summary."""
    from eqsat.verification.conformance import FAILED, ORT_CANNOT_RUN, ORT_DIFFERS, SKIPPED

    lines = []
    groups = [(FAILED, "FAILED")] + ([] if quiet else [(ORT_DIFFERS, "onnxruntime itself differs"),
                                                      (ORT_CANNOT_RUN, "not runnable by onnxruntime"),
                                                      (SKIPPED, "skipped")])
    for status, title in groups:
        group = [v for v in verdicts if v.status == status]
        if group:
            lines.append(f"{title} ({len(group)}):")
            lines.extend(f"  {v.name}: {v.reason}" for v in group)
    c = summary["counts"]
    counted = c["passed"] + c["failed"]
    rate = summary["pass_rate"]
    rate_s = "n/a (no case that onnxruntime runs correctly)" if rate is None else f"{100 * rate:.2f}%"
    lines.append(f"pass rate {rate_s}: {c['passed']} of {counted} cases that onnxruntime runs correctly pass after "
                 f"optimization; {c['failed']} failed")
    lines.append(f"not counted: {c[ORT_DIFFERS]} onnxruntime itself differs, {c[ORT_CANNOT_RUN]} not runnable by "
                 f"onnxruntime, {c[SKIPPED]} skipped; {summary['cases']} cases in {summary['seconds']:.0f} s")
    return lines


def cmd_conformance(args: argparse.Namespace) -> int:
    verdicts, summary = run_conformance(args)
    print("\n".join(report_lines(verdicts, summary, args.quiet)))
    if args.json:
        write_text(args.json, json.dumps({"summary": summary, "cases": [v.as_dict() for v in verdicts]}, indent=2))
    return 1 if summary["counts"]["failed"] else 0
