"""Content-addressed stores for what never enters the e-graph: tensors, subgraphs and
attributes that egglog cannot hold. Terms refer to entries by key; equal content gets
equal keys, so duplicated initializers become one e-class."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
from onnx import AttributeProto, GraphProto, TensorProto, numpy_helper

from eqsat.io import external

# element types whose raw_data is the little-endian array of numpy's dtype, element by element
_RAW_LAYOUT = {
    TensorProto.FLOAT: "<f4", TensorProto.DOUBLE: "<f8", TensorProto.FLOAT16: "<f2",
    TensorProto.INT8: "i1", TensorProto.UINT8: "u1", TensorProto.INT16: "<i2", TensorProto.UINT16: "<u2",
    TensorProto.INT32: "<i4", TensorProto.UINT32: "<u4", TensorProto.INT64: "<i8", TensorProto.UINT64: "<u8",
    TensorProto.BOOL: "?",
}


def _as_raw(t: TensorProto) -> bytes | None:
    """The bytes raw_data would hold for a tensor written in float_data, int64_data, ... (a
    Constant node in ONNX text, some exporters), so that it gets the key of the same values
    written as raw_data (a folded constant: numpy_helper writes raw_data); None for other
    element types and for a tensor whose fields do not hold its dims' values."""
    layout = _RAW_LAYOUT.get(t.data_type)
    if layout is None:
        return None
    try:
        return np.ascontiguousarray(numpy_helper.to_array(t), layout).tobytes()
    except Exception:  # noqa: BLE001 - a malformed tensor: keyed by its serialization
        return None


def tensor_key(t: TensorProto) -> str:
    """Equal content, equal key. A tensor whose data stays in an external file is keyed by
    where its bytes are (reading gigabytes to hash them would cost more than it saves)."""
    h = hashlib.sha256()
    h.update(f"{t.data_type}:{tuple(t.dims)}:".encode())
    if external.is_external(t):
        h.update(repr(sorted(external.external_info(t).items())).encode())
    elif raw := t.raw_data:  # read once: each read of raw_data copies the bytes
        h.update(raw)
    elif (data := _as_raw(t)) is not None:
        h.update(data)
    else:
        c = TensorProto()
        c.CopyFrom(t)
        c.name = ""
        c.doc_string = ""
        h.update(c.SerializeToString(deterministic=True))
    return "t" + h.hexdigest()[:32]


# The fields of a TensorProto that make up its value; the others (name, doc_string,
# segment, metadata_props) only describe it.
_CONTENT_FIELDS = frozenset({
    "dims", "data_type", "float_data", "int32_data", "string_data", "int64_data", "raw_data",
    "external_data", "data_location", "double_data", "uint64_data",
})


def tensor_envelope(t: TensorProto) -> bytes:
    """The fields of `t` that are not its value (name, doc_string, ...), serialized
    deterministically; b"" when it has none. Any field a newer onnx adds counts here."""
    e = TensorProto()
    e.CopyFrom(t)
    for f in _CONTENT_FIELDS:
        e.ClearField(f)
    return e.SerializeToString(deterministic=True)


@dataclass
class TensorStore:
    """key -> TensorProto. Keys from `add` are content keys: equal values share one key
    (the first name a tensor was seen under is kept as its name), so equal constants become
    one e-class. Keys from `add_exact` also cover name, doc_string and the other describing
    fields, and `proto` returns such a tensor exactly as it was added."""

    protos: dict[str, TensorProto] = field(default_factory=dict)
    _arrays: dict[str, np.ndarray] = field(default_factory=dict)

    def add(self, t: TensorProto) -> str:
        key = tensor_key(t)
        if key not in self.protos:
            self.protos[key] = t
        return key

    def add_exact(self, t: TensorProto) -> str:
        """A key for `t` whose `proto` is `t` itself, every field included: for tensors
        that are attributes of carried ops, which must come back as they were."""
        env = tensor_envelope(t)
        key = "x" + tensor_key(t)[1:] + hashlib.sha256(env).hexdigest()[:16]
        self.protos.setdefault(key, t)
        return key

    @staticmethod
    def is_exact(key: str) -> bool:
        """Whether `key` came from `add_exact` (its tensor keeps its name)."""
        return key.startswith("x")

    def add_array(self, arr: np.ndarray, name: str = "") -> str:
        return self.add(numpy_helper.from_array(np.asarray(arr), name))

    def proto(self, key: str) -> TensorProto:
        return self.protos[key]

    def array(self, key: str) -> np.ndarray:
        a = self._arrays.get(key)
        if a is None:
            t = self.protos[key]
            a = external.read(t) if external.is_external(t) else numpy_helper.to_array(t)
            self._arrays[key] = a
        return a

    def nbytes(self, key: str) -> int:
        """Bytes of the tensor's data as stored (an estimate for non-raw encodings)."""
        return external.content_bytes(self.protos[key])


@dataclass
class Subgraph:
    graph: GraphProto
    captures: list[str]  # outer-scope names the graph reads, in order of first use


@dataclass
class ProtoStore:
    """Subgraphs and raw attributes, by content key."""

    graphs: dict[str, Subgraph] = field(default_factory=dict)
    attrs: dict[str, AttributeProto] = field(default_factory=dict)

    def add_graph(self, g: GraphProto, captures: list[str]) -> str:
        key = "g" + hashlib.sha256(g.SerializeToString(deterministic=True)).hexdigest()[:32]
        self.graphs.setdefault(key, Subgraph(g, list(captures)))
        return key

    def add_attr(self, a: AttributeProto) -> str:
        key = "a" + hashlib.sha256(a.SerializeToString(deterministic=True)).hexdigest()[:32]
        self.attrs.setdefault(key, a)
        return key
