#!/usr/bin/env python
"""Benchmark corpus builder: export a fixed set of models to ONNX.

Every model is built from a configuration written in this file, with random
weights drawn after ``torch.manual_seed(0)``; nothing is downloaded (the
Hugging Face hub is switched off through ``HF_HUB_OFFLINE=1``).

Usage::

    python benchmarks/corpus.py --out DIR [--models NAME,...] [--dynamo]
                                [--no-check] [--opset N] [--strict]

Importable API::

    from benchmarks.corpus import MODELS, export_model
    path = export_model("bert-base", "benchmarks/models")

By default the TorchScript-based exporter (``torch.onnx.export(...,
dynamo=False)``) writes ``<out>/<name>.onnx``; with ``--dynamo`` the
torch.export-based exporter writes ``<out>/<name>.dynamo.onnx``.

After each export (unless ``--no-check``) the model is validated with
``onnx.checker.check_model`` and run once under onnxruntime (CPU) on random
inputs; the outputs are compared with PyTorch's for the same inputs.  A second
run at a different batch/sequence size checks that the symbolic dimensions
really are symbolic.
"""

from __future__ import annotations

import os

# Must be set before transformers / huggingface_hub are imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import argparse
import collections
import contextlib
import dataclasses
import logging
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import nn

DEFAULT_OUT = Path(__file__).resolve().parent / "models"
# The TorchScript exporter targets opset 17 (LayerNormalization is an op from
# 17 on).  The dynamo exporter only has implementations for opset >= 18 and
# its down-conversion to 17 fails or produces invalid models (GPT-2: Split
# with the opset-18 num_outputs attribute), so it uses 18.
DEFAULT_OPSET = 17
DEFAULT_DYNAMO_OPSET = 18
SEED = 0
# Models whose parameters exceed this are saved with external data.
EXTERNAL_DATA_THRESHOLD = 1_800 * 1024 * 1024
# Relative tolerance of the onnxruntime-vs-torch check:
# max|ort - torch| <= RTOL * max(1, max|torch|).
RTOL = 1e-3

Inputs = dict[str, torch.Tensor]


# --------------------------------------------------------------------------
# ResNet-50 in plain torch (torchvision is not available here).
# --------------------------------------------------------------------------


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_ch: int, width: int, stride: int = 1) -> None:
        super().__init__()
        out_ch = width * self.expansion
        self.conv1 = nn.Conv2d(in_ch, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_ch, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_ch),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet50(nn.Module):
    """ResNet-50 v1.5 (stride on the 3x3 conv), same layout as torchvision's."""

    def __init__(self, num_classes: int = 1000, layers=(3, 4, 6, 3)) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        stages = []
        in_ch = 64
        for i, (n, width) in enumerate(zip(layers, (64, 128, 256, 512), strict=True)):
            blocks = []
            for j in range(n):
                stride = 2 if (i > 0 and j == 0) else 1
                blocks.append(Bottleneck(in_ch, width, stride))
                in_ch = width * Bottleneck.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(pixel_values))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def _calibrate_batchnorm(model: nn.Module, steps: int = 2, batch: int = 4, size: int = 224) -> None:
    """Give the BN layers non-trivial, well-scaled running statistics.

    With fresh running stats (mean 0, var 1) eval-mode BN is almost an
    identity and the activations of a random ResNet blow up; a couple of
    train-mode passes on random images (cumulative averaging) fix both.
    The affine parameters are perturbed too so that BN is not a no-op.
    """
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative moving average
        with torch.no_grad():
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.1, 0.1)
    model.train()
    with torch.no_grad():
        for _ in range(steps):
            model(torch.randn(batch, 3, size, size))
    for bn in bns:
        bn.momentum = 0.1
    model.eval()


def build_resnet50() -> nn.Module:
    model = ResNet50()
    _calibrate_batchnorm(model)
    return model.eval()


# --------------------------------------------------------------------------
# Transformers models, wrapped so that they take positional tensors and
# return a tuple of tensors (no ModelOutput, no KV cache).
# --------------------------------------------------------------------------


