"""What a model must be for eqsat to read it, beyond what the onnx checker asks.

The checker accepts models that onnxruntime then refuses or that send numpy and onnx's
own tools into tracebacks or endless loops. `check_text` and `check_data` refuse them up front,
as InvalidModelError "`what`: where: why" (exit 2):

- text (names, op types, domains, doc strings, attribute names and string values) that is
  not UTF-8: protobuf then hands out bytes where every reader expects str;
- a tensor whose data does not fit its dims and type (the checker refuses too few bytes,
  not too many, nor a count that is not a whole number of elements), or whose element type
  is not one ONNX defines;
- a graph input or output of a tensor type whose element type is undefined or unknown;
- a node whose number of outputs contradicts an attribute that fixes it (Split's
  num_outputs): onnx's own shape inference aborts the process on it (SIGABRT).

Contract: it reads what it checks without copying a tensor's bytes, and external tensors
(already bound by eqsat.io.external) by the length their reference gives.
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from onnx import GraphProto, ModelProto, TensorProto

from eqsat.core.scopes import subgraphs
from eqsat.errors import InvalidModelError
from eqsat.io import external

ELEMENT_TYPES = frozenset(v for k, v in TensorProto.DataType.items() if k != "UNDEFINED")
_TYPED_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def check_text(model: ModelProto, what: str) -> None:
    """Raise InvalidModelError where the model holds text that is not UTF-8 (first, before
    anything reads a name)."""
    bad = _not_utf8(model)
    if bad:
        raise InvalidModelError(f"{what}: {bad} holds text that is not UTF-8 (ONNX strings are UTF-8); "
                                "re-export or repair the model")


def check_data(model: ModelProto, what: str) -> None:
    """Raise InvalidModelError for a tensor or a graph input or output the module refuses
    (after eqsat.io.external.bind)."""
    def refuse(where: str, why: str):
        raise InvalidModelError(f"{what}: {where}: {why}")

    for t, label, _ in external.tensors(model):
        why = _tensor_problem(t)
        if why:
            refuse(label, why)
    _check_io(model.graph, refuse)
    for g, kind in _graphs(model):
        _check_nodes(g.node, f"{kind} '{g.name}'", refuse)


def _graphs(model: ModelProto):
    """(graph or function, kind) for the main graph, every subgraph and every function."""
    todo = [(model.graph, "graph")] + [(f, "function") for f in model.functions]
    while todo:
        g, kind = todo.pop()
        yield g, kind
        todo.extend((sub, "graph") for n in g.node for a in n.attribute for sub in subgraphs(a))


def _check_nodes(nodes, where: str, refuse) -> None:
    for i, n in enumerate(nodes):
        if n.op_type == "Split" and n.domain in ("", "ai.onnx"):
            for a in n.attribute:
                if a.name == "num_outputs" and a.i != len(n.output):
                    refuse(f"node {i} (Split{' ' + repr(n.name) if n.name else ''}) of {where}",
                           f"{len(n.output)} outputs where its num_outputs is {a.i}; give it that many outputs")


def _not_utf8(msg, path: str = "the model") -> str | None:
    """Where a string field of `msg` (or of a message in it) holds bytes that are not UTF-8:
    protobuf returns them as bytes instead of str."""
    for f in msg.DESCRIPTOR.fields:
        if f.type == FieldDescriptor.TYPE_STRING:
            values = getattr(msg, f.name)
            values = values if _repeated(f) else [values]
            for v in values:
                if not isinstance(v, str):
                    return f"{path}.{f.name}"
        elif f.type == FieldDescriptor.TYPE_MESSAGE:
            if _repeated(f):
                for i, sub in enumerate(getattr(msg, f.name)):
                    if found := _not_utf8(sub, f"{path}.{f.name}[{i}]"):
                        return found
            elif msg.HasField(f.name) and (found := _not_utf8(getattr(msg, f.name), f"{path}.{f.name}")):
                return found
    return None


def _repeated(f: FieldDescriptor) -> bool:
    """`is_repeated` where protobuf has it (5.x and later dropped `label`), else the label."""
    flag = getattr(f, "is_repeated", None)
    return bool(flag) if flag is not None else f.label == FieldDescriptor.LABEL_REPEATED


def _tensor_problem(t: TensorProto) -> str | None:
    if t.data_type not in ELEMENT_TYPES:
        return f"element type {t.data_type} is not one ONNX defines"
    if any(d < 0 for d in t.dims):
        return f"dims {list(t.dims)} hold a negative size"
    numel = 1
    for d in t.dims:
        numel *= int(d)
    if external.is_external(t):
        have = external.external_info(t).get("length")
        want = external.content_bytes(_shape_only(t))
        if have is not None and t.data_type != TensorProto.STRING and int(have) != want:
            return f"its external data holds {have} bytes where dims {list(t.dims)} need {want}"
        return None
    if t.data_type == TensorProto.STRING:
        n = len(t.string_data)
        return None if n == numel else f"holds {n} strings where dims {list(t.dims)} need {numel}"
    if t.HasField("raw_data"):
        have, want = len(t.raw_data), external.content_bytes(t)
        if have != want:
            return f"holds {have} bytes of data where dims {list(t.dims)} of its type need {want}"
        return None
    counts = [len(getattr(t, name)) for name in _TYPED_FIELDS if len(getattr(t, name))]
    if not counts:
        return None if numel == 0 else f"holds no data where dims {list(t.dims)} need {numel} elements"
    per = 2 if t.data_type in (TensorProto.COMPLEX64, TensorProto.COMPLEX128) else 1
    want = {numel * per}
    if external.content_bytes(_shape_only(t)) < numel:  # under a byte an element: packed or not
        want |= {external.content_bytes(_shape_only(t)), (numel + 1) // 2}
    if len(counts) > 1 or counts[0] not in want:
        return f"holds {sum(counts)} values where dims {list(t.dims)} need {numel * per}"
    return None


def _shape_only(t: TensorProto) -> TensorProto:
    s = TensorProto()
    s.data_type = t.data_type
    s.dims.extend(t.dims)
    return s


def _check_io(g: GraphProto, refuse) -> None:
    for kind, values in (("input", g.input), ("output", g.output)):
        for vi in values:
            tp = vi.type
            if tp.HasField("tensor_type") and tp.tensor_type.elem_type not in ELEMENT_TYPES:
                elem = tp.tensor_type.elem_type
                refuse(f"graph {kind} '{vi.name}'", f"element type {elem} is "
                       + ("undefined" if elem == TensorProto.UNDEFINED else "not one ONNX defines")
                       + "; give it a tensor type of a real element type")
