"""Regression (issue 26, found by tests/fuzz egraph_file_is_clean): an e-graph file saved by
`eqsat optimize --save-egraph` with its "class_data" object removed makes
`eqsat extract E.json --cost-model roofline` die with `IndexError: list index out of range`
(extract/costs/roofline.py, _gemm_k); node-count extracts it. Expected: exit 2 with one line
saying what the file lacks (or an extraction that does not need it), never a traceback."""

from __future__ import annotations

import json

import onnx

from ..scenarios import mlp
from .helpers import run


def test_an_egraph_without_class_data_is_refused_by_every_cost_model(capsys, tmp_path):
    onnx.save(mlp(), tmp_path / "m.onnx")
    eg = tmp_path / "e.json"
    rc, _, err = run(capsys, "optimize", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "-q", "--save-egraph", eg,
                     "--layout", "nchw")
    assert rc == 0, err
    data = json.loads(eg.read_text())
    data.pop("class_data", None)
    eg.write_text(json.dumps(data))
    for model in ("node-count", "roofline"):
        rc, _, err = run(capsys, "extract", eg, "--cost-model", model)
        assert "Traceback" not in err
        assert rc in (0, 2), err
        if rc:
            assert err.strip().splitlines()[-1].startswith("eqsat: error:"), err
