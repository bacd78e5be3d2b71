"""The memory planner: lifetimes, orders, in-place reuse and views, offsets, the checker,
the proof by execution, and the CLI functions (eqsat.plan)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from eqsat.cli.plan import add_plan_parser, check_plan_dims, plan_to_file
from eqsat.errors import UsageError
from eqsat.plan import (
    Graph,
    Node,
    PlanError,
    TensorInfo,
    check_plan,
    execute_plan,
    graph_from_model,
    plan_graph,
    plan_model,
)

from .conftest import parse_model

ROOT = Path(__file__).resolve().parent.parent
F32 = 4


def by_name(plan) -> dict[str, dict]:
    return {t["name"]: t for t in plan.to_dict()["tensors"]}


def chain_model(ops=("Relu", "Sigmoid", "Tanh"), n=1024) -> onnx.ModelProto:
    body, prev = [], "x"
    for k, op in enumerate(ops):
        out = "y" if k == len(ops) - 1 else f"t{k}"
        body.append(f"{out} = {op}({prev})")
        prev = out
    return parse_model(f"""<ir_version: 8, opset_import: ["": 17]>
g (float[{n}] x) => (float[{n}] y) {{ {' '.join(body)} }}""")


# ---- lifetimes ------------------------------------------------------------------------------

def test_lifetimes_inputs_and_initializers_are_not_planned():
    m = parse_model("""<ir_version: 8, opset_import: ["": 17]>
g (float[8] x) => (float[8] y, float[8] c) <float[8] w = {1,2,3,4,5,6,7,8}> {
  a = Mul(x, w)
  b = Sigmoid(a)
  c = Add(a, b)
  unused = Neg(b)
  y = Relu(c)
}""")
    g = graph_from_model(m)
    assert set(g.tensors) == {"a", "b", "c", "unused", "y"}  # not x, not w
    p = plan_model(m, inplace=False)
    t = by_name(p)
    life = {k: (v["first_use"], v["last_use"]) for k, v in t.items()}
    # steps: 0 Mul, 1 Sigmoid, 2 Add, 3 Neg, 4 Relu; graph outputs live to step 5 (the end)
    assert life == {"a": (0, 2), "b": (1, 3), "c": (2, 5), "unused": (3, 3), "y": (4, 5)}
    assert all(v["size"] == 8 * F32 for v in t.values())
    assert p.no_reuse_bytes == 5 * 64  # each 32-byte tensor takes one 64-byte slot
    check_plan(p)


def test_subgraph_reads_extend_a_lifetime():
    then = helper.make_graph([helper.make_node("Relu", ["a"], ["r"])], "then", [],
                             [helper.make_tensor_value_info("r", TensorProto.FLOAT, [4])])
    other = helper.make_graph([helper.make_node("Neg", ["a"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [4])])
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["a"], name="sig"),
        helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
        helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then, else_branch=other),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                          [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    p = plan_model(m)
    assert by_name(p)["a"]["last_use"] == p.order.index("if")  # read only inside the If's branches
    check_plan(p)
    assert execute_plan(m, p).status == "passed"


def test_unnamed_nodes_get_stable_generated_names():
    m = chain_model()
    m.graph.node[1].name = "mid"
    p = plan_model(m)
    assert p.order == ["Relu_0", "mid", "Tanh_2"]
    assert p.generated_names == ["Relu_0", "Tanh_2"]


# ---- in-place reuse and views --------------------------------------------------------------

def test_elementwise_chain_needs_one_buffer_in_place_and_two_without():
    m = chain_model(("Relu", "Sigmoid", "Tanh", "Neg"), n=1024)
    size = 1024 * F32
    with_ip = plan_model(m)
    without = plan_model(m, inplace=False)
    assert without.arena_bytes == 2 * size  # ping-pong between two buffers
    assert with_ip.arena_bytes == size  # every op writes over its input
    assert with_ip.inplace_saved_bytes == size
    t = by_name(with_ip)
    assert [t[k].get("alias_kind") for k in ("t0", "t1", "t2", "y")] == [None, "inplace", "inplace", "inplace"]
    assert {v["offset"] for v in t.values()} == {0}
    check_plan(with_ip)
    check_plan(without)
    assert execute_plan(m, with_ip).status == "passed"


def test_input_still_used_later_is_not_overwritten_in_place():
    m = parse_model("""<ir_version: 8, opset_import: ["": 17]>
