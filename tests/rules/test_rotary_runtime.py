"""rules/rotary.egg's runtime form: cos and sin computed from the positions in the graph
(transformers' Llama: f = positions * inv_freq, cos = Cos(Concat(f, f)), unsqueezed over the
heads) become com.microsoft.RotaryEmbedding with the computed rows as its caches: positions
[1, S] as the 1-D offset [0] into rows [S, h], positions [B, S] as row indices into rows
[B * S, h]. It stays where a row is broadcast over the tokens, the halves differ, or the
rows' batch is not q's."""

from __future__ import annotations

import numpy as np
import pytest

from ..conftest import check_rewrite, parse_model

ROPE = "com.microsoft.RotaryEmbedding"
# the angles f = Cast(pos)[..., None] * inv_freq and their Cos and Sin, computed once
ANGLES = ["Cast", "Unsqueeze", "Mul", "Cos", "Sin"]
# the op reading rows [S, h] at the offset [0]
OFFSET_OPS = [ROPE, *ANGLES, "Squeeze", "Squeeze"]
# the op reading rows [B * S, h] at Reshape(Range(0, B * S), [B, S]) (static sizes: [B, S] folds)
BATCH_OPS = [ROPE, *ANGLES, "Reshape", "Reshape", "Reshape", "Shape", "Gather", "Range"]
# unfused: Concat(f, f), the two unsqueezes over the heads, rotate_half(q), the products and the sum
UNFUSED = [*ANGLES, "Concat", "Unsqueeze", "Unsqueeze", "Slice", "Slice", "Neg", "Concat", "Mul", "Mul", "Add"]


def rt_model(q_shape=("2", "2", "5", "8"), pos_shape=("1", "5"), scale: float | None = None,
             second_half: str = "f", d: int = 8, total: str = "Add(a, b)") -> str:
    """q [B, 2, S, d] rotated by cos and sin of f = Cast(pos)[..., None] * inv_freq [d/2]
    (Concat(f, `second_half`) their angles, times `scale` when given), as the TorchScript
    exporter writes transformers' LlamaRotaryEmbedding and apply_rotary_pos_emb."""
    h = d // 2
    inv = ", ".join(f"{v:.9g}" for v in 1.0 / 10000 ** (np.arange(0, d, 2) / d))
    scaled = (f'''        k = Constant <value = float {{{scale}}}> ()
        cos = Mul(cos0, k)
        sin = Mul(sin0, k)''' if scale is not None else '''        cos = Identity(cos0)
        sin = Identity(sin0)''')
    return f'''<ir_version: 8, opset_import: ["" : 18]>
    agraph (float[{", ".join(q_shape)}] q, int64[{", ".join(pos_shape)}] pos) => (float[{", ".join(q_shape)}] y) {{
        inv = Constant <value = float[{h}] {{{inv}}}> ()
        two = Constant <value = int64[1] {{2}}> ()
        one = Constant <value = int64[1] {{1}}> ()
        pf = Cast <to = 1> (pos)
        pu = Unsqueeze(pf, two)
        f = Mul(pu, inv)
        g = Mul(f, inv)
        emb = Concat <axis = -1> (f, {second_half})
        cos0 = Cos(emb)
        sin0 = Sin(emb)
{scaled}
        cu = Unsqueeze(cos, one)
        su = Unsqueeze(sin, one)
        zero = Constant <value = int64[1] {{0}}> ()
        hh = Constant <value = int64[1] {{{h}}}> ()
        big = Constant <value = int64[1] {{9223372036854775807}}> ()
        ax = Constant <value = int64[1] {{-1}}> ()
        x1 = Slice(q, zero, hh, ax, one)
        x2 = Slice(q, hh, big, ax, one)
        n = Neg(x2)
        r = Concat <axis = -1> (n, x1)
        a = Mul(q, cu)
        b = Mul(r, su)
        y = {total}
    }}'''


def feeds(q_shape=(2, 2, 5, 8), pos_shape=(1, 5)) -> dict:
    rng = np.random.default_rng(0)
    return {"q": rng.standard_normal(q_shape).astype(np.float32),
            "pos": rng.integers(0, 4096, pos_shape)}  # any positions: the op reads the computed rows


def test_positions_shared_by_the_batch_give_the_offset_form():
    res = check_rewrite(parse_model(rt_model()), OFFSET_OPS, feeds=feeds(),
                        fired=["rope-halves-concat", "rope-halves-cos", "rope-halves-sin", "rope-rt-scaled",
                               "rope-rt-fuse"], not_fired=["rope-rt-batch-fuse", "rope-rt-batch-fuse-left"])
    (node,) = [n for n in res.model.graph.node if n.op_type == "RotaryEmbedding"]
    init = {t.name: t for t in res.model.graph.initializer}
    consts = {n.output[0]: n for n in res.model.graph.node if n.op_type == "Constant"}
    assert node.input[1] in init or node.input[1] in consts  # the offset [0], a constant


def test_positions_per_batch_index_the_rows_of_every_batch():
    m = parse_model(rt_model(pos_shape=("2", "5")))
    check_rewrite(m, BATCH_OPS, feeds=feeds(pos_shape=(2, 5)), fired=["rope-rt-batch-fuse"],
                  not_fired=["rope-rt-fuse", "rope-rt-fuse-left", "rope-rt-batch-sym-fuse",
                             "rope-rt-batch-sym-fuse-left"])


