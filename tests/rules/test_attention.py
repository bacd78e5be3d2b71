"""rules/attention.egg: scaled-dot-product attention with its head split/merge
Reshape+Transpose becomes com.microsoft.MultiHeadAttention (target ort) or the standard
Attention op (opset >= 23); each fusion on a minimal single-layer model with the outputs
unchanged under onnxruntime, and no fusion where the fused ops cannot take the pattern.

The models take q, k and v (the projections' outputs) as graph inputs, so that the
MatMul rules of other files do not change the expected op lists."""

from __future__ import annotations

import numpy as np
import pytest

from ..conftest import assert_same_outputs, assert_verified, op_list, parse_model
from ..conftest import check_rewrite as _check_rewrite
from ..conftest import optimized as _optimized

# The fused ops are built only where the hardware profile says that they pay: on the default
# cpu profile only for attention without a mask (fuse_unmasked_attention, not fuse_attention:
# test_default_cpu_profile_*). The other tests use the h200 profile, which fuses every one.
FUSE = {"hardware": "h200"}


def optimized(model, **opts):
    return _optimized(model, **{**FUSE, **opts})


def check_rewrite(model, expect_ops, **kwargs):
    return _check_rewrite(model, expect_ops, **{**FUSE, **kwargs})


MHA = "com.microsoft.MultiHeadAttention"
DIMS = {"B": 2, "S": 5, "T": 7}
H, N, D = 8, 2, 4  # hidden size, heads, head size: scale 1/sqrt(D) = 0.5


def static(text: str) -> str:
    """`text` with the declared batch and sequence B and S the numbers of DIMS: the standard
    Attention op is built only on those (onnxruntime's kernel refuses a batch or sequence of 0;
    test_opset_23_symbolic_batch_or_sequence_keeps_the_subgraph)."""
    return text.replace("[B, S, ", f"[{DIMS['B']}, {DIMS['S']}, ").replace("[B, 5, ", f"[{DIMS['B']}, 5, ")


def header(opset: int = 17) -> str:
    return f'<ir_version: {10 if opset >= 21 else 8}, opset_import: ["" : {opset}]>'


def tensor(name: str, shape: list[int], seed: int, dtype: str = "float") -> str:
    a = np.random.default_rng(seed).standard_normal(shape) * 0.5
    vals = ", ".join(f"{x:.6f}" for x in a.ravel())
    return f"{dtype}[{', '.join(map(str, shape))}] {name} = {{{vals}}}"


def attention(inputs: str, outputs: str, body: str, inits: str = "", opset: int = 17) -> str:
    init = f"<{inits}>" if inits else ""
    return f"{header(opset)}\nagraph ({inputs}) => ({outputs}) {init} {{\n{body}\n}}"


# The exported BERT pattern: q/k/v bias Adds, head split with a literal target, K transposed
# to [B, N, d, S] in one Transpose, scores * 1/sqrt(d), an additive mask, heads merged.
SPLIT = f"""
    hs = Constant <value = int64[4] {{0, 0, {N}, {D}}}> ()
    qr = Reshape(qa, hs)
    qh = Transpose <perm = [0, 2, 1, 3]> (qr)
    kr = Reshape(ka, hs)
    kt = Transpose <perm = [0, 2, 3, 1]> (kr)
    vr = Reshape(va, hs)
    vh = Transpose <perm = [0, 2, 1, 3]> (vr)"""
MERGE = f"""
    ot = Transpose <perm = [0, 2, 1, 3]> (o)
    ms = Constant <value = int64[3] {{0, 0, {H}}}> ()
    y = Reshape(ot, ms)"""


def bert_block(mask_type: str = "[B, 1, S, S]", scores_out: bool = False, axis: int = -1,
               dtype: str = "float", kv_seq: str = "S") -> str:
    c = f"c = Constant <value = {dtype} {{0.5}}> ()"
    return attention(
        f"{dtype}[B, S, {H}] q, {dtype}[B, {kv_seq}, {H}] k, {dtype}[B, {kv_seq}, {H}] v, {dtype}{mask_type} m",
        f"{dtype}[B, S, {H}] y" + (f", {dtype}[B, {N}, S, {kv_seq}] ss" if scores_out else ""),
        f"""
    qa = Add(q, bq)
    ka = Add(k, bk)
    va = Add(v, bv){SPLIT}
    s = MatMul(qh, kt)
    {c}
    ss = Mul(s, c)
    sm = Add(ss, m)
    p = Softmax <axis = {axis}> (sm)
    o = MatMul(p, vh){MERGE}""",
        ", ".join(tensor(n, [H], i, dtype) for i, n in enumerate(("bq", "bk", "bv"))),
    )


