"""Element types and shapes of a model's values, from ONNX shape inference.

Dimensions are kept symbolic: a named dimension (`batch`) becomes an id below SYM_BASE
shared by every value that has it, an unknown dimension a fresh id of its own, so rules can
compare shapes without knowing sizes. The ids are far below any real value (a Reshape
target's -1 must never look like a symbol). `DimTable` maps the ids back to names.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx
from onnx import GraphProto, ModelProto

from eqsat.core import native, ort_symbolic
from eqsat.core.initializers import fixed_initializers, overridable_inputs
from eqsat.core.scopes import implicit_inputs
from eqsat.core.valuetype import ValueType, type_of  # noqa: F401 - imported from here too
from eqsat.errors import InvalidModelError
from eqsat.io.external import content_bytes
from eqsat.io.modelio import model_shell

SMALL_TENSOR_BYTES = 64 * 1024  # initializers above this lose their data in the inference copy
SYM_BASE = -(1 << 40)  # symbolic dimension ids are SYM_BASE, SYM_BASE - 1, ...


def is_symbol(d: int) -> bool:
    return d <= SYM_BASE


@dataclass
class DimTable:
    """Symbolic dimension names <-> negative ids."""

    by_name: dict[str, int] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    _next: int = SYM_BASE

    def _fresh(self) -> int:
        i = self._next
        self._next -= 1
        return i

    def id(self, dim: int | str | None) -> int:
        if isinstance(dim, int):
            return dim
        if dim is None:
            return self._fresh()
        if dim not in self.by_name:
            i = self._fresh()
            self.by_name[dim] = i
            self.names[i] = dim
        return self.by_name[dim]

    def encode(self, dims: tuple[int | str | None, ...]) -> list[int]:
        return [self.id(d) for d in dims]


def _skeleton(model: ModelProto, declared: bool = False) -> ModelProto:
    """A copy for shape inference without the data of large initializers (the data is
    only needed for small shape-like tensors), so a 2 GiB model does not get copied, without
    the defaults of overridable inputs (eqsat.core.initializers): inference must not take a value
    the caller may replace for a constant, and without the declared types of the graph's
    outputs and value_info (the outputs keep their names): those may contradict what the
    nodes compute (onnxruntime only warns), and onnx's inference keeps a declared size where
    it infers none, so Expand(x[1], s) declared float[1] had the shape [1] and became x.
    Only the graph's inputs keep their declared types: they are the contract with the caller.
    `declared` keeps the others too, for what is no rewrite's fact (the memory planner's sizes
    of a custom op's outputs)."""
    sk = model_shell(model)
    free = overridable_inputs(model)
    g = model.graph
    sg = sk.graph
    sg.name = g.name
    sg.input.extend(g.input)
    if declared:
        sg.output.extend(g.output)
        sg.value_info.extend(g.value_info)
    else:
        for o in g.output:
            sg.output.add().name = o.name
    sg.node.extend(_shape_proxy(n) or n for n in g.node)
    sg.sparse_initializer.extend(g.sparse_initializer)
    for t in g.initializer:
        if t.name in free:
            continue
        if content_bytes(t) <= SMALL_TENSOR_BYTES:
            sg.initializer.append(t)
        else:
            s = sg.initializer.add()
            s.name = t.name
            s.data_type = t.data_type
            s.dims.extend(t.dims)
            s.data_location = onnx.TensorProto.DEFAULT
    return sk


# onnxruntime's fused ops whose outputs have the shape and type of a standard op's on the
# same inputs and attributes, less the fusion's own attributes; neither onnx's inference nor
# onnxruntime's symbolic one knows them, and their declared types are no facts
_PROXIES = {"FusedConv": ("Conv", 3, {"activation", "activation_params"}),
            "FusedGemm": ("Gemm", 3, {"activation", "activation_alpha", "activation_beta", "activation_gamma"}),
            "FusedMatMul": ("MatMul", 2, {"alpha"}),
            # a rotation of each position's pairs: the input's shape and type
            "RotaryEmbedding": ("Identity", 1, {"interleaved", "is_packed_batching", "num_heads",
                                                "rotary_embedding_dim", "scale"})}


