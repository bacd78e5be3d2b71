"""Helpers of the fuzzer's regression tests (here and in tests/fuzz/pending): run the `eqsat`
command line in-process and check the one-line error contract."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto as TP
from onnx import helper as h

from eqsat.cli import main


def run(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_clean_error(rc: int, err: str, code: int | tuple[int, ...] = 2) -> str:
    assert "Traceback" not in err, err
    assert rc in (code if isinstance(code, tuple) else (code,)), err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("eqsat: error:"), err
    assert sum(ln.startswith("eqsat: error:") for ln in lines) == 1, err
    return lines[-1]


def add_model(c: onnx.TensorProto, node_name: str = "n") -> onnx.ModelProto:
    """y = x + c, x float[2]."""
    g = h.make_graph([h.make_node("Add", ["x", c.name], ["y"], name=node_name)], "g",
                     [h.make_tensor_value_info("x", TP.FLOAT, [2])], [h.make_tensor_value_info("y", TP.FLOAT, [2])],
                     [c])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def only(folder: Path, *names: str) -> None:
    assert sorted(p.name for p in folder.iterdir()) == sorted(names)
