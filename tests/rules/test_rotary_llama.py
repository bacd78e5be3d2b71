"""rules/rotary.egg end to end: a tiny transformers Llama (random weights, hidden 64, 2 heads
of 32, 2 layers), exported with a KV cache by the TorchScript exporter as the corpus's
llama-4l-kv is (benchmarks/corpus.py), optimized with `eqsat.optimize`.

- With cos and sin gathered from constant caches by position ids (transformers' Llama before
  its rotary embedding computed them at runtime; here a module in its place) every layer's
  q and k rotation becomes one com.microsoft.RotaryEmbedding.
- As transformers 5 exports it, cos and sin are computed at runtime from the positions
  (Cos(Concat(f, f)), f = positions * inv_freq): every layer's rotations become the op too,
  reading the computed rows as its caches (position ids an input [batch, new_tokens]: rows
  [batch * new_tokens, h]; positions computed from the cache's length, as the corpus's
  llama-4l-kv: rows [new_tokens, h] at the offset 0).
All keep the original's outputs under onnxruntime for a prefill of 8 tokens and for one
decode step after 8 cached ones."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import onnx  # noqa: E402
from torch import nn  # noqa: E402

import eqsat  # noqa: E402
from benchmarks.corpus import (  # noqa: E402
    CacheStepWrapper,
    _kv_axes,
    _perturb_constant_parameters,
    _quiet_export,
    _transformers,
)

from ..conftest import assert_same_outputs, op_list, rule_test_profile  # noqa: E402

LAYERS, HEADS, HEAD, VOCAB, MAX_POSITIONS = 2, 2, 32, 128, 64
PAST = [f"past.{i}.{p}" for i in range(LAYERS) for p in ("key", "value")]
PRESENT = [f"present.{i}.{p}" for i in range(LAYERS) for p in ("key", "value")]


class CachedRotary(nn.Module):
    """cos and sin as the rows of constant caches at the position ids (HF's form: the
    frequencies concatenated with themselves), in place of LlamaRotaryEmbedding."""

    def __init__(self, rotary: nn.Module) -> None:
        super().__init__()
        f = torch.arange(MAX_POSITIONS).float()[:, None] * rotary.inv_freq.float()[None]
        emb = torch.cat([f, f], -1)
        self.register_buffer("cos_cached", emb.cos() * rotary.attention_scaling, persistent=False)
        self.register_buffer("sin_cached", emb.sin() * rotary.attention_scaling, persistent=False)

    def forward(self, x, position_ids):
        return self.cos_cached[position_ids].to(x.dtype), self.sin_cached[position_ids].to(x.dtype)


class Step(CacheStepWrapper):
    """CacheStepWrapper's step with the position ids an input [batch, new_tokens], as
    onnxruntime's decoders take them."""

    def forward(self, input_ids, attention_mask, position_ids, *past):
        cache = _transformers().DynamicCache(config=self.model.config)
        for i in range(self.layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=cache, use_cache=True, return_dict=True)
        present = [t for layer in out.past_key_values.layers[: self.layers] for t in (layer.keys, layer.values)]
        return (out.last_hidden_state, *present)


def export(tmp_path, cached: bool | None) -> onnx.ModelProto:
    """cached: constant caches (True), cos and sin computed from the position ids input
    (False), or computed from positions the model derives from the cache (None: no
    position_ids input, CacheStepWrapper's step as the corpus exports it)."""
    tf = _transformers()
    torch.manual_seed(0)
    config = tf.LlamaConfig(attn_implementation="eager", vocab_size=VOCAB, hidden_size=HEADS * HEAD,
                            intermediate_size=128, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                            num_key_value_heads=HEADS, max_position_embeddings=MAX_POSITIONS)
    llama = tf.LlamaModel(config)
    if cached:
        llama.rotary_emb = CachedRotary(llama.rotary_emb)
    positions = cached is not None
    model = _perturb_constant_parameters((Step if positions else CacheStepWrapper)(llama)).eval()
    args = (torch.randint(0, VOCAB, (1, 3)), torch.ones(1, 8, dtype=torch.int64),
            *([torch.arange(5, 8)[None]] if positions else []), *[torch.randn(1, HEADS, 5, HEAD) for _ in PAST])
    axes = {**_kv_axes(LAYERS), **({"position_ids": {0: "batch", 1: "new_tokens"}} if positions else {})}
    path = tmp_path / f"llama-{ {True: 'cached', False: 'runtime', None: 'computed'}[cached]}.onnx"
    with _quiet_export():
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=17,
                          input_names=["input_ids", "attention_mask", *(["position_ids"] if positions else []), *PAST],
                          output_names=["last_hidden_state", *PRESENT], dynamic_axes=axes)
    return onnx.load(path)


def step_feeds(batch: int, new: int, past: int, positions: bool = True) -> dict[str, np.ndarray]:
    """new tokens after past cached ones: positions past..past+new-1 (an input where
    `positions`), a full mask."""
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, VOCAB, (batch, new)),
             "attention_mask": np.ones((batch, past + new), np.int64),
             **({"position_ids": np.tile(np.arange(past, past + new), (batch, 1))} if positions else {})}
    feeds.update({n: rng.standard_normal((batch, HEADS, past, HEAD)).astype(np.float32) for n in PAST})
    return feeds


STEPS = [pytest.param(2, 8, 0, id="prefill-8"), pytest.param(2, 1, 8, id="decode-after-8")]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """{cached: (exported, optimized)}"""
    out = {}
    for cached in (True, False, None):
        m = export(tmp_path_factory.mktemp("llama"), cached)
        out[cached] = (m, eqsat.optimize(m, hardware=rule_test_profile()).model)
    return out


def test_constant_caches_give_one_rotary_embedding_per_layer_for_q_and_k(models):
    original, opt = models[True]
    assert op_list(opt).count("com.microsoft.RotaryEmbedding") == 2 * LAYERS
    assert "Cos" not in op_list(original)  # the caches are constants
    assert len(opt.graph.node) < len(original.graph.node)


@pytest.mark.parametrize("cached", [False, None], ids=["position-ids-input", "positions-computed"])
def test_cos_and_sin_computed_at_runtime_give_one_rotary_embedding_per_layer_for_q_and_k(models, cached):
    original, opt = models[cached]
    assert "Cos" in op_list(original)
    ops = op_list(opt)
    assert ops.count("com.microsoft.RotaryEmbedding") == 2 * LAYERS
    assert ops.count("Cos") == 1 and "Neg" not in ops  # the angles once; no rotate_half left


@pytest.mark.parametrize("cached", [True, False, None],
                         ids=["constant-caches", "runtime-cos-sin", "computed-positions"])
@pytest.mark.parametrize("batch, new, past", STEPS)
def test_outputs_unchanged(models, cached, batch, new, past):
    original, opt = models[cached]
    # verified: by eqsat.optimize in the fixture
    assert_same_outputs(original, opt, step_feeds(batch, new, past, positions=cached is not None), rtol=1e-4,
                        atol=1e-5)
