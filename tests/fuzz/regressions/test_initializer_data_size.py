"""Regression (issue 26, found by tests/fuzz model_file_is_clean): an initializer whose raw_data
holds more bytes than its dims and type need (the onnx checker only rejects too few) makes
`eqsat optimize` die with a traceback: `ValueError: cannot reshape array of size 2 into shape
()` (eqsat/encode.py constant_term, numpy_helper.to_array), or `ValueError: buffer size must
be a multiple of element size` for 10 bytes of float32. Expected: exit 2, one line naming the
tensor, nothing written."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from .helpers import add_model, assert_clean_error, only, run


@pytest.mark.parametrize("dims, raw", [([], np.array([1, 2], np.float32).tobytes()),  # 8 bytes for 1 float
                                       ([2], b"\x00" * 10),  # not a whole number of floats
                                       ([2], b"\x00" * 12)])  # one float too many
def test_raw_data_that_does_not_fit_its_dims_is_refused(capsys, tmp_path, dims, raw):
    c = h.make_tensor("c", TP.FLOAT, dims, [0.0] * int(np.prod(dims)))
    c.ClearField("float_data")
    c.raw_data = raw
    onnx.save(add_model(c), tmp_path / "m.onnx")
    rc, _, err = run(capsys, "optimize", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "-q")
    line = assert_clean_error(rc, err, 2)
    assert "'c'" in line
    only(tmp_path, "m.onnx")
