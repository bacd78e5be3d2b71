"""The onnx wheel's light model-zoo models, made concrete.

    python benchmarks/light_models.py [--out benchmarks/models] [--only NAME,...]

The `onnx/backend/test/data/light/*.onnx` models (AlexNet, DenseNet-121, Inception v1/v2,
ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512) ship without weights: each weight is
`ConstantOfShape(<shape input>)` filled with 0.02, and the shapes are graph inputs (IR 3).
This writes `light_<name>.onnx` with every such weight replaced by a random initializer of
that shape (seeded, reproducible: normal(0, 1/sqrt(fan_in)) for tensors of rank >= 2, so
activations keep their scale, and uniform [0.5, 1.5] for vectors, so BatchNorm variances
are positive), the shape inputs removed and
the IR version raised to 7 (initializers need not be graph inputs). Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parent.parent


def light_dir() -> Path:
    return Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"


def concrete(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    g = model.graph
    shapes = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    keep_nodes, weights = [], []
    used_shapes: set[str] = set()
    for n in g.node:
        if n.op_type == "ConstantOfShape" and n.input and n.input[0] in shapes:
            shape = tuple(int(d) for d in shapes[n.input[0]])
            if len(shape) >= 2:
                w = rng.normal(0.0, np.sqrt(1.0 / max(1, int(np.prod(shape[1:])))), shape)
            else:
                w = rng.uniform(0.5, 1.5, shape)
            weights.append(numpy_helper.from_array(w.astype(np.float32), n.output[0]))
            used_shapes.add(n.input[0])
        else:
            keep_nodes.append(n)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.ir_version = 7
    del out.graph.node[:]
    out.graph.node.extend(keep_nodes)
    inits = [t for t in g.initializer if t.name not in used_shapes]
    del out.graph.initializer[:]
    out.graph.initializer.extend(inits + weights)
    init_names = {t.name for t in out.graph.initializer}
    inputs = [i for i in g.input if i.name not in used_shapes and i.name not in init_names]
    del out.graph.input[:]
    out.graph.input.extend(inputs)
    onnx.checker.check_model(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/models")
    ap.add_argument("--only", default="")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    keep = set(filter(None, a.only.split(",")))
    for p in sorted(light_dir().glob("*.onnx")):
        name = p.stem.removeprefix("light_")
        if keep and name not in keep:
            continue
        m = concrete(onnx.load(str(p)))
        dst = a.out / f"light_{name}.onnx"
        onnx.save(m, str(dst))
        print(f"{dst}: {len(m.graph.node)} nodes, {dst.stat().st_size / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
