"""Optimizing inside subgraphs (eqsat/core/subgraphs.py): If branches on a run-time condition,
Loop and Scan bodies and subgraphs nested in them are optimized as models of their own;
outer-scope references keep working; a body that cannot be optimized is kept exactly, with
the reason in the report. Every optimized model passes the onnx checker and gives the
original's outputs under onnxruntime, for several inputs and both branch conditions."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

import eqsat.core.pipeline
from eqsat.core.encode import graph_outer_refs
from eqsat.core.pipeline import Options, optimize
from eqsat.core.saturate import Limits
from eqsat.errors import OptimizeError

from .conftest import assert_same_outputs, assert_verified

F, B, I64 = TP.FLOAT, TP.BOOL, TP.INT64
RNG = np.random.default_rng(0)


def _vi(name, elem=F, shape=None):
    return h.make_tensor_value_info(name, elem, shape)


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _model(nodes, inputs, outputs, inits=(), value_info=(), opsets=(("", 18),)):
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits), value_info=list(value_info))
    m = h.make_model(g, opset_imports=[h.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _body(node: onnx.NodeProto, attr: str) -> onnx.GraphProto:
    return next(a.g for a in node.attribute if a.name == attr)


def _node(model: onnx.ModelProto, op: str) -> onnx.NodeProto:
    found = [n for n in model.graph.node if n.op_type == op]
    assert len(found) == 1, [n.op_type for n in model.graph.node]
    return found[0]


def _ops(g: onnx.GraphProto) -> list[str]:
    return sorted(n.op_type for n in g.node)


def _rows(report: dict) -> dict[str, dict]:
    return {r["path"]: r for r in report["subgraphs"]}


def _defined_names(g: onnx.GraphProto) -> set[str]:
    return {i.name for i in g.input} | {t.name for t in g.initializer} | {o for n in g.node for o in n.output}


# ---- If on a run-time condition


def _if_model() -> onnx.ModelProto:
    """y = If(c): the then branch reads the outer x and h through Identity chains, a
    Transpose pair and x*1; the else branch is Conv + BatchNormalization + Identity reading
    the outer x and the main graph's weights."""
    w = RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)
    scale, bias = RNG.random(3).astype(np.float32) + 0.5, RNG.standard_normal(3).astype(np.float32)
    mean, var = RNG.standard_normal(3).astype(np.float32), RNG.random(3).astype(np.float32) + 0.5
    then_g = h.make_graph([
        h.make_node("Identity", ["x"], ["t1"]),
        h.make_node("Identity", ["t1"], ["t2"]),
        h.make_node("Transpose", ["t2"], ["t3"], perm=[0, 2, 3, 1]),
        h.make_node("Transpose", ["t3"], ["t4"], perm=[0, 3, 1, 2]),
        h.make_node("Mul", ["t4", "one"], ["t5"]),
        h.make_node("Add", ["t5", "hx"], ["t6"]),
        h.make_node("Identity", ["t6"], ["t_out"]),
    ], "then", [], [_vi("t_out", F, [1, 2, 6, 6])], [_init("one", np.float32(1.0))])
    else_g = h.make_graph([
        h.make_node("Conv", ["x", "w"], ["c1"], pads=[1, 1, 1, 1]),
        h.make_node("BatchNormalization", ["c1", "scale", "bias", "mean", "var"], ["bn"]),
        h.make_node("Identity", ["bn"], ["bn2"]),
        h.make_node("Slice", ["bn2", "starts", "ends", "axes"], ["e_out"]),
    ], "else", [], [_vi("e_out", F, [1, 2, 6, 6])],
        [_init("starts", np.array([0], np.int64)), _init("ends", np.array([2], np.int64)),
         _init("axes", np.array([1], np.int64))])
    nodes = [h.make_node("Relu", ["x"], ["hx"]),
             h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="the_if")]
    inits = [_init("w", w), _init("scale", scale), _init("bias", bias), _init("mean", mean), _init("var", var)]
    return _model(nodes, [_vi("c", B, []), _vi("x", F, [1, 2, 6, 6])], [_vi("y", F, [1, 2, 6, 6])], inits)


