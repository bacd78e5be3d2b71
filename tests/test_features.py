"""The per-node feature API (extract/features.py): FLOPs, bytes, shapes, dtype, layout and
literal arguments of operator nodes, checked against hand-computed figures."""

from __future__ import annotations

import pytest

from eqsat.extract.features import FEATURE_NAMES, features, is_operator, node_features, program_vector, vector

from .conftest import parse_model

MODEL = """<ir_version: 8, opset_import: ["": 17]>
g (float[1, 8, 6, 6] im, float[16, 8, 3, 3] k, float[4, 36] x, float[36, 5] w)
  => (float[1, 16, 2, 2] o, float[4, 5] y) {
 p = Conv <strides = [2, 2]> (im, k)
 o = Relu(p)
 y = MatMul(x, w) }"""


@pytest.fixture(scope="module")
def egraph():
    from eqsat.core.pipeline import saturate
    from eqsat.settings import Options

    return saturate(parse_model(MODEL), Options(), measure=False).egraph


def _one(feats, op):
    found = [f for f in feats.values() if f.op == op]
    assert found, f"no {op} node among {sorted({f.op for f in feats.values()})}"
    return found[0]


def test_contractions_count_their_multiply_adds(egraph):
    feats = features(egraph)
    conv = _one(feats, "Conv")
    # output 1x16x2x2, each 8 channels x 3x3 taps, a multiply and an add each
    assert conv.flops == 2 * (16 * 2 * 2) * (8 * 3 * 3)
    assert conv.flop_kind == "conv" and conv.layout == "nchw" and conv.dtype == "F32"
    assert conv.shape == [1, 16, 2, 2] and conv.input_shapes[:2] == [[1, 8, 6, 6], [16, 8, 3, 3]]
    assert conv.bytes_read == 4 * (8 * 6 * 6 + 16 * 8 * 3 * 3) and conv.bytes_written == 4 * 16 * 2 * 2
    assert [2, 2] in conv.attributes.values()  # the strides, a literal argument
    mm = _one(feats, "MatMul")
    assert mm.flops == 2 * 4 * 5 * 36 and mm.flop_kind == "matmul"
    relu = _one(feats, "Relu")
    assert relu.flop_kind == "vector" and relu.flops == 16 * 2 * 2


def test_fused_alternative_has_the_same_work_as_the_conv(egraph):
    """The e-graph also holds FusedConv(Conv + Relu): the same contraction, another op."""
    feats = features(egraph)
    fused = _one(feats, "FusedConv")
    assert fused.flops == _one(feats, "Conv").flops and "Relu" in fused.attributes.values()


def test_vectors_are_nonnegative_and_named(egraph):
    feats = features(egraph)
    for f in feats.values():
        v = vector(f)
        assert len(v) == len(FEATURE_NAMES) and all(x >= 0 for x in v)
        assert v[FEATURE_NAMES.index("kernels")] + v[FEATURE_NAMES.index("views")] == 1.0
    conv = vector(_one(feats, "Conv"))
    assert conv[FEATURE_NAMES.index("conv_mflop")] == pytest.approx(9216 / 1e6)


def test_program_vector_sums_the_chosen_operators(egraph):
    from eqsat.extract.costs import NodeCount
    from eqsat.extract.tree_greedy import TreeGreedy

    choice = TreeGreedy().extract(egraph, NodeCount()).choice
    feats = features(egraph)
    total = program_vector(egraph, choice, feats)
    ops = [n for n in choice.values() if n in feats]
    assert total[FEATURE_NAMES.index("kernels")] + total[FEATURE_NAMES.index("views")] == len(ops)


def test_structure_has_no_features(egraph):
    leaf = next(n for n in egraph.nodes if not is_operator(egraph, n))
    with pytest.raises(ValueError, match="not an operator"):
        node_features(egraph, leaf)


def test_symbolic_dims_take_the_sizes_given():
    from eqsat.core.pipeline import saturate
    from eqsat.settings import Options

    m = parse_model("""<ir_version: 8, opset_import: ["": 17]>
g (float[N, 36] x, float[36, 5] w) => (float[N, 5] y) { y = MatMul(x, w) }""")
    eg = saturate(m, Options(), measure=False).egraph
    at = {n: _one(features(eg, {"N": n}), "MatMul").flops for n in (3, 7)}
    assert at == {3: 2 * 3 * 5 * 36, 7: 2 * 7 * 5 * 36}
