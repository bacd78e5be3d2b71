"""rules/attention.egg with a KV cache: a decoder step's attention, the new keys and values
appended to the cache (Concat on the sequence axis, the present outputs), becomes one
com.microsoft.MultiHeadAttention that takes past_key / past_value and writes the presents
itself (MultiHeadAttentionPast, attention-mha-past). On the default CPU profiles it is built
although the attention has a mask (fuse_cached_attention). It stays where the cache is
appended on the wrong side, or the profile does not fuse cached attention."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from ..conftest import check_rewrite, parse_model

MHA = "com.microsoft.MultiHeadAttention"
N, D = 2, 4  # heads, head size: hidden 8, scale 1/sqrt(D) = 0.5
# unfused: q, k, v split into heads, the two cache Concats, scores (the scale folded into a
# FusedMatMul with the key transposed), mask, softmax, values, heads merged
UNFUSED = ["Reshape", "Transpose", "Reshape", "Transpose", "Reshape", "Transpose", "Concat", "Concat",
           "com.microsoft.FusedMatMul", "Add", "Softmax", "MatMul", "Transpose", "Reshape"]


def step_model(cache: str = "past_k, kh", mask: bool = True, vcache: str = "past_v, vh",
               outputs: str = "present_k, present_v") -> str:
    """One attention layer of a decoder step, as GPT-2's TorchScript export writes it: q, k, v
    [B, S, 8] split into 2 heads, present_k = Concat(`cache`) and present_v = Concat(`vcache`)
    on the sequence axis, scores * 0.5 (+ an additive mask [B, 1, S, P + S]), softmax, times
    the values, heads merged. The graph outputs are y and `outputs`, among present_k,
    present_v and pkv = Concat(past_k, vh) (another present key than the attention's)."""
    h = N * D
    m_in = ", float[B, 1, S, T] m" if mask else ""
    scores = "sm = Add(sc, m)" if mask else "sm = Identity(sc)"
    presents = ", ".join(f"float[B, {N}, T, {D}] {o.strip()}" for o in outputs.split(","))
    return f'''<ir_version: 8, opset_import: ["" : 17]>
    agraph (float[B, S, {h}] q, float[B, S, {h}] k, float[B, S, {h}] v, float[B, {N}, P, {D}] past_k,
            float[B, {N}, P, {D}] past_v{m_in})
        => (float[B, S, {h}] y, {presents}) {{
        hs = Constant <value = int64[4] {{0, 0, {N}, {D}}}> ()
        qr = Reshape(q, hs)
        qh = Transpose <perm = [0, 2, 1, 3]> (qr)
        kr = Reshape(k, hs)
        kh = Transpose <perm = [0, 2, 1, 3]> (kr)
        vr = Reshape(v, hs)
        vh = Transpose <perm = [0, 2, 1, 3]> (vr)
        present_k = Concat <axis = -2> ({cache})
        present_v = Concat <axis = -2> ({vcache})
        {"pkv = Concat <axis = -2> (past_k, vh)" if "pkv" in outputs else ""}
        kt = Transpose <perm = [0, 1, 3, 2]> (present_k)
        qk = MatMul(qh, kt)
        half = Constant <value = float {{0.5}}> ()
        sc = Mul(qk, half)
        {scores}
        p = Softmax <axis = -1> (sm)
        o = MatMul(p, present_v)
        ot = Transpose <perm = [0, 2, 1, 3]> (o)
        merge = Constant <value = int64[3] {{0, 0, {h}}}> ()
        y = Reshape(ot, merge)
    }}'''


def step_feeds(batch: int, new: int, past: int, mask: bool = True) -> tuple[dict, dict]:
    """(feeds, dims): a padding mask over past + new (0 or the lowest float, the first key
    always kept)."""
    rng = np.random.default_rng(0)
    f = {c: rng.standard_normal((batch, new, N * D)).astype(np.float32) for c in "qkv"}
    f.update({p: rng.standard_normal((batch, N, past, D)).astype(np.float32) for p in ("past_k", "past_v")})
    if mask:
        keep = rng.random((batch, 1, new, past + new)) < 0.7
        keep[..., 0] = True
        f["m"] = np.where(keep, 0.0, np.finfo(np.float32).min).astype(np.float32)
    return f, {"B": batch, "S": new, "P": past, "T": past + new}


def with_sizes(text: str, dims: dict[str, int]) -> str:
    """The model `text` with the symbolic sizes of its declared types bound to `dims`."""
    def bind(m: re.Match) -> str:
        return "[" + ", ".join(str(dims.get(x.strip(), x.strip())) for x in m.group(1).split(",")) + "]"

    return re.sub(r"\[([^\]]*)\]", bind, text)


STEPS = [pytest.param(2, 1, 7, id="step"), pytest.param(2, 3, 7, id="three-new"), pytest.param(1, 5, 0, id="prefill")]


@pytest.mark.parametrize("hardware", ["cpu", "cpu-avx2", "h200"])
@pytest.mark.parametrize("batch, new, past", STEPS)
def test_cached_attention_becomes_one_multihead_attention_with_past(hardware, batch, new, past):
    # the sizes static: the mask's key length T is P + S by the model's own types
    feeds, dims = step_feeds(batch, new, past)
    res = check_rewrite(parse_model(with_sizes(step_model(), dims)), [MHA], feeds=feeds, hardware=hardware,
                        fired=["attention-kv-cache", "attention-mha-past"])
    (node,) = res.model.graph.node
    assert list(node.input[6:8]) == ["past_k", "past_v"] and list(node.input[1:3]) == ["k", "v"]
    assert list(node.output) == ["y", "present_k", "present_v"]


@pytest.mark.parametrize("hardware", ["cpu", "h200"])
def test_a_mask_of_a_key_length_of_its_own_stays(hardware):
    # m [B, 1, S, T] with T a size of its own: T = 1 broadcasts over the P + S keys, which
    # MultiHeadAttention with past refuses ("attention_bias dimension 3 should be same as
    # total_sequence_length"). onnxruntime's shape inference took T for P + S (its auto_merge
    # equates dimensions that broadcast together), the rule fired, and eqsat optimize refused
    # the whole model (exit 1: verification's run at sizes of 1, P + S = 2, T = 1)
    feeds, dims = step_feeds(2, 3, 4)
    check_rewrite(parse_model(step_model()), UNFUSED, feeds=feeds, dims=dims, hardware=hardware,
                  fired=["attention-kv-cache"],
                  not_fired=["attention-pays-cached", "attention-mha", "attention-mha-past"])


def test_the_cache_length_is_no_mask_length_merged_into_it():
    from eqsat.core.shapes import infer_types

    types, _ = infer_types(parse_model(step_model()))
    assert types["m"].dims == ("B", 1, "S", "T")
    assert types["present_k"].dims[2] != "T" and types["sm"].dims[3] != "T"


def test_a_mask_reshaped_to_the_cache_length_fuses():
    # the mask's key length computed from the present key's shape: P + S by proof
    text = step_model().replace("sm = Add(sc, m)", """sq = Shape(q)
        spk = Shape(present_k)
        i0 = Constant <value = int64[1] {0}> ()
        i1 = Constant <value = int64[1] {1}> ()
        i2 = Constant <value = int64[1] {2}> ()
        i3 = Constant <value = int64[1] {3}> ()
        b = Slice(sq, i0, i1)
        s = Slice(sq, i1, i2)
        tl = Slice(spk, i2, i3)
        tgt = Concat <axis = 0> (b, i1, s, tl)
        mr = Reshape(m, tgt)
        sm = Add(sc, mr)""")
    feeds, dims = step_feeds(2, 3, 4)
    res = check_rewrite(parse_model(text), [MHA, "Reshape", "Concat", "Shape", "Shape", "Slice", "Slice", "Slice",
                                            "Concat", "Reshape", "Transpose"],
                        feeds=feeds, dims=dims, fired=["attention-mha-past"])
    (node,) = [n for n in res.model.graph.node if n.op_type == "MultiHeadAttention"]
    assert list(node.input[6:8]) == ["past_k", "past_v"]


def test_without_a_mask():
    feeds, dims = step_feeds(2, 3, 4, mask=False)
    check_rewrite(parse_model(step_model(mask=False)), [MHA], feeds=feeds, dims=dims, fired=["attention-mha-past"])


def test_new_keys_before_the_cache_stay():
    # Concat(kh, past_k): the op appends the new keys after the cache, not before
    feeds, dims = step_feeds(2, 3, 4)
    check_rewrite(parse_model(step_model(cache="kh, past_k")), UNFUSED, feeds=feeds, dims=dims,
                  not_fired=["attention-mha-past"])


def test_a_profile_without_fuse_cached_attention_keeps_the_subgraph(tmp_path):
    from eqsat.extract.costs.roofline import HARDWARE_DIR

    prof = json.loads((HARDWARE_DIR / "cpu.json").read_text())
    prof["fuse_cached_attention"] = False
    path = tmp_path / "no-cached-attention.json"
    path.write_text(json.dumps(prof))
    feeds, dims = step_feeds(2, 1, 7)
    check_rewrite(parse_model(step_model()), UNFUSED, feeds=feeds, dims=dims, hardware=str(path),
                  fired=["attention-kv-cache"], not_fired=["attention-pays-cached", "attention-mha-past"])