def gqa_block(opset: int = 17, rotate: bool = False, mask: bool = False) -> str:
    """Llama-style: 2 query heads, 1 kv head repeated for both (Unsqueeze, Expand, Reshape),
    K transposed after the repeat; optionally q rotated in the 4-D head space (a Mul by a
    constant stands for the rotary embedding) and a [B, 1, S, S] mask. Sequence 5."""
    s = 5
    q = "qrot" if rotate else "qh"
    return attention(
        f"float[B, {s}, {H}] qa, float[B, {s}, {D}] ka, float[B, {s}, {D}] va"
        + (f", float[B, 1, {s}, {s}] m" if mask else ""),
        f"float[B, {s}, {H}] y",
        f"""
    hs = Constant <value = int64[4] {{0, 0, {N}, {D}}}> ()
    kvs = Constant <value = int64[4] {{0, 0, 1, {D}}}> ()
    qr = Reshape(qa, hs)
    qh = Transpose <perm = [0, 2, 1, 3]> (qr)
    qrot = Mul(qh, rot)
    kr = Reshape(ka, kvs)
    kh = Transpose <perm = [0, 2, 1, 3]> (kr)
    vr = Reshape(va, kvs)
    vh = Transpose <perm = [0, 2, 1, 3]> (vr)
    two = Constant <value = int64[1] {{2}}> ()
    shk = Shape(kh)
    i0 = Constant <value = int64[1] {{0}}> ()
    i1 = Constant <value = int64[1] {{1}}> ()
    b = Slice(shk, i0, i1)
    rest = Constant <value = int64[4] {{1, {N}, {s}, {D}}}> ()
    s5 = Concat <axis = 0> (b, rest)
    rest4 = Constant <value = int64[3] {{{N}, {s}, {D}}}> ()
    s4 = Concat <axis = 0> (b, rest4)
    ku = Unsqueeze(kh, two)
    ke = Expand(ku, s5)
    kx = Reshape(ke, s4)
    vu = Unsqueeze(vh, two)
    ve = Expand(vu, s5)
    vx = Reshape(ve, s4)
    kt = Transpose <perm = [0, 1, 3, 2]> (kx)
    sc = MatMul({q}, kt)
    c = Constant <value = float {{0.5}}> ()
    ss = Mul(sc, c)
    {"sm = Add(ss, m)" if mask else "sm = Identity(ss)"}
    p = Softmax(sm)
    o = MatMul(p, vx){MERGE}""", tensor("rot", [s, D], 7), opset)


def feeds(model, dims=DIMS, mask_fn=None):
    from eqsat.verification import random_inputs

    f = random_inputs(model, dims)
    if mask_fn is not None:
        f["m"] = mask_fn(f["m"].shape).astype(f["m"].dtype)
    return f


def padding_mask(shape):
    """0 where a key is attended, the lowest float where it is masked (as exporters build
    it); key 0 is never masked, so no row is fully masked."""
    keep = np.random.default_rng(1).random(shape) < 0.7
    keep[..., 0] = True
    return np.where(keep, 0.0, np.finfo(np.float32).min)


def assert_not_fused(model, dims=DIMS, feeds=None, **opts):
    """Optimize; no fused attention op in the result, outputs unchanged."""
    res = optimized(model, **opts)
    got = op_list(res.model)
    assert MHA not in got and "Attention" not in got, f"fused: {sorted(got)}"
    assert "Softmax" in got
    assert_same_outputs(model, res.model, feeds, dims=dims, rtol=1e-4, atol=1e-5)
    assert_verified(model, res, dims)
    return res


# ---- MultiHeadAttention (target ort)

def test_bert_block_becomes_one_multihead_attention():
    m = parse_model(bert_block())
    res = check_rewrite(m, [MHA], feeds=feeds(m, mask_fn=padding_mask),
                        fired=["attention-core", "attention-mha", "attention-mha-kv-3d", "attention-mha-qkv-bias",
                               "attention-merge-heads-literal-h", "attention-merge-heads-by-shape",
                               "attention-split-by-target-n"])
    node = res.model.graph.node[0]
    attrs = {a.name: (a.i if a.type == a.INT else a.f) for a in node.attribute}
    assert attrs == {"num_heads": N, "scale": 0.5}
    assert [bool(i) for i in node.input] == [True, True, True, True, False, True]  # bias, attention_bias


def test_cross_attention_with_another_key_length():
    m = parse_model(bert_block(mask_type="[B, 1, S, T]", kv_seq="T"))
    check_rewrite(m, [MHA], feeds=feeds(m, mask_fn=padding_mask), fired=["attention-mha-kv-3d"])


@pytest.mark.parametrize("target, rule", [
    ("0, 0, -1, 4", "attention-split-by-target"),
    ("-1, 5, 2, 4", "attention-lead-infer"),
    ("0, 5, -1, 4", "attention-lead-static"),
])
def test_split_targets_that_copy_infer_or_repeat_the_leading_dims(target, rule):
    m = parse_model(attention(
        f"float[B, 5, {H}] qa, float[B, 5, {H}] ka, float[B, 5, {H}] va", f"float[B, 5, {H}] y",
        SPLIT.replace(f"{{0, 0, {N}, {D}}}", f"{{{target}}}") + f"""
    s = MatMul(qh, kt)
    p = Softmax(s)
    o = MatMul(p, vh){MERGE}"""))
    check_rewrite(m, [MHA], dims=DIMS, fired=["attention-mha-kv-3d", rule])


def test_vit_block_without_mask_and_with_a_computed_split_target():
    # No mask; scores / sqrt(d); K transposed in two steps; split and merge targets computed
    # from Shape (the oracle makes them literals).
    m = parse_model(attention(
        f"float[B, S, {H}] q, float[B, S, {H}] k, float[B, S, {H}] v", f"float[B, S, {H}] y",
        f"""
    sh = Shape(q)
    i0 = Constant <value = int64[1] {{0}}> ()
    i2 = Constant <value = int64[1] {{2}}> ()
    bs = Slice(sh, i0, i2)
    nd = Constant <value = int64[2] {{{N}, {D}}}> ()
    hs = Concat <axis = 0> (bs, nd)
    qr = Reshape(q, hs)
    qh = Transpose <perm = [0, 2, 1, 3]> (qr)
    kr = Reshape(k, hs)
    kh = Transpose <perm = [0, 2, 1, 3]> (kr)
    vr = Reshape(v, hs)
    vh = Transpose <perm = [0, 2, 1, 3]> (vr)
    kt = Transpose <perm = [0, 1, 3, 2]> (kh)
    s = MatMul(qh, kt)
    c = Constant <value = float {{2.0}}> ()
    sd = Div(s, c)
    p = Softmax <axis = 3> (sd)
    o = MatMul(p, vh)
    ot = Transpose <perm = [0, 2, 1, 3]> (o)
    mone = Constant <value = int64[1] {{-1}}> ()
    ms = Concat <axis = 0> (bs, mone)
    y = Reshape(ot, ms)"""))
    check_rewrite(m, [MHA], dims=DIMS, fired=["attention-scores-div", "attention-mha", "attention-mha-kv-3d",
                                              "attention-merge-heads-literal"],
                  not_fired=["attention-mha-qkv-bias"])


