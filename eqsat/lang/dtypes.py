"""ONNX element types as the op language's DType constructors."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

# DType constructor -> TensorProto enum. Any other enum value is (DTypeCode n).
CTOR_TO_CODE: dict[str, int] = {
    "F32": TensorProto.FLOAT,
    "U8": TensorProto.UINT8,
    "I8": TensorProto.INT8,
    "U16": TensorProto.UINT16,
    "I16": TensorProto.INT16,
    "I32": TensorProto.INT32,
    "I64": TensorProto.INT64,
    "Str": TensorProto.STRING,
    "Bool": TensorProto.BOOL,
    "F16": TensorProto.FLOAT16,
    "F64": TensorProto.DOUBLE,
    "U32": TensorProto.UINT32,
    "U64": TensorProto.UINT64,
    "C64": TensorProto.COMPLEX64,
    "C128": TensorProto.COMPLEX128,
    "BF16": TensorProto.BFLOAT16,
}
CODE_TO_CTOR: dict[int, str] = {v: k for k, v in CTOR_TO_CODE.items()}

FLOAT_CODES = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16})
INT_CODES = frozenset(
    {
        TensorProto.UINT8, TensorProto.INT8, TensorProto.UINT16, TensorProto.INT16,
        TensorProto.INT32, TensorProto.INT64, TensorProto.UINT32, TensorProto.UINT64,
        TensorProto.BOOL,
    }
)


def np_dtype(code: int) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(code))


def name(code: int) -> str:
    return TensorProto.DataType.Name(code) if code in TensorProto.DataType.values() else str(code)
