"""Crafted decoder-step inputs for the rules of a KV cache (rules/attention.egg's
attention-mha-past) and of rotary embeddings computed at runtime (rules/rotary.egg's
rope-rt-*): each written model must give the original's outputs under onnxruntime.

onnxruntime's com.microsoft.MultiHeadAttention (1.32, CPU) ignores past_key / past_value
where one of its present outputs is not asked for: the attention then covers the new keys
alone. A graph whose present key is not an output (another Concat is, or the value cache is
the key cache, so one present serves both) must still get both present outputs named."""

from __future__ import annotations

import numpy as np
import pytest

from ..conftest import check_rewrite, parse_model
from .test_attention_past import MHA, step_feeds, step_model, with_sizes


@pytest.mark.parametrize("vcache, outputs", [
    pytest.param("past_v, vh", "pkv, present_v", id="present-key-not-an-output"),
    pytest.param("past_v, vh", "present_v", id="only-the-present-value"),
    pytest.param("past_v, vh", "present_k", id="only-the-present-key"),
    pytest.param("past_k, kh", "present_k, present_v", id="values-are-the-keys"),
])
def test_multihead_attention_with_past_writes_both_presents(vcache, outputs):
    feeds, dims = step_feeds(2, 3, 4)
    model = parse_model(with_sizes(step_model(vcache=vcache, outputs=outputs), dims))  # T = P + S
    res = check_rewrite(model, ([MHA], [MHA, "Concat", "Reshape", "Transpose"], [MHA, "Identity"]),
                        feeds=feeds, fired=["attention-mha-past"])
    (node,) = [n for n in res.model.graph.node if n.op_type == "MultiHeadAttention"]
    assert len(node.output) >= 3 and all(node.output[1:3]), list(node.output)


# ---- rotary embeddings with cos and sin computed at runtime (rules/rotary.egg, rope-rt-*)

def _rope_feeds(batch: int, seq: int, heads: int = 2, d: int = 8, pos_batch: int | None = None) -> dict:
    rng = np.random.default_rng(1)
    return {"q": rng.standard_normal((batch, heads, seq, d)).astype(np.float32),
            "pos": rng.integers(0, 4096, (batch if pos_batch is None else pos_batch, seq))}


@pytest.mark.parametrize("batch_dim, rule, batches", [("2", "rope-rt-batch-fuse", (2,)),
                                                      ("B", "rope-rt-batch-sym-fuse", (2, 1, 3))])
def test_per_batch_positions_with_no_tokens(batch_dim, rule, batches):
    # rope-rt-batch-fuse's position ids Reshape(Range(0, B * S), Shape(rows)[:2]): a runtime
    # target [B, 0] with allowzero 0 copies dim 1 from the 1-D Range, which has none
    from ..conftest import assert_same_outputs, assert_verified, optimized
    from .test_rotary_runtime import rt_model

    model = parse_model(rt_model(q_shape=(batch_dim, "2", "S", "8"), pos_shape=(batch_dim, "S")))
    res = optimized(model)
    assert any(n.op_type == "RotaryEmbedding" for n in res.model.graph.node)
    assert res.report["saturation"]["rule_matches"].get(rule, 0) > 0
    for batch in batches:
        for seq in (5, 0, 1):
            assert_same_outputs(model, res.model, _rope_feeds(batch, seq), rtol=1e-4, atol=1e-5)
    assert_verified(model, res)


@pytest.mark.parametrize("opset", [13, 14])
def test_per_batch_positions_below_opset_15_stay(opset):
    # rope-rt-batch-fuse builds Shape(rows, start, end) (attributes since opset 15) and a
    # Reshape with allowzero (14): below 15 the optimized model could not be written, and
    # eqsat refused the whole model ("Shape at opset 13 has no attribute end")
    from ..conftest import assert_same_outputs, assert_verified, optimized
    from .test_rotary_runtime import rt_model

    model = parse_model(rt_model(q_shape=("B", "2", "S", "8"), pos_shape=("B", "S"))
                        .replace('"" : 18', f'"" : {opset}'))
    res = optimized(model)
    matches = res.report["saturation"]["rule_matches"]
    assert matches.get("rope-rt-batch-fuse", 0) == 0 and matches.get("rope-rt-batch-sym-fuse", 0) == 0
    for batch, seq in [(2, 5), (1, 1)]:
        assert_same_outputs(model, res.model, _rope_feeds(batch, seq), rtol=1e-4, atol=1e-5)
    assert_verified(model, res)