g (float[256] x) => (float[256] y) {
  a = Relu(x)
  b = Sigmoid(a)
  c = Add(a, b)
  d = Mul(c, a)
  y = Sub(d, b)
}""")
    p = plan_model(m)
    t = by_name(p)
    # a and b are still read after Add: c may take neither buffer
    assert "alias_of" not in t["c"]
    assert t["c"]["offset"] not in (t["a"]["offset"], t["b"]["offset"])
    # Mul is the last use of c and a: d takes one of them; Sub the last use of d and b
    assert t["d"]["alias_kind"] == "inplace" and t["d"]["alias_of"] in ("c", "a")
    assert t["y"]["alias_kind"] == "inplace"
    check_plan(p)
    assert execute_plan(m, p).status == "passed"


def test_in_place_needs_same_size_and_type():
    m = parse_model("""<ir_version: 8, opset_import: ["": 17]>
g (float[1,64] x, float[64,64] z) => (float[64,64] y, double[64,64] w) {
  a = Relu(x)
  b = Relu(z)
  y = Add(a, b)
  c = Sigmoid(z)
  w = Cast<to = 11>(c)
}""")
    t = by_name(plan_model(m))
    assert t["y"]["alias_of"] == "b"  # a is broadcast (smaller): only b's buffer fits
    assert "alias_of" not in t["w"]  # float -> double: another type and size


def test_views_share_the_buffer_of_an_intermediate_only():
    m = parse_model("""<ir_version: 8, opset_import: ["": 17]>
g (float[4,64] x) => (float[2,128] y, float[256] z) <int64[2] s = {2, 128}, int64[1] f = {256}> {
  r = Reshape(x, s)
  a = Relu(x)
  b = Reshape(a, s)
  c = Flatten<axis = 0>(b)
  d = Squeeze(c)
  y = Sigmoid(r)
  z = Reshape(d, f)
}""")
    p = plan_model(m)
    t = by_name(p)
    assert "alias_of" not in t["r"]  # a view of the graph input gets its own buffer
    assert (t["b"]["alias_of"], t["b"]["alias_kind"]) == ("a", "view")
    assert (t["c"]["alias_of"], t["d"]["alias_of"], t["z"]["alias_of"]) == ("b", "c", "d")
    assert len({t[k]["offset"] for k in "abcdz"}) == 1
    assert p.view_bytes == 4 * 256 * F32
    # the group lives as long as its last member (z is a graph output)
    check_plan(p)
    assert execute_plan(m, p).status == "passed"


def test_view_keeps_its_input_alive_for_in_place():
    # a's view v is read after Sigmoid: Sigmoid may not overwrite a
    m = parse_model("""<ir_version: 8, opset_import: ["": 17]>
g (float[64] x) => (float[64] y) <int64[2] s = {8, 8}, int64[1] f = {64}> {
  a = Relu(x)
  v = Reshape(a, s)
  b = Sigmoid(a)
  w = Reshape(v, f)
  y = Add(b, w)
}""")
    p = plan_model(m)
    t = by_name(p)
    assert "alias_of" not in t["b"]
    check_plan(p)
    assert execute_plan(m, p).status == "passed"


# ---- symbolic dimensions -------------------------------------------------------------------

SYMBOLIC = """<ir_version: 8, opset_import: ["": 17]>
g (float[batch, 16] x) => (float[batch, 16] y) { a = Relu(x)  y = Sigmoid(a) }"""


def test_symbolic_dims_bound():
    m = parse_model(SYMBOLIC)
    p = plan_model(m, {"batch": 8, "unused": 3})
    assert p.dims == {"batch": 8}
    assert by_name(p)["a"]["size"] == 8 * 16 * F32
    assert by_name(p)["a"]["shape"] == [8, 16]


def test_unbound_symbolic_dim_is_a_usage_error():
    m = parse_model(SYMBOLIC)
    with pytest.raises(UsageError) as e:
        plan_model(m)
    assert str(e.value) == "dimension 'batch' is symbolic: give its size with --dim batch=N"
    assert e.value.exit_code == 2
    with pytest.raises(UsageError):
        check_plan_dims(m, {})
    check_plan_dims(m, {"batch": 2})


# ---- orders ----------------------------------------------------------------------------------

def test_memory_aware_order_beats_a_bad_model_order():
    # the model computes both big intermediates before either small one
    m = parse_model("""<ir_version: 8, opset_import: ["": 17]>
