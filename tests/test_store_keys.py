"""Tensor keys are content keys: the same values get one key however the tensor writes them."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.core.store import tensor_key

pytestmark = pytest.mark.no_egglog  # calls no egglog (tests/conftest.py's guard)


@pytest.mark.parametrize("dtype, code", [(np.float32, TensorProto.FLOAT), (np.int64, TensorProto.INT64),
                                         (np.float16, TensorProto.FLOAT16), (np.bool_, TensorProto.BOOL),
                                         (np.uint8, TensorProto.UINT8)])
def test_typed_fields_and_raw_data_of_equal_values_share_a_key(dtype, code):
    # a Constant in ONNX text holds float_data; a folded constant, raw_data: they were two keys,
    # so a folded value equal to a written constant did not join its e-class (rules/rotary.egg)
    arr = (np.arange(12).reshape(3, 4) % 3).astype(dtype)
    raw = numpy_helper.from_array(arr)
    typed = helper.make_tensor("c", code, arr.shape, arr.flatten().tolist())
    assert raw.raw_data and not typed.raw_data
    assert tensor_key(typed) == tensor_key(raw)
    assert tensor_key(numpy_helper.from_array(arr + 1 if dtype != np.bool_ else ~arr)) != tensor_key(raw)


def test_shape_and_type_are_part_of_the_key():
    a = np.zeros((2, 3), np.float32)
    assert tensor_key(numpy_helper.from_array(a)) != tensor_key(numpy_helper.from_array(a.reshape(3, 2)))
    assert tensor_key(numpy_helper.from_array(a)) != tensor_key(numpy_helper.from_array(a.view(np.int32)))


def test_a_malformed_tensor_still_gets_a_key():
    t = TensorProto(name="c", data_type=TensorProto.FLOAT, dims=[4], float_data=[1.0])  # 1 value for 4
    assert tensor_key(t).startswith("t")