def test_per_batch_positions_of_an_empty_batch():
    # rope-rt-batch-fuse gives the op the rows of every batch, [B * S, h]; onnxruntime's
    # RotaryEmbedding refuses a cache of fewer rows than the sequence ("Updating cos_cache and
    # sin_cache ... is not currently supported"), so at B = 0 the written model failed where the
    # original runs, and verification, which runs a batch of 0, refused every such model
    import eqsat

    from ..conftest import assert_same_outputs, assert_verified, optimized
    from .test_rotary_runtime import rt_model

    model = parse_model(rt_model(q_shape=("B", "2", "S", "8"), pos_shape=("B", "S")))
    res = optimized(model)
    assert any(n.op_type == "RotaryEmbedding" for n in res.model.graph.node)
    for batch, seq in [(0, 3), (0, 0), (2, 5), (1, 1)]:
        assert_same_outputs(model, res.model, _rope_feeds(batch, seq), rtol=1e-4, atol=1e-5)
    assert_verified(model, res)
    written = eqsat.optimize(model, hardware="cpu").model  # verified
    assert any(n.op_type == "RotaryEmbedding" for n in written.graph.node)


# ---- rotary embeddings with constant caches (rope-half-fuse, rope-pairs-fuse)

@pytest.mark.parametrize("form", ["half", "pairs"])
def test_a_cache_of_fewer_rows_than_tokens_stays(form):
    # 5 tokens, caches of 4 rows (positions in [-4, 4), repeated): Gather reads them, but
    # onnxruntime's RotaryEmbedding refuses a cache of fewer rows than the sequence ("Updating
    # cos_cache and sin_cache ... is not currently supported"), and verification refused the model
    import eqsat

    from ..conftest import assert_same_outputs, assert_verified, optimized
    from .test_rotary import pairs_model, rope_model

    model = parse_model((rope_model if form == "half" else pairs_model)(positions=4))
    res = optimized(model)
    matches = res.report["saturation"]["rule_matches"]
    assert not any(matches.get(f"rope-{form}-fuse{s}", 0) for s in ("", "-left"))
    rng = np.random.default_rng(2)
    feeds = {"q": rng.standard_normal((2, 2, 5, 8)).astype(np.float32), "pos": rng.integers(-4, 4, (2, 5))}
    assert_same_outputs(model, res.model, feeds, rtol=1e-4, atol=1e-5)
    assert_verified(model, res)
    eqsat.optimize(model, hardware="cpu")  # verified: not refused



ROWS = ["com.microsoft.RotaryEmbedding", "Gather", "Gather", "Gather", "Range", "Reshape", "Reshape", "Reshape",
        "Shape", "Shape"]


@pytest.mark.parametrize("form", ["half", "pairs"])
@pytest.mark.parametrize("batch, rule, extra", [
    (2, "rope-rows-fuse", []),
    ("B", "rope-rows-pad-fuse", ["Shape", "ConstantOfShape", "Concat", "Concat"]),  # S zero rows: B may be 0
])
def test_a_symbolic_sequence_longer_than_the_caches_runs(form, batch, rule, extra):
    # q [batch, 2, S, 8] rotated by caches of 4 rows at position ids [batch, S] from an input: at
    # S > 4 the original runs (Gather reads repeated positions), and the fused op must too;
    # onnxruntime's RotaryEmbedding refuses a cache of fewer rows than the sequence ("Updating
    # cos_cache and sin_cache ... is not currently supported"), so the op gets the rows gathered
    # at the positions, [batch * S, h], and positions 0 .. batch * S - 1 into them. Before,
    # it got the caches, and eqsat wrote a model that failed at S = 5 (verified at S = 3)
    import eqsat

    from ..conftest import assert_same_outputs, op_list
    from .test_rotary import pairs_model, rope_model

    model = parse_model((rope_model if form == "half" else pairs_model)(positions=4, batch=batch, seq="S"))
    rng = np.random.default_rng(3)

    def feeds(b, seq):
        return {"q": rng.standard_normal((b, 2, seq, 8)).astype(np.float32), "pos": rng.integers(-4, 4, (b, seq))}

    res = check_rewrite(model, ROWS + extra, feeds=feeds(2, 9), fired=[rule], not_fired=["rope-cache-fuse"])
    sizes = [(2, 5), (2, 0), (2, 1)] + ([(1, 4), (0, 3), (3, 7), (0, 0)] if batch == "B" else [])
    for b, seq in sizes:
        assert_same_outputs(model, res.model, feeds(b, seq), rtol=1e-4, atol=1e-5)
    written = eqsat.optimize(model, hardware="cpu").model  # verified
    assert "com.microsoft.RotaryEmbedding" in op_list(written)
