"""Regression (issue 26, found by tests/fuzz model_file_is_clean): a model whose node name is not
valid UTF-8 (protobuf parses it; the onnx checker accepts it) makes `eqsat optimize` die with
`UnicodeDecodeError` (eqsat/decode.py _emit, `node.name = ...`) and `eqsat show --svg` with
`TypeError: a bytes-like object is required, not 'str'`. Expected: a clean refusal (exit 2,
one line) or a correct optimization; never a traceback."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

from .helpers import add_model, run


def _model_bytes() -> bytes:
    m = add_model(numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "c"), node_name="QQQQ")
    return m.SerializeToString().replace(b"QQQQ", b"\xff\xfeQQ")


@pytest.mark.parametrize("command", ["optimize", "show", "plan", "diff"])
def test_a_name_that_is_not_utf8_gives_no_traceback(capsys, tmp_path, command):
    src = tmp_path / "m.onnx"
    src.write_bytes(_model_bytes())
    args = {"optimize": ["optimize", src, "-o", tmp_path / "o.onnx", "-q"],
            "show": ["show", src, "--svg", tmp_path / "g.svg"],
            "plan": ["plan", src, "-q"],
            "diff": ["diff", src, src]}[command]
    rc, _, err = run(capsys, *args)  # a traceback would raise here
    assert "Traceback" not in err
    assert rc in (0, 2), err
    if rc:
        assert err.strip().splitlines()[-1].startswith("eqsat: error:"), err