class EncoderWrapper(nn.Module):
    """BERT-style encoder: (input_ids, attention_mask, token_type_ids)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            return_dict=True,
        )
        return out.last_hidden_state, out.pooler_output


class DecoderWrapper(nn.Module):
    """Decoder-only LM body: (input_ids, attention_mask), use_cache=False."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            use_cache=False,
            return_dict=True,
        )
        return (out.last_hidden_state,)


class VisionWrapper(nn.Module):
    """ViT: (pixel_values) -> (last_hidden_state, pooler_output)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        out = self.model(pixel_values=pixel_values, return_dict=True)
        return out.last_hidden_state, out.pooler_output


class CacheStepWrapper(nn.Module):
    """A decoder's step with a KV cache, as deployed: (input_ids [batch, new_tokens],
    attention_mask [batch, total_sequence], then past key and value [batch, kv heads,
    past_sequence, head] of each layer) -> (last_hidden_state, then present key and value
    [batch, kv heads, total_sequence, head] of each layer); total = past + new."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.layers = model.config.num_hidden_layers

    def forward(self, input_ids, attention_mask, *past):
        cache = _transformers().DynamicCache(config=self.model.config)
        for i in range(self.layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            past_key_values=cache,
            use_cache=True,
            return_dict=True,
        )
        present = [t for layer in out.past_key_values.layers[: self.layers] for t in (layer.keys, layer.values)]
        return (out.last_hidden_state, *present)


def _perturb_constant_parameters(model: nn.Module, std: float = 0.02) -> nn.Module:
    """Add small noise to parameters that were initialised to a constant.

    Hugging Face initialises biases to 0 and norm weights to 1.  Identical
    initialisers are deduplicated by the TorchScript exporter, which then
    emits ``Identity`` nodes that a real (trained) checkpoint would never
    produce; perturbing them keeps the exported graph representative.
    """
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and bool((p == p.flatten()[0]).all()):
                p.add_(torch.randn_like(p) * std)
    return model


def _transformers():
    try:
        from benchmarks.torchvision_ops import declare
    except ImportError:  # run as a script: benchmarks/ is on the path
        from torchvision_ops import declare
    declare()  # transformers imports torchvision where it is installed
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def build_bert_base() -> nn.Module:
    tf = _transformers()
    config = tf.BertConfig(attn_implementation="eager")  # BERT-base defaults
    return _perturb_constant_parameters(
        EncoderWrapper(tf.BertModel(config, add_pooling_layer=True))
    ).eval()


def build_gpt2() -> nn.Module:
    tf = _transformers()
    config = tf.GPT2Config(attn_implementation="eager", use_cache=False)  # GPT-2 small
    return _perturb_constant_parameters(DecoderWrapper(tf.GPT2Model(config))).eval()


def build_vit_base() -> nn.Module:
    tf = _transformers()
    config = tf.ViTConfig(attn_implementation="eager")  # ViT-B/16, 224x224
    return _perturb_constant_parameters(
        VisionWrapper(tf.ViTModel(config, add_pooling_layer=True))
    ).eval()


LLAMA_4L_CONFIG = dict(
    vocab_size=32000,
    hidden_size=512,
    intermediate_size=1376,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=2,  # grouped-query attention
    max_position_embeddings=2048,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)


def build_llama_4l() -> nn.Module:
    tf = _transformers()
    config = tf.LlamaConfig(attn_implementation="eager", use_cache=False, **LLAMA_4L_CONFIG)
    return _perturb_constant_parameters(DecoderWrapper(tf.LlamaModel(config))).eval()


def build_gpt2_kv() -> nn.Module:
    tf = _transformers()
    config = tf.GPT2Config(attn_implementation="eager")  # GPT-2 small
    return _perturb_constant_parameters(CacheStepWrapper(tf.GPT2Model(config))).eval()


def build_llama_4l_kv() -> nn.Module:
    tf = _transformers()
    config = tf.LlamaConfig(attn_implementation="eager", **LLAMA_4L_CONFIG)
    return _perturb_constant_parameters(CacheStepWrapper(tf.LlamaModel(config))).eval()