def _shape_proxy(n: onnx.NodeProto) -> onnx.NodeProto | None:
    """For shape inference only: the standard op computing a fused op's output shape
    (`_PROXIES`; a FusedMatMul only without its transposes), or None."""
    if n.domain != "com.microsoft" or n.op_type not in _PROXIES or len(n.output) != 1:
        return None
    op, inputs, dropped = _PROXIES[n.op_type]
    attrs = [a for a in n.attribute if a.name not in dropped]
    if op == "MatMul" and any(a.i for a in attrs):  # transA, transB, transBatchA, transBatchB
        return None
    proxy = onnx.NodeProto()
    proxy.op_type, proxy.name = op, n.name
    proxy.input.extend(n.input[:inputs])
    proxy.output.extend(n.output)
    proxy.attribute.extend(attrs)
    return proxy


def infer_types(model: ModelProto, declared: bool = False) -> tuple[dict[str, ValueType], str | None]:
    """Types of the main graph's values, as inference computes them from the graph's inputs
    (their declared types), its initializers and its nodes: rules take them as facts, so a
    type that the model only declares (for a graph output or in value_info) is not one, and
    a declaration that contradicts inference (another element type, rank or size) is named
    in the warning. Returns (types, warning): shape inference that fails leaves the types
    of the inputs and initializers only and says why in the warning. `declared` also takes
    the declared types where inference left a value less precise, for what is no fact (the
    stand-in values of nodes verification cannot run, eqsat.verification.standins: both models get them).

    onnxruntime's symbolic shape inference runs first when onnxruntime is installed: it
    relates symbolic dimensions across ops (the sequence length of an attention mask built
    from `Shape(input_ids)` is the sequence length, not a fresh unknown), which is what
    lets rules prove that fused ops get the shapes they need. Its `auto_merge` assumes that
    two symbolic dimensions that must broadcast together are equal, though either may be 1:
    a dimension it merged others into stands only where onnx's inference gives the value the
    same one (eqsat.core.ort_symbolic), so no rule takes the assumption for a fact. onnx's inference fills
    in whatever it leaves unknown, and is used alone when it fails."""
    warning = None
    sk = _skeleton(model)
    graphs: list[GraphProto] = []
    try:
        graphs.append(native.infer_shapes(sk, check_type=False, strict_mode=False, data_prop=True).graph)
    except InvalidModelError:
        raise
    except Exception as e:  # noqa: BLE001 - inference is best effort, the reason is reported
        warning = f"shape inference failed, shapes are partly unknown: {str(e).splitlines()[0]}"
    suspect: set[str] = set()
    if not graphs or _has_unknown_dims(graphs[0]):  # seconds on a large model: only when it helps
        if ort_symbolic.load() is None:
            why = ort_symbolic.unavailable
            warning = ((warning + "; ") if warning else "") + (
                f"onnxruntime's symbolic shape inference is unavailable ({why}): symbolic sizes "
                "stay unrelated, so less shape arithmetic folds and fewer fusions apply"
                + ("; pip install 'eqsat[cpu]' (or 'eqsat[gpu]')" if why == "onnxruntime is not installed"
                   else "; pip install sympy"))
        symbolic = ort_symbolic.infer_model(sk, graphs[0] if graphs else sk.graph)
        if symbolic is not None:
            if graphs:
                suspect = _downstream(model.graph, _disagreements(symbolic.graph, graphs[0]))
            graphs.insert(0, symbolic.graph)
            warning = None
    if not graphs:
        graphs.append(sk.graph)  # the inputs' declared types only
    types: dict[str, ValueType] = {}
    for graph in graphs:  # the first one that knows a value's shape wins
        for vi in [*graph.input, *graph.value_info, *graph.output]:
            t = type_of(vi.type)
            if t is None:
                continue
            old = types.get(vi.name)
            if old is None or (old.dims is None and t.dims is not None) or (not old.elem and t.elem):
                types[vi.name] = t
    # Where the two inferences give a value different sizes, one of them is wrong: neither
    # is trusted, for that value and every value computed from it.
    for name in suspect:
        if name in types:
            types[name] = ValueType(types[name].elem, None)
    contradicted = contradicted_declarations(model, types)
    # The inputs' declared types win where inference left them less precise.
    for vi in [*model.graph.input, *((*model.graph.output, *model.graph.value_info) if declared else ())]:
        t = type_of(vi.type)
        if t is not None and vi.name not in contradicted and (vi.name not in types or types[vi.name].dims is None):
            types[vi.name] = t
    for t in fixed_initializers(model).values():
        types.setdefault(t.name, ValueType(t.data_type, tuple(int(d) for d in t.dims)))
    if contradicted:
        lines = list(contradicted.values())
        shown = "; ".join(lines[:CONTRADICTIONS_SHOWN])
        if len(lines) > CONTRADICTIONS_SHOWN:
            shown += f"; and {len(lines) - CONTRADICTIONS_SHOWN} more"
        warning = ((warning + "; ") if warning else "") + (
            f"declared types contradict what the graph computes, the computed ones are used: {shown}")
    return types, warning


