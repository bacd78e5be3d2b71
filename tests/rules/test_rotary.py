"""rules/rotary.egg: the half-rotation form of rotary embeddings (Hugging Face's Llama),
q * cos + rotate_half(q) * sin with cos and sin gathered from constant caches, becomes
com.microsoft.RotaryEmbedding with the outputs unchanged, and stays where the head size, the
rotation, the caches, the position ids or the target forbid it."""

from __future__ import annotations

import numpy as np

from ..conftest import check_rewrite, op_list, optimized, parse_model

ROPE = "com.microsoft.RotaryEmbedding"
# the op, and the position ids wrapped as Gather reads them: Where(p < 0, p + M, p)
FUSED_OPS = [ROPE, "Less", "Add", "Where"]
PRIMITIVE_OPS = ["Gather", "Unsqueeze", "Gather", "Unsqueeze", "Slice", "Slice", "Neg", "Concat", "Mul", "Mul", "Add"]


NO_ROTATION = ["rope-rotate-half", "rope-half-fuse", "rope-half-fuse-left"]


def caches(positions: int, d: int, base: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin caches [positions, d] as HF builds them: the frequencies concatenated with
    themselves, so each row's two halves are equal."""
    inv = 1.0 / base ** (np.arange(0, d - d % 2, 2) / d)
    f = np.arange(positions)[:, None] * inv[None]
    emb = np.concatenate([f, f], -1)[:, :d] if d % 2 == 0 else np.concatenate([f, f, f[:, :1]], -1)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def _floats(a: np.ndarray) -> str:
    return "{" + ", ".join(f"{v:.9g}" for v in a.ravel()) + "}"


def _cache_rows(positions: int, d: int, cos: np.ndarray, sin: np.ndarray) -> str:
    """The graph lines that gather the caches' rows at the position ids and unsqueeze them
    over the heads: cu (cos) and su (sin), with the constant `one`."""
    return f'''        cc = Constant <value = float[{positions}, {d}] {_floats(cos)}> ()
        sc = Constant <value = float[{positions}, {d}] {_floats(sin)}> ()
        one = Constant <value = int64[1] {{1}}> ()
        cg = Gather(cc, pos)
        cu = Unsqueeze(cg, one)
        sg = Gather(sc, pos)
        su = Unsqueeze(sg, one)'''


def rope_model(d: int = 8, positions: int = 16, batch: int = 2, pos_batch: int | None = None, cos=None, sin=None,
               rotation: str = "Concat <axis = -1> (n, x1)", first: str = "Mul(q, cu)", second: str = "Mul(r, su)",
               total: str = "Add(a, b)", half: int | None = None, axis: int = 3, seq: int | str = 5) -> str:
    """q [batch, 2, seq, d] rotated with caches [positions, d] at position ids [pos_batch, seq], as
    the TorchScript exporter writes HF's apply_rotary_pos_emb: x1 = q[..., :h],
    x2 = q[..., h:] (end INT64_MAX), n = -x2, cu/su the cache rows unsqueezed over the heads."""
    c, s = caches(positions, d)
    cos = c if cos is None else cos
    sin = s if sin is None else sin
    half = d // 2 if half is None else half
    pos_batch = batch if pos_batch is None else pos_batch
    return f'''<ir_version: 8, opset_import: ["" : 18]>
    agraph (float[{batch}, 2, {seq}, {d}] q, int64[{pos_batch}, {seq}] pos) => (float[{batch}, 2, {seq}, {d}] y) {{
{_cache_rows(positions, d, cos, sin)}
        zero = Constant <value = int64[1] {{0}}> ()
        h = Constant <value = int64[1] {{{half}}}> ()
        big = Constant <value = int64[1] {{9223372036854775807}}> ()
        ax = Constant <value = int64[1] {{{axis}}}> ()
        x1 = Slice(q, zero, h, ax, one)
        x2 = Slice(q, h, big, ax, one)
        n = Neg(x2)
        r = {rotation}
        a = {first}
        b = {second}
        y = {total}
    }}'''


def feeds(d: int = 8, positions: int = 16, batch: int = 2, pos_batch: int | None = None) -> dict:
    rng = np.random.default_rng(0)
    pos_batch = batch if pos_batch is None else pos_batch
    return {"q": rng.standard_normal((batch, 2, 5, d)).astype(np.float32),
            "pos": rng.integers(-positions, positions, (pos_batch, 5))}  # Gather takes [-M, M)


def test_half_rotation_to_rotary_embedding():
    res = check_rewrite(parse_model(rope_model()), FUSED_OPS, feeds=feeds(),
                        fired=["rope-half-lo", "rope-half-hi", "rope-rotate-half", "rope-cache-rows", "rope-scaled",
                               "rope-cache-halves", "rope-cache-halves-sin",
                               "rope-half-fuse", "rope-cache-fuse"],
                        not_fired=["rope-rows-fuse", "rope-rows-pad-fuse"])  # S = 5 <= 16 rows: the caches
    (node,) = [n for n in res.model.graph.node if n.op_type == "RotaryEmbedding"]
    assert node.input[0] == "q"
    attrs = {a.name: a.i for a in node.attribute}
    assert attrs == {"interleaved": 0}
    init = {t.name: t for t in res.model.graph.initializer}
    assert [list(init[n].dims) for n in node.input[2:]] == [[16, 4], [16, 4]]  # the caches' first halves


def test_an_optimized_model_loads_again_with_the_ops_output_typed():
    # neither onnx's inference nor onnxruntime's symbolic one knows the op: eqsat infers its
    # output as the input's (eqsat/core/shapes.py), so rules see the shape when it is optimized again
    from eqsat.core.shapes import infer_types

    once = optimized(parse_model(rope_model())).model
    (y,) = [n.output[0] for n in once.graph.node if n.op_type == "RotaryEmbedding"]
    assert infer_types(once)[0][y].dims == (2, 2, 5, 8)
    twice = optimized(once)
    assert sorted(op_list(twice.model)) == sorted(FUSED_OPS) and not twice.report["opaque"]


def test_operand_orders_and_last_axis_as_minus_one():
    # cos * q, sin * rotate_half(q), the sum written the other way round, the slices on axis -1
    m = parse_model(rope_model(first="Mul(cu, q)", second="Mul(su, r)", total="Add(b, a)", axis=-1))
    check_rewrite(m, FUSED_OPS, feeds=feeds(), fired=["rope-scaled-left", "rope-half-fuse-left"])


def test_odd_head_size_stays():
    # d = 7: rotate_half's halves are 3 and 4 wide, no rotation of pairs
    m = parse_model(rope_model(d=7, half=3))
    check_rewrite(m, PRIMITIVE_OPS, feeds=feeds(d=7), not_fired=NO_ROTATION)


def test_swapped_rotation_stays():
    # Concat(x1, -x2): not rotate_half (the sign is on the wrong half)
    m = parse_model(rope_model(rotation="Concat <axis = -1> (x1, n)"))
    check_rewrite(m, PRIMITIVE_OPS, feeds=feeds(), not_fired=NO_ROTATION)


def test_halves_in_the_wrong_order_stay():
    # Concat(-x1, x2): the halves negated and placed the wrong way
    m = parse_model(rope_model(rotation="Concat <axis = -1> (n, x2)").replace("n = Neg(x2)", "n = Neg(x1)"))
    check_rewrite(m, PRIMITIVE_OPS, feeds=feeds(), not_fired=NO_ROTATION)


def test_sin_and_cos_exchanged_is_still_the_op_on_exchanged_caches():
    # q * sin + rotate_half(q) * cos: RotaryEmbedding computes x * C[p] + rotate_half(x) * S[p]
    # for whichever caches C, S it is given, so this is the op with the caches exchanged, and
    # the outputs stay the same
    m = parse_model(rope_model(first="Mul(q, su)", second="Mul(r, cu)"))
    res = check_rewrite(m, FUSED_OPS, feeds=feeds(), fired=["rope-half-fuse"])
    init = {t.name: t for t in res.model.graph.initializer}
    (node,) = [n for n in res.model.graph.node if n.op_type == "RotaryEmbedding"]
    cos_half = np.frombuffer(init[node.input[2]].raw_data, np.float32)
    assert cos_half[0] == 0.0  # sin(0): the sin cache in the cos position


def test_caches_with_unequal_halves_stay():
    # a cache whose halves differ: the op reads only the first half, it cannot say this
    rng = np.random.default_rng(1)
    c, s = caches(16, 8)
    c = c + rng.standard_normal(c.shape).astype(np.float32) * 0.1
    m = parse_model(rope_model(cos=c))
    check_rewrite(m, PRIMITIVE_OPS, feeds=feeds(), fired=["rope-cache-halves"],
                  not_fired=["rope-half-fuse", "rope-half-fuse-left"])


def test_position_ids_of_another_batch_stay():
    # position ids [1, 5] broadcast over a batch of 2: the kernel wants them [batch, sequence]
    m = parse_model(rope_model(pos_batch=1))
    check_rewrite(m, PRIMITIVE_OPS, feeds=feeds(pos_batch=1), fired=["rope-rotate-half"],
                  not_fired=["rope-half-fuse", "rope-half-fuse-left"])


def test_target_onnx_stays():
    m = parse_model(rope_model())
    check_rewrite(m, PRIMITIVE_OPS, feeds=feeds(), target="onnx", fired=["rope-rotate-half"],
                  not_fired=["rope-half-fuse", "rope-half-fuse-left"])


# ---------------------------------------------------------------------------------------
# The interleaved form: rotate_every_two (GPT-J)
# ---------------------------------------------------------------------------------------

def pair_caches(positions: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin caches [positions, d] with each frequency twice in a row (c0, c0, c1, c1, ...)."""
    c, s = caches(positions, d)
    return np.repeat(c[:, : d // 2], 2, -1), np.repeat(s[:, : d // 2], 2, -1)


def pairs_model(d: int = 8, positions: int = 16, cos=None, sin=None, rotation: str = "Concat <axis = -1> (u1, u2)",
                first: str = "Mul(q, cu)", second: str = "Mul(r, su)", total: str = "Add(a, b)",
                batch: int | str = 2, seq: int | str = 5) -> str:
    """q [batch, 2, seq, d] rotated pairwise as GPT-J's rotate_every_two exports:
    r = flatten(stack(-q[..., 1::2], q[..., 0::2]), -2) (a symbolic batch or seq: the
    flatten's target copies q's first dims, 0)."""
    c, s = pair_caches(positions, d)
    static = isinstance(batch, int) and isinstance(seq, int)
    target = f"{batch}, 2, {seq}, {d}" if static else f"0, 0, 0, {d}"
    cos = c if cos is None else cos
    sin = s if sin is None else sin
    return f'''<ir_version: 8, opset_import: ["" : 18]>
    agraph (float[{batch}, 2, {seq}, {d}] q, int64[{batch}, {seq}] pos) => (float[{batch}, 2, {seq}, {d}] y) {{
{_cache_rows(positions, d, cos, sin)}
        zero = Constant <value = int64[1] {{0}}> ()
        two = Constant <value = int64[1] {{2}}> ()
        big = Constant <value = int64[1] {{9223372036854775807}}> ()
        ax = Constant <value = int64[1] {{-1}}> ()
        x0 = Slice(q, zero, big, ax, two)
        x1 = Slice(q, one, big, ax, two)
        n = Neg(x1)
        u1 = Unsqueeze(n, ax)
        u2 = Unsqueeze(x0, ax)
        st = {rotation}
        shape = Constant <value = int64[4] {{{target}}}> ()
        r = Reshape(st, shape)
        a = {first}
        b = {second}
        y = {total}
    }}'''


PAIR_OPS = ["Gather", "Unsqueeze", "Gather", "Unsqueeze", "Slice", "Slice", "Neg", "Unsqueeze", "Unsqueeze", "Concat",
            "Reshape", "Mul", "Mul", "Add"]
NO_PAIRS = ["rope-pairs-fuse", "rope-pairs-fuse-left"]


def test_pair_rotation_to_interleaved_rotary_embedding():
    res = check_rewrite(parse_model(pairs_model()), FUSED_OPS, feeds=feeds(),
                        fired=["rope-even", "rope-odd", "rope-rotate-pairs", "rope-cache-pairs", "rope-cache-pairs-sin",
                               "rope-pairs-fuse"])
    (node,) = [n for n in res.model.graph.node if n.op_type == "RotaryEmbedding"]
    assert {a.name: a.i for a in node.attribute} == {"interleaved": 1}
    init = {t.name: t for t in res.model.graph.initializer}
    c, _ = pair_caches(16, 8)
    assert np.array_equal(np.frombuffer(init[node.input[2]].raw_data, np.float32).reshape(16, 4), c[:, ::2])


def test_pair_rotation_with_the_sum_the_other_way_round():
    check_rewrite(parse_model(pairs_model(first="Mul(cu, q)", second="Mul(su, r)", total="Add(b, a)")), FUSED_OPS,
                  feeds=feeds(), fired=["rope-pairs-fuse-left"])


def test_pairs_in_the_wrong_order_stay():
    # stack(x[..., 0::2], -x[..., 1::2]): the sign on the other element of each pair
    m = parse_model(pairs_model(rotation="Concat <axis = -1> (u2, u1)"))
    check_rewrite(m, PAIR_OPS, feeds=feeds(), not_fired=["rope-rotate-pairs", *NO_PAIRS])


def test_pair_caches_of_the_half_form_stay():
    # caches [c, c] (the half form's) where the pair form needs (c0, c0, c1, c1, ...)
    c, s = caches(16, 8)
    m = parse_model(pairs_model(cos=c, sin=s))
    check_rewrite(m, PAIR_OPS, feeds=feeds(), fired=["rope-rotate-pairs", "rope-cache-pairs"], not_fired=NO_PAIRS)


def test_pair_rotation_for_target_onnx_stays():
    check_rewrite(parse_model(pairs_model()), PAIR_OPS, feeds=feeds(), target="onnx", fired=["rope-rotate-pairs"],
                  not_fired=NO_PAIRS)