def test_scale_applied_to_q_and_k_separately():
    # q * d^-0.25 and kT * d^-0.25: the scale is their product
    f = D ** -0.25
    m = parse_model(attention(
        f"float[B, S, {H}] qa, float[B, S, {H}] ka, float[B, S, {H}] va", f"float[B, S, {H}] y",
        f"""{SPLIT}
    c = Constant <value = float {{{f!r}}}> ()
    qs = Mul(qh, c)
    ks = Mul(kt, c)
    s = MatMul(qs, ks)
    p = Softmax(s)
    o = MatMul(p, vh){MERGE}"""))
    res = check_rewrite(m, [MHA], dims=DIMS, fired=["attention-scores-scaled-q", "attention-scores-scaled-k"])
    (scale,) = [a.f for a in res.model.graph.node[0].attribute if a.name == "scale"]
    assert scale == pytest.approx(0.5, rel=1e-6)


def test_constant_causal_mask_of_rank_2():
    # a [S, S] constant mask goes in as attention_bias [1, 1, S, S] (the Unsqueeze folds)
    s = 5
    causal = np.triu(np.full((s, s), np.finfo(np.float32).min), 1)
    vals = ", ".join(repr(float(x)) for x in causal.ravel())
    m = parse_model(attention(
        f"float[B, {s}, {H}] qa, float[B, {s}, {H}] ka, float[B, {s}, {H}] va", f"float[B, {s}, {H}] y",
        f"""{SPLIT}
    s = MatMul(qh, kt)
    c = Constant <value = float {{0.5}}> ()
    ss = Mul(c, s)
    sm = Add(cm, ss)
    p = Softmax(sm)
    o = MatMul(p, vh){MERGE}""", f"float[{s}, {s}] cm = {{{vals}}}"))
    check_rewrite(m, [MHA], dims=DIMS, fired=["attention-scores-mul-left", "attention-mask-left",
                                              "attention-mask-fits-2d", "attention-mha-bias-2d"])


def test_mask_of_rank_3_is_unsqueezed():
    m = parse_model(attention(
        f"float[B, S, {H}] qa, float[B, S, {H}] ka, float[B, S, {H}] va, float[{N}, S, S] m",
        f"float[B, S, {H}] y",
        f"""{SPLIT}
    s = MatMul(qh, kt)
    sm = Add(s, m)
    p = Softmax(sm)
    o = MatMul(p, vh){MERGE}"""))
    res = check_rewrite(m, [MHA, "Unsqueeze"], dims=DIMS,
                        fired=["attention-mask-fits-3d", "attention-mha-bias-3d"])
    (scale,) = [a.f for a in res.model.graph.node[-1].attribute if a.name == "scale"]
    assert scale == 1.0  # no scaling in the pattern: not MultiHeadAttention's default 1/sqrt(d)


def test_llama_block_rotated_query_and_repeated_kv_heads():
    # q is rotated in the 4-D head space, k and v have one head repeated for the two query
    # heads (GQA): MultiHeadAttention takes the 4-D (BNSH) key and value, and the query
    # merged back to 3-D.
    m = parse_model(gqa_block(rotate=True, mask=True))
    # left: the rotation (Mul); the query split and merged back to 3-D; the k and v
    # splits (Reshape, Transpose) and repeats (Unsqueeze, Expand, Reshape); the Expand target
    kv = ["Reshape", "Transpose", "Unsqueeze", "Expand", "Reshape"]
    check_rewrite(m, [MHA, "Mul"] + 2 * ["Reshape", "Transpose"] + 2 * kv + ["Shape", "Slice", "Concat"],
                  feeds=feeds(m, mask_fn=padding_mask), fired=["attention-mha", "attention-mha-bias-4d"],
                  not_fired=["attention-mha-kv-3d"])


def test_merging_heads_that_were_transposed_or_regrouped_stays():
    # x [B, 2, 8] split into 2 heads of 4, then the heads' Transpose merged back with
    # [0, 0, -1], [0, 0, 8] and a computed [B, 2, 8] (guard: the merge Reshape reads the split
    # itself): with 2 heads and 2 positions each result has x's shape, but not x's values;
    # and the split merged as [0, -1, 4] (guard: x's dims 0 and 1 kept) is [B, 4, 4]
    m = parse_model(header() + """
        agraph (float[B, 2, 8] x) => (float[B, 2, 8] y1, float[B, 2, 8] y2, float[B, 2, 8] y3, float[B, 4, 4] y4) {
            hs = Constant <value = int64[4] {0, 0, 2, 4}> ()
            r = Reshape(x, hs)
            t = Transpose <perm = [0, 2, 1, 3]> (r)
            m1 = Constant <value = int64[3] {0, 0, -1}> ()
            y1 = Reshape(t, m1)
            m2 = Constant <value = int64[3] {0, 0, 8}> ()
            y2 = Reshape(t, m2)
            sh = Shape(x)
            i0 = Constant <value = int64[1] {0}> ()
            i1 = Constant <value = int64[1] {1}> ()
            b = Slice(sh, i0, i1)
            rest = Constant <value = int64[2] {2, 8}> ()
            m3 = Concat <axis = 0> (b, rest)
            y3 = Reshape(t, m3)
            m4 = Constant <value = int64[3] {0, -1, 4}> ()
            y4 = Reshape(r, m4)
        }""")
    check_rewrite(m, ["Reshape", "Transpose"] + 4 * ["Reshape"], dims={"B": 2}, fired=["attention-split-by-shape"],
                  not_fired=["attention-merge-heads-literal", "attention-merge-heads-literal-h",
                             "attention-merge-heads-by-shape"])


