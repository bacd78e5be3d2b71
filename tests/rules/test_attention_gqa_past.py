"""rules/attention.egg's attention-gqa-past: a grouped-query decoder step (n query heads sharing
nk kv heads; the cache Concat(past, new) of nk heads, repeated g = n / nk times by
Reshape(Expand(Unsqueeze(cache, [2]))) as transformers' repeat_kv writes it) becomes one
com.microsoft.MultiHeadAttention over the nk kv heads with past_key / past_value, the g query
heads of each kv head stacked as rows and the mask tiled over them. It keeps the original's
outputs under onnxruntime for any mask (GroupQueryAttention would read the mask as sequence
lengths, wrong where a row's ones do not come first: left padding, as here). It stays where the
mask differs per head, the heads do not group, or the profile does not fuse cached attention."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from ..conftest import assert_same_outputs, assert_verified, check_rewrite, optimized, parse_model

B, NH, NK, D = 2, 4, 2, 4  # batch, query heads, kv heads, head size
G = NH // NK
MHA = "com.microsoft.MultiHeadAttention"


def gqa_model(new: int, past: int, mask_heads: int = 1, kv_heads: int = NK, reps: int = G,
              tiled: bool = False, q4: bool = False) -> str:
    """One grouped-query attention layer of a decoder step with static sizes: q [B, new, NH*D],
    k, v [B, new, kv_heads*D] split into heads, appended to the caches [B, kv_heads, past, D],
    each kv head repeated `reps` times (`tiled`: the kv heads tiled, [0, 1, 0, 1]), scores * 0.5 +
    m [B, mask_heads, new, past + new]. q4: q comes in heads, [B, NH, new, D] (not split from a
    3-D value)."""
    t, hk = past + new, kv_heads * D
    q_in = f"float[{B}, {NH}, {new}, {D}] qh" if q4 else f"float[{B}, {new}, {NH * D}] q"

    def repeat(c: str) -> str:
        if tiled:  # kv head h % kv_heads for query head h: not repeat_kv's h / reps
            return f"{c}r = Tile(present_{c}, tile4)"
        return (f"{c}u = Unsqueeze(present_{c}, ax2)\n{c}e = Expand({c}u, e5)\n{c}r = Reshape({c}e, r4)")

    return f'''<ir_version: 8, opset_import: ["" : 17]>
    agraph ({q_in}, float[{B}, {new}, {hk}] k, float[{B}, {new}, {hk}] v,
            float[{B}, {kv_heads}, {past}, {D}] past_k, float[{B}, {kv_heads}, {past}, {D}] past_v,
            float[{B}, {mask_heads}, {new}, {t}] m)
        => (float[{B}, {new}, {NH * D}] y, float[{B}, {kv_heads}, {t}, {D}] present_k,
            float[{B}, {kv_heads}, {t}, {D}] present_v) {{
        hq = Constant <value = int64[4] {{0, 0, {NH}, {D}}}> ()
        hkv = Constant <value = int64[4] {{0, 0, {kv_heads}, {D}}}> ()
        ax2 = Constant <value = int64[1] {{2}}> ()
        e5 = Constant <value = int64[5] {{{B}, {kv_heads}, {reps}, {t}, {D}}}> ()
        r4 = Constant <value = int64[4] {{{B}, {kv_heads * reps}, {t}, {D}}}> ()
        tile4 = Constant <value = int64[4] {{1, {reps}, 1, 1}}> ()
        {"" if q4 else "qs = Reshape(q, hq)"}
        {"" if q4 else "qh = Transpose <perm = [0, 2, 1, 3]> (qs)"}
        ks = Reshape(k, hkv)
        kh = Transpose <perm = [0, 2, 1, 3]> (ks)
        vs = Reshape(v, hkv)
        vh = Transpose <perm = [0, 2, 1, 3]> (vs)
        present_k = Concat <axis = -2> (past_k, kh)
        present_v = Concat <axis = -2> (past_v, vh)
        {repeat("k")}
        {repeat("v")}
        kt = Transpose <perm = [0, 1, 3, 2]> (kr)
        half = Constant <value = float {{0.5}}> ()
        qk = MatMul(qh, kt)
        sc = Mul(qk, half)
        sm = Add(sc, m)
        p = Softmax <axis = -1> (sm)
        o = MatMul(p, vr)
        ot = Transpose <perm = [0, 2, 1, 3]> (o)
        merge = Constant <value = int64[3] {{0, 0, {NH * D}}}> ()
        y = Reshape(ot, merge)
    }}'''


def gqa_feeds(new: int, past: int, mask_heads: int = 1, kv_heads: int = NK, q4: bool = False) -> dict:
    """Random q, k, v and caches; a padding mask (0 or the lowest float) with left padding on
    the second row, each query keeping its last key."""
    rng = np.random.default_rng(0)
    f = {"qh": rng.standard_normal((B, NH, new, D)).astype(np.float32)} if q4 else \
        {"q": rng.standard_normal((B, new, NH * D)).astype(np.float32)}
    f.update({c: rng.standard_normal((B, new, kv_heads * D)).astype(np.float32) for c in "kv"})
    f.update({c: rng.standard_normal((B, kv_heads, past, D)).astype(np.float32) for c in ("past_k", "past_v")})
    keep = rng.random((B, mask_heads, new, past + new)) < 0.7
    keep[1, ..., :2] = False  # left padding
    keep[..., -1] = True
    f["m"] = np.where(keep, 0.0, np.finfo(np.float32).min).astype(np.float32)
    return f


SHAPES = [pytest.param(1, 7, id="step"), pytest.param(3, 7, id="three-new"), pytest.param(5, 0, id="prefill"),
          pytest.param(0, 7, id="no-new-tokens")]


def _fused(model, **opts):
    res = optimized(model, **opts)
    onnx.checker.check_model(res.model, full_check=True)
    return res, [n.op_type for n in res.model.graph.node], res.report["saturation"]["rule_matches"]


@pytest.mark.parametrize("hardware", ["cpu", "cpu-avx2"])
@pytest.mark.parametrize("new, past", SHAPES)
@pytest.mark.parametrize("q4", [False, True], ids=["q-split-from-3d", "q-in-heads"])
def test_grouped_query_step_becomes_one_multihead_attention_over_the_kv_heads(hardware, new, past, q4):
    """q split from a 3-D value: regrouped from it and merged back with one 5-D Transpose each
    (attention-gqa-past-3d); q in heads: regrouped with a Reshape (attention-gqa-past)."""
    model = parse_model(gqa_model(new, past, q4=q4))
    want = [MHA, "Tile", "Reshape", "Reshape", "Reshape", "Reshape", "Transpose", "Transpose"]
    if q4:  # [B, NH, S, D] -> [B, NK, G*S, D] -> [B, G*S, NK, D] -> [B, G*S, NK*D]; the output back, merged
        want = [MHA, "Tile", "Reshape", "Transpose", "Reshape", "Reshape", "Transpose", "Reshape", "Transpose",
                "Reshape"]
    if q4:
        res = check_rewrite(model, want, feeds=gqa_feeds(new, past, q4=q4), hardware=hardware,
                            fired=["attention-kv-cache", "attention-gqa-past"], not_fired=["attention-gqa-past-3d"])
    else:
        res = check_rewrite(model, want, feeds=gqa_feeds(new, past, q4=q4), hardware=hardware,
                            fired=["attention-kv-cache", "attention-gqa-past", "attention-gqa-past-3d"])
    onnx.checker.check_model(res.model, full_check=True)
    matches = res.report["saturation"]["rule_matches"]
    assert (matches.get("attention-gqa-past-3d", 0) > 0) != q4
    mha = next(n for n in res.model.graph.node if n.op_type == "MultiHeadAttention")
    assert {a.name: a.i for a in mha.attribute if a.name == "num_heads"} == {"num_heads": NK}
    assert list(mha.input[6:8]) == ["past_k", "past_v"] and list(mha.output[1:]) == ["present_k", "present_v"]


UNFUSED = ["Add", "Concat", "Concat", "MatMul", "Softmax", "Transpose", "Transpose", "Transpose", "Transpose",
           "com.microsoft.FusedMatMul"]
NO_GQA = ["attention-gqa-past", "attention-gqa-past-3d"]


def test_a_mask_per_head_stays():
    """m [B, NH, S, T]: the heads of a group read different rows of it, which one tiled mask
    over the stacked rows cannot give."""
    check_rewrite(parse_model(gqa_model(1, 7, mask_heads=NH)), UNFUSED + ["Reshape"] * 8,
                  feeds=gqa_feeds(1, 7, mask_heads=NH), not_fired=NO_GQA)


def test_kv_heads_tiled_not_repeated_stay():
    """Tile(cache, [1, g, 1, 1]) gives query head h the kv head h % nk, not h / g: not a group of
    stacked rows, so nothing fuses."""
    check_rewrite(parse_model(gqa_model(1, 7, tiled=True)), UNFUSED + ["Reshape"] * 4 + ["Tile", "Tile"],
                  feeds=gqa_feeds(1, 7), not_fired=NO_GQA)


def test_profile_without_cached_attention_stays(tmp_path):
    import json
    from pathlib import Path

    import eqsat.extract

    prof = json.loads((Path(eqsat.extract.__file__).parent / "hardware" / "cpu-avx2.json").read_text())
    prof["fuse_cached_attention"] = False
    p = tmp_path / "nocache.json"
    p.write_text(json.dumps(prof))
    model = parse_model(gqa_model(1, 7))
    res, ops, matches = _fused(model, hardware=str(p))
    assert "MultiHeadAttention" not in ops, ops
    assert_same_outputs(model, res.model, gqa_feeds(1, 7), rtol=1e-4, atol=1e-5)
    assert_verified(model, res)