@pytest.mark.parametrize("pos_shape, ops, rule", [(("1", "5"), OFFSET_OPS, "rope-rt-fuse-left"),
                                                   (("2", "5"), BATCH_OPS, "rope-rt-batch-fuse-left")],
                         ids=["offset", "per-batch"])
def test_the_sum_written_the_other_way_round(pos_shape, ops, rule):
    m = parse_model(rt_model(pos_shape=pos_shape, total="Add(b, a)"))
    check_rewrite(m, ops, feeds=feeds(pos_shape=tuple(map(int, pos_shape))), fired=[rule])


@pytest.mark.parametrize("batch, seq", [(3, 7), (1, 1), (2, 1)], ids=["prefill", "step-batch-1", "step-batch-2"])
def test_symbolic_batch_and_sequence(batch, seq):
    # q [B, 2, S, 8], positions [B, S]: one model for every batch and sequence length
    m = parse_model(rt_model(q_shape=("B", "2", "S", "8"), pos_shape=("B", "S")))
    # [B, S] is computed: one more Shape; B may be 0, so the rows are padded with S zero rows
    # (rope-rt-batch-sym-fuse: the kernel refuses a cache of fewer rows than the sequence)
    check_rewrite(m, [*BATCH_OPS, "Shape", "Shape", "ConstantOfShape", "Concat", "Concat"],
                  feeds=feeds((batch, 2, seq, 8), (batch, seq)), dims={"B": batch, "S": seq},
                  fired=["rope-rt-batch-sym-fuse"], not_fired=["rope-rt-batch-fuse"])


def test_symbolic_batch_with_the_sum_written_the_other_way_round():
    m = parse_model(rt_model(q_shape=("B", "2", "S", "8"), pos_shape=("B", "S"), total="Add(b, a)"))
    check_rewrite(m, [*BATCH_OPS, "Shape", "Shape", "ConstantOfShape", "Concat", "Concat"],
                  feeds=feeds((2, 2, 3, 8), (2, 3)), dims={"B": 2, "S": 3}, fired=["rope-rt-batch-sym-fuse-left"])


@pytest.mark.parametrize("batch, seq", [(3, 7), (2, 1)], ids=["prefill", "step"])
def test_symbolic_sequence_with_positions_shared_by_the_batch(batch, seq):
    m = parse_model(rt_model(q_shape=("B", "2", "S", "8"), pos_shape=("1", "S")))
    check_rewrite(m, OFFSET_OPS, feeds=feeds((batch, 2, seq, 8), (1, seq)), dims={"B": batch, "S": seq},
                  fired=["rope-rt-fuse"])


def test_scaled_cos_and_sin_keep_the_scale():
    # transformers' attention_scaling other than 1: Cos(Concat(f, f)) * k = Concat(Cos(f) * k, ...)
    # Cos(f) * k and Sin(f) * k: two more products
    check_rewrite(parse_model(rt_model(scale=0.75)), [*OFFSET_OPS, "Mul", "Mul"], feeds=feeds(),
                  fired=["rope-halves-scaled", "rope-rt-fuse"])


def test_unequal_halves_stay():
    # Concat(f, f * inv): the op reads only the first half of each row
    m = parse_model(rt_model(second_half="g"))
    check_rewrite(m, [*UNFUSED, "Mul"], feeds=feeds(), fired=["rope-rotate-half"],
                  not_fired=["rope-halves-concat", "rope-rt-fuse", "rope-rt-batch-fuse"])


def test_one_row_broadcast_over_the_tokens_stays():
    # positions [1, 1] for 5 tokens: every token rotated by one angle, not one row per token
    m = parse_model(rt_model(pos_shape=("1", "1")))
    check_rewrite(m, UNFUSED, feeds=feeds(pos_shape=(1, 1)), fired=["rope-rt-scaled"],
                  not_fired=["rope-rt-fuse", "rope-rt-fuse-left", "rope-rt-batch-fuse", "rope-rt-batch-fuse-left"])


def test_rows_of_another_batch_stay():
    # positions [2, 5] for q of batch 1: the product broadcasts q to batch 2, the op cannot
    m = parse_model(rt_model(q_shape=("1", "2", "5", "8"), pos_shape=("2", "5")).replace(
        "=> (float[1, 2, 5, 8] y)", "=> (float[2, 2, 5, 8] y)"))
    check_rewrite(m, UNFUSED, feeds=feeds((1, 2, 5, 8), (2, 5)), fired=["rope-rt-scaled"],
                  not_fired=["rope-rt-fuse", "rope-rt-fuse-left", "rope-rt-batch-fuse", "rope-rt-batch-fuse-left"])


def test_target_onnx_stays():
    check_rewrite(parse_model(rt_model()), UNFUSED, feeds=feeds(), target="onnx",
                  not_fired=["rope-rt-fuse", "rope-rt-fuse-left"])


def test_rows_of_a_batch_that_may_broadcast_stay():
    # positions [C, S] for q [B, ...]: C may be 1 where B is not (broadcast), so the rows'
    # batch is not known to be q's
    m = parse_model(rt_model(q_shape=("B", "2", "S", "8"), pos_shape=("C", "S")))
    check_rewrite(m, UNFUSED, feeds=feeds((2, 2, 5, 8), (1, 5)), dims={"B": 2, "C": 1, "S": 5},
                  fired=["rope-rt-scaled"], not_fired=["rope-rt-batch-fuse", "rope-rt-batch-fuse-left"])
