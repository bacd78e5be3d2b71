#!/usr/bin/env python
"""Robustness sweep: eqsat on small Hugging Face architectures the corpus does not cover.

    python benchmarks/architectures.py [--only NAME,...] [--out DIR] [--results FILE] [--timeout S]
                                       [--dynamo] [--fp16] [--static] [--keep-bn] [--dynamic-hw]

Each architecture of ARCHS is built from a tiny configuration written in this file, with
random weights after ``torch.manual_seed(0)`` (nothing is downloaded: benchmarks/corpus.py
sets ``HF_HUB_OFFLINE=1``), parameters initialised to a constant get corpus.py's small noise,
and it is exported with the TorchScript exporter (opset 17; symbolic ``batch``, and
``sequence`` for token models) to ``DIR/<name>.onnx``.  Then, each in a child process
(``sys.executable -m eqsat`` from this checkout) with a timeout:

    python -m eqsat optimize M.onnx -o M.opt.onnx --report M.json -q
    python -m eqsat optimize M.onnx -o M.nchw.opt.onnx --target onnx --layout nchw -q

The first run's report gives the verification status, the node counts and the phase times;
of the second only the exit code is kept. The first run's model is then compared with the
original under onnxruntime at two other sizes (`cross_check`), which eqsat's verification
did not choose.  Writes FILE (default
benchmarks/results/architectures.md) and the records as DIR/results.json.

Variants (for every selected architecture; the file names get the variant as a suffix):
``--dynamo`` the torch.export exporter (opset 18), ``--fp16`` model and float inputs in half
precision, ``--static`` no symbolic dims, ``--keep-bn`` BatchNormalization kept as nodes
(TorchScript exporter, ``TrainingMode.PRESERVE``), ``--dynamic-hw`` image height and width
symbolic too (image models only).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
import time
import traceback
from pathlib import Path

import onnx
import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.corpus import (  # noqa: E402  (sets HF_HUB_OFFLINE before transformers is imported)
    CacheStepWrapper,
    _kv_axes,
    _kv_step_inputs,
    _perturb_constant_parameters,
    _quiet_export,
    _token_inputs,
    _transformers,
)

DEFAULT_OUT = ROOT / "benchmarks/out/architectures"
DEFAULT_RESULTS = ROOT / "benchmarks/results/architectures.md"
OPSET = 17
DYNAMO_OPSET = 18
VOCAB = 1000
TOK_AXES = {0: "batch", 1: "sequence"}


class Wrapper(nn.Module):
    """Positional inputs -> model(**inputs) -> the tuple of the named outputs that are present."""

    def __init__(self, model: nn.Module, input_names, keys=("last_hidden_state", "pooler_output")):
        super().__init__()
        self.model = model
        self.input_names = list(input_names)
        self.keys = list(keys)

    def forward(self, *args):
        out = self.model(**dict(zip(self.input_names, args, strict=True)), return_dict=True)
        return tuple(v for k in self.keys if isinstance(v := getattr(out, k, None), torch.Tensor))


# ---------------------------------------------------------------------------------------------
# Architectures: name -> builder() -> (module, inputs, input dynamic axes, kind).  Output
# dynamic axes are derived in export(): axis 0 is the batch of every output, axis 1 the
# sequence of the 3-D outputs of token models.
# ---------------------------------------------------------------------------------------------

TXT = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
           intermediate_size=128, max_position_embeddings=128)


def text_inputs(batch: int = 2, seq: int = 16) -> dict[str, torch.Tensor]:
    return _token_inputs(VOCAB, with_token_types=False)(batch, seq, torch.Generator().manual_seed(0))


def image_inputs(size: int, channels: int = 3) -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.randn(1, channels, size, size, generator=torch.Generator().manual_seed(0))}


def enc(cls_name: str, cfg_name: str, extra=None, eager: bool = True):
    """An encoder with input_ids and attention_mask."""
    def build():
        tf = _transformers()
        kw = dict(TXT, **(extra or {}))
        if eager:
            kw["attn_implementation"] = "eager"
        m = getattr(tf, cls_name)(getattr(tf, cfg_name)(**kw))
        ins = text_inputs()
        return Wrapper(m, ins), ins, {k: TOK_AXES for k in ins}, "text"
    return build


class Decoder(nn.Module):
    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return (self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                           return_dict=True).last_hidden_state,)


def dec(cls_name: str, cfg_name: str, extra=None):
    """A decoder-only model without KV cache."""
    def build():
        tf = _transformers()
        cfg = getattr(tf, cfg_name)(attn_implementation="eager", use_cache=False, **dict(TXT, **(extra or {})))
        ins = text_inputs()
        return Decoder(getattr(tf, cls_name)(cfg)), ins, {k: TOK_AXES for k in ins}, "text"
    return build


def kv(cls_name: str, cfg_name: str, cfg_kw: dict, past: int = 5, seq: int = 3):
    """A decoder-only model's step with a KV cache, as corpus.py's -kv models (its wrapper,
    inputs and dimension names), `past` cached tokens and `seq` new ones at export."""
    def build():
        tf = _transformers()
        cfg = getattr(tf, cfg_name)(attn_implementation="eager", **cfg_kw)
        heads = cfg.num_attention_heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
        head = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        layers = cfg.num_hidden_layers
        ins = _kv_step_inputs(VOCAB, layers, kv_heads, head, past)(2, seq, torch.Generator().manual_seed(0))
        dyn = {k: v for k, v in _kv_axes(layers).items() if k in ins}
        return CacheStepWrapper(getattr(tf, cls_name)(cfg)), ins, dyn, "kv"
    return build


def vis(cls_name: str, cfg_name: str, cfg_kw: dict, size: int = 32,
        keys=("last_hidden_state", "pooler_output"), eager: bool = True):
    """An image model on pixel_values [batch, 3, size, size]."""
    def build():
        tf = _transformers()
        kw = dict(cfg_kw)
        if eager:
            kw["attn_implementation"] = "eager"
        m = getattr(tf, cls_name)(getattr(tf, cfg_name)(**kw))
        ins = image_inputs(size)
        return Wrapper(m, ins, keys), ins, {"pixel_values": {0: "batch"}}, "image"
    return build


def build_t5():
    tf = _transformers()
    cfg = tf.T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                      relative_attention_num_buckets=32, attn_implementation="eager", use_cache=False)
    ins = text_inputs()
    return Wrapper(tf.T5EncoderModel(cfg), ins, ("last_hidden_state",)), ins, {k: TOK_AXES for k in ins}, "text"


def build_bart():
    tf = _transformers()
    cfg = tf.BartConfig(vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2,
                        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                        decoder_ffn_dim=128, max_position_embeddings=128, attn_implementation="eager",
                        use_cache=False)
    ins = text_inputs()
    m = tf.BartModel(cfg).get_encoder()
    return Wrapper(m, ins, ("last_hidden_state",)), ins, {k: TOK_AXES for k in ins}, "text"


def build_whisper():
    tf = _transformers()
    cfg = tf.WhisperConfig(vocab_size=VOCAB, num_mel_bins=16, d_model=64, encoder_layers=2,
                           decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                           encoder_ffn_dim=128, decoder_ffn_dim=128, max_source_positions=32,
                           max_target_positions=32, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                           decoder_start_token_id=1, attn_implementation="eager", use_cache=False)
    m = tf.WhisperModel(cfg).get_encoder()
    ins = {"input_features": torch.randn(1, 16, 64, generator=torch.Generator().manual_seed(0))}
    # Whisper's encoder insists on exactly 2 * max_source_positions frames: batch only.
    return Wrapper(m, ins, ("last_hidden_state",)), ins, {"input_features": {0: "batch"}}, "audio"


def build_detr():
    tf = _transformers()
    backbone = tf.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                               layer_type="basic", out_features=["stage4"])
    cfg = tf.DetrConfig(use_timm_backbone=False, backbone_config=backbone, use_pretrained_backbone=False,
                        d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                        num_queries=10, attn_implementation="eager")
    ins = image_inputs(64)
    return Wrapper(tf.DetrModel(cfg), ins, ("last_hidden_state",)), ins, {"pixel_values": {0: "batch"}}, "image"


def build_funnel():
    tf = _transformers()
    cfg = tf.FunnelConfig(vocab_size=VOCAB, d_model=64, n_head=4, d_head=16, d_inner=128, block_sizes=[1, 1],
                          num_decoder_layers=1, max_position_embeddings=128)
    ins = text_inputs()
    return Wrapper(tf.FunnelModel(cfg), ins, ("last_hidden_state",)), ins, {k: TOK_AXES for k in ins}, "text"


def audio(cls_name: str, cfg_name: str, extra: dict):
    """A wav2vec2-style speech encoder on raw samples [batch, samples]."""
    def build():
        tf = _transformers()
        cfg = getattr(tf, cfg_name)(vocab_size=32, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=128, conv_dim=(32, 32, 32), conv_kernel=(10, 3, 3),
                                    conv_stride=(5, 2, 2), num_conv_pos_embeddings=16,
                                    num_conv_pos_embedding_groups=4, mask_time_prob=0.0, **extra)
        ins = {"input_values": torch.randn(1, 800, generator=torch.Generator().manual_seed(0))}
        return (Wrapper(getattr(tf, cls_name)(cfg), ins, ("last_hidden_state",)), ins,
                {"input_values": {0: "batch", 1: "samples"}}, "audio")
    return build


ARCHS = {
    "distilbert": enc("DistilBertModel", "DistilBertConfig", dict(dim=64, n_layers=2, n_heads=4, hidden_dim=128)),
    "roberta": enc("RobertaModel", "RobertaConfig", dict(max_position_embeddings=130)),
    "albert": enc("AlbertModel", "AlbertConfig", dict(embedding_size=32)),
    "electra": enc("ElectraModel", "ElectraConfig", dict(embedding_size=32)),
    "debertav2": enc("DebertaV2Model", "DebertaV2Config",
                     dict(relative_attention=True, position_buckets=32, max_relative_positions=64,
                          pos_att_type=["p2c", "c2p"]), eager=False),
    "mobilebert": enc("MobileBertModel", "MobileBertConfig",
                      dict(embedding_size=32, intra_bottleneck_size=32, true_hidden_size=32,
                           num_feedforward_networks=2)),
    "t5encoder": build_t5,
    "bart-encoder": build_bart,
    "whisper-encoder": build_whisper,
    "gptneox": dec("GPTNeoXModel", "GPTNeoXConfig", dict(rotary_pct=0.25)),
    "falcon": dec("FalconModel", "FalconConfig",
                  dict(num_kv_heads=1, new_decoder_architecture=False, multi_query=True, alibi=False)),
    "mistral": dec("MistralModel", "MistralConfig", dict(num_key_value_heads=2, sliding_window=None)),
    "qwen2": dec("Qwen2Model", "Qwen2Config", dict(num_key_value_heads=2)),
    "phi": dec("PhiModel", "PhiConfig", dict(partial_rotary_factor=0.5)),
    "gemma": dec("GemmaModel", "GemmaConfig", dict(num_key_value_heads=1, head_dim=16)),
    "opt": dec("OPTModel", "OPTConfig", dict(ffn_dim=128, word_embed_proj_dim=64)),
    "bloom": dec("BloomModel", "BloomConfig", dict(n_layer=2, n_head=4)),
    "convnext": vis("ConvNextModel", "ConvNextConfig",
                    dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1]), eager=False),
    "convnextv2": vis("ConvNextV2Model", "ConvNextV2Config",
                      dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1]), eager=False),
    "mobilenetv2": vis("MobileNetV2Model", "MobileNetV2Config", dict(depth_multiplier=0.35, image_size=32),
                       eager=False),
    "efficientnet": vis("EfficientNetModel", "EfficientNetConfig",
                        dict(width_coefficient=0.25, depth_coefficient=0.3, image_size=32, hidden_dim=320),
                        eager=False),
    "resnet": vis("ResNetModel", "ResNetConfig",
                  dict(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                       layer_type="bottleneck"), eager=False),
    "regnet": vis("RegNetModel", "RegNetConfig",
                  dict(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1], groups_width=8),
                  eager=False),
    "swin": vis("SwinModel", "SwinConfig",
                dict(image_size=32, patch_size=2, embed_dim=32, depths=[1, 1], num_heads=[2, 4], window_size=4)),
    "segformer": vis("SegformerModel", "SegformerConfig",
                     dict(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                          patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2]),
                     keys=("last_hidden_state",)),
    "mobilevit": vis("MobileViTModel", "MobileViTConfig",
                     dict(image_size=64, hidden_sizes=[32, 48, 64], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
                          num_attention_heads=2, patch_size=2), size=64, eager=False),
    "wav2vec2": audio("Wav2Vec2Model", "Wav2Vec2Config", dict(feat_extract_norm="group", attn_implementation="eager")),
    "clip-vision": vis("CLIPVisionModel", "CLIPVisionConfig",
                       dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                            image_size=32, patch_size=8, projection_dim=32)),
    "dinov2": vis("Dinov2Model", "Dinov2Config",
                  dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2, image_size=32,
                       patch_size=8)),
    "beit": vis("BeitModel", "BeitConfig",
                dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                     image_size=32, patch_size=8, use_relative_position_bias=True, use_mean_pooling=True)),
    "detr": build_detr,
    # first run 2026-12-06 (never used before then): the sweep of that day
    "roformer": enc("RoFormerModel", "RoFormerConfig", dict(embedding_size=64)),
    "funnel": build_funnel,
    "convbert": enc("ConvBertModel", "ConvBertConfig", dict(embedding_size=64, head_ratio=2, conv_kernel_size=5),
                    eager=False),
    "squeezebert": enc("SqueezeBertModel", "SqueezeBertConfig",
                       dict(embedding_size=64, q_groups=2, k_groups=2, v_groups=2, post_attention_groups=2,
                            intermediate_groups=2, output_groups=2), eager=False),
    "mpnet": enc("MPNetModel", "MPNetConfig", dict(relative_attention_num_buckets=32), eager=False),
    "gptj": dec("GPTJModel", "GPTJConfig", dict(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=128)),
    "gptneo": dec("GPTNeoModel", "GPTNeoConfig", dict(attention_types=[[["global", "local"], 1]], num_layers=2,
                                                      window_size=8)),
    "codegen": dec("CodeGenModel", "CodeGenConfig", dict(n_embd=64, n_layer=2, n_head=4, rotary_dim=8,
                                                         n_positions=128, n_ctx=128)),
    "stablelm": dec("StableLmModel", "StableLmConfig", dict(num_key_value_heads=2, partial_rotary_factor=0.25)),
    "olmo": dec("OlmoModel", "OlmoConfig", dict(num_key_value_heads=2)),
    "gemma2": dec("Gemma2Model", "Gemma2Config", dict(num_key_value_heads=2, head_dim=16, sliding_window=8,
                                                      attn_logit_softcapping=50.0, final_logit_softcapping=30.0)),
    "phi3": dec("Phi3Model", "Phi3Config", dict(num_key_value_heads=2, pad_token_id=0)),
    "qwen3": dec("Qwen3Model", "Qwen3Config", dict(num_key_value_heads=2, head_dim=16)),
    "starcoder2": dec("Starcoder2Model", "Starcoder2Config", dict(num_key_value_heads=2, sliding_window=None)),
    "levit": vis("LevitModel", "LevitConfig",
                 dict(image_size=64, hidden_sizes=[32, 48, 64], num_attention_heads=[1, 2, 2], depths=[1, 1, 1],
                      key_dim=[8, 8, 8], patch_size=16,
                      down_ops=[["Subsample", 8, 1, 4, 2, 2], ["Subsample", 8, 2, 4, 2, 2]]), size=64, eager=False),
    "poolformer": vis("PoolFormerModel", "PoolFormerConfig", dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1]),
                      eager=False),
    "pvtv2": vis("PvtV2Model", "PvtV2Config", dict(image_size=32, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                                                   num_attention_heads=[1, 2, 2, 4]),
                 keys=("last_hidden_state",), eager=False),
    "focalnet": vis("FocalNetModel", "FocalNetConfig", dict(embed_dim=16, depths=[1, 1], focal_levels=[2, 2],
                                                            focal_windows=[3, 3]), eager=False),
    "hubert": audio("HubertModel", "HubertConfig", dict(feat_extract_norm="group")),
    "wavlm": audio("WavLMModel", "WavLMConfig",
                   dict(feat_extract_norm="group", num_buckets=32, max_bucket_distance=64)),
    "llama-kv": kv("LlamaModel", "LlamaConfig", dict(TXT, num_key_value_heads=2)),
    "gpt2-kv": kv("GPT2Model", "GPT2Config", dict(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4,
                                                  n_positions=128)),
    "phi-kv": kv("PhiModel", "PhiConfig", dict(TXT, partial_rotary_factor=0.5)),
}


# ---------------------------------------------------------------------------------------------
# Export and eqsat runs.
# ---------------------------------------------------------------------------------------------

def variant_suffix(a: argparse.Namespace) -> str:
    flags = [("dynamo", a.dynamo), ("fp16", a.fp16), ("static", a.static), ("bn", a.keep_bn),
             ("hw", a.dynamic_hw)]
    return "".join(f".{n}" for n, on in flags if on)


def export(name: str, path: Path, a: argparse.Namespace) -> int:
    """Export architecture `name` to `path` and return its node count."""
    torch.manual_seed(0)
    model, ins, dyn, kind = ARCHS[name]()
    model = _perturb_constant_parameters(model).eval()
    if a.fp16:
        model = model.half()
        ins = {k: (v.half() if v.is_floating_point() else v) for k, v in ins.items()}
    hw = a.dynamic_hw and kind == "image"
    if hw:
        dyn = {"pixel_values": {0: "batch", 2: "height", 3: "width"}}
    if a.static:
        dyn = {}
    input_names = list(ins)
    args = tuple(ins[n] for n in input_names)
    with torch.no_grad():
        outs = model(*args)
    output_names = [f"out{i}" for i in range(len(outs))]
    dyn_axes = {k: dict(v) for k, v in dyn.items()}
    if not a.static:
        for i, (oname, o) in enumerate(zip(output_names, outs, strict=True)):
            axes = {0: "batch"}
            if kind == "text" and o.dim() == 3:
                axes[1] = "sequence"
            if kind == "kv":  # corpus.py's names: the hidden state's new tokens, a present key's or value's total
                axes.update({1: "new_tokens"} if o.dim() == 3 else {2: "total_sequence"})
            if hw:  # every dim but the channels of a 4-D output and the hidden size of a 3-D one
                axes.update({j: f"o{i}_{j}" for j in range(1, o.dim())
                             if not (o.dim() == 4 and j == 1) and not (o.dim() == 3 and j == 2)})
            dyn_axes[oname] = axes
    if a.dynamo:
        from torch.export import Dim

        # torch.export specialises a size-1 dimension: trace with batch 2.
        args = tuple(torch.cat([x, x]) if x.shape[0] == 1 else x for x in args)
        dims: dict[str, Dim] = {}
        shapes = tuple({ax: dims.setdefault(nm, Dim(nm)) for ax, nm in dyn.get(n, {}).items()}
                       for n in input_names)
        if isinstance(model, Wrapper):
            shapes = (shapes,)  # forward(*args)
        with _quiet_export(), torch.no_grad():
            prog = torch.onnx.export(model, args, dynamo=True, opset_version=DYNAMO_OPSET,
                                     input_names=input_names, output_names=output_names, dynamic_shapes=shapes)
        prog.save(str(path))
    else:
        kw = {"training": torch.onnx.TrainingMode.PRESERVE} if a.keep_bn else {}
        with _quiet_export(), torch.no_grad():
            torch.onnx.export(model, args, str(path), dynamo=False, opset_version=OPSET,
                              input_names=input_names, output_names=output_names, dynamic_axes=dyn_axes,
                              do_constant_folding=True, **kw)
    onnx.checker.check_model(str(path))
    return len(onnx.load(str(path), load_external_data=False).graph.node)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:500] if lines else ""


def run_eqsat(args: list[str], timeout: float) -> dict:
    """`python -m eqsat optimize ARGS` in a child process, from this checkout."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "eqsat", "optimize", *args], capture_output=True, text=True,
                           timeout=timeout, env=env, cwd=ROOT)
        rc, err = p.returncode, p.stderr
    except subprocess.TimeoutExpired:
        rc, err = "timeout", f"timed out after {timeout:g} s"
    return {"rc": rc, "wall_s": round(time.perf_counter() - t0, 2), "error": _last_line(err) if rc != 0 else "",
            "warnings": [ln for ln in err.splitlines() if ln.startswith("eqsat: warning:")]}