def test_if_branches_on_a_runtime_condition_are_optimized():
    m = _if_model()
    res = optimize(m, Options())
    out = res.model
    onnx.checker.check_model(out, full_check=True)
    the_if = _node(out, "If")
    then_g, else_g = _body(the_if, "then_branch"), _body(the_if, "else_branch")
    assert _ops(then_g) == ["Add"]  # Identity chain, Transpose pair and x*1 gone
    assert _ops(else_g) == ["Conv", "Slice"]  # BatchNormalization folded into the Conv
    assert [o.name for o in then_g.output] == ["t_out"] and [o.name for o in else_g.output] == ["e_out"]
    assert then_g.output[0] == _body(_node(m, "If"), "then_branch").output[0]  # name and type exactly
    rows = _rows(res.report)
    assert rows["the_if.then_branch"] == {"path": "the_if.then_branch", "op": "If", "nodes_before": 7,
                                          "nodes_after": 1}
    assert rows["the_if.else_branch"]["nodes_after"] == 2
    # outer references keep their names: x and the main graph's Relu output hx
    assert set(graph_outer_refs(then_g)) == {"x", "hx"}
    assert set(graph_outer_refs(else_g)) <= _defined_names(out.graph)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((1, 2, 6, 6)).astype(np.float32)
        for c in (True, False):
            assert_same_outputs(m, out, {"c": np.array(c), "x": x}, rtol=1e-4, atol=1e-5)
            assert_verified(m, out)


# ---- Loop and Scan


def _loop_model() -> onnx.ModelProto:
    """acc <- Relu(Transpose(Transpose(acc * 1)) + x) for `trip` iterations; the body also
    reads the outer value k (a main-graph intermediate) and carries its condition through
    an Identity chain."""
    body = h.make_graph([
        h.make_node("Identity", ["cond_in"], ["ci"]),
        h.make_node("Identity", ["ci"], ["cond_out"]),
        h.make_node("Mul", ["acc_in", "one"], ["a1"]),
        h.make_node("Transpose", ["a1"], ["a2"], perm=[1, 0]),
        h.make_node("Transpose", ["a2"], ["a3"], perm=[1, 0]),
        h.make_node("Add", ["a3", "k"], ["a4"]),
        h.make_node("Identity", ["a4"], ["a5"]),
        h.make_node("Relu", ["a5"], ["acc_out"]),
        h.make_node("Identity", ["a5"], ["scan_out"]),
    ], "body", [_vi("iter", I64, []), _vi("cond_in", B, []), _vi("acc_in", F, [2, 3])],
        [_vi("cond_out", B, []), _vi("acc_out", F, [2, 3]), _vi("scan_out", F, [2, 3])],
        [_init("one", np.float32(1.0))])
    nodes = [h.make_node("Neg", ["x"], ["k"]),
             h.make_node("Loop", ["trip", "cond", "x"], ["acc", "per_iter"], body=body, name="loop")]
    return _model(nodes, [_vi("trip", I64, []), _vi("cond", B, []), _vi("x", F, [2, 3])],
                  [_vi("acc", F, [2, 3]), _vi("per_iter", F, ["n", 2, 3])])


def test_loop_body_is_optimized():
    m = _loop_model()
    res = optimize(m, Options())
    out = res.model
    onnx.checker.check_model(out)
    body = _body(_node(out, "Loop"), "body")
    assert _ops(body) == ["Add", "Identity", "Relu"]  # only the Identity that renames the condition stays
    assert [i.name for i in body.input] == ["iter", "cond_in", "acc_in"]
    assert list(body.output) == list(_body(_node(m, "Loop"), "body").output)
    assert graph_outer_refs(body) == ["k"]
    assert _rows(res.report)["loop.body"]["nodes_after"] == 3
    for trip in (0, 1, 4):
        x = np.random.default_rng(trip).standard_normal((2, 3)).astype(np.float32)
        assert_same_outputs(m, out, {"trip": np.array(trip, np.int64), "cond": np.array(True), "x": x})
        assert_verified(m, out)


