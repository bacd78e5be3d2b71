"""Found by tests/fuzz optimize_keeps_outputs (issue 26): a wrong model. Where onnx's
shape inference is incomplete (here a Range whose length is computed) eqsat takes the
shapes of onnxruntime's symbolic shape inference, which gets a Slice with a negative step
and a clamped end wrong: Slice(x[3], starts=[1], ends=[-8], steps=[-1]) has 2 elements
(x[1], x[0]); onnxruntime's tool says 1, and onnx's own inference says 2. eqsat.optimize
then folds Shape(that slice) to [1] and the Range to [0]: the outputs differ (s = [1]
instead of [2]). `eqsat optimize` catches it in verification (exit 1, nothing written), so
a valid model could not be optimized. Now shapes where the two inferences disagree are
not trusted, nor what is computed from them, and the optimized model computes what the
original does."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser

from eqsat.pipeline import Options, optimize
from eqsat.verify import compare, run

from ..regressions.helpers import run as run_cli

MODEL = '''<ir_version: 8, opset_import: ["": 15]>
g (float[3] x) => (int64[1] s, int64[?] r) {
  st = Constant <value = int64[1] {1}> ()
  en = Constant <value = int64[1] {-8}> ()
  ax = Constant <value = int64[1] {0}> ()
  sp = Constant <value = int64[1] {-1}> ()
  y = Slice (x, st, en, ax, sp)
  s = Shape (y)
  zero = Constant <value = int64 {0}> ()
  one = Constant <value = int64 {1}> ()
  n = Gather (s, zero)
  r = Range (zero, n, one)
}'''


def test_a_reversed_clamped_slice_keeps_its_length():
    m = onnx.parser.parse_model(MODEL)
    onnx.checker.check_model(m, full_check=True)
    feeds = {"x": np.arange(1, 4, dtype=np.float32)}
    expected = run(m, feeds)
    assert expected["s"].tolist() == [2]
    got = run(optimize(m, Options()).model, feeds)
    assert not compare(expected, got), compare(expected, got)


def test_the_command_line_optimizes_it(capsys, tmp_path):
    onnx.save(onnx.parser.parse_model(MODEL), tmp_path / "m.onnx")
    rc, _, err = run_cli(capsys, "optimize", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "-q")
    assert rc == 0, err