CROSS_TOLERANCE = 1e-3  # cross_check's max_rel above this is a difference (float16 outputs: 1e-2)
CROSS_SIZES = ({"batch": 3, "sequence": 11, "samples": 1000, "new_tokens": 2, "past_sequence": 7},
               {"batch": 1, "sequence": 5, "samples": 640, "new_tokens": 1, "past_sequence": 4})


def _cross_feeds(model: onnx.ModelProto, sizes: dict[str, int], rng, masked: bool) -> dict:
    import numpy as np

    sizes = {**sizes, "total_sequence": sizes["past_sequence"] + sizes["new_tokens"]}
    feeds = {}
    for vi in model.graph.input:
        t = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else sizes.get(d.dim_param, 4) for d in t.shape.dim]
        dt = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        if vi.name == "input_ids":
            feeds[vi.name] = rng.integers(0, VOCAB, shape).astype(dt)
        elif vi.name == "attention_mask":
            feeds[vi.name] = np.ones(shape, dt)
            if masked:
                feeds[vi.name][..., -2:] = 0
        elif dt.kind in "iu":
            feeds[vi.name] = rng.integers(0, 4, shape).astype(dt)
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(dt)
    return feeds


def cross_check(original: Path, optimized: Path) -> dict:
    """The optimized model against the original under onnxruntime (optimizations off, one
    thread) at the sizes of CROSS_SIZES, not the export's (the last two tokens masked at the
    first): eqsat's verification does not judge itself here. {"max_rel": the largest
    |difference| / max(1, max |original|) over outputs and sizes, "sizes": how many the
    original ran on, "tolerance": CROSS_TOLERANCE, 1e-2 for float16 outputs} or {"error": why
    not}; a size the original refuses is skipped."""
    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    try:
        ref, opt = (ort.InferenceSession(str(p), so, providers=["CPUExecutionProvider"]) for p in (original, optimized))
    except Exception as e:  # noqa: BLE001  (a row, not the end of the sweep)
        return {"error": f"load: {_last_line(str(e))}"}
    model, rng = onnx.load(str(original), load_external_data=False), np.random.default_rng(0)
    worst, ran, tolerance = 0.0, 0, CROSS_TOLERANCE
    for i, sizes in enumerate(CROSS_SIZES):
        feeds = _cross_feeds(model, sizes, rng, masked=i == 0)
        try:
            expected = ref.run(None, feeds)
        except Exception:  # noqa: BLE001  (sizes the original does not take)
            continue
        ran += 1
        try:
            got = opt.run(None, feeds)
        except Exception as e:  # noqa: BLE001
            return {"error": f"the optimized model fails where the original runs: {_last_line(str(e))}"}
        for e, g in zip(expected, got, strict=True):
            if e.shape != g.shape:
                return {"error": f"shape {list(g.shape)} where the original gives {list(e.shape)}"}
            if e.size and not np.array_equal(np.isnan(e), np.isnan(g)):
                return {"error": "NaN where the original has a number, or the reverse"}
            if e.dtype == np.float16:
                tolerance = 1e-2
            if e.size:
                diff = np.nanmax(np.abs(e.astype(np.float64) - g)) / max(1.0, float(np.nanmax(np.abs(e))))
                worst = max(worst, float(diff))
    if not ran:
        return {"error": "the original runs at none of the sizes"}
    return {"max_rel": worst, "sizes": ran, "tolerance": tolerance}


