"""Proof by execution: run the model node by node with every intermediate tensor in ONE
numpy byte arena, at its planned offset, and compare the outputs with onnxruntime's.

The arena is `np.zeros(arena_bytes, np.uint8)`; a tensor is the view
`arena[off:off + size].view(dtype).reshape(shape)`. Each node reads its intermediate
inputs from the arena when it runs and its outputs are copied into their planned views, so
a plan that puts two live tensors on the same bytes clobbers one of them and the outputs
come out wrong. To catch a plan whose lifetimes are too short as well, the bytes of each
buffer are overwritten with 0xFF (NaN for floats) right after the step at which the plan
says it dies (`poison`). Graph inputs and initializers stay outside the arena (the caller's
memory), as in the plan.

Nodes run under onnx's reference evaluator (`onnx.reference.ReferenceEvaluator` on a
one-node model). Nodes it does not implement (onnxruntime's contrib ops: com.microsoft
FusedConv, FusedMatMul, SkipLayerNormalization, BiasGelu, ..., and
SimplifiedLayerNormalization in the default domain), a node whose reference outputs have
other shapes than the plan's (onnxruntime's run sized them), the ops in `ORT_OPS`, whose
reference implementations are Python loops (Conv takes seconds per ResNet layer) or round
differently (BatchNormalization: an ulp per element, which 50 layers of a ResNet amplify to
2e-5 on the logits, past atol 1e-5; LRN: 1e-3 relative, which AlexNet's softmax shows),
and
Softmax, LogSoftmax and Hardmax before opset 13 (the reference evaluator has only their
opset-13 semantics), If, Loop and Scan (the reference evaluator runs a Loop without its
condition input zero times), and every node with a float16 or bfloat16 input or output
(the reference evaluator computes in that type, onnxruntime's CPU kernels mostly in
float32) run alone under onnxruntime instead: a one-node model, its inputs fed from the
arena, its outputs copied into it; so does a node the reference evaluator fails on. The
expected outputs come from onnxruntime running the whole model with graph optimizations off
(the same graph that was planned), on the same inputs, before the arena run. Where
onnxruntime cannot run the model, or a node runs alone under neither engine, the proof is
`not possible` and says what could not run and why.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import ModelProto, helper, numpy_helper

from eqsat.io import external
from eqsat.plan.errors import PlanError
from eqsat.plan.graph import Graph, graph_from_model
from eqsat.plan.sizes import np_dtype

ORT_OPS = frozenset({"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "DeformConv", "MaxPool",
                     "AveragePool", "LpPool", "MaxUnpool", "MaxRoiPool", "RoiAlign", "Col2Im",
                     "BatchNormalization", "LRN"})
# The reference evaluator implements these ops with the semantics of this opset on only
# (before 13, Softmax & co. flatten the input to 2-D at `axis`, default 1): older ones run
# under onnxruntime.
REFERENCE_SINCE = {"Softmax": 13, "LogSoftmax": 13, "Hardmax": 13}
CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})
HALF = frozenset({onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16})
# (rtol, atol) where the caller gives none: the arena run and onnxruntime's whole-model run
# compute alike, so tighter than verification's. Every output of a model with float16 or
# bfloat16 tensors gets HALF_TOLERANCE (verification's for float16): onnxruntime's whole
# model keeps some half values in float32 between the casts it inserts, the node-by-node
# run rounds each to its type.
DEFAULT_TOLERANCE = (1e-4, 1e-5)
HALF_TOLERANCE = (1e-2, 1e-3)


@dataclass
class Execution:
    status: str  # passed | failed | not possible
    detail: str = ""
    seconds: float = 0.0  # the node-by-node run through the arena
    reference_seconds: float = 0.0  # onnxruntime on the whole model
    engines: dict[str, int] = field(default_factory=dict)  # nodes run by each engine
    max_abs_diff: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"status": self.status, "detail": self.detail, "seconds": round(self.seconds, 3),
                "reference_seconds": round(self.reference_seconds, 3), "engines": self.engines,
                "max_abs_diff": self.max_abs_diff}


def _elem(a: np.ndarray) -> int:
    return int(helper.np_dtype_to_tensor_dtype(a.dtype))


def _one_node_model(model: ModelProto, node: onnx.NodeProto, inputs: dict[str, np.ndarray],
                    out_types: dict[str, int]) -> ModelProto:
    g = helper.make_graph(
        [node], "node",
        [helper.make_tensor_value_info(x, _elem(v), None) for x, v in inputs.items()],
        [helper.make_tensor_value_info(y, out_types.get(y, 0), None) for y in node.output if y],
    )
    m = helper.make_model(g, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    m.functions.extend(model.functions)
    return m


def _run_reference(m: ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(m).run(None, feeds)


def _run_ort(m: ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    from eqsat.verification import ort

    rt = ort()
    so = rt.SessionOptions()
    so.graph_optimization_level = rt.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4
    sess = rt.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {k: np.ascontiguousarray(v) for k, v in feeds.items()})


def _run_node(model: ModelProto, proto: onnx.NodeProto, ins: dict[str, np.ndarray], out_types: dict[str, int],
              use_ort: bool, shapes: list[tuple[int, ...]] | None = None) -> tuple[list[np.ndarray], str]:
    """A node's outputs and the engine that computed them: the reference evaluator unless
    `use_ort` or it fails (any exception: it lacks the op, or trips on it) or gives other
    shapes than `shapes` (the plan's, which onnxruntime's run gave: a Slice to INT64_MAX with a
    negative step is empty in the reference, onnxruntime runs it to the first element), else
    onnxruntime, whose exception propagates."""
    m = _one_node_model(model, proto, ins, out_types)
    if not use_ort:
        try:
            got = _run_reference(m, ins)
            if shapes is None or [tuple(np.shape(v)) for v in got] == [tuple(s) for s in shapes]:
                return got, "reference"
        except Exception:  # noqa: BLE001 - onnxruntime gets its turn
            pass
    return _run_ort(m, ins), "onnxruntime"


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _weights(model: ModelProto) -> dict[str, np.ndarray]:
    out = {}
    for t in model.graph.initializer:
        out[t.name] = external.read(t) if external.is_external(t) else numpy_helper.to_array(t)
    return out


def _buffers(tensors: dict[str, dict]) -> list[tuple[int, int, int]]:
    """(last step, offset, bytes) of each alias group, from the plan."""
    def root(name: str) -> str:
        seen = set()
        while tensors[name].get("alias_of") is not None and name not in seen:
            seen.add(name)
            name = tensors[name]["alias_of"]
        return name

    end: dict[str, int] = {}
    for name, t in tensors.items():
        r = root(name)
        end[r] = max(end.get(r, -1), int(t["last_use"]))
    return [(e, int(tensors[r]["offset"]), int(tensors[r]["size"])) for r, e in end.items()]


def _resolve_plan(model: ModelProto, plan,
                  graph: Graph | None) -> tuple[dict, dict, Graph, list[int], dict[str, dict]]:
    """(plan dict, dims, graph, order as node indices, tensors by name); PlanError where the plan misfits the model."""
    from eqsat.plan.planner import Plan

    if isinstance(plan, Plan):
        graph = graph if graph is not None else plan.graph
        d = plan.to_dict()
    else:
        d = plan
    dims = dict(d.get("dims") or {})
    if graph is None:
        graph = graph_from_model(model, dims)
    index = graph.index()
    try:
        order = [index[n] for n in d["order"]]
    except KeyError as e:
        raise PlanError(f"the plan's order names node {e}, which the model does not have") from None
    tensors = {t["name"]: t for t in d["tensors"]}
    missing = [t for t in graph.tensors if t not in tensors]
    if missing:
        raise PlanError(f"intermediate tensor '{missing[0]}' is not in the plan")
    return d, dims, graph, order, tensors


def _run_arena(model: ModelProto, graph: Graph, order: list[int], tensors: dict[str, dict], d: dict,
               feeds: dict[str, np.ndarray], names: list[str], poison: bool, ort_ops: frozenset[str],
               ref_seconds: float) -> Execution | tuple[dict[str, np.ndarray], float, dict[str, int]]:
    """Run `order` through one arena: (outputs `names`, seconds, engines), or the Execution where a node fails."""
    weights = _weights(model)
    arena = np.zeros(int(d["arena_bytes"]), np.uint8)
    dtypes = {t: np_dtype(info.elem_type) for t, info in graph.tensors.items()}

    def view(name: str) -> np.ndarray:
        info = graph.tensors[name]
        off = int(tensors[name]["offset"])
        return arena[off:off + info.size].view(dtypes[name]).reshape(info.shape)

    def value(name: str) -> np.ndarray:
        if name in graph.tensors:
            return view(name)
        if name in feeds:
            return feeds[name]
        if name in weights:
            return weights[name]
        raise PlanError(f"value '{name}' is neither an intermediate, an input nor an initializer")

    dying: dict[int, list[tuple[int, int]]] = {}
    if poison:
        for e, off, size in _buffers(tensors):
            dying.setdefault(e, []).append((off, size))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    engines: dict[str, int] = {}
    t0 = time.perf_counter()
    for step, i in enumerate(order):
        node = graph.nodes[i]
        proto = model.graph.node[i]
        ins = {x: value(x) for x in node.inputs}
        out_types = {y: graph.tensors[y].elem_type for y in node.outputs}
        use_ort = (node.domain not in ("", "ai.onnx") or node.op_type in ort_ops or node.op_type in CONTROL_FLOW
                   or opset < REFERENCE_SINCE.get(node.op_type, 0)
                   or any(_elem(v) in HALF for v in ins.values() if isinstance(v, np.ndarray))
                   or any(t in HALF for t in out_types.values()))
        try:
            results, engine = _run_node(model, proto, ins, out_types, use_ort,
                                        [graph.tensors[y].shape for y in node.outputs])
        except Exception as e:  # noqa: BLE001 - what neither engine runs alone cannot be proven node by node
            engines_tried = "onnxruntime" if use_ort else "the reference evaluator or onnxruntime"
            return Execution("not possible", f"node '{node.name}' ({node.op_type}) could not run alone under "
                                             f"{engines_tried}: {_first_line(e)}",
                             time.perf_counter() - t0, ref_seconds, engines)
        engines[engine] = engines.get(engine, 0) + 1
        for y, v in zip(node.outputs, results, strict=True):
            v = np.asarray(v)
            info = graph.tensors[y]
            if tuple(v.shape) != tuple(info.shape):
                return Execution("failed", f"node '{node.name}' ({node.op_type}) produced '{y}' with shape "
                                           f"{tuple(v.shape)}, but the plan sized it as {tuple(info.shape)}",
                                 time.perf_counter() - t0, 0.0, engines)
            view(y)[...] = v
        for off, size in dying.get(step, ()):
            arena[off:off + size] = 0xFF
    seconds = time.perf_counter() - t0
    return {n: np.array(value(n)) for n in names}, seconds, engines


def _compare_outputs(graph: Graph, feeds: dict[str, np.ndarray], expected: dict, actual: dict[str, np.ndarray],
                     names: list[str], rtol: float | None, atol: float | None, seconds: float, ref_seconds: float,
                     engines: dict[str, int]) -> Execution:
    """`passed` where `actual` matches `expected` within rtol/atol (None: by precision), else `failed`."""
    from eqsat.verification import compare

    diffs = {}
    for n in names:
        e, a = np.asarray(expected[n]), actual[n]
        if e.shape == a.shape and e.dtype.kind in "fiu" and e.size:
            err = np.abs(e.astype(np.float64) - a.astype(np.float64))
            err = err[~np.isnan(err)]
            diffs[n] = float(err.max()) if err.size else float("nan")
    half = any(i.elem_type in HALF for i in graph.tensors.values()) or any(
        _elem(np.asarray(v)) in HALF for v in feeds.values())
    r, t = HALF_TOLERANCE if half else DEFAULT_TOLERANCE
    rtol, atol = r if rtol is None else rtol, t if atol is None else atol
    with warnings.catch_warnings():  # all-NaN outputs (a poisoned buffer) are a finding, not a warning
        warnings.simplefilter("ignore", RuntimeWarning)
        bad = compare({n: expected[n] for n in names}, actual, rtol, atol)
    if bad:
        return Execution("failed", "; ".join(map(str, bad[:3])), seconds, ref_seconds, engines, diffs)
    return Execution("passed", f"{len(names)} output(s) match onnxruntime within rtol {rtol:g}, atol {atol:g}",
                     seconds, ref_seconds, engines, diffs)


def execute_plan(model: ModelProto, plan, feeds: dict[str, np.ndarray] | None = None, rtol: float | None = None,
                 atol: float | None = None, poison: bool = True, ort_ops: frozenset[str] = ORT_OPS,
                 graph: Graph | None = None) -> Execution:
    """Run `model` through the arena of `plan` (a Plan or its dict form) and compare with
    onnxruntime. Random inputs at the plan's dims (eqsat.plan.sizes.plan_feeds) unless `feeds`
    are given. Returns an Execution whose status is `passed`, `failed` (with the differing
    output, or the node whose output did not fit its planned shape) or `not possible`
    (onnxruntime cannot run the whole model, or a node runs alone under neither engine: the
    detail says which and why; onnxruntime's errors never propagate). `rtol`/`atol` None: DEFAULT_TOLERANCE, or
    HALF_TOLERANCE for a model with half-precision tensors."""
    from eqsat.plan.sizes import plan_feeds
    from eqsat.verification import run
    from eqsat.verification.isolate import probe

    d, dims, graph, order, tensors = _resolve_plan(model, plan, graph)
    if feeds is None:
        feeds = plan_feeds(model, dims)
    names = [o.name for o in model.graph.output]
    # onnxruntime on the whole model first: where it cannot run it, there is nothing to compare with
    # (and where it crashes, in a child process: a crash would end eqsat)
    if crash := probe([model], feeds, ["the model"]):
        return Execution("not possible", crash)
    t1 = time.perf_counter()
    try:
        expected = run(model, feeds, optimize=False)
    except Exception as e:  # noqa: BLE001 - e.g. an op onnxruntime lacks
        return Execution("not possible", f"onnxruntime cannot run the model: {_first_line(e)}")
    ref_seconds = time.perf_counter() - t1
    ran = _run_arena(model, graph, order, tensors, d, feeds, names, poison, ort_ops, ref_seconds)
    if isinstance(ran, Execution):
        return ran
    actual, seconds, engines = ran
    return _compare_outputs(graph, feeds, expected, actual, names, rtol, atol, seconds, ref_seconds, engines)
