"""Convolutional networks in the styles other exporters write, built with onnx.helper.

    python benchmarks/cnn_styles.py [--out benchmarks/models] [--only NAME,...]

Paddle2ONNX-style graphs are not what torch writes (torchvision's own networks:
benchmarks/torchvision_models.py); these models reproduce the patterns, with random weights
(seeded, reproducible, normal(0, 1/sqrt(fan_in)) so that activations keep their scale):

- `style_mbv3`: a MobileNetV3-small-like network, opset 13 (no HardSwish op): hardswish
  and hardsigmoid written out as x * Clip(x + 3, 0, 6) / 6, BatchNormalization kept after
  every convolution, squeeze-excite blocks (GlobalAveragePool -> 1x1 Conv -> Relu -> 1x1
  Conv -> hardsigmoid -> Mul), residual Adds;
- `style_effnet`: an EfficientNet-B0-like network, opset 13: SiLU as x * Sigmoid(x), BN
  kept, squeeze-excite with Sigmoid, free image sizes (height, width: bind them with --dim);
- `style_yolo`: a YOLO-like detector neck, opset 12: Conv + BN + SiLU, CSP splits by
  Slice, Concat of branches, nearest Resize upsampling, MaxPool SPP.

Nothing is downloaded.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent


class Net:
    """A graph under construction: named values, initializers, nodes."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.n = 0

    def name(self, base: str) -> str:
        self.n += 1
        return f"{base}{self.n}"

    def const(self, arr) -> str:
        n = self.name("k")
        self.inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), n))
        return n

    def const_i(self, vals: list[int]) -> str:
        n = self.name("i")
        self.inits.append(numpy_helper.from_array(np.asarray(vals, np.int64), n))
        return n

    def op(self, op: str, *xs: str, **attrs) -> str:
        y = self.name(op.lower())
        self.nodes.append(helper.make_node(op, list(xs), [y], **attrs))
        return y

    def conv(self, x: str, cin: int, cout: int, k: int = 1, stride: int = 1, group: int = 1, bias: bool = False) -> str:
        fan = cin // group * k * k
        w = self.const(self.rng.standard_normal((cout, cin // group, k, k)) / np.sqrt(fan))
        ins = [x, w] + ([self.const(self.rng.standard_normal(cout) * 0.1)] if bias else [])
        return self.op("Conv", *ins, kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=group)

    def bn(self, x: str, c: int) -> str:
        r = self.rng
        ps = [r.uniform(0.5, 1.5, c), r.standard_normal(c) * 0.1, r.standard_normal(c) * 0.1, r.uniform(0.5, 1.5, c)]
        return self.op("BatchNormalization", x, *(self.const(p) for p in ps), epsilon=1e-3)

    def hardsigmoid(self, x: str) -> str:  # Clip(x + 3, 0, 6) / 6, as Paddle2ONNX writes it
        c = self.op("Clip", self.op("Add", x, self.const(3.0)), self.const(0.0), self.const(6.0))
        return self.op("Div", c, self.const(6.0))

    def hardswish(self, x: str) -> str:  # x * Clip(x + 3, 0, 6) / 6
        c = self.op("Clip", self.op("Add", x, self.const(3.0)), self.const(0.0), self.const(6.0))
        return self.op("Div", self.op("Mul", x, c), self.const(6.0))

    def silu(self, x: str) -> str:
        return self.op("Mul", x, self.op("Sigmoid", x))

    def act(self, x: str, kind: str) -> str:
        return {"relu": lambda v: self.op("Relu", v), "hswish": self.hardswish, "silu": self.silu}[kind](x)

    def cba(self, x: str, cin: int, cout: int, k: int = 1, stride: int = 1, group: int = 1, act: str = "relu") -> str:
        y = self.bn(self.conv(x, cin, cout, k, stride, group), cout)
        return y if act == "none" else self.act(y, act)

    def se(self, x: str, c: int, squeeze: int, gate: str) -> str:
        """Squeeze-excite: GlobalAveragePool -> 1x1 Conv -> Relu (SiLU) -> 1x1 Conv ->
        hardsigmoid (Sigmoid) -> Mul."""
        s = self.conv(self.op("GlobalAveragePool", x), c, squeeze, bias=True)
        s = self.op("Relu", s) if gate == "hsig" else self.silu(s)
        s = self.conv(s, squeeze, c, bias=True)
        s = self.hardsigmoid(s) if gate == "hsig" else self.op("Sigmoid", s)
        return self.op("Mul", x, s)

    def model(self, x_shape: list, out: str, opset: int, name: str) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        return onnx.shape_inference.infer_shapes(m)


# MobileNetV3-small: (kernel, expand, out, SE, activation, stride)
MBV3 = [(3, 16, 16, True, "relu", 2), (3, 72, 24, False, "relu", 2), (3, 88, 24, False, "relu", 1),
        (5, 96, 40, True, "hswish", 2), (5, 240, 40, True, "hswish", 1), (5, 240, 40, True, "hswish", 1),
        (5, 120, 48, True, "hswish", 1), (5, 144, 48, True, "hswish", 1), (5, 288, 96, True, "hswish", 2),
        (5, 576, 96, True, "hswish", 1), (5, 576, 96, True, "hswish", 1)]


def style_mbv3() -> onnx.ModelProto:
    n = Net(1)
    x, c = n.cba("x", 3, 16, 3, 2, act="hswish"), 16
    for k, e, o, se, act, s in MBV3:
        y = n.cba(x, c, e, act=act) if e != c else x
        y = n.cba(y, e, e, k, s, group=e, act=act)
        if se:
            y = n.se(y, e, max(8, e // 4), "hsig")
        y = n.cba(y, e, o, act="none")
        x, c = (n.op("Add", x, y) if s == 1 and c == o else y), o
    x = n.cba(x, c, 576, act="hswish")
    x = n.op("GlobalAveragePool", x)
    x = n.hardswish(n.conv(x, 576, 1024, bias=True))
    x = n.conv(x, 1024, 1000, bias=True)
    return n.model([1, 3, 224, 224], n.op("Flatten", x), 13, "style_mbv3")


# EfficientNet-B0: (expand ratio, kernel, stride, out, repeats)
EFF = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3), (6, 5, 2, 192, 4),
       (6, 3, 1, 320, 1)]


def style_effnet() -> onnx.ModelProto:
    n = Net(2)
    x, c = n.cba("x", 3, 32, 3, 2, act="silu"), 32
    for ratio, k, stride, o, reps in EFF:
        for i in range(reps):
            s = stride if i == 0 else 1
            e = c * ratio
            y = n.cba(x, c, e, act="silu") if ratio != 1 else x
            y = n.cba(y, e, e, k, s, group=e, act="silu")
            y = n.se(y, e, max(1, c // 4), "sig")
            y = n.cba(y, e, o, act="none")
            x, c = (n.op("Add", x, y) if s == 1 and c == o else y), o
    x = n.op("GlobalAveragePool", n.cba(x, c, 1280, act="silu"))
    return n.model([1, 3, "height", "width"], n.op("Flatten", n.conv(x, 1280, 1000, bias=True)), 13, "style_effnet")


def style_yolo() -> onnx.ModelProto:
    n = Net(3)

    def csp(x: str, c: int, blocks: int) -> str:
        a = n.cba(x, c, c, act="silu")
        half = c // 2
        left = n.op("Slice", a, n.const_i([0]), n.const_i([half]), n.const_i([1]))
        right = n.op("Slice", a, n.const_i([half]), n.const_i([c]), n.const_i([1]))
        parts = [left, right]
        y = right
        for _ in range(blocks):
            y = n.op("Add", y, n.cba(n.cba(y, half, half, 3, act="silu"), half, half, 3, act="silu"))
            parts.append(y)
        return n.cba(n.op("Concat", *parts, axis=1), half * (2 + blocks), c, act="silu")

    x = n.cba("x", 3, 16, 3, 2, act="silu")
    x = csp(n.cba(x, 16, 32, 3, 2, act="silu"), 32, 1)
    p3 = csp(n.cba(x, 32, 64, 3, 2, act="silu"), 64, 2)
    p4 = csp(n.cba(p3, 64, 128, 3, 2, act="silu"), 128, 2)
    p5 = n.cba(p4, 128, 256, 3, 2, act="silu")
    s = n.cba(p5, 256, 128, act="silu")  # SPPF
    m1 = n.op("MaxPool", s, kernel_shape=[5, 5], pads=[2, 2, 2, 2])
    m2 = n.op("MaxPool", m1, kernel_shape=[5, 5], pads=[2, 2, 2, 2])
    m3 = n.op("MaxPool", m2, kernel_shape=[5, 5], pads=[2, 2, 2, 2])
    p5 = n.cba(n.op("Concat", s, m1, m2, m3, axis=1), 512, 256, act="silu")
    up = n.op("Resize", n.cba(p5, 256, 128, act="silu"), n.const(np.zeros(0)), n.const([1, 1, 2, 2]), mode="nearest")
    h4 = csp(n.op("Concat", up, p4, axis=1), 256, 1)
    up = n.op("Resize", n.cba(h4, 256, 64, act="silu"), n.const(np.zeros(0)), n.const([1, 1, 2, 2]), mode="nearest")
    h3 = csp(n.op("Concat", up, p3, axis=1), 128, 1)
    head = n.conv(h3, 128, 85, bias=True)
    return n.model([1, 3, 320, 320], head, 12, "style_yolo")


MODELS = {"style_mbv3": style_mbv3, "style_effnet": style_effnet, "style_yolo": style_yolo}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/models")
    ap.add_argument("--only", default="", help="comma-separated names: " + ", ".join(MODELS))
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    for name, build in MODELS.items():
        if a.only and name not in a.only.split(","):
            continue
        m = build()
        onnx.checker.check_model(m, full_check=True)
        path = a.out / f"{name}.onnx"
        onnx.save(m, path)
        print(f"{path}: {len(m.graph.node)} nodes, {path.stat().st_size >> 20} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