def sweep_one(name: str, out: Path, a: argparse.Namespace) -> dict:
    stem = name + variant_suffix(a)
    rec: dict = {"name": stem}
    m = out / f"{stem}.onnx"
    try:
        t0 = time.perf_counter()
        rec["nodes_exported"] = export(name, m, a)
        rec["export_s"] = round(time.perf_counter() - t0, 2)
    except Exception as e:  # noqa: BLE001  (an export failure is a row)
        msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        rec["export_error"] = f"{type(e).__name__}: {msg}"
        rec["export_traceback"] = traceback.format_exc()[-3000:]
        return rec
    report = out / f"{stem}.json"
    report.unlink(missing_ok=True)
    d = run_eqsat([str(m), "-o", str(out / f"{stem}.opt.onnx"), "--report", str(report), "-q"], a.timeout)
    if report.exists():
        r = json.loads(report.read_text())
        d.update(verification=r["verification"], nodes_before=r["nodes_before"], nodes_after=r["nodes_after"],
                 times_s=r["times_s"])
    elif "verification failed" in d["error"]:
        d["verification"] = {"status": "failed", "detail": d["error"]}
    rec["default"] = d
    if d["rc"] == 0:
        rec["cross"] = cross_check(m, out / f"{stem}.opt.onnx")
    rec["onnx_nchw"] = run_eqsat([str(m), "-o", str(out / f"{stem}.nchw.opt.onnx"), "--target", "onnx",
                                  "--layout", "nchw", "-q"], a.timeout)
    return rec