QWEN2_4L_CONFIG = dict(
    vocab_size=32000,
    hidden_size=512,
    intermediate_size=1376,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=2,  # grouped-query attention, as Qwen2's checkpoints have
    max_position_embeddings=2048,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)

# Phi-3 style: one fused qkv projection, full rotary, RMSNorm, SiLU-gated MLP (fused gate_up),
# as many KV heads as query heads (Phi-3-mini)
PHI3_4L_CONFIG = dict(
    vocab_size=32000,
    hidden_size=512,
    intermediate_size=1376,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=8,
    max_position_embeddings=2048,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    pad_token_id=0,
)

# Phi-2 style: partial rotary (the first half of each head), LayerNorm with bias, gelu_new,
# attention and MLP in parallel off one LayerNorm, q/k/v projections with bias
PHI2_4L_CONFIG = dict(
    vocab_size=32000,
    hidden_size=512,
    intermediate_size=2048,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=8,
    max_position_embeddings=2048,
    partial_rotary_factor=0.5,
    tie_word_embeddings=False,
)


def build_qwen2_4l_kv() -> nn.Module:
    tf = _transformers()
    config = tf.Qwen2Config(attn_implementation="eager", **QWEN2_4L_CONFIG)
    return _perturb_constant_parameters(CacheStepWrapper(tf.Qwen2Model(config))).eval()


def build_phi3_4l_kv() -> nn.Module:
    tf = _transformers()
    config = tf.Phi3Config(attn_implementation="eager", **PHI3_4L_CONFIG)
    return _perturb_constant_parameters(CacheStepWrapper(tf.Phi3Model(config))).eval()


def build_phi2_4l_kv() -> nn.Module:
    tf = _transformers()
    config = tf.PhiConfig(attn_implementation="eager", **PHI2_4L_CONFIG)
    return _perturb_constant_parameters(CacheStepWrapper(tf.PhiModel(config))).eval()


# --------------------------------------------------------------------------
# Random inputs.
# --------------------------------------------------------------------------


