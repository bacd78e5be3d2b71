"""eqsat.core.requantize: a QDQ model whose first program verification refuses for its
requantizing fusions (rules/qdq.egg fused where onnxruntime's own optimization does not, so
no allowance covers the rounding) is extracted again with fewer, and the first program that
passes is written, the report saying so; without that, `eqsat optimize` wrote nothing.

The model: two convolutions of one uint8 input, each its own output. onnxruntime fuses the
first (an int32 bias at x_scale * w_scale) and not the second (a bias of zeros quantized at
twice that scale: onnxruntime checks the bias scale, while a zero bias adds nothing at any
scale, so rules/qdq.egg fuses it)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from eqsat.api import optimize as api_optimize
from eqsat.api import verify_models
from eqsat.core import requantize
from eqsat.core.pipeline import optimize, saturate
from eqsat.extract.egraph import EGraph, Node
from eqsat.io.atomic import Commit
from eqsat.io.modelio import stage_model
from eqsat.settings import Options
from eqsat.verification import run

from .conftest import op_list, run_cli
from .rules.test_qdq import dims, floats, ints, model

RNG = np.random.default_rng(0)
NCHWC = "com.microsoft.nchwc"
C_IN, C_A, C_B = 16, 16, 16
HW = 16  # big enough that the calibrated cpu profile runs the unfused conv blocked (NCHWc)
X_SCALE, A_SCALE, B_SCALE = 0.05, 0.04, 0.03

# onnxruntime's uint8 x int8 kernels taken to saturate, whatever this machine's do (conftest)
pytestmark = pytest.mark.usefixtures("portable_weights")


def two_convs() -> onnx.ModelProto:
    """The same weights whichever tests ran before in the process (a test-suite worker runs any
    subset, in any order): the tests below rely on what these weights round to."""
    rng = np.random.default_rng(0)
    wa, wb = rng.integers(-127, 128, (C_A, C_IN, 3, 3)), rng.integers(-127, 128, (C_B, C_IN, 3, 3))
    ba = rng.integers(-3000, 3000, C_A)
    wsa, wsb = 0.002, 0.003
    bsa, bsb = np.float32(X_SCALE) * np.float32(wsa), 2 * np.float32(X_SCALE) * np.float32(wsb)
    return model(f"""
        agraph (float[1, {C_IN}, {HW}, {HW}] x) => (float[1, {C_A}, {HW}, {HW}] za, float[1, {C_B}, {HW}, {HW}] zb)
          <int8[{dims(wa.shape)}] wa = {{{ints(wa)}}}, float wsa = {{{wsa}}},
           int8[{dims(wb.shape)}] wb = {{{ints(wb)}}}, float wsb = {{{wsb}}}, int8 wz = {{0}},
           int32[{C_A}] ba = {{{ints(ba)}}}, float bsa = {{{floats(bsa)}}},
           int32[{C_B}] bb = {{{ints(np.zeros(C_B))}}}, float bsb = {{{floats(bsb)}}},
           int32 bz = {{0}}> {{
            xs = Constant <value = float {{{X_SCALE}}}> ()
            as = Constant <value = float {{{A_SCALE}}}> ()
            bs = Constant <value = float {{{B_SCALE}}}> ()
            zp = Constant <value = uint8 {{128}}> ()
            xq = QuantizeLinear (x, xs, zp)
            xd = DequantizeLinear (xq, xs, zp)
            wad = DequantizeLinear (wa, wsa, wz)
            bad = DequantizeLinear (ba, bsa, bz)
            a = Conv <pads = [1, 1, 1, 1]> (xd, wad, bad)
            aq = QuantizeLinear (a, as, zp)
            za = DequantizeLinear (aq, as, zp)
            wbd = DequantizeLinear (wb, wsb, wz)
            bbd = DequantizeLinear (bb, bsb, bz)
            b = Conv <pads = [1, 1, 1, 1]> (xd, wbd, bbd)
            bq = QuantizeLinear (b, bs, zp)
            zb = DequantizeLinear (bq, bs, zp)
        }}""")


@pytest.fixture(scope="module")
def m() -> onnx.ModelProto:
    return two_convs()


def test_the_first_program_fuses_both_and_verification_refuses_it(m):
    # what `eqsat optimize` wrote nothing for before the retries
    res = optimize(m, Options())
    assert op_list(res.model).count("QLinearConv") == 2
    v = verify_models(m, res.model)
    assert v.status == "failed" and v.requantized and "'zb'" in v.detail, v.detail
    assert res.retry is not None


def test_the_cli_writes_the_program_with_onnxruntimes_own_fusions(capsys, tmp_path, m):
    src, out, rep = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    onnx.save(m, src)
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "--report", rep)
    assert rc == 0, err
    written = onnx.load(out)
    onnx.checker.check_model(written)
    assert op_list(written).count("QLinearConv") == 1  # the first conv, as onnxruntime fuses it
    report = json.loads(rep.read_text())
    assert report["requantization"]["kept"] == "ort" and "'zb'" in report["requantization"]["refused"]
    assert report["verification"]["status"] == "passed"
    assert report["nodes_after"] == len(written.graph.node)
    assert any("verification refused the program with more" in w for w in report["warnings"])
    assert "warning: requantizing fusions only where onnxruntime's own" in err
    # the unfused branch computes what the original does; the fused one within one step
    feeds = {"x": RNG.standard_normal((1, C_IN, HW, HW)).astype(np.float32)}
    want, got = run(m, feeds, optimize=False), run(written, feeds, optimize=False)
    np.testing.assert_array_equal(got["zb"], want["zb"])
    assert np.abs(got["za"] - want["za"]).max() <= A_SCALE * 1.001
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "o.onnx", "r.json"]  # no temporary left


def test_the_api_returns_the_same_and_says_so(m):
    r = api_optimize(m)
    assert r.report.requantization["kept"] == "ort" and r.report.requantization["weights_folded"] is False
    assert r.report.verification["status"] == "passed"
    assert op_list(r.model).count("QLinearConv") == 1


def test_onnxruntimes_sites_are_found_in_a_model_without_node_names(m):
    assert not any(n.name for n in m.graph.node)
    values = requantize.ort_requantized_values(m)
    assert values == {"aq", "za"}  # the first conv's Q and the DQ that reads it


def test_where_onnxruntimes_sites_change_nothing_no_requantizing_fusion_is_kept(m, monkeypatch):
    # onnxruntime said to fuse both: the `ort` level is the first program again (skipped),
    # and `none` keeps no requantizing fusion
    monkeypatch.setattr(requantize, "ort_requantized_values", lambda model, path=None: {"aq", "za", "bq", "zb"})
    res = optimize(m, Options())
    assert res.retry("ort") is None
    alt = res.retry("none")
    assert "QLinearConv" not in op_list(alt.model)
    assert alt.report["nodes_after"] == len(alt.model.graph.node)
    # its float convs blocked round otherwise (test below); dequantized at run time, exact
    alt = res.retry("none-dq")
    assert "QLinearConv" not in op_list(alt.model) and not any(n.domain == NCHWC for n in alt.model.graph.node)
    assert verify_models(m, alt.model).status == "passed"


def test_a_blocked_conv_on_a_folded_weight_that_rounds_otherwise_is_retried_as_the_input_has_it(m):
    # the second conv, unfused where onnxruntime does not fuse it, has a constant float weight
    # (its DequantizeLinear folded) and is blocked: onnxruntime's NCHWc Conv sums in another
    # order and moves some of its quantized outputs a step, where onnxruntime's own
    # optimization (which keeps the DequantizeLinear, so no blocked Conv) moves none
    res = optimize(m, Options())
    blocked = res.retry("ort")
    assert op_list(blocked.model).count("QLinearConv") == 1
    assert any(n.domain == NCHWC for n in blocked.model.graph.node)
    v = verify_models(m, blocked.model)
    assert v.status == "failed" and v.requantized and "'zb'" in v.detail, v.detail
    alt = res.retry("ort-dq")
    assert op_list(alt.model).count("QLinearConv") == 1
    assert not any(n.domain == NCHWC for n in alt.model.graph.node)
    # the unfused conv's weight dequantized at run time, as the input has it
    (conv,) = [n for n in alt.model.graph.node if n.op_type == "Conv"]
    assert [n.op_type for n in alt.model.graph.node if n.output[0] == conv.input[1]] == ["DequantizeLinear"]
    assert verify_models(m, alt.model).status == "passed"


def test_a_model_that_passes_first_is_not_retried(monkeypatch):
    from .rules.test_qdq import conv_model

    def called(*_a, **_k):
        raise AssertionError("retried")

    monkeypatch.setattr(requantize, "ort_requantized_values", called)
    r = api_optimize(conv_model(x_type="uint8", w_max=64), layout="nchw")
    assert "QLinearConv" in op_list(r.model) and r.report.requantization is None
    assert r.report.verification["status"] == "passed"


def test_restricted_keeps_the_input_programs_own_requantizing_ops():
    # a QLinearConv the input model holds is no fusion of eqsat's: no level removes it
    w = RNG.integers(0, 256, (4, 2, 3, 3))
    q = model(f"""
        agraph (uint8[1, 2, 6, 6] x) => (uint8[1, 4, 4, 4] y) <uint8[{dims(w.shape)}] w = {{{ints(w)}}}> {{
            xs = Constant <value = float {{0.05}}> ()
            zp = Constant <value = uint8 {{128}}> ()
            ws = Constant <value = float {{0.02}}> ()
            ys = Constant <value = float {{0.1}}> ()
            y = QLinearConv (x, xs, zp, w, ws, zp, ys, zp)
        }}""")
    st = saturate(q, Options())
    own = [n for n in st.egraph.nodes.values() if n.op == "QLinearConv"]
    assert own
    kept = requantize.restricted(st.egraph, set())
    assert {n.id for n in own} <= set(kept.nodes)


def test_a_model_staged_again_replaces_the_first(tmp_path, m):
    out = tmp_path / "o.onnx"
    with Commit() as c:
        stage_model(m, out, c)
        second = onnx.ModelProto()
        second.CopyFrom(m)
        second.producer_name = "second"
        stage_model(second, out, c)
        c.commit()
    assert onnx.load(out).producer_name == "second"
    assert [p.name for p in tmp_path.iterdir()] == ["o.onnx"]


def test_a_kept_values_channels_last_form_is_kept_too():
    # rules/qdq_nhwc.egg: the value e = Transpose(QLinearConvMs(...), [0, 3, 1, 2]); where e may be
    # requantized, its permuted form (the class the Transpose reads) may be too; a class of a value
    # onnxruntime does not requantize stays without its requantizing e-node
    nodes = {
        "t": Node("t", "Transpose", "e", ("nhwc", "p")),
        "q": Node("q", "QLinearConv", "e", ()),
        "m": Node("m", "QLinearConvMs", "nhwc", ()),
        "o": Node("o", "QLinearConvMs", "other", ()),
        "p": Node("p", "vec-of", "p", ()),
    }
    g = EGraph(nodes, {"e": ["t", "q"], "nhwc": ["m"], "other": ["o"], "p": ["p"]}, ["e"], {}, {})
    keep = requantize.kept_classes(g, {"e": ["y"], "other": ["z"]}, {"y"})
    assert keep == {"e", "nhwc"}
    assert set(requantize.restricted(g, keep).nodes) == {"t", "q", "m", "p"}


def conv_beside_a_huge_scale() -> onnx.ModelProto:
    """The first convolution of `two_convs` (onnxruntime fuses it) beside an attention-mask-like
    branch quantized at a scale of 1e36 (beyond REQUANT_SCALE_RANGE: a float32 mask of -3.4e38,
    as BERT exports hold) in place of the second: a DQ -> Add -> Q whose fused form is no
    rounding of the float one."""
    from onnx import TensorProto, helper  # noqa: PLC0415

    m = two_convs()
    g = m.graph
    second = {"wbd", "bbd", "b", "bq", "zb", "bs"}
    kept = [n for n in g.node if n.output[0] not in second]
    del g.node[:]
    g.node.extend(kept + [helper.make_node("QuantizeLinear", ["mask", "hs", "hz"], ["mq"]),
                          helper.make_node("DequantizeLinear", ["mq", "hs", "hz"], ["md"]),
                          helper.make_node("Add", ["za", "md"], ["s"]),
                          helper.make_node("QuantizeLinear", ["s", "hs", "hz"], ["sq"]),
                          helper.make_node("DequantizeLinear", ["sq", "hs", "hz"], ["zm"])])
    g.initializer.extend([helper.make_tensor("hs", TensorProto.FLOAT, [], [1e36]),
                          helper.make_tensor("hz", TensorProto.UINT8, [], [255])])
    g.input.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, C_A, HW, HW]))
    g.output[1].name = "zm"
    onnx.checker.check_model(m, full_check=True)
    return m


def test_a_scale_out_of_range_keeps_onnxruntimes_fusions_elsewhere():
    # BERT-base quantized by onnxruntime holds its attention mask at a scale of 1.3e36: the QDQ
    # allowance was withheld for the whole model, and eqsat kept no requantizing fusion in
    # any layer (onnxruntime's own model ran in 0.72 of eqsat's time). Only onnxruntime's
    # fusions at the nodes of that scale are left out of the allowance's reference now
    m = conv_beside_a_huge_scale()
    r = api_optimize(m)
    assert r.report.verification["status"] == "passed", r.report.verification
    assert r.report.requantization is None, r.report.requantization
    assert op_list(r.model).count("QLinearConv") == 1
    assert "QLinearAdd" not in op_list(r.model)  # the huge scale's Add stays float
    feeds = {"x": RNG.standard_normal((1, C_IN, HW, HW)).astype(np.float32),
             "mask": np.where(RNG.random((1, C_A, HW, HW)) < 0.5, 0.0, -3.4e38).astype(np.float32)}
    want, got = run(m, feeds, optimize=False), run(r.model, feeds, optimize=False)
    np.testing.assert_array_equal(got["zm"], want["zm"])
    assert np.abs(got["za"] - want["za"]).max() <= A_SCALE * 1.001
