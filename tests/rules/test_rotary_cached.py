"""rules/rotary.egg's rotation before the head split and partial rotation, with a KV cache.

A decoder (Qwen2, Phi) rotates its keys after splitting them into heads and appends the rotated
keys to the cache: Concat(past, RotaryEmbedding(Transpose(Reshape(k)))). rope-before-head-split
writes that as Transpose(Reshape(RotaryEmbedding(k, num_heads=n))), the split kv-cache
recognizes, so that the step's attention fuses into one MultiHeadAttention with past_key /
past_value. transformers writes every rotation as Concat(rotate(x[..., :r]), x[..., r:]):
rope-partial-fuse makes a partial one (r < d, Phi) one RotaryEmbedding with
rotary_embedding_dim = r, and rope-pass-empty drops the empty x[..., d:] of a full one.
Each fused model gives the original's outputs under onnxruntime at a step and a prefill; a
rotation that is not that pattern stays."""

from __future__ import annotations

import numpy as np
import pytest

from ..conftest import check_rewrite, parse_model
from .test_attention_past import MHA, D, N, step_feeds, with_sizes

H = N * D
M = 16  # rows of the cos / sin caches
ROT = "com.microsoft.RotaryEmbedding"
BIG = 9223372036854775807


def rotate(x: str, out: str, form: str) -> str:
    """`out` = `x` [B, N, S, D] rotated at the positions pos: the op on the whole head ("op"),
    transformers' Concat(op(x[..., :r]), x[..., r:]) with r = D ("full") or r = D / 2
    ("partial"), or the rotated part last ("swapped", not a partial rotation)."""
    if form == "op":
        return f'{out} = com.microsoft.RotaryEmbedding({x}, pos, cos, sin)'
    r = D if form == "full" else D // 2
    lo = f'{out}_lo = Slice({x}, zero, r_{out}, last)\n'
    hi = f'{out}_hi = Slice({x}, r_{out}, big, last)\n'
    rot = f'{out}_rot = com.microsoft.RotaryEmbedding({out}_lo, pos, cos, sin)\n'
    cat = (f'{out} = Concat <axis = -1> ({out}_hi, {out}_rot)' if form == "swapped"
           else f'{out} = Concat <axis = -1> ({out}_rot, {out}_hi)')
    return f'r_{out} = Constant <value = int64[1] {{{r}}}> ()\n' + lo + hi + rot + cat


def rotary_step_model(form: str = "op", keys_3d: bool = True) -> str:
    """test_attention_past's decoder step with the query and the keys rotated (`rotate`) after
    the head split, the rotated keys appended to the cache. keys_3d=False: k comes as
    [B * S, H] (not a 3-D value split into heads)."""
    rd = D if form in ("op", "full") else D // 2
    k_in = f"float[B, S, {H}] k" if keys_3d else f"float[BS, {H}] k"
    return f'''<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
    agraph (float[B, S, {H}] q, {k_in}, float[B, S, {H}] v, float[B, {N}, P, {D}] past_k,
            float[B, {N}, P, {D}] past_v, float[B, 1, S, T] m, int64[B, S] pos,
            float[{M}, {rd // 2}] cos, float[{M}, {rd // 2}] sin)
        => (float[B, S, {H}] y, float[B, {N}, T, {D}] present_k, float[B, {N}, T, {D}] present_v) {{
        hs = Constant <value = int64[4] {{0, 0, {N}, {D}}}> ()
        hk = Constant <value = int64[4] {{-1, {"0" if keys_3d else "1"}, {N}, {D}}}> ()
        zero = Constant <value = int64[1] {{0}}> ()
        last = Constant <value = int64[1] {{-1}}> ()
        big = Constant <value = int64[1] {{{BIG}}}> ()
        qr = Reshape(q, hs)
        qh = Transpose <perm = [0, 2, 1, 3]> (qr)
        {rotate("qh", "qo", form)}
        kr = Reshape(k, {"hs" if keys_3d else "hk"})
        kh = Transpose <perm = [0, 2, 1, 3]> (kr)
        {rotate("kh", "ko", form)}
        vr = Reshape(v, hs)
        vh = Transpose <perm = [0, 2, 1, 3]> (vr)
        present_k = Concat <axis = -2> (past_k, ko)
        present_v = Concat <axis = -2> (past_v, vh)
        kt = Transpose <perm = [0, 1, 3, 2]> (present_k)
        qk = MatMul(qo, kt)
        half = Constant <value = float {{0.5}}> ()
        sc = Mul(qk, half)
        sm = Add(sc, m)
        p = Softmax <axis = -1> (sm)
        o = MatMul(p, present_v)
        ot = Transpose <perm = [0, 2, 1, 3]> (o)
        merge = Constant <value = int64[3] {{0, 0, {H}}}> ()
        y = Reshape(ot, merge)
    }}'''


