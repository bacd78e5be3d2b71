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

from . import __version__
from .errors import EqsatError, UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage errors exit 2 with one line
        self.print_usage(sys.stderr)
        raise UsageError(message)


def _positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {s!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {s}")
    return v


def _positive_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {s!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {s}")
    return v


def build_parser() -> argparse.ArgumentParser:
    from .saturate import Limits

    lim = Limits()
    p = _Parser(prog="eqsat", description="Optimize ONNX models by equality saturation.")
    p.add_argument("--version", action="version", version=f"eqsat {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    o = sub.add_parser("optimize", help="optimize an ONNX model", description="Optimize an ONNX model.")
    o.add_argument("input", metavar="IN.onnx")
    o.add_argument("-o", "--output", metavar="OUT.onnx", help="output file (default: IN.opt.onnx)")
    o.add_argument("--rules", metavar="FILE.egg", action="append", default=[], type=Path,
                   help="a rule file to load after the default rules (repeatable)")
    o.add_argument("--no-default-rules", action="store_true",
                   help="load only the op language prelude and the --rules files")
    o.add_argument("--iter-limit", type=_positive_int, default=lim.iter_limit, metavar="N",
                   help=f"saturation rounds at most (default {lim.iter_limit})")
    o.add_argument("--node-limit", type=_positive_int, default=lim.node_limit, metavar="N",
                   help=f"e-nodes at most; a round that passes it is rolled back (default {lim.node_limit})")
    o.add_argument("--time-limit", type=_positive_float, default=lim.time_limit, metavar="S",
                   help=f"seconds of saturation, checked between rounds (default {lim.time_limit:g})")
    o.add_argument("--target", default="ort", choices=["ort", "onnx"],
                   help="ort (default): onnxruntime's contrib ops allowed; onnx: standard ops of the model's opset only")
    o.add_argument("--fold-limit", type=_positive_int, default=1 << 20, metavar="BYTES",
                   help="largest folded constant, unless no larger than its inputs (default 1 MiB)")
    o.add_argument("--extractor", default="ilp", help="extraction algorithm: ilp (default, exact DAG cost) or tree-greedy")
    o.add_argument("--cost-model", default="node-count", help="cost model (default node-count)")
    o.add_argument("--report", metavar="REPORT.json", type=Path, help="write a JSON report")
    o.add_argument("--save-egraph", metavar="FILE.json", type=Path,
                   help="write the saturated e-graph (egraph-serialize JSON with eqsat metadata)")
    o.add_argument("--in-place", action="store_true", help="allow the output to overwrite the input")
    o.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    return p


def _progress(quiet: bool):
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        if not quiet:
            print(f"eqsat: [{time.perf_counter() - t0:6.2f}s] {msg}", file=sys.stderr, flush=True)

    return say


def cmd_optimize(args: argparse.Namespace) -> int:
    from .modelio import check_model, load_model, save_model
    from .pipeline import Options, optimize
    from .saturate import Limits

    src = Path(args.input)
    out = Path(args.output) if args.output else src.with_name(src.stem + ".opt.onnx")
    if out.resolve() == src.resolve() and not args.in_place:
        raise UsageError(f"{out}: refusing to overwrite the input; pass --in-place to allow it")
    say = _progress(args.quiet)
    model = load_model(src)
    check_model(model, str(src), src)
    say(f"loaded {src} ({len(model.graph.node)} nodes)")
    opts = Options(
        rule_files=list(args.rules),
        default_rules=not args.no_default_rules,
        limits=Limits(args.iter_limit, args.node_limit, args.time_limit),
        extractor=args.extractor,
        cost_model=args.cost_model,
        target=args.target,
        fold_limit=args.fold_limit,
        save_egraph=args.save_egraph,
    )
    res = optimize(model, opts, progress=say)
    save_model(res.model, out)
    r = res.report
    say(f"wrote {out}: {r['nodes_before']} -> {r['nodes_after']} nodes")
    if args.report:
        r = dict(r, input=str(src), output=str(out))
        args.report.write_text(json.dumps(r, indent=2))
    for w in res.report["warnings"]:
        print(f"eqsat: warning: {w}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return 2
        return {"optimize": cmd_optimize}[args.command](args)
    except EqsatError as e:
        print(f"eqsat: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("eqsat: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
