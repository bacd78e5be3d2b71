"""`eqsat calibrate`: this machine's hardware profile, measured under onnxruntime
(eqsat.backends.ort.calibrate)."""

from __future__ import annotations

import argparse
import json

from eqsat.cli.args import output_file, positive_int


def register(sub) -> dict:
    c = sub.add_parser("calibrate", help="measure this machine's hardware profile (for --hardware)",
                       description="Measure this machine under onnxruntime and write a hardware profile: the "
                                   "roofline's rates (MatMul and vector throughput, memory bandwidth, per-op "
                                   "overhead), which fusions pay, and the channel-blocked layout's figures. Every "
                                   "cost model reads the fusion and layout choices; pass the file to --hardware.")
    c.add_argument("-o", "--output", metavar="PROFILE.json", required=True, type=output_file)
    c.add_argument("--threads", type=positive_int, default=1, help="onnxruntime threads (default 1)")
    return {"calibrate": cmd_calibrate}


def cmd_calibrate(args: argparse.Namespace) -> int:
    from eqsat.backends.ort.calibrate import write

    prof = write(args.output, args.threads)
    print(json.dumps(prof, indent=2))
    return 0
