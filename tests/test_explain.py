"""`eqsat optimize --explain`: per output node, the rules behind it and the original nodes it
replaced (eqsat/core/explain.py, rules instrumented by eqsat/core/provenance.py)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from egglog import bindings as b
from onnx import TensorProto, helper, numpy_helper

from eqsat.cli.main import main
from eqsat.core.pipeline import Options, optimize
from eqsat.core.provenance import PREFIX, Instrumenter

from .conftest import assert_same_outputs, assert_verified, op_list, parse_model
from .rules.test_attention import bert_block
from .rules.test_transformer import LAYERNORM, header


def conv_bn_relu() -> onnx.ModelProto:
    """Conv -> BatchNormalization -> Relu -> Identity -> MaxPool, every node named."""
    r = np.random.default_rng(0)

    def init(name, a):
        return numpy_helper.from_array(np.asarray(a, np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "beta", "mean", "var"], ["bn"], name="bn1"),
             helper.make_node("Relu", ["bn"], ["r"], name="relu1"),
             helper.make_node("Identity", ["r"], ["id"], name="ident1"),
             helper.make_node("MaxPool", ["id"], ["y"], name="pool1", kernel_shape=[2, 2])]
    inits = [init("w", r.standard_normal((4, 3, 3, 3))), init("b", r.standard_normal(4)),
             init("s", r.uniform(0.5, 2, 4)), init("beta", r.standard_normal(4)),
             init("mean", r.standard_normal(4)), init("var", r.uniform(0.5, 2, 4))]
    g = helper.make_graph(nodes, "cbr", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def named(model: onnx.ModelProto) -> onnx.ModelProto:
    """Name each node after its first output (the text syntax leaves nodes unnamed)."""
    for n in model.graph.node:
        n.name = "n_" + n.output[0]
    return model


def entry(ex: dict, op: str) -> dict:
    found = [e for e in ex["nodes"] if e["op"] == op]
    assert len(found) == 1, [e["op"] for e in ex["nodes"]]
    return found[0]


@pytest.fixture(scope="module")
def cbr():
    m = conv_bn_relu()
    return m, optimize(m, Options(explain=True))


def test_conv_bn_relu_names_the_fusions_and_every_replaced_node(cbr):
    model, res = cbr
    ex = res.report["explain"]
    fused = entry(ex, "com.microsoft.FusedConv")
    assert fused["status"] == "rewritten"
    assert {"conv-bn-fold", "conv-relu", "identity-elim"} <= set(fused["rules"])
    assert sorted(fused["replaced"]) == ["bn1", "conv1", "ident1", "relu1"]
    pool = entry(ex, "MaxPool")
    assert pool["status"] == "kept" and pool["rules"] == [] and pool["replaced"] == []
    assert ex["rules"]["conv-bn-fold"] == 1 and ex["rules"]["conv-relu"] == 1
    assert ex["summary"]["original_nodes_replaced"] == 4 and ex["removed"] == []
    assert_same_outputs(model, res.model, rtol=1e-4, atol=1e-5)
    assert_verified(model, res)


def test_explain_changes_neither_the_result_nor_the_rule_matches(cbr):
    model, res = cbr
    plain = optimize(model, Options())
    assert "explain" not in plain.report
    assert op_list(plain.model) == op_list(res.model)
    a, b = plain.report["saturation"], res.report["saturation"]
    assert [r["enodes"] for r in a["rounds"]] == [r["enodes"] for r in b["rounds"]]
    assert a["eclasses"] == b["eclasses"]  # the provenance rows are not left in the e-graph
    assert set(a["rule_matches"]) <= set(b["rule_matches"])


def test_blocked_layout_credits_each_node_with_its_own_originals():
    """With onnxruntime's channel-blocked layout (the cpu-avx2 profile has it), each blocked
    op replaced the nodes of its NCHW value, a reorder replaced none, and no original node
    is credited twice; a node's facts are only the recognizers its rules read (no shape
    facts about every 4-D value on a convolution)."""
    from eqsat.demo import build_model

    model = build_model()
    res = optimize(model, Options(explain=True, hardware="cpu-avx2", layout="nchwc"))
    ex = res.report["explain"]
    convs = [e for e in ex["nodes"] if e["op"] == "com.microsoft.nchwc.Conv"]
    assert len(convs) == 2, op_list(res.model)
    assert sorted(convs[0]["replaced"]) == ["bn1", "conv1", "relu1"]
    assert sorted(convs[1]["replaced"]) == ["conv2", "relu2", "residual"]
    assert entry(ex, "com.microsoft.nchwc.GlobalAveragePool")["replaced"] == ["pool"]
    assert all(e["replaced"] == [] for e in ex["nodes"] if e["op"].endswith(("ReorderInput", "ReorderOutput")))
    credited = [r for e in ex["nodes"] for r in e["replaced"]]
    assert len(credited) == len(set(credited)) == ex["summary"]["original_nodes_replaced"]
    assert "nchwc-candidate-conv" in convs[0]["facts"]
    assert not any(f.startswith("attention-") for c in convs for f in c["facts"])
    assert_same_outputs(model, res.model, rtol=1e-4, atol=1e-5)
    assert_verified(model, res)


def test_a_reshape_the_shape_oracle_rewrote_is_credited_to_it():
    """Shape arithmetic folded by the oracles, not by a rule: the Reshape lists `oracle`."""
    model = named(onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        agraph (float[N,3,4] x) => (float[N,12] y) {
            s = Shape(x)
            i0 = Constant<value=int64[1] {0}>()
            b = Gather<axis=0>(s, i0)
            m = Constant<value=int64[1] {-1}>()
            t = Concat<axis=0>(b, m)
            y = Reshape(x, t)
        }"""))
    res = optimize(model, Options(explain=True))
    assert op_list(res.model) == ["Reshape"]
    node = entry(res.report["explain"], "Reshape")
    assert node["status"] == "rewritten" and node["rules"] == ["oracle"]
    assert {"n_s", "n_b", "n_t"} <= set(node["replaced"])
    assert_same_outputs(model, res.model)
    assert_verified(model, res)


