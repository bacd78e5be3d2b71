"""Regression (issue 26, found by tests/fuzz external_data_is_clean): an external data offset or
length written with spaces (" 4", "4 ") is read by eqsat (Python's int() accepts them) while
onnxruntime refuses the model ("Failed to parse value"): `eqsat optimize` exits 0 and writes
a model whose weights were read at an offset no runtime reads (verification "not possible").
Expected: the offset and length parsed as onnxruntime parses them (decimal digits only), and
anything else refused: exit 2, one line naming the tensor, nothing written."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import numpy_helper

from .helpers import add_model, assert_clean_error, only, run


@pytest.mark.parametrize("key, value", [("offset", " 4"), ("offset", "4 "), ("length", " 8"), ("offset", "+4"),
                                        ("offset", "0x4"), ("offset", "٤")])
def test_offsets_and_lengths_are_decimal_digits(capsys, tmp_path, key, value):
    data = np.arange(4, dtype=np.float32)
    c = numpy_helper.from_array(data[:2], "c")
    c.ClearField("raw_data")
    c.data_location = TP.EXTERNAL
    entries = {"location": "w.bin", "offset": "4", "length": "8"}
    entries[key] = value
    for k, v in entries.items():
        c.external_data.add(key=k, value=v)
    (tmp_path / "w.bin").write_bytes(data.tobytes())
    onnx.save(add_model(c), tmp_path / "m.onnx")
    rc, _, err = run(capsys, "optimize", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "-q")
    line = assert_clean_error(rc, err, 2)
    assert "'c'" in line
    only(tmp_path, "m.onnx", "w.bin")
