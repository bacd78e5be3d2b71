"""A value's element type and shape as eqsat reads them from an ONNX TypeProto (`type_of`):
eqsat.core.shapes re-exports them; eqsat.core.ort_symbolic reads them here, as shapes imports
it."""

from __future__ import annotations

from dataclasses import dataclass

from onnx import TypeProto


@dataclass(frozen=True)
class ValueType:
    elem: int  # TensorProto enum; 0 when unknown
    dims: tuple[int | str | None, ...] | None  # None: unknown rank; str: symbol; None dim: unknown


def type_of(tp: TypeProto) -> ValueType | None:
    if not tp.HasField("tensor_type"):
        return None
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return ValueType(tt.elem_type, None)
    dims: list[int | str | None] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return ValueType(tt.elem_type, tuple(dims))
