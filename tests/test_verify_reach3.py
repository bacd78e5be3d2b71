"""Still more places where a wrong program could be written with exit 0: values verification's
runs did not draw (an overridable weight of 0), and what is written besides the model (the
memory plan). Each test crafts the place, has a user's unsound rule file rewrite it where a
rule is needed, and checks that `eqsat optimize` refuses the program or writes one that gives
the original's outputs on inputs that reach the place (under onnxruntime)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP
from onnx import helper as h

from .conftest import optimize_cli
from .test_verify_reach import _outputs
from .test_verify_reach2 import _with_default

# ---- an overridable weight of 0


def test_an_overridable_weight_of_zero_is_drawn(capsys, tmp_path):
    # w is overridable with the default [0.5, 1, 2]: the extra run scaled it by [0.5, 1.5]
    # with signs drawn, never 0, so a rule file's (x / w) * w -> x was written with exit 0
    m = _with_default([h.make_node("Div", ["x", "w"], ["d"]), h.make_node("Mul", ["d", "w"], ["y"])],
                      [h.make_tensor_value_info("x", TP.FLOAT, [3]), h.make_tensor_value_info("w", TP.FLOAT, [3])],
                      h.make_tensor_value_info("y", TP.FLOAT, [3]), np.array([0.5, 1.0, 2.0], np.float32))
    rules = ("(ruleset bad)\n; (x / w) * w -> x, unsound for w = 0\n"
             '(rewrite (Mul (Div x w) w) x :ruleset bad :name "bad-div-mul")\n')
    feeds = {"x": np.ones(3, np.float32), "w": np.array([0, 1, 2], np.float32)}
    assert np.isnan(_outputs(m, feeds)[0][0])
    rc, err, out = optimize_cli(capsys, tmp_path, m, rules=rules)
    assert rc == 1 and out is None, err