def rotary_feeds(batch: int, new: int, past: int, form: str = "op", keys_3d: bool = True) -> tuple[dict, dict]:
    feeds, dims = step_feeds(batch, new, past)
    rng = np.random.default_rng(1)
    rd = D if form in ("op", "full") else D // 2
    feeds["pos"] = (past + np.arange(new, dtype=np.int64))[None].repeat(batch, 0)
    feeds["cos"] = rng.standard_normal((M, rd // 2)).astype(np.float32)
    feeds["sin"] = rng.standard_normal((M, rd // 2)).astype(np.float32)
    if not keys_3d:
        feeds["k"] = feeds["k"].reshape(batch * new, H)
        dims["BS"] = batch * new
    return feeds, dims


SHAPES = [pytest.param(2, 1, 7, id="step"), pytest.param(1, 5, 0, id="prefill")]


def check_rotary_step(form: str, batch: int, new: int, past: int, fired: list[str]) -> None:
    """The step with q and k rotated (`form`) fuses into RotaryEmbedding x 2 and one
    MultiHeadAttention with past_key / past_value that writes both presents."""
    feeds, dims = rotary_feeds(batch, new, past, form)
    res = check_rewrite(parse_model(with_sizes(rotary_step_model(form), dims)), [ROT, ROT, MHA], feeds=feeds,
                        fired=fired)  # the sizes static: the mask's T is P + S by the model's types
    mha = next(n for n in res.model.graph.node if n.op_type == "MultiHeadAttention")
    assert mha.input[6:8] == ["past_k", "past_v"] and list(mha.output[1:]) == ["present_k", "present_v"]
    rots = [n for n in res.model.graph.node if n.op_type == "RotaryEmbedding"]
    attrs = [{a.name: a.i for a in n.attribute} for n in rots]
    want = {"num_heads": N} if form != "partial" else {"num_heads": N, "rotary_embedding_dim": D // 2}
    assert all({k: a.get(k) for k in want} == want for a in attrs), attrs


@pytest.mark.parametrize("batch, new, past", SHAPES)
def test_keys_rotated_before_the_cache_fuse_with_their_attention(batch, new, past):
    check_rotary_step("op", batch, new, past,
                      fired=["rope-before-head-split", "attention-kv-cache", "attention-mha-past"])


@pytest.mark.parametrize("batch, new, past", SHAPES)
def test_a_full_rotation_with_its_empty_pass_through_fuses(batch, new, past):
    """transformers' Concat(rotate(x[..., :d]), x[..., d:]): the second part is empty."""
    check_rotary_step("full", batch, new, past,
                      fired=["rope-pass-empty", "rope-before-head-split", "attention-kv-cache", "attention-mha-past"])


@pytest.mark.parametrize("batch, new, past", SHAPES)
def test_a_partial_rotation_fuses_with_rotary_embedding_dim(batch, new, past):
    """Phi's Concat(rotate(x[..., :d/2]), x[..., d/2:])."""
    check_rotary_step("partial", batch, new, past,
                      fired=["rope-partial-fuse", "rope-before-head-split-heads", "attention-kv-cache",
                             "attention-mha-past"])


UNFUSED = ["Add", "Concat", "Concat", "MatMul", "Reshape", "Reshape", "Reshape", "Reshape", "Softmax", "Transpose",
           "Transpose", "Transpose", "Transpose", "com.microsoft.FusedMatMul", ROT, ROT]


@pytest.mark.parametrize("batch, new, past", SHAPES)
def test_rotated_part_last_is_not_a_partial_rotation(batch, new, past):
    """Concat(x[..., r:], rotate(x[..., :r])) moves the rotated half to the end: not the op's
    rotary_embedding_dim, and not the cache pattern, so the attention stays unfused."""
    feeds, dims = rotary_feeds(batch, new, past, "swapped")
    check_rewrite(parse_model(rotary_step_model("swapped")), UNFUSED + ["Concat", "Concat"] + ["Slice"] * 4,
                  feeds=feeds, dims=dims, not_fired=["rope-partial-fuse", "rope-pass-empty"])


def test_keys_not_split_from_a_3d_value_stay():
    """k [B * S, H] reshaped into heads: no 3-D value to rotate (split-heads needs one), so the
    key's rotation stays 4-D and the cached attention unfused."""
    feeds, dims = rotary_feeds(2, 1, 7, "op", keys_3d=False)
    check_rewrite(parse_model(rotary_step_model("op", keys_3d=False)), UNFUSED, feeds=feeds, dims=dims,
                  not_fired=["attention-mha-past"])


def test_a_rotation_of_a_4d_input_stays_4d():
    """x [B, N, S, D] comes in heads: nothing to rotate before a split. Its partial rotation
    becomes one op with rotary_embedding_dim (and num_heads), which stays 4-D."""
    r = D // 2
    model = parse_model(f'''<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
    agraph (float[2, {N}, 3, {D}] x, int64[2, 3] pos, float[{M}, {r // 2}] cos, float[{M}, {r // 2}] sin)
        => (float[2, {N}, 3, {D}] y) {{
        zero = Constant <value = int64[1] {{0}}> ()
        rr = Constant <value = int64[1] {{{r}}}> ()
        last = Constant <value = int64[1] {{-1}}> ()
        big = Constant <value = int64[1] {{{BIG}}}> ()
        lo = Slice(x, zero, rr, last)
        hi = Slice(x, rr, big, last)
        rot = com.microsoft.RotaryEmbedding(lo, pos, cos, sin)
        y = Concat <axis = -1> (rot, hi)
    }}''')
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, N, 3, D)).astype(np.float32),
             "pos": np.arange(6, dtype=np.int64).reshape(2, 3),
             "cos": rng.standard_normal((M, r // 2)).astype(np.float32),
             "sin": rng.standard_normal((M, r // 2)).astype(np.float32)}
    check_rewrite(model, [ROT], feeds=feeds, fired=["rope-partial-fuse"],
                  not_fired=["rope-before-head-split", "rope-before-head-split-heads"])


def test_a_tail_that_is_not_empty_stays():
    """Concat(a, x[..., k:]) with k below x's last dim appends what the slice holds."""
    model = parse_model(f'''<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
    agraph (float[2, {N}, 3, {D}] x, int64[2, 3] pos, float[{M}, {D // 2}] cos, float[{M}, {D // 2}] sin)
        => (float[2, {N}, 3, {D + 2}] y) {{
        k = Constant <value = int64[1] {{{D - 2}}}> ()
        last = Constant <value = int64[1] {{-1}}> ()
        big = Constant <value = int64[1] {{{BIG}}}> ()
        r = com.microsoft.RotaryEmbedding(x, pos, cos, sin)
        t = Slice(x, k, big, last)
        y = Concat <axis = -1> (r, t)
    }}''')
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, N, 3, D)).astype(np.float32),
             "pos": np.arange(6, dtype=np.int64).reshape(2, 3),
             "cos": rng.standard_normal((M, D // 2)).astype(np.float32),
             "sin": rng.standard_normal((M, D // 2)).astype(np.float32)}
    check_rewrite(model, [ROT, "Slice", "Concat"], feeds=feeds, not_fired=["rope-pass-empty"])
