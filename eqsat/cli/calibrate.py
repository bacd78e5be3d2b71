"""`eqsat calibrate`: this machine's hardware profile, measured under onnxruntime
(eqsat.backends.ort.calibrate)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from eqsat.cli.args import add_hardware, output_file, positive_int
from eqsat.errors import UsageError


def register(sub) -> dict:
    c = sub.add_parser("calibrate", help="measure this machine's hardware profile (for --hardware)",
                       description="Measure this machine under onnxruntime and write a hardware profile: the "
                                   "roofline's rates (MatMul and vector throughput, memory bandwidth, per-op "
                                   "overhead), which fusions pay, and the channel-blocked layout's figures. Every "
                                   "cost model reads the fusion and layout choices; pass the file to --hardware.")
    c.add_argument("-o", "--output", metavar="PROFILE.json", required=True, type=output_file)
    c.add_argument("--threads", type=positive_int, default=1, help="onnxruntime threads (default 1)")
    c.add_argument("--learn", nargs="+", metavar="SET.json", type=Path,
                   help="instead of measuring: fit the `learned` cost model's weights to these program sets "
                        "(compare-costs --save-programs) and write them into the --hardware profile's copy")
    c.add_argument("--hold-out", nargs="+", default=[], metavar="SET.json", type=Path,
                   help="with --learn: program sets scored (tau, top-1 regret), never fitted")
    add_hardware(c, "with --learn: the profile the weights are added to (default: the one the sets were "
                    "measured with)")
    return {"calibrate": cmd_calibrate}


def cmd_calibrate(args: argparse.Namespace) -> int:
    if args.learn:
        return _learn(args)
    if args.hold_out:
        raise UsageError("--hold-out scores a learned model: give the training sets with --learn")
    from eqsat.backends.ort.calibrate import write

    prof = write(args.output, args.threads)
    print(json.dumps(prof, indent=2))
    return 0


def _learn(args: argparse.Namespace) -> int:
    from eqsat.backends.ort.learn import learn
    from eqsat.io.atomic import write_text

    prof = learn(args.learn, args.hold_out, args.hardware, name=Path(args.output).stem)
    write_text(args.output, json.dumps(prof, indent=2) + "\n")
    section = prof["learned"]
    for kind in ("trained_on", "held_out"):
        for e in section[kind]:
            print(f"{kind.replace('_', ' ')} {e['set']}: {e['programs']} programs, tau {e['tau']:.2f}, "
                  f"top-1 regret {100 * e['top1_regret']:.1f} %, mean relative error "
                  f"{100 * e['mean_relative_error']:.0f} %")
    print(f"wrote {args.output}: use it with --hardware {args.output} --cost-model learned")
    return 0