# ---- the standard Attention op (opset >= 23)

def vit_block(opset: int, mask: str = "") -> str:
    extra_in = f", {mask} m" if mask else ""
    add = "sm = Add(ss, m)" if mask else "sm = Identity(ss)"
    return attention(
        f"float[B, S, {H}] qa, float[B, S, {H}] ka, float[B, S, {H}] va{extra_in}", f"float[B, S, {H}] y",
        f"""{SPLIT}
    s = MatMul(qh, kt)
    c = Constant <value = float {{0.5}}> ()
    ss = Mul(s, c)
    {add}
    p = Softmax(sm)
    o = MatMul(p, vh){MERGE}""", opset=opset)


def test_opset_23_target_onnx_builds_attention_with_3d_inputs():
    m = parse_model(static(vit_block(23)))
    res = check_rewrite(m, ["Attention"], dims=DIMS, target="onnx", fired=["attention-std", "attention-std-3d"],
                        not_fired=["attention-mha"])
    attrs = {a.name: (a.i if a.type == a.INT else a.f) for a in res.model.graph.node[0].attribute}
    assert attrs == {"q_num_heads": N, "kv_num_heads": N, "scale": 0.5}


def test_opset_23_grouped_query_attention_drops_the_repeat():
    # Attention maps query head h to kv head h / g itself: the repeat goes
    m = parse_model(static(gqa_block(opset=23)))
    res = check_rewrite(m, ["Attention"], dims=DIMS, target="onnx",
                        fired=["attention-std-gqa", "attention-std-3d"])
    attrs = {a.name: a.i for a in res.model.graph.node[0].attribute if a.type == a.INT}
    assert attrs == {"q_num_heads": N, "kv_num_heads": 1}


def test_opset_23_rotated_query_keeps_its_heads():
    # q rotated in the 4-D head space is not a Transpose of a head split (guard of
    # attention-std-3d): Attention takes the 4-D q, k and v; the kv repeat still goes
    m = parse_model(static(gqa_block(opset=23, rotate=True)))
    check_rewrite(m, ["Attention", "Mul"] + 3 * ["Reshape", "Transpose"] + ["Reshape", "Transpose"], dims=DIMS,
                  target="onnx", fired=["attention-std", "attention-std-gqa"], not_fired=["attention-std-3d"])


def gqa_tiled(axis: int, opset: int = 17, mask: bool = False) -> str:
    """4 query heads and 2 kv heads of size 2, the kv heads repeated by Unsqueeze(axis),
    Expand and Reshape: axis 2 repeats each kv head in place ([B, 2, 2, S, d]: query head h
    reads kv head h // 2, as grouped-query attention does), axis 1 tiles them ([B, 2, 2, S, d]
    the other way: query head h reads kv head h % 2). Sequence 5, hidden 8."""
    return attention(
        "float[B, 5, 8] qa, float[B, 5, 4] ka, float[B, 5, 4] va" + (", float[B, 1, 5, 5] m" if mask else ""),
        "float[B, 5, 8] y",
        f"""
    hs = Constant <value = int64[4] {{0, 0, 4, 2}}> ()
    kvs = Constant <value = int64[4] {{0, 0, 2, 2}}> ()
    qr = Reshape(qa, hs)
    qh = Transpose <perm = [0, 2, 1, 3]> (qr)
    kr = Reshape(ka, kvs)
    kh = Transpose <perm = [0, 2, 1, 3]> (kr)
    vr = Reshape(va, kvs)
    vh = Transpose <perm = [0, 2, 1, 3]> (vr)
    ax = Constant <value = int64[1] {{{axis}}}> ()
    shk = Shape(kh)
    i0 = Constant <value = int64[1] {{0}}> ()
    i1 = Constant <value = int64[1] {{1}}> ()
    b = Slice(shk, i0, i1)
    rest = Constant <value = int64[4] {{2, 2, 5, 2}}> ()
    s5 = Concat <axis = 0> (b, rest)
    rest4 = Constant <value = int64[3] {{4, 5, 2}}> ()
    s4 = Concat <axis = 0> (b, rest4)
    ku = Unsqueeze(kh, ax)
    ke = Expand(ku, s5)
    kx = Reshape(ke, s4)
    vu = Unsqueeze(vh, ax)
    ve = Expand(vu, s5)
    vx = Reshape(ve, s4)
    kt = Transpose <perm = [0, 1, 3, 2]> (kx)
    sc = MatMul(qh, kt)
    c = Constant <value = float {{0.5}}> ()
    ss = Mul(sc, c)
    {"sm = Add(ss, m)" if mask else "sm = Identity(ss)"}
    p = Softmax(sm)
    o = MatMul(p, vx){MERGE}""", opset=opset)


TILE = ["Shape", "Slice", "Concat"] + 2 * ["Unsqueeze", "Expand", "Reshape"]  # the repeat, left as it is


@pytest.mark.parametrize("axis", [2, 1])
def test_opset_23_drops_only_a_repeat_of_each_kv_head_in_place(axis):
    # Attention maps query head h to kv head h // g: it can take the kv heads unrepeated only
    # where they were repeated in place (guard of attention-std-gqa: Unsqueeze at axis 2)
    m = parse_model(static(gqa_tiled(axis, opset=23)))
    if axis == 2:
        check_rewrite(m, ["Attention"], dims=DIMS, target="onnx", fired=["attention-std-gqa"])
    else:
        # q, k, v split and the heads merged around the 4-D Attention; the repeat stays
        # (the repeat's target, of a static batch, folded to a constant)
        check_rewrite(m, ["Attention"] + 3 * ["Reshape", "Transpose"] + ["Transpose", "Reshape"] + TILE[3:],
                      dims=DIMS, target="onnx", fired=["attention-std"], not_fired=["attention-std-gqa"])


