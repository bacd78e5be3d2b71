"""Cached attention and rotary embeddings end to end on tiny transformers decoders exported with
a KV cache as the corpus's *-kv models are (benchmarks/corpus.py's CacheStepWrapper, TorchScript,
random weights): Llama and Qwen2 with grouped-query attention (4 query heads over 2 kv heads),
Phi-3 (fused qkv projection, full rotary) and Phi-2 (partial rotary, LayerNorm, parallel MLP).

Every layer's attention becomes one com.microsoft.MultiHeadAttention with past_key / past_value
(grouped-query: over the kv heads, attention-gqa-past; never GroupQueryAttention, whose
seqlens_k reading of the mask would be wrong for the left padding used here) and its q and k
rotations RotaryEmbedding; the outputs match the original's under onnxruntime at a prefill and
at a step after 8 cached tokens."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import onnx  # noqa: E402

import eqsat  # noqa: E402
from benchmarks.corpus import CacheStepWrapper, _kv_axes, _perturb_constant_parameters, _quiet_export, _transformers  # noqa: E402

from ..conftest import assert_same_outputs, op_list, rule_test_profile  # noqa: E402

LAYERS, HEADS, HEAD, VOCAB = 2, 4, 16, 128
PAST = [f"past.{i}.{p}" for i in range(LAYERS) for p in ("key", "value")]
PRESENT = [f"present.{i}.{p}" for i in range(LAYERS) for p in ("key", "value")]
COMMON = dict(vocab_size=VOCAB, hidden_size=HEADS * HEAD, intermediate_size=96, num_hidden_layers=LAYERS,
              num_attention_heads=HEADS, max_position_embeddings=64, tie_word_embeddings=False)
# name -> (config class, model class, config, kv heads)
MODELS = {
    "llama-gqa": ("LlamaConfig", "LlamaModel", dict(num_key_value_heads=2), 2),
    "qwen2-gqa": ("Qwen2Config", "Qwen2Model", dict(num_key_value_heads=2), 2),
    "phi3": ("Phi3Config", "Phi3Model", dict(num_key_value_heads=HEADS, pad_token_id=0), HEADS),
    "phi2-partial": ("PhiConfig", "PhiModel", dict(num_key_value_heads=HEADS, partial_rotary_factor=0.5), HEADS),
}


def export(tmp_path, name: str) -> onnx.ModelProto:
    tf = _transformers()
    cfg_cls, model_cls, extra, kv = MODELS[name]
    torch.manual_seed(0)
    config = getattr(tf, cfg_cls)(attn_implementation="eager", **COMMON, **extra)
    model = _perturb_constant_parameters(CacheStepWrapper(getattr(tf, model_cls)(config))).eval()
    args = (torch.randint(0, VOCAB, (1, 3)), torch.ones(1, 8, dtype=torch.int64),
            *[torch.randn(1, kv, 5, HEAD) for _ in PAST])
    path = tmp_path / f"{name}.onnx"
    with _quiet_export():
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=17,
                          input_names=["input_ids", "attention_mask", *PAST],
                          output_names=["last_hidden_state", *PRESENT], dynamic_axes=_kv_axes(LAYERS))
    return onnx.load(path)


def feeds(batch: int, new: int, past: int, kv: int) -> dict[str, np.ndarray]:
    """new tokens after past cached ones; the second row left-padded (its first 2 positions
    masked), which GroupQueryAttention's seqlens_k cannot express."""
    rng = np.random.default_rng(0)
    mask = np.ones((batch, past + new), np.int64)
    mask[1:, :2] = 0
    f = {"input_ids": rng.integers(0, VOCAB, (batch, new)), "attention_mask": mask}
    f.update({n: rng.standard_normal((batch, kv, past, HEAD)).astype(np.float32) for n in PAST})
    return f


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """{name: (exported, optimized)}"""
    out = {}
    for name in MODELS:
        m = export(tmp_path_factory.mktemp(name), name)
        out[name] = (m, eqsat.optimize(m, hardware=rule_test_profile()).model)
    return out


@pytest.mark.parametrize("name", list(MODELS))
def test_attention_and_rotary_fused_in_every_layer(models, name):
    original, opt = models[name]
    onnx.checker.check_model(opt)
    ops = op_list(opt)
    assert ops.count("com.microsoft.MultiHeadAttention") == LAYERS, ops
    assert ops.count("com.microsoft.RotaryEmbedding") == 2 * LAYERS, ops
    assert "com.microsoft.GroupQueryAttention" not in ops and "Softmax" not in ops, ops


@pytest.mark.parametrize("batch, new, past", [pytest.param(2, 6, 0, id="prefill-6"),
                                              pytest.param(2, 1, 8, id="step-after-8")])
@pytest.mark.parametrize("name", list(MODELS))
def test_outputs_unchanged(models, name, batch, new, past):
    original, opt = models[name]
    # verified: by eqsat.optimize in the fixture
    assert_same_outputs(original, opt, feeds(batch, new, past, MODELS[name][3]), rtol=1e-4, atol=1e-5)