g (float[64] x) => (float[1] y) <int64[1] r = {1024}> {
  a1 = Tile(x, r)
  b1 = Tile(x, r)
  a2 = ReduceSum<keepdims = 1>(a1)
  b2 = ReduceMax<keepdims = 1>(b1)
  y = Add(a2, b2)
}""")
    p = plan_model(m)
    big = 64 * 1024 * F32
    assert p.model_order_lower_bound_bytes >= 2 * big
    assert p.lower_bound_bytes < p.model_order_lower_bound_bytes
    assert p.lower_bound_bytes < 2 * big
    assert p.order_heuristic != "model"
    assert (p.order.index("ReduceSum_2") < p.order.index("Tile_1")
            or p.order.index("ReduceMax_3") < p.order.index("Tile_0"))
    check_plan(p)
    assert execute_plan(m, p).status == "passed"


def test_model_order_kept_when_no_better():
    p = plan_model(chain_model())
    assert p.order_heuristic == "model"
    assert p.lower_bound_bytes == p.model_order_lower_bound_bytes


# ---- arena -----------------------------------------------------------------------------------

def test_alignment_and_bounds():
    m = chain_model(("Relu", "Sigmoid"), n=3)  # 12-byte tensors
    p = plan_model(m, alignment=128, inplace=False)
    assert all(t.offset % 128 == 0 for t in p.tensors)
    # two buffers live at step 1, each 12 bytes rounded up to 128
    assert p.arena_bytes == p.lower_bound_bytes == 256
    with pytest.raises(UsageError):
        plan_model(m, alignment=0)


def test_lower_bound_and_no_reuse_bracket_the_arena():
    p = plan_model(parse_model("""<ir_version: 8, opset_import: ["": 17]>
g (float[1,8,16,16] x, float[8,8,3,3] w) => (float[1,8,16,16] y) {
  a = Conv<pads = [1,1,1,1]>(x, w)
  b = Relu(a)
  c = Conv<pads = [1,1,1,1]>(b, w)
  d = Add(c, b)
  y = Relu(d)
}"""))
    assert p.lower_bound_bytes <= p.arena_bytes <= p.no_reuse_bytes
    assert set(p.heuristics) >= {"greedy-by-size", "greedy-by-breadth"}
    assert p.arena_bytes == p.heuristics[p.heuristic] - p.repack_saved_bytes <= min(p.heuristics.values())


def test_repack_reaches_the_lower_bound_where_greedy_placement_cannot():
    # a transformer's residual stream in miniature: each layer's residual r overlaps the
    # next one's for a step and lives through the layer's two big buffers a and b. Greedy
    # puts every a and b at the same offsets and the residuals ping-pong above them; the
    # optimum alternates the layout from layer to layer.
    from eqsat.plan.arena import HEURISTICS, place, repack
    from eqsat.plan.lifetimes import Buffer, lower_bound

    u = 64
    bufs = []
    for k in range(6):
        s = 10 * k
        bufs += [Buffer(f"r{k}", [f"r{k}"], u, s, s + 10), Buffer(f"a{k}", [f"a{k}"], 4 * u, s + 3, s + 6),
                 Buffer(f"b{k}", [f"b{k}"], 4 * u, s + 4, s + 6)]
    lb = lower_bound(bufs)
    assert lb == 9 * u
    for h in HEURISTICS:
        offs, arena = place(bufs, h)
        assert arena == 10 * u
        offs, arena = repack(bufs, offs, lb)
        assert arena == lb
        check_tensors_of(bufs, offs, arena)


def check_tensors_of(bufs, offs, arena):
    from eqsat.plan import check_tensors

    check_tensors([{"name": b.owner, "offset": o, "size": b.size, "first_use": b.start, "last_use": b.end}
                   for b, o in zip(bufs, offs, strict=True)], arena, 64)


# ---- checker ---------------------------------------------------------------------------------

def two_live(plan) -> tuple[str, str]:
    """Two tensors of the plan with their own buffers, alive at the same step, nonempty."""
    ts = [t for t in plan.to_dict()["tensors"] if "alias_of" not in t and t["size"] > 0]
    for i, a in enumerate(ts):
        for b in ts[i + 1:]:
            if a["first_use"] <= b["last_use"] and b["first_use"] <= a["last_use"]:
                return a["name"], b["name"]
    raise AssertionError("no two live tensors")


def test_checker_rejects_overlap_naming_both_tensors():
    p = plan_model(parse_model("""<ir_version: 8, opset_import: ["": 17]>