def test_scan_body_is_optimized():
    body = h.make_graph([
        h.make_node("Identity", ["row"], ["r1"]),
        h.make_node("Add", ["s_in", "r1"], ["s1"]),
        h.make_node("Mul", ["s1", "one"], ["s2"]),
        h.make_node("Mul", ["s2", "scale"], ["s_out"]),
        h.make_node("Identity", ["s2"], ["row_out"]),
    ], "scan", [_vi("s_in", F, [3]), _vi("row", F, [3])], [_vi("s_out", F, [3]), _vi("row_out", F, [3])],
        [_init("one", np.float32(1.0))])
    nodes = [h.make_node("Scan", ["zeros", "x"], ["total", "rows"], body=body, num_scan_inputs=1, name="scan")]
    m = _model(nodes, [_vi("x", F, ["n", 3])], [_vi("total", F, [3]), _vi("rows", F, ["n", 3])],
               [_init("zeros", np.zeros(3, np.float32)), _init("scale", np.full(3, 0.5, np.float32))])
    res = optimize(m, Options())
    out = res.model
    onnx.checker.check_model(out)
    new = _body(_node(out, "Scan"), "body")
    assert _ops(new) == ["Add", "Mul"]  # r1, x*1 and row_out's Identity gone (the Add produces row_out)
    assert graph_outer_refs(new) == ["scale"] and "scale" in {t.name for t in out.graph.initializer}
    assert _rows(res.report)["scan.body"] == {"path": "scan.body", "op": "Scan", "nodes_before": 5, "nodes_after": 2}
    for n in (1, 5):
        x = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
        assert_same_outputs(m, out, {"x": x}, rtol=1e-6)
        assert_verified(m, out)


# ---- nesting


def test_if_nested_in_a_loop_body_is_optimized_and_reads_both_outer_scopes():
    """The Loop body holds an If on `iter < 2` whose branches read a Loop-body value (a),
    the main graph's value (k) and the body's formal input (acc_in); both levels optimized."""
    then_g = h.make_graph([h.make_node("Identity", ["a"], ["p1"]), h.make_node("Identity", ["p1"], ["p2"]),
                           h.make_node("Add", ["p2", "k"], ["p_out"])],
                          "then", [], [_vi("p_out", F, [2, 3])])
    else_g = h.make_graph([h.make_node("Transpose", ["acc_in"], ["q1"], perm=[1, 0]),
                           h.make_node("Transpose", ["q1"], ["q2"], perm=[1, 0]),
                           h.make_node("Sub", ["q2", "k"], ["q_out"])],
                          "else", [], [_vi("q_out", F, [2, 3])])
    body = h.make_graph([
        h.make_node("Identity", ["acc_in"], ["a0"]),
        h.make_node("Mul", ["a0", "two"], ["a"]),
        h.make_node("Less", ["iter", "lim"], ["small"]),
        h.make_node("If", ["small"], ["branch"], then_branch=then_g, else_branch=else_g, name="inner_if"),
        h.make_node("Identity", ["branch"], ["acc_out"]),
        h.make_node("Identity", ["cond_in"], ["cond_out"]),
    ], "body", [_vi("iter", I64, []), _vi("cond_in", B, []), _vi("acc_in", F, [2, 3])],
        [_vi("cond_out", B, []), _vi("acc_out", F, [2, 3])],
        [_init("two", np.float32(2.0)), _init("lim", np.int64(2))])
    nodes = [h.make_node("Relu", ["x"], ["k"]),
             h.make_node("Loop", ["trip", "", "x"], ["acc"], body=body, name="loop")]
    m = _model(nodes, [_vi("trip", I64, []), _vi("x", F, [2, 3])], [_vi("acc", F, [2, 3])])
    res = optimize(m, Options())
    out = res.model
    onnx.checker.check_model(out)
    new_body = _body(_node(out, "Loop"), "body")
    inner = [n for n in new_body.node if n.op_type == "If"]
    assert len(inner) == 1
    assert _ops(_body(inner[0], "then_branch")) == ["Add"] and _ops(_body(inner[0], "else_branch")) == ["Sub"]
    assert "Identity" not in [n.op_type for n in new_body.node if n.output[0] != "cond_out"]
    rows = _rows(res.report)
    assert rows["loop.body"]["nodes_after"] < rows["loop.body"]["nodes_before"] == 6
    assert rows["loop.body/inner_if.then_branch"]["nodes_after"] == 1
    assert rows["loop.body/inner_if.else_branch"]["nodes_after"] == 1
    # the inner branches' outer references resolve: to the Loop body's values or the main graph's
    visible = _defined_names(new_body) | _defined_names(out.graph)
    for attr in ("then_branch", "else_branch"):
        assert set(graph_outer_refs(_body(inner[0], attr))) <= visible
    for trip in (0, 1, 2, 5):
        x = np.random.default_rng(trip).standard_normal((2, 3)).astype(np.float32)
        assert_same_outputs(m, out, {"trip": np.array(trip, np.int64), "x": x}, rtol=1e-6)
        assert_verified(m, out)