# ---------------------------------------------------------------------------------------------
# Results page.
# ---------------------------------------------------------------------------------------------

def _machine() -> str:
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{platform.machine()}, {cpu}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}"


def _versions() -> str:
    out = [f"Python {platform.python_version()}"]
    for n in ("torch", "transformers", "onnx", "onnxruntime", "onnxscript", "eqsat"):
        try:
            out.append(f"{n} {importlib.metadata.version(n)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{n} (not installed)")
    return ", ".join(out)


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def _eqsat_source() -> str:
    """The checkout's commit, and whether eqsat/, extract/ or rules/ had uncommitted changes."""
    commit = _git("log", "-1", "--format=%h") or "?"
    dirty = _git("status", "--porcelain", "--", "eqsat", "extract", "rules")
    return commit + (" + uncommitted changes in eqsat/, extract/ or rules/" if dirty else "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def write_results(recs: list[dict], path: Path, command: str, timeout: float, source: str) -> str:
    rows, notes = [], []
    n_exp = n_pass = n_fail = n_np = n_nchw_ok = n_cross = n_cross_bad = 0
    for r in recs:
        name = r["name"]
        if "export_error" in r:
            rows.append(f"| {name} | error | - | - | - | - | - | - | - | - |")
            notes.append(f"- {name}: export: `{_cell(r['export_error'])}`")
            continue
        n_exp += 1
        d, n = r["default"], r["onnx_nchw"]
        v = d.get("verification", {})
        status = v.get("status", "-")
        if d["rc"] == 0 and status == "passed":
            n_pass += 1
        elif d["rc"] == 0 and status == "not possible":
            n_np += 1
        else:  # a non-zero exit, a timeout, or exit 0 with no report or an unknown status
            n_fail += 1
        n_nchw_ok += n["rc"] == 0
        nodes = f"{d['nodes_before']} -> {d['nodes_after']}" if "nodes_after" in d else "-"
        phases = f"{sum(d['times_s'].values()):.2f}" if "times_s" in d else "-"
        cross = r.get("cross")
        if cross is None:
            shown = "-"
        elif "error" in cross:
            shown = "**differs**" if "original runs at none" not in cross["error"] else "not run"
            n_cross_bad += shown != "not run"
            notes.append(f"- {name}: cross-check: {cross['error']}")
        else:
            n_cross += 1
            bad = cross["max_rel"] > cross.get("tolerance", CROSS_TOLERANCE)
            n_cross_bad += bad
            shown = f"{'**' if bad else ''}{cross['max_rel']:.1e}{'**' if bad else ''}"
        rows.append(f"| {name} | ok | {r['nodes_exported']} | {d['rc']} | {status} | {nodes} | {phases} "
                    f"| {d['wall_s']:.1f} | {shown} | {n['rc']} |")
        if d["rc"] != 0:
            notes.append(f"- {name}: default run: `{_cell(d['error'])}`")
        elif status == "-":
            notes.append(f"- {name}: default run: exit 0 but no report with a verification status")
        elif status not in ("passed", "-"):
            notes.append(f"- {name}: verification {status}: `{_cell(v.get('detail', ''))}`")
        if n["rc"] != 0:
            notes.append(f"- {name}: `--target onnx --layout nchw`: `{_cell(n['error'])}`")
    summary = (f"{len(recs)} architectures: {n_exp} exported; default run: {n_pass} passed verification, "
               f"{n_fail} failed (non-zero exit, timeout or no report), {n_np} verification not possible; "
               f"`--target onnx --layout nchw`: {n_nchw_ok} of {n_exp} exit 0; cross-check: {n_cross} compared, "
               f"{n_cross_bad} beyond {CROSS_TOLERANCE:g} (float16: 1e-2) or failing where the original runs.")
    lines = [
        "# eqsat on more architectures",
        "",
        f"Command: `{command}`. Written by `benchmarks/architectures.py`.",
        "",
        f"Machine: {_machine()}; shared with other work while measuring, so times are noisy.",
        "",
        f"Packages: {_versions()}; eqsat from the checkout at {source}.",
        "",
        "Each architecture is built from a tiny configuration written in the script (random weights, "
        "nothing downloaded), exported with the "
        + ("torch.export exporter (opset 18)" if "--dynamo" in command else "TorchScript exporter (opset 17)")
        + " and optimized twice in a child process (timeout " + f"{timeout:g} s): `eqsat optimize M.onnx "
        "--report M.json` (default target, with its verification) and `eqsat optimize M.onnx --target onnx "
        "--layout nchw`. **exported nodes**: nodes of the exported graph; **rc**: exit code; "
        "**verification**: the report's status (`failed`: eqsat's error, no report written); "
        "**nodes**: the report's nodes_before -> nodes_after; **phases s**: the sum of the report's "
        "times_s; **wall s**: the child process, start to exit (loading, optimizing, verifying, saving); "
        "**cross-check**: the written model against the original under onnxruntime at two other sizes "
        "(`cross_check`: batch 3, sequence 11 with two tokens masked; batch 1, sequence 5; KV models 2 and 1 "
        "new tokens after 7 and 4), the largest |difference| / max(1, max |original|), not eqsat's own "
        "verification.",
        "",
        "| architecture | export | exported nodes | rc | verification | nodes | phases s | wall s "
        "| cross-check | onnx/nchw rc |",
        "|---|---|---:|---:|---|---|---:|---:|---:|---:|",
        *rows,
        "",
        summary,
    ]
    if notes:
        lines += ["", "Errors and verification details:", "", *notes]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated architectures (default: all of ARCHS)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder of the exported models and reports")
    ap.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="the markdown page to write")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per eqsat run")
    ap.add_argument("--dynamo", action="store_true", help="torch.export exporter, opset 18")
    ap.add_argument("--fp16", action="store_true", help="model and float inputs in half precision")
    ap.add_argument("--static", action="store_true", help="no symbolic dimensions")
    ap.add_argument("--keep-bn", action="store_true", help="BatchNormalization kept as nodes (TorchScript exporter)")
    ap.add_argument("--dynamic-hw", action="store_true", help="image height and width symbolic (image models)")
    a = ap.parse_args(argv)
    if a.keep_bn and a.dynamo:
        ap.error("--keep-bn applies to the TorchScript exporter only")
    names = [n for n in a.only.split(",") if n] or list(ARCHS)
    if unknown := [n for n in names if n not in ARCHS]:
        ap.error(f"unknown architecture(s) {', '.join(unknown)}; known: {', '.join(ARCHS)}")
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    args = sys.argv[1:] if argv is None else argv
    command = "python benchmarks/architectures.py" + (" " + shlex.join(args) if args else "")
    source = _eqsat_source()
    recs = []
    for name in names:
        rec = sweep_one(name, out, a)
        recs.append(rec)
        if "export_error" in rec:
            print(f"{rec['name']}: export failed: {rec['export_error']}", flush=True)
            continue
        d, n = rec["default"], rec["onnx_nchw"]
        print(f"{rec['name']}: {rec['nodes_exported']} nodes -> {d.get('nodes_after', '-')}, rc {d['rc']}, "
              f"verification {d.get('verification', {}).get('status', '-')}, {d['wall_s']:.1f} s; "
              f"onnx/nchw rc {n['rc']} {d['error'] or n['error']}", flush=True)
    (out / "results.json").write_text(json.dumps(recs, indent=1))
    if (end := _eqsat_source()) != source:  # the working tree changed during the run
        source = f"{source} when the run started and {end} when it ended"
    print(write_results(recs, a.results, command, a.timeout, source))
    print(f"wrote {a.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
