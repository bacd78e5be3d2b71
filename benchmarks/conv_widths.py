"""NCHW and blocked (NCHWc) convolutions by width: the measurement behind the cpu profile's
narrow_conv_exponent and its note that the blocked kernels keep their rate where NCHW ones
drop (benchmarks/results/cpu-profile.md).

    python benchmarks/conv_widths.py [--runs 80]

For each (input channels, output channels, kernel, pixels): the NCHW Conv and
com.microsoft.nchwc.Conv on the same shapes, side by side in one session group (CPU time,
onnxruntime's optimizations off, 1 thread). The blocked conv is fed a plain tensor of the
blocked shape: its values are not a blocked layout's, its time is the kernel's. Prints each
one's microseconds and GFLOP/s and the NCHW / blocked time ratio (output channels a multiple
of 16: the blocked kernel takes whole blocks). Nothing is asserted.
"""

from __future__ import annotations

import argparse

import numpy as np
from onnx import helper

from eqsat.backends.ort.calibrate_layout import nchw_conv_model
from eqsat.backends.ort.latency import compare

SHAPES = [(16, 16, 1, 112), (16, 32, 1, 112), (32, 16, 1, 56), (32, 32, 1, 56), (64, 64, 1, 56),
          (16, 16, 3, 56), (32, 32, 3, 28), (64, 64, 3, 28), (128, 128, 3, 14)]
NCHWC = "com.microsoft.nchwc"


def conv(cin: int, cout: int, k: int, pixels: int, blocked: bool):
    """calibrate_layout's NCHW convolution, or the same node as com.microsoft.nchwc.Conv."""
    model, _ = nchw_conv_model(cin, cout, k, pixels)
    if blocked:
        model.graph.node[0].domain = NCHWC
        model.opset_import.append(helper.make_opsetid(NCHWC, 1))
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=80)
    a = ap.parse_args()
    print("| conv | pixels | NCHW us | NCHW GFLOP/s | blocked us | blocked GFLOP/s | NCHW / blocked |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for cin, cout, k, p in SHAPES:
        feeds = {"x": np.random.default_rng(1).standard_normal((1, cin, p, p)).astype(np.float32)}
        tn, tb = compare([conv(cin, cout, k, p, False), conv(cin, cout, k, p, True)], feeds, runs=a.runs, clock="cpu")
        flops = 2.0 * cout * cin * k * k * p * p
        print(f"| {k}x{k} {cin} -> {cout} | {p} | {tn * 1e3:.1f} | {flops / tn / 1e6:.0f} | {tb * 1e3:.1f} "
              f"| {flops / tb / 1e6:.0f} | {tn / tb:.2f} |")


if __name__ == "__main__":
    main()