# ---- kept unchanged


def test_body_reading_an_outer_value_of_unknown_type_is_kept_with_the_reason():
    """The branch reads z, the output of a custom op that no inference can type: the branch
    stays exactly as it was; the other branch, whose outer values are typed, is optimized."""
    then_g = h.make_graph([h.make_node("Identity", ["z"], ["t1"]), h.make_node("Relu", ["t1"], ["t_out"])],
                          "then", [], [_vi("t_out", F, [2])])
    else_g = h.make_graph([h.make_node("Identity", ["x"], ["e1"]), h.make_node("Neg", ["e1"], ["e_out"])],
                          "else", [], [_vi("e_out", F, [2])])
    nodes = [h.make_node("Mystery", ["x"], ["z"], domain="my.ops"),
             h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="if")]
    m = _model(nodes, [_vi("c", B, []), _vi("x", F, [2])], [_vi("y", F, [2])],
               opsets=(("", 18), ("my.ops", 1)))
    res = optimize(m, Options())
    onnx.checker.check_model(res.model)
    the_if = _node(res.model, "If")
    assert _body(the_if, "then_branch") == then_g  # every field as it was
    assert _ops(_body(the_if, "else_branch")) == ["Neg"]
    rows = _rows(res.report)
    assert rows["if.then_branch"] == {
        "path": "if.then_branch", "op": "If", "nodes_before": 2,
        "kept": "the type of outer value(s) 'z' is unknown in the enclosing graph; declare it in the graph's "
                "value_info to optimize this body"}
    assert rows["if.else_branch"]["nodes_after"] == 1
    # declaring z's type is enough
    m.graph.value_info.append(_vi("z", F, [2]))
    res = optimize(m, Options())
    assert _ops(_body(_node(res.model, "If"), "then_branch")) == ["Relu"]


def test_body_whose_optimization_fails_is_kept_with_the_reason(monkeypatch):
    real = eqsat.core.pipeline.optimize

    def failing(model, opts, progress=None):
        if model.graph.name == "then":
            raise OptimizeError("extraction failed: something broke")
        return real(model, opts, progress)

    monkeypatch.setattr(eqsat.core.pipeline, "optimize", failing)
    m = _if_model()
    res = real(m, Options())
    the_if = _node(res.model, "If")
    assert _body(the_if, "then_branch") == _body(_node(m, "If"), "then_branch")
    assert _rows(res.report)["the_if.then_branch"]["kept"] == (
        "optimizing the body failed: extraction failed: something broke")
    assert _ops(_body(the_if, "else_branch")) == ["Conv", "Slice"]
    x = RNG.standard_normal((1, 2, 6, 6)).astype(np.float32)
    for c in (True, False):
        assert_same_outputs(m, res.model, {"c": np.array(c), "x": x}, rtol=1e-4, atol=1e-5)
        assert_verified(m, res)


