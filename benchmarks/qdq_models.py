"""QDQ models of the corpus's CNNs, made here with onnxruntime's own quantizer (issue 30):

    python benchmarks/qdq_models.py --models benchmarks/models --out DIR [--only resnet50,tv_mobilenet_v2]
        [--samples 8] [--reduce-range]

For each model: `onnxruntime.quantization.quantize_static(..., quant_format=QuantFormat.QDQ)`
with random calibration data (seeded normal images at the model's input shape, batch 1), per-tensor
by default, activations uint8 and weights int8 (onnxruntime's defaults); `--reduce-range`
quantizes weights to 7 bits, `--per-channel` per output channel. Writes DIR/NAME.qdq.onnx
(or .qdq-rr.onnx / .qdq-pc.onnx). Nothing is downloaded.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx

DEFAULT = "resnet50,tv_mobilenet_v2,tv_efficientnet_b0"


class _Reader:
    """Random images for the calibrator, seeded: `samples` of them."""

    def __init__(self, model: onnx.ModelProto, samples: int) -> None:
        inp = model.graph.input[0]
        shape = [d.dim_value if d.dim_value > 0 else 1 for d in inp.type.tensor_type.shape.dim]
        rng = np.random.default_rng(0)
        self.feeds = iter([{inp.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(samples)])

    def get_next(self):
        return next(self.feeds, None)


def quantize(src: Path, dst: Path, samples: int, reduce_range: bool, per_channel: bool) -> None:
    from onnxruntime.quantization import QuantFormat, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = dst.with_suffix(".pre.onnx")
    quant_pre_process(str(src), str(pre), skip_optimization=True)
    quantize_static(str(pre), str(dst), _Reader(onnx.load(str(pre)), samples), quant_format=QuantFormat.QDQ,
                    reduce_range=reduce_range, per_channel=per_channel)
    pre.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=Path("benchmarks/models"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default=DEFAULT)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--reduce-range", action="store_true")
    ap.add_argument("--per-channel", action="store_true")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    tag = "qdq" + ("-rr" if a.reduce_range else "") + ("-pc" if a.per_channel else "")
    for name in a.only.split(","):
        dst = a.out / f"{name}.{tag}.onnx"
        quantize(a.models / f"{name}.onnx", dst, a.samples, a.reduce_range, a.per_channel)
        print(dst)


if __name__ == "__main__":
    main()