CONTRADICTIONS_SHOWN = 3


def contradicted_declarations(model: ModelProto, types: dict[str, ValueType]) -> dict[str, str]:
    """The declared types of graph outputs and value_info that inference contradicts: another
    element type, another rank, or another size at an axis where both give a number (a
    number declared where inference gives a symbol is no contradiction: the symbol may have
    that size; it is not a fact either). Name -> a line with the declared and computed type."""
    out: dict[str, str] = {}
    seen: set[str] = set()
    inputs = {vi.name for vi in model.graph.input}
    for vi in [*model.graph.output, *model.graph.value_info]:
        if vi.name in seen or vi.name in inputs:
            continue
        seen.add(vi.name)
        declared, computed = type_of(vi.type), types.get(vi.name)
        if declared is None or computed is None:
            continue
        elem = bool(declared.elem and computed.elem and declared.elem != computed.elem)
        dims = declared.dims is not None and computed.dims is not None and (
            len(declared.dims) != len(computed.dims) or any(
                isinstance(a, int) and isinstance(b, int) and a != b
                for a, b in zip(declared.dims, computed.dims, strict=True)))
        if elem or dims:
            out[vi.name] = f"{vi.name!r} declared {_typename(declared)}, computed {_typename(computed)}"
    return out


def _typename(t: ValueType) -> str:
    """float[2, n], int64[?], float (unknown rank): as ONNX's text format writes a type."""
    try:
        elem = onnx.helper.tensor_dtype_to_string(t.elem).split(".")[-1].lower() if t.elem else "?"
    except (KeyError, ValueError):
        elem = f"type {t.elem}"
    if t.dims is None:
        return elem
    return f"{elem}[{', '.join('?' if d is None else str(d) for d in t.dims)}]"


def _disagreements(a: GraphProto, b: GraphProto) -> set[str]:
    """Values to which two inferences give shapes of different ranks or different numbers
    at the same axis (onnxruntime's symbolic inference gives Slice(x[3], 1, -8, step -1) one
    element where it has two)."""
    def shapes(g: GraphProto) -> dict[str, tuple]:
        out = {}
        for vi in [*g.value_info, *g.output]:
            t = type_of(vi.type)
            if t is not None and t.dims is not None:
                out[vi.name] = t.dims
        return out

    sa, sb = shapes(a), shapes(b)
    return {name for name, da in sa.items() if (db := sb.get(name)) is not None and
            (len(da) != len(db) or any(isinstance(x, int) and isinstance(y, int) and x != y
                                       for x, y in zip(da, db, strict=True)))}


def _downstream(g: GraphProto, names: set[str]) -> set[str]:
    """`names` and every value of the main graph computed from them."""
    out = set(names)
    if not out:
        return out
    for n in g.node:  # stored in a topological order
        if any(i in out for i in [*n.input, *implicit_inputs(n)]):
            out.update(o for o in n.output if o)
    return out


def _has_unknown_dims(g: GraphProto) -> bool:
    """Whether onnx's inference left a dimension it could not relate to anything."""
    for vi in [*g.value_info, *g.output]:
        t = type_of(vi.type)
        if t is None:
            continue
        if t.dims is None or any(d is None or (isinstance(d, str) and d.startswith("unk__")) for d in t.dims):
            return True
    return False
