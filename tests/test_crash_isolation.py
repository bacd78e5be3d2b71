"""A crash of onnxruntime (SIGFPE on INT64_MIN / -1 in an integer Div) in any command that
runs models: one line, exit 1 or 2, nothing written, never the end of eqsat by a signal.
Verification's own case is in tests/test_verify.py."""

from __future__ import annotations

import subprocess
import sys

import onnx

from .conftest import parse_model

# y = a / (x * 0 - 1) with a = [INT64_MIN, 4]: onnxruntime dies of SIGFPE on any input
CRASH = """
    <ir_version: 8, opset_import: ["" : 18]>
    g (int64[2] x) => (int64[2] y) <int64[2] a = {-9223372036854775808, 4}> {
        zero = Constant <value = int64 {0}> ()
        one = Constant <value = int64 {1}> ()
        z = Mul(x, zero)
        m = Sub(z, one)
        y = Div(a, m)
    }"""


def _eqsat(tmp_path, *args: str) -> tuple[int, str]:
    src = tmp_path / "m.onnx"
    onnx.save(parse_model(CRASH), str(src))
    proc = subprocess.run([sys.executable, "-m", "eqsat", *args], capture_output=True, text=True, cwd=tmp_path)
    return proc.returncode, proc.stderr


def test_plan_execute(tmp_path):
    # eqsat died with signal 8 (exit 136)
    rc, err = _eqsat(tmp_path, "plan", "m.onnx", "--execute", "-o", "p.json")
    assert rc == 1 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        "eqsat: error: execution not possible, plan not written: onnxruntime crashed (signal 8, SIGFPE) "
        "running the model (plan without --execute to write it unproven)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_compare_costs(tmp_path):
    rc, err = _eqsat(tmp_path, "compare-costs", "m.onnx", "-q", "--samples", "1", "--runs", "1",
                     "--json", "c.json")
    assert rc == 2 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == ("eqsat: error: compare-costs times programs under onnxruntime: "
                                            "onnxruntime crashed (signal 8, SIGFPE) running the model")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_optimize(tmp_path):
    rc, err = _eqsat(tmp_path, "optimize", "m.onnx", "-q")
    assert rc == 1 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == ("eqsat: error: verification failed, nothing written: onnxruntime "
                                            "crashed (signal 8, SIGFPE) running the original model")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
