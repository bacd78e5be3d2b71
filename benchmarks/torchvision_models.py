"""torchvision's classification and segmentation networks exported to ONNX, random weights.

    python benchmarks/torchvision_models.py [--out benchmarks/models] [--set development|held-out|all]
                                            [--only NAME,...]

Two sets, reported apart (benchmarks/results/cnn.md):

- `development`: the models eqsat's layout rules and cost figures were tuned on (issue 27);
- `held-out`: models never used while tuning; a speed-up counts only where it holds here.

Exports: TorchScript exporter, opset 17, batch 1, 224 x 224 (320 for segmentation, 299 for
inception_v3), input `x`, output `y` (a segmentation model's "out"). Weights are random
(seeded); nothing is downloaded. torchvision imports beside the CPU torch through
benchmarks/torchvision_ops.py. Each file is named tv_NAME.onnx; existing files are kept.

`--trained-bn` gives every BatchNorm trained-like statistics first (corpus.py's
`_calibrate_batchnorm`: affine parameters perturbed, running statistics from two passes on
random images) and names the file tv_NAME.bn.onnx. Without it every BatchNorm is the identity
it is initialized to, so every folded convolution bias is zero and the exporter shares one zero
tensor among them: a quantized model then has zero biases at foreign scales, which no trained
model has (benchmarks/results/qdq.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

DEVELOPMENT = ["convnext_tiny", "deeplabv3_mobilenet_v3_large", "densenet121", "efficientnet_b0", "googlenet",
               "inception_v3", "lraspp_mobilenet_v3_large", "mnasnet1_0", "mobilenet_v2", "mobilenet_v3_small",
               "regnet_y_400mf", "resnext50_32x4d", "shufflenet_v2_x1_0", "squeezenet1_1",
               "mobilenet_v3_large"]  # (held out until its squeeze-excite products were studied)
# measured, never tuned on: the first ten from the first pass of issue 27, the second ten
# added with the squeeze-excite rules and never optimized before their results were final
HELD_OUT = ["efficientnet_b1", "efficientnet_v2_s", "regnet_x_400mf", "regnet_y_800mf",
            "shufflenet_v2_x0_5", "mnasnet0_5", "resnet18", "squeezenet1_0", "fcn_resnet50",
            "efficientnet_b2", "efficientnet_b3", "regnet_y_1_6gf", "regnet_x_800mf", "mnasnet0_75", "mnasnet1_3",
            "shufflenet_v2_x1_5", "densenet169", "resnet34", "wide_resnet50_2"]
SEGMENTATION = {"lraspp_mobilenet_v3_large", "deeplabv3_mobilenet_v3_large", "fcn_resnet50"}
SETS = {"development": DEVELOPMENT, "held-out": HELD_OUT, "all": DEVELOPMENT + HELD_OUT}


def _torchvision():
    """torchvision's model modules, importable beside a CPU torch (benchmarks/torchvision_ops.py)."""
    from torchvision_ops import declare

    declare()
    import torchvision.models as models
    import torchvision.models.segmentation as segmentation

    return models, segmentation


def export(name: str, path: Path, trained_bn: bool = False) -> None:
    """Write torchvision's `name` with random weights to `path` (`trained_bn`: BatchNorm
    statistics as the module docstring says)."""
    import torch

    models, segmentation = _torchvision()
    seg = name in SEGMENTATION
    kwargs: dict = {"weights": None, "weights_backbone": None} if seg else {"weights": None}
    if name in ("inception_v3", "googlenet"):
        kwargs.update(aux_logits=False, init_weights=False)
    torch.manual_seed(0)
    net = getattr(segmentation if seg else models, name)(**kwargs).eval()
    size = 299 if name == "inception_v3" else 320 if seg else 224
    if trained_bn:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from corpus import _calibrate_batchnorm

        _calibrate_batchnorm(net, size=size)

    class Out(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            y = self.m(x)
            return y["out"] if isinstance(y, dict) else y

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(Out(net), (torch.randn(1, 3, size, size),), str(path), opset_version=17, dynamo=False,
                      input_names=["x"], output_names=["y"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "models")
    ap.add_argument("--set", choices=sorted(SETS), default="all")
    ap.add_argument("--only", help="comma-separated model names (torchvision's)")
    ap.add_argument("--trained-bn", action="store_true", help="trained-like BatchNorm statistics: tv_NAME.bn.onnx")
    args = ap.parse_args(argv)
    names = args.only.split(",") if args.only else SETS[args.set]
    for name in names:
        path = args.out / (f"tv_{name}.bn.onnx" if args.trained_bn else f"tv_{name}.onnx")
        if path.exists():
            continue
        export(name, path, args.trained_bn)
        print(f"{path}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