g (float[64] x) => (float[64] y) { a = Relu(x)  b = Sigmoid(x)  y = Add(a, b) }"""))
    d = p.to_dict()
    a, b = two_live(p)
    t = {x["name"]: x for x in d["tensors"]}
    t[b]["offset"] = t[a]["offset"]
    with pytest.raises(PlanError) as e:
        check_plan(d)
    assert f"'{a}'" in str(e.value) and f"'{b}'" in str(e.value) and "overlap" in str(e.value)


def test_checker_rejects_misalignment_and_overflow_and_bad_in_place():
    p = plan_model(chain_model(("Relu", "Sigmoid", "Tanh"), n=64))
    d = json.loads(json.dumps(p.to_dict()))
    d["tensors"][0]["offset"] = 8
    with pytest.raises(PlanError, match="alignment"):
        check_plan(d)
    d = json.loads(json.dumps(p.to_dict()))
    d["arena_bytes"] = 100
    with pytest.raises(PlanError, match="past the end of the arena"):
        check_plan(d)
    # claim t1 overwrites t0 in place while t0 is still needed later
    d = json.loads(json.dumps(p.to_dict()))
    t = {x["name"]: x for x in d["tensors"]}
    t["t0"]["last_use"] = 2
    with pytest.raises(PlanError, match="overwrites the buffer of 't0' in place"):
        check_plan(d)
    # against the graph: lifetimes must be the order's
    d = json.loads(json.dumps(p.to_dict()))
    {x["name"]: x for x in d["tensors"]}["y"]["last_use"] = 2  # a graph output lives to the end (3)
    check_plan(d)  # consistent in itself
    with pytest.raises(PlanError, match="planned lifetime"):
        check_plan(d, p.graph)


def test_checker_against_the_graph_rejects_a_non_topological_order():
    p = plan_model(chain_model())
    d = p.to_dict()
    d["order"] = list(reversed(d["order"]))
    with pytest.raises(PlanError, match="not topological"):
        check_plan(d, p.graph)


# ---- proof by execution ----------------------------------------------------------------------

SEVERAL_OPS = """<ir_version: 8, opset_import: ["": 17]>
g (float[2,8,32] x, float[32,32] w, float[32] bias, float[32] gamma) => (float[2,8,32] y, float[2,8,8] att) {
  q = MatMul(x, w)
  k = MatMul(x, w)
  kt = Transpose<perm = [0, 2, 1]>(k)
  s = MatMul(q, kt)
  sc = Mul(s, scale)
  att = Softmax<axis = -1>(sc)
  v = Add(q, bias)
  o = MatMul(att, v)
  r = Add(o, x)
  n = LayerNormalization<axis = -1>(r, gamma, bias)
  g1 = Mul(n, half)
  e = Erf(g1)
  e1 = Add(e, one)
  gl = Mul(n, e1)
  flat = Reshape(gl, shp)
  rl = Relu(flat)
  y = Reshape(rl, back)
}"""


def several_ops_model() -> onnx.ModelProto:
    m = onnx.parser.parse_model(SEVERAL_OPS)
    m.graph.initializer.extend([
        helper.make_tensor("scale", TensorProto.FLOAT, [], [0.125]),
        helper.make_tensor("half", TensorProto.FLOAT, [], [0.7071]),
        helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
        helper.make_tensor("shp", TensorProto.INT64, [2], [16, 32]),
        helper.make_tensor("back", TensorProto.INT64, [3], [2, 8, 32]),
    ])
    onnx.checker.check_model(m)
    return m


def test_execution_passes_on_a_model_with_several_ops():
    m = several_ops_model()
    p = plan_model(m)
    check_plan(p)
    assert p.arena_bytes < p.no_reuse_bytes
    ex = execute_plan(m, p)
    assert ex.status == "passed", ex.detail
    assert ex.engines == {"reference": len(m.graph.node)}
    assert set(ex.max_abs_diff) == {"y", "att"}


def test_execution_fails_on_a_corrupted_plan():
    m = several_ops_model()
    p = plan_model(m)
    d = json.loads(json.dumps(p.to_dict()))
    a, b = two_live(p)
    t = {x["name"]: x for x in d["tensors"]}
    t[b]["offset"] = t[a]["offset"]  # two live tensors on the same bytes
    d["arena_bytes"] = max(d["arena_bytes"], max(x["offset"] + x["size"] for x in d["tensors"]))
    with pytest.raises(PlanError):
        check_plan(d)
    ex = execute_plan(m, d, graph=p.graph)
    assert ex.status == "failed", (a, b)


def test_execution_catches_a_lifetime_that_is_too_short():
    # offsets are consistent with the (wrong) lifetimes, so the arena alone would not show
    # it; the poisoning of dead buffers does
    m = several_ops_model()
    p = plan_model(m)
    d = json.loads(json.dumps(p.to_dict()))
    shared = {x.get("alias_of") for x in d["tensors"]}
    victim = next(x for x in d["tensors"]
                  if "alias_of" not in x and x["name"] not in shared and x["last_use"] > x["first_use"])
    victim["last_use"] = victim["first_use"]
    check_plan(d)  # consistent in itself
    ex = execute_plan(m, d, graph=p.graph)
    assert ex.status == "failed"


def test_contrib_ops_sized_by_a_run_and_executed_under_onnxruntime():
    # com.microsoft FusedConv (with Z, the added tensor) and BiasGelu: unknown to ONNX shape
    # inference and to the reference evaluator; FusedConv is sized as the Conv it fuses
    # (eqsat.core.shapes._shape_proxy), BiasGelu by the run
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("FusedConv", ["x", "w", "b", "a"], ["c"], name="fused", domain="com.microsoft",
                         activation="Relu", pads=[1, 1, 1, 1]),
        helper.make_node("BiasGelu", ["c", "cb"], ["y"], name="gelu", domain="com.microsoft"),
    ]
    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.3, n)
             for n, s in (("w", (4, 4, 3, 3)), ("b", (4,)), ("cb", (8,)))]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    p = plan_model(m, {"batch": 2})
    t = by_name(p)
    assert t["c"]["shape"] == [2, 4, 8, 8] and "shape_source" not in t["c"]  # inferred
    assert t["y"]["shape"] == [2, 4, 8, 8] and t["y"]["shape_source"] == "run"
    assert p.value_dependent == {}  # BiasGelu's shape follows its inputs' shapes, not their values
    assert (t["c"]["alias_of"], t["c"]["alias_kind"]) == ("a", "inplace")  # FusedConv writes over Z
    assert (t["y"]["alias_of"], t["y"]["alias_kind"]) == ("c", "inplace")
    check_plan(p)
    ex = execute_plan(m, p)
    assert ex.status == "passed", ex.detail
    assert ex.engines == {"onnxruntime": 3}  # Conv: the reference one is Python loops


def _nonzero_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("NonZero", ["r"], ["nz"], name="nz"),
             helper.make_node("Cast", ["nz"], ["f"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Exp", ["f"], ["y"], name="exp")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "K"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_sizes_that_depend_on_input_values_are_named_and_warned_of(tmp_path, capsys):
    # NonZero's output size follows from x's values: the plan was sized on one random input,
    # without a word, and an all-positive x overflowed the arena
    p = plan_model(_nonzero_model(), {"N": 4})
    assert p.value_dependent == {"nz": "nz", "f": "nz", "y": "nz"}
    assert p.to_dict()["value_dependent_sizes"] == p.value_dependent
    assert plan_model(several_ops_model()).value_dependent == {}
    # through a static tensor: the shape of NonZero's output, then a Reshape to it
    m = _nonzero_model()
    m.graph.node.extend([helper.make_node("Shape", ["nz"], ["s"], name="shape"),
                         helper.make_node("Reshape", ["f", "s"], ["z"], name="reshape")])
    m.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    dep = plan_model(m, {"N": 4}).value_dependent
    assert dep.get("z") == "nz" and "s" not in dep  # s has a static shape, [2]
    src = tmp_path / "nz.onnx"
    onnx.save(_nonzero_model(), str(src))
    assert plan_cli("plan", src, "--dim", "N=4", "-q") == 0
    assert capsys.readouterr().err.strip() == (
        "eqsat: warning: plan: the sizes of 3 tensor(s) (nz, f, y) depend on input values (from nz): measured on "
        "one random input, the plan holds only for inputs that give the same sizes")
    # and in optimize --plan's report and stderr
    rc = plan_cli("optimize", src, "-o", tmp_path / "o.onnx", "--plan", tmp_path / "p.json", "--dim", "N=4",
                  "--report", tmp_path / "r.json", "-q")
    err = capsys.readouterr().err
    assert rc == 0, err
    report = json.loads((tmp_path / "r.json").read_text())
    assert [w for w in report["warnings"] if w.startswith("plan: the sizes of")] and "eqsat: warning: plan:" in err


def test_execute_runs_control_flow_and_float16_as_onnxruntime_does(tmp_path, capsys):
    # a Loop without its condition input (valid ONNX), which the reference evaluator ran zero
    # times, and float16 ops it computes in float16: both "failed" on correct plans
    v = helper.make_tensor_value_info
    body = helper.make_graph([helper.make_node("Identity", ["c"], ["c2"]),
                              helper.make_node("Add", ["acc", "u"], ["acc2"])],
                             "body", [v("i", TensorProto.INT64, []), v("c", TensorProto.BOOL, []),
                                      v("acc", TensorProto.FLOAT, [2, 4])],
                             [v("c2", TensorProto.BOOL, []), v("acc2", TensorProto.FLOAT, [2, 4])])
    g = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["u"], name="s"),
                           helper.make_node("Relu", ["x"], ["y"], name="r"),
                           helper.make_node("Loop", ["trip", "", "y"], ["out"], name="loop", body=body)],
                          "g", [v("x", TensorProto.FLOAT, [2, 4])], [v("out", TensorProto.FLOAT, [2, 4])],
                          [onnx.numpy_helper.from_array(np.array(3, np.int64), "trip")])
    loop = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    ex = execute_plan(loop, plan_model(loop))
    assert ex.status == "passed" and ex.engines.get("onnxruntime") == 1, ex.detail
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float16), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
                           helper.make_node("Softmax", ["m"], ["s"], name="sm"),
                           helper.make_node("Cast", ["s"], ["y"], name="cast", to=TensorProto.FLOAT)],
                          "g", [v("x", TensorProto.FLOAT16, ["B", 64])], [v("y", TensorProto.FLOAT, ["B", 64])], [w])
    half = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    ex = execute_plan(half, plan_model(half, {"B": 7}))
    assert ex.status == "passed" and ex.engines == {"onnxruntime": 3}, ex.detail
    # a plan whose proof fails is not written; a tolerance must be a number >= 0
    src = tmp_path / "loop.onnx"
    onnx.save(loop, str(src))
    assert plan_cli("plan", src, "--execute", "--rtol", "-1", "-o", tmp_path / "p.json") == 2
    assert plan_cli("plan", src, "--execute", "--rtol", "nan", "-o", tmp_path / "p.json") == 2
    capsys.readouterr()
    assert plan_cli("plan", src, "--execute", "-o", tmp_path / "p.json", "-q") == 0
    assert (tmp_path / "p.json").is_file()


def test_a_plan_that_fails_its_proof_is_not_written(tmp_path, monkeypatch, capsys):
    src = tmp_path / "m.onnx"
    onnx.save(several_ops_model(), str(src))
    from eqsat import verification as verify

    monkeypatch.setattr(verify, "compare", lambda e, a, r, t: ["output 'y': poisoned"])  # a failed proof
    assert plan_cli("plan", src, "--execute", "-o", tmp_path / "p.json", "-q") == 1
    assert "execution failed" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()


# ---- abstract graphs -----------------------------------------------------------------------------

def test_plan_graph_on_an_abstract_graph():
    nodes = [Node("n0", "Relu", inputs=("x",), outputs=("a",)), Node("n1", "Relu", inputs=("a",), outputs=("b",)),
             Node("n2", "Add", inputs=("a", "b"), outputs=("c",))]
    tensors = {"a": TensorInfo("a", 100, 0), "b": TensorInfo("b", 100, 1), "c": TensorInfo("c", 100, 2)}
    p = plan_graph(Graph(nodes, tensors, ("c",)))
    assert p.arena_bytes == 2 * 128 and p.lower_bound_bytes == 2 * 128
    check_plan(p)
    with pytest.raises(PlanError, match="not topological"):
        Graph(list(reversed(nodes)), {"a": TensorInfo("a", 1, 2), "b": TensorInfo("b", 1, 1),
                                      "c": TensorInfo("c", 1, 0)}, ("c",))


# ---- CLI functions -------------------------------------------------------------------------

def plan_cli(*argv) -> int:
    from eqsat.cli.main import main

    return main([str(a) for a in argv])


def test_cli_plan_writes_the_plan_and_executes(tmp_path, capsys):
    src = tmp_path / "m.onnx"
    onnx.save(several_ops_model(), str(src))
    out = tmp_path / "plan.json"
    rc = plan_cli("plan", src, "-o", out, "--alignment", "128", "--execute")
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "arena" in text and "lower bound" in text and "in-place" in text and "execution passed" in text
    d = json.loads(out.read_text())
    for key in ("arena_bytes", "lower_bound_bytes", "no_reuse_bytes", "inplace_saved_bytes", "order", "tensors",
                "alignment", "heuristic", "model_order_lower_bound_bytes", "dims"):
        assert key in d
    assert d["alignment"] == 128
    assert set(d["tensors"][0]) >= {"name", "offset", "size", "first_use", "last_use"}
    check_plan(d)


def test_cli_plan_unbound_dim_exits_2(tmp_path, capsys):
    src = tmp_path / "m.onnx"
    onnx.save(parse_model(SYMBOLIC), str(src))
    assert plan_cli("plan", src) == 2
    assert capsys.readouterr().err.strip() == (
        "eqsat: error: dimension 'batch' is symbolic: give its size with --dim batch=N")
    assert plan_cli("plan", src, "--dim", "batch=4", "-q") == 0
    # a --dim the model lacks binds nothing: a warning, as optimize gives
    assert plan_cli("plan", src, "--dim", "batch=4", "--dim", "bacth=4", "-q") == 0
    assert capsys.readouterr().err.strip() == ("eqsat: warning: --dim bacth: the model has no symbolic dimension "
                                               "of that name (its symbolic dimensions: batch)")


def test_plan_to_file(tmp_path):
    d = plan_to_file(parse_model(SYMBOLIC), tmp_path / "p.json", {"batch": 2}, 64)
    assert json.loads((tmp_path / "p.json").read_text()) == d
    assert d["dims"] == {"batch": 2}


def test_cli_args_namespace_defaults():
    p = argparse.ArgumentParser()
    add_plan_parser(p.add_subparsers(dest="command"))
    a = p.parse_args(["plan", "m.onnx"])
    assert (a.alignment, a.execute, a.output, a.dim) == (64, False, None, [])


def test_optimize_plan_writes_the_plan_of_the_optimized_model(tmp_path, capsys):
    src, out, plan = tmp_path / "m.onnx", tmp_path / "m.opt.onnx", tmp_path / "plan.json"
    onnx.save(parse_model(SYMBOLIC), str(src))
    assert plan_cli("optimize", src, "-o", out, "--plan", plan, "--dim", "batch=3", "-q") == 0, capsys.readouterr()
    d = json.loads(plan.read_text())
    optimized = onnx.load(str(out))
    assert sorted(d["order"]) == sorted(n.name for n in optimized.graph.node)
    produced = {o for n in optimized.graph.node for o in n.output}
    assert {t["name"] for t in d["tensors"]} <= produced
    assert d["dims"] == {"batch": 3}
    check_plan(d)


def test_optimize_plan_with_an_unbound_dim_fails_before_writing(tmp_path, capsys):
    src, out, plan = tmp_path / "m.onnx", tmp_path / "m.opt.onnx", tmp_path / "plan.json"
    onnx.save(parse_model(SYMBOLIC), str(src))
    assert plan_cli("optimize", src, "-o", out, "--plan", plan, "-q") == 2
    assert "dimension 'batch' is symbolic" in capsys.readouterr().err
    assert not out.exists() and not plan.exists()


# ---- corpus (slow) ---------------------------------------------------------------------------

def light_model(name: str) -> onnx.ModelProto:
    """A light model-zoo model of the onnx wheel with random weights (benchmarks/light_models.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("light_models", ROOT / "benchmarks" / "light_models.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.concrete(onnx.load(str(mod.light_dir() / f"light_{name}.onnx")))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["squeezenet", "resnet50"])
def test_light_model_plan_checks_and_executes(name):
    m = light_model(name)
    p = plan_model(m, {"batch": 1})
    check_plan(p)
    assert p.lower_bound_bytes <= p.arena_bytes <= 1.05 * p.lower_bound_bytes
    ex = execute_plan(m, p)
    assert ex.status == "passed", ex.detail


def test_sizes_print_in_a_unit_that_fits():
    from eqsat.plan.planner import _human

    assert [_human(n) for n in (512, 3 << 10, 5 << 20, 7 << 30, 100 << 40)] == [
        "512 B", "3.0 KiB", "5.00 MiB", "7.00 GiB", "100.00 TiB"]


# ---- what onnxruntime cannot run ------------------------------------------------------------

def custom_op_model() -> onnx.ModelProto:
    """Relu, then an op of a domain onnxruntime does not know."""
    v = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                           helper.make_node("Foo", ["r"], ["y"], name="foo", domain="my.domain")],
                          "g", [v("x", TensorProto.FLOAT, [2, 4])], [v("y", TensorProto.FLOAT, [2, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.domain", 1)])


def test_execute_on_an_op_onnxruntime_lacks_is_one_line_and_writes_nothing(tmp_path, capsys):
    # it was a traceback from onnxruntime's session on the one-node model of Foo
    src, out = tmp_path / "m.onnx", tmp_path / "p.json"
    onnx.save(custom_op_model(), str(src))
    assert plan_cli("plan", src, "-o", out, "-q") == 0 and out.is_file()  # planning needs no run
    out.unlink()
    rc = plan_cli("plan", src, "--execute", "-o", out, "-q")
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("eqsat: error:")]
    assert rc == 1 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("eqsat: error: execution not possible, plan not written: onnxruntime cannot run "
                               "the model: "), lines[0]
    assert "my.domain:Foo" in lines[0] and "without --execute" in lines[0]
    assert not out.exists()


def test_a_node_that_cannot_run_alone_makes_execution_not_possible(monkeypatch):
    import eqsat.plan.execute as ex_mod

    m = several_ops_model()
    p = plan_model(m)

    def refuse(model, feeds):
        raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : no kernel\nsecond line")

    monkeypatch.setattr(ex_mod, "_run_ort", refuse)
    monkeypatch.setattr(ex_mod, "_run_reference", refuse)  # the reference evaluator fails too
    ex = execute_plan(m, p)
    first = next(n for n in p.graph.nodes if n.name == p.to_dict()["order"][0])  # the first node run
    assert ex.status == "not possible", ex.detail
    assert ex.detail == (f"node '{first.name}' ({first.op_type}) could not run alone under the reference evaluator "
                         "or onnxruntime: [ONNXRuntimeError] : 1 : FAIL : no kernel"), ex.detail


def test_the_reference_evaluators_failures_fall_back_to_onnxruntime(monkeypatch):
    import eqsat.plan.execute as ex_mod

    def broken(model, feeds):
        raise ValueError("a bug of the reference evaluator")  # not NotImplementedError

    monkeypatch.setattr(ex_mod, "_run_reference", broken)
    m = several_ops_model()
    ex = execute_plan(m, plan_model(m))
    assert ex.status == "passed" and ex.engines == {"onnxruntime": len(m.graph.node)}, ex.detail
