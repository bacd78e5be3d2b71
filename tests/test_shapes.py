"""Shape inference (eqsat.shapes) leaves nothing behind in the working directory."""

from __future__ import annotations

import os
import warnings

import pytest

from eqsat.shapes import infer_types


@pytest.mark.slow  # generating the onnx node test cases takes ~15 s
def test_incomplete_symbolic_inference_writes_no_temp_files(tmp_path, monkeypatch):
    # onnxruntime's symbolic shape inference saves sym_shape_infer_temp.onnx (with external
    # data files) into the working directory when it cannot infer every shape: this
    # generated onnx node test case is one such model.
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        case = next(c for c in collect_testcases("Attention") if c.name == "test_attention_4d_expanded")
    monkeypatch.chdir(tmp_path)
    types, _ = infer_types(case.model)
    assert types  # inference still gave the declared and inferred types
    assert sorted(os.listdir(tmp_path)) == []
