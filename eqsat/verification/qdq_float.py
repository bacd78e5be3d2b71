"""QuantizeLinear and DequantizeLinear nodes written as the float ops of their ONNX definitions
(`as_float_ops`), for the QDQ allowance's reference run: onnxruntime fuses no QDQ group through a
node so written, and computes there what its own kernels compute for the node, a code apart at
most where x / scale lies within float32 rounding of a tie."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, helper, numpy_helper

# element types of codes each op is written for (float8 codes, blocked scales: not written)
DQ_CODES = frozenset({TensorProto.UINT8, TensorProto.INT8, TensorProto.UINT16, TensorProto.INT16, TensorProto.INT32,
                      TensorProto.UINT4, TensorProto.INT4})
Q_CODES = DQ_CODES - {TensorProto.INT32}
SCALE_TYPES = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16})
MIN_OPSET = 11  # Round


class NotWritable(Exception):
    """A node that as_float_ops cannot write as float ops; its message says why."""


def as_float_ops(model: ModelProto, outputs: set[str]) -> ModelProto:
    """A copy of `model` in which each QuantizeLinear or DequantizeLinear of the main graph that
    computes a value in `outputs` is replaced by the float ops of its definition, computing the
    same value: DequantizeLinear(x, s, z) as Cast(float)(Cast(int32)(x) - Cast(int32)(z)) * s,
    QuantizeLinear(x, s, z) as clamp(Round(x / s) + z) cast to the codes' type (rounded before
    the zero point is added, a NaN the lowest code, as onnxruntime's kernels do), scales and
    zero points along `axis` reshaped to broadcast there. NotWritable names a node it cannot write: float8 codes,
    blocked scales, a per-axis scale of a value of unknown rank, an opset below MIN_OPSET."""
    from eqsat.core.shapes import infer_types

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < MIN_OPSET:
        raise NotWritable(f"opset {opset} has no Round (opset {MIN_OPSET})")
    types, _ = infer_types(model)
    out = ModelProto()
    out.CopyFrom(model)
    nodes = []
    for n in model.graph.node:
        if n.domain in ("", "ai.onnx") and n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.output \
                and n.output[0] in outputs:
            writer = _quantize if n.op_type == "QuantizeLinear" else _dequantize
            nodes += writer(_Writer(n, types, out.graph))
        else:
            nodes.append(n)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


class _Writer:
    """The nodes and constants that replace one node `n`: names derived from its output."""

    def __init__(self, n, types: dict, graph) -> None:
        self.n, self.types, self.graph, self.k = n, types, graph, 0
        self.attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        self.nodes: list = []
        if self.attrs.get("block_size", 0):
            raise NotWritable(f"{n.op_type} '{self.label}' has blocked scales")

    @property
    def label(self) -> str:
        return self.n.name or self.n.output[0]

    def name(self) -> str:
        self.k += 1
        return f"{self.n.output[0]}__float_{self.k}"

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        out = out or self.name()
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def const(self, value: np.ndarray) -> str:
        name = self.name()
        self.graph.initializer.append(numpy_helper.from_array(value, name))
        return name

    def elem(self, value: str) -> int:
        t = self.types.get(value)
        return t.elem if t is not None else 0

    def along_axis(self, value: str, data: str) -> str:
        """`value` (a scale or zero point) shaped to broadcast against `data` along the node's
        axis: as it is where it is a scalar."""
        t = self.types.get(value)
        if t is None or t.dims is None:
            raise NotWritable(f"{self.n.op_type} '{self.label}': the rank of its scale is not known")
        if len(t.dims) == 0:
            return value
        d = self.types.get(data)
        if d is None or d.dims is None:
            raise NotWritable(f"{self.n.op_type} '{self.label}' has per-axis scales of a value of unknown rank")
        rank = len(d.dims)
        axis = int(self.attrs.get("axis", 1)) % max(rank, 1)
        shape = np.ones(rank, np.int64)
        shape[axis] = -1
        return self.op("Reshape", [value, self.const(shape)])

    def codes(self, present: str | None, allowed: frozenset, default: int) -> int:
        """The element type of the node's codes: its zero point's, else `default`."""
        elem = self.elem(present) if present else default
        if elem not in allowed:
            name = TensorProto.DataType.Name(elem) if elem else "unknown"
            raise NotWritable(f"{self.n.op_type} '{self.label}' has codes of type {name}")
        return elem


def _dequantize(w: _Writer) -> list:
    n = w.n
    x, s = n.input[0], n.input[1]
    z = n.input[2] if len(n.input) > 2 and n.input[2] else None
    w.codes(x, DQ_CODES, 0)
    out_elem = w.elem(s)
    if out_elem not in SCALE_TYPES:
        raise NotWritable(f"DequantizeLinear '{w.label}' has a scale of unknown or unwritable type")
    v = w.op("Cast", [x], to=TensorProto.INT32)
    if z is not None:
        v = w.op("Sub", [v, w.op("Cast", [w.along_axis(z, x)], to=TensorProto.INT32)])
    v = w.op("Cast", [v], to=TensorProto.FLOAT)
    scale = w.op("Cast", [w.along_axis(s, x)], to=TensorProto.FLOAT)
    if out_elem == TensorProto.FLOAT:
        w.op("Mul", [v, scale], n.output[0])
    else:
        w.op("Cast", [w.op("Mul", [v, scale])], n.output[0], to=out_elem)
    return w.nodes


def _quantize(w: _Writer) -> list:
    n = w.n
    x, s = n.input[0], n.input[1]
    z = n.input[2] if len(n.input) > 2 and n.input[2] else None
    elem = w.codes(z, Q_CODES, int(w.attrs.get("output_dtype", 0)) or TensorProto.UINT8)
    info = np.iinfo(onnx.helper.tensor_dtype_to_np_dtype(elem)) if elem not in (TensorProto.UINT4, TensorProto.INT4) \
        else None
    lo, hi = (info.min, info.max) if info is not None else ((0, 15) if elem == TensorProto.UINT4 else (-8, 7))
    scale = w.op("Cast", [w.along_axis(s, x)], to=TensorProto.FLOAT)
    xf = w.op("Cast", [x], to=TensorProto.FLOAT)
    v = w.op("Round", [w.op("Div", [xf, scale])])
    if z is not None:
        v = w.op("Add", [v, w.op("Cast", [w.along_axis(z, x)], to=TensorProto.FLOAT)])
    low = w.const(np.array(lo, np.float32))
    v = w.op("Max", [w.op("Min", [v, w.const(np.array(hi, np.float32))]), low])
    # a NaN input: onnxruntime's kernels give the codes' lowest value (-128 for int8), where
    # Cast(NaN) gives 0
    v = w.op("Where", [w.op("IsNaN", [xf]), low, v])
    w.op("Cast", [v], n.output[0], to=elem)
    return w.nodes