@pytest.mark.parametrize("axis", [2, 1])
def test_grouped_query_products_only_for_a_repeat_of_each_kv_head_in_place(axis):
    # on the cpu profile (grouped_query_matmul), masked: the products take the kv heads
    # unrepeated only where query head h reads kv head h // g (guard: Unsqueeze at axis 2)
    m = parse_model(gqa_tiled(axis, mask=True))
    split = 3 * ["Reshape", "Transpose"] + ["Transpose", "Reshape"]  # q, k, v split; heads merged
    rules = ["attention-grouped-query-matmul", "attention-grouped-query-fused-matmul"]
    if axis == 2:
        check_rewrite(m, split + 4 * ["Reshape"] + ["com.microsoft.FusedMatMul", "MatMul", "Add", "Softmax"],
                      hardware="cpu", feeds=feeds(m, mask_fn=padding_mask), fired=rules)
    else:
        check_rewrite(m, split + TILE + ["com.microsoft.FusedMatMul", "MatMul", "Add", "Softmax"],
                      hardware="cpu", feeds=feeds(m, mask_fn=padding_mask), not_fired=rules)


def test_opset_23_target_ort_builds_both_and_extracts_one():
    # MultiHeadAttention and the 3-D Attention cost the same: either is a valid result
    m = parse_model(static(vit_block(23)))
    res = optimized(m)
    assert op_list(res.model) in (["Attention"], [MHA])
    matches = res.report["saturation"]["rule_matches"]
    assert matches.get("attention-std-3d", 0) > 0 and matches.get("attention-mha-kv-3d", 0) > 0
    assert_same_outputs(m, res.model, dims=DIMS, rtol=1e-4, atol=1e-5)
    assert_verified(m, res, DIMS)


# ---- where no fused op may be built

def test_default_cpu_profile_keeps_the_subgraph_with_a_mask():
    # the block is recognized (attention-core) but, on the cpu profile, not fused: there
    # MultiHeadAttention with a mask measured no faster than the subgraph
    # (extract/hardware/cpu.json, fuse_attention)
    m = parse_model(bert_block())
    res = assert_not_fused(m, hardware="cpu", feeds=feeds(m, mask_fn=padding_mask))
    matches = res.report["saturation"]["rule_matches"]
    assert matches.get("attention-core", 0) > 0
    assert matches.get("attention-pays", 0) == 0 and matches.get("attention-pays-unmasked", 0) == 0
    assert matches.get("attention-mha", 0) == 0 and matches.get("attention-std", 0) == 0


def test_default_cpu_profile_fuses_attention_without_a_mask():
    # without a mask MultiHeadAttention measured faster than the subgraph on the cpu profile
    # (fuse_unmasked_attention): ViT's attention is fused there, its biases moved into the op
    m = parse_model(vit_block(17))
    check_rewrite(m, [MHA], dims=DIMS, hardware="cpu", fired=["attention-pays-unmasked", "attention-mha"],
                  not_fired=["attention-pays"])


def test_an_all_zero_mask_is_no_mask_on_the_cpu_profile():
    # the dynamo exporter's ViT adds Where(Expand(trues), 0, lowest) to the scores: all zeros,
    # over the symbolic batch; the Add goes (add-splat-zero) and the attention is unmasked
    m = parse_model(attention(
        f"float[B, 5, {H}] qa, float[B, 5, {H}] ka, float[B, 5, {H}] va", f"float[B, 5, {H}] y",
        f"""{SPLIT}
    s = MatMul(qh, kt)
    c = Constant <value = float {{0.5}}> ()
    ss = Mul(s, c)
    sh = Shape(qa)
    i0 = Constant <value = int64[1] {{0}}> ()
    i1 = Constant <value = int64[1] {{1}}> ()
    b = Slice(sh, i0, i1)
    rest = Constant <value = int64[3] {{1, 5, 5}}> ()
    target = Concat <axis = 0> (b, rest)
    big = Expand(keep, target)
    zero = Constant <value = float {{0.0}}> ()
    low = Constant <value = float {{-3.4028234663852886e+38}}> ()
    mask = Where(big, zero, low)
    sm = Add(ss, mask)
    p = Softmax(sm)
    o = MatMul(p, vh){MERGE}""", inits="bool[1, 1, 5, 1] keep = {1, 1, 1, 1, 1}"))
    check_rewrite(m, [MHA], dims={"B": 2}, hardware="cpu",
                  fired=["add-splat-zero", "attention-pays-unmasked", "attention-mha"], not_fired=["attention-pays"])


def test_a_profile_without_either_attention_key_keeps_unmasked_attention(tmp_path):
    import json

    from eqsat.extract.costs.roofline import HARDWARE_DIR

    prof = json.loads((HARDWARE_DIR / "cpu.json").read_text())
    prof["fuse_unmasked_attention"] = False
    path = tmp_path / "no-attention.json"
    path.write_text(json.dumps(prof))
    m = parse_model(vit_block(17))
    res = assert_not_fused(m, hardware=str(path))
    assert res.report["saturation"]["rule_matches"].get("attention-core", 0) > 0


# ---- grouped-query products (cpu profiles: grouped_query_matmul)