def _token_inputs(
    vocab: int, with_token_types: bool
) -> Callable[[int, int, torch.Generator], Inputs]:
    def make(batch: int, seq: int, gen: torch.Generator) -> Inputs:
        ids = torch.randint(0, vocab, (batch, seq), dtype=torch.int64, generator=gen)
        # Right padding on every row but the first: exercises the mask path.
        mask = torch.ones(batch, seq, dtype=torch.int64)
        for b in range(1, batch):
            pad = int(torch.randint(1, max(2, seq // 4), (1,), generator=gen))
            mask[b, seq - pad :] = 0
        inputs = {"input_ids": ids, "attention_mask": mask}
        if with_token_types:
            tt = torch.zeros(batch, seq, dtype=torch.int64)
            tt[:, seq // 2 :] = 1
            inputs["token_type_ids"] = tt
        return inputs

    return make


def _image_inputs(batch: int, seq: int, gen: torch.Generator) -> Inputs:
    del seq
    return {"pixel_values": torch.randn(batch, 3, 224, 224, generator=gen)}


# --------------------------------------------------------------------------
# Registry.
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    build: Callable[[], nn.Module]
    make_inputs: Callable[[int, int, torch.Generator], Inputs]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    # input name -> {axis: symbolic dim name}
    dynamic_axes: dict[str, dict[int, str]]
    export_shape: tuple[int, int] = (1, 128)  # (batch, sequence)
    check_shapes: tuple[tuple[int, int], ...] = ((1, 128), (2, 64))
    # Keep BatchNormalization nodes (no Conv+BN folding).
    keep_batchnorm: bool = False
    # Exported with --dynamo too (the KV-cache steps build a DynamicCache in forward, which
    # torch.export does not trace: TorchScript only).
    dynamo: bool = True


_TOKEN_AXES = {0: "batch", 1: "sequence"}
KV_PAST = 128  # cached tokens of a KV-cache step's inputs (its `new_tokens` are the sequence)


def _kv_names(layers: int, prefix: str) -> tuple[str, ...]:
    return tuple(f"{prefix}.{i}.{part}" for i in range(layers) for part in ("key", "value"))


def _kv_step_inputs(vocab: int, layers: int, kv_heads: int, head: int, past: int = KV_PAST):
    """input_ids [batch, seq] after `past` cached tokens: the mask covers both (left padding
    on every row but the first), the past keys and values are random."""

    def make(batch: int, seq: int, gen: torch.Generator) -> Inputs:
        mask = torch.ones(batch, past + seq, dtype=torch.int64)
        for b in range(1, batch):
            mask[b, : int(torch.randint(1, max(2, past // 4), (1,), generator=gen))] = 0
        inputs = {"input_ids": torch.randint(0, vocab, (batch, seq), dtype=torch.int64, generator=gen),
                  "attention_mask": mask}
        for name in _kv_names(layers, "past"):
            inputs[name] = torch.randn(batch, kv_heads, past, head, generator=gen)
        return inputs

    return make


def _kv_axes(layers: int) -> dict[str, dict[int, str]]:
    new = {0: "batch", 1: "new_tokens"}
    axes = {"input_ids": new, "attention_mask": {0: "batch", 1: "total_sequence"}, "last_hidden_state": new}
    axes.update({n: {0: "batch", 2: "past_sequence"} for n in _kv_names(layers, "past")})
    axes.update({n: {0: "batch", 2: "total_sequence"} for n in _kv_names(layers, "present")})
    return axes


def _kv_spec(name: str, build: Callable[[], nn.Module], vocab: int, layers: int, kv_heads: int,
             head: int = 64) -> ModelSpec:
    """The step with a KV cache of the corpus model `name` without its `-kv` (CacheStepWrapper)."""
    return ModelSpec(
        name=name,
        description=f"{name.removesuffix('-kv')}'s step with a KV cache: new tokens after {KV_PAST} cached, past "
        f"and present keys and values ({kv_heads} KV heads of {head}) of the {layers} layers as inputs and outputs",
        build=build,
        make_inputs=_kv_step_inputs(vocab, layers, kv_heads, head),
        input_names=("input_ids", "attention_mask", *_kv_names(layers, "past")),
        output_names=("last_hidden_state", *_kv_names(layers, "present")),
        dynamic_axes=_kv_axes(layers),
        export_shape=(1, 3),
        check_shapes=((1, 1), (2, 4)),
        dynamo=False,
    )


MODELS: list[ModelSpec] = [
    ModelSpec(
        name="bert-base",
        description="BertModel(BertConfig()): 12 layers, hidden 768, 12 heads, eager attention",
        build=build_bert_base,
        make_inputs=_token_inputs(30522, with_token_types=True),
        input_names=("input_ids", "attention_mask", "token_type_ids"),
        output_names=("last_hidden_state", "pooler_output"),
        dynamic_axes={
            "input_ids": _TOKEN_AXES,
            "attention_mask": _TOKEN_AXES,
            "token_type_ids": _TOKEN_AXES,
            "last_hidden_state": _TOKEN_AXES,
            "pooler_output": {0: "batch"},
        },
    ),
    ModelSpec(
        name="gpt2",
        description="GPT2Model(GPT2Config()): GPT-2 small, 12 layers, hidden 768, no KV cache",
        build=build_gpt2,
        make_inputs=_token_inputs(50257, with_token_types=False),
        input_names=("input_ids", "attention_mask"),
        output_names=("last_hidden_state",),
        dynamic_axes={
            "input_ids": _TOKEN_AXES,
            "attention_mask": _TOKEN_AXES,
            "last_hidden_state": _TOKEN_AXES,
        },
    ),
    ModelSpec(
        name="vit-base",
        description="ViTModel(ViTConfig()): ViT-B/16 at 224x224, 12 layers, hidden 768",
        build=build_vit_base,
        make_inputs=_image_inputs,
        input_names=("pixel_values",),
        output_names=("last_hidden_state", "pooler_output"),
        dynamic_axes={
            "pixel_values": {0: "batch"},
            "last_hidden_state": {0: "batch"},
            "pooler_output": {0: "batch"},
        },
        export_shape=(1, 0),
        check_shapes=((1, 0), (2, 0)),
    ),
    ModelSpec(
        name="llama-4l",
        description="LlamaModel: 4 layers, hidden 512, 8 heads / 2 KV heads (GQA), "
        "intermediate 1376, vocab 32000, RoPE, RMSNorm, SiLU MLP",
        build=build_llama_4l,
        make_inputs=_token_inputs(32000, with_token_types=False),
        input_names=("input_ids", "attention_mask"),
        output_names=("last_hidden_state",),
        dynamic_axes={
            "input_ids": _TOKEN_AXES,
            "attention_mask": _TOKEN_AXES,
            "last_hidden_state": _TOKEN_AXES,
        },
    ),
    _kv_spec("gpt2-kv", build_gpt2_kv, vocab=50257, layers=12, kv_heads=12),
    _kv_spec("llama-4l-kv", build_llama_4l_kv, vocab=32000, layers=4, kv_heads=2),
    _kv_spec("qwen2-4l-kv", build_qwen2_4l_kv, vocab=32000, layers=4, kv_heads=2),
    _kv_spec("phi3-4l-kv", build_phi3_4l_kv, vocab=32000, layers=4, kv_heads=8),
    _kv_spec("phi2-4l-kv", build_phi2_4l_kv, vocab=32000, layers=4, kv_heads=8),
    ModelSpec(
        name="resnet50",
        description="ResNet-50 v1.5 in plain torch, BatchNormalization kept as nodes",
        build=build_resnet50,
        make_inputs=_image_inputs,
        input_names=("pixel_values",),
        output_names=("logits",),
        dynamic_axes={"pixel_values": {0: "batch"}, "logits": {0: "batch"}},
        export_shape=(1, 0),
        check_shapes=((1, 0), (2, 0)),
        keep_batchnorm=True,
    ),
]

MODELS_BY_NAME: dict[str, ModelSpec] = {spec.name: spec for spec in MODELS}


def get_spec(name: str) -> ModelSpec:
    try:
        return MODELS_BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS_BY_NAME)}") from None


def output_path(name: str, out_dir: str | os.PathLike, dynamo: bool = False) -> Path:
    suffix = ".dynamo.onnx" if dynamo else ".onnx"
    return Path(out_dir) / f"{name}{suffix}"


# --------------------------------------------------------------------------
# Export.
# --------------------------------------------------------------------------


def _param_bytes(model: nn.Module) -> int:
    tensors = list(model.parameters()) + list(model.buffers())
    return sum(t.numel() * t.element_size() for t in tensors)


@contextlib.contextmanager
def _discard_fd_output():
    """Send what is written to file descriptors 1 and 2 to /dev/null.

    The TorchScript exporter's C++ logger dumps the whole TorchScript graph to
    stdout when an export fails (its "log enabled" check in torch 2.13 tests a
    function object, so it is always on); the dynamo exporter prints progress
    lines.  Python's own sys.stdout/sys.stderr are flushed around the switch.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


@contextlib.contextmanager
def _quiet_export():
    loggers = [
        logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript")
    ]
    levels = [lg.level for lg in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        try:
            with _discard_fd_output():
                yield
        finally:
            for lg, level in zip(loggers, levels, strict=True):
                lg.setLevel(level)


def _export_torchscript(
    spec: ModelSpec, model: nn.Module, args: tuple, path: Path, opset: int
) -> None:
    kwargs = {}
    if spec.keep_batchnorm:
        # In EVAL mode the TorchScript exporter runs an "eval peephole" pass
        # that folds BatchNormalization into the preceding Conv.  PRESERVE
        # with the model already in eval() skips that pass, while aten's
        # batch_norm(training=False) still exports as a single-output
        # (inference) BatchNormalization node.
        assert not model.training
        kwargs["training"] = torch.onnx.TrainingMode.PRESERVE
    # Graphs over 2 GiB are switched to external data by the exporter itself.
    torch.onnx.export(
        model,
        args,
        str(path),
        dynamo=False,
        opset_version=opset,
        input_names=list(spec.input_names),
        output_names=list(spec.output_names),
        dynamic_axes={k: dict(v) for k, v in spec.dynamic_axes.items()},
        do_constant_folding=True,
        **kwargs,
    )


@contextlib.contextmanager
def _without_batchnorm_fusion():
    """Keep the dynamo exporter's optimizer from folding BN into Conv/Gemm.

    ``torch.onnx.export(..., dynamo=True, optimize=True)`` runs the onnxscript
    optimizer, whose default rewrite rules include Conv+BatchNormalization
    fusion.  The rules are read from ``onnxscript.rewriter._DEFAULT_REWRITE_RULES``
    at call time, so filtering that tuple for the duration of the export keeps
    every other optimisation.  Yields False when the (private) attribute is
    not there, in which case the caller must export with optimize=False.
    """
    try:
        from onnxscript import rewriter
        from onnxscript.rewriter.rules.common import _fuse_batchnorm

        default_rules = rewriter._DEFAULT_REWRITE_RULES
        bn_rules = {id(r) for r in _fuse_batchnorm.rules}
    except (ImportError, AttributeError):
        yield False
        return
    rewriter._DEFAULT_REWRITE_RULES = tuple(r for r in default_rules if id(r) not in bn_rules)
    try:
        yield True
    finally:
        rewriter._DEFAULT_REWRITE_RULES = default_rules


def _export_dynamo(
    spec: ModelSpec, model: nn.Module, args: tuple, path: Path, opset: int, verbose: bool
) -> None:
    from torch.export import Dim

    dims: dict[str, Dim] = {}

    def dim(name: str) -> Dim:
        if name not in dims:
            dims[name] = Dim(name)
        return dims[name]

    dynamic_shapes = {
        name: {axis: dim(d) for axis, d in spec.dynamic_axes.get(name, {}).items()} or None
        for name in spec.input_names
    }
    with contextlib.ExitStack() as stack:
        optimize = True
        if spec.keep_batchnorm:
            optimize = stack.enter_context(_without_batchnorm_fusion())
        onnx_program = torch.onnx.export(
            model,
            args,
            dynamo=True,
            opset_version=opset,
            input_names=list(spec.input_names),
            output_names=list(spec.output_names),
            dynamic_shapes=dynamic_shapes,
            optimize=optimize,
            verbose=verbose,
        )
    external = _param_bytes(model) > EXTERNAL_DATA_THRESHOLD
    onnx_program.save(str(path), external_data=external)


def export_model(
    name: str,
    out_dir: str | os.PathLike = DEFAULT_OUT,
    dynamo: bool = False,
    *,
    opset: int | None = None,
    check: bool = False,
    verbose: bool = False,
) -> Path:
    """Build model ``name`` with random weights and export it to ONNX.

    Returns the path of the written file (``<out_dir>/<name>.onnx``, or
    ``<name>.dynamo.onnx`` with ``dynamo=True``).  With ``check=True`` the
    file is also validated against PyTorch (see :func:`check_model`).
    ``opset`` defaults to 17 (TorchScript) or 18 (dynamo).
    """
    result = _export(get_spec(name), Path(out_dir), dynamo, opset, check, verbose)
    return result["path"]


def _export(
    spec: ModelSpec, out_dir: Path, dynamo: bool, opset: int | None, check: bool, verbose: bool
) -> dict:
    if opset is None:
        opset = DEFAULT_DYNAMO_OPSET if dynamo else DEFAULT_OPSET
    out_dir.mkdir(parents=True, exist_ok=True)
    path = output_path(spec.name, out_dir, dynamo)
    torch.manual_seed(SEED)
    t0 = time.perf_counter()
    model = spec.build()
    build_s = time.perf_counter() - t0

    batch, seq = spec.export_shape
    if dynamo and batch == 1:
        # torch.export specialises sizes 0 and 1, so a dynamic batch must be
        # traced with an example batch of at least 2.
        batch = 2
    inputs = spec.make_inputs(batch, seq, torch.Generator().manual_seed(SEED))
    args = tuple(inputs[n] for n in spec.input_names)

    t0 = time.perf_counter()
    ctx = contextlib.nullcontext() if verbose else _quiet_export()
    try:
        with ctx, torch.no_grad():
            if dynamo:
                _export_dynamo(spec, model, args, path, opset, verbose)
            else:
                _export_torchscript(spec, model, args, path, opset)
    except BaseException:
        path.unlink(missing_ok=True)  # no stale or partial model left behind
        raise
    export_s = time.perf_counter() - t0

    result = {"path": path, "build_s": build_s, "export_s": export_s, "stats": model_stats(path)}
    if spec.keep_batchnorm and result["stats"]["ops"].get("BatchNormalization", 0) == 0:
        raise RuntimeError("BatchNormalization nodes were folded away")
    if check:
        t0 = time.perf_counter()
        result["check"] = check_model(spec, model, path)
        result["check_s"] = time.perf_counter() - t0
    return result


# --------------------------------------------------------------------------
# Statistics and checks.
# --------------------------------------------------------------------------


def _iter_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _iter_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _iter_nodes(g)


def model_stats(path: Path) -> dict:
    """Node count, op histogram (including subgraphs) and file size."""
    m = onnx.load(str(path), load_external_data=False)
    ops = collections.Counter(
        (n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}")
        for n in _iter_nodes(m.graph)
    )
    init_names = {t.name for t in m.graph.initializer}
    size = path.stat().st_size
    ext_files = {
        e.value for t in m.graph.initializer for e in t.external_data if e.key == "location"
    }
    for f in ext_files:
        size += (path.parent / f).stat().st_size
    return {
        "nodes": len(m.graph.node),
        "nodes_total": sum(ops.values()),
        "functions": len(m.functions),
        "ops": dict(ops.most_common()),
        "bytes": size,
        "initializers": len(m.graph.initializer),
        "opset": {o.domain or "ai.onnx": o.version for o in m.opset_import},
        "inputs": [(i.name, _shape_str(i)) for i in m.graph.input if i.name not in init_names],
        "outputs": [(o.name, _shape_str(o)) for o in m.graph.output],
    }


def _shape_str(value: onnx.ValueInfoProto) -> str:
    t = value.type.tensor_type
    dims = [d.dim_param if d.dim_param else str(d.dim_value) for d in t.shape.dim]
    return f"{onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name}[{','.join(dims)}]"


def check_model(spec: ModelSpec, model: nn.Module, path: Path) -> dict:
    """onnx.checker + one onnxruntime run per check shape, compared to torch."""
    import onnxruntime as ort

    onnx.checker.check_model(str(path))  # path form handles external data
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    ort_inputs = {i.name for i in sess.get_inputs()}
    results = []
    for k, (batch, seq) in enumerate(spec.check_shapes):
        inputs = spec.make_inputs(batch, seq, torch.Generator().manual_seed(SEED + 1 + k))
        with torch.no_grad():
            expected = model(*(inputs[n] for n in spec.input_names))
        if isinstance(expected, torch.Tensor):
            expected = (expected,)
        feeds = {n: t.numpy() for n, t in inputs.items() if n in ort_inputs}
        actual = sess.run(None, feeds)
        if len(actual) != len(expected):
            raise AssertionError(f"{len(actual)} ORT outputs vs {len(expected)} torch outputs")
        worst = 0.0
        scale = 1.0
        for name, a, e in zip(spec.output_names, actual, expected, strict=True):
            e = e.numpy()
            if a.shape != e.shape:
                raise AssertionError(
                    f"{name}: shape {a.shape} vs torch {e.shape} at batch={batch} seq={seq}"
                )
            worst = max(worst, float(np.max(np.abs(a - e))))
            scale = max(scale, float(np.max(np.abs(e))))
        ok = worst <= RTOL * scale
        results.append(
            {"shape": (batch, seq), "max_abs_diff": worst, "max_abs_ref": scale, "ok": ok}
        )
        if not ok:
            raise AssertionError(
                f"ORT vs torch max abs diff {worst:.3g} > {RTOL:g} * {scale:.3g} at batch={batch} seq={seq}"
            )
    return {"runs": results}


# --------------------------------------------------------------------------
# CLI.
# --------------------------------------------------------------------------


def _fmt_bytes(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _report(spec: ModelSpec, r: dict) -> None:
    s = r["stats"]
    print(f"  file:    {r['path']} ({_fmt_bytes(s['bytes'])})")
    check_s = f", check {r['check_s']:.1f}s" if "check_s" in r else ""
    print(f"  time:    build {r['build_s']:.1f}s, export {r['export_s']:.1f}s{check_s}")
    extra = (
        f" (+{s['nodes_total'] - s['nodes']} in subgraphs)"
        if s["nodes_total"] != s["nodes"]
        else ""
    )
    funcs = f", {s['functions']} functions" if s["functions"] else ""
    print(
        f"  nodes:   {s['nodes']}{extra}{funcs}, {s['initializers']} initializers, opset {s['opset']}"
    )
    print(f"  inputs:  {', '.join(f'{n}:{t}' for n, t in s['inputs'])}")
    print(f"  outputs: {', '.join(f'{n}:{t}' for n, t in s['outputs'])}")
    top = list(s["ops"].items())[:10]
    print(f"  top ops: {', '.join(f'{op} {c}' for op, c in top)}")
    if "check" in r:
        for run in r["check"]["runs"]:
            b, q = run["shape"]
            shape = f"batch={b}" + (f" seq={q}" if q else "")
            print(
                f"  check:   {shape}: max abs diff {run['max_abs_diff']:.2e} "
                f"(max |ref| {run['max_abs_ref']:.2f}) {'OK' if run['ok'] else 'FAIL'}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})"
    )
    parser.add_argument(
        "--models",
        default=",".join(MODELS_BY_NAME),
        help=f"comma-separated subset of: {', '.join(MODELS_BY_NAME)}",
    )
    parser.add_argument("--dynamo", action="store_true", help="use the torch.export-based exporter")
    parser.add_argument(
        "--check",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="validate with onnx + onnxruntime",
    )
    parser.add_argument(
        "--opset",
        type=int,
        default=None,
        help=f"ONNX opset (default {DEFAULT_OPSET}, or {DEFAULT_DYNAMO_OPSET} with --dynamo)",
    )
    parser.add_argument("--strict", action="store_true", help="exit non-zero if any model fails")
    parser.add_argument("--verbose", action="store_true", help="show exporter warnings")
    args = parser.parse_args(argv)

    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS_BY_NAME]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS_BY_NAME)}")
    if args.dynamo:
        skipped = [n for n in names if not MODELS_BY_NAME[n].dynamo]
        if skipped:
            print(f"TorchScript only, not exported with --dynamo: {', '.join(skipped)}")
        names = [n for n in names if MODELS_BY_NAME[n].dynamo]

    exporter = "dynamo" if args.dynamo else "torchscript"
    opset = args.opset or (DEFAULT_DYNAMO_OPSET if args.dynamo else DEFAULT_OPSET)
    print(f"torch {torch.__version__}, onnx {onnx.__version__}, exporter {exporter}, opset {opset}")
    failed = []
    for name in names:
        spec = MODELS_BY_NAME[name]
        print(f"{name}: {spec.description}")
        try:
            r = _export(spec, args.out, args.dynamo, opset, args.check, args.verbose)
        except Exception as e:  # noqa: BLE001 - report and go on with the next model
            msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
            print(f"  FAILED: {type(e).__name__}: {msg[:300]}")
            failed.append(name)
            continue
        _report(spec, r)
        sys.stdout.flush()
    ok = len(names) - len(failed)
    print(f"done: {ok}/{len(names)} ok" + (f", failed: {', '.join(failed)}" if failed else ""))
    if failed and (args.strict or ok == 0):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
