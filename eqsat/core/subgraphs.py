"""Optimizing inside subgraphs: the branches of an If, the bodies of Loop and Scan, and any
other graph attribute of a node, nested ones included.

Each subgraph is optimized as a model of its own, with the caller's options: its inputs are
the subgraph's formal inputs, then the outer-scope values it reads (typed as they are in the
enclosing graph, names kept), its outputs are the subgraph's outputs exactly (the parent op
binds them by position). Subgraphs nested in it are optimized by the same call, one level
down. The optimized body replaces the original only when

- every outer value it reads has a known type in the enclosing graph,
- the optimization succeeds and changes something (fewer nodes or other ops),
- the optimized body, as a model of its own, gives the outputs of the body as it was under
  eqsat's verification (eqsat.verification.verify; where that is "not possible" the body is
  kept too): the whole model's verification runs a branch only where the inputs it draws
  lead there,
- the enclosing model with the new body passes the onnx checker (where the enclosing
  model is itself a body made into a model, which the checker may reject for what a
  subgraph may leave out, such as output types: the checker says nothing new; the model at
  the top is checked in full, its nested bodies included);

otherwise the body stays exactly as it was and the report says why. Values the new body
defines never take a name that the enclosing scopes define (the checker's single static
assignment across scopes): new names that collide are renamed.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

import onnx
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, TypeProto, helper

from eqsat.core import native
from eqsat.core.decode import all_names
from eqsat.core.encode import NotTyped, constant_node_tensor, graph_outer_refs
from eqsat.core.initializers import fixed_initializers
from eqsat.core.shapes import _skeleton
from eqsat.errors import INTERRUPTS, InvalidModelError, UsageError
from eqsat.io.modelio import model_shell

if TYPE_CHECKING:
    from eqsat.core.pipeline import Result
    from eqsat.settings import Settings

# How a body is optimized: eqsat.core.pipeline.optimize, passed in by it (it calls
# optimize_subgraphs first, so this module does not import it back).
Optimizer = Callable[[ModelProto, "Settings"], "Result"]


def has_subgraphs(model: ModelProto) -> bool:
    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for n in model.graph.node for a in n.attribute)


def optimize_subgraphs(model: ModelProto, opts: Settings, progress: Callable[[str], None] | None = None,
                       *, optimize: Optimizer) -> tuple[ModelProto, list[dict]]:
    """(model with its subgraphs optimized, report rows). Each body is optimized as a model
    of its own by `optimize` (eqsat.core.pipeline.optimize, which optimizes the bodies nested in it
    by calling this again). The input model is not changed;
    when no subgraph changes, it is returned itself. One row per subgraph, nested ones
    included: `path` (node name or #index, then `.attribute`, with `/` between nesting
    levels), `op`, `nodes_before`, and either `nodes_after` or `kept` with the reason.
    All subgraphs together get the saturation time limit (`opts.limits.time_limit`) once;
    those left when it is spent are kept. UsageError (bad options) propagates; any other
    failure keeps the body."""
    if not has_subgraphs(model):
        return model, []
    say = progress or (lambda _msg: None)
    rows: list[dict] = []
    if not opts.default_rules and not opts.rule_files:
        for path, node, _, g in _bodies(model.graph):
            rows.append(_row(path, node, g, kept="no rules to apply"))
        return model, rows

    types = _outer_types(model)
    consts = _outer_constants(model)
    base_error = _check_error(model)
    reserved = all_names(model.graph)  # a new value name must not collide with any of these
    new_nodes: dict[int, NodeProto] = {}
    extra_opsets: dict[str, int] = {}
    deadline = time.monotonic() + opts.limits.time_limit  # all subgraphs together, nested ones included
    for path, node, (k, attr_name, j), g in _bodies(model.graph):
        row = _row(path, node, g)
        rows.append(row)
        left = deadline - time.monotonic()
        if left <= 0:
            row["kept"] = (f"the time limit ({opts.limits.time_limit:g} s, --time-limit) was spent on earlier "
                           "subgraphs")
            continue
        sub_opts = dataclasses.replace(opts, save_egraph=None, explain=False, choice=None,
                                       limits=dataclasses.replace(opts.limits, time_limit=left))
        body, opsets, nested, why = _optimize_body(model, g, types, consts, sub_opts, optimize, node)
        nested = [{**r, "path": f"{path}/{r['path']}"} for r in nested]
        rows.extend(nested)
        if body is None:
            _keep(row, why, nested)
            say(f"subgraph {path}: kept unchanged ({why})")
            continue
        _avoid_names(body, g, reserved)
        candidate = NodeProto()
        candidate.CopyFrom(new_nodes.get(k, node))
        a = next(a for a in candidate.attribute if a.name == attr_name)
        (a.g if j is None else a.graphs[j]).CopyFrom(body)
        trial = {**new_nodes, k: candidate}
        error = _check_error(model, trial, {**extra_opsets, **opsets})
        if error is not None and error != base_error:
            _keep(row, f"the optimized body fails the onnx checker: {error}", nested)
            say(f"subgraph {path}: kept unchanged ({row['kept']})")
            continue
        new_nodes, extra_opsets = trial, {**extra_opsets, **opsets}
        reserved |= all_names(body)
        row["nodes_after"] = len(body.node)
        say(f"subgraph {path}: {row['nodes_before']} -> {row['nodes_after']} nodes")
    if not new_nodes:
        return model, rows
    return _replaced(model, new_nodes, extra_opsets), rows


def _keep(row: dict, why: str, nested: list[dict]) -> None:
    """Mark a body kept unchanged; what was optimized inside it is discarded with it."""
    row["kept"] = why
    for r in nested:
        if "nodes_after" in r:
            del r["nodes_after"]
            r["kept"] = "the enclosing body was kept unchanged"


# ---- finding subgraphs


def _bodies(g: GraphProto):
    """(path, node, (node index, attribute name, index in GRAPHS or None), graph) for
    every subgraph attribute of g's nodes (not nested ones: those are the bodies' own)."""
    for k, node in enumerate(g.node):
        label = node.name or f"#{k}"
        for a in node.attribute:
            if a.type == AttributeProto.GRAPH:
                yield f"{label}.{a.name}", node, (k, a.name, None), a.g
            elif a.type == AttributeProto.GRAPHS:
                for j, sub in enumerate(a.graphs):
                    yield f"{label}.{a.name}[{j}]", node, (k, a.name, j), sub


def _row(path: str, node: NodeProto, g: GraphProto, **extra) -> dict:
    return {"path": path, "op": node.op_type, "nodes_before": len(g.node), **extra}


# ---- types of outer values


def _outer_types(model: ModelProto) -> dict[str, TypeProto]:
    """Types of the main graph's values, from onnx's shape inference over the graph's
    inputs and nodes (eqsat.core.shapes._skeleton: declared output and value_info types are no
    facts); where it gives none, a declared one without its shape: a body becomes a model
    with these values as inputs, which needs an element type, and a declared size that the
    value does not have would be a fact inside the body (Expand(z, s) to z's shape as z).
    Dimensions that inference made up (unk__N) become unknown: nothing proves them equal."""
    types: dict[str, TypeProto] = {}
    g = model.graph
    try:
        inferred = native.infer_shapes(_skeleton(model), check_type=False, strict_mode=False).graph
        for vi in [*inferred.input, *inferred.value_info, *inferred.output]:
            types.setdefault(vi.name, vi.type)
    except InvalidModelError:
        raise
    except Exception:  # noqa: BLE001 - inference is best effort; the declared types remain
        pass
    inputs = {vi.name for vi in g.input}
    for vi in [*g.input, *g.output, *g.value_info]:
        if _known(vi.type) and not _known(types.get(vi.name)):
            types[vi.name] = vi.type if vi.name in inputs else _without_shape(vi.type)
    for t in g.initializer:
        types.setdefault(t.name, helper.make_tensor_type_proto(t.data_type, list(t.dims)))
    out: dict[str, TypeProto] = {}
    for name, tp in types.items():
        tp2 = TypeProto()
        tp2.CopyFrom(tp)
        _forget_made_up_dims(tp2)
        out[name] = tp2
    return out


def _known(tp: TypeProto | None) -> bool:
    """Whether a type says at least what kind of value it is, and for tensors their element type."""
    if tp is None:
        return False
    kind = tp.WhichOneof("value")
    if kind is None:
        return False
    if kind == "tensor_type":
        return tp.tensor_type.elem_type != 0
    if kind == "sequence_type":
        return _known(tp.sequence_type.elem_type)
    if kind == "optional_type":
        return _known(tp.optional_type.elem_type)
    return True


def _without_shape(tp: TypeProto) -> TypeProto:
    """A copy of `tp` whose tensors have no shape (unknown rank)."""
    out = TypeProto()
    out.CopyFrom(tp)
    t = out
    while True:
        kind = t.WhichOneof("value")
        if kind == "tensor_type":
            t.tensor_type.ClearField("shape")
            return out
        if kind == "sequence_type":
            t = t.sequence_type.elem_type
        elif kind == "optional_type":
            t = t.optional_type.elem_type
        else:
            return out


def _forget_made_up_dims(tp: TypeProto) -> None:
    kind = tp.WhichOneof("value")
    if kind == "tensor_type" and tp.tensor_type.HasField("shape"):
        for d in tp.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param.startswith("unk__"):
                d.ClearField("dim_param")
    elif kind == "sequence_type":
        _forget_made_up_dims(tp.sequence_type.elem_type)
    elif kind == "optional_type":
        _forget_made_up_dims(tp.optional_type.elem_type)


# ---- one body


def _outer_constants(model: ModelProto) -> dict[str, TensorProto]:
    """The main graph's constants by name: initializers that cannot be overridden (not
    graph inputs, from IR version 4 on) and outputs of Constant nodes."""
    g = model.graph
    out = fixed_initializers(model)
    for n in g.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and n.output and n.output[0]:
            try:
                t = constant_node_tensor(n)
            except NotTyped:
                t = None
            if t is not None:
                out[n.output[0]] = t
    return out


def _optimize_body(model: ModelProto, g: GraphProto, types: dict[str, TypeProto], consts: dict[str, TensorProto],
                   opts: Settings, optimize: Optimizer, node: NodeProto | None = None
                   ) -> tuple[GraphProto | None, dict[str, int], list[dict], str]:
    """(new body or None, opsets it needs beyond the model's, nested report rows, reason
    when None). Outer values that are constants enter the standalone model as initializers,
    so that rules and folding see them; the new body drops them again (it reads them from
    the enclosing graph, as before) unless optimization changed them into new constants."""
    refs = graph_outer_refs(g)
    unknown = [r for r in refs if r not in consts and not _known(types.get(r))]
    if unknown:
        return None, {}, [], (f"the type of outer value(s) {', '.join(map(repr, unknown))} is unknown in the "
                              "enclosing graph; declare it in the graph's value_info to optimize this body")
    if len(g.sparse_initializer):
        return None, {}, [], "the body has sparse initializers"
    const_refs = {r: consts[r] for r in refs if r in consts}
    standalone = _standalone(model, g, refs, types, const_refs, node)
    try:
        res = optimize(standalone, opts)
    except UsageError:
        raise
    except INTERRUPTS:
        raise
    except BaseException as e:  # noqa: BLE001 - egglog panics are BaseException; the body is kept
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return None, {}, [], f"optimizing the body failed: {first}"
    nested = res.report.get("subgraphs", [])
    out = res.model.graph
    if len(out.node) == len(g.node) and _histogram(out) == _histogram(g) and not any(
            "nodes_after" in r for r in nested):
        return None, {}, nested, "no improvement found (the same ops)"
    wrong = _computes_otherwise(standalone, res, opts)
    if wrong is not None:
        return None, {}, nested, wrong
    body = GraphProto()
    body.name = g.name
    body.doc_string = g.doc_string
    body.input.extend(g.input)  # the formal inputs, exactly; the outer values stay outer
    body.output.extend(g.output)
    body.node.extend(n for n in out.node  # before IR 4, constants come back as Constant nodes
                     if not (n.op_type == "Constant" and list(n.output) and n.output[0] in const_refs))
    body.initializer.extend(t for t in out.initializer if t.name not in const_refs)
    io = {i.name for i in body.input} | {o.name for o in body.output}
    body.value_info.extend(vi for vi in out.value_info if vi.name not in io)
    body.metadata_props.extend(g.metadata_props)
    names = all_names(body)
    body.quantization_annotation.extend(q for q in g.quantization_annotation if q.tensor_name in names)
    have = {("" if o.domain == "ai.onnx" else o.domain) for o in model.opset_import}
    opsets = {o.domain: o.version for o in res.model.opset_import if o.domain not in have and o.domain != "ai.onnx"}
    return body, opsets, nested, ""


def _computes_otherwise(standalone: ModelProto, res: Result, opts: Settings) -> str | None:
    """Where the optimized body, as a model of its own, gives other outputs than the body as
    it was on the inputs verification draws (eqsat.verification.verify, in a child process),
    or where that verification is not possible: why the body is kept, else None.
    Verification of the whole model runs a branch or a body only where its inputs lead
    there: an If branch taken where max(x) > 10 never ran on standard normal inputs, so a
    wrong rewrite of it was written; and one taken where an integer input is 5000 that
    reshaped an outer value to an outer shape (which, as a size input of the body's own
    model, no draw fitted) was written unverified when "not possible" kept the optimized body."""
    from eqsat.verification import verify

    try:
        v = verify(standalone, res.model, dims=opts.dims, random_pairs=res.random_pairs, isolated=True)
    except INTERRUPTS:
        raise
    except Exception as e:  # noqa: BLE001 - verification itself stopped: the body is kept
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return f"the optimized body computes otherwise: its verification stopped: {first}"
    if v.status == "not possible":
        return f"the optimized body cannot be verified as a model of its own: {v.detail}"
    return f"the optimized body computes otherwise: {v.detail}" if v.status == "failed" else None


def _standalone(model: ModelProto, g: GraphProto, refs: list[str], types: dict[str, TypeProto],
                const_refs: dict[str, TensorProto], node: NodeProto | None = None) -> ModelProto:
    """The body as a model: formal inputs (their types as `_formal_types` gives them), then
    the outer values it reads as inputs (or as initializers where they are constants), its
    own outputs, nodes and initializers."""
    formal, carried = _formal_types(g, node, types)
    while True:
        m = _build(model, g, formal, refs, types, const_refs)
        if not carried:
            return m
        # a carried value keeps its initial shape where inference gives its next value that
        # shape; each one dropped may change the others
        from eqsat.core.shapes import infer_types, type_of

        try:
            inferred, _ = infer_types(m)
        except InvalidModelError:
            inferred = {}
        drop = [(i, o) for i, o in carried
                if not _same_dims(type_of(formal[i]), inferred.get(g.output[o].name) if o < len(g.output) else None)]
        if not drop:
            return m
        for i, o in drop:
            formal[i] = _without_shape(formal[i])
            carried.remove((i, o))


def _build(model: ModelProto, g: GraphProto, formal: list[TypeProto], refs: list[str], types: dict[str, TypeProto],
           const_refs: dict[str, TensorProto]) -> ModelProto:
    m = model_shell(model)
    sg = m.graph
    sg.name = g.name
    sg.input.extend(helper.make_value_info(vi.name, tp) for vi, tp in zip(g.input, formal, strict=True))
    sg.input.extend(helper.make_value_info(r, types[r]) for r in refs if r not in const_refs)
    sg.output.extend(g.output)
    sg.node.extend(g.node)
    sg.initializer.extend(g.initializer)
    for r, t in const_refs.items():
        c = sg.initializer.add()
        c.CopyFrom(t)
        c.name = r
    sg.value_info.extend(g.value_info)
    return m


def _formal_types(g: GraphProto, node: NodeProto | None, types: dict[str, TypeProto]
                  ) -> tuple[list[TypeProto], list[tuple[int, int]]]:
    """The types of a body's formal inputs as facts, and the (formal input, body output)
    pairs of its carried values. A formal input keeps its declared element type, and a shape
    only where the enclosing node's inputs give it, not the body's declaration, which nothing
    checks (a Loop's carried value may grow each iteration: declared float[1], Shape(v) was
    folded to [1] where the second iteration has [2]):
    - a Scan's (opset >= 9) scanned input: the outer input's shape less its scan axis;
    - a Loop's carried value or a Scan's state: the initial value's shape, kept by
      `_standalone` only where inference gives the body's next value that same shape.
    Any other formal input (a Loop's iteration number and condition, the inputs of a custom
    op's body; an If has none) has no shape."""
    out = [_without_shape(vi.type) for vi in g.input]
    carried: list[tuple[int, int]] = []
    if node is None or node.domain not in ("", "ai.onnx") or node.op_type not in ("Loop", "Scan"):
        return out, carried

    def outer(name: str, drop_axis: int | None = None) -> TypeProto | None:
        tp = types.get(name) if name else None
        if tp is None or tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
            return None
        dims = list(tp.tensor_type.shape.dim)
        if drop_axis is not None:
            axis = drop_axis + len(dims) if drop_axis < 0 else drop_axis
            if not 0 <= axis < len(dims):
                return None
            del dims[axis]
        t = TypeProto()
        t.tensor_type.elem_type = tp.tensor_type.elem_type
        t.tensor_type.shape.dim.extend(dims)
        return t

    attrs = {a.name: a for a in node.attribute}
    if node.op_type == "Loop":
        for j in range(len(g.input) - 2):
            if 2 + j < len(node.input) and (t := outer(node.input[2 + j])) is not None:
                out[2 + j] = t
                carried.append((2 + j, 1 + j))
    elif "num_scan_inputs" in attrs and len(node.input) == len(g.input):  # not Scan-8 (sequence_lens first)
        m = attrs["num_scan_inputs"].i
        n = len(g.input) - m
        axes = list(attrs["scan_input_axes"].ints) if "scan_input_axes" in attrs else []
        for i in range(m):
            if (t := outer(node.input[n + i], axes[i] if i < len(axes) else 0)) is not None:
                out[n + i] = t
        for j in range(n):
            if (t := outer(node.input[j])) is not None:
                out[j] = t
                carried.append((j, j))
    return out, carried


def _same_dims(a, b) -> bool:
    """Whether two ValueTypes have one shape: the same number or named symbol at every axis."""
    return (a is not None and b is not None and a.dims is not None and b.dims is not None and len(a.dims) == len(b.dims)
            and all(x is not None and x == y for x, y in zip(a.dims, b.dims, strict=True)))


def _histogram(g: GraphProto) -> Counter:
    return Counter((n.domain, n.op_type) for n in g.node)


# ---- names


def _avoid_names(body: GraphProto, orig: GraphProto, reserved: set[str]) -> None:
    """Rename, in place, the values the new body (or a subgraph in it) defines under a name
    that the original body did not have and that is reserved (defined elsewhere in the
    model): ONNX wants one definition per name across nested scopes."""
    old = all_names(orig)
    clash = sorted(n for n in _defined(body) if n in reserved and n not in old)
    if not clash:
        return
    taken = reserved | all_names(body)
    mapping: dict[str, str] = {}
    for name in clash:
        k = 0
        while f"{name}_s{k}" in taken:
            k += 1
        mapping[name] = f"{name}_s{k}"
        taken.add(mapping[name])
    _rename_all(body, mapping)


def _defined(g: GraphProto, out: set[str] | None = None) -> set[str]:
    out = set() if out is None else out
    out.update(t.name for t in g.initializer)
    for n in g.node:
        out.update(o for o in n.output if o)
        for a in n.attribute:
            for sub in ([a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)):
                out.update(i.name for i in sub.input)
                _defined(sub, out)
    return out


def _rename_all(g: GraphProto, m: dict[str, str]) -> None:
    """Every occurrence of the names in `m`, in g and its subgraphs (names are unique
    across scopes, so each one is the same value or a sibling scope's own)."""
    for seq in (g.input, g.output, g.value_info, g.initializer):
        for x in seq:
            if x.name in m:
                x.name = m[x.name]
    for n in g.node:
        for i, name in enumerate(n.input):
            if name in m:
                n.input[i] = m[name]
        for i, name in enumerate(n.output):
            if name in m:
                n.output[i] = m[name]
        for a in n.attribute:
            for sub in ([a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)):
                _rename_all(sub, m)


# ---- the enclosing model


def _light(model: ModelProto, nodes: dict[int, NodeProto] | None = None,
           opsets: dict[str, int] | None = None) -> ModelProto:
    """A copy for the checker: initializers become typed graph inputs (no weights copied),
    nodes replaced by index from `nodes`, opset imports added from `opsets`."""
    src = model.graph
    m = model_shell(model, opsets)
    g = m.graph
    g.name = src.name
    g.input.extend(src.input)
    inputs = {i.name for i in src.input}
    g.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                   for t in src.initializer if t.name not in inputs)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    g.sparse_initializer.extend(src.sparse_initializer)
    nodes = nodes or {}
    g.node.extend(nodes.get(k, n) for k, n in enumerate(src.node))
    return m


def _check_error(model: ModelProto, nodes: dict[int, NodeProto] | None = None,
                 opsets: dict[str, int] | None = None) -> str | None:
    light = _light(model, nodes, opsets)
    if model.ir_version < 4:
        light.ir_version = 4  # initializers became inputs: the pre-4 rule that they be both is met anyway
    try:
        onnx.checker.check_model(light)
    except onnx.checker.ValidationError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        return lines[0] if lines else "ValidationError"
    return None


def _replaced(model: ModelProto, nodes: dict[int, NodeProto], opsets: dict[str, int]) -> ModelProto:
    """A copy of `model` with nodes replaced by index, built field by field (each tensor is
    copied on its own: protobuf cannot copy more than 2 GiB at once)."""
    m = model_shell(model, opsets, full=True)
    m.configuration.extend(model.configuration)
    src, g = model.graph, m.graph
    g.name = src.name
    g.doc_string = src.doc_string
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    g.sparse_initializer.extend(src.sparse_initializer)
    g.metadata_props.extend(src.metadata_props)
    g.quantization_annotation.extend(src.quantization_annotation)
    for t in src.initializer:
        g.initializer.add().CopyFrom(t)
    g.node.extend(nodes.get(k, n) for k, n in enumerate(src.node))
    return m