def test_default_cpu_profile_runs_grouped_query_products_on_the_unrepeated_kv_heads():
    # masked GQA is not fused on the cpu profile; there both products take the one kv head
    # as it is, the two query heads stacked as rows (Reshape [0, 1, -1, 0]): no Expand left,
    # and the scale still folded into FusedMatMul's alpha
    m = parse_model(gqa_block(rotate=True, mask=True))
    res = check_rewrite(m, ["Mul"] + 3 * ["Reshape", "Transpose"]
                        + 2 * ["Reshape", "Reshape"] + ["com.microsoft.FusedMatMul", "MatMul", "Add", "Softmax"]
                        + ["Transpose", "Reshape"], hardware="cpu", feeds=feeds(m, mask_fn=padding_mask),
                        fired=["attention-grouped-query-fused-matmul", "attention-grouped-query-matmul"],
                        not_fired=["attention-grouped-query-fused-matmul-symbolic",
                                   "attention-grouped-query-matmul-symbolic"])
    (fmm,) = [n for n in res.model.graph.node if n.op_type == "FusedMatMul"]
    attrs = {a.name: (a.i if a.type == a.INT else a.f) for a in fmm.attribute}
    assert attrs.get("alpha") == 0.5 and attrs.get("transB") == 1


def test_a_profile_without_grouped_query_matmul_keeps_the_repeated_heads(tmp_path):
    import json

    from eqsat.extract.costs.roofline import HARDWARE_DIR

    prof = json.loads((HARDWARE_DIR / "cpu.json").read_text())
    del prof["grouped_query_matmul"]
    path = tmp_path / "no-grouping.json"
    path.write_text(json.dumps(prof))
    m = parse_model(gqa_block(rotate=True, mask=True))
    res = assert_not_fused(m, hardware=str(path), feeds=feeds(m, mask_fn=padding_mask))
    got = op_list(res.model)
    assert got.count("Expand") == 2, got
    matches = res.report["saturation"]["rule_matches"]
    assert matches.get("attention-grouped-query-matmul", 0) == 0
    assert matches.get("attention-grouped-query-fused-matmul", 0) == 0


UNFUSED = 4 * ["Reshape", "Transpose"] + ["MatMul", "Mul", "Softmax", "MatMul"]  # vit_block as written


def test_target_onnx_before_opset_23_has_no_fused_attention():
    # recognized, but the standard Attention op needs opset 23 (and MultiHeadAttention target ort)
    m = parse_model(vit_block(17))
    check_rewrite(m, UNFUSED, dims=DIMS, target="onnx", fired=["attention-core"],
                  not_fired=["attention-std", "attention-mha"])


@pytest.mark.parametrize("sizes", [{"B": 0, "S": 5}, {"B": 2, "S": 0}], ids=["batch-0", "sequence-0"])
def test_opset_23_symbolic_batch_or_sequence_keeps_the_subgraph(sizes):
    # onnxruntime's Attention kernel refuses a batch, a query sequence or a key sequence of 0
    # ("Batch size must be greater than 0"), which the subgraph runs: with a symbolic batch or
    # sequence the standard op is not built (guard of attention-std: both numbers >= 1).
    # Before, eqsat refused to write such a model (verification at B=0 failed), and with --dim
    # binding B and S it wrote one that failed at B=0
    import eqsat

    m = parse_model(vit_block(23))
    check_rewrite(m, UNFUSED, dims=sizes, target="onnx", fired=["attention-core"], not_fired=["attention-std"])
    eqsat.optimize(m, target="onnx")  # verified, B=0 and S=0 among its runs: not refused


def test_attention_with_an_input_mask_stays_at_opset_23_target_onnx():
    # onnxruntime's Attention kernel reads a mask entry equal to the lowest float as -inf:
    # a fully masked row would give 0 instead of the unfused graph's mean of v (guard: the
    # mask absent or a constant)
    m = parse_model(vit_block(23, mask="float[B, 1, S, S]"))
    check_rewrite(m, UNFUSED + ["Add"], dims=DIMS, target="onnx", fired=["attention-core"],
                  not_fired=["attention-std"])


def test_softmax_over_another_axis_is_not_attention():
    m = parse_model(bert_block(axis=2))
    res = assert_not_fused(m)
    assert res.report["saturation"]["rule_matches"].get("attention-core", 0) == 0


def test_mask_broadcast_over_queries_is_refused():
    # attention_bias must be [.., Sq, Skv]; a [B, 1, 1, S] mask broadcast over queries is not
    m = parse_model(bert_block(mask_type="[B, 1, 1, S]"))
    res = assert_not_fused(m)
    assert res.report["saturation"]["rule_matches"].get("attention-mask", 0) > 0
    assert res.report["saturation"]["rule_matches"].get("attention-mask-fits-4d", 0) == 0


def test_double_attention_stays():
    m = parse_model(bert_block(dtype="double"))
    res = assert_not_fused(m)
    assert res.report["saturation"]["rule_matches"].get("attention-core", 0) == 0


def test_key_batch_broadcast_is_refused():
    # k and v of batch 1 broadcast over the query's batch in the MatMuls; MultiHeadAttention
    # needs one batch size
    m = parse_model(attention(
        f"float[B, S, {H}] qa, float[1, S, {H}] ka, float[1, S, {H}] va", f"float[B, S, {H}] y",
        f"""{SPLIT}
    s = MatMul(qh, kt)
    p = Softmax(s)
    o = MatMul(p, vh){MERGE}"""))
    res = assert_not_fused(m)
    assert res.report["saturation"]["rule_matches"].get("attention-core", 0) == 0


def test_value_head_size_other_than_the_query_s_is_refused():
    # MultiHeadAttention with a 4-D key and value needs one head size for both
    m = parse_model(attention(
        f"float[B, S, {H}] qa, float[B, S, {H}] ka, float[B, S, {N * 2}] v", f"float[B, S, {N * 2}] y",
        f"""
    hs = Constant <value = int64[4] {{0, 0, {N}, {D}}}> ()
    vs = Constant <value = int64[4] {{0, 0, {N}, 2}}> ()
    qr = Reshape(qa, hs)
    qh = Transpose <perm = [0, 2, 1, 3]> (qr)
    kr = Reshape(ka, hs)
    kt = Transpose <perm = [0, 2, 3, 1]> (kr)
    vr = Reshape(v, vs)
    vh = Transpose <perm = [0, 2, 1, 3]> (vr)
    s = MatMul(qh, kt)
    p = Softmax(s)
    o = MatMul(p, vh)
    ot = Transpose <perm = [0, 2, 1, 3]> (o)
    ms = Constant <value = int64[3] {{0, 0, {N * 2}}}> ()
    y = Reshape(ot, ms)"""))
    res = assert_not_fused(m)
    assert res.report["saturation"]["rule_matches"].get("attention-scores", 0) > 0


