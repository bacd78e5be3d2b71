"""Regression (issue 26, found by tests/fuzz external_data_is_clean; a sibling of
regressions/test_external_data_numbers.py): an external data offset or length that is the
empty string is read as absent (offset 0, length: the rest of the file), while onnxruntime
refuses the model ("model format error"): `eqsat optimize` exits 0 and writes weights read
at an offset no runtime reads (verification "not possible"). Expected: exit 2, one line
naming the tensor, nothing written."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import numpy_helper

from .helpers import add_model, assert_clean_error, only, run


@pytest.mark.parametrize("key", ["offset", "length"])
def test_an_empty_offset_or_length_is_refused(capsys, tmp_path, key):
    data = np.arange(2, dtype=np.float32)
    c = numpy_helper.from_array(data, "c")
    c.ClearField("raw_data")
    c.data_location = TP.EXTERNAL
    entries = {"location": "w.bin", "offset": "0", "length": "8"}
    entries[key] = ""
    for k, v in entries.items():
        c.external_data.add(key=k, value=v)
    (tmp_path / "w.bin").write_bytes(data.tobytes())
    onnx.save(add_model(c), tmp_path / "m.onnx")
    rc, _, err = run(capsys, "optimize", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "-q")
    line = assert_clean_error(rc, err, 2)
    assert "'c'" in line
    only(tmp_path, "m.onnx", "w.bin")