def test_without_rules_bodies_are_carried_exactly():
    m = _if_model()
    res = optimize(m, Options(default_rules=False))
    assert _node(res.model, "If").attribute == _node(m, "If").attribute
    assert {r["kept"] for r in res.report["subgraphs"]} == {"no rules to apply"}


def test_new_names_in_a_body_never_collide_with_outer_names():
    """Values the optimizer names afresh in a body (a folded constant: v__N) must not take a
    name that the main graph defines; the checker (single assignment across scopes) and
    onnxruntime accept the result."""
    then_g = h.make_graph([h.make_node("Add", ["c1", "c2"], ["s"]), h.make_node("Mul", ["x", "s"], ["t_out"])],
                          "then", [], [_vi("t_out", F, [3])],
                          [_init("c1", np.ones(3, np.float32)), _init("c2", np.arange(3, dtype=np.float32))])
    else_g = h.make_graph([h.make_node("Neg", ["x"], ["e_out"])], "else", [], [_vi("e_out", F, [3])])
    chain = [h.make_node("Relu", ["x"], ["v__1"])] + [h.make_node("Relu", [f"v__{i}"], [f"v__{i + 1}"])
                                                      for i in range(1, 12)]
    nodes = [*chain, h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="if")]
    m = _model(nodes, [_vi("c", B, []), _vi("x", F, [3])], [_vi("y", F, [3]), _vi("v__12", F, [3])])
    res = optimize(m, Options())
    out = res.model
    onnx.checker.check_model(out)
    then_new = _body(_node(out, "If"), "then_branch")
    assert _ops(then_new) == ["Mul"] and len(then_new.initializer) == 1
    outer = {o for n in out.graph.node for o in n.output} | {i.name for i in out.graph.input}
    assert not (_defined_names(then_new) & outer)
    for c in (True, False):
        assert_same_outputs(m, out, {"c": np.array(c), "x": np.array([1.0, -2.0, 3.0], np.float32)})
        assert_verified(m, out)