def test_shared_scores_keep_the_unfused_core():
    # the scaled scores are also a graph output: fusing the attention would compute q.kT twice
    # (once for the output, once inside MultiHeadAttention); no program does more products
    # than its input (extract/work.py), so the core stays unfused
    m = parse_model(bert_block(scores_out=True))
    res = assert_not_fused(m, feeds=feeds(m, mask_fn=padding_mask))
    assert res.report["work"]["output"]["contractions"] <= res.report["work"]["input"]["contractions"]


def test_shared_scores_stay_correct():
    # The scaled scores are also a graph output. Today the fusion is still taken: the scores
    # keep their own MatMul (a FusedMatMul with the scale) and the q/k splits, and
    # MultiHeadAttention replaces the mask Add, Softmax, MatMul and the merge, so the op count
    # drops (8 < 15), at the price of computing q.kT twice. The outputs are right either way.
    m = parse_model(bert_block(scores_out=True))
    res = optimized(m)
    assert "MatMul" in str(op_list(res.model))  # the shared scores are still computed
    assert_same_outputs(m, res.model, feeds(m, mask_fn=padding_mask), rtol=1e-4, atol=1e-5)
    assert_verified(m, res)



# ---- the scale a fused op is given: MultiHeadAttention reads scale 0 as "the default,
# 1/sqrt(d)", the standard Attention refuses a scale <= 0, and either takes it as a float32


def scaled_vit_block(scale: str, opset: int = 17, second: str | None = None) -> str:
    return attention(
        f"float[B, S, {H}] qa, float[B, S, {H}] ka, float[B, S, {H}] va", f"float[B, S, {H}] y",
        f"""{SPLIT}
    s = MatMul(qh, kt)
    c = Constant <value = float {{{scale}}}> ()
    ss = Mul(s, c)
    c2 = Constant <value = float {{{second or scale}}}> ()
    s2 = Mul(ss, c2)
    p = Softmax(s2)
    o = MatMul(p, vh){MERGE}""", opset=opset)


@pytest.mark.parametrize("scale", ["0.0", "1e30", "1e-30"])
@pytest.mark.parametrize("target, opset", [("ort", 17), ("onnx", 23)])
def test_a_scale_the_fused_op_would_misread_keeps_the_subgraph(scale, target, opset):
    # scores * 0 (uniform attention: the mean of v), scores * 1e30 * 1e30 (1e60, no float32)
    # and * 1e-30 * 1e-30 (1e-60, 0 as a float32): unfused
    m = parse_model(scaled_vit_block(scale, opset))
    res = optimized(m, dims=DIMS, target=target)
    assert not {"MultiHeadAttention", "Attention"} & {n.op_type for n in res.model.graph.node}, op_list(res.model)
    assert_same_outputs(m, res.model, dims=DIMS, rtol=1e-5, atol=1e-6, ort_optimize=False)
    assert_verified(m, res, DIMS)


@pytest.mark.parametrize("target, opset, fused", [("ort", 17, MHA), ("onnx", 23, None)])
def test_a_negative_scale_only_goes_to_multihead_attention(target, opset, fused):
    m = parse_model(scaled_vit_block("-0.5", opset, second="0.5"))
    res = optimized(m, dims=DIMS, target=target)
    ops = op_list(res.model)
    assert (fused in ops) if fused else ("Attention" not in ops), ops
    assert_same_outputs(m, res.model, dims=DIMS, rtol=1e-5, atol=1e-6, ort_optimize=False)
    assert_verified(m, res, DIMS)


# ---- empty values: a batch or sequence of 0 (static, or a symbolic size the caller binds to 0)
# Where the leading dims hold no element, the element count fixes nothing, and onnxruntime
# refuses a Reshape target whose -1 stands beside a 0 (size 0 is not divisible by 0).


def test_merging_heads_of_an_empty_value_keeps_the_merge_s_shape():
    # x [0, 3, 8] split into heads [0, 3, 2, 4], then reshaped to [0, 3, 5]: also 0 elements,
    # with x's dims 0 and 1; the merge is not x (it was rewritten to x, of shape [0, 3, 8])
    m = parse_model(header() + """
        agraph (float[0, 3, 8] x) => (float[0, 3, 5] y) {
            hs = Constant <value = int64[4] {0, 0, 2, 4}> ()
            r = Reshape(x, hs)
            ms = Constant <value = int64[3] {0, 3, 5}> ()
            y = Reshape(r, ms)
        }""")
    res = check_rewrite(m, (["Reshape"], ["Reshape", "Reshape"]), not_fired=["attention-merge-heads-by-shape",
                                                                          "attention-merge-heads-by-shape-inferred"])
    assert [d.dim_value for d in res.model.graph.output[0].type.tensor_type.shape.dim] == [0, 3, 5]


def test_merging_heads_back_with_an_inferred_width_cancels_the_split():
    # ViT's export: x [B, 197, 768] split as [0, 0, 12, 64], merged as [0, 197, -1]; the -1 is
    # 768 wherever there are elements (with none onnxruntime refuses it, in the input too), but
    # inference leaves the merge's width a new symbol
    m = parse_model(header() + """
        agraph (float[B, 3, 8] x) => (float[B, 3, N] y) {
            hs = Constant <value = int64[4] {0, 0, 2, 4}> ()
            r = Reshape(x, hs)
            ms = Constant <value = int64[3] {0, 3, -1}> ()
            y = Reshape(r, ms)
        }""")
    check_rewrite(m, (["Identity"], []), fired=["attention-merge-heads-by-shape-inferred"], dims={"B": 2})


