"""Regression (issue 26, found by tests/fuzz opaque_ops_kept): a model that already holds an
onnxruntime op (com.microsoft.FusedMatMul), optimized with `--target onnx`, fails with
`eqsat: error: extraction failed: root e-class Op-28 has no finite-cost term` (exit 1): a
clean exit, but the line names an internal e-class instead of what to do. Expected: the op
kept (it is the user's, not one eqsat adds) or rewritten into standard ops, with the same
outputs; or a line that names the op the target does not allow."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

from eqsat.verification import compare
from eqsat.verification import run as run_model

from .helpers import run


def test_target_onnx_names_the_contrib_op_it_cannot_keep(capsys, tmp_path):
    w = numpy_helper.from_array(np.ones((3, 4), np.float32), "w")
    g = h.make_graph([h.make_node("FusedMatMul", ["x", "w"], ["y"], domain="com.microsoft", alpha=0.5)], "g",
                     [h.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [2, 4])],
                     [w])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "m.onnx")
    rc, _, err = run(capsys, "optimize", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "-q", "--target", "onnx")
    assert "Traceback" not in err
    if rc == 0:  # the op kept (the target only keeps eqsat from adding such ops), or rewritten
        out = onnx.load(tmp_path / "o.onnx")
        feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
        assert not compare(run_model(m, feeds), run_model(out, feeds))
        return
    line = err.strip().splitlines()[-1]
    assert line.startswith("eqsat: error:") and "FusedMatMul" in line, line
