"""QDQ models of the corpus's CNNs and BERT-base, made here with onnxruntime's own quantizer (issue 30):

    python benchmarks/qdq_models.py --models benchmarks/models --out DIR [--only resnet50,tv_mobilenet_v2,bert-base]
        [--samples 8] [--reduce-range] [--dim sequence=128]

For each model: `onnxruntime.quantization.quantize_static(..., quant_format=QuantFormat.QDQ)`
with random calibration data, seeded (`random_feeds`): float inputs standard normal (images
for the CNNs); for a transformer's int64 inputs, token ids uniform over the vocabulary (the rows
of the embedding table the input indexes), an attention mask of ones with a random padded tail,
token type ids 0 for a random prefix and 1 after it. Symbolic dimensions take 1, or the
`--dim NAME=VALUE` given (BERT-base: batch 1, sequence 128 by default); the model written keeps
them symbolic. Per-tensor by default, activations uint8 and weights int8 (onnxruntime's
defaults); `--reduce-range` quantizes weights to 7 bits, `--per-channel` per output channel.
Writes DIR/NAME.qdq.onnx (or .qdq-rr.onnx / .qdq-pc.onnx). Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from pathlib import Path

import numpy as np
import onnx

DEFAULT = "resnet50,tv_mobilenet_v2,tv_efficientnet_b0"


# Symbolic dimensions of the corpus's transformers, as the other benchmarks size them.
DIMS = {"batch": 1, "sequence": 128}


def _vocab(model: onnx.ModelProto, name: str) -> int | None:
    """The rows of the embedding table a Gather indexes with the graph input `name` (the table
    an initializer, or a DequantizeLinear of one in a QDQ model)."""
    inits = {t.name: t for t in model.graph.initializer}
    dq = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    for n in model.graph.node:
        if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == name:
            table = dq.get(n.input[0], n.input[0])
            if table in inits:
                return int(inits[table].dims[0])
    return None


def random_feeds(model: onnx.ModelProto, rng: np.random.Generator, dims: dict[str, int]) -> dict[str, np.ndarray]:
    """One seeded input for each graph input: float inputs standard normal; int64 token ids
    uniform over the vocabulary, an attention mask of ones with a padded tail (at most a quarter
    of the sequence), token type ids 0 then 1 from a random point on."""
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        t = inp.type.tensor_type
        shape = [d.dim_value if d.dim_value > 0 else dims.get(d.dim_param, 1) for d in t.shape.dim]
        if t.elem_type == onnx.TensorProto.FLOAT:
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
            continue
        dt = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        seq = shape[-1]
        if "mask" in inp.name:
            x = np.ones(shape, dt)
            x[..., seq - int(rng.integers(0, seq // 4 + 1)):] = 0
        elif "type" in inp.name:
            x = np.zeros(shape, dt)
            x[..., int(rng.integers(1, seq)):] = 1
        else:
            vocab = _vocab(model, inp.name) or 2
            x = rng.integers(0, vocab, shape).astype(dt)
        feeds[inp.name] = x
    return feeds


class _Reader:
    """Random inputs for the calibrator, seeded: `samples` of them (`random_feeds`)."""

    def __init__(self, model: onnx.ModelProto, samples: int, dims: dict[str, int]) -> None:
        rng = np.random.default_rng(0)
        self.feeds = iter([random_feeds(model, rng, dims) for _ in range(samples)])

    def get_next(self):
        return next(self.feeds, None)


def quantize(src: Path, dst: Path, samples: int, reduce_range: bool, per_channel: bool,
             dims: dict[str, int] | None = None) -> None:
    from onnxruntime.quantization import QuantFormat, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = dst.resolve().with_suffix(".pre.onnx")
    src = src.resolve()
    # in a scratch folder: a failed symbolic shape inference leaves its temporary model and
    # external data (twice the model's size) in the working directory
    with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):
        try:
            quant_pre_process(str(src), str(pre), skip_optimization=True)
        except Exception:  # noqa: BLE001 - BERT-base: "Incomplete symbolic shape inference"; onnx's alone then
            quant_pre_process(str(src), str(pre), skip_optimization=True, skip_symbolic_shape=True)
    quantize_static(str(pre), str(dst), _Reader(onnx.load(str(pre)), samples, dims or DIMS),
                    quant_format=QuantFormat.QDQ, reduce_range=reduce_range, per_channel=per_channel)
    pre.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=Path("benchmarks/models"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default=DEFAULT)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--reduce-range", action="store_true")
    ap.add_argument("--per-channel", action="store_true")
    ap.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE",
                    help="size of a symbolic dimension for the calibration inputs (default batch=1, sequence=128)")
    a = ap.parse_args()
    dims = dict(DIMS)
    for d in a.dim:
        k, v = d.split("=")
        dims[k] = int(v)
    a.out.mkdir(parents=True, exist_ok=True)
    tag = "qdq" + ("-rr" if a.reduce_range else "") + ("-pc" if a.per_channel else "")
    for name in a.only.split(","):
        dst = a.out / f"{name}.{tag}.onnx"
        quantize(a.models / f"{name}.onnx", dst, a.samples, a.reduce_range, a.per_channel, dims)
        print(dst)


if __name__ == "__main__":
    main()