@pytest.mark.parametrize("target", ["ort", "onnx"])
def test_fused_ops_in_a_body_bring_their_opset_import(target):
    """A body fused into com.microsoft ops (target ort) makes the model import that domain."""
    w = RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)
    then_g = h.make_graph([h.make_node("Conv", ["x", "w"], ["c1"], pads=[1, 1, 1, 1]),
                           h.make_node("Relu", ["c1"], ["t_out"])], "then", [], [_vi("t_out", F, [1, 3, 5, 5])])
    else_g = h.make_graph([h.make_node("Conv", ["x", "w"], ["e_out"], pads=[1, 1, 1, 1])], "else", [],
                          [_vi("e_out", F, [1, 3, 5, 5])])
    m = _model([h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
               [_vi("c", B, []), _vi("x", F, [1, 2, 5, 5])], [_vi("y", F, [1, 3, 5, 5])], [_init("w", w)])
    res = optimize(m, Options(target=target))
    out = res.model
    onnx.checker.check_model(out)
    then_new = _body(_node(out, "If"), "then_branch")
    domains = {o.domain for o in out.opset_import}
    if target == "ort":
        assert [(n.domain, n.op_type) for n in then_new.node] == [("com.microsoft", "FusedConv")]
        assert "com.microsoft" in domains
    else:
        assert _ops(then_new) == ["Conv", "Relu"] and "com.microsoft" not in domains
    x = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
    for c in (True, False):
        assert_same_outputs(m, out, {"c": np.array(c), "x": x}, rtol=1e-4, atol=1e-5)
        assert_verified(m, out)



def test_subgraphs_share_the_time_limit():
    """Past the saturation time limit, bodies are kept (with the reason), never optimized late."""
    m = _if_model()
    res = optimize(m, Options(limits=Limits(time_limit=1e-9)))
    assert _node(res.model, "If").attribute == _node(m, "If").attribute
    assert {r["kept"] for r in res.report["subgraphs"]} == {
        "the time limit (1e-09 s, --time-limit) was spent on earlier subgraphs"}
    x = RNG.standard_normal((1, 2, 6, 6)).astype(np.float32)
    for c in (True, False):
        assert_same_outputs(m, res.model, {"c": np.array(c), "x": x})
        assert_verified(m, res)


def test_a_body_improved_only_inside_its_nested_if_is_replaced():
    """The Loop body's own ops cannot improve; its If's then branch can: the body is still
    replaced (else the nested improvement would be lost)."""
    then_g = h.make_graph([h.make_node("Identity", ["acc_in"], ["p1"]), h.make_node("Add", ["p1", "k"], ["p_out"])],
                          "then", [], [_vi("p_out", F, [2, 3])])
    else_g = h.make_graph([h.make_node("Sub", ["acc_in", "k"], ["q_out"])], "else", [], [_vi("q_out", F, [2, 3])])
    body = h.make_graph([
        h.make_node("Less", ["iter", "lim"], ["small"]),
        h.make_node("If", ["small"], ["acc_out"], then_branch=then_g, else_branch=else_g, name="inner_if"),
        h.make_node("Identity", ["cond_in"], ["cond_out"]),
    ], "body", [_vi("iter", I64, []), _vi("cond_in", B, []), _vi("acc_in", F, [2, 3])],
        [_vi("cond_out", B, []), _vi("acc_out", F, [2, 3])], [_init("lim", np.int64(2))])
    nodes = [h.make_node("Relu", ["x"], ["k"]), h.make_node("Loop", ["trip", "", "x"], ["acc"], body=body, name="loop")]
    m = _model(nodes, [_vi("trip", I64, []), _vi("x", F, [2, 3])], [_vi("acc", F, [2, 3])])
    res = optimize(m, Options())
    onnx.checker.check_model(res.model)
    rows = _rows(res.report)
    assert rows["loop.body"]["nodes_after"] == 3
    assert rows["loop.body/inner_if.then_branch"]["nodes_after"] == 1
    inner = next(n for n in _body(_node(res.model, "Loop"), "body").node if n.op_type == "If")
    assert _ops(_body(inner, "then_branch")) == ["Add"]
    for trip in (0, 3):
        x = np.random.default_rng(trip).standard_normal((2, 3)).astype(np.float32)
        assert_same_outputs(m, res.model, {"trip": np.array(trip, np.int64), "x": x})
        assert_verified(m, res)


BAD_SQUARE = """
; Mul(x, x) -> x   (unsound on purpose: a rule file's mistake)
(rewrite (Mul x x) x :ruleset algebra :name "bad-square")
"""


def test_an_optimized_body_that_computes_otherwise_is_kept(tmp_path):
    # the then branch runs only where max(x) > 10: never on standard normal inputs, and on the
    # large edge case (+-2e15) verification compares only where values are finite. An unsound
    # rule's rewrite of it (x * x -> x) was written with exit 0 and gave x for [1, 2, 30, 4].
    # Each optimized body is verified against the body as it was, as a model of its own
    rules = tmp_path / "bad.egg"
    rules.write_text(BAD_SQUARE)
    x = _vi("x", F, [4])
    then = h.make_graph([h.make_node("Mul", ["x", "x"], ["t_o"])], "then", [], [_vi("t_o", F, [4])])
    other = h.make_graph([h.make_node("Neg", ["x"], ["e_o"])], "else", [], [_vi("e_o", F, [4])])
    m = _model([h.make_node("ReduceMax", ["x"], ["mx"], keepdims=0),
                h.make_node("Greater", ["mx", "ten"], ["c"]),
                h.make_node("If", ["c"], ["y"], name="the_if", then_branch=then, else_branch=other)],
               [x], [_vi("y", F, [4])], inits=[_init("ten", np.float32(10.0))])
    res = optimize(m, Options(rule_files=[rules]))
    assert _body(_node(res.model, "If"), "then_branch") == _body(_node(m, "If"), "then_branch")
    kept = _rows(res.report)["the_if.then_branch"]["kept"]
    assert kept.startswith("the optimized body computes otherwise: "), kept
    assert_same_outputs(m, res.model, {"x": np.array([1, 2, 30, 4], np.float32)}, rtol=0, atol=0)
    assert_verified(m, res)