def test_layernorm_names_the_layernorm_rules_and_the_primitives_it_replaced():
    m = named(parse_model(header(18) + LAYERNORM))
    ex = optimize(m, Options(explain=True)).report["explain"]
    ln = entry(ex, "LayerNormalization")
    assert {"layernorm-fuse", "layernorm-add-beta"} <= set(ln["rules"])
    assert {"tf-layernorm-div", "tf-mean-last"} <= set(ln["facts"])  # the recognizers
    # ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add
    assert {"n_m", "n_d", "n_p", "n_v", "n_a", "n_s", "n_n", "n_k", "n_y"} <= set(ln["replaced"])
    assert not ex["removed"]


def test_attention_names_the_attention_rules_and_the_replaced_block():
    m = named(parse_model(bert_block()))
    ex = optimize(m, Options(explain=True, hardware="h200")).report["explain"]  # a profile that fuses it
    mha = entry(ex, "com.microsoft.MultiHeadAttention")
    assert {"attention-mha", "attention-mha-kv-3d", "attention-mha-qkv-bias"} <= set(mha["rules"])
    assert {"attention-core", "attention-scores"} <= set(mha["facts"])
    # bias Adds, head split, scores, softmax, weighted sum, head merge
    assert {"n_qa", "n_ka", "n_va", "n_qh", "n_kt", "n_vh", "n_s", "n_sm", "n_p", "n_o", "n_ot", "n_y"} \
        <= set(mha["replaced"])
    assert ex["rules"]["attention-mha"] == 1


def test_cli_prints_the_explanation_and_writes_it_in_the_report(tmp_path, capsys):
    src, out, rep = tmp_path / "m.onnx", tmp_path / "m.opt.onnx", tmp_path / "r.json"
    onnx.save(conv_bn_relu(), src)
    assert main(["optimize", str(src), "-o", str(out), "--explain", "--report", str(rep), "-q", "--no-verify"]) == 0
    text = capsys.readouterr().out
    assert "com.microsoft.FusedConv" in text and "conv-relu" in text and "replaced: conv1, bn1, relu1, ident1" in text
    report = json.loads(rep.read_text())
    assert entry(report["explain"], "com.microsoft.FusedConv")["replaced"]
    assert main(["optimize", str(src), "-o", str(out), "--report", str(rep), "-q", "--no-verify"]) == 0
    assert capsys.readouterr().out == "" and "explain" not in json.loads(rep.read_text())


def test_instrumented_rules_record_built_and_eliminated_enodes():
    eg = b.EGraph()
    text = """
    (datatype Op (In String) (Relu Op) (Conv Op Op) (Identity Op) (Fused Op Op))
    (ruleset f)
    (rewrite (Relu (Conv x w)) (Fused x w) :ruleset f :name "conv-relu")
    (rewrite (Identity x) x :ruleset f :name "id-elim")
    (let $y (Identity (Relu (Conv (In "x") (In "w")))))
    (run f 3)
    """
    outs = eg.run_program(*Instrumenter()(eg.parse_program(text, filename="t.egg")))
    matches = {k: v for o in outs if isinstance(o, b.RunScheduleOutput)
               for k, v in o.report.num_matches_per_rule.items()}
    assert matches["conv-relu"] == 1 and matches["id-elim"] >= 1  # names kept
    fz = eg.freeze().functions
    assert len(fz[PREFIX + "Fused"].rows) == 1 and len(fz[PREFIX + "Identity"].rows) == 1
