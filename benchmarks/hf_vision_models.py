"""transformers' vision models at their default configurations, exported to ONNX with random weights.

    python benchmarks/hf_vision_models.py [--out benchmarks/models] [--only NAME,...]

Held out for issue 27 (CNN-like and hybrid vision models never used while tuning eqsat's
layout rules or cost figures): MobileViT (its default configuration is mobilevit-small),
SegFormer (b0), LeViT (128S), Swin (tiny). Each is the bare model (no task head), batch 1,
224 x 224 (SegFormer 512 x 512), TorchScript exporter, opset 17, input `x`, outputs the
model's last hidden state as `y`. Weights are random after torch.manual_seed(0); nothing is
downloaded (HF_HUB_OFFLINE). Files are named hf_NAME.onnx; existing files are kept.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = {  # name: (model class, config class, image size)
    "mobilevit": ("MobileViTModel", "MobileViTConfig", 224),
    "segformer": ("SegformerModel", "SegformerConfig", 512),
    "levit": ("LevitModel", "LevitConfig", 224),
    "swin": ("SwinModel", "SwinConfig", 224),
}


def export(name: str, path: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from torchvision_ops import declare

    declare()  # transformers imports torchvision where it is installed
    import transformers

    model_cls, config_cls, size = MODELS[name]
    torch.manual_seed(0)
    net = getattr(transformers, model_cls)(getattr(transformers, config_cls)()).eval()

    class Out(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(pixel_values=x).last_hidden_state

    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(Out(net), (torch.randn(1, 3, size, size),), str(path), opset_version=17, dynamo=False,
                          input_names=["x"], output_names=["y"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "models")
    ap.add_argument("--only", help="comma-separated names: " + ", ".join(MODELS))
    args = ap.parse_args(argv)
    for name in args.only.split(",") if args.only else MODELS:
        path = args.out / f"hf_{name}.onnx"
        if not path.exists():
            export(name, path)
            print(path, file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
