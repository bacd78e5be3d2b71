"""Found by tests/fuzz model_file_is_clean (issue 26): `eqsat plan` on a model whose
input is declared int32[2^40] (and whose shapes onnx's inference leaves open) runs the model
under onnxruntime to measure the shapes, with an input of 2^40 elements: it allocated until
the kernel's out-of-memory killer stopped it (24 GB resident after 100 s, exit 137). Under
a memory cap the allocation fails and the message blames the install ("onnxruntime is not
installed"). Now, like verification, it refuses up front when the inputs would take more
than half the machine's memory: exit 1, one line that says so, promptly.

The test runs eqsat under a 3 GiB address-space cap, so that a regression cannot take the
machine's memory."""

from __future__ import annotations

import resource
import subprocess
import sys

import onnx
import onnx.parser
import pytest

from .helpers import assert_clean_error

MODEL = '''<ir_version: 8, opset_import: ["": 17]>
g (int32[1099511627776] x) => (bool[?] y) {
  zero = Constant <value = int32 {0}> ()
  a = Add (zero, x)
  s = Shape (a)
  one = Constant <value = int64[1] {1}> ()
  c = Concat <axis = 0> (one, s)
  m = Constant <value = int64 {-1}> ()
  y = Greater (c, m)
}'''


def _cap():
    cap = 3 << 30
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def test_plan_refuses_inputs_larger_than_memory(tmp_path):
    onnx.save(onnx.parser.parse_model(MODEL), tmp_path / "m.onnx")
    try:
        p = subprocess.run([sys.executable, "-m", "eqsat", "plan", "m.onnx", "-q", "-o", "p.json"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120, preexec_fn=_cap)
    except subprocess.TimeoutExpired:
        pytest.fail("eqsat plan did not finish in 120 s")
    line = assert_clean_error(p.returncode, p.stderr, (1, 2))
    assert "memory" in line and "not installed" not in line, line