@pytest.mark.parametrize("rotate, hardware", [(True, "h200"), (True, "cpu"), (False, "cpu")])
@pytest.mark.parametrize("batch", [0, 2])
def test_grouped_and_fused_attention_runs_on_an_empty_batch(rotate, hardware, batch):
    # The fused forms reshape with computed sizes: MultiHeadAttention's query merged back to
    # 3-D as [0, 0, -1] and the grouped-query products' rows regrouped as [0, nk, -1, 0] made
    # onnxruntime refuse a batch of 0, which the original runs (its outputs are empty)
    m = parse_model(gqa_block(rotate=rotate, mask=True))
    res = optimized(m, hardware=hardware)
    dims = {**DIMS, "B": batch}
    assert_same_outputs(m, res.model, feeds(m, dims, mask_fn=padding_mask), rtol=1e-4, atol=1e-5, ort_optimize=False)
    assert_verified(m, res, dims)


def gqa_symbolic_block() -> str:
    """gqa_block with a symbolic sequence length S and a mask: the regrouped rows
    g * S have no literal size. The repeat's target is computed with allowzero, so that a
    sequence of 0 is a size, not a copy."""
    return attention(
        f"float[B, S, {H}] qa, float[B, S, {D}] ka, float[B, S, {D}] va, float[B, 1, S, S] mk",
        f"float[B, S, {H}] y",
        f"""
    hs = Constant <value = int64[4] {{0, 0, {N}, {D}}}> ()
    kvs = Constant <value = int64[4] {{0, 0, 1, {D}}}> ()
    qr = Reshape(qa, hs)
    qh = Transpose <perm = [0, 2, 1, 3]> (qr)
    qrot = Mul(qh, two_f)
    kr = Reshape(ka, kvs)
    kh = Transpose <perm = [0, 2, 1, 3]> (kr)
    vr = Reshape(va, kvs)
    vh = Transpose <perm = [0, 2, 1, 3]> (vr)
    two = Constant <value = int64[1] {{2}}> ()
    shk = Shape(kh)
    i0 = Constant <value = int64[1] {{0}}> ()
    i1 = Constant <value = int64[1] {{1}}> ()
    i2 = Constant <value = int64[1] {{2}}> ()
    i3 = Constant <value = int64[1] {{3}}> ()
    b = Slice(shk, i0, i1)
    sl = Slice(shk, i2, i3)
    nh = Constant <value = int64[1] {{1}}> ()
    g = Constant <value = int64[1] {{{N}}}> ()
    d = Constant <value = int64[1] {{{D}}}> ()
    s5 = Concat <axis = 0> (b, nh, g, sl, d)
    s4 = Concat <axis = 0> (b, g, sl, d)
    ku = Unsqueeze(kh, two)
    ke = Expand(ku, s5)
    kx = Reshape <allowzero = 1> (ke, s4)
    vu = Unsqueeze(vh, two)
    ve = Expand(vu, s5)
    vx = Reshape <allowzero = 1> (ve, s4)
    kt = Transpose <perm = [0, 1, 3, 2]> (kx)
    sc = MatMul(qrot, kt)
    c = Constant <value = float {{0.5}}> ()
    ss = Mul(sc, c)
    m = Add(ss, mk)
    p = Softmax(m)
    o = MatMul(p, vx){MERGE}""", "float two_f = {2.0}")


@pytest.mark.parametrize("dims", [{"B": 0, "S": 5}, {"B": 2, "S": 0}, {"B": 2, "S": 5}])
def test_grouped_query_products_of_a_symbolic_sequence_run_on_empty_sizes(dims):
    # batch and sequence symbolic: the rows' regrouping has no literal target without a -1
    # beside the batch's copy (refused for B = 0, and for S = 0, where the scores' last dim is
    # 0 too), so the targets are computed from the shape at run time
    # (the products still take the kv heads as they are: no Expand; the rotation by 2 is in alpha)
    m = parse_model(gqa_symbolic_block())
    regroup = ["Shape", "Mul", "Div", "Reshape"]
    check_rewrite(m, 3 * ["Reshape", "Transpose"] + 4 * regroup
                  + ["com.microsoft.FusedMatMul", "Add", "Softmax", "MatMul", "Transpose", "Reshape"],
                  hardware="cpu", dims=dims, ort_optimize=False,
                  fired=["attention-grouped-query-fused-matmul-symbolic", "attention-grouped-query-matmul-symbolic"],
                  not_fired=["attention-grouped-query-fused-matmul", "attention-grouped-query-matmul"])


@pytest.mark.parametrize("first, second", [("1e30", "1e-30"), ("1e-30", "1e30")])
def test_scales_on_either_side_of_one_are_not_one_scale(first, second):
    # scores * 1e30 * 1e-30 overflow to inf where the scores exceed 3.4e8 (q and k of 1e5 here),
    # and a softmax row with inf is NaN; as MultiHeadAttention's one scale of 1 they were
    # finite. (* 1e-30 * 1e30 loses the scores below 1e-8 in the same way.) Only scales on the
    # same side of 1 become one
    m = parse_model(scaled_vit_block(first, second=second))
    f = feeds(m)
    f["qa"], f["ka"] = f["qa"] * 1e5, f["ka"] * (1e5 if first == "1e30" else 1e-20)
    res = optimized(m, dims=DIMS)
    assert MHA not in op_list(res.model), op_list(res.model)
    assert_same_outputs(m, res.model, f, rtol=1e-4, atol=1e-5, ort_optimize=False)
    assert_verified(m, res, DIMS)
